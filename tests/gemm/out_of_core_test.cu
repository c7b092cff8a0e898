// The out-of-core GEMM on the device: host A, B, C in every layout, pageable and page-locked, with
// budgets small enough to force at least 9 blocks (and, in one suite, chunks of k), β = 0 over
// NaN-poisoned C and β ≠ 0, every element type once, against the double-precision host reference
// with the bound of gemm_check.hpp and against the in-core GEMM of the same product; cancellation
// (the blocks written are exact, the rest untouched), a failing progress callback (the report of
// what was written), a budget below one block (refused, the minimum stated), run_tasks's one
// budget check (one byte short of the plan's slots + reserved bytes refused before any work,
// exactly enough runs, with a forced split-K's workspace in the slots), k = 0, two GPUs;
// MN-major operands on the tensor-core paths (transposed once per panel as they land) and the
// transpose kernel itself.
#include <spillway/core/device_buffer.hpp>
#include <spillway/core/host_registration.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/gemm.cuh>
#include <spillway/pipeline/plan.hpp>

#include <support/gpu_test.hpp>

#include "gemm_check.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace spillway::gemm;
using namespace spillway::gemm::test;
using spillway::index_t;

template <class T>
constexpr bool is_int_v = std::is_same_v<T, std::int8_t>;

struct ooc_case {
  index_t m = 700, n = 650, k = 300;
  layout la = layout::row_major, lb = layout::col_major, lc = layout::row_major;
  bool beta_zero = true;
  bool pinned = false;   // page-lock A, B and C (host_registration) so they are copied by DMA
  int min_blocks = 9;    // the budget is chosen so the plan has at least this many blocks
  bool split_k = false;  // the budget is small enough that k is cut into chunks
  bool bands = false;    // the budget is small enough that A's panels do not all fit (B re-streamed)
  std::vector<int> devices;
  ooc_copy_out c_out = ooc_copy_out::direct;
  std::size_t c_min_line = 0;       // ooc_options::c_min_line_bytes (C blocks of several B panels)
  double compute_seconds = 0;       // ooc_options::compute_seconds: the plan weighs wide blocks by its bound
  double d2h_short = -1;            // ooc_options::rates.d2h_short when >= 0
  std::size_t scatter_threads = 0;  // ooc_options::scatter_threads (staged C blocks)
  bool scatter_streaming = true;    // ooc_options::scatter_streaming
  std::size_t raw_piece_bytes = 0;  // ooc_options::raw_piece_bytes (MN-major panels land in pieces)
  // ooc_options::lock: pageable cases stay pageable (the staged paths are what they test);
  // PageableOperandsPageLockedForTheCall covers the job's own page-locking.
  spillway::page_lock lock = spillway::page_lock::never;
};

std::string describe(const ooc_case& c, const gemm_options& o) {
  auto l = [](layout x) { return x == layout::row_major ? "row" : "col"; };
  return std::string(to_string(o.path)) + (o.math == math_mode::tf32 ? "/tf32" : "") + " " +
         std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) + " A " + l(c.la) +
         " B " + l(c.lb) + " C " + l(c.lc) + (c.beta_zero ? " beta=0 over NaN" : " beta!=0") +
         (c.pinned ? " page-locked" : " pageable") + (c.split_k ? " k chunks" : "") +
         (c.bands ? " A in bands" : "") +
         (c.c_min_line > 0 ? " C lines >= " + std::to_string(c.c_min_line) : "");
}

/// The in-core time gemm_out_of_core plans the case with: the case's, else the device's estimate.
template <class T>
double plan_compute(const ooc_case& c, const gemm_options& o, gemm_path path) {
  if (c.compute_seconds > 0) return c.compute_seconds;
  const std::vector<int> devices = c.devices.empty() ? spillway::all_devices() : c.devices;
  return spillway::gemm::detail::ooc_estimate<T>(c.m, c.n, c.k, o, path, devices);
}

/// The largest budget (from the operands' size down by 3/4 steps) whose plan has at least
/// `min_blocks` blocks — or, with `split`, chunks of k — as gemm_out_of_core will plan it (at
/// `compute`, the in-core time it plans with).
template <class T, class TC>
std::size_t budget_for(const ooc_case& c, bool stage_a, bool stage_b, double compute) {
  using Acc = accumulator_t<T>;
  ooc_plan_request r;
  r.m = c.m;
  r.n = c.n;
  r.k = c.k;
  r.in_bytes = sizeof(T);
  r.out_bytes = sizeof(TC);
  r.acc_bytes = sizeof(Acc);
  r.c_is_acc = std::is_same_v<TC, Acc>;
  r.read_c = !c.beta_zero;
  // gemm_out_of_core's default is every visible device.
  r.devices = c.devices.empty() ? static_cast<std::size_t>(std::max(1, spillway::test::visible_gpus()))
                                : c.devices.size();
  r.stage_a = stage_a;
  r.stage_b = stage_b;
  r.c_row_major = c.lc == layout::row_major;
  r.c_min_line_bytes = c.c_min_line;
  r.compute_seconds = compute;
  if (c.d2h_short >= 0) r.rates.d2h_short = c.d2h_short;
  r.raw_piece_bytes = c.raw_piece_bytes;
  std::size_t b = static_cast<std::size_t>(c.m * c.k + c.k * c.n) * sizeof(T) +
                  static_cast<std::size_t>(c.m * c.n) * sizeof(TC);
  for (;; b = b * 3 / 4) {
    r.budget_bytes = b;
    // As gemm_out_of_core plans it (staged or direct by c_out; ooc_options::slots_per_device 0);
    // throws (failing the test) below the minimum.
    const ooc_plan p = choose_ooc_plan(r, c.c_out, c.pinned, 0);
    const auto rows_per_device = static_cast<std::size_t>(
        (p.row_panels + static_cast<index_t>(r.devices) - 1) / static_cast<index_t>(r.devices));
    const bool grouped = (c.c_min_line == 0 && c.compute_seconds == 0) ||
                         (c.lc == layout::row_major) == p.transposed || p.col_panels < 2 || p.group > 1;
    if (static_cast<int>(p.tasks()) >= c.min_blocks && (!c.split_k || p.k_chunks > 1) &&
        (!c.bands || p.a_slots < rows_per_device) && grouped)
      return b;
  }
}

