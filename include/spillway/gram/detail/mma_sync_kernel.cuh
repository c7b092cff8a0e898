// spillway/gram/detail/mma_sync_kernel.cuh — the b1 warp-MMA path:
// mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.and.popc (BMMA), sm_80 and up.
//
// Block tile 128 (rows of A) x 256 (rows of B); 8 warps as 2 x 4, each owning a 64 x 64 output
// block (4 x 8 MMA tiles, 128 int32 accumulators per thread). A k-slice is 1024 bits (128 bytes)
// of every row, so each stage holds 384 rows x 128 bytes = 48 KiB, brought in by cp.async 16 bytes
// at a time, 4 stages deep. Rows are stored with their eight 16-byte chunks XOR-swizzled by
// (row % 8): ldmatrix then reads 8 rows of one chunk column from 8 different bank groups.
#pragma once

#include <spillway/gram/detail/kernel_schedule.cuh>

#include <cuda_runtime_api.h>

#include <cstdint>

namespace spillway::gram::detail {

inline constexpr int mma_bm = 128;
inline constexpr int mma_bn = 256;
inline constexpr int mma_stages = 4;
inline constexpr int mma_threads = 256;
inline constexpr int mma_row_bytes = 128;  // one 1024-bit k-slice of one row
inline constexpr int mma_stage_bytes = (mma_bm + mma_bn) * mma_row_bytes;
inline constexpr int mma_smem_bytes = mma_stages * mma_stage_bytes;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define SPILLWAY_GRAM_HAS_BMMA 1
#endif

#ifdef SPILLWAY_GRAM_HAS_BMMA
__device__ __forceinline__ std::uint32_t mma_swizzled(int row, int chunk) {
  return static_cast<std::uint32_t>(row * mma_row_bytes + ((chunk ^ (row & 7)) << 4));
}

__device__ __forceinline__ void mma_cp_async16(std::uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;  // src-size 0: the 16 bytes are zero-filled, nothing is read
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}

__device__ __forceinline__ void mma_ldmatrix_x4(std::uint32_t addr, std::uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void mma_b1(int (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                       std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.and.popc {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif

template <class Epilogue>
__global__ void __launch_bounds__(mma_threads, 1)
    mma_sync_gemm_kernel(const std::uint32_t* __restrict__ a, const std::uint32_t* __restrict__ b,
                         std::int64_t ld_words, tile_schedule s, Epilogue epi) {
#ifdef SPILLWAY_GRAM_HAS_BMMA
  extern __shared__ __align__(128) unsigned char mma_smem[];
  const std::uint32_t smem0 = static_cast<std::uint32_t>(__cvta_generic_to_shared(mma_smem));
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int wm = warp >> 2;  // 0..1: 64-row slab of the block tile
  const int wn = warp & 3;   // 0..3: 64-column slab
  const std::int64_t num_k = ld_words / 32;
  tile_cursor cursor;

  for (std::int64_t t = blockIdx.x; t < s.total; t += gridDim.x) {
    std::int64_t ti = 0, tj = 0;
    if (!cursor.locate(s, t, ti, tj)) continue;
    const std::int64_t r0 = ti * mma_bm;
    const std::int64_t c0 = tj * mma_bn;

    // One stage: 384 rows x 8 chunks; thread tid copies chunks tid, tid + 256, ... (8 neighbouring
    // threads cover one row's 128 contiguous bytes).
    auto load_stage = [&](std::int64_t kb, int slot) {
      const std::uint32_t base = smem0 + static_cast<std::uint32_t>(slot * mma_stage_bytes);
#pragma unroll
      for (int i = 0; i < (mma_bm + mma_bn) * 8 / mma_threads; ++i) {
        const int idx = tid + i * mma_threads;
        const int row = idx >> 3;
        const int chunk = idx & 7;
        const std::uint32_t* src;
        bool valid;
        if (row < mma_bm) {
          const std::int64_t g = r0 + row;
          valid = g < s.a_rows;
          src = a + (valid ? g : 0) * ld_words + kb * 32 + chunk * 4;
        } else {
          const std::int64_t g = c0 + (row - mma_bm);
          valid = g < s.b_rows;
          src = b + (valid ? g : 0) * ld_words + kb * 32 + chunk * 4;
        }
        mma_cp_async16(base + mma_swizzled(row, chunk), src, valid);
      }
    };

    __syncthreads();  // every warp is done reading the previous tile's stages
#pragma unroll
    for (int st = 0; st < mma_stages - 1; ++st) {
      if (st < num_k) load_stage(st, st);
      asm volatile("cp.async.commit_group;\n" ::: "memory");
    }

    int acc[4][8][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = 0;

    // ldmatrix lane roles: lane L gives the address of row (L & 7) of matrix (L >> 3).
    const int q = lane >> 3;
    const int lr = lane & 7;
    // A (m16 x k256 per MMA): matrices 0..3 = rows 0-7/8-15 of chunk 2s, then of chunk 2s+1.
    const int a_row_in = (q & 1) * 8 + lr;
    const int a_chunk_hi = q >> 1;
    // B (two n8 tiles per x4): matrices = n-rows 0-7 chunk 2s, 0-7 chunk 2s+1, 8-15 chunk 2s, 8-15 chunk 2s+1.
    const int b_row_in = (q >> 1) * 8 + lr;
    const int b_chunk_hi = q & 1;

    for (std::int64_t kb = 0; kb < num_k; ++kb) {
      asm volatile("cp.async.wait_group %0;\n" ::"n"(mma_stages - 2) : "memory");
      __syncthreads();
      {
        const std::int64_t next = kb + mma_stages - 1;
        if (next < num_k) load_stage(next, static_cast<int>(next % mma_stages));
        asm volatile("cp.async.commit_group;\n" ::: "memory");
      }
      const std::uint32_t base = smem0 + static_cast<std::uint32_t>((kb % mma_stages) * mma_stage_bytes);
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        std::uint32_t af[4][4];
        std::uint32_t bf[4][4];
#pragma unroll
        for (int mt = 0; mt < 4; ++mt) {
          const int row = wm * 64 + mt * 16 + a_row_in;
          mma_ldmatrix_x4(base + mma_swizzled(row, 2 * ks + a_chunk_hi), af[mt]);
        }
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          const int row = mma_bm + wn * 64 + np * 16 + b_row_in;
          mma_ldmatrix_x4(base + mma_swizzled(row, 2 * ks + b_chunk_hi), bf[np]);
        }
#pragma unroll
        for (int mt = 0; mt < 4; ++mt)
#pragma unroll
          for (int np = 0; np < 4; ++np) {
            mma_b1(acc[mt][2 * np], af[mt], bf[np][0], bf[np][1]);
            mma_b1(acc[mt][2 * np + 1], af[mt], bf[np][2], bf[np][3]);
          }
      }
    }
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");

    const int g = lane >> 2;
    const int tig = lane & 3;
#pragma unroll
    for (int mt = 0; mt < 4; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const std::int64_t li = r0 + wm * 64 + mt * 16 + half * 8 + g;
        if (li >= s.a_rows) continue;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const std::int64_t lj = c0 + wn * 64 + nt * 8 + 2 * tig + e;
            if (lj < s.b_rows) epi(s.a_row0 + li, s.b_row0 + lj, acc[mt][nt][half * 2 + e]);
          }
      }
  }
#else
  (void)a;
  (void)b;
  (void)ld_words;
  (void)s;
  (void)epi;
  __trap();  // never launched: the host dispatch refuses mma_sync below compute capability 8.0
#endif
}

}  // namespace spillway::gram::detail
