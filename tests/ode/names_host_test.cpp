// Host test (issue 16 item 6): the mean-field coupling says whether it is a mean or a sum.
#include <spillway/ode/systems.hpp>

#include <gtest/gtest.h>

#include <type_traits>

namespace so = spillway::ode;

TEST(OdeNames, MeanFieldCouplingHasNoSilentDefaultScale) {
  static_assert(!std::is_default_constructible_v<so::systems::mean_field_coupling<float>>,
                "a default scale of 1 made the 'mean' coupling a sum");
  static_assert(std::is_trivially_copyable_v<so::systems::mean_field_coupling<float>>);
  EXPECT_EQ(so::systems::mean_field_coupling<float>::mean(4).scale, 0.25);
  EXPECT_EQ(so::systems::mean_field_coupling<double>::sum().scale, 1.0);
  EXPECT_EQ(so::systems::mean_field_coupling<float>{0.5}.scale, 0.5);
  // update() applies the scale to the total.
  const auto c = so::systems::mean_field_coupling<double>::mean(4);
  const auto d = c.update({8.0, -4.0}, {});
  EXPECT_EQ(d, cuda::std::complex<double>(2.0, -1.0));
}