/// One gemm_out_of_core checked element by element against the host reference (and, if given,
/// compared with the in-core result of the same inputs).
template <class T, class TC>
::testing::AssertionResult run_ooc(const ooc_case& cs, gemm_options o, std::uint64_t seed,
                                   ooc_report* out = nullptr, ooc_trace* trace = nullptr) {
  std::mt19937_64 g(seed);
  const double alpha = is_int_v<T> ? 2.0 : 1.5, beta = cs.beta_zero ? 0.0 : (is_int_v<T> ? -3.0 : -0.75);
  auto a = make_matrix<T>(cs.m, cs.k, {cs.la, false, 0, 0}, 1, 0, g);
  auto b = make_matrix<T>(cs.k, cs.n, {cs.lb, false, 0, 0}, 1, 0, g);
  auto c = make_output<TC>(cs.m, cs.n, {cs.lc, false, 2, 0}, 1, 0, !cs.beta_zero, g);  // ld padded
  if constexpr (is_int_v<T>) {
    if (!cs.beta_zero)
      for (auto& x : c.buf) x = static_cast<TC>(random_value<std::int8_t>(g));
  }
  const std::vector<TC> c0 = c.buf;
  std::unique_ptr<spillway::host_registration> ra, rb, rc;
  if (cs.pinned) {
    ra = std::make_unique<spillway::host_registration>(a.buf.data(), a.buf.size() * sizeof(T));
    rb = std::make_unique<spillway::host_registration>(b.buf.data(), b.buf.size() * sizeof(T));
    rc = std::make_unique<spillway::host_registration>(c.buf.data(), c.buf.size() * sizeof(TC));
  }
  const gemm_path path = resolve_path<T>(o, spillway::current_device());
  const bool tensor = path != gemm_path::simt;
  ooc_options oo;
  oo.budget = spillway::memory_budget(
      budget_for<T, TC>(cs, tensor && cs.la == layout::col_major, tensor && cs.lb == layout::row_major,
                        plan_compute<T>(cs, o, path)));
  oo.devices = cs.devices;
  oo.trace = trace;
  oo.c_out = cs.c_out;
  oo.c_min_line_bytes = cs.c_min_line;
  oo.compute_seconds = cs.compute_seconds;
  if (cs.d2h_short >= 0) oo.rates.d2h_short = cs.d2h_short;
  oo.scatter_threads = cs.scatter_threads;
  oo.scatter_streaming = cs.scatter_streaming;
  oo.raw_piece_bytes = cs.raw_piece_bytes;
  oo.lock = cs.lock;
  using S = accumulator_t<T>;
  const ooc_report rep =
      gemm_out_of_core(static_cast<S>(alpha), a.cview(), b.cview(), static_cast<S>(beta), c.view, o, oo);
  if (out != nullptr) *out = rep;
  const std::string what = describe(cs, o) + " [" + rep.plan.describe() + "]";
  if (!rep.job.complete()) return ::testing::AssertionFailure() << what << ": job incomplete";
  if (!cs.pinned && (spillway::is_page_locked(a.buf.data()) || spillway::is_page_locked(b.buf.data()) ||
                     spillway::is_page_locked(c.buf.data())))
    return ::testing::AssertionFailure() << what << ": an operand is still page-locked after the call";
  if (static_cast<int>(rep.plan.tasks()) < cs.min_blocks)
    return ::testing::AssertionFailure() << what << ": only " << rep.plan.tasks() << " blocks";
  if (cs.split_k && rep.plan.k_chunks < 2)
    return ::testing::AssertionFailure() << what << ": k was not split";
  // C's lines run along the executed frame's columns: the blocks span several B panels.
  const bool exec_row_major = (cs.lc == layout::row_major) != rep.plan.transposed;
  if (cs.c_min_line > 0 && exec_row_major && rep.plan.col_panels > 1 && rep.plan.group < 2)
    return ::testing::AssertionFailure() << what << ": no C block spans several B panels";
  if (rep.plan.group > 1 && !exec_row_major)
    return ::testing::AssertionFailure() << what << ": B panels grouped although C's lines run along rows";
  if (rep.job.bytes_moved != rep.plan.h2d_bytes + rep.plan.d2h_bytes && rep.job.devices.size() < 2)
    return ::testing::AssertionFailure()
           << what << ": moved " << rep.job.bytes_moved << " bytes, the plan said "
           << rep.plan.h2d_bytes + rep.plan.d2h_bytes;
  if (rep.a_page_locked != (cs.pinned || rep.a_registered) || rep.b_page_locked != (cs.pinned || rep.b_registered) ||
      rep.c_page_locked != (cs.pinned || rep.c_registered))
    return ::testing::AssertionFailure() << what << ": host memory detected wrongly";
  if (cs.pinned && (rep.a_registered || rep.b_registered || rep.c_registered))
    return ::testing::AssertionFailure() << what << ": page-locked memory registered again";
  const arithmetic ar = arithmetic_for<T, TC>(std::is_same_v<T, float> && tensor);
  // Chunks of k accumulate in C itself when C is the accumulator type: k/kc more roundings of the
  // partial sums, inside the k·ε·S term already.
  const matrix_view<const TC> cref{
      c0.data() + (c.view.data - c.buf.data()), c.view.rows, c.view.cols, c.view.ld, c.view.order, 0};
  const auto ref =
      compute_reference_fast<T, T, TC>(alpha, a.cview(), b.cview(), beta, cref, 1, identity{}, ar);
  return check_output<TC>(c.buf, c0, c.view, 1, ref, what + " [ran " + to_string(path) + "]");
}

/// The in-core GEMM of the same product on the device, for the comparison.
template <class T, class TC>
::testing::AssertionResult compare_in_core(const ooc_case& cs, gemm_options o, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  const double alpha = 1.5;
  auto a = make_matrix<T>(cs.m, cs.k, {cs.la, false, 0, 0}, 1, 0, g);
  auto b = make_matrix<T>(cs.k, cs.n, {cs.lb, false, 0, 0}, 1, 0, g);
  auto c = make_output<TC>(cs.m, cs.n, {cs.lc, false, 0, 0}, 1, 0, false, g);
  std::vector<TC> in_core(c.buf.size());
  {
    spillway::stream s;
    auto da =
        spillway::device_buffer<T>::from_host(cuda::std::span<const T>(a.buf.data(), a.buf.size()), s.view());
    auto db =
        spillway::device_buffer<T>::from_host(cuda::std::span<const T>(b.buf.data(), b.buf.size()), s.view());
    auto dc = spillway::device_buffer<TC>::from_host(cuda::std::span<const TC>(c.buf.data(), c.buf.size()),
                                                     s.view());
    matrix_view<const T> av = a.cview(), bv = b.cview();
    av.data = da.data();
    bv.data = db.data();
    matrix_view<TC> cv = c.view;
    cv.data = dc.data();
    gemm_async(s.view(), static_cast<float>(alpha), av, bv, 0.0f, cv, o);
    dc.copy_to_host_async(cuda::std::span<TC>(in_core.data(), in_core.size()), s.view());
    s.synchronize();
  }
  ooc_options oo;
  oo.budget = spillway::memory_budget(
      budget_for<T, TC>(cs, false, false, plan_compute<T>(cs, o, resolve_path<T>(o, spillway::current_device()))));
  const ooc_report rep =
      gemm_out_of_core(static_cast<float>(alpha), a.cview(), b.cview(), 0.0f, c.view, o, oo);
  if (rep.plan.tasks() < 9) return ::testing::AssertionFailure() << "only " << rep.plan.tasks() << " blocks";
  // Each block runs the same kernel over the same k as the whole product (full-k panels, no split):
  // the sums are formed in the same order, so the two agree to the last bit.
  long bad = 0;
  for (index_t i = 0; i < cs.m; ++i)
    for (index_t j = 0; j < cs.n; ++j) {
      const std::size_t e = static_cast<std::size_t>(&c.view(i, j) - c.buf.data());
      if (std::memcmp(&c.buf[e], &in_core[e], sizeof(TC)) != 0 && bad++ < 5) {
        std::cout << "  C(" << i << "," << j << ") out of core " << to_wide(c.buf[e]) << " in core "
                  << to_wide(in_core[e]) << "\n";
      }
    }
  if (bad != 0)
    return ::testing::AssertionFailure()
           << bad << " elements differ from the in-core GEMM [" << rep.plan.describe() << "]";
  return ::testing::AssertionSuccess();
}

TEST(OutOfCoreGemmGpu, FloatEveryLayoutPageableAndPinned) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = spillway::test::seed("ooc-float-layouts");
  int n = 0;
  for (bool pinned : {false, true})
    for (layout la : {layout::row_major, layout::col_major})
      for (layout lb : {layout::row_major, layout::col_major})
        for (layout lc : {layout::row_major, layout::col_major}) {
          ooc_case cs;
          cs.la = la;
          cs.lb = lb;
          cs.lc = lc;
          cs.pinned = pinned;
          cs.bands = ((n / 2) % 2) == 1;
          cs.beta_zero = (n++ % 2) == 0;
          ASSERT_TRUE((run_ooc<float, float>(cs, gemm_options{}, seed + static_cast<std::uint64_t>(n))));
        }
}

