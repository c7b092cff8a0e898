// spillway/gemm/detail/wgmma_kernel.cuh — the Hopper GEMM (sm_90a) for half, bf16, float as TF32,
// FP8 e4m3 / e5m2 (float accumulation) and int8 (int32 accumulation): wgmma.mma_async with both
// operands in shared memory, fed by the tensor copy engine through a ring of stages guarded by mbarriers, one
// producer warp and two consumer warpgroups, persistent over the tiles.
//
// Block tile 128 x 256. A stage holds 128 bytes of K per row (64 half/bf16, 32 float, 128 int8):
// one row of the 128-byte swizzle, which is what the tensor map's box and the wgmma descriptors
// both use, so the copy engine writes and the tensor cores read without bank conflicts. 4 stages
// x 48 KiB. Each consumer warpgroup owns 64 rows x 256 columns (128 accumulators per thread) and
// issues the stage's four m64n256 instructions back to back, keeping one group in flight
// (wait_group 1) before it hands the previous stage back to the producer.
//
// No clusters: pairs of blocks sharing the B tile by TMA multicast never beat single blocks on the
// H200 (docs/gemm.md, "wgmma kernel"), so the kernel has no cluster form.
//
// Epilogue: alpha * acc (+ beta * C), the functor and the conversion in registers. When C has a
// tensor map (16-byte aligned base, ldc and batch stride), each warpgroup block that lies wholly
// inside C (64 x 256) is written as 64-row x 128-byte pieces into two swizzled staging buffers and
// sent by tensor stores, so the warpgroup returns to the main loop while the writes drain; edge
// blocks and other Cs are stored element by element (pairs where aligned). Boxes are never sent
// across C's last column.
//
// Edges: the tensor maps zero-fill every box part outside [0, k) x [0, rows), so the main loop
// never predicates; the epilogue writes only (row < m, col < n). Batches are the maps' third
// dimension (a zero batch stride reuses batch 0).
//
// Tile order: tiles of one batch go in bands of 16 tile-rows (2048 rows), column by column inside
// a band, so the ~132 tiles in flight at once cover about 2048 rows of A and 2112 rows of B (the
// squarest footprint: each panel is fetched from HBM about once per wave and re-read from L2).
//
// TF32: see tile/wgmma.cuh — the FP32 operands are truncated to TF32 by the tensor cores.
//
// FP8: a stage is 128 elements of k. Under fp8_accumulation::promoted (problem::fast_accumulation
// false) each stage is summed on the tensor cores from zero, 128 columns at a time into scratch
// registers, and added to the FP32 accumulators (tile::wgmma_ring::consume_promoted); under `fast`
// the tensor cores accumulate the whole k as for the other types.
//
// Its rates against cuBLAS and its ncu profile: docs/gemm.md, "wgmma kernel".
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/gemm/detail/problem.hpp>
#include <spillway/gemm/epilogue.hpp>
#include <spillway/gemm/types.hpp>
#include <spillway/tile/arch.cuh>
#include <spillway/tile/barrier.cuh>
#include <spillway/tile/schedule.cuh>
#include <spillway/tile/tensor_map.hpp>
#include <spillway/tile/wgmma.cuh>
#include <spillway/tile/wgmma_mainloop.cuh>

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

