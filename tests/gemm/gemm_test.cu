// The GEMM on the device: every element type on every path the device runs (forced; a path the
// device cannot run is reported, and on an sm_90a build on an H100/H200 there is none), every
// A/B/C layout, edge shapes (1 x 1 x 1, k = 1, primes, random shapes that are multiples of no
// tile, k = 4099), strided batches with a broadcast operand, β = 0 over NaN-poisoned C and β ≠ 0,
// narrower outputs, epilogues in both C layouts, split-K forced and automatic, unaligned leading
// dimensions and offsets (the staging copy), k = 0, forced-path refusals, gemm_workspace_bytes
// against the pool's high-water mark over the call, and a C past 2^31
// elements. All on a non-default stream, against a double-precision host reference with the
// bound derived in gemm_check.hpp (int8 → int32 exact).
#include <spillway/core/device_buffer.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/gemm.cuh>

#include <support/gpu_test.hpp>

#include "gemm_check.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace spillway::gemm;
using namespace spillway::gemm::test;
using spillway::device_buffer;
using spillway::index_t;
using spillway::stream_view;

const storage kRow{layout::row_major, false, 0, 0};
const storage kCol{layout::col_major, false, 0, 0};

template <class T>
constexpr bool is_int_v = std::is_same_v<T, std::int8_t>;
template <class T>
constexpr bool is_fp8_v = spillway::gemm::detail::takes_scales<T>();

template <class T>
struct device_matrix {
  device_buffer<T> buf;
  matrix_view<T> view;
};

/// The host matrix's whole buffer on the device, the view rebased onto it (same offsets).
template <class T>
device_matrix<T> to_device(const host_matrix<T>& h, stream_view s) {
  device_matrix<T> d{device_buffer<T>(h.buf.size(), s), h.view};
  d.buf.copy_from_host_async(cuda::std::span<const T>(h.buf.data(), h.buf.size()), s);
  d.view.data = d.buf.data() + (h.view.data - h.buf.data());
  return d;
}

template <class T>
matrix_view<T> rebase(matrix_view<T> v, const T* from, T* to) {
  v.data = to + (v.data - from);
  return v;
}

struct gpu_case {
  index_t m = 1, n = 1, k = 1;
  storage sa = kRow, sb = kCol, sc = kRow;
  index_t batch = 1;
  bool bcast_a = false;
  bool beta_zero = true;
};

std::string describe(const gpu_case& c, const gemm_options& o) {
  return std::string(to_string(o.path)) + (o.math == math_mode::tf32 ? "/tf32" : "") +
         (o.fp8_accumulate == fp8_accumulation::fast ? "/fast" : "") + " " + std::to_string(c.m) + "x" +
         std::to_string(c.n) + "x" + std::to_string(c.k) + " A " + describe(c.sa) + " B " + describe(c.sb) +
         " C " + describe(c.sc) + (c.batch > 1 ? " batch " + std::to_string(c.batch) : "") +
         (c.bcast_a ? " (A broadcast)" : "") + (c.beta_zero ? " beta=0 over NaN" : " beta!=0") +
         (o.split_k != 0 ? " split_k " + std::to_string(o.split_k) : "");
}

