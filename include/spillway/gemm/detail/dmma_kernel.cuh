// spillway/gemm/detail/dmma_kernel.cuh — double-precision GEMM on the FP64 tensor cores (DMMA,
// register-fed mma.sync f64; tile/mma_f64.cuh), sm_80 and up.
//
// Block tile 128 x 128, k-tile 16 doubles, 4-stage cp.async pipeline (one barrier per k-tile).
// 8 warps as 2 (M) x 4 (N), each owning a 64 x 32 piece of C in 128 accumulator registers
// (4 x 4 tiles of 16 x 8). Both operands arrive K-major (dispatcher precondition). Shared layouts
// follow the fragment order of tile/mma_f64.cuh so that every fragment register comes straight
// from a conflict-free 16-byte shared load (no register moves before the DMMA): A as swizzled
// pair rows (rows g and g + 8 of a 16-row group interleaved per k; filled by 8-byte cp.async),
// B as K-major rows padded to 18 doubles (16-byte cp.async). Edges: rows past m / n and k past k
// are zero-filled by the copies, so the main loop has no predicates. Blocks walk the tile grid in
// bands of 8 tile-rows (column by column inside a band) so that the blocks resident at one time
// share A and B panels in L2.
//
// Per k-tile and warp: 16 DMMA (m16n8k16 on sm_90+, 8 x m8n8k4 each on sm_80..89) fed by 24
// 16-byte shared loads; per thread 8 x 8-byte (A) + 4 x 16-byte (B) cp.async.
//
// The epilogue writes C straight from the accumulators: each lane owns pairs of adjacent columns,
// so a warp's store instruction fills whole 32-byte sectors of 8 rows. C has no alignment
// guarantee, so stores are per element; β = 0 never reads C.
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/gemm/detail/problem.hpp>
#include <spillway/gemm/epilogue.hpp>
#include <spillway/tile/arch.cuh>
#include <spillway/tile/cp_async.cuh>
#include <spillway/tile/mma_f64.cuh>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace spillway::gemm::detail {

template <int WarpsM, int WarpsN, int MT, int NT, int BK, int Stages, int Band>
struct dmma_config {
  static_assert(BK == 16 || BK == 32, "k-tiles of one or two m16n8k16 steps");
  static constexpr int warps_m = WarpsM, warps_n = WarpsN, mt = MT, nt = NT, bk = BK, stages = Stages;
  static constexpr int ksteps = BK / 16;
  static constexpr int band = Band;  // tile-rows per band of the block order
  static constexpr int warps = WarpsM * WarpsN;
  static constexpr int threads = warps * 32;
  static constexpr int wm = MT * 16, wn = NT * 8;  // warp tile
  static constexpr int bm = WarpsM * wm, bn = WarpsN * wn;
  // A: pair rows (tile/mma_f64.cuh), bm / 2 of them, 16 bytes per k. A warp copies 16 k of one
  // pair row per pass with 8-byte cp.async (lane: k = lane / 2, row g + 8 * (lane % 2)).
  static constexpr int pair_row_bytes = 2 * bk * 8;
  static constexpr int a_bytes = bm / 2 * pair_row_bytes;
  static_assert(warps == 8 && bm % 16 == 0, "a pass copies one 16-row group's 8 pair rows, one per warp");
  static constexpr int a_passes = bm / 16 * ksteps;
  // B: K-major rows padded by 2 doubles (144 or 272 bytes): 16-byte aligned, and rows g and g + 1
  // fall 16 bytes apart in the banks, so the two 16-byte fragment loads per row and lane are
  // conflict-free. 16-byte cp.async, bk / 2 per row.
  static constexpr int b_pitch_bytes = (bk + 2) * 8;
  static constexpr int b_rows_per_pass = threads / (bk / 2);
  static_assert(bn % b_rows_per_pass == 0, "every thread copies whole passes of B rows");
  static constexpr int b_passes = bn / b_rows_per_pass;
  static constexpr int stage_bytes = a_bytes + bn * b_pitch_bytes;
  static constexpr int smem_bytes = stages * stage_bytes;
};
// Hopper (227 KiB per block): k-tile 32, 3 stages x 67,584 bytes = 202,752 bytes; one block
// (8 warps, 2 per scheduler) per SM. Measured on the H200 (2026-11-23, same run, 8192^3 TN):
// 50.0 TFLOP/s against 45.8 for k-tile 16 with 4 stages, 45.0 with 6 stages, 45.4 with bands of 4
// (4096^3: 50.5 / 45.2 / 44.4 / 45.3): half the barriers per flop and twice the MMAs between them.
// Bands of 12, 16 and 24 tile-rows against 8 (2026-12-01, 10 pairs each against cuBLAS DGEMM in
// one call): 22.86-23.06 ms for every band, ratios 0.863-0.889 within the pairs' spread.
using dmma_default_config = dmma_config<2, 4, 4, 4, 32, 3, 8>;
// A100 (163 KiB per block): k-tile 16, 4 stages x 34,816 bytes = 139,264 bytes.
using dmma_a100_config = dmma_config<2, 4, 4, 4, 16, 4, 8>;

