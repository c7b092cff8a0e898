// Test support: skipping (or failing) GPU tests where no GPU is present, and printed seeds.
#pragma once

#include <spillway/core/device.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <string>

namespace spillway::test {

/// SPILLWAY_REQUIRE_GPU=1 turns a skipped GPU test into a failure (used on the GPU machine).
inline bool gpu_required() {
  const char* v = std::getenv("SPILLWAY_REQUIRE_GPU");
  return v != nullptr && std::strcmp(v, "0") != 0 && v[0] != '\0';
}

inline int visible_gpus() {
  try {
    return device_count();
  } catch (const std::exception&) {
    return 0;
  }
}

/// A seed for a test's random inputs: SPILLWAY_TEST_SEED if set, else a fixed one derived from
/// `salt`. Always printed, so a failure can be reproduced.
inline std::uint64_t seed(const std::string& salt) {
  std::uint64_t s = 0x5eed5eedULL;
  if (const char* v = std::getenv("SPILLWAY_TEST_SEED")) {
    s = std::strtoull(v, nullptr, 0);
  }
  s ^= std::hash<std::string>{}(salt) * 0x9E3779B97F4A7C15ULL;
  std::cout << "[ seed     ] " << salt << " seed=" << s << " (set SPILLWAY_TEST_SEED to vary)\n";
  return s;
}

}  // namespace spillway::test

/// First statement of every test that needs a GPU (such tests live in suites named *Gpu).
#define SPILLWAY_GPU_TEST_OR_SKIP()                                                          \
  do {                                                                                       \
    if (::spillway::test::visible_gpus() == 0) {                                             \
      if (::spillway::test::gpu_required()) {                                                \
        FAIL() << "SPILLWAY_REQUIRE_GPU=1 but no GPU: " << ::spillway::no_gpu_reason();      \
      } else {                                                                               \
        GTEST_SKIP() << "needs a CUDA GPU; none here (" << ::spillway::no_gpu_reason() << ")"; \
      }                                                                                      \
    }                                                                                        \
  } while (0)

/// For tests that need `n` GPUs: skip with the reason on smaller machines (even when
/// SPILLWAY_REQUIRE_GPU=1, unless SPILLWAY_REQUIRE_GPUS=n asks for that many).
#define SPILLWAY_GPUS_TEST_OR_SKIP(n)                                                          \
  do {                                                                                         \
    SPILLWAY_GPU_TEST_OR_SKIP();                                                               \
    const int have_ = ::spillway::test::visible_gpus();                                        \
    if (have_ < (n)) {                                                                         \
      const char* req_ = std::getenv("SPILLWAY_REQUIRE_GPUS");                                 \
      if (req_ != nullptr && std::atoi(req_) >= (n)) {                                         \
        FAIL() << "SPILLWAY_REQUIRE_GPUS=" << req_ << " but only " << have_ << " GPU(s) visible"; \
      }                                                                                        \
      GTEST_SKIP() << "needs " << (n) << " GPUs; " << have_ << " visible (run on nvidia-h200-x2)"; \
    }                                                                                          \
  } while (0)
