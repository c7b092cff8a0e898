// spillway/gram/detail/mma_sync_kernel.cuh — the BMMA tile (mma.sync m16n8k256 .b1.and.popc on
// the tile engine's fragments) and its cp.async-fed kernel, what sm_80 to sm_89 run (and any
// device whose build carries no tensor-copy code).
//
// A k-slice is 1024 bits (128 bytes) of every row of the block tile, stored with the tile
// engine's 128-byte XOR swizzle (tile/swizzle.cuh): ldmatrix.x4 reads 8 rows of one chunk column
// from 8 bank groups, and the tensor copy engine's 128-byte swizzle writes the same layout, so the
// TMA-fed kernel (mma_sync_tma_kernel.cuh) shares the fragment loads and the epilogue below. Each
// warp owns an (MT x 16) x (NT x 8) block of the output in registers. The epilogue re-lays the
// accumulators out through shared memory so that a warp hands the epilogue 32 consecutive
// columns of one row per call (128-byte stores instead of 8 rows of half-filled sectors).
//
// The cp.async kernel keeps its own loop (fragments loaded per k-step, not double-buffered in
// registers as in tile::mma_sync_kmajor_mainloop): that loop was measured faster for this tile
// (docs/gram_kernels.md, "mma_sync path").
#pragma once

#include <spillway/tile/arch.cuh>
#include <spillway/tile/cp_async.cuh>
#include <spillway/tile/mma.cuh>
#include <spillway/tile/schedule.cuh>
#include <spillway/tile/swizzle.cuh>

#include <cuda_runtime_api.h>

#include <cstdint>

namespace spillway::gram::detail {

using ::spillway::tile::tile_cursor;
using ::spillway::tile::tile_schedule;

template <int WarpsM, int WarpsN, int MT, int NT, int Stages, bool StreamB>
struct bmma_config {
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
  static constexpr int chunks = (bm + bn) * 8;  // 16-byte chunks per stage
};

// The cp.async kernel's tile: 12 warps (3 per scheduler: one warp's BMMAs issue with a fixed
// latency between them) of 64 x 32, 64 accumulators per thread within the 168 registers of 384
// threads. Block tile 128 x 192, 4 stages x 40 KiB.
using bmma_cp_async_config = bmma_config<2, 6, 4, 4, 4, false>;

/// The BMMAs of one B ldmatrix.x4 (`bq`: n-tiles 2·np and 2·np + 1) against the warp's MT A
/// fragments of the same k256 step; both mma_sync Gram kernels (cp.async and TMA) run it.
template <int MT, int NT>
__device__ __forceinline__ void bmma_b_pair(std::int32_t (&acc)[MT][NT][4], const std::uint32_t (&af)[MT][4],
                                            const std::uint32_t (&bq)[4], int np) {
  const std::uint32_t b_lo[2] = {bq[0], bq[1]};
  const std::uint32_t b_hi[2] = {bq[2], bq[3]};
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    ::spillway::tile::mma_m16n8k256_b1_and(acc[mt][2 * np], af[mt], b_lo);
    ::spillway::tile::mma_m16n8k256_b1_and(acc[mt][2 * np + 1], af[mt], b_hi);
  }
}

/// One warp's MMAs over one 1024-bit k-slice held in shared memory at `base` (4 k256 steps),
/// accumulated into `acc`. ldmatrix lane roles (lane L addresses row L % 8 of matrix L / 8): A
/// (m16 x k256 per MMA) = rows 0-7 / 8-15 of chunk 2s, then of chunk 2s+1; B (two n8 tiles per
/// x4) = n-rows 0-7 chunk 2s, 0-7 chunk 2s+1, 8-15 chunk 2s, 8-15 chunk 2s+1.
template <class Cfg>
__device__ __forceinline__ void bmma_slice(std::uint32_t base, int wm, int wn, int lane,
                                           std::int32_t (&acc)[Cfg::mt][Cfg::nt][4]) {
  namespace t = ::spillway::tile;
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
      t::ldmatrix_x4(af[mt], base + t::swizzle128(row, 2 * ks + a_chunk_hi));
    }
    if constexpr (Cfg::stream_b) {
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        std::uint32_t bq[4];
        const int row = Cfg::bm + wn * NT * 8 + np * 16 + b_row_in;
        t::ldmatrix_x4(bq, base + t::swizzle128(row, 2 * ks + b_chunk_hi));
        bmma_b_pair(acc, af, bq, np);
      }
    } else {
      std::uint32_t bf[NT][2];
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        std::uint32_t bq[4];
        const int row = Cfg::bm + wn * NT * 8 + np * 16 + b_row_in;
        t::ldmatrix_x4(bq, base + t::swizzle128(row, 2 * ks + b_chunk_hi));
        bf[2 * np][0] = bq[0];
        bf[2 * np][1] = bq[1];
        bf[2 * np + 1][0] = bq[2];
        bf[2 * np + 1][1] = bq[3];
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) t::mma_m16n8k256_b1_and(acc[mt][nt], af[mt], bf[nt]);
    }
  }
}