namespace spillway::gemm::detail {

/// FP8 inputs (the table's rows of FP8 arithmetic): the kernel that promotes the sums exists for them.
template <class T>
inline constexpr bool is_fp8_v = gemm_type_info_of<T>().arith == element_arith::fp8;

template <class T>
struct wgmma_config {
  static constexpr int bm = 128;
  static constexpr int bn = 256;
  static constexpr int stages = 4;
  static constexpr int threads = 384;  // warpgroup 0: producer; 1 and 2: consumers (64 rows each)
  static constexpr int row_bytes = 128;
  static constexpr int bk = row_bytes / static_cast<int>(sizeof(T));
  static constexpr int a_bytes = bm * row_bytes;
  static constexpr int b_bytes = bn * row_bytes;
  static constexpr int stage_bytes = a_bytes + b_bytes;
  static constexpr int group_m = 16;  // bands of 16 tile rows (2048 rows)
  // + 1 KiB to align the stages to the 1024-byte swizzle atom, + full and empty barriers.
  // Output staging for the bulk-store epilogue: per consumer warpgroup two 64-row x 128-byte
  // pieces (32 four-byte or 64 two-byte columns), 128-byte swizzled like the tensor map of C.
  static constexpr int piece_bytes = 64 * 128;
  static constexpr int staging_bytes = 2 * 2 * piece_bytes;
  static constexpr int smem_bytes =
      stages * stage_bytes + 1024 + staging_bytes + tile::wgmma_ring<stages, stage_bytes>::barrier_bytes;
  static_assert(smem_bytes <= 232448, "within the 227 KiB a block may opt into on sm_90");
};

struct wgmma_schedule {
  std::int64_t tiles_m = 0;
  std::int64_t tiles_n = 0;
  std::int64_t per_batch = 0;
  std::int64_t total = 0;
  int group_m = 8;
  bool a_batched = false;  // batch q reads the maps' z = q (else z = 0: a zero batch stride)
  bool b_batched = false;
  bool c_pairs = false;  // C's base, ldc and stride_c allow 2-element vector stores at even columns
  bool c_bulk = false;   // C has a tensor map: whole 64 x 256 warpgroup blocks go out as bulk stores

