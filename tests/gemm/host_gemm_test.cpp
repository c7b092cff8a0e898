// Host side of the GEMM module: host_gemm against a naive double-precision triple loop (every
// layout/transpose combination, every type, batches with a broadcast operand, every epilogue,
// k = 0 / m = 0 semantics), every bad argument (a logic_error naming the value, C untouched), and
// the host-only planning the device dispatcher uses (canonical form, path choice, split-K,
// staging need). Bounds: see gemm_check.hpp.
#include <spillway/gemm/detail/validate.hpp>
#include <spillway/gemm/host_gemm.hpp>
#include <spillway/gemm/tuning.hpp>

#include <support/gpu_test.hpp>

#include "gemm_check.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace spillway::gemm;
using namespace spillway::gemm::test;
using spillway::index_t;

const storage kRow{layout::row_major, false, 0, 0};
const storage kCol{layout::col_major, false, 0, 0};
const storage kRowT{layout::row_major, true, 0, 0};
const storage kColT{layout::col_major, true, 0, 0};
const std::vector<storage> kOperandStorages = {kRow, kCol, kRowT, kColT};

storage padded(storage s, index_t pad) {
  s.pad = pad;
  return s;
}

template <class T>
constexpr bool is_int_v = std::is_same_v<T, std::int8_t>;

struct shape {
  index_t m, n, k;
};

/// One host_gemm call checked against the reference. batch > 1: A broadcast (stride 0) when
/// bcast_a, B and C strided with gaps.
template <class T, class TC, class Epi = identity>
void run_case(const shape& s, storage sa, storage sb, storage sc, index_t batch, bool bcast_a, bool beta_zero,
              std::uint64_t seed, Epi epi = {}) {
  std::mt19937_64 g(seed);
  const double alpha = is_int_v<T> ? 2.0 : 1.5, beta = beta_zero ? 0.0 : (is_int_v<T> ? -3.0 : -0.75);
  auto a = make_matrix<T>(s.m, s.k, sa, batch, bcast_a ? -1 : 3, g);
  auto b = make_matrix<T>(s.k, s.n, sb, batch, 5, g);
  auto c = make_output<TC>(s.m, s.n, sc, batch, 7, !beta_zero, g);
  if constexpr (is_int_v<T>) {
    // β·C is formed in the int32 accumulator: a float C of integers keeps the check exact.
    if (!beta_zero)
      for (auto& x : c.buf) x = static_cast<TC>(random_value<std::int8_t>(g));
  }
  const std::vector<TC> before = c.buf;
  const arithmetic ar = arithmetic_for<T, TC>(false);
  const matrix_view<const TC> c0{before.data() + (c.view.data - c.buf.data()),
                                 c.view.rows,
                                 c.view.cols,
                                 c.view.ld,
                                 c.view.order,
                                 c.view.batch_stride};
  const auto ref = compute_reference<T, T, TC>(alpha, a.cview(), b.cview(), beta, c0, batch, epi, ar);
  gemm_options o;
  o.batch_count = batch;
  using S = accumulator_t<T>;
  host_gemm(static_cast<S>(alpha), a.cview(), b.view, static_cast<S>(beta), c.view, o, epi);
  const std::string what = std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) +
                           " A " + describe(sa) + " B " + describe(sb) + " C " + describe(sc) + " batch " +
                           std::to_string(batch) + (beta_zero ? " beta=0" : " beta!=0");
  EXPECT_TRUE(check_output<TC>(c.buf, before, c.view, batch, ref, what));
}

template <class T, class TC>
void every_layout(const std::string& label) {
  const auto seed = spillway::test::seed("host-layouts-" + label);
  const std::vector<shape> shapes = {{1, 1, 1}, {5, 3, 1}, {37, 29, 53}};
  int n = 0;
  for (const auto& s : shapes)
    for (const auto& sa : kOperandStorages)
      for (const auto& sb : kOperandStorages)
        for (const auto& sc : {kRow, padded(kCol, 2)}) {
          const bool beta_zero = (n++ % 2) == 0;
          run_case<T, TC>(s, padded(sa, n % 3), sb, sc, 1, false, beta_zero,
                          seed + static_cast<std::uint64_t>(n));
        }
  // More than one host cache block in every dimension (64 x 64 x 256), one layout each.
  for (const auto& sa : kOperandStorages) {
    ++n;
    run_case<T, TC>({70, 130, 300}, sa, kOperandStorages[static_cast<std::size_t>(n) % 4],
                    n % 2 ? kRow : kCol, 1, false, n % 2 == 0, seed + static_cast<std::uint64_t>(n));
  }
}

