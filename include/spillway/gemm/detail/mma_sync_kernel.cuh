// spillway/gemm/detail/mma_sync_kernel.cuh — the warp-level tensor-core GEMM (mma.sync, sm_80+) for
// half, bf16 (float accumulation), int8 (int32 accumulation) and float as TF32 (float
// accumulation; the FP32 bit patterns go to the tensor cores unrounded, i.e. each operand's
// mantissa is truncated to 10 bits). The path every GPU from sm_80 up runs, and the forced one on
// Hopper.
//
// The mainloop is tile::mma_sync_kmajor_mainloop (tile/mma_mainloop.cuh): both operands are
// K-major (the dispatcher guarantees it), so a block tile is rows of k bytes and every MMA shape
// used eats 32 bytes of k with one fragment layout; only mma_traits<T>::mma differs by type.
//
// Block tile 128 (m) x 256 (n) x 128 bytes of k, 8 warps of 64 x 64, a cp.async ring of as many
// 48 KiB stages as the device's shared memory holds (2 to 4: 4 on Hopper, 3 on A100, 2 on sm_86/89),
// 128-byte-swizzled shared rows (conflict-free ldmatrix and stores), fragments double-buffered in
// registers, one __syncthreads per k-tile. Blocks are rasterized in groups of 8 tile rows so the A
// panels of a group stay in L2 while B streams past. The epilogue writes each thread's column pairs
// as one vector store where C's row is aligned for it, else element by element.
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/gemm/detail/problem.hpp>
#include <spillway/gemm/epilogue.hpp>
#include <spillway/gemm/options.hpp>
#include <spillway/tile/arch.cuh>
#include <spillway/tile/mma.cuh>
#include <spillway/tile/mma_mainloop.cuh>
#include <spillway/tile/schedule.cuh>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <type_traits>

namespace spillway::gemm::detail {

/// The tile shape of the mma.sync GEMM (see the header comment).
struct mma_sync_config {
  using shape = tile::kmajor_mma_shape<128, 256, 2, 4>;
  static constexpr int threads = shape::threads;
  static constexpr int bm = shape::bm, bn = shape::bn;
  static constexpr int stage_bytes = shape::stage_bytes;  ///< 48 KiB
  static constexpr int max_stages = 4;
  static constexpr int min_stages = 2;
  static constexpr int raster_group = 8;  ///< tile rows walked together (L2 reuse of A)
};

template <class T>
inline constexpr bool is_mma_sync_element_v =
    std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, float> ||
    std::is_same_v<T, std::int8_t>;

/// Two adjacent outputs, aligned so that a pair is one vector load or store.
template <class TC>
struct alignas(2 * sizeof(TC)) mma_sync_pair {
  TC x, y;
};

struct mma_sync_origin {
  index_t m0, n0;
};

/// The block's output tile origin under grouped rasterization (consecutive blocks walk down
/// raster_group tile rows, then across, so a group's A panels stay in L2 while B streams past).
/// blockIdx.x is read through a volatile move so the compiler recomputes the origin where it is
/// used instead of holding it in registers across the mainloop.
__device__ __forceinline__ mma_sync_origin mma_sync_block_origin(int tiles_m, int tiles_n) {
  unsigned pid_u = 0;
  asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(pid_u));
  // 64-bit: 8 * tiles_n may pass 2^31 for a very wide, short C.
  std::int64_t tm = 0, tn = 0;
  tile::grouped_raster(pid_u, tiles_m, tiles_n, mma_sync_config::raster_group, tm, tn);
  return {static_cast<index_t>(tm) * mma_sync_config::bm, static_cast<index_t>(tn) * mma_sync_config::bn};
}

