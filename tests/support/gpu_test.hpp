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
#include <vector>

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

/// The device lists a several-device test runs over: {0, 0} (two workers on one GPU: the
/// scheduling, split, merge and failure paths, in every one-GPU run) and, where two GPUs are
/// visible, {0, 1} (memory crossing devices, which one GPU cannot exercise). With
/// SPILLWAY_REQUIRE_GPUS >= 2 on a smaller machine the missing {0, 1} run is a failure.
inline std::vector<std::vector<int>> two_worker_lists() {
  std::vector<std::vector<int>> lists{{0, 0}};
  if (visible_gpus() >= 2) {
    lists.push_back({0, 1});
  } else if (const char* req = std::getenv("SPILLWAY_REQUIRE_GPUS"); req != nullptr && std::atoi(req) >= 2) {
    ADD_FAILURE() << "SPILLWAY_REQUIRE_GPUS=" << req << " but only " << visible_gpus() << " GPU(s) visible: {0, 1} not run";
  }
  return lists;
}

/// "{0, 1}", for a test's trace.
inline std::string list_name(const std::vector<int>& d) {
  std::string s = "devices {";
  for (std::size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "}";
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
