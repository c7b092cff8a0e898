// Broadcasting, loop collapsing and view logic (host only).
#include <spillway/map/ndview.hpp>
#include <spillway/map/shape.hpp>

#include "support/expect_throw.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using spillway::index_t;
using shape = std::vector<index_t>;

namespace {

struct bcase {
  std::vector<shape> in;
  shape out;
};

TEST(MapBroadcast, NumpyDocumentedTable) {
  // The examples of NumPy's broadcasting documentation, plus scalars and 0-size arrays.
  const std::vector<bcase> table = {
      {{{256, 256, 3}, {3}}, {256, 256, 3}},
      {{{8, 1, 6, 1}, {7, 1, 5}}, {8, 7, 6, 5}},
      {{{5, 4}, {1}}, {5, 4}},
      {{{5, 4}, {4}}, {5, 4}},
      {{{15, 3, 5}, {15, 1, 5}}, {15, 3, 5}},
      {{{15, 3, 5}, {3, 5}}, {15, 3, 5}},
      {{{15, 3, 5}, {3, 1}}, {15, 3, 5}},
      {{{4, 1}, {3}}, {4, 3}},
      {{{100, 4000, 5}, {4000, 5}}, {100, 4000, 5}},
      {{{}, {3, 4}}, {3, 4}},
      {{{}, {}}, {}},
      {{{0}, {1}}, {0}},
      {{{0, 3}, {3}}, {0, 3}},
      {{{2, 1, 0}, {5, 1}}, {2, 5, 0}},
      {{{1, 1, 1}, {7}}, {1, 1, 7}},
      {{{3}, {2, 3}, {4, 1, 1}}, {4, 2, 3}},
  };
  for (const auto& c : table) {
    EXPECT_EQ(spillway::broadcast_shapes(c.in), c.out);
  }
}

TEST(MapBroadcast, MismatchesNameArgumentDimensionAndSizes) {
  const std::vector<std::vector<shape>> bad = {
      {{3}, {4}}, {{2, 1}, {8, 4, 3}}, {{0}, {2}}, {{4000, 5}, {100, 4000, 4}}, {{1, 2}, {3, 1}, {3, 3}}};
  for (const auto& b : bad) {
    EXPECT_THROW(spillway::broadcast_shapes(b, "map"), spillway::logic_error);
  }
  ASSERT_NO_FATAL_FAILURE(spillway::test::expect_throw_naming(
      [&] { spillway::broadcast_shapes({{100, 4000, 5}, {4000, 4}}, "map"); },
      {"argument 1", "(4000,4)", "dimension -1", "size 4 vs 5"}));
  EXPECT_THROW(spillway::broadcast_shapes({{1, 1, 1, 1, 1, 1, 1, 1, 1}}), spillway::logic_error);
  EXPECT_THROW(spillway::broadcast_shapes({{-1}}), spillway::logic_error);
}

TEST(MapBroadcast, StridesAreZeroAlongBroadcastDimensions) {
  EXPECT_EQ(spillway::broadcast_strides({4000, 5}, {5, 1}, {100, 4000, 5}), (shape{0, 5, 1}));
  EXPECT_EQ(spillway::broadcast_strides({4, 1}, {1, 1}, {4, 3}), (shape{1, 0}));
  EXPECT_EQ(spillway::broadcast_strides({}, {}, {2, 2}), (shape{0, 0}));
}

TEST(MapCollapse, ContiguousBecomesOneDimension) {
  spillway::loop_plan p{{100, 4000, 5}, {{20000, 5, 1}, {20000, 5, 1}, {20000, 5, 1}}};
  const auto c = spillway::collapse(p);
  EXPECT_EQ(c.extents, (shape{2000000}));
  for (const auto& s : c.strides) EXPECT_EQ(s, (shape{1}));
}

TEST(MapCollapse, BroadcastOperandKeepsTwoDimensions) {
  spillway::loop_plan p{{100, 4000, 5}, {{20000, 5, 1}, {20000, 5, 1}, {0, 5, 1}}};
  const auto c = spillway::collapse(p);
  EXPECT_EQ(c.extents, (shape{100, 20000}));
  EXPECT_EQ(c.strides[2], (shape{0, 1}));
  EXPECT_EQ(c.strides[0], (shape{20000, 1}));
}

TEST(MapCollapse, SizeOneDimensionsDropAndZeroSizeShortCircuits) {
  spillway::loop_plan p{{1, 7, 1, 3}, {{21, 3, 3, 1}, {0, 1, 0, 7}}};
  const auto c = spillway::collapse(p);
  EXPECT_EQ(c.extents, (shape{7, 3}));
  EXPECT_EQ(c.strides[1], (shape{1, 7}));
  spillway::loop_plan z{{5, 0, 3}, {{0, 3, 1}}};
  EXPECT_EQ(spillway::collapse(z).extents, (shape{0}));
  spillway::loop_plan s{{1, 1}, {{1, 1}}};
  EXPECT_EQ(spillway::collapse(s).rank(), 0);
  EXPECT_EQ(spillway::collapse(s).size(), 1);
}

TEST(MapCollapse, TransposedOperandIsNotMerged) {
  // out (3,4) C-order, input is a transposed (4,3) view: strides (1,3).
  spillway::loop_plan p{{3, 4}, {{4, 1}, {1, 3}}};
  const auto c = spillway::collapse(p);
  EXPECT_EQ(c.extents, (shape{3, 4}));
}

TEST(MapNdview, ShapesStridesAndIndexing) {
  std::vector<int> buf(24);
  for (int i = 0; i < 24; ++i) buf[static_cast<std::size_t>(i)] = i;
  spillway::ndview<int> v(buf.data(), {2, 3, 4});
  EXPECT_EQ(v.rank(), 3);
  EXPECT_EQ(v.size(), 24);
  EXPECT_EQ(v.strides(), (shape{12, 4, 1}));
  EXPECT_EQ(v(1, 2, 3), 23);
  EXPECT_TRUE(v.is_contiguous());
  const auto t = v.transposed();
  EXPECT_EQ(t.shape(), (shape{4, 3, 2}));
  EXPECT_EQ(t(3, 2, 1), 23);
  EXPECT_FALSE(t.is_contiguous());
  const auto p = v.permuted({1, 0, 2});
  EXPECT_EQ(p(2, 1, 3), 23);
  const auto s = v.strided(2, 3, 2, -2);  // elements 3, 1 of the last axis
  EXPECT_EQ(s.shape(), (shape{2, 3, 2}));
  EXPECT_EQ(s(1, 2, 0), 23);
  EXPECT_EQ(s(1, 2, 1), 21);
  spillway::ndview<const int> c = v;
  EXPECT_EQ(c(0, 1, 1), 5);
  EXPECT_EQ(v.shape_string(), "(2,3,4)");
}

TEST(MapNdview, BadArgumentsThrowNamingThem) {
  std::vector<int> buf(4);
  EXPECT_THROW(spillway::ndview<int>(buf.data(), {2, -1}), spillway::logic_error);
  EXPECT_THROW(spillway::ndview<int>(nullptr, {2}), spillway::logic_error);
  EXPECT_NO_THROW(spillway::ndview<int>(nullptr, {0, 5}));
  EXPECT_THROW(spillway::ndview<int>(buf.data(), {2, 2}, {1}), spillway::logic_error);
  spillway::ndview<int> v(buf.data(), {2, 2});
  EXPECT_THROW((void)v.permuted({0, 0}), spillway::logic_error);
  EXPECT_THROW((void)v.permuted({0}), spillway::logic_error);
  EXPECT_THROW((void)v.strided(1, 0, 3, 1), spillway::logic_error);
  EXPECT_THROW((void)v.strided(2, 0, 1, 1), spillway::logic_error);
  try {
    spillway::ndview<int>(buf.data(), {2, -7});
  } catch (const spillway::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("-7"), std::string::npos);
  }
}

TEST(MapReductionAxes, NormalizesAndRejects) {
  const auto m = spillway::reduction_mask({-1, 0}, 3, "sum");
  EXPECT_EQ(m, (std::vector<bool>{true, false, true}));
  EXPECT_THROW(spillway::reduction_mask({3}, 3, "sum"), spillway::logic_error);
  EXPECT_THROW(spillway::reduction_mask({-4}, 3, "sum"), spillway::logic_error);
  EXPECT_THROW(spillway::reduction_mask({1, -2}, 3, "sum"), spillway::logic_error);
}

}  // namespace
