// spillway/gram/detail/mma_sync_tma_kernel.cuh — the BMMA tile fed by the tensor copy engine, what
// the mma_sync path runs from compute capability 9.0 (sm_90+ code, 230,488 bytes of shared memory
// per block): 8 warps of 96 x 64 output tiles, block tile 192 x 256, 4 stages of 1024-bit
// k-slices written by bulk tensor copies, fragments and epilogue as in mma_sync_kernel.cuh.
//
// Why 8 warps of 96 x 64 rather than 12 of 64 x 64 (same block tile and stages): per k256 step a
// warp loads 6 A and 4 B fragments (ldmatrix.x4) for 48 independent BMMAs instead of 4 + 4 for
// 32, i.e. 0.83 instead of 1 shared-memory wavefront per BMMA (with the copy engine's fills, 67%
// instead of 77% of the shared-memory bandwidth at the 5.16 P ceiling), and the main loop's
// other instructions (swizzled addresses, the barrier wait, the release) fall from 58 per 128 to
// 45 per 192 BMMAs. Two warps per scheduler still cover the BMMAs' fixed 6-cycle issue stall
// (one BMMA per 6.7 cycles per scheduler at the ceiling). 255 registers at 256 threads, 0 spills.
// H200, 32,768 x 65,536, alternated with the 12-warp tile in one call: 4.08 / 3.89 / 4.11 against
// 3.81 / 3.83 / 3.81 P bit-MAC/s (benchmarks/results/gram_ceiling.md). Fragment addresses fixed
// per lane (bmma_tma_slice): pooled over three calls alternated with the previous loop, median
// 4.10 against 4.04 P (14 runs each).
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
// use (the last of the block's warps) refills the slot at once with slice n + 4, of the same tile
// or (carried ring) of the block's next tile. Nobody waits for a free slot, and the copy has three
// slices of compute to land.
//
// Tiles are claimed (thread 0, from a counter: kernels.cuh, slot_record) rather than taken every
// gridDim-th: blocks that start together then work on schedule neighbours that share k-slices in
// L2 (the same reason as in wgmma_kernel.cuh; ncu at 32,768 x 65,536: L2 hit rate 85%). Thread 0
// claims a tile ahead, so the next tile's origin is known while this one runs. Where the whole
// block tile lies inside the output (and, upper-only, on or above the diagonal), the int32 count
// store goes from the accumulators straight to global memory (bmma_store_counts) and the stages are
// not needed for the epilogue: the slots this tile frees last are refilled with the next tile's
// first slices, which land while the warps finish and store. Before (tensor stores staged in the
// stages, ring restarted per tile), ncu put ~8% of the warps' stall samples at the tile boundary:
// the staging stores (4-way bank conflicts), the serialised tensor-store issue, the wait for their
// reads and the next tile's first copy. H200, 32,768 x 65,536: 14.33 M SM cycles per launch
// against 14.57-14.60 M (-1.7%, every alternated launch); the rate gains less, because the kernel
// runs at the board's 700 W power limit and the clock settles lower for the busier loop
// (benchmarks/results/gram_ceiling.md, 2026-11-24). Tiles that need the per-element epilogue
// (diagonal and edge tiles, other epilogues) stage in the stages as before, behind a block barrier.
// The tile origins and the cursor live in shared memory: in registers they pushed the 168-register
// budget of the 12-warp tile's TMA-store instantiation into spills inside the main loop (48
// bytes; 3.08 against 3.77 P bit-MAC/s without the store).
#pragma once

#include <spillway/gram/detail/mma_sync_kernel.cuh>
#include <spillway/tile/arch.cuh>
#include <spillway/tile/barrier.cuh>
#include <spillway/tile/cp_async.cuh>
#include <spillway/tile/schedule.cuh>
#include <spillway/tile/swizzle.cuh>

#include <cuda.h>  // CUtensorMap only
#include <cuda_runtime_api.h>

#include <cstdint>

