// spillway/gram/detail/mma_sync_kernel.cuh — the b1 warp-MMA path:
// mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.and.popc (BMMA), sm_80 and up.
//
// A k-slice is 1024 bits (128 bytes) of every row of the block tile, brought in by cp.async 16
// bytes at a time, several stages deep. Rows are stored with their eight 16-byte chunks
// XOR-swizzled by (row % 8), so ldmatrix reads 8 rows of one chunk column from 8 different bank
// groups and the cp.async writes of one row stay contiguous. Each warp owns an (MT x 16) x
// (NT x 8) block of the output in registers. The epilogue re-lays the accumulators out through
// shared memory so that a warp hands the epilogue 32 consecutive columns of one row per call
// (128-byte stores instead of 8 rows of half-filled sectors).
#pragma once

#include <spillway/gram/detail/kernel_schedule.cuh>

#include <cuda_runtime_api.h>

#include <cstdint>

namespace spillway::gram::detail {

template <int WarpsM, int WarpsN, int MT, int NT, int Stages, bool StreamB = false>
struct mma_config {
  static_assert(NT % 4 == 0, "the epilogue hands out 32-column pieces");
  static constexpr int warps_m = WarpsM, warps_n = WarpsN, mt = MT, nt = NT, stages = Stages;
  /// Load the B fragments one 16-row pair at a time, right before their MMAs, instead of all
  /// NT / 2 pairs up front (12 fewer live registers at NT = 8).
  static constexpr bool stream_b = StreamB;
  static constexpr int threads = WarpsM * WarpsN * 32;
  static constexpr int bm = WarpsM * MT * 16;
  static constexpr int bn = WarpsN * NT * 8;
  static constexpr int stage_bytes = (bm + bn) * 128;
  static constexpr int epi_pitch = 40;  // words per staged row (8-byte writes and 4-byte reads conflict-free)
  static constexpr int epi_bytes = WarpsM * WarpsN * MT * 16 * epi_pitch * 4;
  static constexpr int smem_bytes = stages * stage_bytes > epi_bytes ? stages * stage_bytes : epi_bytes;
  static constexpr int chunks = (bm + bn) * 8;  // 16-byte cp.async chunks per stage
};
// 12 warps (3 per scheduler): one warp's BMMAs issue with a fixed latency between them, so the
// tensor pipe needs several warps per scheduler; 64 x 32 warp tiles keep 64 accumulators per
// thread within the 168 registers of 384 threads (no spills). Block tile 128 x 192, 4 stages x
// 40 KiB. Measured on the H200 (32768 x 65536, upper triangle): this 2.63 P bit-MAC/s; 8 warps of
// 64 x 64 tiles 2.54; the same with register double-buffered fragments 2.27 (and 32 bytes of
// spills; that main loop was removed); 16 warps of 64 x 32 tiles 2.76 but with 52 bytes of spills.
using mma_default_config = mma_config<2, 6, 4, 4, 4>;
// The v2 variant (kernel_variant::v2, opt-in): 12 warps of 64 x 64 (3 per scheduler), block tile
// 192 x 256, 4 stages x 56 KiB, B fragments streamed. Per k256 step a warp reads (64 + 64) x 32
// bytes of shared memory for 32 MMAs (128 B per MMA instead of 192); see docs/gram_kernels.md.
using mma_v2_config = mma_config<3, 4, 4, 8, 4, true>;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define SPILLWAY_GRAM_HAS_BMMA 1
#endif

#ifdef SPILLWAY_GRAM_HAS_BMMA
__device__ __forceinline__ std::uint32_t mma_swizzled(int row, int chunk) {
  return static_cast<std::uint32_t>(row * 128 + ((chunk ^ (row & 7)) << 4));
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

/// One warp's MMAs over one 1024-bit k-slice held in shared memory at `base` (4 k256 steps):
/// fragments by ldmatrix.x4 from the swizzled rows, accumulated into `acc`. ldmatrix lane roles:
/// lane L gives the address of row (L & 7) of matrix (L >> 3); A (m16 x k256 per MMA): matrices =
/// rows 0-7 / 8-15 of chunk 2s, then of chunk 2s+1; B (two n8 tiles per x4): n-rows 0-7 chunk 2s,
/// 0-7 chunk 2s+1, 8-15 chunk 2s, 8-15 chunk 2s+1.
template <class Cfg>
__device__ __forceinline__ void mma_slice(std::uint32_t base, int wm, int wn, int lane, int (&acc)[Cfg::mt][Cfg::nt][4]) {
  constexpr int MT = Cfg::mt, NT = Cfg::nt;
  const int q = lane >> 3;
  const int lr = lane & 7;
  const int a_row_in = (q & 1) * 8 + lr;
  const int a_chunk_hi = q >> 1;
  const int b_row_in = (q >> 1) * 8 + lr;
  const int b_chunk_hi = q & 1;
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    std::uint32_t af[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int row = wm * MT * 16 + mt * 16 + a_row_in;
      mma_ldmatrix_x4(base + mma_swizzled(row, 2 * ks + a_chunk_hi), af[mt]);
    }
    if constexpr (Cfg::stream_b) {
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        std::uint32_t bq[4];
        const int row = Cfg::bm + wn * NT * 8 + np * 16 + b_row_in;
        mma_ldmatrix_x4(base + mma_swizzled(row, 2 * ks + b_chunk_hi), bq);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_b1(acc[mt][2 * np], af[mt], bq[0], bq[1]);
          mma_b1(acc[mt][2 * np + 1], af[mt], bq[2], bq[3]);
        }
      }
    } else {
      std::uint32_t bf[NT / 2][4];
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        const int row = Cfg::bm + wn * NT * 8 + np * 16 + b_row_in;
        mma_ldmatrix_x4(base + mma_swizzled(row, 2 * ks + b_chunk_hi), bf[np]);
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
          mma_b1(acc[mt][2 * np], af[mt], bf[np][0], bf[np][1]);
          mma_b1(acc[mt][2 * np + 1], af[mt], bf[np][2], bf[np][3]);
        }
    }
  }
}