// The job page-locks pageable operands for the call (ooc_options::lock): by its rule nothing with
// a column-major (K-major) B, B with a row-major B, and A and C too for 2-byte elements; all three
// with `always`, none with `never`; page-locked memory is not registered again. Every result
// matches the host reference, and run_ooc checks that no operand is still page-locked when the
// call has returned.
TEST(OutOfCoreGemmGpu, PageableOperandsPageLockedForTheCall) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = spillway::test::seed("ooc-page-lock");
  using spillway::page_lock;
  struct expect {
    page_lock lock;
    layout lb;
    bool pinned, a, b, c;
  };
  int i = 0;
  for (const expect& e : {expect{page_lock::automatic, layout::col_major, false, false, false, false},
                          expect{page_lock::automatic, layout::row_major, false, false, true, false},
                          expect{page_lock::always, layout::col_major, false, true, true, true},
                          expect{page_lock::never, layout::row_major, false, false, false, false},
                          expect{page_lock::always, layout::row_major, true, false, false, false}}) {
    ooc_case cs;
    cs.lock = e.lock;
    cs.lb = e.lb;
    cs.pinned = e.pinned;
    cs.beta_zero = (i % 2) == 1;
    cs.min_blocks = 4;
    ooc_report rep;
    ASSERT_TRUE((run_ooc<float, float>(cs, gemm_options{}, seed + static_cast<std::uint64_t>(i++), &rep)));
    EXPECT_EQ(rep.a_registered, e.a) << "float, case " << i;
    EXPECT_EQ(rep.b_registered, e.b) << "float, case " << i;
    EXPECT_EQ(rep.c_registered, e.c) << "float, case " << i;
  }
  for (layout lb : {layout::row_major, layout::col_major}) {
    ooc_case cs;
    cs.lock = page_lock::automatic;
    cs.lb = lb;
    cs.beta_zero = lb == layout::row_major;
    cs.min_blocks = 4;
    ooc_report rep;
    ASSERT_TRUE((run_ooc<__half, float>(cs, gemm_options{}, seed + static_cast<std::uint64_t>(i++), &rep)));
    const bool want = lb == layout::row_major;
    EXPECT_TRUE(rep.a_registered == want && rep.b_registered == want && rep.c_registered == want)
        << "half, B " << (want ? "row" : "col") << "-major: A " << rep.a_registered << " B " << rep.b_registered
        << " C " << rep.c_registered;
  }
}

TEST(OutOfCoreGemmGpu, FloatMatchesInCoreBitForBit) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = spillway::test::seed("ooc-float-in-core");
  ooc_case cs;
  cs.m = 1100;
  cs.n = 900;
  cs.k = 500;
  gemm_options o;
  o.split_k = 1;  // the in-core run must not split k either
  ASSERT_TRUE((compare_in_core<float, float>(cs, o, seed)));
  cs.la = layout::col_major;
  cs.lc = layout::col_major;
  ASSERT_TRUE((compare_in_core<float, float>(cs, o, seed + 1)));
}

template <class T, class TC>
void every_type_once(const std::string& label, gemm_options o = {}) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = spillway::test::seed("ooc-type-" + label);
  ooc_case cs;
  cs.m = 523;
  cs.n = 611;
  cs.k = 257;
  ASSERT_TRUE((run_ooc<T, TC>(cs, o, seed)));
  cs.beta_zero = false;
  cs.pinned = true;
  cs.la = layout::col_major;  // the tensor-core paths stage MN-major panels
  cs.lb = layout::row_major;
  cs.lc = layout::col_major;
  ASSERT_TRUE((run_ooc<T, TC>(cs, o, seed + 1)));
}

gemm_options tf32() {
  gemm_options o;
  o.math = math_mode::tf32;
  return o;
}

TEST(OutOfCoreGemmGpu, Tf32) {
  every_type_once<float, float>("tf32", tf32());
}
TEST(OutOfCoreGemmGpu, Bf16ToFloat) {
  every_type_once<__nv_bfloat16, float>("bf16-float");
}
TEST(OutOfCoreGemmGpu, Bf16ToBf16) {
  every_type_once<__nv_bfloat16, __nv_bfloat16>("bf16-bf16");
}
TEST(OutOfCoreGemmGpu, HalfToHalf) {
  every_type_once<__half, __half>("half-half");
}
TEST(OutOfCoreGemmGpu, FloatToHalf) {
  every_type_once<float, __half>("float-half");
}
TEST(OutOfCoreGemmGpu, Double) {
  every_type_once<double, double>("double");
}
TEST(OutOfCoreGemmGpu, Int8ToInt32Exact) {
  every_type_once<std::int8_t, std::int32_t>("int8-int32");
}
TEST(OutOfCoreGemmGpu, Int8ToFloat) {
  every_type_once<std::int8_t, float>("int8-float");
}
TEST(OutOfCoreGemmGpu, ComplexFloat) {
  every_type_once<cfloat, cfloat>("cfloat");
}

// ---- MN-major operands on the tensor-core paths: each panel transposed once as it lands ----------

/// The transpose kernel alone: src (lines x len, pitch round_up(len, 16)) random bytes, dst
/// poisoned (0x7f) with 16 spare elements per row and 3 spare rows. dst must be the exact
/// transpose, zeros in columns [lines, round_up(lines, V)), every other byte untouched.
template <class T>
::testing::AssertionResult check_transpose(index_t lines, index_t len, std::mt19937_64& g) {
  constexpr index_t v = 16 / static_cast<index_t>(sizeof(T));
  auto up = [](index_t x, index_t q) { return (x + q - 1) / q * q; };
  const index_t sld = up(len, 16), dld = up(lines, 16) + 16, drows = len + 3;
  std::vector<unsigned char> src(static_cast<std::size_t>(lines * sld) * sizeof(T));
  for (auto& x : src) x = static_cast<unsigned char>(g());
  std::vector<unsigned char> dst(static_cast<std::size_t>(drows * dld) * sizeof(T), 0x7f);
  spillway::stream s;
  auto ds = spillway::device_buffer<unsigned char>::from_host(
      cuda::std::span<const unsigned char>(src.data(), src.size()), s.view());
  auto dd = spillway::device_buffer<unsigned char>::from_host(
      cuda::std::span<const unsigned char>(dst.data(), dst.size()), s.view());
  spillway::gemm::detail::ooc_transpose<T>(reinterpret_cast<const T*>(ds.data()), sld, lines, len,
                                           reinterpret_cast<T*>(dd.data()), dld, s.view());
  SPILLWAY_CUDA_TRY(cudaGetLastError());
  dd.copy_to_host_async(cuda::std::span<unsigned char>(dst.data(), dst.size()), s.view());
  s.synchronize();
  const std::size_t es = sizeof(T);
  long bad = 0;
  for (index_t r = 0; r < drows; ++r)
    for (index_t x = 0; x < dld; ++x)
      for (std::size_t b = 0; b < es; ++b) {
        const unsigned char got = dst[static_cast<std::size_t>(r * dld + x) * es + b];
        unsigned char want = 0x7f;
        if (r < len && x < lines)
          want = src[static_cast<std::size_t>(x * sld + r) * es + b];
        else if (r < len && x < up(lines, v))
          want = 0;
        if (got != want && bad++ < 5)
          std::cout << "  " << sizeof(T) << "-byte " << lines << " x " << len << ": dst(" << r << "," << x
                    << ") byte " << b << " is " << int(got) << ", want " << int(want) << "\n";
      }
  if (bad != 0)
    return ::testing::AssertionFailure()
           << bad << " bytes wrong, " << sizeof(T) << "-byte elements, " << lines << " lines x " << len;
  return ::testing::AssertionSuccess();
}

TEST(OutOfCoreGemmGpu, TransposeKernelEveryElementSizeAndEdge) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = spillway::test::seed("ooc-transpose");
  std::mt19937_64 g(seed);
  const index_t sizes[][2] = {{1, 1}, {1, 300}, {300, 1}, {37, 53}, {129, 257}, {512, 1000}, {1111, 130}};
  for (const auto& sz : sizes) {
    ASSERT_TRUE(check_transpose<std::int8_t>(sz[0], sz[1], g));
    ASSERT_TRUE(check_transpose<__nv_bfloat16>(sz[0], sz[1], g));
    ASSERT_TRUE(check_transpose<float>(sz[0], sz[1], g));
    ASSERT_TRUE(check_transpose<double>(sz[0], sz[1], g));
  }
}