namespace spillway::gram::detail {

/// WarpsM x 4 warps of (MT x 16) x 64 output tiles, block tile (WarpsM x MT x 16) x 256, 4 stages
/// of 1024-bit k-slices written by the copy engine, a full mbarrier and a release counter per stage.
template <int WarpsM, int MT>
struct bmma_tma_config_t : bmma_config<WarpsM, 4, MT, 8, 4, true> {
  using base = bmma_config<WarpsM, 4, MT, 8, 4, true>;
  static constexpr int a_bytes = base::bm * 128;
  static constexpr int bar_offset = base::stages * base::stage_bytes;  // from the 1024-aligned base
  /// Hides the base's count: + 1 KiB to align the stages to the swizzle atom, + full barriers,
  /// + release counters, + three tile origins and the schedule cursor.
  static constexpr int smem_bytes =
      1024 + bar_offset + base::stages * 8 + base::stages * 4 + 24 + static_cast<int>(sizeof(tile_cursor));
  static_assert(base::stage_bytes % 1024 == 0 && a_bytes % 1024 == 0, "stages and the B area on the swizzle atom");
  /// Per-warp staging of the per-element epilogue inside the stages (1 KiB multiples).
  static constexpr int warp_staging_bytes = MT * 16 * 64 * 4;
  static_assert(base::threads / 32 * warp_staging_bytes <= bar_offset,
                "the epilogue staging must not overlap the barriers");
  static_assert(MT * 16 * base::epi_pitch * 4 <= warp_staging_bytes, "per-element staging fits a warp's share");
  static_assert(base::bm <= 256 && base::bn <= 256, "a tensor-map box has at most 256 rows");
};

/// 8 warps of 96 x 64 (2 per scheduler), block tile 192 x 256, 4 stages x 56 KiB.
/// (bmma_tma_config_t<3, 4>, 12 warps of 64 x 64, measured 7% slower: see the file comment.)
using bmma_tma_config = bmma_tma_config_t<2, 6>;

/// One 1024-bit k-slice of the warp tile (as bmma_slice) from fragment addresses fixed per lane:
/// `a_frag` / `b_frag` are the lane's ldmatrix addresses of k-step 0 in the slice's stage. Every row
/// a lane reads is congruent mod 8 to its first (fragment rows step by 16), so the 128-byte swizzle
/// of k-step ks is the XOR of ks << 5 into the chunk bits (4-6), which the stage base, the row
/// offsets and the fragment steps (multiples of 1024, 128 and 2048 bytes) leave zero; the fragment
/// steps are immediates. Why: bmma_slice recomputed the swizzled addresses every slice; here the
/// slice costs 2 slot multiply-adds and 6 XORs, and the loop body's instructions other than BMMA
/// and LDSM (release and refill paths included) fall from 92 to 77 per slice (SASS, nvcc 13.0).
template <class Cfg>
__device__ __forceinline__ void bmma_tma_slice(std::uint32_t a_frag, std::uint32_t b_frag,
                                               std::int32_t (&acc)[Cfg::mt][Cfg::nt][4]) {
  namespace t = ::spillway::tile;
  constexpr int MT = Cfg::mt, NT = Cfg::nt;
  constexpr std::uint32_t frag_step = 16u * t::swizzle128_row_bytes;  // 16 rows
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    const std::uint32_t ka = a_frag ^ static_cast<std::uint32_t>(ks << 5);
    const std::uint32_t kb = b_frag ^ static_cast<std::uint32_t>(ks << 5);
    std::uint32_t af[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) t::ldmatrix_x4(af[mt], ka + static_cast<std::uint32_t>(mt) * frag_step);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      std::uint32_t bq[4];
      t::ldmatrix_x4(bq, kb + static_cast<std::uint32_t>(np) * frag_step);
      bmma_b_pair(acc, af, bq, np);
    }
  }
}

