// The host target: map, gufunc and reductions on host arrays, checked against plain loops.
#include <spillway/map/host.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <random>
#include <vector>

using spillway::index_t;

namespace {

std::uint64_t seed(const char* salt) {
  std::uint64_t s = 0x5eed5eedULL ^ (std::hash<std::string>{}(salt) * 0x9E3779B97F4A7C15ULL);
  std::cout << "[ seed     ] " << salt << " seed=" << s << "\n";
  return s;
}

template <class T>
std::vector<T> random_vector(std::size_t n, std::mt19937_64& g, int lo = -1000, int hi = 1000) {
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(d(g)) / static_cast<T>(std::is_floating_point_v<T> ? 8 : 1);
  return v;
}

TEST(MapHost, BroadcastMultiplyMatchesLoops) {
  std::mt19937_64 g(seed("MapHost.Broadcast"));
  const index_t A = 7, B = 13, C = 5;
  auto big = random_vector<double>(A * B * C, g);
  auto small = random_vector<double>(B * C, g);
  const auto out = spillway::map_host([](double x, double y) { return x * y; },
                                      spillway::make_view(big.data(), {A, B, C}),
                                      spillway::make_view(small.data(), {B, C}));
  ASSERT_EQ(out.shape, (std::vector<index_t>{A, B, C}));
  for (index_t i = 0; i < A; ++i)
    for (index_t j = 0; j < B; ++j)
      for (index_t k = 0; k < C; ++k)
        ASSERT_EQ(out.data[static_cast<std::size_t>((i * B + j) * C + k)],
                  big[static_cast<std::size_t>((i * B + j) * C + k)] * small[static_cast<std::size_t>(j * C + k)]);
}

TEST(MapHost, ScalarsTransposesAndTypesFromTheFunctor) {
  std::mt19937_64 g(seed("MapHost.Scalars"));
  const index_t R = 37, C = 41;  // primes: no dimension is a multiple of anything
  auto a = random_vector<int>(R * C, g);
  auto col = random_vector<int>(R, g);
  const auto at = spillway::make_view(a.data(), {R, C}).transposed();  // (C, R)
  const auto out = spillway::map_host([](int x, long long k, int c) { return static_cast<double>(x) * k + c; }, at,
                                      3LL, spillway::make_view(col.data(), {R}));
  static_assert(std::is_same_v<decltype(out.data)::value_type, double>);
  ASSERT_EQ(out.shape, (std::vector<index_t>{C, R}));
  for (index_t i = 0; i < C; ++i)
    for (index_t j = 0; j < R; ++j)
      ASSERT_EQ(out.data[static_cast<std::size_t>(i * R + j)],
                static_cast<double>(a[static_cast<std::size_t>(j * C + i)]) * 3 + col[static_cast<std::size_t>(j)]);
}

TEST(MapHost, GivenStridedOutputAndZeroSize) {
  std::vector<float> x(10);
  for (int i = 0; i < 10; ++i) x[static_cast<std::size_t>(i)] = static_cast<float>(i + 1);
  std::vector<float> o(20, -1.0f);
  // Write every other element of o.
  spillway::ndview<float> out(o.data(), {10}, {2});
  spillway::map_host_into(out, [](float v, float s) { return v * s; }, spillway::make_view(x.data(), {10}), 0.5f);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(o[static_cast<std::size_t>(i)], i % 2 == 0 ? 0.5f * static_cast<float>(i / 2 + 1) : -1.0f) << i;
  }
  const auto empty = spillway::map_host([](float v) { return v; }, spillway::ndview<const float>(nullptr, {0, 3}));
  EXPECT_EQ(empty.shape, (std::vector<index_t>{0, 3}));
  EXPECT_TRUE(empty.data.empty());
  std::vector<float> o3(3, -1.0f);
  EXPECT_THROW(spillway::map_host_into(spillway::make_view(o3.data(), {3}), [](float v) { return v; },
                                       spillway::make_view(x.data(), {10})),
               spillway::logic_error);
  EXPECT_EQ(o3[0], -1.0f);
}

TEST(MapHost, LongRowsScalarsOnlyAndBroadcastColumns) {
  std::mt19937_64 g(seed("MapHost.LongRows"));
  const index_t R = 3, C = 40009;  // rows longer than the 2^14-element work runs
  auto a = random_vector<float>(static_cast<std::size_t>(R * C), g);
  auto col = random_vector<float>(static_cast<std::size_t>(R), g);
  const auto out = spillway::map_host([](float x, float c) { return x - c; }, spillway::make_view(a.data(), {R, C}),
                                      spillway::make_view(col.data(), {R, 1}));
  for (index_t i = 0; i < R; ++i)
    for (index_t j = 0; j < C; ++j)
      ASSERT_EQ(out.data[static_cast<std::size_t>(i * C + j)],
                a[static_cast<std::size_t>(i * C + j)] - col[static_cast<std::size_t>(i)]);
  const auto s = spillway::map_host([](float x, float y) { return x * y; }, 3.0f, 4.0f);
  EXPECT_TRUE(s.shape.empty());
  EXPECT_EQ(s.data, std::vector<float>{12.0f});
}