/// One gemm_async on `s` checked against the reference: `epi` runs on the device, `host_epi` (the
/// same function with host pointers) in the reference. A stateful epilogue (clamp, biases) must be
/// passed twice: the defaulted host_epi is value-initialized, not a copy of `epi`.
template <class T, class TC, class Epi = identity, class HostEpi = Epi>
::testing::AssertionResult run_gpu(const gpu_case& cs, gemm_options o, std::uint64_t seed, stream_view s,
                                   Epi epi = {}, HostEpi host_epi = {}) {
  std::mt19937_64 g(seed);
  const double alpha = is_int_v<T> ? 2.0 : 1.5, beta = cs.beta_zero ? 0.0 : (is_int_v<T> ? -3.0 : -0.75);
  double scale = 1.0;  // FP8: the per-tensor scales multiply alpha
  if constexpr (is_fp8_v<T>) {
    o.scale_a = 0.75f;
    o.scale_b = 1.25f;
    scale = 0.75 * 1.25;
  }
  const auto a = make_matrix<T>(cs.m, cs.k, cs.sa, cs.batch, cs.bcast_a ? -1 : 3, g);
  const auto b = make_matrix<T>(cs.k, cs.n, cs.sb, cs.batch, 5, g);
  auto c = make_output<TC>(cs.m, cs.n, cs.sc, cs.batch, 7, !cs.beta_zero, g);
  if constexpr (is_int_v<T>) {
    if (!cs.beta_zero)  // β·C is formed in int32: integer C values keep the check exact
      for (auto& x : c.buf) x = static_cast<TC>(random_value<std::int8_t>(g));
  }
  auto da = to_device(a, s);
  auto db = to_device(b, s);
  auto dc = to_device(c, s);
  o.batch_count = cs.batch;
  const gemm_path path = resolve_path<T>(o, spillway::current_device());
  using S = accumulator_t<T>;
  gemm_async(s, static_cast<S>(alpha), da.view, matrix_view<const T>(db.view), static_cast<S>(beta), dc.view,
             o, epi);
  std::vector<TC> out(c.buf.size());
  dc.buf.copy_to_host_async(cuda::std::span<TC>(out.data(), out.size()), s);
  s.synchronize();
  arithmetic ar = arithmetic_for<T, TC>(std::is_same_v<T, float> && path != gemm_path::simt);
  if (is_fp8_v<T> && path == gemm_path::wgmma) {
    use_fp8_tensor_cores(ar, o.fp8_accumulate == fp8_accumulation::fast, cs.k);
  }
  const matrix_view<const TC> c0 = rebase<const TC>(c.view, c.buf.data(), c.buf.data());
  const auto ref =
      compute_reference_fast<T, T, TC>(alpha * scale, a.cview(), b.cview(), beta, c0, cs.batch, host_epi, ar);
  return check_output<TC>(out, c.buf, rebase<const TC>(c.view, c.buf.data(), out.data()), cs.batch, ref,
                          describe(cs, o) + " [ran " + to_string(path) + "]");
}

/// The forced paths element type T can take on this device (float: exact on simt, TF32 on the
/// tensor paths); those the device cannot run are printed (none on an sm_90a build on a 9.0 GPU).
template <class T>
std::vector<gemm_options> paths_for() {
  std::vector<gemm_options> out;
  for (gemm_path p : {gemm_path::simt, gemm_path::mma_sync, gemm_path::wgmma}) {
    gemm_options o;
    o.path = p;
    if (std::is_same_v<T, float> && p != gemm_path::simt) o.math = math_mode::tf32;
    try {
      (void)resolve_path<T>(o, spillway::current_device());
      out.push_back(o);
      if (is_fp8_v<T> && p == gemm_path::wgmma) {  // both accumulation modes of the FP8 kernel
        o.fp8_accumulate = fp8_accumulation::fast;
        out.push_back(o);
      }
    } catch (const spillway::logic_error& e) {
      std::cout << "[ path     ] not run: " << e.what() << "\n";
    }
  }
  return out;
}

/// Shapes: the edges, primes, k = 4099, and three random shapes from the seed (never multiples of
/// 8 in m or n, so no tile size divides them).
std::vector<gpu_case> shapes(std::uint64_t seed) {
  std::vector<gpu_case> v = {{1, 1, 1},       {45, 33, 1},    {1, 77, 40},
                             {127, 131, 257}, {67, 45, 4099}, {130, 260, 72}};
  std::mt19937_64 g(seed);
  std::uniform_int_distribution<index_t> d(2, 300);
  for (int i = 0; i < 3; ++i) {
    gpu_case c;
    c.m = d(g) | 1;
    c.n = d(g) | 3;
    c.k = d(g);
    v.push_back(c);
  }
  return v;
}