/// The copies of k-tile kt into its stage (producer side, every thread): `part` of `parts` slices
/// of the unpredicated copies where the tile lies inside m x n (`interior`) and inside k, else (part
/// 0 only) every copy with its edge checks, zero-filling rows past m / n and k past `k`. a_src /
/// b_src: the thread's first element of its copy rows (k = 0), a_base / b_base: a readable address
/// for the zero-filling copies, a_copy / b_copy: its shared destinations in stage 0, a_ok / b_ok:
/// which of its rows exist (bit per pass), a_k / b_ck: its k offset and 16-byte chunk (see the kernel).
/// The parameters are references, as the kernel's lambda captured them: by-value parameters
/// changed the generated code (PTX compared).
template <class Cfg, int parts>
__device__ __forceinline__ void dmma_load_tile(const index_t& kt, const int& part, const index_t& k,
                                               const bool& interior, const double* const& a_base,
                                               const double* const& b_base, const double* const& a_src,
                                               const double* const& b_src, const index_t& a_step,
                                               const index_t& b_step, const std::uint32_t& a_copy,
                                               const std::uint32_t& b_copy, const int& a_k, const int& b_ck,
                                               const unsigned& a_ok, const unsigned& b_ok) {
  const std::uint32_t st = static_cast<std::uint32_t>((kt % Cfg::stages) * Cfg::stage_bytes);
  const index_t k0 = kt * Cfg::bk;
  const bool k_full = k0 + Cfg::bk <= k;
  if (interior && k_full) {
    constexpr int ar = Cfg::bm / 16 / parts, bj = Cfg::b_passes / parts;
    const double* sa = a_src + k0 + part * ar * a_step;
#pragma unroll
    for (int r = 0; r < ar; ++r, sa += a_step) {
#pragma unroll
      for (int h = 0; h < Cfg::ksteps; ++h)
        tile::cp_async<8>(
            a_copy + st + static_cast<std::uint32_t>((part * ar + r) * 8 * Cfg::pair_row_bytes + h * 256),
            sa + 16 * h, true);
    }
    const double* sb = b_src + k0 + part * bj * b_step;
#pragma unroll
    for (int j = 0; j < bj; ++j, sb += b_step)
      tile::cp_async<16>(
          b_copy + st +
              static_cast<std::uint32_t>((part * bj + j) * Cfg::b_rows_per_pass * Cfg::b_pitch_bytes),
          sb, true);
    return;
  }
  if (part != 0) return;
#pragma unroll
  for (int j = 0; j < Cfg::a_passes; ++j) {
    const int r = j / Cfg::ksteps, h = j % Cfg::ksteps;
    const bool ok = ((a_ok >> r) & 1u) && k0 + 16 * h + a_k < k;
    const double* s = a_src + k0 + 16 * h + r * a_step;
    // f64_pair_chunk(g, 16h + c) = 16h + f64_pair_chunk(g, c) for c < 16.
    tile::cp_async<8>(a_copy + st + static_cast<std::uint32_t>(r * 8 * Cfg::pair_row_bytes + h * 256),
                      ok ? s : a_base, ok);
  }
  const index_t kk = k0 + 2 * b_ck;
#pragma unroll
  for (int j = 0; j < Cfg::b_passes; ++j) {
    const std::uint32_t d =
        b_copy + st + static_cast<std::uint32_t>(j * Cfg::b_rows_per_pass * Cfg::b_pitch_bytes);
    const double* s = b_src + k0 + j * b_step;
    const bool row = (b_ok >> j) & 1u;
    if (k_full) {
      tile::cp_async<16>(d, row ? s : b_base, row);
    } else if (row && kk + 1 == k) {  // odd k: the row's last element, then a zero
      tile::cp_async<8>(d, s, true);
      tile::cp_async<8>(d + 8, b_base, false);
    } else {
      const bool ok = row && kk + 2 <= k;
      tile::cp_async<16>(d, ok ? s : b_base, ok);
    }
  }
}