TEST(HostGemm, EveryLayoutFloat) {
  every_layout<float, float>("float");
}
TEST(HostGemm, EveryLayoutDouble) {
  every_layout<double, double>("double");
}
TEST(HostGemm, EveryLayoutHalf) {
  every_layout<__half, float>("half");
}
TEST(HostGemm, EveryLayoutBf16ToBf16) {
  every_layout<__nv_bfloat16, __nv_bfloat16>("bf16-bf16");
}
TEST(HostGemm, EveryLayoutFloatToHalf) {
  every_layout<float, __half>("float-half");
}
TEST(HostGemm, EveryLayoutInt8Exact) {
  every_layout<std::int8_t, std::int32_t>("int8");
}
TEST(HostGemm, EveryLayoutInt8ToFloat) {
  every_layout<std::int8_t, float>("int8-float");
}
TEST(HostGemm, EveryLayoutComplex) {
  every_layout<cfloat, cfloat>("complex");
}
TEST(HostGemm, EveryLayoutE4m3) {
  every_layout<__nv_fp8_e4m3, float>("e4m3");
}
TEST(HostGemm, EveryLayoutE5m2ToBf16) {
  every_layout<__nv_fp8_e5m2, __nv_bfloat16>("e5m2-bf16");
}

TEST(HostGemm, Fp8ScalesMultiplyAlpha) {
  // C = α·scale_a·scale_b·A·B + β·C: the FP8 products and their FP32 sums of small values are exact,
  // so the result equals the reference built from the dequantized values to FP32 rounding.
  const auto seed = spillway::test::seed("host-fp8-scales");
  std::mt19937_64 g(seed);
  const index_t m = 9, n = 7, k = 33;
  std::vector<__nv_fp8_e4m3> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(k * n));
  for (auto& x : a) x = random_value<__nv_fp8_e4m3>(g);
  for (auto& x : b) x = random_value<__nv_fp8_e4m3>(g);
  std::vector<float> c(static_cast<std::size_t>(m * n), 0.5f);
  gemm_options o;
  o.scale_a = 0.375f;
  o.scale_b = 6.0f;
  host_gemm(1.5f, row_major<const __nv_fp8_e4m3>(a.data(), m, k),
            row_major<const __nv_fp8_e4m3>(b.data(), k, n), -2.0f, row_major(c.data(), m, n), o);
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j) {
      double sum = 0;
      for (index_t x = 0; x < k; ++x)
        sum += static_cast<double>(static_cast<float>(a[static_cast<std::size_t>(i * k + x)])) *
               static_cast<double>(static_cast<float>(b[static_cast<std::size_t>(x * n + j)]));
      const double want = 1.5 * 0.375 * 6.0 * sum - 2.0 * 0.5;
      EXPECT_NEAR(c[static_cast<std::size_t>(i * n + j)], want, 1e-5 * (1 + std::fabs(want)))
          << "(" << i << ", " << j << ") seed " << seed;
    }
}

TEST(HostGemm, BatchedWithBroadcastOperand) {
  const auto seed = spillway::test::seed("host-batched");
  for (bool bcast : {false, true})
    for (const auto& sc : {kRow, kCol}) {
      run_case<float, float>({19, 23, 41}, kRow, kColT, sc, 4, bcast, false, seed + (bcast ? 1 : 2));
      run_case<std::int8_t, std::int32_t>({19, 23, 41}, kCol, kRow, sc, 3, bcast, true, seed + 3);
    }
}