/// Every path x shape x A/B/C layout; β alternates; batches with a broadcast A; unaligned leading
/// dimensions and sub-view offsets (the staging path of the tensor-core launchers).
template <class T, class TC>
void every_path_layout_shape(const std::string& label) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = spillway::test::seed("gpu-" + label);
  spillway::stream s;
  int n = 0;
  for (const gemm_options& o : paths_for<T>()) {
    for (gpu_case cs : shapes(seed)) {
      for (layout la : {layout::row_major, layout::col_major})
        for (layout lb : {layout::row_major, layout::col_major})
          for (layout lc : {layout::row_major, layout::col_major}) {
            cs.sa = {la, false, 0, 0};
            cs.sb = {lb, false, 0, 0};
            cs.sc = {lc, false, 0, 0};
            cs.beta_zero = (n++ % 2) == 0;
            ASSERT_TRUE((run_gpu<T, TC>(cs, o, seed + static_cast<std::uint64_t>(n), s)));
          }
    }
    // Batches: A broadcast (stride 0) or strided, B strided, C apart with gaps, both C layouts.
    for (bool bcast : {true, false})
      for (layout lc : {layout::row_major, layout::col_major}) {
        gpu_case cs{61, 75, 99, {layout::col_major, false, 0, 0}, kCol, {lc, false, 0, 0}, 3, bcast, !bcast};
        ASSERT_TRUE((run_gpu<T, TC>(cs, o, seed + static_cast<std::uint64_t>(++n), s)));
      }
    // Leading dimensions and base addresses that are not 16-byte multiples.
    for (layout la : {layout::row_major, layout::col_major}) {
      gpu_case cs{53,
                  47,
                  131,
                  {la, false, 1, 1},
                  {layout::col_major, false, 3, 1},
                  {layout::row_major, false, 1, 1},
                  2,
                  false,
                  false};
      ASSERT_TRUE((run_gpu<T, TC>(cs, o, seed + static_cast<std::uint64_t>(++n), s)));
      cs.sb = {layout::row_major, true, 1, 3};
      cs.beta_zero = true;
      ASSERT_TRUE((run_gpu<T, TC>(cs, o, seed + static_cast<std::uint64_t>(++n), s)));
    }
  }
  // And whatever `automatic` picks.
  gpu_case cs{100, 90, 300, kRow, kCol, kRow, 1, false, true};
  ASSERT_TRUE((run_gpu<T, TC>(cs, gemm_options{}, seed + 999, s)));
}

TEST(GemmGpu, FloatEveryPathLayoutShape) {
  every_path_layout_shape<float, float>("float");
}
TEST(GemmGpu, DoubleEveryPathLayoutShape) {
  every_path_layout_shape<double, double>("double");
}
TEST(GemmGpu, HalfEveryPathLayoutShape) {
  every_path_layout_shape<__half, float>("half");
}
TEST(GemmGpu, Bf16EveryPathLayoutShape) {
  every_path_layout_shape<__nv_bfloat16, float>("bf16");
}
TEST(GemmGpu, Int8EveryPathLayoutShapeExact) {
  every_path_layout_shape<std::int8_t, std::int32_t>("int8");
}
TEST(GemmGpu, ComplexEveryPathLayoutShape) {
  every_path_layout_shape<cfloat, cfloat>("complex");
}
// Narrower outputs: float accumulation written as bf16 / half, int8 products as float.
TEST(GemmGpu, E4m3EveryPathLayoutShape) {
  every_path_layout_shape<__nv_fp8_e4m3, float>("e4m3");
}
TEST(GemmGpu, E5m2ToBf16EveryPathLayoutShape) {
  every_path_layout_shape<__nv_fp8_e5m2, __nv_bfloat16>("e5m2-bf16");
}

