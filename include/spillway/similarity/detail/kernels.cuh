// spillway/similarity/detail/kernels.cuh — what turns a GEMM of rows into similarities: each
// row's auxiliary value (its inverse norm for cosine, its squared norm for Euclidean distance),
// computed once per panel in float; the scan that finds rows holding NaN or Inf; and the GEMM
// epilogue that scores an inner product with the two rows' values.
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/core/launch.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/similarity/host_similarity.hpp>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace spillway::similarity::detail {

/// A row element as float on the device: the value the GEMM multiplies.
template <class T>
__device__ __forceinline__ float to_float(T x) {
  if constexpr (std::is_same_v<T, __half>) {
    return __half2float(x);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(x);
  } else {
    return static_cast<float>(x);
  }
}

/// The per-row value the epilogue needs: 1/|x| for cosine (0 for a zero row, which the epilogue
/// turns into cosine_zero), |x|² otherwise. One warp per row, float accumulation of widened
/// elements (the same values the GEMM multiplies).
template <class T>
__global__ void row_aux_kernel(const T* __restrict__ rows, std::int64_t n, std::int64_t d, std::int64_t ld,
                               bool inverse_norm, float* __restrict__ out) {
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const std::int64_t warp = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const std::int64_t nwarps = (static_cast<std::int64_t>(gridDim.x) * blockDim.x) >> 5;
  for (std::int64_t r = warp; r < n; r += nwarps) {
    float s = 0.0f;
    for (std::int64_t c = lane; c < d; c += 32) {
      const float x = to_float(rows[r * ld + c]);
      s = fmaf(x, x, s);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, o);
    if (lane == 0) out[r] = inverse_norm ? (s > 0.0f ? 1.0f / sqrtf(s) : 0.0f) : s;
  }
}

/// The smallest row index (plus row_base) holding a NaN or an infinity, into *first (atomicMin;
/// untouched if none).
template <class T>
__global__ void first_nonfinite_row_kernel(const T* __restrict__ rows, std::int64_t n, std::int64_t d, std::int64_t ld,
                                           unsigned long long* first, std::int64_t row_base = 0) {
  const std::int64_t total = n * d;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = e / d, c = e - r * d;
    if (!isfinite(to_float(rows[r * ld + c])))
      atomicMin(first, static_cast<unsigned long long>(row_base + r));
  }
}

template <class T>
void row_aux_async(const T* rows, std::int64_t n, std::int64_t d, std::int64_t ld, similarity_metric m, float* out,
                   stream_view s) {
  if (n <= 0) return;
  row_aux_kernel<T>
      <<<grid_blocks(n, 8), 256, 0, s.value()>>>(rows, n, d, ld, m == similarity_metric::cosine, out);
  SPILLWAY_CHECK_LAUNCH();
}

/// The score of inner product `v` of two rows whose per-row values are ia and ib (see
/// row_aux_kernel). One definition for every place that scores: the GEMM epilogue below and the
/// fused top-k's filter and recomputation, so all of them give the same value for a pair.
template <class V>
SPILLWAY_HD V similarity_score(similarity_metric m, V v, float ia, float ib, float cosine_zero) {
  if (m == similarity_metric::cosine) {
    return (ia == 0.0f || ib == 0.0f) ? static_cast<V>(cosine_zero) : v * ia * ib;
  }
  if (m == similarity_metric::euclidean) {
    const V d2 = static_cast<V>(ia) + static_cast<V>(ib) - V(2) * v;
    if constexpr (std::is_same_v<V, float>) {
      return d2 > 0.0f ? sqrtf(d2) : 0.0f;
    } else {
      return d2 > V(0) ? static_cast<V>(sqrt(static_cast<double>(d2))) : V(0);
    }
  }
  return v;
}

/// The GEMM epilogue of a panel pair: `v` is the inner product of A's row `r` and B's row `c`
/// (positions in the panel's C), `aux_a` / `aux_b` point at the panel's first rows' values.
struct similarity_epilogue {
  similarity_metric m = similarity_metric::cosine;
  const float* aux_a = nullptr;
  const float* aux_b = nullptr;
  float cosine_zero = 0.0f;
  template <class V>
  SPILLWAY_HD V operator()(V v, index_t r, index_t c) const {
    // Inner products never read the per-row values.
    if (m == similarity_metric::inner_product) return v;
    return similarity_score(m, v, aux_a[r], aux_b[c], cosine_zero);
  }
};

}  // namespace spillway::similarity::detail