/// A user epilogue that depends on the position in C (so a lost row/column swap shows).
struct position_shift {
  template <class V>
  V operator()(V v, index_t r, index_t c) const {
    return v + static_cast<V>(r) * V(0.25) - static_cast<V>(c) * V(0.125);
  }
};

TEST(HostGemm, EveryEpilogueInBothOutputLayouts) {
  const auto seed = spillway::test::seed("host-epilogues");
  const shape s{33, 47, 65};
  std::mt19937_64 g(seed);
  std::vector<float> brow(static_cast<std::size_t>(s.m)), bcol(static_cast<std::size_t>(s.n));
  for (auto& x : brow) x = random_value<float>(g);
  for (auto& x : bcol) x = random_value<float>(g);
  for (const auto& sc : {kRow, kCol, padded(kColT, 1)}) {
    run_case<float, float>(s, kRow, kRow, sc, 1, false, false, seed + 1, bias_per_row<float>{brow.data()});
    run_case<float, float>(s, kCol, kRowT, sc, 1, false, true, seed + 2, bias_per_col<float>{bcol.data()});
    run_case<float, float>(s, kRow, kCol, sc, 1, false, false, seed + 3, relu{});
    run_case<float, float>(s, kRow, kCol, sc, 1, false, false, seed + 4, gelu{});
    run_case<float, float>(s, kRow, kCol, sc, 1, false, false, seed + 5, clamp<float>{-0.5f, 0.75f});
    run_case<float, __nv_bfloat16>(
        s, kRow, kCol, sc, 2, true, false, seed + 6,
        chain(bias_per_row<float>{brow.data()}, bias_per_col<float>{bcol.data()}, relu{}));
    run_case<float, float>(s, kColT, kCol, sc, 1, false, false, seed + 7, position_shift{});
    run_case<std::int8_t, std::int32_t>(s, kRow, kCol, sc, 1, false, false, seed + 8,
                                        chain(relu{}, clamp<int>{0, 900}));
  }
}

TEST(HostGemm, KZeroScalesC) {
  const auto seed = spillway::test::seed("host-k0");
  std::mt19937_64 g(seed);
  for (const auto& sc : {kRow, padded(kCol, 3)}) {
    for (bool beta_zero : {true, false}) {
      auto c = make_output<float>(7, 5, sc, 2, 4, !beta_zero, g);
      const auto before = c.buf;
      std::vector<float> dummy(5, 1.0f);
      gemm_options o;
      o.batch_count = 2;
      // A 7 x 0 and B 0 x 5 may have null data: nothing of them is read.
      host_gemm(1.0f, row_major<const float>(nullptr, 7, 0), row_major<const float>(nullptr, 0, 5),
                beta_zero ? 0.0f : 2.0f, c.view, o, bias_per_col<float>{dummy.data()});
      for (index_t q = 0; q < 2; ++q)
        for (index_t i = 0; i < 7; ++i)
          for (index_t j = 0; j < 5; ++j) {
            const float* p = &c.view.batch(q)(i, j);
            const float want =
                beta_zero ? 1.0f : 2.0f * before[static_cast<std::size_t>(p - c.buf.data())] + 1.0f;
            ASSERT_EQ(*p, want) << "k = 0, beta " << (beta_zero ? 0 : 2) << " at (" << q << "," << i << ","
                                << j << ")";
          }
    }
  }
}

TEST(HostGemm, EmptyOutputTouchesNothing) {
  std::vector<float> c(4, 3.0f);
  std::vector<float> a(100, 1.0f);
  host_gemm(1.0f, row_major(a.data(), 0, 10), row_major(a.data(), 10, 4), 0.0f, row_major(c.data(), 0, 4));
  host_gemm(1.0f, row_major(a.data(), 4, 10), row_major(a.data(), 10, 0), 0.0f, row_major(c.data(), 4, 0));
  host_gemm(1.0f, row_major<float>(nullptr, 0, 0), row_major<float>(nullptr, 0, 3), 0.0f,
            row_major<float>(nullptr, 0, 3));
  for (float x : c) EXPECT_EQ(x, 3.0f);
}

