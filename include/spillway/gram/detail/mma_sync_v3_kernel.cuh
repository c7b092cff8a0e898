// spillway/gram/detail/mma_sync_v3_kernel.cuh — the b1 warp-MMA path, variant 3 (opt-in):
// the v2 tile (12 warps of 64 x 64, block tile 192 x 256, 4 stages of 1024-bit k-slices) with the
// per-slice block barrier replaced by mbarriers.
//
// v2 synchronises all 12 warps with __syncthreads once per k-slice (64 times per tile at 65,536
// columns): every slice the warps line up, the tensor pipe drains while the last warp finishes,
// and then all warps ask for their first fragments at once. Here every stage has a `full`
// mbarrier (one arrival per thread, made by `cp.async.mbarrier.arrive.noinc` when that thread's
// copies have landed) and an `empty` mbarrier (one arrival per warp once it has read the slice).
// A warp waits only for the data it reads next; a thread refilling a slot waits only until every
// warp is done with the slice that slot held, one slice behind the slice it just computed. Warps
// drift apart by up to about one slice, so at any moment some warps are issuing BMMAs while others
// wait on a fragment load. All sm_80 PTX (mbarrier.test_wait; try_wait where sm_90 has it).
#pragma once

#include <spillway/gram/detail/kernel_schedule.cuh>
#include <spillway/gram/detail/mma_sync_kernel.cuh>

#include <cuda_runtime_api.h>

#include <cstdint>

