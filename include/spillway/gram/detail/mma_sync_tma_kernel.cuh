// spillway/gram/detail/mma_sync_tma_kernel.cuh — the BMMA tile fed by the tensor copy engine, what
// the mma_sync path runs from compute capability 9.0 (sm_90+ code, 230,448 bytes of shared memory
// per block): 12 warps of 64 x 64 output tiles, block tile 192 x 256, 4 stages of 1024-bit
// k-slices written by bulk tensor copies, fragments and epilogue as in mma_sync_kernel.cuh.
//
// Why the copy engine: an ncu profile of the same tile fed by cp.async (H200) showed 491
// instructions per warp per k-slice, of which 128 BMMA and 32 ldmatrix; the copy loop and its
// synchronisation were the rest. Here a slice is two tensor copies (A: 32 words x 192 rows, B:
// 32 words x 256 rows, 128-byte swizzle, rows past the panel read as zeros) issued by one thread,
// so the warps issue BMMA, ldmatrix and one barrier wait per slice. The copy engine's 128-byte
// swizzle is tile::swizzle128 within each 1024-byte block, so the fragment loads are unchanged.
//
// Stage hand-off without an empty barrier: every warp, once its BMMAs of slice n have consumed the
// slice's fragments, adds 1 to a per-slot counter; the warp whose increment completes the slot's
// use (the 12th) refills the slot at once with slice n + 4 of the same tile. Nobody waits for a
// free slot, and the copy has three slices of compute to land. Across tiles the ring restarts
// (a block barrier per tile, which the epilogue needs anyway).
#pragma once

#include <spillway/gram/detail/mma_sync_kernel.cuh>
#include <spillway/tile/arch.cuh>
#include <spillway/tile/barrier.cuh>
#include <spillway/tile/cp_async.cuh>
#include <spillway/tile/schedule.cuh>

#include <cuda.h>  // CUtensorMap only
#include <cuda_runtime_api.h>

#include <cstdint>