/// Column-major A and row-major B (both MN-major) on the tensor-core path: the plan transposes
/// both as they land (stage_a and stage_b, raw buffers of two panels each), odd sizes (no side a
/// multiple of 16 or of the kernels' tiles), >= 9 blocks, beta = 0 over NaN and beta != 0, pageable
/// and page-locked, row- and column-major C; then k in chunks (the last chunk shorter than the
/// others, so its panels' padding is zero-filled by the transpose). Against the host reference.
template <class T, class TC>
void mn_major_transposed(const std::string& label, gemm_options o = {}) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = spillway::test::seed("ooc-mn-major-" + label);
  const bool tensor = resolve_path<T>(o, spillway::current_device()) != gemm_path::simt;
  int n = 0;
  for (bool pinned : {false, true})
    for (bool beta_zero : {true, false}) {
      ooc_case cs;
      cs.m = 501;
      cs.n = 613;
      cs.k = 259;
      cs.la = layout::col_major;
      cs.lb = layout::row_major;
      cs.lc = (n % 2) == 0 ? layout::row_major : layout::col_major;
      cs.pinned = pinned;
      cs.beta_zero = beta_zero;
      ooc_report rep;
      ASSERT_TRUE((run_ooc<T, TC>(cs, o, seed + static_cast<std::uint64_t>(n++), &rep)));
      EXPECT_EQ(rep.plan.stage_a, tensor) << rep.plan.describe();
      EXPECT_EQ(rep.plan.stage_b, tensor) << rep.plan.describe();
      EXPECT_EQ(rep.plan.stage_bytes, tensor ? 2 * (rep.plan.raw_a_bytes + rep.plan.raw_b_bytes) : 0u);
      EXPECT_EQ(rep.plan.slot_extra_bytes, 0u) << rep.plan.describe();
    }
  // Only B MN-major (NumPy's layout: both row-major), k in chunks.
  ooc_case cs;
  cs.m = 300;
  cs.n = 283;
  cs.k = 2100;
  cs.la = layout::row_major;
  cs.lb = layout::row_major;
  cs.min_blocks = 1;
  cs.split_k = true;
  for (bool pinned : {false, true}) {
    cs.pinned = pinned;
    cs.beta_zero = !pinned;
    ooc_report rep;
    ASSERT_TRUE((run_ooc<T, TC>(cs, o, seed + static_cast<std::uint64_t>(n++), &rep)));
    EXPECT_EQ(rep.plan.stage_a || rep.plan.stage_b, tensor) << rep.plan.describe();
    EXPECT_FALSE(rep.plan.stage_a && rep.plan.stage_b) << rep.plan.describe();
  }
}

TEST(OutOfCoreGemmGpu, MnMajorTransposedOnLoadBf16ToFloat) {
  mn_major_transposed<__nv_bfloat16, float>("bf16-float");
}
TEST(OutOfCoreGemmGpu, MnMajorTransposedOnLoadHalfToHalf) {
  mn_major_transposed<__half, __half>("half-half");
}
TEST(OutOfCoreGemmGpu, MnMajorTransposedOnLoadTf32) {
  mn_major_transposed<float, float>("tf32", tf32());
}
TEST(OutOfCoreGemmGpu, MnMajorTransposedOnLoadInt8ToInt32Exact) {
  mn_major_transposed<std::int8_t, std::int32_t>("int8-int32");
}
TEST(OutOfCoreGemmGpu, MnMajorTransposedOnLoadDouble) {
  mn_major_transposed<double, double>("double");
}

/// NumPy's layout (A and B row-major) with a budget that holds B whole: B's panels (for 1- and
/// 2-byte elements one panel of every column, with C blocks of whole rows) land in raw pieces of at
/// least 32 of its 259 rows (32 for the whole-width panel: the last piece 3 rows), each transposed
/// into its k columns of the cache as the next lands. Odd sizes, pageable and page-locked, β = 0
/// over NaN and β ≠ 0, against the host reference.
template <class T, class TC>
void row_major_b_in_pieces(const std::string& label, gemm_options o = {}) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = spillway::test::seed("ooc-whole-b-" + label);
  const bool tensor = resolve_path<T>(o, spillway::current_device()) != gemm_path::simt;
  int n = 0;
  for (bool pinned : {false, true})
    for (bool beta_zero : {true, false}) {
      ooc_case cs;
      cs.m = 1000;
      cs.n = 613;
      cs.k = 259;
      cs.la = layout::row_major;
      cs.lb = layout::row_major;
      cs.lc = layout::row_major;
      cs.min_blocks = 1;
      cs.pinned = pinned;
      cs.beta_zero = beta_zero;
      // 32 lines of 624 (613 padded to 16) elements.
      cs.raw_piece_bytes = 32 * 624 * sizeof(T);
      ooc_report rep;
      ASSERT_TRUE((run_ooc<T, TC>(cs, o, seed + static_cast<std::uint64_t>(n++), &rep)));
      if (!tensor) continue;
      EXPECT_NE(rep.plan.stage_a, rep.plan.stage_b) << rep.plan.describe();  // B's side only
      const index_t raw_lines = rep.plan.transposed ? rep.plan.raw_a_lines : rep.plan.raw_b_lines;
      EXPECT_GE(raw_lines, 32) << rep.plan.describe();
      EXPECT_LT(raw_lines, 259) << rep.plan.describe();  // several pieces per panel
      if (sizeof(T) <= 2) {
        EXPECT_FALSE(rep.plan.transposed) << rep.plan.describe();
        EXPECT_EQ(rep.plan.bn, 613) << rep.plan.describe();
        EXPECT_EQ(rep.plan.col_panels, 1) << rep.plan.describe();
        EXPECT_EQ(rep.plan.raw_b_lines, 32) << rep.plan.describe();
      }
    }
}

TEST(OutOfCoreGemmGpu, RowMajorBInPiecesBf16ToFloat) {
  row_major_b_in_pieces<__nv_bfloat16, float>("bf16-float");
}
TEST(OutOfCoreGemmGpu, RowMajorBInPiecesInt8ToInt32Exact) {
  row_major_b_in_pieces<std::int8_t, std::int32_t>("int8-int32");
}
TEST(OutOfCoreGemmGpu, RowMajorBInPiecesDouble) {
  row_major_b_in_pieces<double, double>("double");
}

/// Budgets too small for full-k panels: k in chunks, accumulated in C (C the accumulator type) or
/// in an accumulator block then combined with β·C (narrower C, int8 into float).
template <class T, class TC>
void k_chunks(const std::string& label, gemm_options o = {}) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = spillway::test::seed("ooc-kchunks-" + label);
  ooc_case cs;
  cs.m = 300;
  cs.n = 280;
  cs.k = 2100;
  cs.min_blocks = 1;
  cs.split_k = true;
  for (bool beta_zero : {true, false}) {
    cs.beta_zero = beta_zero;
    ASSERT_TRUE((run_ooc<T, TC>(cs, o, seed + (beta_zero ? 0 : 1))));
  }
}

TEST(OutOfCoreGemmGpu, KChunksFloat) {
  k_chunks<float, float>("float");
}
TEST(OutOfCoreGemmGpu, KChunksBf16ToBf16) {
  k_chunks<__nv_bfloat16, __nv_bfloat16>("bf16");
}
TEST(OutOfCoreGemmGpu, KChunksInt8ToFloat) {
  k_chunks<std::int8_t, float>("int8-float");
}
TEST(OutOfCoreGemmGpu, KChunksInt8ToInt32Exact) {
  k_chunks<std::int8_t, std::int32_t>("int8-int32");
}