TEST(HostGemm, FastEnoughForTheTests) {
  // 384^3 float: 57 M multiply-adds. The tests' references must stay far under a second.
  const index_t n = 384;
  std::mt19937_64 g(1);
  auto a = make_matrix<float>(n, n, kRow, 1, 0, g), b = make_matrix<float>(n, n, kCol, 1, 0, g);
  std::vector<float> c(static_cast<std::size_t>(n * n));
  const auto t0 = std::chrono::steady_clock::now();
  host_gemm(1.0f, a.cview(), b.cview(), 0.0f, row_major(c.data(), n, n));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("host_gemm 384^3 float: %.3f s (%.2f GFLOP/s)\n", s, 2.0 * n * n * n / s / 1e9);
  EXPECT_LT(s, 5.0);  // generous: CI machines are shared; well under 1 s on an idle core
}

// ---- bad arguments ---------------------------------------------------------------------------

/// Runs `f`, expects a spillway::logic_error whose message contains every one of `parts`.
void expect_refusal(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no logic_error; expected one mentioning '" << parts.front() << "'";
  } catch (const spillway::logic_error& e) {
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "message: " << e.what() << "\n  lacks: " << p;
  }
}

TEST(HostGemm, BadArgumentsNameTheValueAndLeaveCUntouched) {
  std::vector<float> a(1000, 1.0f), b(1000, 1.0f), c(1000, 7.0f);
  const auto before = c;
  auto A = row_major(a.data(), 8, 6), B = row_major(b.data(), 6, 5);
  auto C = row_major(c.data(), 8, 5);
  auto call = [&](matrix_view<float> x, matrix_view<float> y, matrix_view<float> z, gemm_options o = {}) {
    return [=] { host_gemm(1.0f, x, y, 0.5f, z, o); };
  };
  auto with = [](matrix_view<float> v, auto edit) {
    edit(v);
    return v;
  };
  expect_refusal(call(with(A, [](auto& v) { v.rows = -3; }), B, C), {"a.rows", "-3"});
  expect_refusal(call(A, with(B, [](auto& v) { v.cols = -1; }), C), {"b.cols", "-1"});
  expect_refusal(call(with(A, [](auto& v) { v.ld = 5; }), B, C), {"a's leading dimension 5", "6"});
  expect_refusal(call(A, with(B, [](auto& v) { v.ld = 4; }), C), {"b's leading dimension 4", "5"});
  expect_refusal(call(A, B, col_major(c.data(), 8, 5, 7)), {"c's leading dimension 7", "8"});
  expect_refusal(call(A.t().t(), with(B.t(), [](auto& v) { v.ld = 2; }).t(), C), {"b's leading dimension 2"});
  expect_refusal(call(with(A, [](auto& v) { v.data = nullptr; }), B, C), {"a.data is null", "8 x 6"});
  expect_refusal(call(A, B, with(C, [](auto& v) { v.data = nullptr; })), {"c.data is null"});
  expect_refusal(call(A, row_major(b.data(), 7, 5), C), {"a.cols must equal b.rows", "7 x 5"});
  expect_refusal(call(A, B, row_major(c.data(), 9, 5)), {"c has 9 rows"});
  expect_refusal(call(A, B, row_major(c.data(), 8, 4)), {"c has 4 columns"});
  gemm_options o;
  o.batch_count = 0;
  expect_refusal(call(A, B, C, o), {"batch_count is 0"});
  o.batch_count = -2;
  expect_refusal(call(A, B, C, o), {"batch_count is -2"});
  o.batch_count = 3;
  expect_refusal(call(A, B, row_major(c.data(), 8, 5, 5, 39), o), {"c's batch stride 39", "footprint 40"});
  expect_refusal(call(A, B, row_major(c.data(), 8, 5, 5, 0), o), {"c's batch stride 0", "overlap"});
  expect_refusal(call(A, B, col_major(c.data(), 8, 5, 9, 43), o), {"c's batch stride 43", "footprint 44"});
  expect_refusal(call(with(A, [](auto& v) { v.batch_stride = -48; }), B, row_major(c.data(), 8, 5, 5, 40), o),
                 {"a's batch stride is -48"});
  gemm_options sk;
  sk.split_k = -1;
  expect_refusal(call(A, B, C, sk), {"split_k is -1"});
  EXPECT_EQ(c, before);
}

