// spillway/gram/detail/kernel_popc.cuh — the CUDA-core path: __popc(a & b) on 32-bit words.
// Runs on every target (the sm_75 path) and cross-checks the tensor-core paths.
#pragma once

#include <spillway/tile/schedule.cuh>

#include <cuda_runtime_api.h>

#include <cstdint>

namespace spillway::gram::detail {

using ::spillway::tile::tile_cursor;
using ::spillway::tile::tile_schedule;

inline constexpr int popc_tile = 64;      // rows of A and of B per block tile
inline constexpr int popc_kwords = 32;    // 32-bit words per shared-memory k-slice (1024 bits)
inline constexpr int popc_threads = 256;  // 16 x 16 threads, 4 x 4 outputs each

// Each thread owns rows ty + 16*r and columns tx + 16*c (r, c < 4): a warp reads two A rows
// (broadcast) and 16 B rows per k-word, and the B tile's row pitch of 33 words puts those 16 rows
// in 16 different banks.
template <class Epilogue>
__global__ void __launch_bounds__(popc_threads)
    popc_gemm_kernel(const std::uint32_t* __restrict__ a, const std::uint32_t* __restrict__ b,
                     std::int64_t ld_words, tile_schedule s, Epilogue epi) {
  __shared__ std::uint32_t as[popc_tile][popc_kwords + 1];
  __shared__ std::uint32_t bs[popc_tile][popc_kwords + 1];
  const int tx = static_cast<int>(threadIdx.x % 16);
  const int ty = static_cast<int>(threadIdx.x / 16);
  tile_cursor cursor;
  for (std::int64_t t = blockIdx.x; t < s.total; t += gridDim.x) {
    std::int64_t ti = 0, tj = 0;
    if (!cursor.locate(s, t, ti, tj)) continue;  // uniform across the block
    const std::int64_t r0 = ti * popc_tile;
    const std::int64_t c0 = tj * popc_tile;
    int acc[4][4] = {};
    for (std::int64_t k0 = 0; k0 < ld_words; k0 += popc_kwords) {
      for (int e = static_cast<int>(threadIdx.x); e < popc_tile * popc_kwords; e += popc_threads) {
        const int r = e / popc_kwords;
        const int w = e % popc_kwords;
        const std::int64_t ra = r0 + r;
        const std::int64_t rb = c0 + r;
        as[r][w] = ra < s.a_rows ? a[ra * ld_words + k0 + w] : 0u;
        bs[r][w] = rb < s.b_rows ? b[rb * ld_words + k0 + w] : 0u;
      }
      __syncthreads();
#pragma unroll 8
      for (int w = 0; w < popc_kwords; ++w) {
        std::uint32_t av[4], bv[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          av[i] = as[ty + 16 * i][w];
          bv[i] = bs[tx + 16 * i][w];
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] += __popc(av[i] & bv[j]);
        }
      }
      __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const std::int64_t li = r0 + ty + 16 * i;
      if (li >= s.a_rows) continue;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const std::int64_t lj = c0 + tx + 16 * j;
        if (lj < s.b_rows) epi(s.a_row0 + li, s.b_row0 + lj, acc[i][j]);
      }
    }
  }
}

}  // namespace spillway::gram::detail