template <class Cfg>
__device__ __forceinline__ void mma_zero(int (&acc)[Cfg::mt][Cfg::nt][4]) {
#pragma unroll
  for (int i = 0; i < Cfg::mt; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::nt; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0;
}

/// Hands a warp's (MT x 16) x (NT x 8) accumulators at tile origin (r0, c0) of the panel to the
/// epilogue, re-laid out through the warp's staging tile `tile` (MT x 16 rows of epi_pitch words)
/// so that each call covers 32 consecutive columns of one row: 128-byte stores instead of 8 rows
/// of half-filled sectors. Elements outside the panel are skipped.
template <class Cfg, class Epilogue>
__device__ __forceinline__ void mma_epilogue(int* tile, int wm, int wn, int lane, const int (&acc)[Cfg::mt][Cfg::nt][4],
                                             std::int64_t r0, std::int64_t c0, const tile_schedule& s, Epilogue& epi) {
  constexpr int MT = Cfg::mt, NT = Cfg::nt;
  const int g = lane >> 2;
  const int tig = lane & 3;
#pragma unroll
  for (int piece = 0; piece < NT / 4; ++piece) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nn = 0; nn < 4; ++nn) {
        const int* v = acc[mt][piece * 4 + nn];
        *reinterpret_cast<int2*>(tile + (mt * 16 + g) * Cfg::epi_pitch + 8 * nn + 2 * tig) = make_int2(v[0], v[1]);
        *reinterpret_cast<int2*>(tile + (mt * 16 + g + 8) * Cfg::epi_pitch + 8 * nn + 2 * tig) = make_int2(v[2], v[3]);
      }
    __syncwarp();
    const std::int64_t lj = c0 + wn * NT * 8 + piece * 32 + lane;
    if (lj < s.b_rows) {
#pragma unroll 4
      for (int r = 0; r < MT * 16; ++r) {
        const std::int64_t li = r0 + wm * MT * 16 + r;
        if (li < s.a_rows) epi(s.a_row0 + li, s.b_row0 + lj, tile[r * Cfg::epi_pitch + lane]);
      }
    }
    __syncwarp();
  }
}
#endif

