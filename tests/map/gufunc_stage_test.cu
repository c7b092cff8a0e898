// The gufunc staged path (small dense cores through shared memory) against the host target and
// against the direct path, on random inputs with printed seeds; and the cases that fall back.
#include <spillway/map.cuh>

#include "support/gpu_test_fn.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using spillway::index_t;
using shape_t = std::vector<index_t>;

namespace {

/// Small nonzero integers: products and sums of a few thousand stay exact in float and double.
template <class T>
std::vector<T> small_ints(index_t n, std::mt19937_64& g) {
  std::uniform_int_distribution<int> d(-8, 8);
  std::vector<T> v(static_cast<std::size_t>(n));
  for (auto& x : v) {
    const int k = d(g);
    x = static_cast<T>(k == 0 ? 3 : k);
  }
  return v;
}

template <class T>
spillway::device_array<T> poisoned_out(const shape_t& s, spillway::stream_view st) {
  spillway::device_array<T> a(s, st);
  a.buffer().fill_bytes_async(0xFF, st);
  return a;
}

/// What the launcher decides for these arguments (the same planner calls).
template <class... Args>
spillway::detail::gufunc_stage_plan stage_plan(const char* sig, const Args&... args) {
  const auto p = spillway::detail::plan_gufunc(spillway::parse_signature(sig),
                                               {spillway::detail::operand_layout(spillway::detail::as_operand(args))...},
                                               nullptr);
  return spillway::detail::plan_gufunc_stage(p, {spillway::detail::stage_input(spillway::detail::as_operand(args))...});
}

/// A spec with the staged path's shared slots per team forced (1: load, wait, compute; 2: the next
/// instance's copies in flight while computing).
spillway::gufunc_spec buffered(const char* sig, int buffers) {
  spillway::gufunc_spec sp(sig);
  sp.stage_buffers = buffers;
  return sp;
}

/// The tile buffers the launcher picks for plan `sp` on the current device with `requested`.
int buffers_on_device(const spillway::detail::gufunc_stage_plan& sp, int requested) {
  int dev = 0, optin = 0;
  SPILLWAY_CUDA_TRY(cudaGetDevice(&dev));
  SPILLWAY_CUDA_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  return spillway::detail::gufunc_stage_buffers(sp, requested, optin);
}

/// An upper bound on the staged kernel's resident grid for plan `sp` on the current device: at
/// most 8 blocks of 256 threads per SM, and no more than the SM's shared memory holds (two slots
/// per team each). Beyond this many tiles of per_block instances, every team walks several instances.
index_t resident_bound(const spillway::detail::gufunc_stage_plan& sp) {
  int dev = 0, sms = 0, smem_sm = 0;
  SPILLWAY_CUDA_TRY(cudaGetDevice(&dev));
  SPILLWAY_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  SPILLWAY_CUDA_TRY(cudaDeviceGetAttribute(&smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
  const index_t per_sm = std::max<index_t>(1, std::min<index_t>(8, smem_sm / (2 * sp.smem_bytes)));
  return sms * per_sm;
}

struct row_dot {
  template <class T>
  __host__ __device__ void operator()(spillway::gufunc_team t, spillway::ndview<const T> a, spillway::ndview<const T> b,
                                      spillway::ndview<T> out) const {
    T acc = 0;
    for (index_t i = t.rank(); i < a.extent(0); i += t.size()) acc += a(i) * b(i);
    acc = t.sum(acc);
    if (t.leader()) out() = acc;
  }
};

/// (m,o),(m,o),()->(m,o): a team writes the elementwise product times a scalar.
struct scaled_product {
  template <class T>
  __host__ __device__ void operator()(spillway::gufunc_team t, spillway::ndview<const T> a, spillway::ndview<const T> b,
                                      T s, spillway::ndview<T> out) const {
    const index_t o = a.extent(1);
    for (index_t i = t.rank(); i < a.extent(0) * o; i += t.size()) out(i / o, i % o) = a(i / o, i % o) * b(i / o, i % o) * s;
  }
};

template <class T>
void check_row_dot(index_t rows, index_t n, std::mt19937_64& g, spillway::stream_view st) {
  const auto ha = small_ints<T>(rows * n, g);
  const auto hb = small_ints<T>(rows * n, g);
  auto da = spillway::device_array<T>::from_host(ha, {rows, n}, st);
  auto db = spillway::device_array<T>::from_host(hb, {rows, n}, st);
  const auto ref = spillway::gufunc_host<T>("(n),(n)->()", row_dot{}, spillway::make_view(ha.data(), {rows, n}),
                                            spillway::make_view(hb.data(), {rows, n}));
  const auto sp = stage_plan("(n),(n)->()", da, db);
  // Staged unless 8 instances of both cores exceed gufunc_stage_max_bytes (1000 doubles do).
  EXPECT_EQ(sp.ok, rows > 0 && 8 * 2 * n * static_cast<index_t>(sizeof(T)) <= spillway::detail::gufunc_stage_max_bytes)
      << "n=" << n << " rows=" << rows;
  auto staged = poisoned_out<T>({rows}, st);
  spillway::gufunc_into_async(st, "(n),(n)->()", staged.view(), row_dot{}, da, db);
  for (int buffers : {1, 2}) {  // both staged kernels, forced
    auto forced = poisoned_out<T>({rows}, st);
    spillway::gufunc_into_async(st, buffered("(n),(n)->()", buffers), forced.view(), row_dot{}, da, db);
    EXPECT_EQ(forced.to_host(st), ref.data) << "n=" << n << " rows=" << rows << " sizeof=" << sizeof(T)
                                            << " stage_buffers=" << buffers;
  }
  auto direct = poisoned_out<T>({rows}, st);
  spillway::gufunc_into_async(st, spillway::gufunc_spec("(n),(n)->()", 0, false), direct.view(), row_dot{}, da, db);
  EXPECT_EQ(staged.to_host(st), ref.data) << "n=" << n << " rows=" << rows << " sizeof=" << sizeof(T);
  EXPECT_EQ(direct.to_host(st), ref.data) << "n=" << n << " rows=" << rows;
}

}  // namespace

// Teams walk several instances (and reuse their slots) only when the tiles of per_block instances
// outnumber the resident blocks: row counts past twice the resident grid's tiles, none a multiple
// of the tile.
SPILLWAY_GPU_TEST_FN(GufuncStagedGpu, PipelinedManyTilesPerBlock) {
  std::mt19937_64 g(spillway::test::seed("GufuncStagedGpu.Pipelined"));
  spillway::stream st;
  struct shape_case {
    index_t rows, n;
  };
  for (const auto c : {shape_case{600011, 1}, shape_case{600011, 3}, shape_case{100003, 63}, shape_case{100003, 64},
                       shape_case{100003, 65}, shape_case{12011, 1000}}) {
    const auto ha = small_ints<float>(c.rows * c.n, g);
    const auto hb = small_ints<float>(c.rows * c.n, g);
    auto da = spillway::device_array<float>::from_host(ha, {c.rows, c.n}, st);
    auto db = spillway::device_array<float>::from_host(hb, {c.rows, c.n}, st);
    const auto sp = stage_plan("(n),(n)->()", da, db);
    ASSERT_TRUE(sp.ok) << "n=" << c.n;
    ASSERT_EQ(buffers_on_device(sp, 0), 1) << "n=" << c.n << ": the automatic choice (one slot per team)";
    ASSERT_EQ(buffers_on_device(sp, 2), 2) << "n=" << c.n << ": two buffers fit on this device";
    ASSERT_EQ(buffers_on_device(sp, 1), 1);
    const index_t tiles = (c.rows + sp.per_block - 1) / sp.per_block;
    EXPECT_GT(tiles, 2 * resident_bound(sp)) << "n=" << c.n << ": too few tiles for several per block";
    EXPECT_NE(c.rows % sp.per_block, 0) << "n=" << c.n << ": the last tile should be partial";
    const auto ref = spillway::gufunc_host<float>("(n),(n)->()", row_dot{}, spillway::make_view(ha.data(), {c.rows, c.n}),
                                                  spillway::make_view(hb.data(), {c.rows, c.n}));
    for (int buffers : {0, 1, 2}) {
      auto out = poisoned_out<float>({c.rows}, st);
      spillway::gufunc_into_async(st, buffered("(n),(n)->()", buffers), out.view(), row_dot{}, da, db);
      EXPECT_EQ(out.to_host(st), ref.data) << "n=" << c.n << " rows=" << c.rows << " stage_buffers=" << buffers;
    }
  }
  // Broadcast loop dims, many tiles: (3000,1,n) with (401,n) -> (3000,401); b's outer stride is 0.
  for (index_t n : {index_t{3}, index_t{64}}) {
    const auto ha = small_ints<float>(3000 * n, g);
    const auto hb = small_ints<float>(401 * n, g);
    auto da = spillway::device_array<float>::from_host(ha, {3000, 1, n}, st);
    auto db = spillway::device_array<float>::from_host(hb, {401, n}, st);
    ASSERT_TRUE(stage_plan("(n),(n)->()", da, db).ok);
    const auto ref = spillway::gufunc_host<float>("(n),(n)->()", row_dot{}, spillway::make_view(ha.data(), {3000, 1, n}),
                                                  spillway::make_view(hb.data(), {401, n}));
    for (int buffers : {1, 2}) {
      auto out = poisoned_out<float>({3000, 401}, st);
      spillway::gufunc_into_async(st, buffered("(n),(n)->()", buffers), out.view(), row_dot{}, da, db);
      EXPECT_EQ(out.to_host(st), ref.data) << "broadcast n=" << n << " stage_buffers=" << buffers;
    }
  }
  // Misaligned rows (one element past a 16-byte boundary: element-sized copies), doubles, and a
  // 2-d core with a scalar on a non-default stream, with two slots per team.
  {
    const index_t rows = 40009, n = 64;
    const auto ha = small_ints<float>(rows * n + 1, g);
    const auto hb = small_ints<float>(rows * n, g);
    auto da = spillway::device_array<float>::from_host(ha, {rows * n + 1}, st);
    auto db = spillway::device_array<float>::from_host(hb, {rows, n}, st);
    const auto av = spillway::make_view<const float>(da.data() + 1, {rows, n});
    const auto sp = stage_plan("(n),(n)->()", av, db);
    ASSERT_TRUE(sp.ok);
    EXPECT_FALSE(sp.ops[1].vec16);
    const auto ref = spillway::gufunc_host<float>("(n),(n)->()", row_dot{}, spillway::make_view(ha.data() + 1, {rows, n}),
                                                  spillway::make_view(hb.data(), {rows, n}));
    for (int buffers : {1, 2}) {
      auto out = poisoned_out<float>({rows}, st);
      spillway::gufunc_into_async(st, buffered("(n),(n)->()", buffers), out.view(), row_dot{}, av, db);
      EXPECT_EQ(out.to_host(st), ref.data) << "misaligned stage_buffers=" << buffers;
    }
  }
  {
    const index_t rows = 50021, n = 65;
    const auto ha = small_ints<double>(rows * n, g);
    const auto hb = small_ints<double>(rows * n, g);
    auto da = spillway::device_array<double>::from_host(ha, {rows, n}, st);
    auto db = spillway::device_array<double>::from_host(hb, {rows, n}, st);
    const auto ref = spillway::gufunc_host<double>("(n),(n)->()", row_dot{}, spillway::make_view(ha.data(), {rows, n}),
                                                   spillway::make_view(hb.data(), {rows, n}));
    auto out = poisoned_out<double>({rows}, st);
    spillway::gufunc_into_async(st, buffered("(n),(n)->()", 2), out.view(), row_dot{}, da, db);
    EXPECT_EQ(out.to_host(st), ref.data) << "double n=65";
  }
  {
    const auto hs = small_ints<double>(40 * 5, g);
    const auto hb = small_ints<double>(20011 * 40 * 5, g);
    auto ds = spillway::device_array<double>::from_host(hs, {40, 5}, st);
    auto db = spillway::device_array<double>::from_host(hb, {20011, 40, 5}, st);
    ASSERT_TRUE(stage_plan("(m,o),(m,o),()->(m,o)", ds, db, 0.5).ok);
    auto out = poisoned_out<double>({20011, 40, 5}, st);
    spillway::gufunc_into_async(st, buffered("(m,o),(m,o),()->(m,o)", 2), out.view(), scaled_product{}, ds, db, 0.5);
    const auto got = out.to_host(st);
    for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], hs[i % 200] * hb[i] * 0.5) << i;
  }
  // No rows: nothing launched, any stage_buffers.
  {
    auto da = spillway::device_array<float>({0, 64}, st);
    auto out = spillway::gufunc_async<float>(st, buffered("(n),(n)->()", 2), row_dot{}, da, da);
    EXPECT_EQ(out.shape(), (shape_t{0}));
    st.synchronize();
  }
  // A bad stage_buffers throws naming the field, before anything is written.
  {
    const auto ha = small_ints<float>(10 * 8, g);
    auto da = spillway::device_array<float>::from_host(ha, {10, 8}, st);
    auto out = poisoned_out<float>({10}, st);
    const auto before = out.to_host(st);
    for (int bad : {-1, 3}) {
      try {
        spillway::gufunc_into_async(st, buffered("(n),(n)->()", bad), out.view(), row_dot{}, da, da);
        ADD_FAILURE() << "stage_buffers=" << bad << " did not throw";
      } catch (const spillway::logic_error& e) {
        EXPECT_NE(std::string(e.what()).find("stage_buffers"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(std::to_string(bad)), std::string::npos) << e.what();
      }
    }
    const auto after = out.to_host(st);
    EXPECT_EQ(std::memcmp(before.data(), after.data(), before.size() * sizeof(float)), 0);
  }
}

// Small enough for compute-sanitizer racecheck, yet teams reuse their slots: 1000-element cores
// take 64 KB (float) per slot set of a block, so one block per SM and more tiles than blocks; the
// last tile is partial.
SPILLWAY_GPU_TEST_FN(GufuncStagedGpu, PipelinedBufferReuseSmall) {
  std::mt19937_64 g(spillway::test::seed("GufuncStagedGpu.PipelinedSmall"));
  spillway::stream st;
  const index_t rows = 1500, n = 1000;
  const auto ha = small_ints<float>(rows * n, g);
  const auto hb = small_ints<float>(rows * n, g);
  auto da = spillway::device_array<float>::from_host(ha, {rows, n}, st);
  auto db = spillway::device_array<float>::from_host(hb, {rows, n}, st);
  const auto sp = stage_plan("(n),(n)->()", da, db);
  ASSERT_TRUE(sp.ok);
  ASSERT_EQ(buffers_on_device(sp, 2), 2);
  const index_t tiles = (rows + sp.per_block - 1) / sp.per_block;
  EXPECT_GT(tiles, resident_bound(sp)) << "every block would take one tile";
  EXPECT_NE(rows % sp.per_block, 0);
  const auto ref = spillway::gufunc_host<float>("(n),(n)->()", row_dot{}, spillway::make_view(ha.data(), {rows, n}),
                                                spillway::make_view(hb.data(), {rows, n}));
  for (int buffers : {1, 2}) {
    auto out = poisoned_out<float>({rows}, st);
    spillway::gufunc_into_async(st, buffered("(n),(n)->()", buffers), out.view(), row_dot{}, da, db);
    EXPECT_EQ(out.to_host(st), ref.data) << "stage_buffers=" << buffers;
  }
}

SPILLWAY_GPU_TEST_FN(GufuncStagedGpu, RowDotExactForCoreSizes) {
  std::mt19937_64 g(spillway::test::seed("GufuncStagedGpu.RowDot"));
  spillway::stream st;
  for (index_t n : {index_t{1}, index_t{3}, index_t{63}, index_t{64}, index_t{65}, index_t{1000}}) {
    check_row_dot<float>(1031, n, g, st);
    check_row_dot<double>(257, n, g, st);
  }
  check_row_dot<float>(1, 64, g, st);
  check_row_dot<float>(33, 64, g, st);  // a tile of 32 plus one instance
}

SPILLWAY_GPU_TEST_FN(GufuncStagedGpu, RealValuesWithinTolerance) {
  std::mt19937_64 g(spillway::test::seed("GufuncStagedGpu.Real"));
  spillway::stream st;
  const index_t rows = 20011, n = 64;
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> ha(static_cast<std::size_t>(rows * n)), hb(ha.size());
  for (auto& x : ha) x = d(g);
  for (auto& x : hb) x = d(g);
  auto da = spillway::device_array<float>::from_host(ha, {rows, n}, st);
  auto db = spillway::device_array<float>::from_host(hb, {rows, n}, st);
  ASSERT_TRUE(stage_plan("(n),(n)->()", da, db).ok);
  auto out = poisoned_out<float>({rows}, st);
  spillway::gufunc_into_async(st, "(n),(n)->()", out.view(), row_dot{}, da, db);
  const auto got = out.to_host(st);
  for (index_t r = 0; r < rows; ++r) {
    double ref = 0, mag = 0;
    for (index_t i = 0; i < n; ++i) {
      const double p = static_cast<double>(ha[static_cast<std::size_t>(r * n + i)]) * hb[static_cast<std::size_t>(r * n + i)];
      ref += p;
      mag += std::fabs(p);
    }
    // float accumulation of 64 terms: |error| <= 64 * 2^-24 * sum|terms| (a loose bound).
    ASSERT_LE(std::fabs(got[static_cast<std::size_t>(r)] - ref), 64 * 0x1p-24 * mag + 1e-30) << "row " << r;
  }
}

SPILLWAY_GPU_TEST_FN(GufuncStagedGpu, FallbacksAndEdges) {
  std::mt19937_64 g(spillway::test::seed("GufuncStagedGpu.Edges"));
  spillway::stream st;
  // Transposed inputs: the core is strided, so the direct path runs.
  {
    const index_t rows = 300, n = 64;
    const auto ha = small_ints<float>(n * rows, g);
    const auto hb = small_ints<float>(rows * n, g);
    auto da = spillway::device_array<float>::from_host(ha, {n, rows}, st);
    auto db = spillway::device_array<float>::from_host(hb, {rows, n}, st);
    const auto at = da.view().transposed();
    EXPECT_FALSE(stage_plan("(n),(n)->()", at, db).ok);
    const auto ref = spillway::gufunc_host<float>("(n),(n)->()", row_dot{}, spillway::make_view(ha.data(), {n, rows}).transposed(),
                                                  spillway::make_view(hb.data(), {rows, n}));
    auto out = poisoned_out<float>({rows}, st);
    spillway::gufunc_into_async(st, "(n),(n)->()", out.view(), row_dot{}, at, db);
    EXPECT_EQ(out.to_host(st), ref.data);
  }
  // Broadcast loop dimensions: (5,1,n) with (7,n) -> (5,7); one operand's loop stride is 0.
  for (index_t n : {index_t{3}, index_t{64}}) {
    const auto ha = small_ints<float>(5 * n, g);
    const auto hb = small_ints<float>(7 * n, g);
    auto da = spillway::device_array<float>::from_host(ha, {5, 1, n}, st);
    auto db = spillway::device_array<float>::from_host(hb, {7, n}, st);
    EXPECT_TRUE(stage_plan("(n),(n)->()", da, db).ok);
    const auto ref = spillway::gufunc_host<float>("(n),(n)->()", row_dot{}, spillway::make_view(ha.data(), {5, 1, n}),
                                                  spillway::make_view(hb.data(), {7, n}));
    ASSERT_EQ(ref.shape, (shape_t{5, 7}));
    auto out = poisoned_out<float>({5, 7}, st);
    spillway::gufunc_into_async(st, "(n),(n)->()", out.view(), row_dot{}, da, db);
    EXPECT_EQ(out.to_host(st), ref.data) << "n=" << n;
    auto alloc = spillway::gufunc_async<float>(st, "(n),(n)->()", row_dot{}, da, db);
    EXPECT_EQ(alloc.to_host(st), ref.data) << "n=" << n;
  }
  // Rows that start one element past a 16-byte boundary: element-sized copies.
  {
    const index_t rows = 129, n = 64;
    const auto ha = small_ints<float>(rows * n + 1, g);
    const auto hb = small_ints<float>(rows * n, g);
    auto da = spillway::device_array<float>::from_host(ha, {rows * n + 1}, st);
    auto db = spillway::device_array<float>::from_host(hb, {rows, n}, st);
    const auto av = spillway::make_view<const float>(da.data() + 1, {rows, n});
    const auto sp = stage_plan("(n),(n)->()", av, db);
    ASSERT_TRUE(sp.ok);
    EXPECT_FALSE(sp.ops[1].vec16);
    EXPECT_TRUE(sp.ops[2].vec16);
    const auto ref = spillway::gufunc_host<float>("(n),(n)->()", row_dot{}, spillway::make_view(ha.data() + 1, {rows, n}),
                                                  spillway::make_view(hb.data(), {rows, n}));
    auto out = poisoned_out<float>({rows}, st);
    spillway::gufunc_into_async(st, "(n),(n)->()", out.view(), row_dot{}, av, db);
    EXPECT_EQ(out.to_host(st), ref.data);
  }
  // A 2-d core with a scalar and a broadcast operand; the output core is written by the team.
  {
    const auto hs = small_ints<double>(40 * 5, g);
    const auto hb = small_ints<double>(100 * 40 * 5, g);
    auto ds = spillway::device_array<double>::from_host(hs, {40, 5}, st);
    auto db = spillway::device_array<double>::from_host(hb, {100, 40, 5}, st);
    const auto sp = stage_plan("(m,o),(m,o),()->(m,o)", ds, db, 0.5);
    ASSERT_TRUE(sp.ok);
    EXPECT_FALSE(sp.ops[3].staged);
    auto out = poisoned_out<double>({100, 40, 5}, st);
    spillway::gufunc_into_async(st, "(m,o),(m,o),()->(m,o)", out.view(), scaled_product{}, ds, db, 0.5);
    const auto got = out.to_host(st);
    for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], hs[i % 200] * hb[i] * 0.5) << i;
  }
  // No rows: nothing is launched, the output (empty) is returned.
  {
    auto da = spillway::device_array<float>({0, 64}, st);
    EXPECT_FALSE(stage_plan("(n),(n)->()", da, da).ok);
    auto out = spillway::gufunc_async<float>(st, "(n),(n)->()", row_dot{}, da, da);
    EXPECT_EQ(out.shape(), (shape_t{0}));
    st.synchronize();
  }
  // Too big for shared memory: 5003 floats per core falls back (and is still right).
  {
    const index_t rows = 17, n = 5003;
    const auto ha = small_ints<float>(rows * n, g);
    auto da = spillway::device_array<float>::from_host(ha, {rows, n}, st);
    EXPECT_FALSE(stage_plan("(n),(n)->()", da, da).ok);
    const auto ref = spillway::gufunc_host<float>("(n),(n)->()", row_dot{}, spillway::make_view(ha.data(), {rows, n}),
                                                  spillway::make_view(ha.data(), {rows, n}));
    auto out = poisoned_out<float>({rows}, st);
    spillway::gufunc_into_async(st, "(n),(n)->()", out.view(), row_dot{}, da, da);
    EXPECT_EQ(out.to_host(st), ref.data);
  }
}
