// spillway/gemm/options.hpp — which kernel computes a GEMM, in which arithmetic, and how.
#pragma once

#include <spillway/core/launch.hpp>

#include <cuda/std/complex>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace spillway::gemm {

/// The tile kernel family that runs a GEMM.
///
/// - `automatic`: the fastest this build and device can run for the element type: `wgmma` for
///   bf16 / half / int8 / float-as-TF32 on an sm_90a build on a compute-capability 9.0 device,
///   else `mma_sync` from compute capability 8.0 up (and always for double), else `simt`.
/// - `wgmma`: Hopper warpgroup MMA fed by the tensor copy engine (sm_90a builds only).
/// - `mma_sync`: warp-level tensor-core MMA (sm_80+): bf16, half, int8, float-as-TF32, double (DMMA).
/// - `simt`: register-blocked FMA on the CUDA cores: every type (true FP32 for float; the only path
///   for exact float and for complex<float>).
enum class gemm_path { automatic, wgmma, mma_sync, simt };

inline const char* to_string(gemm_path p) {
  switch (p) {
    case gemm_path::automatic: return "automatic";
    case gemm_path::wgmma: return "wgmma";
    case gemm_path::mma_sync: return "mma_sync";
    case gemm_path::simt: return "simt";
  }
  return "unknown";
}

/// Arithmetic for float inputs. `exact`: FP32 fused multiply-adds on the CUDA cores (the default,
/// what a BLAS SGEMM computes). `tf32`: the TF32 tensor cores (opt-in): each operand keeps its
/// top 10 mantissa bits (truncated, as the tensor cores read FP32 bit patterns; relative operand
/// error up to 2^-10), products accumulate in FP32. Ignored for every other type.
enum class math_mode { exact, tf32 };

/// Split of the k dimension across blocks, for shapes whose output tiles alone leave SMs idle
/// (8192 x 8192 x 256, 64 x 8192 x 8192). 0: chosen from the shape and the SM count; 1: never;
/// s > 1: exactly s slices (partial sums reduced in a second pass, then α/β and the epilogue).
struct gemm_options {
  gemm_path path = gemm_path::automatic;
  math_mode math = math_mode::exact;
  int split_k = 0;
  /// Number of matrices in a strided batch; each view's batch_stride gives the distance between
  /// them (C's must keep the outputs apart; A's or B's may be 0 to reuse one matrix).
  index_t batch_count = 1;
};

/// The accumulator (and α/β) type for an input element type: float for float, half and bf16;
/// double for double; int32 for int8; complex<float> for complex<float>.
template <class T>
struct accumulator;
template <>
struct accumulator<float> {
  using type = float;
};
template <>
struct accumulator<double> {
  using type = double;
};
template <>
struct accumulator<__half> {
  using type = float;
};
template <>
struct accumulator<__nv_bfloat16> {
  using type = float;
};
template <>
struct accumulator<std::int8_t> {
  using type = std::int32_t;
};
template <>
struct accumulator<cuda::std::complex<float>> {
  using type = cuda::std::complex<float>;
};
template <class T>
using accumulator_t = typename accumulator<std::remove_cv_t<T>>::type;

/// True for the element types the GEMM takes as inputs.
template <class T>
inline constexpr bool is_gemm_input_v =
    std::is_same_v<std::remove_cv_t<T>, float> || std::is_same_v<std::remove_cv_t<T>, double> ||
    std::is_same_v<std::remove_cv_t<T>, __half> || std::is_same_v<std::remove_cv_t<T>, __nv_bfloat16> ||
    std::is_same_v<std::remove_cv_t<T>, std::int8_t> ||
    std::is_same_v<std::remove_cv_t<T>, cuda::std::complex<float>>;

}  // namespace spillway::gemm