TEST(HostGemm, ScalesAreCheckedPerType) {
  std::vector<float> a(64, 1.0f), b(64, 1.0f), c(64, 7.0f);
  std::vector<__nv_fp8_e4m3> a8(64, __nv_fp8_e4m3(1.0f)), b8(64, __nv_fp8_e4m3(1.0f));
  const auto before = c;
  gemm_options o;
  o.scale_a = 2.0f;
  expect_refusal(
      [&] {
        host_gemm(1.0f, row_major(a.data(), 4, 4), row_major(b.data(), 4, 4), 0.0f, row_major(c.data(), 4, 4),
                  o);
      },
      {"scale_a is 2", "FP8 inputs only"});
  for (const float bad :
       {0.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    gemm_options f;
    f.scale_b = bad;
    expect_refusal(
        [&] {
          host_gemm(1.0f, row_major<const __nv_fp8_e4m3>(a8.data(), 4, 4),
                    row_major<const __nv_fp8_e4m3>(b8.data(), 4, 4), 0.0f, row_major(c.data(), 4, 4), f);
        },
        {"scale_b is", "finite and non-zero"});
  }
  EXPECT_EQ(c, before);
}

// ---- planning --------------------------------------------------------------------------------

TEST(GemmPlan, CanonicalFormOfEachLayout) {
  std::vector<float> a(100), b(100), c(100);
  // Row-major C: A and B as given; K-major when A is row-major and B column-major ("TN").
  detail::with_canonical_problem(1.0f, row_major<const float>(a.data(), 4, 6, 8),
                                 col_major<const float>(b.data(), 6, 5, 7), 0.0f,
                                 row_major(c.data(), 4, 5, 9), 1, identity{}, [&](const auto& p) {
                                   EXPECT_EQ(p.m, 4);
                                   EXPECT_EQ(p.n, 5);
                                   EXPECT_EQ(p.k, 6);
                                   EXPECT_TRUE(p.a_kmajor);
                                   EXPECT_TRUE(p.b_kmajor);
                                   EXPECT_EQ(p.lda, 8);
                                   EXPECT_EQ(p.ldb, 7);
                                   EXPECT_EQ(p.ldc, 9);
                                   EXPECT_EQ(p.a, a.data());
                                 });
  // Column-major C: computed as Cᵀ = Bᵀ·Aᵀ; m and n trade, B becomes the rows operand.
  detail::with_canonical_problem(
      1.0f, col_major<const float>(a.data(), 4, 6), row_major<const float>(b.data(), 6, 5), 0.0f,
      col_major(c.data(), 4, 5, 6), 1, bias_per_row<float>{a.data()}, [&](const auto& p) {
        EXPECT_EQ(p.m, 5);
        EXPECT_EQ(p.n, 4);
        EXPECT_EQ(p.a, b.data());
        EXPECT_FALSE(p.a_kmajor);
        EXPECT_FALSE(p.b_kmajor);
        EXPECT_EQ(p.ldc, 6);
        // The per-row bias of C is per-column in Cᵀ: no swap_frame wrapper.
        EXPECT_TRUE((std::is_same_v<std::decay_t<decltype(p.epi)>, bias_per_col<float>>));
      });
  detail::with_canonical_problem(
      1.0f, row_major<const float>(a.data(), 4, 6), row_major<const float>(b.data(), 6, 5), 0.0f,
      col_major(c.data(), 4, 5), 1, position_shift{}, [&](const auto& p) {
        EXPECT_TRUE((std::is_same_v<std::decay_t<decltype(p.epi)>, detail::swap_frame<position_shift>>));
        EXPECT_EQ(p.epi(1.0f, 2, 3), position_shift{}(1.0f, 3, 2));
      });
}

TEST(GemmPlan, AutomaticFollowsTheMeasuredRanking) {
  // Every type of the table, in each math mode that changes its arithmetic, has a ranking row that
  // ends with simt; automatic returns that row's first family the device and build can run.
  const int mma = detail::path_feature_mma, wg = detail::path_feature_wgmma;
  for (const gemm_type_info& t : gemm_type_table) {
    for (const bool tf32 : {false, true}) {
      const path_ranking* row = path_ranking_of(t.code, tf32);
      ASSERT_NE(row, nullptr) << t.short_name << (tf32 ? " (tf32)" : "");
      ASSERT_GE(row->count, 1);
      EXPECT_EQ(row->order[row->count - 1], gemm_path::simt) << t.short_name;
      EXPECT_NE(std::string(row->measured), "");
    }
  }
  gemm_options o;
  struct machine {
    int cc, features;
  };
  for (const machine m :
       {machine{90, mma | wg}, machine{90, mma}, machine{86, mma}, machine{100, mma | wg}, machine{75, 0}}) {
    const auto first_runnable = [&](auto tag, bool tf32) {
      using T = decltype(tag);
      gemm_options f;
      f.math = tf32 ? math_mode::tf32 : math_mode::exact;
      const path_ranking* row = path_ranking_of(gemm_type_info_of<T>().code, tf32);
      for (int i = 0; i < row->count; ++i) {
        f.path = row->order[i];
        if (f.path == gemm_path::simt) return f.path;
        try {
          return detail::choose_path<T>(f, m.cc, m.features);
        } catch (const spillway::logic_error&) {
        }
      }
      return gemm_path::simt;
    };
    const auto check = [&](auto tag, bool tf32) {
      using T = decltype(tag);
      o.math = tf32 ? math_mode::tf32 : math_mode::exact;
      EXPECT_EQ(detail::choose_path<T>(o, m.cc, m.features), first_runnable(tag, tf32))
          << gemm_type_info_of<T>().short_name << " cc " << m.cc << " features " << m.features;
    };
    for (const bool tf32 : {false, true}) {
      check(float{}, tf32);
      check(double{}, tf32);
      check(__half{}, tf32);
      check(__nv_bfloat16{}, tf32);
      check(std::int8_t{}, tf32);
      check(cfloat{}, tf32);
      check(__nv_fp8_e4m3{}, tf32);
      check(__nv_fp8_e5m2{}, tf32);
    }
  }
}

TEST(GemmPlan, PathChoice) {
  gemm_options o;
  const int mma = detail::path_feature_mma, wg = detail::path_feature_wgmma;
  EXPECT_EQ(detail::choose_path<__half>(o, 90, mma | wg), gemm_path::wgmma);
  EXPECT_EQ(detail::choose_path<__half>(o, 90, mma), gemm_path::mma_sync);  // sm_90 without the a
  EXPECT_EQ(detail::choose_path<__nv_bfloat16>(o, 80, mma), gemm_path::mma_sync);
  EXPECT_EQ(detail::choose_path<std::int8_t>(o, 100, mma | wg), gemm_path::mma_sync);  // wgmma is 9.0 only
  EXPECT_EQ(detail::choose_path<std::int8_t>(o, 75, 0), gemm_path::simt);
  EXPECT_EQ(detail::choose_path<float>(o, 90, mma | wg), gemm_path::simt);  // exact FP32
  EXPECT_EQ(detail::choose_path<double>(o, 90, mma | wg), gemm_path::mma_sync);
  EXPECT_EQ(detail::choose_path<double>(o, 75, 0), gemm_path::simt);
  EXPECT_EQ(detail::choose_path<cfloat>(o, 90, mma | wg), gemm_path::simt);
  EXPECT_EQ(detail::choose_path<__nv_fp8_e4m3>(o, 90, mma | wg), gemm_path::wgmma);
  EXPECT_EQ(detail::choose_path<__nv_fp8_e5m2>(o, 90, mma), gemm_path::simt);  // FP8 has no mma_sync kernel
  EXPECT_EQ(detail::choose_path<__nv_fp8_e4m3>(o, 89, mma), gemm_path::simt);
  o.math = math_mode::tf32;
  EXPECT_EQ(detail::choose_path<float>(o, 90, mma | wg), gemm_path::wgmma);
  EXPECT_EQ(detail::choose_path<float>(o, 86, mma), gemm_path::mma_sync);
  EXPECT_EQ(detail::choose_path<float>(o, 75, 0), gemm_path::simt);         // automatic falls back to exact
  EXPECT_EQ(detail::choose_path<double>(o, 90, mma), gemm_path::mma_sync);  // tf32 ignored for double

  auto refused = [](auto tag, gemm_options opt, int cc, int feat, std::vector<std::string> parts) {
    using T = decltype(tag);
    expect_refusal([&] { (void)detail::choose_path<T>(opt, cc, feat); }, parts);
  };
  gemm_options f;
  f.path = gemm_path::wgmma;
  refused(float{}, f, 90, mma | wg, {"path wgmma", "float (exact)", "9.0"});
  refused(double{}, f, 90, mma | wg, {"path wgmma", "double", "FP64"});
  refused(cfloat{}, f, 90, mma | wg, {"path wgmma", "complex<float>"});
  refused(__half{}, f, 80, mma, {"path wgmma", "8.0"});
  refused(__half{}, f, 90, mma, {"path wgmma", "sm_90a"});
  f.path = gemm_path::mma_sync;
  refused(float{}, f, 90, mma, {"path mma_sync", "float (exact)", "math_mode::tf32"});
  refused(cfloat{}, f, 90, mma, {"path mma_sync", "complex<float>"});
  refused(std::int8_t{}, f, 75, 0, {"path mma_sync", "7.5"});
  refused(__nv_fp8_e4m3{}, f, 90, mma | wg,
          {"path mma_sync", "e4m3 has no mma_sync kernel", "wgmma or simt"});
  EXPECT_EQ(detail::choose_path<double>(f, 80, mma), gemm_path::mma_sync);
  f.path = gemm_path::simt;
  f.math = math_mode::tf32;
  refused(float{}, f, 90, mma | wg, {"path simt", "float (tf32)"});
  EXPECT_EQ(detail::choose_path<__half>(f, 90, mma | wg), gemm_path::simt);
}

TEST(GemmPlan, SplitK) {
  // The default shape (128 x 128, one block per SM: the tensor-core launchers): 64 x 8192 x 8192
  // on 132 SMs -> 64 tiles -> 2 slices of 4096 (128 blocks).
  auto p = detail::plan_split_k(64, 8192, 8192, 1, 0, 132);
  EXPECT_EQ(p.slices(), 2);
  EXPECT_EQ(p.ks, 4096);
  EXPECT_EQ(p.rem, 0);
  // One tile, k = 8192: capped at k / 256 = 32 slices.
  p = detail::plan_split_k(100, 100, 8192, 1, 0, 132);
  EXPECT_EQ(p.slices(), 32);
  EXPECT_EQ(p.ks % 256, 0);
  // Enough tiles, or a batch, or small k: no split.
  EXPECT_FALSE(detail::plan_split_k(8192, 8192, 256, 1, 0, 132).split());
  EXPECT_FALSE(detail::plan_split_k(64, 8192, 8192, 2, 0, 132).split());
  EXPECT_FALSE(detail::plan_split_k(64, 64, 300, 1, 0, 132).split());
  EXPECT_FALSE(detail::plan_split_k(64, 64, 8192, 1, 1, 132).split());
  // Forced: slices of a multiple of 16 covering k exactly, the last possibly shorter.
  for (int s : {2, 3, 7})
    for (index_t k : {17, 100, 1000, 4099}) {
      p = detail::plan_split_k(64, 64, k, 1, s, 132);
      EXPECT_EQ(p.full * p.ks + p.rem, k);
      EXPECT_EQ(p.ks % 16, 0);
      EXPECT_LT(p.rem, p.ks);
      EXPECT_LE(p.slices(), s);
      if (k >= 16 * s * 2) {
        EXPECT_GE(p.slices(), 2) << "k " << k << " split " << s;
      }
    }
  // The launcher's own tile and residency: the SIMT float launcher runs m <= 64 on 64 x 128 tiles,
  // four blocks per SM -> 528 slots for 64 tiles -> 8 slices of 1024 (512 blocks).
  const detail::split_tile_shape narrow{64, 128, 4};
  p = detail::plan_split_k(64, 8192, 8192, 1, 0, 132, narrow);
  EXPECT_EQ(p.slices(), 8);
  EXPECT_EQ(p.ks, 1024);
  EXPECT_EQ(p.rem, 0);
  // 128 x 128 tiles, two blocks per SM: 128 x 8192 x 8192 -> 64 tiles in 264 slots -> 4 slices.
  const detail::split_tile_shape large{128, 128, 2};
  p = detail::plan_split_k(128, 8192, 8192, 1, 0, 132, large);
  EXPECT_EQ(p.slices(), 4);
  EXPECT_EQ(p.ks, 2048);
  // Tiles that fill the slots (8192 x 8192 x 256: 4096 tiles) are never split.
  EXPECT_FALSE(detail::plan_split_k(8192, 8192, 256, 1, 0, 132, large).split());
  // Residency counts: 128 tiles fill 132 one-block SMs (no split) but only half of 264 slots.
  EXPECT_FALSE(detail::plan_split_k(1024, 2048, 8192, 1, 0, 132, {128, 128, 1}).split());
  EXPECT_EQ(detail::plan_split_k(1024, 2048, 8192, 1, 0, 132, large).slices(), 2);
  p = detail::plan_split_k(64, 64, 4099, 1, 7, 132);
  EXPECT_EQ(p.ks, 592);
  EXPECT_EQ(p.full, 6);
  EXPECT_EQ(p.rem, 4099 - 6 * 592);
}

// gemm_workspace_bytes's parts: the staged copy of an operand that is not tensor_ready (one
// matrix for a broadcast, rows x k rounded up to 16 bytes) and the split-K workspace (slices x m x n).
TEST(GemmPlan, WorkspaceElements) {
  alignas(16) static float buf[64];
  using detail::operand;
  EXPECT_EQ(detail::staged_elements<float>(operand<float>{buf, 8, true, 0}, 100, 7, 1), 0);  // ready
  EXPECT_EQ(detail::staged_elements<float>(operand<float>{buf, 100, false, 0}, 100, 7, 1), 100 * 8);
  EXPECT_EQ(detail::staged_elements<float>(operand<float>{buf + 1, 8, true, 0}, 100, 7, 3), 100 * 8);
  EXPECT_EQ(detail::staged_elements<float>(operand<float>{buf, 100, false, 800}, 100, 7, 3), 3 * 100 * 8);
  EXPECT_EQ(detail::staged_elements<std::int8_t>(operand<std::int8_t>{nullptr, 5, true, 0}, 10, 5, 1),
            10 * 16);
  const detail::split_plan none = detail::plan_split_k(64, 64, 8192, 1, 1, 132);
  EXPECT_EQ(detail::split_workspace_elements(64, 48, none), 0);
  const detail::split_plan seven = detail::plan_split_k(64, 48, 4099, 1, 7, 132);
  EXPECT_EQ(detail::split_workspace_elements(64, 48, seven), 7 * 64 * 48);
}

TEST(GemmPlan, TensorCorePreconditions) {
  alignas(16) static float buf[64];
  EXPECT_TRUE(detail::tensor_ready<float>(buf, 8, true, 0));
  EXPECT_FALSE(detail::tensor_ready<float>(buf, 8, false, 0));     // MN-major
  EXPECT_FALSE(detail::tensor_ready<float>(buf + 1, 8, true, 0));  // base
  EXPECT_FALSE(detail::tensor_ready<float>(buf, 6, true, 0));      // ld
  EXPECT_FALSE(detail::tensor_ready<float>(buf, 8, true, 10));     // batch stride
  EXPECT_EQ(detail::staged_ld<std::int8_t>(17), 32);
  EXPECT_EQ(detail::staged_ld<double>(17), 18);
  EXPECT_EQ(detail::staged_ld<__half>(16), 16);
}

}  // namespace