/// The two FP8 accumulation modes of the wgmma kernel on a long k where reduced-precision adds show:
/// all-positive e4m3 operands (no cancellation: every addition loses to the running sum), k = 16384.
/// Each mode within its bound (gemm_check.hpp); promoted far closer to the FP32 host GEMM than the
/// reduced-precision model allows for the whole k. The measured errors are printed.
TEST(GemmGpu, Fp8PromotedAccumulationHoldsOnLongK) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  gemm_options probe;
  probe.path = gemm_path::wgmma;
  try {
    (void)resolve_path<__nv_fp8_e4m3>(probe, spillway::current_device());
  } catch (const spillway::logic_error& e) {
    GTEST_SKIP() << "no wgmma here: " << e.what();
  }
  const auto seed = spillway::test::seed("gpu-fp8-long-k");
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> u(0.5f, 1.0f);
  const index_t m = 130, n = 260, k = 16384;
  std::vector<__nv_fp8_e4m3> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(n * k));
  for (auto& x : a) x = __nv_fp8_e4m3(u(g));
  for (auto& x : b) x = __nv_fp8_e4m3(u(g));
  // Σ a·b in double through the tests' host reference (no bound wanted here: arithmetic{}); every
  // term is positive, so the same sums are also Σ |a|·|b|.
  const std::vector<float> c0(static_cast<std::size_t>(m * n), 0.0f);  // β = 0: never read
  const std::vector<double> ref = compute_reference_fast<__nv_fp8_e4m3, __nv_fp8_e4m3, float>(
                                      1.0, row_major<const __nv_fp8_e4m3>(a.data(), m, k),
                                      row_major<const __nv_fp8_e4m3>(b.data(), n, k).t(), 0.0,
                                      row_major<const float>(c0.data(), m, n), 1, identity{}, arithmetic{})
                                      .value;
  const std::vector<double>& mag = ref;
  spillway::stream s;
  device_buffer<__nv_fp8_e4m3> da(a.size(), s), db(b.size(), s);
  device_buffer<float> dc(ref.size(), s);
  da.copy_from_host_async(cuda::std::span<const __nv_fp8_e4m3>(a.data(), a.size()), s);
  db.copy_from_host_async(cuda::std::span<const __nv_fp8_e4m3>(b.data(), b.size()), s);
  double worst[2] = {0, 0};
  for (const fp8_accumulation mode : {fp8_accumulation::promoted, fp8_accumulation::fast}) {
    gemm_options o = probe;
    o.fp8_accumulate = mode;
    o.split_k = 1;
    dc.fill_bytes_async(0xFF, s);  // NaN
    gemm_async(s, 1.0f, row_major<const __nv_fp8_e4m3>(da.data(), m, k),
               row_major<const __nv_fp8_e4m3>(db.data(), n, k).t(), 0.0f, row_major(dc.data(), m, n), o);
    std::vector<float> out(ref.size());
    dc.copy_to_host_async(cuda::std::span<float>(out.data(), out.size()), s);
    s.synchronize();
    arithmetic ar = arithmetic_for<__nv_fp8_e4m3, float>(false);
    use_fp8_tensor_cores(ar, mode == fp8_accumulation::fast, k);
    double& w = worst[mode == fp8_accumulation::fast ? 1 : 0];
    for (std::size_t e = 0; e < out.size(); ++e) {
      const double err = std::fabs(static_cast<double>(out[e]) - ref[e]);
      const double tol =
          finish_element<__nv_fp8_e4m3>(
              1.0, 0.0, ref[e], mag[e], [](index_t, index_t) { return 0.0f; }, 0, 0, k, identity{}, ar)
              .second;
      ASSERT_LE(err, tol) << to_string(mode) << " element " << e << ": " << out[e] << " vs " << ref[e]
                          << " seed " << seed;
      w = std::max(w, err / ref[e]);
    }
  }
  std::cout << "[ fp8      ] k = " << k << ", all-positive e4m3: worst relative error promoted " << worst[0]
            << ", fast " << worst[1] << "\n";
  // Promotion is what makes the difference here (H200: 3.6e-5 promoted, 0.29 fast, 2026-11-29): a
  // kernel that skipped it would show the fast mode's drift in both rows.
  EXPECT_LE(worst[0], std::ldexp(1.0, -10));
  EXPECT_LT(10 * worst[0], worst[1]);
}

TEST(GemmGpu, Bf16ToBf16EveryPathLayoutShape) {
  every_path_layout_shape<__nv_bfloat16, __nv_bfloat16>("bf16-bf16");
}
TEST(GemmGpu, FloatToHalfEveryPathLayoutShape) {
  every_path_layout_shape<float, __half>("float-half");
}
TEST(GemmGpu, Int8ToFloatEveryPathLayoutShape) {
  every_path_layout_shape<std::int8_t, float>("int8-float");
}

// ---- split-K ---------------------------------------------------------------------------------

template <class T, class TC>
void split_k_forced(const std::string& label) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = spillway::test::seed("gpu-splitk-" + label);
  spillway::stream s;
  int n = 0;
  for (gemm_options o : paths_for<T>())
    for (int split : {3, 7})
      for (layout lc : {layout::row_major, layout::col_major}) {
        o.split_k = split;
        gpu_case cs{77, 65,    1000,      kRow, {layout::row_major, false, 0, 0}, {lc, false, 0, 0},
                    1,  false, n % 2 == 0};
        ASSERT_TRUE((run_gpu<T, TC>(cs, o, seed + static_cast<std::uint64_t>(++n), s)));
        // A split batch (each entry split in turn) with a remainder slice (4099 = 6 x 592 + 547 for 7).
        gpu_case cb{33, 29, 4099, {layout::col_major, false, 0, 0}, kCol, {lc, false, 0, 0}, 2, true, false};
        ASSERT_TRUE((run_gpu<T, TC>(cb, o, seed + static_cast<std::uint64_t>(++n), s)));
      }
}

TEST(GemmGpu, SplitKForcedFloat) {
  split_k_forced<float, float>("float");
}
TEST(GemmGpu, SplitKForcedDouble) {
  split_k_forced<double, double>("double");
}
TEST(GemmGpu, SplitKForcedHalf) {
  split_k_forced<__half, float>("half");
}
TEST(GemmGpu, SplitKForcedBf16ToBf16) {
  split_k_forced<__nv_bfloat16, __nv_bfloat16>("bf16-bf16");
}
TEST(GemmGpu, SplitKForcedInt8) {
  split_k_forced<std::int8_t, std::int32_t>("int8");
}
TEST(GemmGpu, SplitKForcedComplex) {
  split_k_forced<cfloat, cfloat>("complex");
}