// A plan whose caches hold every panel (the loader copies them all from the first block on),
// traced: one copy per panel, their bytes the plan's, the loader's copies in issue order, and every
// block's GEMM ready only after both its panels landed, done before its C block is out.
TEST(OutOfCoreGemmGpu, ResidentPanelsTraced) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = spillway::test::seed("ooc-trace");
  ooc_case cs;
  cs.pinned = true;
  cs.devices = {0};
  gemm_options o;
  ooc_report rep;
  ooc_trace tr;
  ASSERT_TRUE((run_ooc<__nv_bfloat16, float>(cs, o, seed, &rep, &tr)));
  const ooc_plan& p = rep.plan;
  SCOPED_TRACE(p.describe());
  ASSERT_EQ(p.k_chunks, 1);
  ASSERT_GE(p.a_slots, static_cast<std::size_t>(p.row_panels));
  ASSERT_GE(p.b_slots, static_cast<std::size_t>(p.col_panels));
  ASSERT_EQ(tr.load_end_ms.size(), static_cast<std::size_t>(p.row_panels + p.col_panels));
  std::size_t bytes = 0;
  std::vector<float> a_at(static_cast<std::size_t>(p.row_panels), -1),
      b_at(static_cast<std::size_t>(p.col_panels), -1);
  for (std::size_t x = 0; x < tr.load_end_ms.size(); ++x) {
    bytes += tr.load_bytes[x];
    ASSERT_EQ(tr.load_chunk[x], 0);
    (tr.load_operand[x] == 'A' ? a_at : b_at)[static_cast<std::size_t>(tr.load_panel[x])] = tr.load_end_ms[x];
    if (x > 0) EXPECT_GE(tr.load_end_ms[x], tr.load_end_ms[x - 1]) << "the loader's copies run in order";
  }
  EXPECT_EQ(bytes, p.h2d_bytes);
  for (float v : a_at) EXPECT_GE(v, 0.0f);
  for (float v : b_at) EXPECT_GE(v, 0.0f);
  ASSERT_EQ(tr.ready_ms.size(), p.tasks());
  const float tick = 1e-3f;  // event resolution (~0.5 µs) in ms
  for (std::size_t x = 0; x < p.tasks(); ++x) {
    const ooc_block b = p.order[x];
    EXPECT_EQ(tr.block_device[x], 0);
    EXPECT_GE(tr.ready_ms[x] + tick, a_at[static_cast<std::size_t>(b.i)]) << "block " << x;
    EXPECT_GE(tr.ready_ms[x] + tick, b_at[static_cast<std::size_t>(b.j)]) << "block " << x;
    EXPECT_LE(tr.ready_ms[x], tr.gemm_end_ms[x] + tick) << "block " << x;
    EXPECT_LE(tr.gemm_end_ms[x], tr.out_end_ms[x] + tick) << "block " << x;
  }
  EXPECT_GT(tr.setup_seconds, 0.0);
}

// A traced job with staged copies out: each block's end (its host copy into C) comes from the host
// clock, against the origin's host time taken when the caches were ready (no timing event follows
// the slot's host function), so it is present for every block and after the block's GEMM (within
// the host clock's offset, well under 0.5 ms).
TEST(OutOfCoreGemmGpu, StagedTraced) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = spillway::test::seed("ooc-trace-staged");
  ooc_case cs;
  cs.pinned = true;
  cs.devices = {0};
  cs.c_out = ooc_copy_out::staged;
  ooc_report rep;
  ooc_trace tr;
  ASSERT_TRUE((run_ooc<__nv_bfloat16, float>(cs, {}, seed, &rep, &tr)));
  const ooc_plan& p = rep.plan;
  SCOPED_TRACE(p.describe());
  ASSERT_TRUE(p.c_staged);
  ASSERT_EQ(tr.out_end_ms.size(), p.tasks());
  float last = 0;
  for (std::size_t x = 0; x < p.tasks(); ++x) {
    EXPECT_TRUE(std::isfinite(tr.gemm_end_ms[x])) << "block " << x;
    ASSERT_TRUE(std::isfinite(tr.out_end_ms[x])) << "block " << x;
    EXPECT_GE(tr.out_end_ms[x] + 0.5f, tr.gemm_end_ms[x]) << "block " << x;
    last = std::max(last, tr.out_end_ms[x]);
  }
  EXPECT_GT(last, 0.0f);
}

// Page-locked C, every way out: 2-D DMA straight into C, whole blocks through the slots' pinned
// buffers, and the automatic choice (by the bounds at the device's compute estimate: for these
// small products the copies decide, and staged blocks leave whole at the full rate); β ≠ 0 reads C
// by DMA either way.
TEST(OutOfCoreGemmGpu, PinnedCOutDirectAndStaged) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  for (const ooc_copy_out how : {ooc_copy_out::direct, ooc_copy_out::staged, ooc_copy_out::automatic}) {
    for (const bool beta_zero : {true, false}) {
      for (const layout lc : {layout::row_major, layout::col_major}) {
        ooc_case cs;
        cs.pinned = true;
        cs.c_out = how;
        cs.beta_zero = beta_zero;
        cs.lc = lc;
        const auto seed = spillway::test::seed("ooc-c-out");
        ooc_report rep;
        EXPECT_TRUE((run_ooc<float, float>(cs, {}, seed, &rep)))
            << (how == ooc_copy_out::direct   ? "direct"
                : how == ooc_copy_out::staged ? "staged"
                                              : "automatic");
        if (how != ooc_copy_out::automatic) EXPECT_EQ(rep.plan.c_staged, how == ooc_copy_out::staged);
        EXPECT_EQ(rep.plan.slots, std::min<std::size_t>(rep.plan.tasks(), rep.plan.c_staged ? 8 : 4));
        EXPECT_TRUE(rep.compute_estimated);
      }
    }
  }
}

// Staged C blocks (out of the device in pieces of whole lines, each written into C by one of the
// job's scatter threads as it lands) under every scatter setting: one thread, three, more than the
// machine has cores; plain copies and non-temporal stores. bf16 C with its leading dimension padded by 2 elements puts every
// other line of C at an 8-byte offset (the streaming copy's unaligned head); both layouts of C,
// page-locked (staged by request) and pageable (always staged), β = 0 over NaN and β ≠ 0.
TEST(OutOfCoreGemmGpu, StagedBlocksEveryScatterSetting) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = spillway::test::seed("ooc-c-scatter");
  std::uint64_t x = 0;
  for (const std::size_t threads : {std::size_t{1}, std::size_t{3}, std::size_t{64}}) {
    for (const bool streaming : {false, true}) {
      for (const bool pinned : {true, false}) {
        for (const layout lc : {layout::row_major, layout::col_major}) {
          ooc_case cs;
          cs.pinned = pinned;
          cs.c_out = ooc_copy_out::staged;
          cs.scatter_threads = threads;
          cs.scatter_streaming = streaming;
          cs.lc = lc;
          cs.beta_zero = (x % 2) == 0;
          EXPECT_TRUE((run_ooc<__nv_bfloat16, __nv_bfloat16>(cs, {}, seed + x++)))
              << threads << " thread(s), " << (streaming ? "non-temporal stores" : "memcpy");
        }
      }
    }
  }
  ooc_case cs;
  cs.pinned = true;
  cs.c_out = ooc_copy_out::staged;
  cs.scatter_threads = 4;
  ooc_report rep;
  ASSERT_TRUE((run_ooc<float, float>(cs, {}, seed + x, &rep)));
  EXPECT_TRUE(rep.plan.c_staged);
  EXPECT_EQ(rep.plan.group, 1);
  // Blocks of fewer lines than pieces (one row of a row-major C) and of an odd number of lines (3
  // rows; 3 columns of a column-major C): the pieces split whole lines, none empty.
  for (const index_t m : {1, 3}) {
    for (const layout lc : {layout::row_major, layout::col_major}) {
      ooc_case thin;
      thin.m = m;
      thin.n = 1500;
      thin.k = 96;
      thin.min_blocks = 4;
      thin.pinned = (x % 2) == 0;
      thin.c_out = ooc_copy_out::staged;
      thin.lc = lc;
      thin.beta_zero = (x % 3) == 0;
      EXPECT_TRUE((run_ooc<float, float>(thin, {}, seed + ++x))) << m << " row(s), C " << (lc == layout::row_major ? "row" : "col") << "-major";
    }
  }
}