  struct tile {
    std::int64_t q, tm, tn;
  };
  __host__ __device__ tile locate(std::int64_t t) const {
    const std::int64_t q = t / per_batch;
    tile out{q, 0, 0};
    ::spillway::tile::grouped_raster(t - q * per_batch, tiles_m, tiles_n, group_m, out.tm, out.tn);
    return out;
  }
};

/// An epilogue that declares `using fragment_sink_tag = void;` takes the accumulators themselves
/// instead of C (the contract: gemm/fragment_sink.cuh); such products run on the ping-pong kernel
/// of wgmma_sink_kernel.cuh, never on this one.
template <class Epi, class = void>
struct is_fragment_sink : std::false_type {};
template <class Epi>
struct is_fragment_sink<Epi, std::void_t<typename Epi::fragment_sink_tag>> : std::true_type {};

template <class TC>
struct alignas(2 * sizeof(TC)) wgmma_out_pair {
  TC x, y;
};

/// Writes the two accumulators of (row, col) and (row, col + 1) through alpha, beta, the epilogue
/// and the conversion; col + 1 may lie past n.
template <class S, class TC, class Epi, class Acc>
__device__ __forceinline__ void wgmma_store_pair(TC* crow, std::int64_t row, std::int64_t col, std::int64_t n,
                                                 Acc a0, Acc a1, S alpha, S beta, bool read_c, bool pairs,
                                                 const Epi& epi) {
  S v0 = alpha * static_cast<S>(a0);
  S v1 = alpha * static_cast<S>(a1);
  if (pairs && col + 1 < n) {
    auto* p = reinterpret_cast<wgmma_out_pair<TC>*>(crow + col);
    if (read_c) {
      const wgmma_out_pair<TC> old = *p;
      v0 += beta * load_output<S>(old.x);
      v1 += beta * load_output<S>(old.y);
    }
    wgmma_out_pair<TC> out;
    out.x = convert_output<TC>(epi(v0, row, col));
    out.y = convert_output<TC>(epi(v1, row, col + 1));
    *p = out;
    return;
  }
  if (col < n) {
    if (read_c) v0 += beta * load_output<S>(crow[col]);
    crow[col] = convert_output<TC>(epi(v0, row, col));
  }
  if (col + 1 < n) {
    if (read_c) v1 += beta * load_output<S>(crow[col + 1]);
    crow[col + 1] = convert_output<TC>(epi(v1, row, col + 1));
  }
}

/// alpha * acc + beta * C, the epilogue and the conversion for (row, col) and (row, col + 1), both
/// inside C.
template <class S, class TC, class Epi, class Acc>
__device__ __forceinline__ wgmma_out_pair<TC> wgmma_finish_pair(const TC* crow, std::int64_t row,
                                                                std::int64_t col, Acc a0, Acc a1, S alpha,
                                                                S beta, bool read_c, const Epi& epi) {
  S v0 = alpha * static_cast<S>(a0);
  S v1 = alpha * static_cast<S>(a1);
  if (read_c) {
    v0 += beta * load_output<S>(crow[col]);
    v1 += beta * load_output<S>(crow[col + 1]);
  }
  wgmma_out_pair<TC> out;
  out.x = convert_output<TC>(epi(v0, row, col));
  out.y = convert_output<TC>(epi(v1, row, col + 1));
  return out;
}

/// `Promote` (FP8 under fp8_accumulation::promoted): each stage's sums go through scratch registers
/// into FP32 accumulators (tile::wgmma_ring::consume_promoted). A kernel of its own, so that the
/// accumulators of the other form are never written by non-wgmma instructions (which would make
/// ptxas serialize every wgmma of the function).
template <class T, class TC, class S, class Epi, bool Promote = false>
__global__ void __launch_bounds__(wgmma_config<T>::threads, 1)
    wgmma_gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                      const __grid_constant__ CUtensorMap map_c, const problem<T, T, TC, S, Epi> p,
                      const wgmma_schedule sch) {
#ifdef SPILLWAY_TILE_HAS_WGMMA
  using Cfg = wgmma_config<T>;
  using Acc = tile::wgmma_acc_t<T>;
  extern __shared__ __align__(1024) unsigned char wgmma_smem_raw[];
  const std::uint32_t raw = tile::smem_addr(wgmma_smem_raw);
  const std::uint32_t base = (raw + 1023u) & ~1023u;
  const std::uint32_t staging = base + Cfg::stages * Cfg::stage_bytes;  // 1024-byte aligned
  const std::uint32_t bars = staging + Cfg::staging_bytes;
  using ring_t = tile::wgmma_ring<Cfg::stages, Cfg::stage_bytes>;
  const ring_t ring{base, bars};

  const int tid = static_cast<int>(threadIdx.x);
  const int wg = tid / 128;
  const std::int64_t num_k = (p.k + Cfg::bk - 1) / Cfg::bk;

  if (tid == 0) {
    tile::prefetch_tensor_map(&map_a);
    tile::prefetch_tensor_map(&map_b);
    if (sch.c_bulk) tile::prefetch_tensor_map(&map_c);
    ring.init(8);  // one arrival per consumer warp
    tile::fence_barrier_init();
  }
  __syncthreads();

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    if (tid == 0) {
      tile::ring_position<Cfg::stages> pos;
      for (std::int64_t t = blockIdx.x; t < sch.total; t += gridDim.x) {
        const wgmma_schedule::tile tl = sch.locate(t);
        const int ya = static_cast<int>(tl.tm * Cfg::bm);
        const int yb = static_cast<int>(tl.tn * Cfg::bn);
        const int za = sch.a_batched ? static_cast<int>(tl.q) : 0;
        const int zb = sch.b_batched ? static_cast<int>(tl.q) : 0;
        ring.produce(pos, num_k, [&](std::uint32_t dst, std::uint32_t full_bar, std::int64_t kb) {
          const int x = static_cast<int>(kb * Cfg::bk);
          tile::tma_load_3d(dst, &map_a, x, ya, za, full_bar);
          tile::tma_load_3d(dst + Cfg::a_bytes, &map_b, x, yb, zb, full_bar);
        });
      }
    }
    __syncwarp();
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
    const int cw = wg - 1;                  // rows [64 cw, 64 cw + 64) of the tile
    const int warp_in_wg = (tid / 32) % 4;  // rows [16 w, 16 w + 16) of those
    const int lane = tid % 32;
    const bool read_c = !(p.beta == S(0));
    const bool leader = tid % 128 == 0;  // issues and tracks the warpgroup's bulk stores
    tile::ring_position<Cfg::stages> pos;
    Acc d[128];
    for (std::int64_t t = blockIdx.x; t < sch.total; t += gridDim.x) {
      const wgmma_schedule::tile tl = sch.locate(t);
      if constexpr (Promote) {
        ring.template consume_promoted<T, 256, Cfg::row_bytes, Cfg::a_bytes>(pos, num_k, cw, lane, d);
      } else {
        ring.template consume<T, 256, Cfg::row_bytes, Cfg::a_bytes>(pos, num_k, cw, lane, d);
      }

      // The producer is already filling the stages of the next tile while this one is written.
      // Rows past m (an edge tile) are skipped here.
      const std::int64_t wg_row0 = tl.tm * Cfg::bm + cw * 64;
      const std::int64_t row0 = wg_row0 + warp_in_wg * 16 + lane / 4;
      const std::int64_t col0 = tl.tn * Cfg::bn + 2 * (lane % 4);
      TC* const cb = p.c + tl.q * p.stride_c;
      if (sch.c_bulk && wg_row0 + 64 <= p.m && tl.tn * Cfg::bn + Cfg::bn <= p.n) {
        // Whole 64 x 256 block: pieces of 64 rows x 128 bytes go through shared memory to the
        // tensor copy engine, two buffers in turn, so the warpgroup is back in the main loop
        // while the global writes drain.
        constexpr int piece_cols = 128 / static_cast<int>(sizeof(TC));
        constexpr int pieces = Cfg::bn / piece_cols;
        const std::uint32_t region = staging + static_cast<std::uint32_t>(cw * 2 * Cfg::piece_bytes);
#pragma unroll
        for (int piece = 0; piece < pieces; ++piece) {
          const std::uint32_t buf = region + static_cast<std::uint32_t>((piece & 1) * Cfg::piece_bytes);
          // The store issued two pieces ago from this buffer must have read it out.
          if (leader) tile::bulk_wait_group_read<1>();
          tile::named_barrier_sync(1 + cw, 128);
#pragma unroll
          for (int jj = 0; jj < piece_cols / 8; ++jj) {
            const int j = piece * (piece_cols / 8) + jj;
            const int col_in_piece = 8 * jj + 2 * (lane % 4);
            const std::int64_t col = tl.tn * Cfg::bn + piece * piece_cols + col_in_piece;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int r = warp_in_wg * 16 + lane / 4 + 8 * h;  // row inside the 64-row block
              const std::int64_t row = wg_row0 + r;
              const wgmma_out_pair<TC> out =
                  wgmma_finish_pair<S, TC>(cb + row * p.ldc, row, col, d[4 * j + 2 * h], d[4 * j + 2 * h + 1],
                                           p.alpha, p.beta, read_c, p.epi);
              const std::uint32_t off =
                  static_cast<std::uint32_t>(col_in_piece * static_cast<int>(sizeof(TC)));
              const std::uint32_t addr = buf + static_cast<std::uint32_t>(r * 128) +
                                         ((((off >> 4) ^ static_cast<std::uint32_t>(r & 7))) << 4) +
                                         (off & 15u);
              *reinterpret_cast<wgmma_out_pair<TC>*>(wgmma_smem_raw + (addr - raw)) = out;
            }
          }
          // Generic-proxy writes become visible to the copy engine, then one thread sends the piece.
          tile::fence_proxy_async_shared();
          tile::named_barrier_sync(1 + cw, 128);
          if (leader) {
            tile::tma_store_3d(&map_c, static_cast<int>(tl.tn * Cfg::bn + piece * piece_cols),
                               static_cast<int>(wg_row0), static_cast<int>(tl.q), buf);
            tile::bulk_commit_group();
          }
        }
        continue;
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const std::int64_t row = row0 + 8 * h;
        if (row < p.m) {
          TC* const crow = cb + row * p.ldc;
#pragma unroll
          for (int j = 0; j < 32; ++j) {
            wgmma_store_pair<S>(crow, row, col0 + 8 * j, p.n, d[4 * j + 2 * h], d[4 * j + 2 * h + 1], p.alpha,
                                p.beta, read_c, sch.c_pairs, p.epi);
          }
        }
      }
    }
    // The last pieces' stores must be done (shared memory read out, global writes performed)
    // before the block retires.
    if (leader) tile::bulk_wait_group<0>();
  }
