// spillway/gemm/options.hpp — which kernel computes a GEMM, in which arithmetic, and how.
#pragma once

#include <spillway/core/enum_name.hpp>
#include <spillway/core/launch.hpp>
#include <spillway/gemm/types.hpp>  // accumulator_t, is_gemm_input_v

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

inline const char* to_string(gemm_path p) noexcept {
  return ::spillway::detail::enum_name(p, {"automatic", "wgmma", "mma_sync", "simt"});
}

/// Arithmetic for float inputs. `exact`: FP32 fused multiply-adds on the CUDA cores (the default,
/// what a BLAS SGEMM computes). `tf32`: the TF32 tensor cores (opt-in): each operand keeps its
/// top 10 mantissa bits (truncated, as the tensor cores read FP32 bit patterns; relative operand
/// error up to 2^-10), products accumulate in FP32. Ignored for every other type.
enum class math_mode { exact, tf32 };

/// How the wgmma kernel accumulates FP8 (e4m3, e5m2) products. Hopper's FP8 tensor cores add each
/// instruction's products into the FP32 accumulators at reduced precision (docs/gemm.md, "FP8").
/// `promoted` (the default): each 128-wide slice of k is summed on the tensor cores from zero and
/// then added to FP32 accumulators in registers, so the rounding of the reduced-precision adds spans
/// 128 products, never the whole k (cuBLASLt's default, CUBLASLT_MATMUL_DESC_FAST_ACCUM = 0).
/// `fast`: the tensor cores accumulate the whole k (CUBLASLT_MATMUL_DESC_FAST_ACCUM = 1), faster
/// and less accurate for long k. The simt path and the host GEMM sum in FP32 either way.
enum class fp8_accumulation { promoted, fast };

inline const char* to_string(fp8_accumulation a) noexcept {
  return ::spillway::detail::enum_name(a, {"promoted", "fast"});
}

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
  /// FP8 inputs only: per-tensor dequantization scales of A and B (cuBLASLt's A and B scales):
  /// C = epi(α·scale_a·scale_b·A·B + β·C). For every other element type both must stay 1 (another
  /// value is a logic_error); a scale must be finite and non-zero.
  float scale_a = 1.0f;
  float scale_b = 1.0f;
  /// FP8 inputs on the wgmma path only (ignored elsewhere).
  fp8_accumulation fp8_accumulate = fp8_accumulation::promoted;
};

}  // namespace spillway::gemm