// C blocks of several B panels (ooc_options::c_min_line_bytes: lines of C at least this long), one
// GEMM per panel into its columns of the block: both C layouts (column-major C in the executed frame
// keeps single-panel blocks), β = 0 over NaN and β ≠ 0, pageable and page-locked, and the
// tensor-core path with MN-major panels staged.
TEST(OutOfCoreGemmGpu, CBlocksOfSeveralBPanels) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = spillway::test::seed("ooc-c-groups");
  int n = 0;
  for (const bool pinned : {false, true}) {
    for (const layout lc : {layout::row_major, layout::col_major}) {
      for (const bool beta_zero : {true, false}) {
        ooc_case cs;
        cs.m = 900;
        cs.n = 1300;
        cs.k = 260;
        cs.min_blocks = 9;
        cs.pinned = pinned;
        cs.lc = lc;
        cs.beta_zero = beta_zero;
        cs.c_min_line = 2048;  // 512 floats: a C block spans at least two panels narrower than that
        ++n;
        ASSERT_TRUE((run_ooc<float, float>(cs, {}, seed + static_cast<std::uint64_t>(n))));
        cs.la = layout::col_major;
        cs.lb = layout::row_major;
        ASSERT_TRUE((run_ooc<__nv_bfloat16, float>(cs, {}, seed + 100 + static_cast<std::uint64_t>(n))));
      }
    }
  }
}

// The job of the C-block-shape tests below: 1400 x 1000 x 300 on device 0, pinned, at least 4 blocks.
ooc_case block_shape_case(bool beta_zero = true) {
  ooc_case cs;
  cs.m = 1400;
  cs.n = 1000;
  cs.k = 300;
  cs.pinned = true;
  cs.devices = {0};
  cs.min_blocks = 4;
  cs.beta_zero = beta_zero;
  return cs;
}

// ... with a compute time stated and short lines priced at 1 MB/s (the automatic choices).
ooc_case automatic_case(bool beta_zero) {
  ooc_case cs = block_shape_case(beta_zero);
  cs.compute_seconds = 1e-3;
  cs.d2h_short = 1e6;
  return cs;
}

// Traced C blocks of several B panels: each block's first GEMM waits only for its A panel and its
// first B panel, and the bytes copied are the plan's.
TEST(OutOfCoreGemmGpu, CBlocksOfSeveralBPanelsTraced) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = spillway::test::seed("ooc-c-groups-trace");
  ooc_case cs = block_shape_case();
  cs.c_min_line = 4096;
  ooc_report rep;
  ooc_trace tr;
  ASSERT_TRUE((run_ooc<__nv_bfloat16, float>(cs, {}, seed, &rep, &tr)));
  const ooc_plan& p = rep.plan;
  SCOPED_TRACE(p.describe());
  ASSERT_GT(p.group, 1);
  std::size_t bytes = 0;
  std::vector<float> a_at(static_cast<std::size_t>(p.row_panels), -1),
      b_at(static_cast<std::size_t>(p.col_panels), -1);
  for (std::size_t x = 0; x < tr.load_end_ms.size(); ++x) {
    bytes += tr.load_bytes[x];
    (tr.load_operand[x] == 'A' ? a_at : b_at)[static_cast<std::size_t>(tr.load_panel[x])] = tr.load_end_ms[x];
  }
  EXPECT_EQ(bytes, p.h2d_bytes);
  const float tick = 1e-3f;
  for (std::size_t x = 0; x < p.tasks(); ++x) {
    const ooc_block b = p.order[x];
    EXPECT_GE(tr.ready_ms[x] + tick, a_at[static_cast<std::size_t>(b.i)]) << "block " << x;
    EXPECT_GE(tr.ready_ms[x] + tick, b_at[static_cast<std::size_t>(p.first_panel(b))]) << "block " << x;
    for (index_t j = p.first_panel(b); j < p.last_panel(b); ++j)
      EXPECT_GE(tr.gemm_end_ms[x] + tick, b_at[static_cast<std::size_t>(j)])
          << "block " << x << " panel " << j;
    EXPECT_LE(tr.gemm_end_ms[x], tr.out_end_ms[x] + tick) << "block " << x;
  }
}

// The automatic choice (c_min_line_bytes 0 with a compute time): short lines priced far below the
// full rate make the plan take wider C blocks (a square start of single-panel blocks and then
// blocks of several panels, or wide blocks throughout: whichever its bound prefers); the blocks of
// different widths all land in C, β = 0 and β ≠ 0.
TEST(OutOfCoreGemmGpu, AutomaticWideBlocksByTheBound) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = spillway::test::seed("ooc-c-automatic");
  for (const bool beta_zero : {true, false}) {
    const ooc_case cs = automatic_case(beta_zero);
    ooc_report rep;
    ASSERT_TRUE((run_ooc<__nv_bfloat16, float>(cs, {}, seed + (beta_zero ? 0 : 1), &rep)));
    SCOPED_TRACE(rep.plan.describe());
    EXPECT_GT(rep.plan.group, 1);
    EXPECT_GT(rep.plan.ramp_seconds, 0.0);
  }
}

// The automatic way out with a compute time: short lines priced far below the full rate and the
// host copy not priced, the staged plan's bound is the lower: C blocks go out staged, single-panel,
// 8 slots; β = 0 and β ≠ 0.
TEST(OutOfCoreGemmGpu, AutomaticCopyOutStagesWhenItsBoundIsLower) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = spillway::test::seed("ooc-c-automatic-staged");
  for (const bool beta_zero : {true, false}) {
    ooc_case cs = automatic_case(beta_zero);
    cs.c_out = ooc_copy_out::automatic;
    ooc_report rep;
    ASSERT_TRUE((run_ooc<__nv_bfloat16, float>(cs, {}, seed + (beta_zero ? 0 : 1), &rep)));
    SCOPED_TRACE(rep.plan.describe());
    EXPECT_TRUE(rep.plan.c_staged);
    EXPECT_EQ(rep.plan.group, 1);
    EXPECT_EQ(rep.plan.slots, std::min<std::size_t>(rep.plan.tasks(), 8));
  }
}

// ... but not when the plan transposes panels on load (B row-major on the bf16 tensor-core path):
// those jobs copy out by DMA whatever the bounds say (measured faster; docs/gemm.md).
TEST(OutOfCoreGemmGpu, AutomaticCopyOutDirectWhenPanelsAreTransposed) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = spillway::test::seed("ooc-c-automatic-transposed");
  ooc_case cs = automatic_case(true);
  cs.c_out = ooc_copy_out::automatic;
  cs.lb = layout::row_major;
  ooc_report rep;
  ASSERT_TRUE((run_ooc<__nv_bfloat16, float>(cs, {}, seed, &rep)));
  SCOPED_TRACE(rep.plan.describe());
  EXPECT_TRUE(rep.plan.stage_b || rep.plan.stage_a);
  EXPECT_FALSE(rep.plan.c_staged);
  cs.lb = layout::col_major;  // the same job with K-major B stages (the test above)
  ASSERT_TRUE((run_ooc<__nv_bfloat16, float>(cs, {}, seed + 1, &rep)));
  EXPECT_TRUE(rep.plan.c_staged);
}

