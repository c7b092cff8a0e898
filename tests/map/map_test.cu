// Device maps, gufuncs and reductions, each checked against the host target on random inputs.
#include <spillway/map.cuh>

#include "support/expect_throw.hpp"
#include "support/gpu_test_fn.hpp"

#include <gtest/gtest.h>

#include <cuda/functional>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using spillway::index_t;
using shape_t = std::vector<index_t>;

namespace {

index_t count(const shape_t& s) {
  index_t n = 1;
  for (index_t e : s) n *= e;
  return n;
}

/// Small integer values (exact in float/double products and short sums), never all zero.
template <class T>
std::vector<T> random_values(index_t n, std::mt19937_64& g, int lo = -64, int hi = 64) {
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<T> v(static_cast<std::size_t>(n));
  for (auto& x : v) {
    int k = d(g);
    if (k == 0) k = 7;
    x = static_cast<T>(k);
  }
  return v;
}

template <class T>
spillway::device_array<T> poisoned(const shape_t& s, spillway::stream_view st) {
  spillway::device_array<T> a(s, st);
  a.buffer().fill_bytes_async(0xFF, st);
  return a;
}

struct mul_add {
  template <class A, class B>
  __host__ __device__ auto operator()(A a, B b) const {
    return a * b + A(1);
  }
};

SPILLWAY_GPU_TEST_FN(MapGpu, BroadcastTableMatchesHost) {
  std::mt19937_64 g(spillway::test::seed("MapGpu.BroadcastTable"));
  spillway::stream st;
  const std::vector<std::pair<shape_t, shape_t>> cases = {
      {{256, 256, 3}, {3}},   {{8, 1, 6, 1}, {7, 1, 5}}, {{5, 4}, {1}},        {{5, 4}, {4}},
      {{15, 3, 5}, {15, 1, 5}}, {{15, 3, 5}, {3, 5}},    {{15, 3, 5}, {3, 1}}, {{100, 400, 5}, {400, 5}},
      {{4000, 5}, {100, 4000, 5}}, {{37, 1}, {1, 41}},   {{}, {13}},           {{0, 3}, {3}},
      {{1}, {1}},              {{2, 3, 1, 7, 1, 5}, {3, 11, 7, 1, 1}}};
  for (const auto& [sa, sb] : cases) {
    const auto ha = random_values<double>(count(sa), g);
    const auto hb = random_values<double>(count(sb), g);
    auto da = spillway::device_array<double>::from_host(ha, sa, st);
    auto db = spillway::device_array<double>::from_host(hb, sb, st);
    const auto ref = spillway::map_host(mul_add{}, spillway::make_view(ha.data(), sa), spillway::make_view(hb.data(), sb));
    auto out = poisoned<double>(ref.shape, st);
    spillway::map_into_async(st, out.view(), mul_add{}, da, db);
    EXPECT_EQ(out.to_host(st), ref.data) << spillway::detail::shape_string(sa) << " x " << spillway::detail::shape_string(sb);
    auto alloc = spillway::map_async(st, mul_add{}, da, db);
    EXPECT_EQ(alloc.shape(), ref.shape);
    EXPECT_EQ(alloc.to_host(st), ref.data);
  }
}

template <class T>
void check_sizes(std::mt19937_64& g, spillway::stream_view st) {
  for (index_t n : {index_t{1}, index_t{2}, index_t{3}, index_t{5}, index_t{31}, index_t{33}, index_t{1023},
                    index_t{1025}, index_t{4099}, (index_t{1} << 20) + 7}) {
    const auto ha = random_values<T>(n + 1, g);
    const auto hb = random_values<T>(n + 1, g);
    auto da = spillway::device_array<T>::from_host(ha, {n + 1}, st);
    auto db = spillway::device_array<T>::from_host(hb, {n + 1}, st);
    for (index_t shift : {index_t{0}, index_t{1}}) {  // shift 1 misaligns: the scalar path
      const spillway::ndview<const T> va(da.data() + shift, {n});
      const spillway::ndview<const T> vb(db.data(), {n});
      auto out = poisoned<T>({n}, st);
      spillway::map_into_async(st, out.view(), mul_add{}, va, vb);
      const auto got = out.to_host(st);
      for (index_t i = 0; i < n; ++i) {
        ASSERT_EQ(got[static_cast<std::size_t>(i)],
                  static_cast<T>(ha[static_cast<std::size_t>(i + shift)] * hb[static_cast<std::size_t>(i)] + T(1)))
            << "n=" << n << " shift=" << shift << " i=" << i;
      }
    }
  }
}

SPILLWAY_GPU_TEST_FN(MapGpu, ContiguousSizesTailsAndAlignment) {
  std::mt19937_64 g(spillway::test::seed("MapGpu.Contiguous"));
  spillway::stream st;
  check_sizes<double>(g, st);
  check_sizes<float>(g, st);
  check_sizes<std::int16_t>(g, st);
  check_sizes<std::int8_t>(g, st);
}

SPILLWAY_GPU_TEST_FN(MapGpu, StridedTransposedAndReversedViews) {
  std::mt19937_64 g(spillway::test::seed("MapGpu.Strided"));
  spillway::stream st;
  const index_t R = 67, C = 129;
  const auto ha = random_values<float>(R * C, g);
  const auto hb = random_values<float>(R * C, g);
  auto da = spillway::device_array<float>::from_host(ha, {R, C}, st);
  auto db = spillway::device_array<float>::from_host(hb, {C, R}, st);
  // a + b^T into a (R, C) output.
  const auto ref = spillway::map_host([] __host__ __device__(float x, float y) { return x - 2 * y; },
                                      spillway::make_view(ha.data(), {R, C}),
                                      spillway::make_view(hb.data(), {C, R}).transposed());
  auto out = poisoned<float>({R, C}, st);
  spillway::map_into_async(st, out.view(), [] __host__ __device__(float x, float y) { return x - 2 * y; }, da,
                           db.view().transposed());
  EXPECT_EQ(out.to_host(st), ref.data);
  // Reversed rows of a, every other column, written into a transposed output view.
  const auto va = da.view().strided(0, R - 1, R, -1).strided(1, 0, (C + 1) / 2, 2);
  const auto hva = spillway::make_view(ha.data(), {R, C}).strided(0, R - 1, R, -1).strided(1, 0, (C + 1) / 2, 2);
  const auto ref2 = spillway::map_host([] __host__ __device__(float x) { return x * 3; }, hva);
  auto out2 = poisoned<float>({(C + 1) / 2, R}, st);
  spillway::map_into_async(st, out2.view().transposed(), [] __host__ __device__(float x) { return x * 3; }, va);
  const auto got2 = out2.to_host(st);
  for (index_t i = 0; i < R; ++i)
    for (index_t j = 0; j < (C + 1) / 2; ++j)
      ASSERT_EQ(got2[static_cast<std::size_t>(j * R + i)], ref2.data[static_cast<std::size_t>(i * ((C + 1) / 2) + j)]);
}

SPILLWAY_GPU_TEST_FN(MapGpu, ScalarsByValueAndDeducedTypes) {
  std::mt19937_64 g(spillway::test::seed("MapGpu.Scalars"));
  spillway::stream st;
  const index_t n = 1001;
  const auto hi = random_values<int>(n, g);
  auto di = spillway::device_array<int>::from_host(hi, {n}, st);
  // int array * double scalar -> double output, deduced.
  auto r = spillway::map_async(st, [] __host__ __device__(int x, double s, int k) { return x * s + k; }, di, 0.25, 3);
  static_assert(std::is_same_v<decltype(r), spillway::device_array<double>>);
  const auto got = r.to_host(st);
  for (index_t i = 0; i < n; ++i) ASSERT_EQ(got[static_cast<std::size_t>(i)], hi[static_cast<std::size_t>(i)] * 0.25 + 3);
  // An extended __device__ lambda through cuda::proclaim_return_type.
  auto p = spillway::map_async(
      st, cuda::proclaim_return_type<long long>([] __device__(int x) { return static_cast<long long>(x) * x; }), di);
  static_assert(std::is_same_v<decltype(p), spillway::device_array<long long>>);
  const auto gp = p.to_host(st);
  for (index_t i = 0; i < n; ++i) {
    ASSERT_EQ(gp[static_cast<std::size_t>(i)], static_cast<long long>(hi[static_cast<std::size_t>(i)]) * hi[static_cast<std::size_t>(i)]);
  }
  // All-scalar map: a 0-d output.
  auto z = spillway::map_async(st, [] __host__ __device__(float a, float b) { return a * b; }, 3.0f, 4.0f);
  EXPECT_TRUE(z.shape().empty());
  EXPECT_EQ(z.to_host(st), std::vector<float>{12.0f});
  // Plain form on its own stream.
  auto q = spillway::map([] __host__ __device__(int x) { return x + 1; }, di);
  const auto gq = q.to_host(st);
  EXPECT_EQ(gq[5], hi[5] + 1);
}

SPILLWAY_GPU_TEST_FN(MapGpu, ZeroSizeAndMismatchesLeaveOutputUntouched) {
  spillway::stream st;
  auto e = spillway::device_array<double>({0, 5}, st);
  auto r = spillway::map_async(st, mul_add{}, e, 2.0);
  EXPECT_EQ(r.shape(), (shape_t{0, 5}));
  EXPECT_EQ(r.size(), 0);
  std::mt19937_64 g(spillway::test::seed("MapGpu.Mismatch"));
  auto a = spillway::device_array<double>::from_host(random_values<double>(20, g), {4, 5}, st);
  auto b = spillway::device_array<double>::from_host(random_values<double>(24, g), {4, 6}, st);
  auto out = poisoned<double>({4, 5}, st);
  const auto before = out.to_host(st);
  try {
    spillway::map_into_async(st, out.view(), mul_add{}, a, b);
    FAIL() << "no exception";
  } catch (const spillway::logic_error& ex) {
    const std::string m = ex.what();
    EXPECT_NE(m.find("argument 1"), std::string::npos) << m;
    EXPECT_NE(m.find("6 vs 5"), std::string::npos) << m;
  }
  auto wrong = poisoned<double>({5, 4}, st);
  EXPECT_THROW(spillway::map_into_async(st, wrong.view(), mul_add{}, a, a), spillway::logic_error);
  const auto after = out.to_host(st);
  EXPECT_EQ(std::memcmp(before.data(), after.data(), before.size() * sizeof(double)), 0);
}

SPILLWAY_GPU_TEST_FN(MapGpu, SixtyFourBitSizes) {
  spillway::stream st;
  // 2^31 + 77 int8 elements: contiguous kernel; then a (3, 2^31+3) broadcast on a misaligned view:
  // the rows kernel with 64-bit indices.
  const index_t n = (index_t{1} << 31) + 77;
  std::vector<std::int8_t> h(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) h[static_cast<std::size_t>(i)] = static_cast<std::int8_t>((i * 7 + 3) % 101 - 50);
  auto a = spillway::device_array<std::int8_t>::from_host(h, {n}, st);
  auto out = poisoned<std::int8_t>({n}, st);
  spillway::map_into_async(st, out.view(), [] __host__ __device__(std::int8_t x, int k) { return static_cast<std::int8_t>(x + k); },
                           a, 1);
  auto got = out.to_host(st);
  for (index_t i = 0; i < n; ++i) {
    ASSERT_EQ(got[static_cast<std::size_t>(i)], static_cast<std::int8_t>(h[static_cast<std::size_t>(i)] + 1)) << i;
  }
  got.clear();
  got.shrink_to_fit();
  out = spillway::device_array<std::int8_t>();
  const index_t m = (index_t{1} << 31) + 3;
  const spillway::ndview<const std::int8_t> row(a.data() + 1, {m});
  auto big = poisoned<std::int8_t>({3, m}, st);
  spillway::map_into_async(st, big.view(),
                           [] __host__ __device__(std::int8_t x, std::int8_t y) { return static_cast<std::int8_t>(x - y); },
                           row, row.strided(0, m - 1, m, -1));
  const auto gb = big.to_host(st);
  for (index_t r = 0; r < 3; ++r) {
    for (index_t i = 0; i < m; i += (i % 1000 == 0 ? 997 : 1)) {
      ASSERT_EQ(gb[static_cast<std::size_t>(r * m + i)],
                static_cast<std::int8_t>(h[static_cast<std::size_t>(1 + i)] - h[static_cast<std::size_t>(1 + m - 1 - i)]))
          << r << "," << i;
    }
  }
}

// ---- gufuncs -----------------------------------------------------------------------------------

struct dot_fn {
  template <class T>
  __host__ __device__ void operator()(spillway::gufunc_team t, spillway::ndview<const T> a, spillway::ndview<const T> b,
                                      spillway::ndview<T> out) const {
    T acc = 0;
    for (index_t i = t.rank(); i < a.extent(0); i += t.size()) acc += a(i) * b(i);
    acc = t.sum(acc);
    if (t.leader()) out() = acc;
  }
};

SPILLWAY_GPU_TEST_FN(GufuncGpu, RowDotMatchesHostForEveryTeamSize) {
  std::mt19937_64 g(spillway::test::seed("GufuncGpu.Dot"));
  spillway::stream st;
  for (index_t n : {index_t{0}, index_t{1}, index_t{5}, index_t{64}, index_t{100}, index_t{5003}}) {
    const index_t rows = 1009;
    const auto ha = random_values<float>(rows * n, g, -8, 8);
    const auto hb = random_values<float>(rows * n, g, -8, 8);
    auto da = spillway::device_array<float>::from_host(ha, {rows, n}, st);
    auto db = spillway::device_array<float>::from_host(hb, {rows, n}, st);
    const auto ref = spillway::gufunc_host<float>("(n),(n)->()", dot_fn{}, spillway::make_view(ha.data(), {rows, n}),
                                                  spillway::make_view(hb.data(), {rows, n}));
    for (int team : {0, 1, 2, 8, 16, 32, 256}) {
      auto out = poisoned<float>({rows}, st);
      spillway::gufunc_into_async(st, spillway::gufunc_spec("(n),(n)->()", team), out.view(), dot_fn{}, da, db);
      // Integer-valued floats below 2^24: every summation order gives the exact result.
      EXPECT_EQ(out.to_host(st), ref.data) << "n=" << n << " team=" << team;
    }
  }
}

SPILLWAY_GPU_TEST_FN(GufuncGpu, ElementwiseCoresBroadcastAndScalars) {
  std::mt19937_64 g(spillway::test::seed("GufuncGpu.Cores"));
  spillway::stream st;
  const auto hbig = random_values<double>(100 * 40 * 5, g);
  const auto hsmall = random_values<double>(40 * 5, g);
  auto big = spillway::device_array<double>::from_host(hbig, {100, 40, 5}, st);
  auto small = spillway::device_array<double>::from_host(hsmall, {40, 5}, st);
  auto fn = [] __host__ __device__(spillway::ndview<const double> m, spillway::ndview<const double> d, double s,
                                   spillway::ndview<double> out) {
    for (index_t i = 0; i < m.extent(0); ++i)
      for (index_t j = 0; j < m.extent(1); ++j) out(i, j) = m(i, j) * d(i, j) * s;
  };
  auto r = spillway::gufunc_async<double>(st, "(m,o),(m,o),()->(m,o)", fn, small, big, 0.5);
  ASSERT_EQ(r.shape(), (shape_t{100, 40, 5}));
  const auto got = r.to_host(st);
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], hsmall[i % 200] * hbig[i] * 0.5) << i;
  // A team functor with an explicit block team on a strided (transposed) input.
  auto sumsq = [] __host__ __device__(spillway::gufunc_team t, spillway::ndview<const double> v, spillway::ndview<double> o) {
    double acc = 0;
    for (index_t i = t.rank(); i < v.extent(0); i += t.size()) acc += v(i) * v(i);
    acc = t.sum(acc);
    if (t.leader()) o() = acc;
  };
  auto cols = spillway::gufunc_async<double>(st, spillway::gufunc_spec("(n)->()", 256), sumsq, small.view().transposed());
  const auto gc = cols.to_host(st);
  for (index_t j = 0; j < 5; ++j) {
    double ref = 0;
    for (index_t i = 0; i < 40; ++i) ref += hsmall[static_cast<std::size_t>(i * 5 + j)] * hsmall[static_cast<std::size_t>(i * 5 + j)];
    EXPECT_EQ(gc[static_cast<std::size_t>(j)], ref);
  }
}