#else
  (void)map_a, (void)map_b, (void)map_c, (void)p, (void)sch;
  __trap();  // never launched: launch_wgmma refuses unless this build has sm_90a code for the device
#endif
}

/// Per device: raises the kernel's dynamic shared-memory limit (once) and returns the persistent
/// grid's size (one block per multiprocessor).
template <class T, class TC, class S, class Epi, bool Promote>
int wgmma_prepare(int device) {
  tile::raise_smem_limit<wgmma_gemm_kernel<T, TC, S, Epi, Promote>>(device, wgmma_config<T>::smem_bytes);
  return tile::multiprocessor_count(device);
}

/// Enqueues p on `s` (current device). Preconditions (the dispatcher's): A and B K-major, 16-byte
/// aligned bases, lda, ldb, stride_a, stride_b multiples of 16 bytes; m, n, k, batch >= 1.
template <class TA, class TB, class TC, class S, class Epi>
void launch_wgmma(const problem<TA, TB, TC, S, Epi>& p, stream_view s) {
  static_assert(std::is_same_v<TA, TB>, "launch_wgmma: A and B have one element type");
  static_assert(!is_fragment_sink<Epi>::value, "launch_wgmma: fragment sinks go through launch_wgmma_sink");
  using T = TA;
  static_assert(
      gemm_type_info_of<T>().wgmma,
      "launch_wgmma: half, bf16, float (as TF32), int8 or FP8: the rows of gemm/types.hpp with wgmma");
  using Cfg = wgmma_config<T>;
  if (!p.a_kmajor || !p.b_kmajor) throw logic_error("gemm wgmma: both operands must be K-major");
  const int device = current_device();
  if ((tile::build_features(device) & tile::feature_wgmma) == 0) {
    throw logic_error("gemm wgmma: this build holds no sm_90a code for " + tile::describe_device(device));
  }
  wgmma_schedule sch;
  sch.tiles_m = (p.m + Cfg::bm - 1) / Cfg::bm;
  sch.tiles_n = (p.n + Cfg::bn - 1) / Cfg::bn;
  sch.per_batch = sch.tiles_m * sch.tiles_n;
  sch.total = sch.per_batch * p.batch;
  sch.group_m = Cfg::group_m;
  sch.a_batched = p.batch > 1 && p.stride_a != 0;
  sch.b_batched = p.batch > 1 && p.stride_b != 0;
  const auto c_addr = reinterpret_cast<std::uintptr_t>(p.c);
  sch.c_pairs = c_addr % (2 * sizeof(TC)) == 0 && p.ldc % 2 == 0 && (p.batch == 1 || p.stride_c % 2 == 0);

  // Always 3-D maps (one load instruction for batched and single problems); a single matrix is
  // a batch of one whose pitch only has to be valid.
  const CUtensorMap map_a = tile::make_matrix_tensor_map<T>(
      p.a, p.m, p.k, p.lda, Cfg::bm, Cfg::bk, tile::swizzle::b128, "gemm wgmma: A",
      sch.a_batched ? p.batch : 1, sch.a_batched ? p.stride_a : p.lda * p.m);
  const CUtensorMap map_b = tile::make_matrix_tensor_map<T>(
      p.b, p.n, p.k, p.ldb, Cfg::bn, Cfg::bk, tile::swizzle::b128, "gemm wgmma: B",
      sch.b_batched ? p.batch : 1, sch.b_batched ? p.stride_b : p.ldb * p.n);
  // C through the copy engine when a tensor map can describe it and some warpgroup block
  // (64 x 256) lies wholly inside it; the others, and every edge block, store element by element.
  constexpr auto es = static_cast<std::int64_t>(sizeof(TC));
  sch.c_bulk = c_addr % 16 == 0 && (p.ldc * es) % 16 == 0 &&
               (p.batch == 1 || (p.stride_c > 0 && (p.stride_c * es) % 16 == 0)) && p.m >= 64 &&
               p.n >= Cfg::bn;
  const CUtensorMap map_c =
      sch.c_bulk ? tile::make_matrix_tensor_map<TC>(p.c, p.m, p.n, p.ldc, 64, 128 / static_cast<int>(es),
                                                    tile::swizzle::b128, "gemm wgmma: C", p.batch,
                                                    p.batch > 1 ? p.stride_c : p.ldc * p.m)
                 : map_a;  // unused

  const problem<T, T, TC, S, Epi> kp = p;
  const auto launch = [&](auto promote) {
    constexpr bool Promote = decltype(promote)::value;
    const std::int64_t sms = wgmma_prepare<T, TC, S, Epi, Promote>(device);
    const unsigned grid = grid_blocks(sch.total, 1, sms);
    wgmma_gemm_kernel<T, TC, S, Epi, Promote>
        <<<grid, Cfg::threads, Cfg::smem_bytes, s.value()>>>(map_a, map_b, map_c, kp, sch);
    SPILLWAY_CHECK_LAUNCH();
  };
  if constexpr (is_fp8_v<T>) {
    if (!p.fast_accumulation) return launch(std::true_type{});
  }
  launch(std::false_type{});
}

}  // namespace spillway::gemm::detail