// Without ooc_options::compute_seconds the plan weighs its choices (copies out, C block widths, its
// order's bound) at the device's estimate — ooc_compute_estimate from the SM count, the peak clock
// and the compute capability, for the arithmetic and the path that ran — and the report says so; a
// stated time is taken as given.
TEST(OutOfCoreGemmGpu, DefaultPlansAtTheDevicesEstimate) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = spillway::test::seed("ooc-compute-estimate");
  ooc_case cs = block_shape_case(true);
  cs.c_out = ooc_copy_out::automatic;
  int major = 0, minor = 0, sms = 0, khz = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0), cudaSuccess);
  const ooc_device_shape dev{major * 10 + minor, sms, khz * 1e3};
  auto unit = [](gemm_path p) {
    return p == gemm_path::wgmma ? ooc_unit::wgmma : p == gemm_path::mma_sync ? ooc_unit::mma_sync : ooc_unit::simt;
  };
  ooc_report rep;
  ASSERT_TRUE((run_ooc<__nv_bfloat16, float>(cs, {}, seed, &rep)));
  const double bf16 =
      ooc_compute_estimate(cs.m, cs.n, cs.k, ooc_arith::fp16, unit(resolve_path<__nv_bfloat16>({}, 0)), dev);
  EXPECT_TRUE(rep.compute_estimated);
  EXPECT_GT(bf16, 0.0);
  EXPECT_EQ(rep.compute_seconds, bf16);
  EXPECT_GT(rep.plan.ramp_seconds, 0.0) << rep.plan.describe();
  // Exact float on the CUDA cores, its own rate.
  ASSERT_TRUE((run_ooc<float, float>(cs, {}, seed + 1, &rep)));
  const double f32 = ooc_compute_estimate(cs.m, cs.n, cs.k, ooc_arith::fp32, ooc_unit::simt, dev);
  EXPECT_TRUE(rep.compute_estimated);
  EXPECT_EQ(rep.compute_seconds, f32);
  EXPECT_GT(f32, bf16) << "the CUDA cores estimated faster than the tensor cores";
  cs.compute_seconds = 0.25;
  ASSERT_TRUE((run_ooc<__nv_bfloat16, float>(cs, {}, seed + 2, &rep)));
  EXPECT_FALSE(rep.compute_estimated);
  EXPECT_EQ(rep.compute_seconds, 0.25);
}

// A compute time that is not one is refused before anything runs (no GPU needed), naming it.
TEST(OutOfCoreGemm, ComputeSecondsThatIsNotATimeIsRefused) {
  std::vector<float> a(40 * 30, 1.0f), b(30 * 20, 1.0f), c(40 * 20, std::nanf(""));
  for (const double bad : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    ooc_options oo;
    oo.compute_seconds = bad;
    try {
      (void)gemm_out_of_core(1.0f, row_major<const float>(a.data(), 40, 30),
                             row_major<const float>(b.data(), 30, 20), 0.0f, row_major(c.data(), 40, 20), {}, oo);
      ADD_FAILURE() << "compute_seconds " << bad << " was accepted";
    } catch (const spillway::logic_error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("compute_seconds is " + std::to_string(bad)), std::string::npos) << msg;
    }
  }
  for (float x : c) ASSERT_TRUE(std::isnan(x)) << "C was touched by a refused job";
}

TEST(OutOfCoreGemmGpu, KZeroScalesC) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  std::vector<float> c(40 * 30, 2.0f);
  ooc_options oo;
  oo.budget = spillway::memory_budget(1 << 20);
  const auto rep =
      gemm_out_of_core(1.0f, row_major<const float>(nullptr, 40, 0), row_major<const float>(nullptr, 0, 30),
                       -0.5f, row_major(c.data(), 40, 30), {}, oo);
  EXPECT_TRUE(rep.job.complete());
  for (float x : c) ASSERT_EQ(x, -1.0f);
}

TEST(OutOfCoreGemmGpu, CancelLeavesUnwrittenBlocksUntouched) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = spillway::test::seed("ooc-cancel");
  std::mt19937_64 g(seed);
  const index_t m = 900, n = 800, k = 200;
  auto a = make_matrix<float>(m, k, {layout::row_major, false, 0, 0}, 1, 0, g);
  auto b = make_matrix<float>(k, n, {layout::col_major, false, 0, 0}, 1, 0, g);
  auto c = make_output<float>(m, n, {layout::row_major, false, 0, 0}, 1, 0, false, g);
  const std::vector<float> c0 = c.buf;
  ooc_options oo;
  oo.max_block = 128;  // 8 x 7 blocks
  oo.slots_per_device = 2;
  oo.budget = spillway::memory_budget(std::size_t{64} << 20);
  std::atomic<int> calls{0};
  oo.progress = [&](const spillway::progress_info& p) {
    ++calls;
    return p.tasks_done < 3;  // cancel once three blocks are complete
  };
  const ooc_report rep = gemm_out_of_core(1.0f, a.cview(), b.cview(), 0.0f, c.view, {}, oo);
  ASSERT_TRUE(rep.job.cancelled);
  ASSERT_FALSE(rep.job.complete());
  const auto written = rep.written();
  ASSERT_GE(written.size(), 3u);
  ASSERT_LT(written.size(), rep.plan.tasks());
  const auto ref = compute_reference_fast<float, float, float>(
      1.0, a.cview(), b.cview(), 0.0, matrix_view<const float>(c.view), 1, identity{},
      arithmetic_for<float, float>(false));
  std::vector<char> in_written(c.buf.size(), 0);
  for (const c_block& w : written)
    for (index_t i = w.row0; i < w.row0 + w.rows; ++i)
      for (index_t j = w.col0; j < w.col0 + w.cols; ++j) {
        const std::size_t e = static_cast<std::size_t>(i * n + j);
        in_written[e] = 1;
        ASSERT_LE(std::fabs(c.buf[e] - ref.value[e]), ref.tol[e])
            << "written block element (" << i << "," << j << ")";
      }
  for (std::size_t e = 0; e < c.buf.size(); ++e)
    if (!in_written[e])
      ASSERT_TRUE(std::isnan(c.buf[e])) << "element " << e << " outside the written blocks changed";
}

TEST(OutOfCoreGemmGpu, FailingCallbackReportsWhatWasWritten) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  std::vector<float> a(600 * 100, 1.0f), b(100 * 500, 0.5f), c(600 * 500, std::nanf(""));
  ooc_options oo;
  oo.max_block = 128;
  oo.budget = spillway::memory_budget(std::size_t{64} << 20);
  oo.progress = [](const spillway::progress_info& p) -> bool {
    if (p.tasks_done >= 2) throw std::runtime_error("stop here");
    return true;
  };
  ooc_report rep;
  oo.report_on_error = &rep;
  try {
    (void)gemm_out_of_core(1.0f, row_major<const float>(a.data(), 600, 100),
                           row_major<const float>(b.data(), 100, 500), 0.0f, row_major(c.data(), 600, 500),
                           {}, oo);
    FAIL() << "the callback's exception did not stop the job";
  } catch (const spillway::pipeline_error& e) {
    EXPECT_NE(std::string(e.what()).find("stop here"), std::string::npos) << e.what();
  }
  const auto written = rep.written();
  ASSERT_GE(written.size(), 2u);
  for (const c_block& w : written)
    for (index_t i = w.row0; i < w.row0 + w.rows; ++i)
      for (index_t j = w.col0; j < w.col0 + w.cols; ++j)
        ASSERT_EQ(c[static_cast<std::size_t>(i * 500 + j)], 50.0f);
}

TEST(OutOfCoreGemmGpu, BudgetBelowOneBlockIsRefusedWithTheMinimum) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  std::vector<float> a(1000 * 700, 1.0f), b(700 * 900, 1.0f), c(1000 * 900, std::nanf(""));
  ooc_options oo;
  oo.budget = spillway::memory_budget(1000);
  try {
    (void)gemm_out_of_core(1.0f, row_major<const float>(a.data(), 1000, 700),
                           row_major<const float>(b.data(), 700, 900), 0.0f, row_major(c.data(), 1000, 900),
                           {}, oo);
    FAIL() << "a 1000-byte budget was accepted";
  } catch (const spillway::logic_error& e) {
    const std::string msg = e.what();
    // Pageable C: its blocks are staged, so 8 slots (each a 128 x 128 float C block) by default,
    // and A's and B's caches two 128 x 128 panels each: run_tasks's one budget check refuses it.
    EXPECT_NE(msg.find("run_tasks: budget 1000 bytes is too small for 8 slot(s) of 65536 bytes and 262144 "
                       "reserved bytes; the minimum budget is 786432 bytes"),
              std::string::npos)
        << msg;
  }
  for (float x : c) ASSERT_TRUE(std::isnan(x)) << "C was touched by a refused job";
}

