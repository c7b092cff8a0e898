// spillway/gemm/tuning.hpp — what `gemm_path::automatic` runs: for each element type of the type
// table (gemm/types.hpp), and for float under each math mode, the kernel families best first as
// measured on the H200 (benchmarks/results/gemm.md). automatic takes the first family of its row
// that the build and the device can run (gemm::detail::choose_path); simt runs every type, so every
// row ends with it. A new measurement that reorders a row changes this table only.
#pragma once

#include <spillway/gemm/options.hpp>
#include <spillway/gemm/types.hpp>

#include <cstddef>

namespace spillway::gemm {

/// One row: the type's code (gemm_type_info::code), whether it is float under math_mode::tf32,
/// the families best first, and the measurement behind the order.
struct path_ranking {
  char code;
  bool tf32;
  gemm_path order[3];
  int count;
  const char* measured;
};

inline constexpr path_ranking path_rankings[] = {
    {'f',
     false,
     {gemm_path::simt},
     1,
     "exact FP32 runs on the CUDA cores only: simt 0.916x SGEMM (8192^3, 20 alternated pairs, c902b5d)"},
    {'f',
     true,
     {gemm_path::wgmma, gemm_path::mma_sync, gemm_path::simt},
     3,
     "TF32 8192^3: wgmma 0.991x cuBLAS (c902b5d), mma_sync 0.628x (362f8cc); simt computes exact FP32"},
    {'d',
     false,
     {gemm_path::mma_sync, gemm_path::simt},
     2,
     "FP64 8192^3: DMMA mma_sync 0.906x DGEMM (c902b5d); simt 0.191x at 4096^3 (362f8cc)"},
    {'h',
     false,
     {gemm_path::wgmma, gemm_path::mma_sync, gemm_path::simt},
     3,
     "fp16 8192^3: wgmma 1.001x cuBLAS (c902b5d), mma_sync 0.631x (362f8cc)"},
    {'B',
     false,
     {gemm_path::wgmma, gemm_path::mma_sync, gemm_path::simt},
     3,
     "bf16 8192^3: wgmma 0.994x cuBLAS (c902b5d), mma_sync 0.606x (362f8cc)"},
    {'b',
     false,
     {gemm_path::wgmma, gemm_path::mma_sync, gemm_path::simt},
     3,
     "int8 8192^3: wgmma 0.970x cuBLASLt (c902b5d), mma_sync 0.679x (362f8cc)"},
    {'c',
     false,
     {gemm_path::simt},
     1,
     "complex<float> runs on the CUDA cores only: simt 0.911x CGEMM (c902b5d)"},
    {'e',
     false,
     {gemm_path::wgmma, gemm_path::simt},
     2,
     "FP8 e4m3 -> bf16 8192^3: wgmma 0.88x cuBLASLt promoted (8 alternated pairs, 1314c9e), 0.96x both fast "
     "(10 pairs, f6a94e1); no FP8 mma_sync kernel"},
    {'E',
     false,
     {gemm_path::wgmma, gemm_path::simt},
     2,
     "FP8 e5m2: the e4m3 kernel with the .e5m2 instruction (cuBLASLt has no e5m2 x e5m2 to measure against)"},
};

/// The row for a type code and math mode (tf32 matters for float only); nullptr when none.
constexpr const path_ranking* path_ranking_of(char code, bool tf32) {
  for (const path_ranking& r : path_rankings)
    if (r.code == code && r.tf32 == (tf32 && code == 'f')) return &r;
  return nullptr;
}

}  // namespace spillway::gemm