/// The warp block's int32 counts straight from the accumulator layout into `epi.c` (block origin
/// `row`, `col` in the output's own indices, 8-byte aligned): each 8-byte store instruction writes 8
/// rows x 32 contiguous bytes (4 lanes per row), whole sectors, evict-first in L2. Why not staged
/// tensor stores: the staging needs the stages, so the next tile's first slices could only be
/// loaded after the stores had read them (ncu: the staging, the serialised tensor-store issue and
/// the wait for their reads were ~5% of the warps' samples).
template <class Cfg, class Epilogue>
__device__ __forceinline__ void bmma_store_counts(const Epilogue& epi, const std::int32_t (&acc)[Cfg::mt][Cfg::nt][4],
                                                  std::int64_t row, std::int64_t col, int lane) {
  namespace t = ::spillway::tile;
  const std::uint64_t policy = t::l2_policy_evict_first();
  std::int32_t* const p0 = epi.c + (row + (lane >> 2)) * epi.ldc + col + 2 * (lane & 3);
#pragma unroll
  for (int mt = 0; mt < Cfg::mt; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      std::int32_t* const p = p0 + static_cast<std::int64_t>(mt * 16 + h * 8) * epi.ldc;
#pragma unroll
      for (int nt = 0; nt < Cfg::nt; ++nt) {
        asm volatile("st.global.L1::no_allocate.L2::cache_hint.v2.s32 [%0], {%1, %2}, %3;\n" ::"l"(p + nt * 8),
                     "r"(acc[mt][nt][2 * h]), "r"(acc[mt][nt][2 * h + 1]), "l"(policy)
                     : "memory");
      }
    }
}

/// Thread 0 only: the block's next tile into origin entry `e` (ya, yb = origin[2e], origin[2e + 1];
/// ya = -1: none left). The block's first tile (`first`) is blockIdx.x, every later one the next
/// unclaimed slot of the schedule (`slot_counter`, zeroed for this launch; `cursor`: thread 0's
/// place in the schedule), so the tiles that start at about the same time are neighbours in the
/// schedule and share their k-slices in L2 while they are read.
template <class Cfg>
__device__ __forceinline__ void bmma_tma_claim(int e, bool first, const tile_schedule& s,
                                               unsigned long long* slot_counter, tile_cursor* cursor,
                                               volatile int* origin) {
  auto claim = [&] {
    return static_cast<std::int64_t>(gridDim.x) + static_cast<std::int64_t>(atomicAdd(slot_counter, 1ull));
  };
  std::int64_t ti = 0, tj = 0;
  std::int64_t tt = first ? static_cast<std::int64_t>(blockIdx.x) : claim();
  tile_cursor c = *cursor;
  while (tt < s.total && !c.locate(s, tt, ti, tj)) tt = claim();
  *cursor = c;
  origin[2 * e] = tt < s.total ? static_cast<int>(ti * Cfg::bm) : -1;
  origin[2 * e + 1] = static_cast<int>(tj * Cfg::bn);
}

/// Thread 0 only, once per block: prefetches the tensor maps, initialises the stages' full
/// barriers (at `full0`) and release counters, the schedule cursor, and claims the block's first
/// two tiles into origin entries 0 and 1.
template <class Cfg>
__device__ __forceinline__ void bmma_tma_setup(const CUtensorMap& map_a, const CUtensorMap& map_b,
                                               std::uint32_t full0, unsigned* released,
                                               const tile_schedule& s, unsigned long long* slot_counter,
                                               tile_cursor* cursor, volatile int* origin) {
  namespace t = ::spillway::tile;
  t::prefetch_tensor_map(&map_a);
  t::prefetch_tensor_map(&map_b);
#pragma unroll
  for (int st = 0; st < Cfg::stages; ++st) {
    t::mbar_init(full0 + 8u * st, 1);
    released[st] = 0;
  }
  *cursor = tile_cursor{};
  t::fence_barrier_init();
  bmma_tma_claim<Cfg>(0, true, s, slot_counter, cursor, origin);
  if (origin[0] >= 0) {
    bmma_tma_claim<Cfg>(1, false, s, slot_counter, cursor, origin);
  } else {
    origin[2] = -1;
  }
}