/// The job's one budget check is run_tasks's, and it counts every device byte the job allocates:
/// the panel caches and raw buffers (reserved, allocated by the job's setup only after the check)
/// and per slot the C block, the accumulator block and a forced split-K's workspace (lent to the
/// blocks' GEMMs, which allocate nothing). One byte short of the smallest plan's bytes is refused
/// before anything is allocated, the message naming the slots, the reserved bytes and the minimum;
/// exactly that budget runs and matches the host reference.
template <class T, class TC>
void budget_below_every_plan_then_the_minimum(const std::string& label, layout la, const gemm_options& o) {
  using Acc = accumulator_t<T>;
  const auto seed = spillway::test::seed("ooc-budget-" + label);
  const index_t m = 300, n = 280, k = 333;
  std::mt19937_64 g(seed);
  auto a = make_matrix<T>(m, k, {la, false, 0, 0}, 1, 0, g);
  auto b = make_matrix<T>(k, n, {layout::col_major, false, 0, 0}, 1, 0, g);
  auto c = make_output<TC>(m, n, {layout::row_major, false, 0, 0}, 1, 0, false, g);  // NaN: β = 0
  const std::vector<TC> c0 = c.buf;
  const gemm_path path = resolve_path<T>(o, 0);
  // The smallest plan as gemm_out_of_core plans it on device 0 with pageable C (staged, 8 slots).
  ooc_plan_request r;
  r.m = m;
  r.n = n;
  r.k = k;
  r.in_bytes = sizeof(T);
  r.out_bytes = sizeof(TC);
  r.acc_bytes = sizeof(Acc);
  r.c_is_acc = std::is_same_v<TC, Acc>;
  r.stage_a = path != gemm_path::simt && la == layout::col_major;
  r.split_k = o.split_k;
  r.budget_bytes = 1;
  r.refuse_over_budget = false;
  const ooc_plan smallest = choose_ooc_plan(r, ooc_copy_out::automatic, false, 0);
  const std::size_t per_slot = spillway::detail::slot_device_bytes(smallest.slot_buffer_bytes());
  const std::size_t need = smallest.reserved_bytes() + smallest.slots * per_slot;
  ASSERT_EQ(need, smallest.device_bytes);
  ASSERT_GT(smallest.split_k_bytes, 0u);
  ooc_trace trace;
  trace.setup_seconds = -1;
  ooc_options oo;
  oo.devices = {0};
  oo.lock = spillway::page_lock::never;
  oo.trace = &trace;
  // A budget below every plan (one byte): the planner hands its smallest plan on and run_tasks,
  // the job's one budget check, refuses it with that plan's figures before any set-up. (One byte
  // under `need` is not below every plan: the search may fit fewer slots into it, and runs.)
  oo.budget = spillway::memory_budget(1);
  try {
    (void)gemm_out_of_core(Acc(1), a.cview(), b.cview(), Acc(0), c.view, o, oo);
    ADD_FAILURE() << label << ": a budget of one byte was accepted";
  } catch (const spillway::logic_error& e) {
    const std::string msg = e.what();
    const std::string want = "run_tasks: budget 1 bytes is too small for " + std::to_string(smallest.slots) +
                             " slot(s) of " + std::to_string(per_slot) + " bytes and " +
                             std::to_string(smallest.reserved_bytes()) +
                             " reserved bytes; the minimum budget is " + std::to_string(need) + " bytes";
    EXPECT_NE(msg.find(want), std::string::npos) << label << ": " << msg << "\nwanted: " << want;
  }
  EXPECT_EQ(trace.setup_seconds, -1.0)
      << label << ": the job set up (allocated its caches) before the refusal";
  for (std::size_t i = 0; i < c.buf.size(); ++i)
    ASSERT_EQ(std::memcmp(&c.buf[i], &c0[i], sizeof(TC)), 0) << label << ": C was touched by a refused job";

  // The minimum the refusal states runs.
  oo.budget = spillway::memory_budget(need);
  const ooc_report rep = gemm_out_of_core(Acc(1), a.cview(), b.cview(), Acc(0), c.view, o, oo);
  const std::string what = label + " [" + rep.plan.describe() + "]";
  ASSERT_TRUE(rep.job.complete()) << what;
  EXPECT_GE(trace.setup_seconds, 0.0) << what;
  EXPECT_LE(rep.plan.device_bytes, need) << what;
  EXPECT_GT(rep.plan.split_k_bytes, 0u) << what;
  EXPECT_EQ(rep.job.device_bytes_per_device,
            rep.plan.slots * spillway::detail::slot_device_bytes(rep.plan.slot_buffer_bytes()))
      << what;
  const arithmetic ar = arithmetic_for<T, TC>(std::is_same_v<T, float> && path != gemm_path::simt);
  const matrix_view<const TC> cref{
      c0.data() + (c.view.data - c.buf.data()), c.view.rows, c.view.cols, c.view.ld, c.view.order, 0};
  const auto ref = compute_reference_fast<T, T, TC>(1.0, a.cview(), b.cview(), 0.0, cref, 1, identity{}, ar);
  EXPECT_TRUE(check_output<TC>(c.buf, c0, c.view, 1, ref, what + " [ran " + to_string(path) + "]"));
}

TEST(OutOfCoreGemmGpu, RunTasksRefusesABudgetBelowEveryPlanAndRunsAtTheStatedMinimum) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  gemm_options o;
  o.split_k = 3;  // simt float: k chunks of 128 accumulate in C, each GEMM split in 3
  budget_below_every_plan_then_the_minimum<float, float>("float-split3", layout::row_major, o);
  // bf16 into bf16: an accumulator block per slot too; a column-major A is transposed on load on
  // a tensor-core path (raw buffers reserved), so the lent workspace's GEMMs stage nothing.
  o.split_k = 2;
  budget_below_every_plan_then_the_minimum<__nv_bfloat16, __nv_bfloat16>("bf16-split2-colA",
                                                                         layout::col_major, o);
}

TEST(OutOfCoreGemmGpu, TwoGpus) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  for (const auto& devices : spillway::test::two_worker_lists()) {
  SCOPED_TRACE(spillway::test::list_name(devices));
  const auto seed = spillway::test::seed("ooc-two-gpus");
  ooc_case cs;
  cs.m = 1500;
  cs.n = 700;
  cs.k = 400;
  cs.devices = devices;
  cs.min_blocks = 12;
  cs.bands = true;
  ooc_report rep;
  ASSERT_TRUE((run_ooc<float, float>(cs, gemm_options{}, seed, &rep)));
  ASSERT_EQ(rep.job.devices.size(), 2u);
  EXPECT_GT(rep.job.tasks_per_device[0], 0u);
  EXPECT_GT(rep.job.tasks_per_device[1], 0u);
  // Each device's blocks' copies went over its own link: the split sums to the job's bytes.
  ASSERT_EQ(rep.job.bytes_per_device.size(), 2u);
  EXPECT_GT(rep.job.bytes_per_device[0], 0u);
  EXPECT_GT(rep.job.bytes_per_device[1], 0u);
  EXPECT_EQ(rep.job.bytes_per_device[0] + rep.job.bytes_per_device[1], rep.job.bytes_moved);
  cs.beta_zero = false;
  cs.pinned = true;
  ASSERT_TRUE((run_ooc<__nv_bfloat16, float>(cs, gemm_options{}, seed + 1, &rep)));
  }
}

}  // namespace
