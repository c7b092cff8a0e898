// gufunc signature parsing and core-dimension binding (host only).
#include <spillway/map/signature.hpp>

#include <gtest/gtest.h>

#include <string>
#include <vector>

using spillway::index_t;
using shape = std::vector<index_t>;

namespace {

std::string message_of(const std::string& sig, const std::vector<shape>& in, const std::vector<shape>& out = {}) {
  try {
    spillway::bind_signature(spillway::parse_signature(sig), in, out);
  } catch (const spillway::logic_error& e) {
    return e.what();
  }
  return "";
}

TEST(MapSignature, ParsesNamesFixedSizesAndScalars) {
  const auto s = spillway::parse_signature("(m,o),(m,o)->(m,o)");
  ASSERT_EQ(s.inputs.size(), 2u);
  ASSERT_EQ(s.outputs.size(), 1u);
  EXPECT_EQ(s.inputs[1][0].name, "m");
  EXPECT_EQ(s.inputs[1][1].name, "o");
  const auto d = spillway::parse_signature(" ( n ) , (n)->( ) ");
  EXPECT_EQ(d.inputs[0].size(), 1u);
  EXPECT_TRUE(d.outputs[0].empty());
  const auto f = spillway::parse_signature("(n,3),()->(n,long_name_2)");
  EXPECT_EQ(f.inputs[0][1].fixed, 3);
  EXPECT_TRUE(f.inputs[1].empty());
  EXPECT_EQ(f.outputs[0][1].name, "long_name_2");
  const auto mm = spillway::parse_signature("(m,n),(n,p)->(m,p),(m)");
  EXPECT_EQ(mm.outputs.size(), 2u);
}

TEST(MapSignature, MalformedSignaturesThrowWithPosition) {
  for (const char* bad : {"", "(n)", "(n)->", "n->()", "(n,)->()", "(n)(n)->()", "(n)->()x", "(n?)->()",
                          "(n)-()", "((n))->()", "(n,m->()", "(1n)->()", "(a,b,c,d,e,f,g,h,i)->()"}) {
    EXPECT_THROW(spillway::parse_signature(bad), spillway::logic_error) << bad;
  }
  try {
    spillway::parse_signature("(n)->()x");
  } catch (const spillway::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("position 7"), std::string::npos) << e.what();
  }
}

TEST(MapSignature, BindsCoreAndBroadcastsLoopDimensions) {
  const auto sig = spillway::parse_signature("(n),(n)->()");
  auto b = spillway::bind_signature(sig, {{1000000, 64}, {1000000, 64}});
  EXPECT_EQ(b.sizes.at("n"), 64);
  EXPECT_EQ(b.loop_shape, (shape{1000000}));
  EXPECT_EQ(b.output_shapes[0], (shape{1000000}));
  // Loop dimensions broadcast like a map's: (7,1,5,n) with (3,1,n) -> loop (7,3,5).
  b = spillway::bind_signature(sig, {{7, 1, 5, 4}, {3, 1, 4}});
  EXPECT_EQ(b.loop_shape, (shape{7, 3, 5}));
  const auto cv = spillway::parse_signature("(m,o),(m,o)->(m,o)");
  b = spillway::bind_signature(cv, {{100, 4000, 5}, {4000, 5}});
  EXPECT_EQ(b.output_shapes[0], (shape{100, 4000, 5}));
  b = spillway::bind_signature(spillway::parse_signature("(m,n),(n,p)->(m,p)"), {{2, 3, 4}, {4, 5}});
  EXPECT_EQ(b.output_shapes[0], (shape{2, 3, 5}));
  // An output given with matching shape is accepted.
  b = spillway::bind_signature(sig, {{6, 4}, {6, 4}}, {{6}});
  EXPECT_EQ(b.loop_shape, (shape{6}));
}

TEST(MapSignature, MismatchesNameArgumentDimensionAndBothSizes) {
  std::string m = message_of("(n),(n)->()", {{10, 64}, {10, 63}});
  EXPECT_NE(m.find("argument 1"), std::string::npos) << m;
  EXPECT_NE(m.find("'n'"), std::string::npos) << m;
  EXPECT_NE(m.find("63"), std::string::npos) << m;
  EXPECT_NE(m.find("64"), std::string::npos) << m;
  m = message_of("(m,o),(m,o)->(m,o)", {{100, 4000, 5}, {4000, 6}});
  EXPECT_NE(m.find("'o'"), std::string::npos) << m;
  m = message_of("(n),(n)->()", {{10, 4}, {9, 4}});
  EXPECT_NE(m.find("loop dimensions"), std::string::npos) << m;
  EXPECT_NE(m.find("9"), std::string::npos) << m;
  m = message_of("(m,n)->()", {{5}});
  EXPECT_NE(m.find("at least 2 core"), std::string::npos) << m;
  m = message_of("(n,3)->()", {{4, 4}});
  EXPECT_NE(m.find("must be 3 but is 4"), std::string::npos) << m;
  m = message_of("(n)->(k)", {{4}});
  EXPECT_NE(m.find("'k'"), std::string::npos) << m;
  m = message_of("(n),(n)->()", {{4}});
  EXPECT_NE(m.find("2 inputs but 1"), std::string::npos) << m;
  m = message_of("(n),(n)->()", {{6, 4}, {6, 4}}, {{5}});
  EXPECT_NE(m.find("output 0"), std::string::npos) << m;
}

}  // namespace