/// 64 x 2048 x 8192: 16 output tiles of 128 x 128 on 132 SMs, so the automatic plan splits k.
template <class T, class TC>
void split_k_auto(const std::string& label) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = spillway::test::seed("gpu-splitk-auto-" + label);
  const int sms = spillway::tile::multiprocessor_count(spillway::current_device());
  const auto plan = detail::plan_split_k(64, 2048, 8192, 1, 0, sms);
  std::cout << "[ split-k  ] 64 x 2048 x 8192 on " << sms << " SMs: " << plan.slices() << " slices of "
            << plan.ks << "\n";
  EXPECT_TRUE(plan.split());
  spillway::stream s;
  int n = 0;
  for (const gemm_options& o : paths_for<T>()) {
    gpu_case cs{64,   2048,  8192,
                kRow, kCol,  {n % 2 ? layout::col_major : layout::row_major, false, 0, 0},
                1,    false, n % 2 == 0};
    ASSERT_TRUE((run_gpu<T, TC>(cs, o, seed + static_cast<std::uint64_t>(++n), s)));
  }
}

TEST(GemmGpu, SplitKAutoSkinnyFloat) {
  split_k_auto<float, float>("float");
}
TEST(GemmGpu, SplitKAutoSkinnyDouble) {
  split_k_auto<double, double>("double");
}
TEST(GemmGpu, SplitKAutoSkinnyBf16) {
  split_k_auto<__nv_bfloat16, float>("bf16");
}
TEST(GemmGpu, SplitKAutoSkinnyInt8) {
  split_k_auto<std::int8_t, std::int32_t>("int8");
}

// ---- epilogues ---------------------------------------------------------------------------------

/// A user epilogue that depends on the position (a lost row/column swap shows), through swap_frame
/// for a column-major C.
struct position_shift {
  template <class V>
  SPILLWAY_HD V operator()(V v, index_t r, index_t c) const {
    return v + static_cast<V>(r) * V(0.25) - static_cast<V>(c) * V(0.125);
  }
};

template <class V>
struct device_bias {
  std::vector<V> host;
  device_buffer<V> dev;
};
template <class V>
device_bias<V> make_bias(index_t n, std::mt19937_64& g, stream_view s) {
  device_bias<V> b{std::vector<V>(static_cast<std::size_t>(n)),
                   device_buffer<V>(static_cast<std::size_t>(n), s)};
  for (auto& x : b.host) x = random_value<V>(g);
  b.dev.copy_from_host_async(cuda::std::span<const V>(b.host.data(), b.host.size()), s);
  return b;
}

/// Every built-in epilogue (and a user functor) in both C layouts, with k = 0 through the same
/// instantiations. Double keeps the instantiations few (two paths); the tensor-core epilogue code
/// is covered by half with the bias chain.
TEST(GemmGpu, EveryEpilogueBothOutputLayouts) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = spillway::test::seed("gpu-epilogues");
  spillway::stream s;
  std::mt19937_64 g(seed);
  const index_t m = 93, n = 71;
  auto brow = make_bias<double>(m, g, s);
  auto bcol = make_bias<double>(n, g, s);
  auto browf = make_bias<float>(m, g, s);
  auto bcolf = make_bias<float>(n, g, s);
  int i = 0;
  for (layout lc : {layout::row_major, layout::col_major}) {
    for (index_t k : {index_t{129}, index_t{0}}) {
      for (const gemm_options& o : paths_for<double>()) {
        for (bool beta_zero : {true, false}) {
          gpu_case cs{m, n,     k,        kRow, {layout::row_major, false, 0, 0}, {lc, false, 0, 0},
                      1, false, beta_zero};
          const auto u = seed + static_cast<std::uint64_t>(++i);
          ASSERT_TRUE((run_gpu<double, double>(
              cs, o, u, s,
              chain(bias_per_row<double>{brow.dev.data()}, bias_per_col<double>{bcol.dev.data()}, relu{}),
              chain(bias_per_row<double>{brow.host.data()}, bias_per_col<double>{bcol.host.data()},
                    relu{}))));
          ASSERT_TRUE((run_gpu<double, double>(cs, o, u + 100, s, gelu{})));
          ASSERT_TRUE((run_gpu<double, double>(cs, o, u + 200, s, clamp<double>{-0.5, 0.75}, clamp<double>{-0.5, 0.75})));
          ASSERT_TRUE((run_gpu<double, double>(cs, o, u + 300, s, position_shift{})));
        }
      }
    }
    for (const gemm_options& o : paths_for<__half>()) {
      gpu_case cs{m, n, 200, {layout::col_major, false, 0, 0}, kCol, {lc, false, 0, 0}, 2, true, false};
      ASSERT_TRUE((run_gpu<__half, float>(
          cs, o, seed + static_cast<std::uint64_t>(++i), s,
          chain(bias_per_row<float>{browf.dev.data()}, bias_per_col<float>{bcolf.dev.data()}, relu{}),
          chain(bias_per_row<float>{browf.host.data()}, bias_per_col<float>{bcolf.host.data()}, relu{}))));
    }
  }
}

