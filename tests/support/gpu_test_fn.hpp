// Test support: GPU tests whose bodies are free functions.
#pragma once

#include "support/gpu_test.hpp"

#include <gtest/gtest.h>

/// A GPU test whose body is a free function, for bodies with extended __device__ lambdas (nvcc
/// refuses them in a private member function, which a TEST's body is): declares the function,
/// the TEST that skips without a GPU and calls it, and opens the function's definition:
/// `SPILLWAY_GPU_TEST_FN(MapGpu, Strided) { ... }`.
#define SPILLWAY_GPU_TEST_FN(Suite, Name) \
  void body_##Suite##_##Name();           \
  TEST(Suite, Name) {                     \
    SPILLWAY_GPU_TEST_OR_SKIP();          \
    body_##Suite##_##Name();              \
  }                                       \
  void body_##Suite##_##Name()
