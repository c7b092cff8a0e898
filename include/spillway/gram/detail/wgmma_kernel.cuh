// spillway/gram/detail/wgmma_kernel.cuh — the BGMMA tile kernel (sm_90a):
// wgmma.mma_async m64n256k256 .s32.b1.b1.and.popc on the tile engine, block tile 128 x 256 per
// block, blocks in pairs (2-block clusters) that share the B tile by tensor-copy multicast, one
// producer thread per block issuing tensor copies into 4 stages of 48 KiB, two consumer
// warpgroups, tiles claimed from a counter, and for int32 raw counts an epilogue written by
// tensor stores that the L2 evicts first.
//
// A k-slice is 1024 bits = 128 bytes of each row: one row of the 128-byte swizzle pattern. The
// tensor maps' box is 32 words x rows with that swizzle and the wgmma descriptors use the same
// one, so the copy engine writes and the tensor cores read without bank conflicts; each slice
// feeds four k256 MMAs whose descriptors advance 32 bytes inside the swizzle atom.
//
// Why pairs, a claimed schedule and the evict-first stores (the profiles: docs/gram_kernels.md,
// "wgmma kernel"): the single-block kernel with every gridDim-th tile per block kept the tensor
// pipe waiting on its stages while the L2 re-fetched the panels from HBM. Blocks drift apart over
// ~125 tiles each, so the blocks that share a k-slice no longer read it at the same time and the L2
// holds neither A's nor B's slices long enough. With each block claiming the next unclaimed tile,
// tiles that start together are schedule neighbours (one A row tile, neighbouring B column tiles)
// and the L2 hits. A pair reads each B slice from L2 once for two blocks (32 KiB per block and
// slice instead of 48), and the output no longer evicts the panels.
//
// A pair computes the row tiles 2p and 2p + 1 of one column tile: block `rank` loads its own A
// tile and rows [128 rank, 128 rank + 128) of the B tile into both blocks (multicast); a stage is
// free once the consumer warps of both blocks have read it (each warp arrives on both blocks'
// empty barrier). Block 0's producer claims the pair's tiles and publishes each slot through a
// two-entry ring in global memory next to the counter. (Claiming one tile ahead, so that the atomic's round
// trip overlaps the current tile, measured no faster: a block holding a claim it cannot start yet
// undoes the balancing of the last tiles; docs/gram_kernels.md, "wgmma kernel". At K = 2,048 it
// was slower too: 1.544 against 1.514 s of products in the ChEMBL-size fingerprint search.)
//
// Short products (K = 2,048 bits: two k-slices a tile) are bound by what happens between two
// tiles' MMAs, not by the MMAs. A consumer reads the next tile's ring entry (the tile itself, no
// slot to locate) as soon as it has issued this tile's last MMA and hands it back after the
// epilogue, so the entry's load from L2 runs under the epilogue; and a threshold epilogue's row
// popcounts and bounds load before the k-loop (wgmma_row_prefetch); and where a tile's k-slices
// fit the ring (K <= 4,096 bits) the two consumer warpgroups run half a tile apart (warpgroup 1
// waits for warpgroup 0's first tile once), so one's epilogue overlaps the other's MMAs. (Past the
// ring that first wait deadlocks: warpgroup 0 needs stages that only both warpgroups hand back —
// found by FaultGramGpu.EveryCopyAndLaunchOfAStripStreamed at K = 40,000.) Products of the fingerprint search
// (one H200): 1.515 s before, 1.385 s with the early entry and the prefetch, 1.349 s staggered too
// (docs/gram.md).
//
// Epilogue. For a `store_counts<std::int32_t>` whose output a tensor map can describe (TmaStore),
// each consumer warpgroup writes its 64 x 256 accumulators in eight 64 x 32 pieces into a
// 128-byte-swizzled, double-buffered 8 KiB staging buffer and one thread sends each piece with a
// bulk tensor store: ~80 instructions per thread per tile instead of ~1,800, and the writes drain
// while the warpgroup waits on the next tile's first stage. Blocks that straddle the output's
// last row or column, or the diagonal of an upper-only store, and every other epilogue go per
// element: through a 16 x 32 per-warp staging tile so that a warp hands the epilogue 32
// consecutive columns of one row per call (128-byte stores).
#pragma once

#include <spillway/tile/arch.cuh>
#include <spillway/tile/barrier.cuh>
#include <spillway/tile/cp_async.cuh>
#include <spillway/tile/schedule.cuh>
#include <spillway/tile/tensor_map.hpp>
#include <spillway/tile/wgmma.cuh>
#include <spillway/tile/wgmma_mainloop.cuh>