SPILLWAY_GPU_TEST_FN(GufuncGpu, MismatchesThrowNamingArgumentDimensionAndSizes) {
  spillway::stream st;
  auto a = spillway::device_array<float>({10, 64}, st);
  auto b = spillway::device_array<float>({10, 63}, st);
  auto out = poisoned<float>({10}, st);
  const auto before = out.to_host(st);
  ASSERT_NO_FATAL_FAILURE(spillway::test::expect_throw_naming(
      [&] { spillway::gufunc_into_async(st, "(n),(n)->()", out.view(), dot_fn{}, a, b); },
      {"argument 1", "'n'", "63", "64"}));
  EXPECT_THROW(spillway::gufunc_into_async(st, "(n),(n)->(", out.view(), dot_fn{}, a, a), spillway::logic_error);
  EXPECT_THROW(spillway::gufunc_into_async(st, spillway::gufunc_spec("(n),(n)->()", 12), out.view(), dot_fn{}, a, a),
               spillway::logic_error);
  auto wrong = poisoned<float>({11}, st);
  EXPECT_THROW(spillway::gufunc_into_async(st, "(n),(n)->()", wrong.view(), dot_fn{}, a, a), spillway::logic_error);
  const auto after = out.to_host(st);
  EXPECT_EQ(std::memcmp(after.data(), before.data(), before.size() * sizeof(float)), 0);
}

