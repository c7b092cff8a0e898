// Test support: the element values the GEMM kernel tests (tests/gemm/*_kernel_test.cu) fill
// operands with: doubles rounded to the narrow floating types, and the poison that marks bytes a
// kernel must not read or write.
#pragma once

#include <spillway/gemm/epilogue.hpp>

#include <cuda/std/complex>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstring>
#include <limits>
#include <type_traits>

namespace spillway::test {

/// `v` rounded to T (to nearest for half and bf16): the GEMM's own conversion to an output type.
template <class T>
__host__ __device__ T from_double(double v) {
  return ::spillway::gemm::detail::convert_output<T>(v);
}

/// The poison of unused operand bytes and of C before a run: every byte 0x7f for integers (0x7f
/// for int8, 0x7f7f7f7f for int32), NaN for floating types (both parts of a complex).
template <class T>
T poison_value() {
  if constexpr (std::is_integral_v<T>) {
    T v;
    std::memset(&v, 0x7f, sizeof v);
    return v;
  } else if constexpr (std::is_same_v<T, cuda::std::complex<float>>) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    return T(nan, nan);
  } else {
    return from_double<T>(std::numeric_limits<double>::quiet_NaN());
  }
}

}  // namespace spillway::test