// ---- semantics and refusals ----------------------------------------------------------------------

TEST(GemmGpu, EmptyOutputIsANoOp) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  spillway::stream s;
  device_buffer<float> a(64, s), c(8, s);
  c.fill_bytes_async(0x7f, s);
  // m = 0 and n = 0 (B and A still real): nothing runs, nothing is written.
  gemm_async(s, 1.0f, row_major<const float>(a.data(), 0, 8), row_major<const float>(a.data(), 8, 8), 0.0f,
             row_major(c.data(), 0, 8));
  gemm_async(s, 1.0f, row_major<const float>(a.data(), 8, 8), row_major<const float>(a.data(), 8, 0), 0.0f,
             row_major(c.data(), 8, 0));
  std::vector<float> h(8);
  c.copy_to_host_async(cuda::std::span<float>(h.data(), h.size()), s);
  s.synchronize();
  for (float x : h) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &x, 4);
    EXPECT_EQ(bits, 0x7f7f7f7fu);
  }
}

TEST(GemmGpu, ForcedPathRefusalsNamePathAndDevice) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const int dev = spillway::current_device();
  const int cc = spillway::tile::compute_capability(dev);
  spillway::stream s;
  device_buffer<float> a(64, s), c(16, s);
  c.fill_bytes_async(0x7f, s);
  auto expect = [&](auto&& f, const std::string& part) {
    try {
      f();
      ADD_FAILURE() << "no logic_error for " << part;
    } catch (const spillway::logic_error& e) {
      const std::string w = e.what();
      EXPECT_NE(w.find(part), std::string::npos) << w;
      EXPECT_NE(w.find(std::to_string(cc / 10) + "." + std::to_string(cc % 10)), std::string::npos) << w;
    }
  };
  gemm_options o;
  o.path = gemm_path::wgmma;  // exact float
  expect(
      [&] {
        gemm_async(s, 1.0f, row_major(a.data(), 4, 4), row_major(a.data(), 4, 4), 0.0f,
                   row_major(c.data(), 4, 4), o);
      },
      "path wgmma");
  o.path = gemm_path::mma_sync;
  expect([&] { (void)resolve_path<cfloat>(o, dev); }, "path mma_sync");
  o.path = gemm_path::wgmma;
  expect([&] { (void)resolve_path<double>(o, dev); }, "FP64");
  o.path = gemm_path::simt;
  o.math = math_mode::tf32;
  expect([&] { (void)resolve_path<float>(o, dev); }, "path simt");
  // A bad leading dimension on the device path: refused before anything is enqueued.
  try {
    gemm_async(s, 1.0f, row_major(a.data(), 4, 4, 3), row_major(a.data(), 4, 4), 0.0f,
               row_major(c.data(), 4, 4));
    ADD_FAILURE() << "no logic_error for lda 3";
  } catch (const spillway::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("a's leading dimension 3"), std::string::npos) << e.what();
  }
  std::vector<std::uint32_t> h(16);
  SPILLWAY_CUDA_TRY(cudaMemcpyAsync(h.data(), c.data(), 64, cudaMemcpyDeviceToHost, s.value()));
  s.synchronize();
  for (auto x : h) EXPECT_EQ(x, 0x7f7f7f7fu) << "C was written by a refused call";
  // What automatic picks on this device.
  if (cc == 90 && (spillway::tile::build_features(dev) & spillway::tile::feature_wgmma)) {
    EXPECT_EQ(resolve_path<__half>(gemm_options{}, dev), gemm_path::wgmma);
    EXPECT_EQ(resolve_path<double>(gemm_options{}, dev), gemm_path::mma_sync);
    EXPECT_EQ(resolve_path<float>(gemm_options{}, dev), gemm_path::simt);
  }
}

