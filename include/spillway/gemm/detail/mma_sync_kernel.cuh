// spillway/gemm/detail/mma_sync_kernel.cuh — the warp-level tensor-core GEMM (mma.sync, sm_80+) for
// half, bf16 (float accumulation), int8 (int32 accumulation) and float as TF32 (float
// accumulation; the FP32 bit patterns go to the tensor cores unrounded, i.e. each operand's
// mantissa is truncated to 10 bits). The path every GPU from sm_80 up runs, and the forced one on
// Hopper.
//
// One mainloop for every type: the operands are K-major (the dispatcher guarantees it), so a
// block tile is rows of k bytes, and every MMA shape used consumes 32 bytes of k with the same
// fragment layout (tile/mma.cuh); only mma_traits<T>::mma differs.
//
// Block tile 128 (m) x 256 (n) x 128 bytes of k, 8 warps of 64 x 64, a 2-4 stage cp.async ring
// (as many 48 KiB stages as the device's shared memory holds, up to 4), shared rows of 128 bytes
// with their 16-byte chunks XOR-swizzled by row % 8 so that both the cp.async stores and the
// ldmatrix reads touch 8 distinct chunks of each 8-row group (conflict-free), fragments
// double-buffered in registers across the four 32-byte k-steps of a tile, one __syncthreads per
// k-tile. Blocks are rasterized in groups of 8 tile rows so the A panels of a group stay in L2
// while B streams past.
//
// Edges: rows past m or n are zero-filled by cp.async (source size 0). The last k-tile may end
// inside a 16-byte chunk (k not a multiple of 16 bytes); that chunk is read element by element
// and the bytes past k are zeros (never the memory after k, which may hold NaNs or end the
// allocation). Zero operands add exact zeros, so no result depends on padding.
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/gemm/detail/problem.hpp>
#include <spillway/gemm/epilogue.hpp>
#include <spillway/gemm/options.hpp>
#include <spillway/tile/arch.cuh>
#include <spillway/tile/cp_async.cuh>
#include <spillway/tile/mma.cuh>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

namespace spillway::gemm::detail {

/// The tile shape of the mma.sync GEMM (see the header comment).
struct mma_sync_config {
  static constexpr int bm = 128;         ///< block rows of C
  static constexpr int bn = 256;         ///< block columns of C
  static constexpr int row_bytes = 128;  ///< k bytes per tile (64 half/bf16, 32 float, 128 int8)
  static constexpr int threads = 256;
  static constexpr int warps_n = 4;  ///< 2 x 4 warps
  static constexpr int wm = 64, wn = 64;
  static constexpr int mt = wm / 16;                            ///< m16 fragments per warp
  static constexpr int nt = wn / 8;                             ///< n8 fragments per warp
  static constexpr int ksteps = row_bytes / tile::mma_k_bytes;  ///< MMA k-steps per tile
  static constexpr int a_bytes = bm * row_bytes;
  static constexpr int stage_bytes = (bm + bn) * row_bytes;  ///< 48 KiB
  static constexpr int max_stages = 4;
  static constexpr int min_stages = 2;
  static constexpr int raster_group = 8;  ///< tile rows walked together (L2 reuse of A)
};

template <class T>
inline constexpr bool is_mma_sync_element_v =
    std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, float> ||
    std::is_same_v<T, std::int8_t>;

/// Waits until at most `pending` (0, 1 or 2; the stage count is a launch argument) cp.async
/// groups are in flight.
__device__ __forceinline__ void mma_sync_wait_pending(int pending) {
  if (pending >= 2) {
    tile::cp_async_wait<2>();
  } else if (pending == 1) {
    tile::cp_async_wait<1>();
  } else {
    tile::cp_async_wait<0>();
  }
}

/// One 16-byte chunk of a row whose k ends inside it: the `valid_bytes` (< 16, a whole number of
/// elements) before the end are read one byte at a time, the rest are zeros.
__device__ __forceinline__ void mma_sync_store_partial_chunk(unsigned char* dst, const unsigned char* src,
                                                             int valid_bytes) {
  std::uint32_t w[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    std::uint32_t v = 0;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int at = j * 4 + b;
      const std::uint32_t byte = at < valid_bytes ? static_cast<std::uint32_t>(src[at]) : 0u;
      v |= byte << (8 * b);
    }
    w[j] = v;
  }
  *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
}