namespace spillway::gram::detail {

/// 12 warps (3 per scheduler) of 64 x 64 output tiles, block tile 192 x 256, 4 stages x 56 KiB,
/// B fragments streamed one 16-row pair at a time (as mma_v2_config), plus 2 mbarriers per stage.
struct mma_v3_config : mma_config<3, 4, 4, 8, 4, false, true> {
  static constexpr int barrier_offset = stages * stage_bytes;  // 8-byte aligned (stage_bytes % 128 == 0)
  static constexpr int smem_bytes_v3 =
      (barrier_offset + 2 * stages * 8 > epi_bytes ? barrier_offset + 2 * stages * 8 : epi_bytes);
  static_assert(epi_bytes <= barrier_offset, "the epilogue staging must not overlap the barriers");
};

#ifdef SPILLWAY_GRAM_HAS_BMMA
__device__ __forceinline__ void mma_mbar_init(std::uint32_t bar, unsigned count) {
  asm volatile("mbarrier.init.shared.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

/// Arrives on `bar` once every cp.async this thread issued so far has landed (the arrival is
/// counted in the barrier's expected count: .noinc).
__device__ __forceinline__ void mma_mbar_arrive_cp_async(std::uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void mma_mbar_arrive(std::uint32_t bar) {
  asm volatile(
      "{\n .reg .b64 st;\n mbarrier.arrive.shared.b64 st, [%0];\n}\n" ::"r"(bar)
      : "memory");
}

/// Returns once the phase of `bar` with parity `parity` has completed.
__device__ __forceinline__ void mma_mbar_wait(std::uint32_t bar, std::uint32_t parity) {
  std::uint32_t done = 0;
  do {
#if __CUDA_ARCH__ >= 900
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
#else
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.test_wait.parity.shared.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
#endif
  } while (done == 0);
}
#endif

template <class Cfg, class Epilogue>
__global__ void __launch_bounds__(Cfg::threads, 1)
    mma_sync_v3_gemm_kernel(const std::uint32_t* __restrict__ a, const std::uint32_t* __restrict__ b,
                            std::int64_t ld_words, tile_schedule s, Epilogue epi) {
#ifdef SPILLWAY_GRAM_HAS_BMMA
  constexpr int MT = Cfg::mt, NT = Cfg::nt, S = Cfg::stages;
  constexpr int warps = Cfg::threads / 32;
  extern __shared__ __align__(128) unsigned char mma_smem[];
  const std::uint32_t smem0 = static_cast<std::uint32_t>(__cvta_generic_to_shared(mma_smem));
  const std::uint32_t full0 = smem0 + static_cast<std::uint32_t>(Cfg::barrier_offset);
  const std::uint32_t empty0 = full0 + 8u * S;
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int wm = warp / Cfg::warps_n;
  const int wn = warp % Cfg::warps_n;
  const std::int64_t num_k = ld_words / 32;

  if (tid == 0) {
#pragma unroll
    for (int st = 0; st < S; ++st) {
      mma_mbar_init(full0 + 8u * st, Cfg::threads);
      mma_mbar_init(empty0 + 8u * st, warps);
    }
  }
  __syncthreads();

  // Global slice counter across this block's tiles: slice n lives in slot n % S and is that
  // slot's use n / S. Phases cannot alias: a slot's full barrier cannot complete use u + 1
  // before every warp has released use u, and its empty barrier cannot complete use u before
  // every thread has filled it. (2^32 slices per block would wrap; a block sees far fewer.)
  std::uint32_t n0 = 0;
  tile_cursor cursor;

  for (std::int64_t t = blockIdx.x; t < s.total; t += gridDim.x) {
    std::int64_t ti = 0, tj = 0;
    if (!cursor.locate(s, t, ti, tj)) continue;
    const std::int64_t r0 = ti * Cfg::bm;
    const std::int64_t c0 = tj * Cfg::bn;

    // A thread copies one chunk column of rows tid / 8 + p * (threads / 8); the per-slice source
    // pointers go through an empty asm so they are recomputed (one IMAD each) rather than kept
    // live across the k-loop (as in v2, where that was what spilled).
    auto fill = [&](std::int64_t kb, std::uint32_t m) {
      const std::uint32_t slot = m % S;
      if (m >= static_cast<std::uint32_t>(S)) mma_mbar_wait(empty0 + 8u * slot, ((m / S) & 1u) ^ 1u);
      constexpr int rows_per_pass = Cfg::threads / 8;
      const std::uint32_t base = smem0 + slot * static_cast<std::uint32_t>(Cfg::stage_bytes);
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
      mma_mbar_arrive_cp_async(full0 + 8u * slot);
    };

    __syncthreads();  // every warp is done with the previous tile's epilogue staging
#pragma unroll
    for (int st = 0; st < S - 1; ++st) {
      if (st < num_k) fill(st, n0 + static_cast<std::uint32_t>(st));
    }

    int acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = 0;

    // ldmatrix lane roles as in the standard kernel (mma_sync_kernel.cuh).
    const int q = lane >> 3;
    const int lr = lane & 7;
    const int a_row_in = (q & 1) * 8 + lr;
    const int a_chunk_hi = q >> 1;
    const int b_row_in = (q >> 1) * 8 + lr;
    const int b_chunk_hi = q & 1;

#pragma unroll 1
    for (std::int64_t kb = 0; kb < num_k; ++kb) {
      const std::uint32_t n = n0 + static_cast<std::uint32_t>(kb);
      const std::uint32_t slot = n % S;
      mma_mbar_wait(full0 + 8u * slot, (n / S) & 1u);
      const std::uint32_t base = smem0 + slot * static_cast<std::uint32_t>(Cfg::stage_bytes);
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        std::uint32_t af[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const int row = wm * MT * 16 + mt * 16 + a_row_in;
          mma_ldmatrix_x4(base + mma_swizzled(row, 2 * ks + a_chunk_hi), af[mt]);
        }
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
      }
      // Every lane's ldmatrix of this slice has returned (its BMMAs consumed the registers).
      __syncwarp();
      if (lane == 0) mma_mbar_arrive(empty0 + 8u * slot);
      // Refill the slot of slice n - 1 with slice n + S - 1: waits only for the warps that are
      // still on slice n - 1; the data has S - 2 slices of compute to arrive.
      if (kb + S - 1 < num_k) fill(kb + S - 1, n + S - 1);
    }
    n0 += static_cast<std::uint32_t>(num_k);
    // Every warp has waited on every slice of this tile, so all copies have landed; after the
    // barrier no warp reads a stage any more and the stages become the epilogue's staging tiles.
    __syncthreads();

    const int g = lane >> 2;
    const int tig = lane & 3;
    int* tile = reinterpret_cast<int*>(mma_smem) + warp * (MT * 16 * Cfg::epi_pitch);
#pragma unroll
    for (int piece = 0; piece < NT / 4; ++piece) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nn = 0; nn < 4; ++nn) {
          const int* v = acc[mt][piece * 4 + nn];
          *reinterpret_cast<int2*>(tile + (mt * 16 + g) * Cfg::epi_pitch + 8 * nn + 2 * tig) = make_int2(v[0], v[1]);
          *reinterpret_cast<int2*>(tile + (mt * 16 + g + 8) * Cfg::epi_pitch + 8 * nn + 2 * tig) =
              make_int2(v[2], v[3]);
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