TEST(MapHost, GufuncDotAndElementwiseCores) {
  std::mt19937_64 g(seed("MapHost.Gufunc"));
  const index_t rows = 101, n = 17;
  auto a = random_vector<double>(rows * n, g);
  auto b = random_vector<double>(n, g);  // broadcast over rows
  const auto dot = spillway::gufunc_host(
      "(n),(n)->()",
      [](spillway::gufunc_team t, spillway::ndview<const double> x, spillway::ndview<const double> y,
         spillway::ndview<double> out) {
        double acc = 0;
        for (index_t i = t.rank(); i < x.extent(0); i += t.size()) acc += x(i) * y(i);
        acc = t.sum(acc);
        if (t.leader()) out() = acc;
      },
      spillway::make_view(a.data(), {rows, n}), spillway::make_view(b.data(), {n}));
  ASSERT_EQ(dot.shape, (std::vector<index_t>{rows}));
  for (index_t r = 0; r < rows; ++r) {
    double ref = 0;
    for (index_t i = 0; i < n; ++i) ref += a[static_cast<std::size_t>(r * n + i)] * b[static_cast<std::size_t>(i)];
    ASSERT_EQ(dot.data[static_cast<std::size_t>(r)], ref);
  }
  // "(m,o),(m,o)->(m,o)" without a team, plus a scalar for a "()" input.
  auto big = random_vector<double>(3 * 4 * 5, g);
  auto small = random_vector<double>(4 * 5, g);
  const auto cv = spillway::gufunc_host<double>(
      "(m,o),(m,o),()->(m,o)",
      [](spillway::ndview<const double> x, spillway::ndview<const double> y, double s, spillway::ndview<double> out) {
        for (index_t i = 0; i < x.extent(0); ++i)
          for (index_t j = 0; j < x.extent(1); ++j) out(i, j) = x(i, j) * y(i, j) * s;
      },
      spillway::make_view(big.data(), {3, 4, 5}), spillway::make_view(small.data(), {4, 5}), 2.0);
  for (std::size_t i = 0; i < big.size(); ++i) ASSERT_EQ(cv.data[i], big[i] * small[i % 20] * 2.0);
  EXPECT_THROW(spillway::gufunc_host<double>(
                   "(n),(n)->()", [](spillway::ndview<const double>, double, spillway::ndview<double>) {},
                   spillway::make_view(a.data(), {rows, n}), 2.0),
               spillway::logic_error);
}

TEST(MapHost, ReductionsOverAllAndChosenAxes) {
  std::mt19937_64 g(seed("MapHost.Reduce"));
  const index_t A = 5, B = 70001, C = 3;  // B crosses the host block size
  auto x = random_vector<std::int64_t>(static_cast<std::size_t>(A * B * C), g);
  const auto v = spillway::ndview<const std::int64_t>(x.data(), {A, B, C});
  const auto all = spillway::sum_host(v);
  std::int64_t ref = 0;
  for (auto e : x) ref += e;
  EXPECT_EQ(all.data[0], ref);
  EXPECT_TRUE(all.shape.empty());
  const auto s1 = spillway::sum_host(v, {1});
  const auto mx = spillway::amax_host(v, {0, -1});
  const auto mn = spillway::amin_host(v, {2});
  ASSERT_EQ(s1.shape, (std::vector<index_t>{A, C}));
  ASSERT_EQ(mx.shape, (std::vector<index_t>{B}));
  for (index_t a = 0; a < A; ++a)
    for (index_t c = 0; c < C; ++c) {
      std::int64_t s = 0;
      for (index_t b = 0; b < B; ++b) s += x[static_cast<std::size_t>((a * B + b) * C + c)];
      ASSERT_EQ(s1.data[static_cast<std::size_t>(a * C + c)], s);
    }
  for (index_t b = 0; b < B; ++b) {
    std::int64_t m = INT64_MIN;
    for (index_t a = 0; a < A; ++a)
      for (index_t c = 0; c < C; ++c) m = std::max(m, x[static_cast<std::size_t>((a * B + b) * C + c)]);
    ASSERT_EQ(mx.data[static_cast<std::size_t>(b)], m);
  }
  for (index_t a = 0; a < A; ++a)
    for (index_t b = 0; b < B; ++b) {
      const std::size_t base = static_cast<std::size_t>((a * B + b) * C);
      ASSERT_EQ(mn.data[static_cast<std::size_t>(a * B + b)], std::min({x[base], x[base + 1], x[base + 2]}));
    }
  // A user operator (bitwise or) and no axes at all (a copy).
  const auto orr = spillway::reduce_host(v, [](std::int64_t p, std::int64_t q) { return p | q; }, std::int64_t{0}, {0, 1, 2});
  std::int64_t ro = 0;
  for (auto e : x) ro |= e;
  EXPECT_EQ(orr.data[0], ro);
  const auto none = spillway::sum_host(v, {});
  EXPECT_EQ(none.data, x);
  // Empty: sum is 0, min/max have no identity.
  const spillway::ndview<const double> e(nullptr, {4, 0});
  EXPECT_EQ(spillway::sum_host(e, {1}).data, std::vector<double>(4, 0.0));
  EXPECT_THROW(spillway::amax_host(e, {1}), spillway::logic_error);
  EXPECT_NO_THROW(spillway::amax_host(e, {0}));
  EXPECT_THROW(spillway::sum_host(v, {3}), spillway::logic_error);
}

TEST(MapHost, FloatSumIsDeterministic) {
  std::mt19937_64 g(seed("MapHost.Determinism"));
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> x(1 << 20);
  for (auto& e : x) e = d(g);
  const spillway::ndview<const float> v(x.data(), {static_cast<index_t>(x.size())});
  const float s1 = spillway::sum_host(v).data[0];
  const float s2 = spillway::sum_host(v).data[0];
  EXPECT_EQ(s1, s2);
  double ref = 0, mag = 0;
  for (float e : x) {
    ref += e;
    mag += std::fabs(e);
  }
  // float accumulation in blocks of 2^15: stated tolerance 1e-7 of the sum of magnitudes.
  EXPECT_NEAR(s1, ref, 1e-7 * mag);
}

}  // namespace