template <class Cfg>
__device__ __forceinline__ void bmma_zero(std::int32_t (&acc)[Cfg::mt][Cfg::nt][4]) {
#pragma unroll
  for (int i = 0; i < Cfg::mt; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::nt; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0;
}

/// Hands a warp's (MT x 16) x (NT x 8) accumulators at tile origin (r0, c0) of the panel to the
/// epilogue, re-laid out through the warp's staging tile `tile` (MT x 16 rows of epi_pitch words)
/// so that each call covers 32 consecutive columns of one row. Elements outside the panel are skipped.
template <class Cfg, class Epilogue>
__device__ __forceinline__ void bmma_epilogue(int* tile, int wm, int wn, int lane,
                                              const std::int32_t (&acc)[Cfg::mt][Cfg::nt][4], std::int64_t r0,
                                              std::int64_t c0, const tile_schedule& s, Epilogue& epi) {
  constexpr int MT = Cfg::mt, NT = Cfg::nt;
  const int g = lane >> 2;
  const int tig = lane & 3;
#pragma unroll
  for (int piece = 0; piece < NT / 4; ++piece) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nn = 0; nn < 4; ++nn) {
        const std::int32_t* v = acc[mt][piece * 4 + nn];
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

/// Persistent grid over the schedule; stages filled by 16-byte cp.async (zero-fill past the
/// panels' last rows), one block barrier per k-slice.
template <class Cfg, class Epilogue>
__global__ void __launch_bounds__(Cfg::threads, 1)
    mma_sync_gram_kernel(const std::uint32_t* __restrict__ a, const std::uint32_t* __restrict__ b,
                         std::int64_t ld_words, tile_schedule s, Epilogue epi) {
#ifdef SPILLWAY_TILE_HAS_MMA
  namespace t = ::spillway::tile;
  constexpr int MT = Cfg::mt, NT = Cfg::nt;
  static_assert(!Cfg::stream_b, "the cp.async tile loads all B fragments of a k-step up front");
  extern __shared__ __align__(128) unsigned char mma_smem[];
  const std::uint32_t smem0 = t::smem_addr(mma_smem);
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int wm = warp / Cfg::warps_n;
  const int wn = warp % Cfg::warps_n;
  const std::int64_t num_k = ld_words / 32;
  tile_cursor cursor;

  for (std::int64_t tt = blockIdx.x; tt < s.total; tt += gridDim.x) {
    std::int64_t ti = 0, tj = 0;
    if (!cursor.locate(s, tt, ti, tj)) continue;
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
        const std::int64_t gr = is_a ? r0 + row : c0 + (row - Cfg::bm);
        const bool valid = gr < (is_a ? s.a_rows : s.b_rows);
        const std::uint32_t* src = (is_a ? a : b) + (valid ? gr : 0) * ld_words + kb * 32 + chunk * 4;
        t::cp_async<16>(base + t::swizzle128(row, chunk), src, valid);
      }
    };

    __syncthreads();  // every warp is done with the previous tile's shared memory
#pragma unroll
    for (int st = 0; st < Cfg::stages - 1; ++st) {
      if (st < num_k) load_stage(st, st);
      t::cp_async_commit();
    }

    std::int32_t acc[MT][NT][4];
    bmma_zero<Cfg>(acc);

    for (std::int64_t kb = 0; kb < num_k; ++kb) {
      t::cp_async_wait<Cfg::stages - 2>();
      __syncthreads();
      {
        const std::int64_t next = kb + Cfg::stages - 1;
        if (next < num_k) load_stage(next, static_cast<int>(next % Cfg::stages));
        t::cp_async_commit();
      }
      bmma_slice<Cfg>(smem0 + static_cast<std::uint32_t>((kb % Cfg::stages) * Cfg::stage_bytes), wm, wn, lane, acc);
    }
    t::cp_async_wait<0>();
    __syncthreads();  // the stage buffers become the epilogue's staging tiles
    bmma_epilogue<Cfg>(reinterpret_cast<int*>(mma_smem) + warp * (MT * 16 * Cfg::epi_pitch), wm, wn, lane, acc, r0, c0,
                       s, epi);
  }
#else
  (void)a, (void)b, (void)ld_words, (void)s, (void)epi;
  __trap();  // never launched: the dispatch refuses mma_sync below compute capability 8.0
#endif
}

}  // namespace spillway::gram::detail