/// The epilogue of batch entry q's tile at m0 x n0, straight from the warp's accumulators (the lane
/// is (g, t) of warp (warp_m, warp_n)): C = epi(alpha * acc + beta * C) per element, C read only
/// when beta != 0; each lane writes pairs of adjacent columns.
template <class Cfg, class TC, class Epi>
__device__ __forceinline__ void dmma_store_tile(const problem<double, double, TC, double, Epi>& p,
                                                const double (&acc)[Cfg::mt][Cfg::nt][tile::f64_frag_d],
                                                index_t q, index_t m0, index_t n0, int warp_m, int warp_n,
                                                int g, int t) {
  TC* c = p.c + q * p.stride_c;
  const bool read_c = p.beta != 0.0;
#pragma unroll
  for (int i = 0; i < Cfg::mt; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const index_t row = m0 + warp_m * Cfg::wm + i * 16 + h * 8 + g;
      if (row >= p.m) continue;
      TC* c_row = c + row * p.ldc;
#pragma unroll
      for (int j = 0; j < Cfg::nt; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const index_t col = n0 + warp_n * Cfg::wn + j * 8 + 2 * t + e;
          if (col < p.n) {
            double v = p.alpha * acc[i][j][2 * h + e];
            if (read_c) v += p.beta * load_output<double>(c_row[col]);
            c_row[col] = convert_output<TC>(p.epi(v, row, col));
          }
        }
      }
    }
  }
}