/// Two adjacent outputs, aligned so that a pair is one vector load or store.
template <class TC>
struct alignas(2 * sizeof(TC)) mma_sync_pair {
  TC x, y;
};

template <class T, class TC, class S, class Epi>
__global__ void __launch_bounds__(mma_sync_config::threads, 1)
    mma_sync_gemm_kernel(problem<T, T, TC, S, Epi> p, int stages, int tiles_m, int tiles_n) {
#ifdef SPILLWAY_TILE_HAS_MMA
  using cfg = mma_sync_config;
  using traits = tile::mma_traits<T>;
  using acc_t = typename traits::accumulator;
  extern __shared__ __align__(128) unsigned char smem[];
  const std::uint32_t smem_base = tile::smem_addr(smem);

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int warp_m = warp / cfg::warps_n;
  const int warp_n = warp % cfg::warps_n;

  // Grouped rasterization: consecutive blocks walk down raster_group tile rows, then across.
  const long long pid = blockIdx.x;
  const long long per_group = static_cast<long long>(cfg::raster_group) * tiles_n;
  const long long first_m = (pid / per_group) * cfg::raster_group;
  const long long group_rows = tiles_m - first_m < cfg::raster_group ? tiles_m - first_m : cfg::raster_group;
  const long long in_group = pid % per_group;
  const index_t m0 = static_cast<index_t>(first_m + in_group % group_rows) * cfg::bm;
  const index_t n0 = static_cast<index_t>(in_group / group_rows) * cfg::bn;

  const index_t k_bytes = p.k * static_cast<index_t>(sizeof(T));
  const index_t ktiles = (k_bytes + cfg::row_bytes - 1) / cfg::row_bytes;
  const index_t lda_bytes = p.lda * static_cast<index_t>(sizeof(T));
  const index_t ldb_bytes = p.ldb * static_cast<index_t>(sizeof(T));

  // Loads: thread tid moves chunk tid % 8 of rows tid / 8 + 32 i (A: i < 4, B: i < 8); its
  // swizzled shared offset is the same for every i but for the + i * 32 rows.
  const int ld_row = tid >> 3;
  const int ld_chunk = tid & 7;
  const std::uint32_t st_off =
      static_cast<std::uint32_t>(ld_row * cfg::row_bytes + ((ld_chunk ^ (ld_row & 7)) << 4));
  constexpr int a_iters = cfg::bm / 32;
  constexpr int b_iters = cfg::bn / 32;
  const index_t a_rows_left = p.m - m0 - ld_row;  // row i is inside m when 32 i < a_rows_left
  const index_t b_rows_left = p.n - n0 - ld_row;

  // Fragment reads (ldmatrix.x4): A lanes address rows (lane % 8) + 8 ((lane / 8) % 2) at chunk
  // lane / 16 of the k-step; B lanes rows (lane % 8) + 8 (lane / 16) at chunk (lane / 8) % 2.
  // The k-step's chunk pair is XOR-ed in as ks << 5 (it flips only the chunk bits).
  const int a_frag_row = warp_m * cfg::wm + (lane & 7) + ((lane >> 3) & 1) * 8;
  const std::uint32_t a_frag_off =
      static_cast<std::uint32_t>(a_frag_row * cfg::row_bytes + (((lane >> 4) ^ (lane & 7)) << 4));
  const int b_frag_row = warp_n * cfg::wn + (lane & 7) + (lane >> 4) * 8;
  const std::uint32_t b_frag_off = static_cast<std::uint32_t>(
      cfg::a_bytes + b_frag_row * cfg::row_bytes + ((((lane >> 3) & 1) ^ (lane & 7)) << 4));

  for (index_t q = blockIdx.y; q < p.batch; q += gridDim.y) {
    const unsigned char* a_src = reinterpret_cast<const unsigned char*>(p.a + q * p.stride_a) +
                                 (m0 + ld_row) * lda_bytes + ld_chunk * 16;
    const unsigned char* b_src = reinterpret_cast<const unsigned char*>(p.b + q * p.stride_b) +
                                 (n0 + ld_row) * ldb_bytes + ld_chunk * 16;

    // Bit i: row ld_row + 32 i of the block lies inside the matrix (computed once, not per tile).
    std::uint32_t a_ok = 0, b_ok = 0;
#pragma unroll
    for (int i = 0; i < a_iters; ++i) a_ok |= static_cast<std::uint32_t>(32 * i < a_rows_left) << i;
#pragma unroll
    for (int i = 0; i < b_iters; ++i) b_ok |= static_cast<std::uint32_t>(32 * i < b_rows_left) << i;
    const index_t a_step = 32 * lda_bytes, b_step = 32 * ldb_bytes;
    const index_t full_ktiles = k_bytes / cfg::row_bytes;

    auto load_tile = [&](index_t kt, int stage) {
      const std::uint32_t sa = smem_base + static_cast<std::uint32_t>(stage * cfg::stage_bytes) + st_off;
      const std::uint32_t sb = sa + cfg::a_bytes;
      const index_t koff = kt * cfg::row_bytes;
      if (kt < full_ktiles) {
        // Rows outside the matrix copy 0 bytes (zero fill); their address is never read.
        const unsigned char* src = a_src + koff;
#pragma unroll
        for (int i = 0; i < a_iters; ++i, src += a_step) {
          tile::cp_async<16>(sa + i * 32 * cfg::row_bytes, src, (a_ok >> i) & 1u);
        }
        src = b_src + koff;
#pragma unroll
        for (int i = 0; i < b_iters; ++i, src += b_step) {
          tile::cp_async<16>(sb + i * 32 * cfg::row_bytes, src, (b_ok >> i) & 1u);
        }
      } else {
        // The tile that holds the end of k: whole chunks by cp.async, the chunk k ends in by hand.
        const index_t left = k_bytes - koff - ld_chunk * 16;
        unsigned char* const gen = smem + stage * cfg::stage_bytes + st_off;
        const unsigned char* src = a_src + koff;
        for (int i = 0; i < a_iters; ++i, src += a_step) {
          const bool row_ok = (a_ok >> i) & 1u;
          if (row_ok && left > 0 && left < 16) {
            mma_sync_store_partial_chunk(gen + i * 32 * cfg::row_bytes, src, static_cast<int>(left));
          } else {
            tile::cp_async<16>(sa + i * 32 * cfg::row_bytes, src, row_ok && left >= 16);
          }
        }
        src = b_src + koff;
        for (int i = 0; i < b_iters; ++i, src += b_step) {
          const bool row_ok = (b_ok >> i) & 1u;
          if (row_ok && left > 0 && left < 16) {
            mma_sync_store_partial_chunk(gen + cfg::a_bytes + i * 32 * cfg::row_bytes, src, static_cast<int>(left));
          } else {
            tile::cp_async<16>(sb + i * 32 * cfg::row_bytes, src, row_ok && left >= 16);
          }
        }
      }
    };

    std::uint32_t af[2][cfg::mt][4];
    std::uint32_t bf[2][cfg::nt][2];
    auto load_frags = [&](int buf, int stage, int ks) {
      const std::uint32_t base = smem_base + static_cast<std::uint32_t>(stage * cfg::stage_bytes);
      const std::uint32_t ka = base + (a_frag_off ^ static_cast<std::uint32_t>(ks << 5));
      const std::uint32_t kb = base + (b_frag_off ^ static_cast<std::uint32_t>(ks << 5));
#pragma unroll
      for (int mi = 0; mi < cfg::mt; ++mi) tile::ldmatrix_x4(af[buf][mi], ka + mi * 16 * cfg::row_bytes);
#pragma unroll
      for (int np = 0; np < cfg::nt / 2; ++np) {
        std::uint32_t r[4];
        tile::ldmatrix_x4(r, kb + np * 16 * cfg::row_bytes);
        bf[buf][2 * np][0] = r[0];
        bf[buf][2 * np][1] = r[1];
        bf[buf][2 * np + 1][0] = r[2];
        bf[buf][2 * np + 1][1] = r[3];
      }
    };

    acc_t acc[cfg::mt][cfg::nt][4];
#pragma unroll
    for (int mi = 0; mi < cfg::mt; ++mi)
#pragma unroll
      for (int ni = 0; ni < cfg::nt; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mi][ni][e] = acc_t(0);

    // Prologue: stages - 1 tiles in flight (empty groups past the end keep the counts uniform).
    for (int st = 0; st < stages - 1; ++st) {
      if (st < ktiles) load_tile(st, st);
      tile::cp_async_commit();
    }
    mma_sync_wait_pending(stages - 2);
    __syncthreads();

    int read_stage = 0;
    int write_stage = stages - 1;
    load_frags(0, 0, 0);
    for (index_t kt = 0; kt < ktiles; ++kt) {
#pragma unroll
      for (int ks = 0; ks < cfg::ksteps; ++ks) {
        if (ks == cfg::ksteps - 1) {
          // Tile kt + 1 has landed (and every warp is done with tile kt - 1's stage, which the
          // load issued at ks == 0 below refills).
          mma_sync_wait_pending(stages - 2);
          __syncthreads();
          read_stage = read_stage + 1 == stages ? 0 : read_stage + 1;
        }
        load_frags((ks + 1) & 1, read_stage, (ks + 1) % cfg::ksteps);
        if (ks == 0) {
          if (kt + stages - 1 < ktiles) load_tile(kt + stages - 1, write_stage);
          tile::cp_async_commit();
          write_stage = write_stage + 1 == stages ? 0 : write_stage + 1;
        }
#pragma unroll
        for (int mi = 0; mi < cfg::mt; ++mi)
#pragma unroll
          for (int ni = 0; ni < cfg::nt; ++ni) traits::mma(acc[mi][ni], af[ks & 1][mi], bf[ks & 1][ni]);
      }
    }

    // Epilogue: each thread owns pairs (row g / g + 8, columns 2t, 2t + 1) of every 16 x 8 fragment,
    // written as one vector store where C's row allows it (any ldc and C offset are legal).
    TC* const c = p.c + q * p.stride_c;
    const bool read_c = !(p.beta == S(0));
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int mi = 0; mi < cfg::mt; ++mi) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const index_t row = m0 + warp_m * cfg::wm + mi * 16 + g + h * 8;
        if (row >= p.m) continue;
        TC* const crow = c + row * p.ldc;
        const bool row_paired = reinterpret_cast<std::uintptr_t>(crow) % sizeof(mma_sync_pair<TC>) == 0;
#pragma unroll
        for (int ni = 0; ni < cfg::nt; ++ni) {
          const index_t col = n0 + warp_n * cfg::wn + ni * 8 + 2 * t;  // even
          if (col >= p.n) continue;
          S v0 = p.alpha * static_cast<S>(acc[mi][ni][h * 2]);
          S v1 = p.alpha * static_cast<S>(acc[mi][ni][h * 2 + 1]);
          if (row_paired && col + 1 < p.n) {
            auto* const dst = reinterpret_cast<mma_sync_pair<TC>*>(crow + col);
            if (read_c) {
              const mma_sync_pair<TC> old = *dst;
              v0 += p.beta * load_output<S>(old.x);
              v1 += p.beta * load_output<S>(old.y);
            }
            *dst = mma_sync_pair<TC>{convert_output<TC>(p.epi(v0, row, col)), convert_output<TC>(p.epi(v1, row, col + 1))};
          } else {
            if (read_c) v0 += p.beta * load_output<S>(crow[col]);
            crow[col] = convert_output<TC>(p.epi(v0, row, col));
            if (col + 1 < p.n) {
              if (read_c) v1 += p.beta * load_output<S>(crow[col + 1]);
              crow[col + 1] = convert_output<TC>(p.epi(v1, row, col + 1));
            }
          }
        }
      }
    }

    // The next batch entry's prologue refills the stages this one may still be reading.
    tile::cp_async_wait<0>();
    __syncthreads();
  }
