// Test support: arithmetic rounded the same way on host and device, so a device result can be
// compared exactly with its host reference.
#pragma once

namespace spillway::test {

/// a * b rounded once (never contracted into an FMA with a later add).
__host__ __device__ inline double mul_rn(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

}  // namespace spillway::test
