#include <spillway/core.hpp>
#include <support/gpu_test.hpp>

TEST(DeviceQuery, CountIsNonNegativeAndConsistent) {
  const int n = spillway::device_count();
  EXPECT_GE(n, 0);
  EXPECT_EQ(spillway::gpu_available(), n > 0);
  EXPECT_EQ(spillway::no_gpu_reason().empty(), n > 0);
}
