// A shaped view handed to the flat (1-d) streamed transform must be contiguous: a strided or
// broadcast view read as flat memory would give wrong elements silently.
#include <spillway/map/ndview.hpp>
#include <spillway/pipeline/host_operand.hpp>

#include <gtest/gtest.h>

#include <string>
#include <vector>

TEST(FlatOperand, ContiguousViewIsAcceptedWithItsElementCount) {
  std::vector<double> a(24, 1.5);
  const auto v = spillway::make_view(a.data(), {2, 3, 4});
  const auto op = spillway::host_input(v);
  EXPECT_EQ(op.data, a.data());
  EXPECT_EQ(op.size, 24u);
}

TEST(FlatOperand, StridedOrBroadcastViewIsRefused) {
  std::vector<double> a(24, 2.0);
  const auto transposed = spillway::make_view(a.data(), {4, 6}, {1, 4});
  const auto broadcast = spillway::make_view(a.data(), {5, 24}, {0, 1});
  for (const auto& v : {transposed, broadcast}) {
    try {
      (void)spillway::host_input(v);
      FAIL() << "a non-contiguous view was accepted as a flat operand";
    } catch (const spillway::logic_error& e) {
      EXPECT_NE(std::string(e.what()).find("strided or broadcast view"), std::string::npos) << e.what();
    }
  }
  auto out = spillway::make_view(a.data(), {6, 4}, {1, 6});
  EXPECT_THROW((void)spillway::host_output(out), spillway::logic_error);
  for (double x : a) EXPECT_EQ(x, 2.0);  // nothing written
}
