// GPU tests of what issue 16 found: device reductions of a device_array's own (mutable) view, as
// the docs' snippets write them.
#include <spillway/map.cuh>
#include "support/gpu_test.hpp"

#include <gtest/gtest.h>

#include <random>
#include <vector>

TEST(MapUsabilityGpu, DeviceReductionsAcceptMutableViews) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  std::mt19937_64 rng(spillway::test::seed("MapUsabilityGpu.DeviceReductionsAcceptMutableViews"));
  std::uniform_int_distribution<int> u(-1000, 1000);
  // Integer values in double: every partial sum is exact, so device and host agree exactly.
  std::vector<double> h(13 * 257 * 3);
  for (auto& v : h) v = u(rng);
  spillway::stream s;
  auto d = spillway::device_array<double>::from_host(h, {13, 257, 3}, s);
  const auto hv = spillway::make_view(h.data(), {13, 257, 3});
  EXPECT_EQ(spillway::sum_async(s, d.view()).to_host(s), spillway::sum_host(hv).data);
  EXPECT_EQ(spillway::sum_async(s, d.view(), {0, 2}).to_host(s), spillway::sum_host(hv, {0, 2}).data);
  EXPECT_EQ(spillway::amax_async(s, d.view(), {1, 2}).to_host(s), spillway::amax_host(hv, {1, 2}).data);
  EXPECT_EQ(spillway::amin_async(s, d.view(), {1}).to_host(s), spillway::amin_host(hv, {1}).data);
  const auto r = spillway::reduce_async(s, d.view(), cuda::std::plus<double>{}, 0.0, {2});
  EXPECT_EQ(r.to_host(s), spillway::sum_host(hv, {2}).data);
  EXPECT_EQ(spillway::sum(d.view()).to_host(s), spillway::sum_host(hv).data);
}

namespace {
// Writes the size of the team that ran this instance (what docs/map.md promises per core size).
struct team_size_of {
  __host__ __device__ void operator()(spillway::gufunc_team t, spillway::ndview<const float> x,
                                      spillway::ndview<int> out) const {
    float acc = 0;
    for (spillway::index_t i = t.rank(); i < x.extent(0); i += t.size()) acc += x(i);
    acc = t.sum(acc);
    if (t.leader()) out() = acc == static_cast<float>(x.extent(0)) ? t.size() : -1;  // -1: a wrong sum
  }
};
// The same loop written without a team (a literal port of a @guvectorize body).
struct no_team_sum {
  __host__ __device__ void operator()(spillway::ndview<const float> x, spillway::ndview<float> out) const {
    float acc = 0;
    for (spillway::index_t i = 0; i < x.extent(0); ++i) acc += x(i);
    out() = acc;
  }
};
}  // namespace

// Runs without a GPU: the rule docs/map.md states, on the planner itself.
TEST(MapUsability, GufuncTeamRuleIsWhatTheDocsSay) {
  EXPECT_EQ(spillway::detail::gufunc_team_size(8), 1);
  EXPECT_EQ(spillway::detail::gufunc_team_size(64), 8);
  EXPECT_EQ(spillway::detail::gufunc_team_size(4096), 32);
  EXPECT_EQ(spillway::detail::gufunc_team_size(20000), 256);
  using A = spillway::device_array<float>;
  static_assert(spillway::detail::gufunc_takes_team<team_size_of, int, A>());
  static_assert(!spillway::detail::gufunc_takes_team<no_team_sum, float, A>());
}

TEST(MapUsabilityGpu, GufuncTeamSizesByCoreAndNoTeamFunctorsStillCorrect) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  spillway::stream s;
  // Direct path (stage = false) so the team is the documented one for each core size.
  for (const auto& [core, want] : std::vector<std::pair<spillway::index_t, int>>{{8, 1}, {64, 8}, {20000, 256}}) {
    const spillway::index_t inst = 37;
    auto x = spillway::device_array<float>::from_host(std::vector<float>(static_cast<std::size_t>(inst * core), 1.0f),
                                                      {inst, core}, s);
    const auto got = spillway::gufunc_async<int>(s, spillway::gufunc_spec("(n)->()", 0, false), team_size_of{}, x)
                         .to_host(s);
    EXPECT_EQ(got, std::vector<int>(static_cast<std::size_t>(inst), want)) << "core of " << core << " elements";
    const auto sums = spillway::gufunc_async<float>(s, "(n)->()", no_team_sum{}, x).to_host(s);
    EXPECT_EQ(sums, std::vector<float>(static_cast<std::size_t>(inst), static_cast<float>(core)));
  }
  // A team size > 1 for a functor without a team is refused, not ignored.
  auto x = spillway::device_array<float>::from_host(std::vector<float>(64, 1.0f), {4, 16}, s);
  EXPECT_THROW((void)spillway::gufunc_async<float>(s, spillway::gufunc_spec("(n)->()", 8), no_team_sum{}, x),
               spillway::logic_error);
}
