// Host tests of the conveniences a new user reaches for first (issue 16): byte literals in their
// own namespace, an owned stream usable where CUDA wants a cudaStream_t.
#include <spillway/core.hpp>
#include <spillway/version.hpp>

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <type_traits>

namespace literals_only {
// Only the literals, not the whole namespace: what the README snippets do.
using namespace spillway::literals;
static_assert(1_KiB == 1024u && 1_MiB == 1024u * 1024u && 8_GiB == (std::size_t{8} << 30));
}  // namespace literals_only

namespace whole_namespace {
using namespace spillway;  // the literals come with it (an inline namespace)
static_assert(3_GiB == (std::size_t{3} << 30));
}  // namespace whole_namespace

TEST(CoreUsability, ByteLiteralsBuildBudgets) {
  using namespace spillway::literals;
  EXPECT_EQ(spillway::memory_budget(1_GiB).bytes(), std::size_t{1} << 30);
  EXPECT_EQ(spillway::memory_budget(512_MiB).bytes(), std::size_t{512} << 20);
}

TEST(CoreUsability, OwnedStreamConvertsToCudaStreamAndView) {
  // Compile-time facts: an owned stream goes into <<<..., s>>> and runtime calls as a
  // cudaStream_t, and into spillway calls as a stream_view; neither is built from 0/nullptr.
  static_assert(std::is_convertible_v<const spillway::stream&, cudaStream_t>);
  static_assert(std::is_convertible_v<const spillway::stream&, spillway::stream_view>);
  static_assert(std::is_convertible_v<spillway::stream_view, cudaStream_t>);
  static_assert(!std::is_convertible_v<std::nullptr_t, spillway::stream_view>);
  static_assert(!std::is_convertible_v<int, spillway::stream_view>);
  SUCCEED();
}

TEST(CoreUsability, VersionHeaderIsConsistent) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%d.%d.%d", spillway::version_major, spillway::version_minor,
                spillway::version_patch);
  EXPECT_EQ(std::string(buf), spillway::version_string);
}

TEST(CoreUsability, ParseByteSizeTakesTheExamplesUnits) {
  EXPECT_EQ(spillway::parse_byte_size("4GiB"), std::size_t{4} << 30);
  EXPECT_EQ(spillway::parse_byte_size("512MiB"), std::size_t{512} << 20);
  EXPECT_EQ(spillway::parse_byte_size("1.5GiB"), std::size_t{3} << 29);
  EXPECT_EQ(spillway::parse_byte_size("64K"), std::size_t{64} << 10);
  EXPECT_EQ(spillway::parse_byte_size("8GB"), std::size_t{8000000000});
  EXPECT_EQ(spillway::parse_byte_size("12345"), std::size_t{12345});
  EXPECT_EQ(spillway::parse_byte_size("2 TiB"), std::size_t{2} << 40);
  for (const char* bad : {"", "GiB", "4 gibibytes", "0", "-1MiB", "4XB"}) {
    try {
      (void)spillway::parse_byte_size(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const spillway::logic_error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos) << e.what();
    }
  }
}