// ---- reductions --------------------------------------------------------------------------------

SPILLWAY_GPU_TEST_FN(ReduceGpu, IntegersExactOverAllAndChosenAxes) {
  std::mt19937_64 g(spillway::test::seed("ReduceGpu.Int"));
  spillway::stream st;
  const shape_t s{7, 1031, 3};
  const auto h = random_values<std::int64_t>(count(s), g, -100000, 100000);
  auto d = spillway::device_array<std::int64_t>::from_host(h, s, st);
  const auto hv = spillway::ndview<const std::int64_t>(h.data(), s);
  const auto dv = spillway::ndview<const std::int64_t>(d.view());
  const std::vector<std::vector<int>> axes_list = {{0, 1, 2}, {1}, {0}, {2}, {0, 2}, {-1, -2}, {}};
  for (const auto& axes : axes_list) {
    EXPECT_EQ(spillway::sum_async(st, dv, axes).to_host(st), spillway::sum_host(hv, axes).data);
    EXPECT_EQ(spillway::amin_async(st, dv, axes).to_host(st), spillway::amin_host(hv, axes).data);
    EXPECT_EQ(spillway::amax_async(st, dv, axes).to_host(st), spillway::amax_host(hv, axes).data);
    auto bor = [] __host__ __device__(std::int64_t a, std::int64_t b) { return a | b; };
    EXPECT_EQ(spillway::reduce_async(st, dv, bor, std::int64_t{0}, axes).to_host(st),
              spillway::reduce_host(hv, bor, std::int64_t{0}, axes).data);
  }
  // Transposed input, and a strided output view.
  const auto dt = dv.permuted({2, 0, 1});
  const auto ht = hv.permuted({2, 0, 1});
  EXPECT_EQ(spillway::sum_async(st, dt, {2}).to_host(st), spillway::sum_host(ht, {2}).data);
  auto wide = poisoned<std::int64_t>({3, 14}, st);
  const auto strided_out = wide.view().strided(1, 0, 7, 2);
  spillway::reduce_into_async(st, dt, strided_out, cuda::std::plus<std::int64_t>{}, std::int64_t{5}, {2});
  const auto gw = wide.to_host(st);
  const auto ref = spillway::reduce_host(ht, std::plus<std::int64_t>{}, std::int64_t{5}, {2});
  for (index_t i = 0; i < 3; ++i)
    for (index_t j = 0; j < 7; ++j) ASSERT_EQ(gw[static_cast<std::size_t>(i * 14 + 2 * j)], ref.data[static_cast<std::size_t>(i * 7 + j)]);
  // The all-axes form writes a 0-d device scalar.
  auto total = spillway::sum(dv);
  EXPECT_TRUE(total.shape().empty());
  EXPECT_EQ(total.to_host(st), spillway::sum_host(hv).data);
}