template <class Cfg, class TC, class Epi>
__global__ void __launch_bounds__(Cfg::threads, 1)
    dmma_gemm_kernel(problem<double, double, TC, double, Epi> p, index_t tiles_m, index_t tiles_n) {
#ifdef SPILLWAY_TILE_HAS_MMA
  extern __shared__ __align__(16) unsigned char dmma_smem[];
  const std::uint32_t smem = tile::smem_addr(dmma_smem);

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int warp_m = warp / Cfg::warps_n, warp_n = warp % Cfg::warps_n;

  // Block order: bands of Cfg::band tile-rows, column-major inside a band.
  const index_t id = blockIdx.x;
  const index_t band_tiles = static_cast<index_t>(Cfg::band) * tiles_n;
  const index_t first_m = id / band_tiles * Cfg::band;
  const index_t band_rows = tiles_m - first_m < Cfg::band ? tiles_m - first_m : Cfg::band;
  const index_t in_band = id % band_tiles;
  const index_t m0 = (first_m + in_band % band_rows) * Cfg::bm;
  const index_t n0 = in_band / band_rows * Cfg::bn;

  // A copy role, pass j = (16-row group r, k half h) = (j / ksteps, j % ksteps): pair row
  // warp + 8r (g = warp), k = 16h + lane / 2, row half lane % 2: tile row 16r + warp + 8 (lane % 2).
  const int a_k = lane >> 1, a_row = warp + 8 * (lane & 1);
  unsigned a_ok = 0;
#pragma unroll
  for (int r = 0; r < Cfg::bm / 16; ++r) a_ok |= (m0 + a_row + 16 * r < p.m ? 1u : 0u) << r;
  const std::uint32_t a_copy = smem + static_cast<std::uint32_t>(warp * Cfg::pair_row_bytes +
                                                                 16 * tile::f64_pair_chunk(warp, a_k) + 8 * (lane & 1));
  // B copy role: 16-byte chunk `b_ck` of rows `b_row + j * b_rows_per_pass`.
  const int b_ck = tid % (Cfg::bk / 2), b_row = tid / (Cfg::bk / 2);
  unsigned b_ok = 0;
#pragma unroll
  for (int j = 0; j < Cfg::b_passes; ++j) b_ok |= (n0 + b_row + j * Cfg::b_rows_per_pass < p.n ? 1u : 0u) << j;
  const std::uint32_t b_copy = smem + static_cast<std::uint32_t>(Cfg::a_bytes + b_row * Cfg::b_pitch_bytes + b_ck * 16);

  // Fragment roles. A: k-pair 4t + v of pair row g of the warp's first 16-row group, at byte
  // offset a_frag ^ 16v (f64_pair_chunk(g, 4t + v) = 4t + (v ^ x) with x = f64_pair_chunk(g, 4t) & 3:
  // the XOR only touches bits 4..5, and every offset added to a_frag is a multiple of 256).
  static_assert(Cfg::pair_row_bytes % 256 == 0 && Cfg::stage_bytes % 256 == 0, "XOR addressing of A fragments");
  const std::uint32_t a_frag = static_cast<std::uint32_t>((warp_m * Cfg::mt * 8 + g) * Cfg::pair_row_bytes +
                                                          16 * tile::f64_pair_chunk(g, 4 * t));
  // B: element (g, 4t) of the warp's first 8-row tile.
  const std::uint32_t b_frag =
      smem + static_cast<std::uint32_t>(Cfg::a_bytes + (warp_n * Cfg::wn + g) * Cfg::b_pitch_bytes + t * 32);

  const index_t k_tiles = (p.k + Cfg::bk - 1) / Cfg::bk;

  for (index_t q = blockIdx.z; q < p.batch; q += gridDim.z) {
    const double* a_base = p.a + q * p.stride_a;
    const double* b_base = p.b + q * p.stride_b;
    const double* a_src = a_base + (m0 + a_row) * p.lda + a_k;
    const double* b_src = b_base + (n0 + b_row) * p.ldb + 2 * b_ck;

    // Zero fill past the edges: rows past m / n, k past k (8-byte granular for A; a B chunk
    // straddling an odd k is 8 copied bytes + 8 zero-filled), so the main loop has no predicates.
    // Blocks whose tile lies inside m x n copy every k-tile but the last without predicates (the
    // edge path's per-copy checks cost more issue slots than the copies). The fast copies of a
    // k-tile are issued in `parts` slices between the MMA groups of the previous k-tile, so that
    // neither warp of a scheduler leaves the tensor pipe idle for long.
    const bool interior = m0 + Cfg::bm <= p.m && n0 + Cfg::bn <= p.n;
    const index_t a_step = 16 * p.lda, b_step = static_cast<index_t>(Cfg::b_rows_per_pass) * p.ldb;
    constexpr int parts = Cfg::mt;
    static_assert((Cfg::bm / 16) % parts == 0 && Cfg::b_passes % parts == 0, "copies split evenly");
    auto load_tile = [&](index_t kt, int part) {
      dmma_load_tile<Cfg, parts>(kt, part, p.k, interior, a_base, b_base, a_src, b_src, a_step, b_step,
                                 a_copy, b_copy, a_k, b_ck, a_ok, b_ok);
    };

    double acc[Cfg::mt][Cfg::nt][tile::f64_frag_d];
#pragma unroll
    for (int i = 0; i < Cfg::mt; ++i)
#pragma unroll
      for (int j = 0; j < Cfg::nt; ++j)
#pragma unroll
        for (int e = 0; e < tile::f64_frag_d; ++e) acc[i][j][e] = 0.0;

    // The stages of a previous batch entry are all consumed (its loop ends with a barrier).
#pragma unroll
    for (int s = 0; s < Cfg::stages - 1; ++s) {
      if (s < k_tiles)
#pragma unroll
        for (int part = 0; part < parts; ++part) load_tile(s, part);
      tile::cp_async_commit();
    }

    for (index_t kt = 0; kt < k_tiles; ++kt) {
      tile::cp_async_wait<Cfg::stages - 2>();
      // Tile kt has landed for every thread, and every warp has finished reading the stage that
      // the copies of this iteration overwrite (it held tile kt - 1).
      __syncthreads();

      const std::uint32_t st = static_cast<std::uint32_t>((kt % Cfg::stages) * Cfg::stage_bytes);
#pragma unroll
      for (int ks = 0; ks < Cfg::ksteps; ++ks) {
        // All B fragments, then A one 16-row group at a time (128 accumulator + 32 B + 16 A registers).
        double bf[Cfg::nt][tile::f64_frag_b];
#pragma unroll
        for (int j = 0; j < Cfg::nt; ++j)
          tile::load_f64_frag_b(bf[j],
                                b_frag + st + static_cast<std::uint32_t>(j * 8 * Cfg::b_pitch_bytes + ks * 128));
#pragma unroll
        for (int i = 0; i < Cfg::mt; ++i) {
          const std::uint32_t off = a_frag + st + static_cast<std::uint32_t>(i * 8 * Cfg::pair_row_bytes + ks * 256);
          const std::uint32_t addr[4] = {smem + off, smem + (off ^ 16u), smem + (off ^ 32u), smem + (off ^ 48u)};
          double af[tile::f64_frag_a];
          tile::load_f64_frag_a(af, addr);
#pragma unroll
          for (int j = 0; j < Cfg::nt; ++j) tile::mma_f64_16x8x16(acc[i][j], af, bf[j]);
          if (ks == 0) {
            // Slice i of the copies of tile kt + stages - 1, behind this group's MMAs.
            if (kt + Cfg::stages - 1 < k_tiles) load_tile(kt + Cfg::stages - 1, i);
            if (i == Cfg::mt - 1) tile::cp_async_commit();
          }
        }
      }
    }
    tile::cp_async_wait<0>();
    __syncthreads();  // the next batch entry's prologue overwrites stages still being read

    dmma_store_tile<Cfg>(p, acc, q, m0, n0, warp_m, warp_n, g, t);
  }
#else
  (void)p, (void)tiles_m, (void)tiles_n;
  __trap();
#endif
}

