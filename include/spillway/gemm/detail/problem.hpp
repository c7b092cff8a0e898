// spillway/gemm/detail/problem.hpp — the one form every GEMM kernel computes, after the public
// entry points have checked the arguments and folded layouts and transposes away.
//
// C is row-major (a column-major C is computed as Cᵀ = op(B)ᵀ·op(A)ᵀ: operands swap and the
// epilogue sees through detail::swap_frame). Each operand is described by the rows it contributes
// (A: the m rows of C, B: the n columns of C) and the shared dimension k, and whether k is its
// contiguous ("K-major") dimension:
//
//   A(i, kk) = a_kmajor ? a[i * lda + kk] : a[kk * lda + i]        i < m, kk < k
//   B(j, kk) = b_kmajor ? b[j * ldb + kk] : b[kk * ldb + j]        j < n
//   C(i, j)  = c[i * ldc + j]
//   C(i, j) <- convert(epi(alpha * sum_kk A(i,kk) * B(j,kk) + beta * C(i, j), i, j))
//
// beta == 0: C is never read (NaNs in C must not leak). Batch entry q adds q * stride_{a,b,c}.
// All sizes are already validated: m, n, k >= 1 (m, n, k = 0 never reach a kernel), leading
// dimensions and strides fit their shapes, pointers are non-null.
#pragma once

#include <spillway/core/launch.hpp>

namespace spillway::gemm::detail {

template <class TA, class TB, class TC, class Scalar, class Epi>
struct problem {
  index_t m = 0, n = 0, k = 0;
  const TA* a = nullptr;
  index_t lda = 0;
  bool a_kmajor = true;
  const TB* b = nullptr;
  index_t ldb = 0;
  bool b_kmajor = true;
  TC* c = nullptr;
  index_t ldc = 0;
  Scalar alpha{};
  Scalar beta{};
  index_t batch = 1;
  index_t stride_a = 0, stride_b = 0, stride_c = 0;
  Epi epi{};
  /// FP8 on the wgmma path: accumulate the whole k on the tensor cores (fp8_accumulation::fast)
  /// instead of promoting every 128-wide k slice to FP32 registers. Ignored by every other kernel.
  bool fast_accumulation = false;
};

}  // namespace spillway::gemm::detail