/// Bytes spillway's pool on `device` hands out at most during f(), above what it held before.
template <class F>
std::size_t pool_high_water_during(int device, F&& f) {
  cudaMemPool_t pool = spillway::device_pool(device);
  std::uint64_t base = 0, high = 0, zero = 0;
  SPILLWAY_CUDA_TRY(cudaDeviceSynchronize());
  SPILLWAY_CUDA_TRY(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &base));
  SPILLWAY_CUDA_TRY(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));  // resets to current
  f();
  SPILLWAY_CUDA_TRY(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &high));
  return static_cast<std::size_t>(high - base);
}

/// gemm_workspace_bytes(a, b, c, o) against what gemm(…, a, b, c, o) takes from the pool: equal
/// when every temporary is a multiple of 2 MiB (`exact`), else at least it and at most 2 MiB
/// more per temporary (the pool's rounding is its own).
template <class T, class TC>
void expect_workspace_is_allocated(index_t m, index_t n, index_t k, layout la, index_t lda_pad,
                                   const gemm_options& o, std::size_t expected, bool exact) {
  const int dev = spillway::current_device();
  spillway::stream s;
  const index_t lda = (la == layout::row_major ? k : m) + lda_pad;
  device_buffer<T> a(static_cast<std::size_t>(lda * (la == layout::row_major ? m : k)), s);
  device_buffer<T> b(static_cast<std::size_t>(k * n), s);
  device_buffer<TC> c(static_cast<std::size_t>(m * n), s);
  SPILLWAY_CUDA_TRY(cudaMemsetAsync(a.data(), 0, a.size() * sizeof(T), s.value()));
  SPILLWAY_CUDA_TRY(cudaMemsetAsync(b.data(), 0, b.size() * sizeof(T), s.value()));
  s.synchronize();
  const matrix_view<const T> av{a.data(), m, k, lda, la, 0};
  const matrix_view<const T> bv{b.data(), k, n, k, layout::col_major, 0};
  const matrix_view<TC> cv{c.data(), m, n, n, layout::row_major, 0};
  const std::size_t stated = gemm_workspace_bytes(av, bv, cv, o);  // resolves the path: probes first
  const std::string what = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + " " +
                           to_string(resolve_path<T>(o, dev)) + " split_k " + std::to_string(o.split_k);
  if (expected != static_cast<std::size_t>(-1)) {
    EXPECT_EQ(stated, expected) << what;
  }
  using S = accumulator_t<T>;
  const std::size_t used = pool_high_water_during(dev, [&] { gemm(S(1), av, bv, S(0), cv, o); });
  if (exact) {
    EXPECT_EQ(used, stated) << what;
  } else {
    EXPECT_GE(used, stated) << what;
    EXPECT_LE(used, stated + 3 * (std::size_t{2} << 20)) << what;
  }
}

TEST(GemmGpu, WorkspaceBytesIsWhatTheCallAllocates) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  gemm_options o;
  o.split_k = 1;  // nothing staged (K-major, aligned), nothing split: nothing allocated
  expect_workspace_is_allocated<float, float>(256, 256, 256, layout::row_major, 0, o, 0, true);
  o.path = gemm_path::simt;
  o.split_k = 2;  // 2 slices of 512 x 512 floats: 2 MiB
  expect_workspace_is_allocated<float, float>(512, 512, 2048, layout::row_major, 0, o, std::size_t{2} << 20,
                                              true);
  // A column-major (MN-major) bf16 A on a tensor-core path is staged K-major: 512 x 2048 x 2 bytes
  // = 2 MiB, with 2 split slices of 512 x 512 floats (2 MiB); on simt neither is staged.
  o = gemm_options{};
  o.split_k = 2;
  const bool tensor = resolve_path<__nv_bfloat16>(o, spillway::current_device()) != gemm_path::simt;
  expect_workspace_is_allocated<__nv_bfloat16, float>(512, 512, 2048, layout::col_major, 0, o,
                                                      static_cast<std::size_t>(tensor ? 4 : 2) << 20, true);
  // Automatic split (whatever the device's SM count makes it) of a skinny product.
  o.split_k = 0;
  expect_workspace_is_allocated<__nv_bfloat16, float>(64, 512, 8192, layout::row_major, 0, o,
                                                      static_cast<std::size_t>(-1), false);
  // An odd shape, 3 slices: on a tensor-core path both operands are staged (A's leading dimension
  // 100 and B's 99 are not multiples of 16 bytes), each rows x 104 (99 rounded up to 16 bytes).
  o.split_k = 3;
  const bool half_tensor = resolve_path<__half>(o, spillway::current_device()) != gemm_path::simt;
  const std::size_t staged = half_tensor ? (100 + 70) * 104 * 2 : 0;
  expect_workspace_is_allocated<__half, __half>(100, 70, 99, layout::row_major, 1, o,
                                                staged + 3 * 100 * 70 * 4, false);
}

