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

// With no GPU or driver (CI): errors say plainly what was attempted and that there is no GPU.
TEST(CoreNoGpu, ErrorsNameTheCallAndSayThereIsNoGpu) {
  if (spillway::device_count() > 0) GTEST_SKIP() << "this machine has a GPU; the no-GPU messages are tested in CI";
  const std::string reason = spillway::no_gpu_reason();
  EXPECT_TRUE(reason.find("no CUDA GPU") != std::string::npos || reason.find("no usable NVIDIA driver") != std::string::npos)
      << reason;
  try {
    spillway::pinned_buffer<double> p(1000);
    // Some runtimes pin host memory without a device; then there is nothing to check here.
  } catch (const spillway::no_gpu_error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("cudaHostAlloc of 8000 bytes for pinned_buffer"), std::string::npos) << w;
    EXPECT_NE(w.find("needs a GPU"), std::string::npos) << w;
    EXPECT_EQ(w.find(" e failed"), std::string::npos) << w;
  }
  try {
    spillway::throw_no_gpu("my_job", "try the host version");
  } catch (const spillway::no_gpu_error& e) {
    const std::string w = e.what();
    EXPECT_EQ(w.rfind("my_job needs a GPU, and there is none: ", 0), 0u) << w;
    EXPECT_NE(w.find("; try the host version"), std::string::npos) << w;
    EXPECT_TRUE(spillway::detail::is_no_gpu_error(e.code()));
  }
}