/// One thread: k-slice kb of the tile at panel rows y0 (A) and y1 (B) into the slot of slice n
/// (n % stages, stages from `smem0`), two tensor copies completing on the slot's full barrier.
template <class Cfg>
__device__ __forceinline__ void bmma_tma_fill(const CUtensorMap& map_a, const CUtensorMap& map_b,
                                              std::uint32_t smem0, std::uint32_t full0, int kb,
                                              std::uint32_t n, int y0, int y1) {
  namespace t = ::spillway::tile;
  const std::uint32_t slot = n % Cfg::stages;
  const std::uint32_t dst = smem0 + slot * static_cast<std::uint32_t>(Cfg::stage_bytes);
  const std::uint32_t bar = full0 + 8u * slot;
  t::mbar_arrive_expect_tx(bar, Cfg::stage_bytes);
  t::tma_load_2d(dst, &map_a, kb * 32, y0, bar);
  t::tma_load_2d(dst + Cfg::a_bytes, &map_b, kb * 32, y1, bar);
}

/// Lane 0 of each warp, once the warp's BMMAs of slice n (k-slice kb of num_k, in `slot`) have
/// consumed its fragments: adds 1 to the slot's release counter; the warp whose add completes the
/// slot's use refills it (bmma_tma_fill) with slice kb + stages of this tile (ya, yb) or, when
/// `carry`, of the next tile (origin entry `nxt`). References, as the kernel's lambdas captured.
template <class Cfg>
__device__ __forceinline__ void bmma_tma_release(const CUtensorMap& map_a, const CUtensorMap& map_b,
                                                 const std::uint32_t& smem0, const std::uint32_t& full0,
                                                 unsigned* const& released, const std::uint32_t& slot,
                                                 const int& kb, const int& num_k, const std::uint32_t& n,
                                                 const bool& carry, const int& ya, const int& yb,
                                                 volatile int* const& origin, const int& nxt) {
  namespace t = ::spillway::tile;
  constexpr int S = Cfg::stages;
  constexpr unsigned warps = Cfg::threads / 32;
  unsigned old = 0;
  asm volatile("atom.acq_rel.cta.shared::cta.add.u32 %0, [%1], 1;\n"
               : "=r"(old)
               : "r"(t::smem_addr(released + slot))
               : "memory");
  if (old % warps == warps - 1) {
    if (kb + S < num_k) {
      t::fence_proxy_async_shared();
      bmma_tma_fill<Cfg>(map_a, map_b, smem0, full0, kb + S, n + S, ya, yb);
    } else if (carry) {
      // Slice kb + S - num_k of the next tile (its origin was published by this tile's barrier).
      t::fence_proxy_async_shared();
      bmma_tma_fill<Cfg>(map_a, map_b, smem0, full0, kb + S - num_k, n + S, origin[2 * nxt],
                         origin[2 * nxt + 1]);
    }
  }
}