TEST(GemmGpu, SynchronousFormOnItsOwnStream) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = spillway::test::seed("gpu-sync");
  std::mt19937_64 g(seed);
  const index_t m = 50, n = 40, k = 30;
  auto a = make_matrix<float>(m, k, kRow, 1, 0, g), b = make_matrix<float>(k, n, kCol, 1, 0, g);
  auto c = make_output<float>(m, n, kCol, 1, 0, false, g);
  spillway::stream s;
  auto da = to_device(a, s), db = to_device(b, s), dc = to_device(c, s);
  s.synchronize();
  gemm(1.5f, da.view, db.view, 0.0f, dc.view);  // returns with C written
  std::vector<float> out(c.buf.size());
  SPILLWAY_CUDA_TRY(cudaMemcpy(out.data(), dc.buf.data(), out.size() * 4, cudaMemcpyDeviceToHost));
  const auto ref = compute_reference_fast<float, float, float>(
      1.5, a.cview(), b.cview(), 0.0, c.cview(), 1, identity{}, arithmetic_for<float, float>(false));
  EXPECT_TRUE(check_output<float>(out, c.buf, rebase<const float>(c.view, c.buf.data(), out.data()), 1, ref,
                                  "gemm()"));
}

// ---- an output past 2^31 elements -------------------------------------------------------------

/// C of 40,000 x 54,000 = 2.16e9 elements (8.6 GB of float): offsets past 2^31 in the kernels'
/// stores. Every element must be written (no NaN poison left); sampled rows at the end are
/// checked against the reference. k = 8.
template <class T>
void output_past_2_to_31(const gemm_options& o) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const index_t m = 40000, n = 54000, k = 8;
  static_assert(40000LL * 54000LL > (1LL << 31));
  const auto seed = spillway::test::seed("gpu-large");
  std::mt19937_64 g(seed);
  auto a = make_matrix<T>(m, k, kRow, 1, 0, g), b = make_matrix<T>(k, n, kCol, 1, 0, g);
  spillway::stream s;
  auto da = to_device(a, s), db = to_device(b, s);
  device_buffer<float> c(static_cast<std::size_t>(m * n), s);
  c.fill_bytes_async(0xff, s);  // NaN
  gemm_async(s, 1.0f, da.view, db.view, 0.0f, row_major(c.data(), m, n), o);
  std::vector<float> out(static_cast<std::size_t>(m * n));
  c.copy_to_host_async(cuda::std::span<float>(out.data(), out.size()), s);
  s.synchronize();
  std::int64_t unwritten = 0;
  for (float x : out) unwritten += std::isnan(x) ? 1 : 0;
  EXPECT_EQ(unwritten, 0);
  const bool tf32 =
      std::is_same_v<T, float> && resolve_path<T>(o, spillway::current_device()) != gemm_path::simt;
  const arithmetic ar = arithmetic_for<T, float>(tf32);
  std::uniform_int_distribution<index_t> col(0, n - 1);
  long bad = 0;
  for (index_t i : {index_t{0}, m / 2, m - 2, m - 1}) {
    for (int t = 0; t < 2000; ++t) {
      const index_t j = t < 4 ? (t < 2 ? t : n - 4 + t) : col(g);
      double ref = 0, sabs = 0;
      for (index_t x = 0; x < k; ++x) {
        const double p = to_wide(a.view(i, x)) * to_wide(b.view(x, j));
        ref += p;
        sabs += std::fabs(p);
      }
      const double tol = 1.25 * ((k + 2) * ar.u_acc + 2 * ar.u_op) * sabs + 16 * ar.u_acc * sabs;
      const double got = out[static_cast<std::size_t>(i * n + j)];
      if (!(std::fabs(got - ref) <= tol) && bad++ < 5)
        ADD_FAILURE() << "C(" << i << "," << j << ") = " << got << ", want " << ref;
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(GemmLargeGpu, FloatSimtOutputPast2To31Elements) {
  gemm_options o;
  o.path = gemm_path::simt;
  output_past_2_to_31<float>(o);
}
TEST(GemmLargeGpu, HalfAutomaticOutputPast2To31Elements) {
  output_past_2_to_31<__half>(gemm_options{});
}

}  // namespace