#else
  (void)p, (void)stages, (void)tiles_m, (void)tiles_n;
  __trap();
#endif
}

/// Largest dynamic shared memory a block may opt into on `device` (cached).
inline int mma_sync_max_block_smem(int device) {
  static std::mutex mutex;
  static std::vector<int> cache;
  return tile::detail::cached_per_device(device, cache, mutex, [device] {
    int v = 0;
    SPILLWAY_CUDA_TRY(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    return v;
  });
}

/// The cp.async stages used on `device`: as many 48 KiB stages as fit, 2 to 4.
inline int mma_sync_stages(int device) {
  using cfg = mma_sync_config;
  const int fit = mma_sync_max_block_smem(device) / cfg::stage_bytes;
  if (fit < cfg::min_stages) {
    throw logic_error("gemm mma_sync: the block tile needs " + std::to_string(cfg::min_stages * cfg::stage_bytes) +
                      " bytes of shared memory per block; " + tile::describe_device(device) + " offers " +
                      std::to_string(mma_sync_max_block_smem(device)));
  }
  return std::min(fit, cfg::max_stages);
}

template <class TA, class TB, class TC, class S, class Epi>
void launch_mma_sync(const problem<TA, TB, TC, S, Epi>& p, stream_view s) {
  static_assert(std::is_same_v<TA, TB>, "gemm mma_sync: A and B have the same element type");
  static_assert(is_mma_sync_element_v<TA>, "gemm mma_sync: half, bf16, int8 or float (as TF32) inputs");
  static_assert(std::is_same_v<S, typename tile::mma_traits<TA>::accumulator>,
                "gemm mma_sync: the scalar type is the accumulator type");
  using cfg = mma_sync_config;
  if (p.m <= 0 || p.n <= 0 || p.k <= 0 || p.batch <= 0) return;

  const int device = current_device();
  const int stages = mma_sync_stages(device);
  const int smem = stages * cfg::stage_bytes;
  auto kernel = mma_sync_gemm_kernel<TA, TC, S, Epi>;
  {
    // Raise the kernel's dynamic shared-memory limit once per device (the largest a launch there uses).
    static std::mutex mutex;
    static std::vector<int> raised;
    tile::detail::cached_per_device(device, raised, mutex, [&] {
      SPILLWAY_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      return smem;
    });
  }
  const index_t tiles_m = (p.m + cfg::bm - 1) / cfg::bm;
  const index_t tiles_n = (p.n + cfg::bn - 1) / cfg::bn;
  if (tiles_m * tiles_n > INT_MAX) {
    throw logic_error("gemm mma_sync: " + std::to_string(tiles_m * tiles_n) + " output tiles of " +
                      std::to_string(cfg::bm) + " x " + std::to_string(cfg::bn) + " exceed one launch's grid");
  }
  const dim3 grid(static_cast<unsigned>(tiles_m * tiles_n), static_cast<unsigned>(std::min<index_t>(p.batch, 65535)));
  kernel<<<grid, cfg::threads, static_cast<std::size_t>(smem), s.value()>>>(p, stages, static_cast<int>(tiles_m),
                                                                            static_cast<int>(tiles_n));
  SPILLWAY_CHECK_LAUNCH();
}

}  // namespace spillway::gemm::detail
