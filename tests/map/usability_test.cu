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