#include <cuda.h>  // CUtensorMap only
#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

namespace spillway::gram::detail {

using ::spillway::tile::tile_cursor;
using ::spillway::tile::tile_schedule;

/// The BGMMA tile of one block: two consumer warpgroups of 64 rows x 256 columns each behind one
/// producer warpgroup, 4 stages of one 1024-bit k-slice; `cluster` blocks per pair.
struct wg_config {
  static constexpr int cluster = 2;
  static constexpr int consumers = 2;
  static constexpr int bm = 128;
  static constexpr int bn = 256;
  static constexpr int row_bytes = 128;
  static constexpr int words = 32;  // tensor-map box width in 32-bit words
  static constexpr int stages = 4;
  static constexpr int threads = 384;
  static constexpr int a_bytes = bm * row_bytes;
  static constexpr int b_bytes = bn * row_bytes;
  static constexpr int stage_bytes = a_bytes + b_bytes;
  // Registers after setmaxnreg (65,536 per SM, one block): producer + consumers fit the file.
  static constexpr int producer_regs = 40;
  static constexpr int consumer_regs = 232;
  static_assert(128 * producer_regs + 256 * consumer_regs <= 65536, "register file");
};

// Per-element staging: 16 rows x 32 columns per consumer warp, row pitch 40 words (the
// accumulator layout's 8-byte writes and the 4-byte row reads are both free of bank conflicts).
inline constexpr int wg_stage_pitch = 40;
// Bulk-store staging: one 64 x 32 int32 piece, double-buffered per consumer warpgroup.
inline constexpr int wg_piece_bytes = 64 * 32 * 4;
inline constexpr int wg_region_bytes = 2 * wg_piece_bytes;
static_assert(4 * 16 * wg_stage_pitch * 4 <= wg_region_bytes, "per-element staging fits a warpgroup's region");
inline constexpr int wg_staging_bytes = wg_config::consumers * wg_region_bytes;
// + 1 KiB to align the stages to the 1024-byte swizzle atom, + staging, + full and empty mbarriers,
// + the tile ring's full and empty mbarriers (two entries).
inline constexpr int wg_smem_bytes = wg_config::stages * wg_config::stage_bytes + 1024 + wg_staging_bytes +
                                     ::spillway::tile::wgmma_ring<wg_config::stages, wg_config::stage_bytes,
                                                                  wg_config::cluster>::barrier_bytes +
                                     4 * 8;
static_assert(wg_smem_bytes <= 232448, "within the 227 KiB a block may opt into on sm_90");
static_assert(wg_config::stage_bytes % 1024 == 0 && wg_config::a_bytes % 1024 == 0, "stages and B on the swizzle atom");
inline constexpr int wg_bm = wg_config::bm;
inline constexpr int wg_bn = wg_config::bn;

/// A tensor map over a bit panel: `rows` rows of `ld_words` words, box 32 words x `box_rows` rows,
/// 128-byte swizzle; rows past the panel read as zeros.
inline CUtensorMap make_bit_tensor_map(const std::uint32_t* base, std::int64_t rows, std::int64_t ld_words,
                                       int box_rows, const char* what) {
  return ::spillway::tile::make_matrix_tensor_map<std::uint32_t>(base, rows, ld_words, ld_words, box_rows, 32,
                                                                 ::spillway::tile::swizzle::b128, what);
}

/// Tensor map over an int32 output for the bulk-store epilogue: `rows` x `cols`, row pitch `ld`
/// elements, box 32 columns x `box_rows` rows, 128-byte swizzle (the staging layout). Nothing
/// outside [0, cols) x [0, rows) is written.
inline CUtensorMap make_count_tensor_map(std::int32_t* base, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                                         int box_rows = 64) {
  ::spillway::tile::tensor_map_spec spec;
  spec.data_type = ::spillway::tile::tensor_map_data_type<std::int32_t>();
  spec.elem_bytes = 4;
  spec.base = base;
  spec.rank = 2;
  spec.dims[0] = cols;
  spec.dims[1] = rows;
  spec.pitch[0] = ld * 4;
  spec.box[0] = 32;
  spec.box[1] = box_rows;
  spec.swz = ::spillway::tile::swizzle::b128;
  spec.l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_NONE;
  spec.what = "gram wgmma: int32 count output";
  return ::spillway::tile::make_tensor_map(spec);
}

/// An epilogue that declares `static constexpr bool wgmma_fragment = true` takes each consumer
/// thread's accumulators where they are, in registers, instead of element by element through
/// shared memory: epi.fragment(d, i_base, j_base, i_end, j_end, lane), d[4n + 2h + e] being the
/// count of (i_base + lane / 4 + 8h, j_base + 8n + 2 (lane % 4) + e) for n < 32, h, e < 2 (global
/// indices); rows >= i_end or columns >= j_end lie outside the product and must be skipped, and
/// upper-only products deliver the pairs below the diagonal of a crossing tile too. All 32 lanes
/// of each warp call it together. (The pair job's checksum sink uses it: checksum_epilogue.)
template <class E, class = void>
struct wgmma_fragment_epilogue : std::false_type {};
template <class E>
struct wgmma_fragment_epilogue<E, std::void_t<decltype(E::wgmma_fragment)>> : std::bool_constant<E::wgmma_fragment> {};

/// An epilogue that also declares `static constexpr bool wgmma_row_prefetch = true` reads what it
/// needs of its rows (popcounts, bounds) before the tile's k-loop, where the loads' latency hides
/// behind the tensor cores: `rows_t epi.rows(i_base, i_end, lane)` before, and
/// `epi.fragment(d, ..., lane, rows)` after.
template <class E, class = void>
struct wgmma_row_prefetch_epilogue : std::false_type {};
template <class E>
struct wgmma_row_prefetch_epilogue<E, std::void_t<decltype(E::wgmma_row_prefetch)>>
    : std::bool_constant<E::wgmma_row_prefetch> {};
struct no_row_prefetch {};

/// What a wgmma_row_prefetch epilogue reads of a consumer warp's rows of row tile ti (panel-local),
/// before the tile's k-loop.
template <class Epilogue>
__device__ __forceinline__ auto wg_rows(const Epilogue& epi, const tile_schedule& s, std::int64_t ti, int cw,
                                        int warp_in_wg, int lane) {
  if constexpr (wgmma_row_prefetch_epilogue<Epilogue>::value) {
    return epi.rows(s.a_row0 + ti * wg_config::bm + cw * 64 + warp_in_wg * 16, s.a_row0 + s.a_rows, lane);
  } else {
    return no_row_prefetch{};
  }
}

/// One consumer warpgroup's epilogue of tile (ti, tj) (this block's row tile, panel-local):
/// hands its 64 x 256 counts `d` to `epi` through the fragment hook, the bulk tensor stores
/// (TmaStore) or the per-element staging in `region`, its share of the block's staging (`raw`: the
/// shared-memory window's address, `smem` its generic pointer). `rows`: what epi.rows() read
/// before the k-loop (wgmma_row_prefetch epilogues; no_row_prefetch otherwise).
template <class Epilogue, bool TmaStore, class Rows>
__device__ __forceinline__ void wg_write_tile(const std::int32_t (&d)[128], const tile_schedule& s,
                                              const Epilogue& epi, const CUtensorMap* map_c, std::int64_t ti,
                                              std::int64_t tj, int cw, int warp_in_wg, int lane, bool leader,
                                              std::uint64_t pol_c, std::uint32_t region, unsigned char* smem,
                                              std::uint32_t raw, const Rows& rows) {
  (void)rows;  // wgmma_row_prefetch epilogues only
  namespace t = ::spillway::tile;
  using Cfg = wg_config;
  (void)map_c, (void)leader, (void)pol_c;  // TmaStore only
  // The pair's other row tile may lie past the panel or, upper-only, wholly below the
  // diagonal: a tile the one-block schedule would skip delivers nothing here either.
  if (ti * Cfg::bm >= s.a_rows) return;
  if (s.upper_only) {
    const std::int64_t last_col =
        s.b_row0 + ((tj + 1) * Cfg::bn < s.b_rows ? (tj + 1) * Cfg::bn : s.b_rows) - 1;
    if (s.a_row0 + ti * Cfg::bm > last_col) return;
  }

  const int g = lane / 4;
  const int tig = lane % 4;
  const std::int64_t row_base = ti * Cfg::bm + cw * 64 + warp_in_wg * 16;  // panel-local
  if constexpr (wgmma_fragment_epilogue<Epilogue>::value) {
    if constexpr (wgmma_row_prefetch_epilogue<Epilogue>::value) {
      epi.fragment(d, s.a_row0 + row_base, s.b_row0 + tj * wg_bn, s.a_row0 + s.a_rows, s.b_row0 + s.b_rows,
                   lane, rows);
    } else {
      epi.fragment(d, s.a_row0 + row_base, s.b_row0 + tj * wg_bn, s.a_row0 + s.a_rows, s.b_row0 + s.b_rows,
                   lane);
    }
    return;
  }
  if constexpr (TmaStore) {
    // Only blocks wholly inside the output go through the copy engine: a box that straddles
    // the last column was measured (H200) to write the 16-byte group holding the bound, i.e.
    // up to 3 columns past it.
    bool bulk = tj * Cfg::bn + Cfg::bn <= s.b_rows && ti * Cfg::bm + cw * 64 + 64 <= s.a_rows;
    if (bulk && epi.upper_only) {
      // Every element of this warpgroup's 64 rows must satisfy i <= j.
      const std::int64_t last_local = ti * Cfg::bm + cw * 64 + 63;
      const std::int64_t last_row = s.a_row0 + (last_local < s.a_rows ? last_local : s.a_rows - 1);
      bulk = last_row <= s.b_row0 + tj * Cfg::bn;
    }
    if (bulk) {
      // Output coordinates of this warpgroup's block (the tensor map starts at (row0, col0)).
      const int y = static_cast<int>(s.a_row0 - epi.row0 + ti * Cfg::bm + cw * 64);
      const int x0 = static_cast<int>(s.b_row0 - epi.col0 + tj * Cfg::bn);
      const int r_lo = warp_in_wg * 16 + g;  // rows r_lo and r_lo + 8 of the 64-row piece
      const std::uint32_t sw = static_cast<std::uint32_t>(r_lo & 7);
#pragma unroll
      for (int piece = 0; piece < 8; ++piece) {
        const std::uint32_t buf = region + static_cast<std::uint32_t>((piece & 1) * wg_piece_bytes);
        // The store issued two pieces ago from this buffer must have read it out.
        if (leader) t::bulk_wait_group_read<1>();
        t::named_barrier_sync(1 + cw, 128);
#pragma unroll
        for (int nn = 0; nn < 4; ++nn) {
          const int n = piece * 4 + nn;
          const std::uint32_t chunk = static_cast<std::uint32_t>(2 * nn + tig / 2);
          const std::uint32_t col_off = ((chunk ^ sw) << 4) + static_cast<std::uint32_t>((tig & 1) * 8);
          asm volatile("st.shared.v2.s32 [%0], {%1, %2};\n" ::"r"(
                           buf + static_cast<std::uint32_t>(r_lo * 128) + col_off),
                       "r"(d[4 * n]), "r"(d[4 * n + 1])
                       : "memory");
          asm volatile("st.shared.v2.s32 [%0], {%1, %2};\n" ::"r"(
                           buf + static_cast<std::uint32_t>((r_lo + 8) * 128) + col_off),
                       "r"(d[4 * n + 2]), "r"(d[4 * n + 3])
                       : "memory");
        }
        // Generic-proxy writes become visible to the copy engine, then one thread sends the piece.
        t::fence_proxy_async_shared();
        t::named_barrier_sync(1 + cw, 128);
        if (leader) {
          t::tma_store_2d_hint(map_c, x0 + piece * 32, y, buf, pol_c);
          t::bulk_commit_group();
        }
      }
      return;
    }
    // The per-element staging below reuses this warpgroup's region: pending bulk stores
    // must have read it out first.
    if (leader) t::bulk_wait_group_read<0>();
    t::named_barrier_sync(1 + cw, 128);
  }
  {
    int* stage_tile = reinterpret_cast<int*>(smem + (region - raw)) + warp_in_wg * (16 * wg_stage_pitch);
#pragma unroll
    for (int piece = 0; piece < 8; ++piece) {
#pragma unroll
      for (int nn = 0; nn < 4; ++nn) {
        const int n = piece * 4 + nn;
        *reinterpret_cast<int2*>(stage_tile + g * wg_stage_pitch + 8 * nn + 2 * tig) =
            make_int2(d[4 * n], d[4 * n + 1]);
        *reinterpret_cast<int2*>(stage_tile + (g + 8) * wg_stage_pitch + 8 * nn + 2 * tig) =
            make_int2(d[4 * n + 2], d[4 * n + 3]);
      }
      __syncwarp();
      const std::int64_t lj = tj * Cfg::bn + piece * 32 + lane;
      if (lj < s.b_rows) {
#pragma unroll 4
        for (int r = 0; r < 16; ++r) {
          const std::int64_t li = row_base + r;
          if (li < s.a_rows) epi(s.a_row0 + li, s.b_row0 + lj, stage_tile[r * wg_stage_pitch + lane]);
        }
      }
      __syncwarp();
    }
  }
}

/// `TmaStore`: the epilogue is a store_counts<std::int32_t> whose output `map_c` describes (see
/// the launcher); otherwise map_c is unused and every tile takes the per-element path. Launched as
/// 2-block clusters over a schedule of pair row tiles (bm = 256); `slot_counter[0]` (zero at
/// launch) hands out the slots after each pair's first, slot gridDim.x / 2 onwards, and
/// slot_counter[1 + 2 p + e] is entry e of pair p's tile ring (kernels.cuh: slot_record).
template <class Epilogue, bool TmaStore>
__global__ void __launch_bounds__(wg_config::threads, 1)
    wgmma_gram_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                      const __grid_constant__ CUtensorMap map_c, std::int64_t ld_words, tile_schedule s,
                      Epilogue epi, unsigned long long* slot_counter) {
#ifdef SPILLWAY_TILE_HAS_WGMMA
  namespace t = ::spillway::tile;
  using Cfg = wg_config;
  constexpr int S = Cfg::stages;
  constexpr int CL = Cfg::cluster;
  extern __shared__ __align__(1024) unsigned char wg_smem_raw[];
  const std::uint32_t raw = t::smem_addr(wg_smem_raw);
  const std::uint32_t smem0 = (raw + 1023u) & ~1023u;
  const std::uint32_t staging0 = smem0 + S * Cfg::stage_bytes;  // 1024-byte aligned
  const std::uint32_t bars = staging0 + wg_staging_bytes;
  using ring_t = t::wgmma_ring<S, Cfg::stage_bytes, CL>;
  const ring_t ring{smem0, bars};
  // The tile ring: entry e (in global memory after the counter, two per pair) holds the pair's
  // next tile (its row tile << 32 | its column tile; -1 once none is left); tile_full[e] completes (in both
  // blocks) once block 0's producer has written it, tile_empty[e] (block 0's) once every reader has it. In
  // shared memory, written remotely, the entries were correct but opaque to compute-sanitizer's racecheck
  // (cluster-scope mbarriers).
  const std::uint32_t tile_bars0 = bars + static_cast<std::uint32_t>(2 * S) * 8u;
  auto tile_full = [&](int e) { return tile_bars0 + static_cast<std::uint32_t>(e) * 8u; };
  auto tile_empty = [&](int e) { return tile_bars0 + static_cast<std::uint32_t>(2 + e) * 8u; };
  volatile long long* const entries = reinterpret_cast<volatile long long*>(slot_counter) + 1 + 2 * (blockIdx.x / CL);

  const int tid = static_cast<int>(threadIdx.x);
  const int wg = tid / 128;
  const std::int64_t num_k = ld_words / Cfg::words;
  const std::uint32_t rank = t::cluster_ctarank();
  const std::int64_t pairs = static_cast<std::int64_t>(gridDim.x) / CL;

  if (tid == 0) {
    t::prefetch_tensor_map(&map_a);
    t::prefetch_tensor_map(&map_b);
    if constexpr (TmaStore) t::prefetch_tensor_map(&map_c);
    ring.init(8);  // one arrival per consumer warp of both blocks
    for (int e = 0; e < 2; ++e) {
      t::mbar_init(tile_full(e), 1);
      t::mbar_init(tile_empty(e), 8 * CL + (CL - 1));  // consumer warps of both blocks, block 1's producer
    }
    t::fence_barrier_init();
  }
  t::cluster_sync();  // the peer's barriers are initialized before any multicast or remote arrival

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Cfg::producer_regs) : "memory");
    if (tid == 0) {
      const std::uint64_t b_policy = t::l2_policy_evict_last();
      tile_cursor cursor;
      t::ring_position<S> pos;
      int te = 0;
      std::uint32_t tphase = 0;
      std::int64_t tt = static_cast<std::int64_t>(blockIdx.x) / CL;
      for (bool first = true;; first = false) {
        std::int64_t ti = 0, tj = 0;
        long long e = -1;
        if (rank == 0) {
          // Claim slots until one holds a tile (or none is left), then publish it to both blocks.
          auto claim = [&] { return pairs + static_cast<std::int64_t>(atomicAdd(slot_counter, 1ull)); };
          if (!first) tt = claim();
          while (tt < s.total && !cursor.locate(s, tt, ti, tj)) tt = claim();
          if (tt < s.total) e = static_cast<long long>((ti << 32) | tj);
          t::mbar_wait_cluster(tile_empty(te), tphase ^ 1u);
          entries[te] = e;
          for (int c = 0; c < CL; ++c) t::mbar_arrive_release_cluster(tile_full(te), static_cast<std::uint32_t>(c));
        } else {
          t::mbar_wait_cluster(tile_full(te), tphase);
          e = entries[te];
          t::mbar_arrive_release_cluster(tile_empty(te), 0);
          ti = e >> 32;
          tj = e & 0xFFFFFFFFll;
        }
        if (++te == 2) {
          te = 0;
          tphase ^= 1u;
        }
        if (e < 0) break;
        const int ya = static_cast<int>((ti * CL + rank) * Cfg::bm);
        const int yb = static_cast<int>(tj * Cfg::bn + rank * (Cfg::bn / CL));
        // The whole stage lands on full_bar: A from this block's load, a B half from each block's.
        ring.produce(pos, num_k, [&](std::uint32_t dst, std::uint32_t full_bar, std::int64_t kb) {
          const int x = static_cast<int>(kb * Cfg::words);
          t::tma_load_2d(dst, &map_a, x, ya, full_bar);
          // B tiles are re-read by every row tile of their band: kept in L2 before A and the output.
          t::tma_load_2d_multicast_hint(dst + Cfg::a_bytes + rank * (Cfg::b_bytes / CL), &map_b, x, yb,
                                        full_bar, static_cast<std::uint16_t>((1u << CL) - 1u), b_policy);
        });
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Cfg::consumer_regs) : "memory");
    const int cw = wg - 1;                  // consumer warpgroup: rows [64 cw, 64 cw + 64) of the tile
    const int warp_in_wg = (tid / 32) % 4;  // rows [16 w, 16 w + 16) of those
    const int lane = tid % 32;
    [[maybe_unused]] const bool leader = (tid % 128) == 0;  // issues and tracks the bulk stores
    // The output is written once and never read back here: evicted first, it does not push the
    // panels' k-slices out of the L2.
    [[maybe_unused]] const std::uint64_t pol_c = t::l2_policy_evict_first();
    const std::uint32_t region = staging0 + static_cast<std::uint32_t>(cw * wg_region_bytes);
    t::ring_position<S> pos;
    int te = 0;
    std::uint32_t tphase = 0;
    std::int32_t d[128];
    // A ring entry is read once published and handed back after the epilogue (see the top).
    const auto entry = [&] {
      t::mbar_wait_cluster(tile_full(te), tphase);
      return entries[te];
    };
    const auto hand_back = [&] {
      __syncwarp();
      if (lane == 0) t::mbar_arrive_release_cluster(tile_empty(te), 0);
      if (++te == 2) {
        te = 0;
        tphase ^= 1u;
      }
    };
    long long e = entry();
    hand_back();
    bool first_tile = num_k <= S;  // staggered only where a tile fits the ring (see the top)
    while (e >= 0) {
      const std::int64_t ti = (e >> 32) * CL + rank;  // this block's row tile
      const std::int64_t tj = e & 0xFFFFFFFFll;
      const auto rows = wg_rows(epi, s, ti, cw, warp_in_wg, lane);  // loads while the tile runs
      // A stage is free once every consumer warp of both blocks has read it (the ring's release).
      if (first_tile && cw == 1) t::named_barrier_sync(3, 256);
      ring.template consume<t::b1_and_popc, 256, Cfg::row_bytes, Cfg::a_bytes>(pos, num_k, cw, lane, d);
      if (first_tile && cw == 0) t::named_barrier_arrive(3, 256);
      first_tile = false;
      const long long next = entry();
      wg_write_tile<Epilogue, TmaStore>(d, s, epi, &map_c, ti, tj, cw, warp_in_wg, lane, leader, pol_c,
                                        region, wg_smem_raw, raw, rows);
      hand_back();
      e = next;
    }
    if constexpr (TmaStore) {
      // Shared memory must stay alive until the copy engine has read it; the writes themselves
      // complete before the grid does.
      if (leader) t::bulk_wait_group<0>();
    }
  }
  t::cluster_sync();  // no block leaves while its peer may still multicast into it or signal it
#else
  (void)map_a, (void)map_b, (void)map_c, (void)ld_words, (void)s, (void)epi, (void)slot_counter;
  __trap();  // never launched: the dispatch refuses wgmma unless this build has sm_90a code
#endif
}

}  // namespace spillway::gram::detail
