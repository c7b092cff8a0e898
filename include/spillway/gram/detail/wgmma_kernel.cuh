// spillway/gram/detail/wgmma_kernel.cuh — the BGMMA tile kernel (sm_90a):
// wgmma.mma_async m64n256k256 .s32.b1.b1.and.popc on the tile engine, block tile 128 x 256,
// one producer thread issuing tensor copies into 4 stages of 48 KiB, two consumer warpgroups, and
// for int32 raw counts an epilogue written by tensor stores.
//
// A k-slice is 1024 bits = 128 bytes of each row: one row of the 128-byte swizzle pattern. The
// tensor maps' box is 32 words x rows with that swizzle and the wgmma descriptors use the same
// one, so the copy engine writes and the tensor cores read without bank conflicts; each slice
// feeds four k256 MMAs whose descriptors advance 32 bytes inside the swizzle atom.
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

#include <cuda.h>  // CUtensorMap only
#include <cuda_runtime_api.h>

#include <cstdint>

namespace spillway::gram::detail {

using ::spillway::tile::tile_cursor;
using ::spillway::tile::tile_schedule;

inline constexpr int wg_bm = 128;
inline constexpr int wg_bn = 256;
inline constexpr int wg_stages = 4;
inline constexpr int wg_threads = 384;  // warpgroup 0: producer; 1 and 2: consumers (64 rows each)
inline constexpr int wg_a_bytes = wg_bm * 128;
inline constexpr int wg_b_bytes = wg_bn * 128;
inline constexpr int wg_stage_bytes = wg_a_bytes + wg_b_bytes;
// Per-element staging: 16 rows x 32 columns per consumer warp, row pitch 40 words (the
// accumulator layout's 8-byte writes and the 4-byte row reads are both free of bank conflicts).
inline constexpr int wg_stage_pitch = 40;
// Bulk-store staging: one 64 x 32 int32 piece, double-buffered per consumer warpgroup.
inline constexpr int wg_piece_bytes = 64 * 32 * 4;
inline constexpr int wg_region_bytes = 2 * wg_piece_bytes;
inline constexpr int wg_staging_bytes = 2 * wg_region_bytes;
static_assert(4 * 16 * wg_stage_pitch * 4 <= wg_region_bytes, "per-element staging fits a warpgroup's region");
// + 1 KiB to align the stages to the 1024-byte swizzle atom, + staging, + full and empty mbarriers.
inline constexpr int wg_smem_bytes = wg_stages * wg_stage_bytes + 1024 + wg_staging_bytes + 2 * wg_stages * 8;
static_assert(wg_smem_bytes <= 232448, "within the 227 KiB a block may opt into on sm_90");

/// A tensor map over a bit panel: `rows` rows of `ld_words` words, box 32 words x `box_rows` rows,
/// 128-byte swizzle; rows past the panel read as zeros.
inline CUtensorMap make_bit_tensor_map(const std::uint32_t* base, std::int64_t rows, std::int64_t ld_words,
                                       int box_rows, const char* what) {
  return ::spillway::tile::make_matrix_tensor_map<std::uint32_t>(base, rows, ld_words, ld_words, box_rows, 32,
                                                                 ::spillway::tile::swizzle::b128, what);
}

/// Tensor map over an int32 output for the bulk-store epilogue: `rows` x `cols`, row pitch `ld`
/// elements, box 32 columns x 64 rows, 128-byte swizzle (the staging layout). Nothing outside
/// [0, cols) x [0, rows) is written.
inline CUtensorMap make_count_tensor_map(std::int32_t* base, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  ::spillway::tile::tensor_map_spec spec;
  spec.data_type = ::spillway::tile::tensor_map_data_type<std::int32_t>();
  spec.elem_bytes = 4;
  spec.base = base;
  spec.rank = 2;
  spec.dims[0] = cols;
  spec.dims[1] = rows;
  spec.pitch[0] = ld * 4;
  spec.box[0] = 32;
  spec.box[1] = 64;
  spec.swz = ::spillway::tile::swizzle::b128;
  spec.l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_NONE;
  spec.what = "gram wgmma: int32 count output";
  return ::spillway::tile::make_tensor_map(spec);
}

/// `TmaStore`: the epilogue is a store_counts<std::int32_t> whose output `map_c` describes (see
/// the launcher); otherwise map_c is unused and every tile takes the per-element path.
template <class Epilogue, bool TmaStore>
__global__ void __launch_bounds__(wg_threads, 1)
    wgmma_gram_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                      const __grid_constant__ CUtensorMap map_c, std::int64_t ld_words, tile_schedule s,
                      Epilogue epi) {
#ifdef SPILLWAY_TILE_HAS_WGMMA
  namespace t = ::spillway::tile;
  extern __shared__ __align__(1024) unsigned char wg_smem_raw[];
  const std::uint32_t raw = t::smem_addr(wg_smem_raw);
  const std::uint32_t smem0 = (raw + 1023u) & ~1023u;
  const std::uint32_t staging0 = smem0 + wg_stages * wg_stage_bytes;  // 1024-byte aligned
  const std::uint32_t bars = staging0 + wg_staging_bytes;
  auto full_bar = [&](int st) { return bars + static_cast<std::uint32_t>(st) * 8u; };
  auto empty_bar = [&](int st) { return bars + static_cast<std::uint32_t>(wg_stages + st) * 8u; };

  const int tid = static_cast<int>(threadIdx.x);
  const int wg = tid / 128;
  const std::int64_t num_k = ld_words / 32;

  if (tid == 0) {
    for (int st = 0; st < wg_stages; ++st) {
      t::mbar_init(full_bar(st), 1);
      t::mbar_init(empty_bar(st), 8);  // one arrival per consumer warp
    }
    t::fence_barrier_init();
  }
  __syncthreads();

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    if (tid == 0) {
      tile_cursor cursor;
      int st = 0;
      std::uint32_t phase = 0;
      for (std::int64_t tt = blockIdx.x; tt < s.total; tt += gridDim.x) {
        std::int64_t ti = 0, tj = 0;
        if (!cursor.locate(s, tt, ti, tj)) continue;
        const int ya = static_cast<int>(ti * wg_bm);
        const int yb = static_cast<int>(tj * wg_bn);
        for (std::int64_t kb = 0; kb < num_k; ++kb) {
          t::mbar_wait(empty_bar(st), phase ^ 1u);
          t::mbar_arrive_expect_tx(full_bar(st), wg_stage_bytes);
          const std::uint32_t dst = smem0 + static_cast<std::uint32_t>(st * wg_stage_bytes);
          const int x = static_cast<int>(kb * 32);
          t::tma_load_2d(dst, &map_a, x, ya, full_bar(st));
          t::tma_load_2d(dst + wg_a_bytes, &map_b, x, yb, full_bar(st));
          if (++st == wg_stages) {
            st = 0;
            phase ^= 1u;
          }
        }
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
    const int cw = wg - 1;                  // consumer warpgroup: rows [64 cw, 64 cw + 64) of the tile
    const int warp_in_wg = (tid / 32) % 4;  // rows [16 w, 16 w + 16) of those
    const int lane = tid % 32;
    [[maybe_unused]] const bool leader = (tid % 128) == 0;  // issues and tracks the bulk stores
    const std::uint32_t region = staging0 + static_cast<std::uint32_t>(cw * wg_region_bytes);
    tile_cursor cursor;
    int st = 0;
    std::uint32_t phase = 0;
    std::int32_t d[128];
    for (std::int64_t tt = blockIdx.x; tt < s.total; tt += gridDim.x) {
      std::int64_t ti = 0, tj = 0;
      if (!cursor.locate(s, tt, ti, tj)) continue;
#pragma unroll
      for (int i = 0; i < 128; ++i) d[i] = 0;
      int prev = -1;
      for (std::int64_t kb = 0; kb < num_k; ++kb) {
        t::mbar_wait(full_bar(st), phase);
        const std::uint32_t a_addr = smem0 + static_cast<std::uint32_t>(st * wg_stage_bytes + cw * 64 * 128);
        const std::uint32_t b_addr = smem0 + static_cast<std::uint32_t>(st * wg_stage_bytes + wg_a_bytes);
        t::wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
          t::wgmma_ss<t::b1_and_popc, 256>(d, t::kmajor_desc<128>(a_addr + ks * 32),
                                           t::kmajor_desc<128>(b_addr + ks * 32), true);
        }
        t::wgmma_commit();
        t::wgmma_wait<1>();
        if (prev >= 0) {
          __syncwarp();
          if (lane == 0) t::mbar_arrive(empty_bar(prev));
        }
        prev = st;
        if (++st == wg_stages) {
          st = 0;
          phase ^= 1u;
        }
      }
      t::wgmma_wait<0>();
      if (prev >= 0) {
        __syncwarp();
        if (lane == 0) t::mbar_arrive(empty_bar(prev));
      }

      const int g = lane / 4;
      const int tig = lane % 4;
      const std::int64_t row_base = ti * wg_bm + cw * 64 + warp_in_wg * 16;  // panel-local
      if constexpr (TmaStore) {
        // Only blocks wholly inside the output go through the copy engine: a box that straddles
        // the last column was measured (H200) to write the 16-byte group holding the bound, i.e.
        // up to 3 columns past it.
        bool bulk = tj * wg_bn + wg_bn <= s.b_rows && ti * wg_bm + cw * 64 + 64 <= s.a_rows;
        if (bulk && epi.upper_only) {
          // Every element of this warpgroup's 64 rows must satisfy i <= j.
          const std::int64_t last_local = ti * wg_bm + cw * 64 + 63;
          const std::int64_t last_row = s.a_row0 + (last_local < s.a_rows ? last_local : s.a_rows - 1);
          bulk = last_row <= s.b_row0 + tj * wg_bn;
        }
        if (bulk) {
          // Output coordinates of this warpgroup's block (the tensor map starts at (row0, col0)).
          const int y = static_cast<int>(s.a_row0 - epi.row0 + ti * wg_bm + cw * 64);
          const int x0 = static_cast<int>(s.b_row0 - epi.col0 + tj * wg_bn);
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
              asm volatile("st.shared.v2.s32 [%0], {%1, %2};\n" ::"r"(buf + static_cast<std::uint32_t>(r_lo * 128) +
                                                                       col_off),
                           "r"(d[4 * n]), "r"(d[4 * n + 1])
                           : "memory");
              asm volatile("st.shared.v2.s32 [%0], {%1, %2};\n" ::"r"(buf +
                                                                       static_cast<std::uint32_t>((r_lo + 8) * 128) +
                                                                       col_off),
                           "r"(d[4 * n + 2]), "r"(d[4 * n + 3])
                           : "memory");
            }
            // Generic-proxy writes become visible to the copy engine, then one thread sends the piece.
            t::fence_proxy_async_shared();
            t::named_barrier_sync(1 + cw, 128);
            if (leader) {
              t::tma_store_2d(&map_c, x0 + piece * 32, y, buf);
              t::bulk_commit_group();
            }
          }
          continue;
        }
        // The per-element staging below reuses this warpgroup's region: pending bulk stores
        // must have read it out first.
        if (leader) t::bulk_wait_group_read<0>();
        t::named_barrier_sync(1 + cw, 128);
      }
      {
        int* stage_tile = reinterpret_cast<int*>(wg_smem_raw + (region - raw)) + warp_in_wg * (16 * wg_stage_pitch);
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
          const std::int64_t lj = tj * wg_bn + piece * 32 + lane;
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
    if constexpr (TmaStore) {
      // Shared memory must stay alive until the copy engine has read it; the writes themselves
      // complete before the grid does.
      if (leader) t::bulk_wait_group<0>();
    }
  }
#else
  (void)map_a, (void)map_b, (void)map_c, (void)ld_words, (void)s, (void)epi;
  __trap();  // never launched: the dispatch refuses wgmma unless this build has sm_90a code
#endif
}

}  // namespace spillway::gram::detail