template <class T, class TC, class S, class Epi>
__global__ void __launch_bounds__(mma_sync_config::threads, 1)
    mma_sync_gemm_kernel(problem<T, T, TC, S, Epi> p, int stages, int tiles_m, int tiles_n) {
#ifdef SPILLWAY_TILE_HAS_MMA
  using cfg = mma_sync_config;
  using shape = cfg::shape;
  using traits = tile::mma_traits<T>;
  using acc_t = typename traits::accumulator;
  extern __shared__ __align__(128) unsigned char mma_sync_smem[];

  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;

  const index_t lda_bytes = p.lda * static_cast<index_t>(sizeof(T));
  const index_t ldb_bytes = p.ldb * static_cast<index_t>(sizeof(T));

  for (index_t q = blockIdx.y; q < p.batch; q += gridDim.y) {
    acc_t acc[shape::mt][shape::nt][4];
    tile::mma_zero(acc);
    {
      const mma_sync_origin o = mma_sync_block_origin(tiles_m, tiles_n);
      const tile::kmajor_rows a{reinterpret_cast<const unsigned char*>(p.a + q * p.stride_a) + o.m0 * lda_bytes,
                                lda_bytes, p.m - o.m0};
      const tile::kmajor_rows b{reinterpret_cast<const unsigned char*>(p.b + q * p.stride_b) + o.n0 * ldb_bytes,
                                ldb_bytes, p.n - o.n0};
      // Returns with every copy landed and the block past a barrier: the next batch entry may refill.
      tile::mma_sync_kmajor_mainloop<traits, shape>(mma_sync_smem, a, b, p.k * static_cast<index_t>(sizeof(T)), stages,
                                                    acc);
    }
    // The block's origin again (not kept live across the mainloop, whose registers are all taken).
    const mma_sync_origin o = mma_sync_block_origin(tiles_m, tiles_n);
    const index_t m0 = o.m0, n0 = o.n0;

    // Epilogue: each thread owns pairs (row g / g + 8, columns 2t, 2t + 1) of every 16 x 8 fragment,
    // written as one vector store where C's row allows it (any ldc and C offset are legal).
    // Block-relative 32-bit indices keep the register pressure of the hoisted row/column values low.
    TC* const c_blk = p.c + q * p.stride_c + m0 * p.ldc + n0;
    const int m_left = static_cast<int>(p.m - m0 < cfg::bm ? p.m - m0 : cfg::bm);
    const int n_left = static_cast<int>(p.n - n0 < cfg::bn ? p.n - n0 : cfg::bn);
    const bool read_c = !(p.beta == S(0));
#pragma unroll
    for (int mi = 0; mi < shape::mt; ++mi) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int lrow = shape::acc_row(warp, lane, mi, h);
        if (lrow >= m_left) continue;
        TC* const crow = c_blk + lrow * p.ldc;
        const index_t row = m0 + lrow;
        const bool row_paired = reinterpret_cast<std::uintptr_t>(crow) % sizeof(mma_sync_pair<TC>) == 0;
#pragma unroll
        for (int ni = 0; ni < shape::nt; ++ni) {
          const int lcol = shape::acc_col(warp, lane, ni, 0);  // even
          if (lcol >= n_left) continue;
          const index_t col = n0 + lcol;
          S v0 = p.alpha * static_cast<S>(acc[mi][ni][h * 2]);
          S v1 = p.alpha * static_cast<S>(acc[mi][ni][h * 2 + 1]);
          if (row_paired && lcol + 1 < n_left) {
            auto* const dst = reinterpret_cast<mma_sync_pair<TC>*>(crow + lcol);
            if (read_c) {
              const mma_sync_pair<TC> old = *dst;
              v0 += p.beta * load_output<S>(old.x);
              v1 += p.beta * load_output<S>(old.y);
            }
            *dst = mma_sync_pair<TC>{convert_output<TC>(p.epi(v0, row, col)), convert_output<TC>(p.epi(v1, row, col + 1))};
          } else {
            if (read_c) v0 += p.beta * load_output<S>(crow[lcol]);
            crow[lcol] = convert_output<TC>(p.epi(v0, row, col));
            if (lcol + 1 < n_left) {
              if (read_c) v1 += p.beta * load_output<S>(crow[lcol + 1]);
              crow[lcol + 1] = convert_output<TC>(p.epi(v1, row, col + 1));
            }
          }
        }
      }
    }
  }