SPILLWAY_GPU_TEST_FN(ReduceGpu, FloatsWithinToleranceAndIdenticalRunToRun) {
  std::mt19937_64 g(spillway::test::seed("ReduceGpu.Float"));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  spillway::stream st;
  const shape_t s{33, 100003};
  std::vector<float> h(static_cast<std::size_t>(count(s)));
  for (auto& x : h) x = u(g);
  auto d = spillway::device_array<float>::from_host(h, s, st);
  const spillway::ndview<const float> dv = d.view();
  const spillway::ndview<const float> hv(h.data(), s);
  for (const auto& axes : std::vector<std::vector<int>>{{0, 1}, {1}, {0}}) {
    const auto a = spillway::sum_async(st, dv, axes).to_host(st);
    const auto b = spillway::sum_async(st, dv, axes).to_host(st);
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "not deterministic";
    const auto ref = spillway::sum_host(hv, axes);
    // Stated tolerance: 1e-6 of the number of summed terms (|x| <= 1).
    const double terms = static_cast<double>(count(s)) / static_cast<double>(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], ref.data[i], 1e-6 * terms) << i;
    EXPECT_EQ(spillway::amax_async(st, dv, axes).to_host(st), spillway::amax_host(hv, axes).data);
  }
  // Empty reductions: sum gives 0, min/max throw.
  auto e = spillway::device_array<float>({4, 0}, st);
  EXPECT_EQ(spillway::sum_async(st, spillway::ndview<const float>(e.view()), {1}).to_host(st), std::vector<float>(4, 0.0f));
  EXPECT_THROW(spillway::amax_async(st, spillway::ndview<const float>(e.view()), {1}), spillway::logic_error);
  EXPECT_THROW(spillway::sum_async(st, dv, {2}), spillway::logic_error);
}

}  // namespace