/// C = epi(α·A·Bᵀ + β·C) in double on the FP64 tensor cores with tile configuration `Cfg` (see
/// the file comment). Preconditions (the dispatcher's): both operands K-major, 16-byte aligned,
/// lda / ldb / strides even; the build holds sm_80+ code for the current device
/// (tile::build_features). Enqueues on `s` only.
template <class Cfg, class TC, class Epi>
void launch_dmma_with(const problem<double, double, TC, double, Epi>& p, stream_view s) {
  SPILLWAY_EXPECTS(p.a_kmajor && p.b_kmajor, "launch_dmma: both operands must be K-major");
  SPILLWAY_EXPECTS(p.lda % 2 == 0 && p.ldb % 2 == 0 && p.stride_a % 2 == 0 && p.stride_b % 2 == 0,
                   "launch_dmma: lda, ldb and the operand batch strides must be multiples of 16 bytes (got lda " +
                       std::to_string(p.lda) + ", ldb " + std::to_string(p.ldb) + ")");
  if (p.m <= 0 || p.n <= 0 || p.batch <= 0) return;

  constexpr auto kernel = dmma_gemm_kernel<Cfg, TC, Epi>;
  int device = 0;
  SPILLWAY_CUDA_TRY(cudaGetDevice(&device));
  tile::raise_smem_limit<kernel>(device, Cfg::smem_bytes);

  const index_t tiles_m = (p.m + Cfg::bm - 1) / Cfg::bm;
  const index_t tiles_n = (p.n + Cfg::bn - 1) / Cfg::bn;
  const index_t tiles = tiles_m * tiles_n;
  SPILLWAY_EXPECTS(tiles <= 0x7fffffff, "launch_dmma: " + std::to_string(tiles) + " output tiles exceed the grid");
  const index_t z = p.batch < 65535 ? p.batch : 65535;  // larger batches loop inside the kernel
  const dim3 grid(static_cast<unsigned>(tiles), 1, static_cast<unsigned>(z));
  kernel<<<grid, Cfg::threads, Cfg::smem_bytes, s.value()>>>(p, tiles_m, tiles_n);
  SPILLWAY_CHECK_LAUNCH();
}

// Devices whose blocks may not hold the A100 configuration's 139,264 bytes (compute capability
// 8.6 / 8.9: 101,376) get two stages (69,632 bytes).
using dmma_small_smem_config = dmma_config<2, 4, 4, 4, 16, 2, 8>;


/// The dispatcher's entry: launch_dmma_with the largest configuration the device's blocks hold
/// (Hopper's default, A100's, or the two-stage one).
template <class TC, class Epi>
void launch_dmma(const problem<double, double, TC, double, Epi>& p, stream_view s) {
  int device = 0;
  SPILLWAY_CUDA_TRY(cudaGetDevice(&device));
  const int smem = tile::max_block_smem(device);
  if (smem >= dmma_default_config::smem_bytes) {
    launch_dmma_with<dmma_default_config>(p, s);
  } else if (smem >= dmma_a100_config::smem_bytes) {
    launch_dmma_with<dmma_a100_config>(p, s);
  } else {
    launch_dmma_with<dmma_small_smem_config>(p, s);
  }
}

}  // namespace spillway::gemm::detail