/// `DirectStore`: the epilogue is a store_counts<std::int32_t> into a 16-byte aligned output with a
/// row pitch of whole 16-byte units (launch_mma_sync_tma_gram: tma_store_fits), so each warp block
/// wholly inside the output (and, upper-only, on or above the diagonal) is written from its
/// accumulators (bmma_store_counts).
template <class Cfg, class Epilogue, bool DirectStore>
__global__ void __launch_bounds__(Cfg::threads, 1)
    mma_sync_tma_gram_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                             std::int64_t ld_words, tile_schedule s, Epilogue epi, unsigned long long* slot_counter) {
#if defined(SPILLWAY_TILE_HAS_MMA) && defined(SPILLWAY_TILE_HAS_TMA)
  namespace t = ::spillway::tile;
  constexpr int MT = Cfg::mt, NT = Cfg::nt, S = Cfg::stages;
  static_assert(Cfg::stream_b, "the warp tile streams its B fragments (register budget)");
  constexpr bool direct_store = DirectStore;
  extern __shared__ __align__(1024) unsigned char mma_tma_smem_raw[];
  const std::uint32_t raw = t::smem_addr(mma_tma_smem_raw);
  const std::uint32_t smem0 = (raw + 1023u) & ~1023u;
  unsigned char* const base_ptr = mma_tma_smem_raw + (smem0 - raw);
  const std::uint32_t full0 = smem0 + static_cast<std::uint32_t>(Cfg::bar_offset);
  unsigned* const released = reinterpret_cast<unsigned*>(base_ptr + Cfg::bar_offset + S * 8);
  // The block's tiles in claim order, three entries (ya, yb; ya < 0: no tile): the current tile, the
  // next one (claimed a tile ahead, so its first slices can be loaded while this one finishes) and
  // the one thread 0 claims during this tile. Thread 0's schedule cursor sits beside them. Both
  // live in shared memory, so no warp keeps them in registers across the main loop.
  volatile int* const origin = reinterpret_cast<volatile int*>(base_ptr + Cfg::bar_offset + S * 12);
  tile_cursor* const cursor = reinterpret_cast<tile_cursor*>(base_ptr + Cfg::bar_offset + S * 12 + 24);
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int wm = warp / Cfg::warps_n;
  const int wn = warp % Cfg::warps_n;
  const int num_k = static_cast<int>(ld_words / 32);
  // The lane's ldmatrix addresses of k-step 0 in stage 0 (bmma_tma_slice; fragment layout as in
  // bmma_slice: A rows (q & 1) * 8 + lr, chunk q >> 1; B rows (q >> 1) * 8 + lr, chunk q & 1).
  const std::uint32_t a_frag0 =
      smem0 + t::swizzle128(wm * MT * 16 + ((lane >> 3) & 1) * 8 + (lane & 7), lane >> 4);
  const std::uint32_t b_frag0 = smem0 + static_cast<std::uint32_t>(Cfg::a_bytes) +
                                t::swizzle128(wn * NT * 8 + (lane >> 4) * 8 + (lane & 7), (lane >> 3) & 1);

  if (tid == 0) bmma_tma_setup<Cfg>(map_a, map_b, full0, released, s, slot_counter, cursor, origin);

  // Slice n (counted over this block's tiles) lives in slot n % S; it is the slot's use n / S, so
  // the full barrier's phase parity is (n / S) & 1.
  std::uint32_t n0 = 0;
  // This tile's first S slices were issued during the previous tile (see `carry`).
  bool carried = false;

  for (int it = 0;; ++it) {
    // Publishes the origin entries thread 0 wrote during the previous tile; every warp is done with
    // the previous tile's epilogue staging (if it used the stages).
    __syncthreads();
    const int cur = it % 3;
    const int ya = origin[2 * cur];
    const int yb = origin[2 * cur + 1];
    if (ya < 0) break;
    const int nxt = cur == 2 ? 0 : cur + 1;
    // Whole block tile inside the output and (upper-only) on or above the diagonal: every warp stores
    // from its registers, the stages are not the epilogue's staging, so the slots this tile frees
    // last can take the next tile's first slices (carry) while this tile's warps finish.
    bool direct = false;
    if constexpr (direct_store) {
      direct = ya + Cfg::bm <= s.a_rows && yb + Cfg::bn <= s.b_rows &&
               (!epi.upper_only || s.a_row0 + ya + Cfg::bm - 1 <= s.b_row0 + yb);
    }
    const bool carry = direct && num_k >= S && origin[2 * nxt] >= 0;

    auto fill = [&](int kb, std::uint32_t n, int y0, int y1) {
      bmma_tma_fill<Cfg>(map_a, map_b, smem0, full0, kb, n, y0, y1);
    };

    if (tid == 0) {
      if (!carried) {
        // The stages' last readers (ldmatrix, epilogue staging) precede these copies: the barrier above.
        t::fence_proxy_async_shared();
#pragma unroll
        for (int st = 0; st < S; ++st) {
          if (st < num_k) fill(st, n0 + static_cast<std::uint32_t>(st), ya, yb);
        }
      }
      // The tile after next, claimed now, so that whichever warp frees this tile's last slots knows
      // the next tile's origin (the carried fills above).
      const int after = nxt == 2 ? 0 : nxt + 1;
      if (origin[2 * nxt] >= 0) {
        bmma_tma_claim<Cfg>(after, false, s, slot_counter, cursor, origin);
      } else {
        origin[2 * after] = -1;
      }
    }

    std::int32_t acc[MT][NT][4];
    bmma_zero<Cfg>(acc);

#pragma unroll 1
    for (int kb = 0; kb < num_k; ++kb) {
      const std::uint32_t n = n0 + static_cast<std::uint32_t>(kb);
      const std::uint32_t slot = n % S;
      t::mbar_wait(full0 + 8u * slot, (n / S) & 1u);
      const std::uint32_t stage_off = slot * static_cast<std::uint32_t>(Cfg::stage_bytes);
      bmma_tma_slice<Cfg>(a_frag0 + stage_off, b_frag0 + stage_off, acc);
      // Every lane's ldmatrix of this slice has returned (its BMMAs consumed the registers). The
      // counter's acq_rel add orders this warp's reads before the copy the last warp issues.
      __syncwarp();
      if (lane == 0)
        bmma_tma_release<Cfg>(map_a, map_b, smem0, full0, released, slot, kb, num_k, n, carry, ya, yb, origin,
                              nxt);
    }
    n0 += static_cast<std::uint32_t>(num_k);
    carried = carry;

    if constexpr (direct_store) {
      if (direct) {
        // No staging and no barrier: the next tile's first slices land while these stores go out.
        bmma_store_counts<Cfg>(epi, acc, s.a_row0 - epi.row0 + ya + wm * MT * 16,
                               s.b_row0 - epi.col0 + yb + wn * NT * 8, lane);
        continue;
      }
    }

    // Every warp has waited on every slice of this tile, so all copies have landed; after the
    // barrier no warp reads a stage any more and the stages become the epilogue's staging tiles.
    __syncthreads();

    // Each warp stages its block in its own 24 KiB of the stages.
    const std::uint32_t staging = smem0 + static_cast<std::uint32_t>(warp) * Cfg::warp_staging_bytes;
    bool bulk = false;
    if constexpr (direct_store) {
      const std::int64_t wr0 = ya + static_cast<std::int64_t>(wm) * MT * 16;  // panel-local
      const std::int64_t wc0 = yb + static_cast<std::int64_t>(wn) * NT * 8;
      bulk = wr0 + MT * 16 <= s.a_rows && wc0 + NT * 8 <= s.b_rows;
      // Upper-only: every row of the block on or above the diagonal.
      if (bulk && epi.upper_only) bulk = s.a_row0 + wr0 + MT * 16 - 1 <= s.b_row0 + wc0;
      if (bulk) bmma_store_counts<Cfg>(epi, acc, s.a_row0 - epi.row0 + wr0, s.b_row0 - epi.col0 + wc0, lane);
    }
    if (!bulk) {
      bmma_epilogue<Cfg>(reinterpret_cast<int*>(base_ptr + (staging - smem0)), wm, wn, lane, acc, ya, yb, s, epi);
    }
    // The generic-proxy writes of the staging above precede the next tile's copies into the same
    // stages (ordered by the block barrier at the top of the loop and this fence).
    t::fence_proxy_async_shared();
  }
#else
  (void)map_a, (void)map_b, (void)ld_words, (void)s, (void)epi, (void)slot_counter;
  __trap();  // never launched: the dispatch runs this kernel only on sm_90+ code
#endif
}

}  // namespace spillway::gram::detail