template <class Cfg, class Epilogue>
__global__ void __launch_bounds__(Cfg::threads, 1)
    mma_sync_gemm_kernel(const std::uint32_t* __restrict__ a, const std::uint32_t* __restrict__ b,
                         std::int64_t ld_words, tile_schedule s, Epilogue epi) {
#ifdef SPILLWAY_GRAM_HAS_BMMA
  constexpr int MT = Cfg::mt, NT = Cfg::nt;
  extern __shared__ __align__(128) unsigned char mma_smem[];
  const std::uint32_t smem0 = static_cast<std::uint32_t>(__cvta_generic_to_shared(mma_smem));
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int wm = warp / Cfg::warps_n;
  const int wn = warp % Cfg::warps_n;
  const std::int64_t num_k = ld_words / 32;
  tile_cursor cursor;

  for (std::int64_t t = blockIdx.x; t < s.total; t += gridDim.x) {
    std::int64_t ti = 0, tj = 0;
    if (!cursor.locate(s, t, ti, tj)) continue;
    const std::int64_t r0 = ti * Cfg::bm;
    const std::int64_t c0 = tj * Cfg::bn;

    // One stage: (bm + bn) rows x 8 chunks; neighbouring threads copy one row's 128 contiguous bytes.
    auto load_stage = [&](std::int64_t kb, int slot) {
      const std::uint32_t base = smem0 + static_cast<std::uint32_t>(slot * Cfg::stage_bytes);
#pragma unroll
      for (int i = 0; i < (Cfg::chunks + Cfg::threads - 1) / Cfg::threads; ++i) {
        const int idx = tid + i * Cfg::threads;
        if (Cfg::chunks % Cfg::threads != 0 && idx >= Cfg::chunks) break;
        const int row = idx >> 3;
        const int chunk = idx & 7;
        const bool is_a = row < Cfg::bm;
        const std::int64_t g = is_a ? r0 + row : c0 + (row - Cfg::bm);
        const bool valid = g < (is_a ? s.a_rows : s.b_rows);
        const std::uint32_t* src = (is_a ? a : b) + (valid ? g : 0) * ld_words + kb * 32 + chunk * 4;
        mma_cp_async16(base + mma_swizzled(row, chunk), src, valid);
      }
    };

    // The stream_b configuration's copy loop: a thread always copies the same chunk column of
    // rows tid / 8 + p * (threads / 8), and the source pointer of each slice passes through an
    // empty asm so the compiler recomputes the per-row pointers (one IMAD each) instead of
    // keeping ten 64-bit pointers live across the whole k-loop (those spilled at 168 registers).
    auto load_stage_lean = [&](std::int64_t kb, int slot) {
      static_assert(Cfg::threads % 8 == 0, "a thread keeps one chunk column");
      constexpr int rows_per_pass = Cfg::threads / 8;
      const std::uint32_t base = smem0 + static_cast<std::uint32_t>(slot * Cfg::stage_bytes);
      const int chunk = tid & 7;
      const int row_t = tid >> 3;
      const std::int64_t step = static_cast<std::int64_t>(rows_per_pass) * ld_words;
      const std::uint32_t* pa = a + kb * 32 + chunk * 4;
      const std::uint32_t* pb = b + kb * 32 + chunk * 4;
      asm volatile("" : "+l"(pa), "+l"(pb));
      pa += (r0 + row_t) * ld_words;
      pb += (c0 + row_t) * ld_words;
#pragma unroll
      for (int p = 0; p < (Cfg::bm + rows_per_pass - 1) / rows_per_pass; ++p) {
        const int row = row_t + p * rows_per_pass;
        if (Cfg::bm % rows_per_pass != 0 && row >= Cfg::bm) break;
        const bool valid = r0 + row < s.a_rows;
        mma_cp_async16(base + mma_swizzled(row, chunk), valid ? pa + p * step : a, valid);
      }
#pragma unroll
      for (int p = 0; p < (Cfg::bn + rows_per_pass - 1) / rows_per_pass; ++p) {
        const int row = row_t + p * rows_per_pass;
        if (Cfg::bn % rows_per_pass != 0 && row >= Cfg::bn) break;
        const bool valid = c0 + row < s.b_rows;
        mma_cp_async16(base + mma_swizzled(Cfg::bm + row, chunk), valid ? pb + p * step : b, valid);
      }
    };
    auto load_any = [&](std::int64_t kb, int slot) {
      if constexpr (Cfg::stream_b) {
        load_stage_lean(kb, slot);
      } else {
        load_stage(kb, slot);
      }
    };

    __syncthreads();  // every warp is done with the previous tile's shared memory
#pragma unroll
    for (int st = 0; st < Cfg::stages - 1; ++st) {
      if (st < num_k) load_any(st, st);
      asm volatile("cp.async.commit_group;\n" ::: "memory");
    }

    int acc[MT][NT][4];
    mma_zero<Cfg>(acc);

    for (std::int64_t kb = 0; kb < num_k; ++kb) {
      asm volatile("cp.async.wait_group %0;\n" ::"n"(Cfg::stages - 2) : "memory");
      __syncthreads();
      {
        const std::int64_t next = kb + Cfg::stages - 1;
        if (next < num_k) load_any(next, static_cast<int>(next % Cfg::stages));
        asm volatile("cp.async.commit_group;\n" ::: "memory");
      }
      mma_slice<Cfg>(smem0 + static_cast<std::uint32_t>((kb % Cfg::stages) * Cfg::stage_bytes), wm, wn, lane, acc);
    }
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    __syncthreads();  // the stage buffers become the epilogue's staging tiles
    mma_epilogue<Cfg>(reinterpret_cast<int*>(mma_smem) + warp * (MT * 16 * Cfg::epi_pitch), wm, wn, lane, acc, r0, c0, s,
                      epi);
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
