// Host tests of what issue 16 found: reductions take a view of mutable elements as readily as a
// const one (the README's `sum_host(v.view())` on a host_array).
#include <spillway/map/host.hpp>
#include <spillway/ode/config.hpp>
#include <spillway/pairwise/layout.hpp>
#include <support/gpu_test.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <type_traits>
#include <vector>

using spillway::index_t;

// SPILLWAY_HD (core/launch.hpp) is the one host/device mark; the modules' former names stay
// usable for callers' functors (deprecated). A plain C++ compiler sees them as nothing.
struct marked_by_former_names {
  SPILLWAY_MAP_HD int a(spillway::index_t i) const { return static_cast<int>(i) + 1; }
  SPILLWAY_ODE_HD int b(int i) const { return i * 2; }
  SPILLWAY_PAIRWISE_HD int c(int i) const { return i - 3; }
  SPILLWAY_HD int d(int i) const { return a(i) + b(i) + c(i); }
};

TEST(MapUsability, TheFormerHostDeviceMarksAreTheOneMark) {
  static_assert(std::is_same_v<spillway::index_t, std::int64_t>, "index_t is signed 64-bit");
  const marked_by_former_names f;
  EXPECT_EQ(f.d(5), 6 + 10 + 2);
  EXPECT_EQ(f.a(41), 42);
}

TEST(MapUsability, ReductionsAcceptMutableViews) {
  std::mt19937_64 rng(spillway::test::seed("MapUsability.ReductionsAcceptMutableViews"));
  std::uniform_int_distribution<int> u(-1000, 1000);
  // Integers in double: sums are exact, so the mutable and const forms must agree exactly.
  std::vector<double> x(7 * 5 * 3);
  for (auto& v : x) v = u(rng);
  spillway::ndview<double> m = spillway::make_view(x.data(), {7, 5, 3});
  spillway::ndview<const double> c = m;
  EXPECT_EQ(spillway::sum_host(m).data, spillway::sum_host(c).data);
  EXPECT_EQ(spillway::sum_host(m, {0, 2}).data, spillway::sum_host(c, {0, 2}).data);
  EXPECT_EQ(spillway::amax_host(m, {1}).data, spillway::amax_host(c, {1}).data);
  EXPECT_EQ(spillway::amin_host(m).data, spillway::amin_host(c).data);
  const auto r = spillway::reduce_host(m, [](double a, double b) { return a + b; }, 0.0, {2});
  EXPECT_EQ(r.data, spillway::sum_host(c, {2}).data);
  double want = 0;
  for (double v : x) want += v;
  EXPECT_EQ(spillway::sum_host(m).data, std::vector<double>{want});
  // A host_array's own view is mutable: the case the README's snippet hit.
  spillway::host_array<double> h({4, 6});
  for (index_t i = 0; i < 24; ++i) h.data[static_cast<std::size_t>(i)] = static_cast<double>(i);
  EXPECT_EQ(spillway::sum_host(h.view()).data, std::vector<double>{276.0});
}