#else
  (void)p, (void)stages, (void)tiles_m, (void)tiles_n;
  __trap();
#endif
}


/// The cp.async stages used on `device`: as many 48 KiB stages as fit, 2 to 4.
inline int mma_sync_stages(int device) {
  using cfg = mma_sync_config;
  const int fit = tile::max_block_smem(device) / cfg::stage_bytes;
  if (fit < cfg::min_stages) {
    throw logic_error("gemm mma_sync: the block tile needs " + std::to_string(cfg::min_stages * cfg::stage_bytes) +
                      " bytes of shared memory per block; " + tile::describe_device(device) + " offers " +
                      std::to_string(tile::max_block_smem(device)));
  }
  return std::min(fit, cfg::max_stages);
}

/// launch_mma_sync with a given stage count (2..4; fewer than the device allows is legal): lets the
/// tests run the 2- and 3-stage rings that A100 / sm_86-89 get, on any device.
template <class TA, class TB, class TC, class S, class Epi>
void launch_mma_sync_stages(const problem<TA, TB, TC, S, Epi>& p, stream_view s, int stages) {
  static_assert(std::is_same_v<TA, TB>, "gemm mma_sync: A and B have the same element type");
  static_assert(is_mma_sync_element_v<TA>, "gemm mma_sync: half, bf16, int8 or float (as TF32) inputs");
  static_assert(std::is_same_v<S, typename tile::mma_traits<TA>::accumulator>,
                "gemm mma_sync: the scalar type is the accumulator type");
  using cfg = mma_sync_config;
  if (p.m <= 0 || p.n <= 0 || p.k <= 0 || p.batch <= 0) return;
  const int device = current_device();
  const int most = mma_sync_stages(device);
  if (stages < cfg::min_stages || stages > most) {
    throw logic_error("gemm mma_sync: " + std::to_string(stages) + " stages asked; this device runs " +
                      std::to_string(cfg::min_stages) + " to " + std::to_string(most));
  }
  constexpr auto kernel = mma_sync_gemm_kernel<TA, TC, S, Epi>;
  // The limit is raised once per device, to the most any launch there uses.
  tile::raise_smem_limit<kernel>(device, most * cfg::stage_bytes);
  const index_t tiles_m = (p.m + cfg::bm - 1) / cfg::bm;
  const index_t tiles_n = (p.n + cfg::bn - 1) / cfg::bn;
  if (tiles_m * tiles_n > INT_MAX) {
    throw logic_error("gemm mma_sync: " + std::to_string(tiles_m * tiles_n) + " output tiles of " +
                      std::to_string(cfg::bm) + " x " + std::to_string(cfg::bn) + " exceed one launch's grid");
  }
  const int smem = stages * cfg::stage_bytes;
  const dim3 grid(static_cast<unsigned>(tiles_m * tiles_n), static_cast<unsigned>(std::min<index_t>(p.batch, 65535)));
  kernel<<<grid, cfg::threads, static_cast<std::size_t>(smem), s.value()>>>(p, stages, static_cast<int>(tiles_m),
                                                                            static_cast<int>(tiles_n));
  SPILLWAY_CHECK_LAUNCH();
}

/// The mma.sync GEMM of `p` on `s` (the current device), with as many stages as the device holds.
template <class TA, class TB, class TC, class S, class Epi>
void launch_mma_sync(const problem<TA, TB, TC, S, Epi>& p, stream_view s) {
  if (p.m <= 0 || p.n <= 0 || p.k <= 0 || p.batch <= 0) return;
  launch_mma_sync_stages(p, s, mma_sync_stages(current_device()));
}

}  // namespace spillway::gemm::detail