namespace spillway::gram::detail {

/// 12 warps of 64 x 64 output tiles, block tile 192 x 256, 4 stages x 56 KiB written by the copy
/// engine, a full mbarrier and a release counter per stage.
struct bmma_tma_config : bmma_config<3, 4, 4, 8, 4, true> {
  static constexpr int a_bytes = bm * 128;
  static constexpr int bar_offset = stages * stage_bytes;  // from the 1024-aligned base
  /// Hides the base's count: + 1 KiB to align the stages to the swizzle atom, + full barriers,
  /// + release counters.
  static constexpr int smem_bytes = 1024 + bar_offset + stages * 8 + stages * 4;
  static_assert(stage_bytes % 1024 == 0 && a_bytes % 1024 == 0, "stages and the B area on the swizzle atom");
  static_assert(epi_bytes <= bar_offset, "the epilogue staging must not overlap the barriers");
  static_assert(bm <= 256 && bn <= 256, "a tensor-map box has at most 256 rows");
};

template <class Cfg, class Epilogue>
__global__ void __launch_bounds__(Cfg::threads, 1)
    mma_sync_tma_gram_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                             std::int64_t ld_words, tile_schedule s, Epilogue epi) {
#if defined(SPILLWAY_TILE_HAS_MMA) && defined(SPILLWAY_TILE_HAS_TMA)
  namespace t = ::spillway::tile;
  constexpr int MT = Cfg::mt, NT = Cfg::nt, S = Cfg::stages;
  static_assert(Cfg::stream_b, "the 64 x 64 warp tile streams its B fragments (register budget)");
  constexpr unsigned warps = Cfg::threads / 32;
  extern __shared__ __align__(1024) unsigned char mma_tma_smem_raw[];
  const std::uint32_t raw = t::smem_addr(mma_tma_smem_raw);
  const std::uint32_t smem0 = (raw + 1023u) & ~1023u;
  unsigned char* const base_ptr = mma_tma_smem_raw + (smem0 - raw);
  const std::uint32_t full0 = smem0 + static_cast<std::uint32_t>(Cfg::bar_offset);
  unsigned* const released = reinterpret_cast<unsigned*>(base_ptr + Cfg::bar_offset + S * 8);
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int wm = warp / Cfg::warps_n;
  const int wn = warp % Cfg::warps_n;
  const std::int64_t num_k = ld_words / 32;

  if (tid == 0) {
    t::prefetch_tensor_map(&map_a);
    t::prefetch_tensor_map(&map_b);
#pragma unroll
    for (int st = 0; st < S; ++st) {
      t::mbar_init(full0 + 8u * st, 1);
      released[st] = 0;
    }
    t::fence_barrier_init();
  }
  __syncthreads();

  // Slice n (counted over this block's tiles) lives in slot n % S; it is the slot's use n / S, so
  // the full barrier's phase parity is (n / S) & 1.
  std::uint32_t n0 = 0;
  tile_cursor cursor;

  for (std::int64_t tt = blockIdx.x; tt < s.total; tt += gridDim.x) {
    std::int64_t ti = 0, tj = 0;
    if (!cursor.locate(s, tt, ti, tj)) continue;
    const int ya = static_cast<int>(ti * Cfg::bm);
    const int yb = static_cast<int>(tj * Cfg::bn);

    auto fill = [&](std::int64_t kb, std::uint32_t n) {
      const std::uint32_t slot = n % S;
      const std::uint32_t dst = smem0 + slot * static_cast<std::uint32_t>(Cfg::stage_bytes);
      const std::uint32_t bar = full0 + 8u * slot;
      t::mbar_arrive_expect_tx(bar, Cfg::stage_bytes);
      const int x = static_cast<int>(kb * 32);
      t::tma_load_2d(dst, &map_a, x, ya, bar);
      t::tma_load_2d(dst + Cfg::a_bytes, &map_b, x, yb, bar);
    };

    __syncthreads();  // every warp is done with the previous tile's epilogue staging
    if (tid == 0) {
#pragma unroll
      for (int st = 0; st < S; ++st) {
        if (st < num_k) fill(st, n0 + static_cast<std::uint32_t>(st));
      }
    }

    std::int32_t acc[MT][NT][4];
    bmma_zero<Cfg>(acc);

#pragma unroll 1
    for (std::int64_t kb = 0; kb < num_k; ++kb) {
      const std::uint32_t n = n0 + static_cast<std::uint32_t>(kb);
      const std::uint32_t slot = n % S;
      t::mbar_wait(full0 + 8u * slot, (n / S) & 1u);
      bmma_slice<Cfg>(smem0 + slot * static_cast<std::uint32_t>(Cfg::stage_bytes), wm, wn, lane, acc);
      // Every lane's ldmatrix of this slice has returned (its BMMAs consumed the registers). The
      // counter's acq_rel add orders this warp's reads before the copy the last warp issues.
      __syncwarp();
      if (lane == 0) {
        unsigned old = 0;
        asm volatile("atom.acq_rel.cta.shared::cta.add.u32 %0, [%1], 1;\n"
                     : "=r"(old)
                     : "r"(t::smem_addr(released + slot))
                     : "memory");
        if (old % warps == warps - 1 && kb + S < num_k) {
          t::fence_proxy_async_shared();
          fill(kb + S, n + S);
        }
      }
    }
    n0 += static_cast<std::uint32_t>(num_k);
    // Every warp has waited on every slice of this tile, so all copies have landed; after the
    // barrier no warp reads a stage any more and the stages become the epilogue's staging tiles.
    __syncthreads();

    bmma_epilogue<Cfg>(reinterpret_cast<int*>(base_ptr) + warp * (MT * 16 * Cfg::epi_pitch), wm, wn, lane, acc, ya, yb,
                       s, epi);
    // The generic-proxy writes of the staging above precede the next tile's copies into the same
    // stages (ordered by the block barrier at the top of the loop and this fence).
    t::fence_proxy_async_shared();
  }
#else
  (void)map_a, (void)map_b, (void)ld_words, (void)s, (void)epi;
  __trap();  // never launched: the dispatch runs this kernel only on sm_90+ code
#endif
}

}  // namespace spillway::gram::detail
