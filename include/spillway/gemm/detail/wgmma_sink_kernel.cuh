// spillway/gemm/detail/wgmma_sink_kernel.cuh — the Hopper GEMM of fragment sinks (sm_90a;
// gemm/fragment_sink.cuh): A·Bᵀ whose accumulators go to a sink instead of C, with the two consumer
// warpgroups in ping-pong. The same ring of stages (tile::wgmma_ring), the same per-warpgroup
// fragment (64 rows x 256 columns, 128 accumulators per thread) and the same sink contract as the
// cooperative kernel (wgmma_kernel.cuh); what differs is who owns a tile.
//
// Cooperative (wgmma_kernel.cuh): both warpgroups share a 128 x 256 tile, so both finish its main
// loop together and run their sinks together, and the tensor cores idle while they do. A sink that
// filters every score (the similarity top-k: ~4.5 instructions a score) costs a large part of a
// short-k tile that way (ncu, 10^6 x 768 top-32: tensor pipe active 59% against 95% for the bare
// GEMM). Here each warpgroup owns whole 64 x 256 tiles, the block's tiles dealt to them in turn;
// their main loops take turns on the tensor cores (an ordered hand-over through two named
// barriers), so one warpgroup's sink runs while the other's main loop does.
//
// Blocks go in pairs (2-block clusters) over pair tiles of 128 x 256: block r takes A's rows
// [64 r, 64 r + 64) and loads rows [128 r, 128 r + 128) of the B tile into both blocks (multicast),
// so each block fetches from L2 what a cooperative block does per product (a ping-pong block alone
// would fetch its own 256 B rows per 64 A rows: 1.67x; measured L2-bound, 1.857 s against 1.737 s
// for the 10^6 top-32). A stage is free once the consumer warps of both blocks have read it.
//
// The ring's stages follow the producer's order (this block's tiles in turn, num_k stages each);
// a warpgroup steps its ring position over the other's tile. Every mbarrier wait must be at most
// one phase ahead of its barrier: the ordered hand-over guarantees it, since a warpgroup starts
// its main loop only after the other's has consumed every earlier stage.
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/gemm/detail/problem.hpp>
#include <spillway/gemm/detail/wgmma_kernel.cuh>
#include <spillway/tile/arch.cuh>
#include <spillway/tile/barrier.cuh>
#include <spillway/tile/tensor_map.hpp>
#include <spillway/tile/wgmma.cuh>
#include <spillway/tile/wgmma_mainloop.cuh>

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace spillway::gemm::detail {

template <class T>
struct wgmma_sink_config {
  static constexpr int bm = 64;  // a tile: 64 rows of A x 256 rows of B, one warpgroup's
  static constexpr int bn = 256;
  static constexpr int stages = 4;
  static constexpr int threads = 384;  // warpgroup 0: producer; 1 and 2: consumers, tiles in turn
  static constexpr int row_bytes = 128;
  static constexpr int bk = row_bytes / static_cast<int>(sizeof(T));
  static constexpr int a_bytes = bm * row_bytes;
  static constexpr int b_bytes = bn * row_bytes;
  static constexpr int stage_bytes = a_bytes + b_bytes;
  static constexpr int cluster = 2;   // blocks per pair: rows [64 r, 64 r + 64) of a 128 x 256 pair tile
  static constexpr int group_m = 16;  // bands of 16 pair-tile rows (2048 rows), as the cooperative kernel
  // The sink's 16 private 8-byte slots per thread (slot q at + 1024 q), per consumer warpgroup.
  static constexpr int slot_bytes = 16 * 128 * 8;
  static constexpr int smem_bytes = stages * stage_bytes + 1024 + 2 * slot_bytes +
                                    tile::wgmma_ring<stages, stage_bytes, cluster>::barrier_bytes;
  static_assert(smem_bytes <= 232448, "within the 227 KiB a block may opt into on sm_90");
};

/// T: the rows' storage type (the tensor maps' element; std::uint32_t words for bits); Op: the
/// input type of tile::wgmma_ss (T itself, or tile::b1_and_popc: popc(a AND b) into int32).
template <class T, class Sink, class Op = T>
__global__ void __launch_bounds__(wgmma_sink_config<T>::threads, 1)
    wgmma_sink_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                      const problem<T, T, float, float, Sink> p, const wgmma_schedule sch) {
#ifdef SPILLWAY_TILE_HAS_WGMMA
  using Cfg = wgmma_sink_config<T>;
  extern __shared__ __align__(1024) unsigned char wgmma_sink_smem[];
  const std::uint32_t raw = tile::smem_addr(wgmma_sink_smem);
  const std::uint32_t base = (raw + 1023u) & ~1023u;
  const std::uint32_t slots = base + Cfg::stages * Cfg::stage_bytes;  // 1024-byte aligned
  using ring_t = tile::wgmma_ring<Cfg::stages, Cfg::stage_bytes, Cfg::cluster>;
  const ring_t ring{base, slots + 2 * Cfg::slot_bytes};
  const std::uint32_t rank = tile::cluster_ctarank();
  const std::int64_t pair = blockIdx.x / Cfg::cluster, pairs = gridDim.x / Cfg::cluster;

  const int tid = static_cast<int>(threadIdx.x);
  const int wg = tid / 128;
  const std::int64_t num_k = (p.k + Cfg::bk - 1) / Cfg::bk;
  const auto step_over = [num_k](tile::ring_position<Cfg::stages>& pos) {
    for (std::int64_t i = 0; i < num_k; ++i) pos.advance();
  };

  if (tid == 0) {
    tile::prefetch_tensor_map(&map_a);
    tile::prefetch_tensor_map(&map_b);
    ring.init(4);  // one arrival per warp of the warpgroup that owns the stage's tile, in each block
    tile::fence_barrier_init();
  }
  tile::cluster_sync();  // the peer's barriers are initialized before any multicast or remote arrival

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    if (tid == 0) {
      tile::ring_position<Cfg::stages> pos;
      for (std::int64_t t = pair; t < sch.total; t += pairs) {
        const wgmma_schedule::tile tl = sch.locate(t);
        const int ya = static_cast<int>(tl.tm * 2 * Cfg::bm + rank * Cfg::bm);
        const int yb = static_cast<int>(tl.tn * Cfg::bn + rank * (Cfg::bn / 2));
        ring.produce(pos, num_k, [&](std::uint32_t dst, std::uint32_t full_bar, std::int64_t kb) {
          const int x = static_cast<int>(kb * Cfg::bk);
          tile::tma_load_3d(dst, &map_a, x, ya, 0, full_bar);
          tile::tma_load_3d_multicast(dst + Cfg::a_bytes + rank * (Cfg::b_bytes / 2), &map_b, x, yb, 0,
                                      full_bar, static_cast<std::uint16_t>(0x3));
        });
      }
    }
    __syncwarp();
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
    const int cw = wg - 1;  // owns this block's tiles cw, cw + 2, ... in the producer's order
    const int warp_in_wg = (tid / 32) % 4;
    const int lane = tid % 32;
    const std::int64_t stride = pairs;
    // Named barrier 1 + v: warpgroup v may start its next main loop (the other arrives after its own).
    const int my_turn = 1 + cw, their_turn = 2 - cw;
    tile::ring_position<Cfg::stages> pos;
    if (cw == 1) step_over(pos);
    tile::wgmma_acc_t<Op> d[128];
    for (std::int64_t t = pair + cw * stride; t < sch.total; t += 2 * stride) {
      const wgmma_schedule::tile tl = sch.locate(t);
      if (t >= 2 * stride || cw == 1) tile::named_barrier_sync(my_turn, 256);
      ring.template consume<Op, 256, Cfg::row_bytes, Cfg::a_bytes>(pos, num_k, 0, lane, d);
      if (t + stride < sch.total) tile::named_barrier_arrive(their_turn, 256);
      step_over(pos);  // the other warpgroup's tile
      const std::int64_t row0 = tl.tm * 2 * Cfg::bm + rank * Cfg::bm + warp_in_wg * 16 + lane / 4;
      const std::int64_t col0 = tl.tn * Cfg::bn + 2 * (lane % 4);
      p.epi.consume(d, row0, col0, p.m, p.n,
                    slots + static_cast<std::uint32_t>(cw * Cfg::slot_bytes + (tid % 128) * 8));
    }
  }
  tile::cluster_sync();  // no block leaves while its peer may still multicast into it or signal it
#else
  (void)map_a, (void)map_b, (void)p, (void)sch;
  __trap();  // never launched: launch_wgmma_sink refuses unless this build has sm_90a code for the device
#endif
}

/// Enqueues p (a fragment sink's product: batch 1, both operands K-major, 16-byte aligned bases and
/// pitches; m, n, k >= 1, k in elements of T: words for bits) on `s` (current device).
template <class T, class Sink, class Op = T>
void launch_wgmma_sink(const problem<T, T, float, float, Sink>& p, stream_view s) {
  using Cfg = wgmma_sink_config<T>;
  const int device = current_device();
  if ((tile::build_features(device) & tile::feature_wgmma) == 0) {
    throw logic_error("gemm wgmma: this build holds no sm_90a code for " + tile::describe_device(device));
  }
  wgmma_schedule sch;
  sch.tiles_m = (p.m + 2 * Cfg::bm - 1) / (2 * Cfg::bm);  // pair tiles
  sch.tiles_n = (p.n + Cfg::bn - 1) / Cfg::bn;
  sch.per_batch = sch.tiles_m * sch.tiles_n;
  sch.total = sch.per_batch;
  sch.group_m = Cfg::group_m;
  const CUtensorMap map_a = tile::make_matrix_tensor_map<T>(
      p.a, p.m, p.k, p.lda, Cfg::bm, Cfg::bk, tile::swizzle::b128, "gemm wgmma: A", 1, p.lda * p.m);
  const CUtensorMap map_b = tile::make_matrix_tensor_map<T>(
      p.b, p.n, p.k, p.ldb, Cfg::bn / 2, Cfg::bk, tile::swizzle::b128, "gemm wgmma: B", 1, p.ldb * p.n);
  tile::raise_smem_limit<wgmma_sink_kernel<T, Sink, Op>>(device, Cfg::smem_bytes);
  cudaLaunchConfig_t cfg;
  cudaLaunchAttribute attr;
  const int resident = tile::resident_cluster_config<wgmma_sink_kernel<T, Sink, Op>>(
      cfg, attr, Cfg::cluster, Cfg::threads, Cfg::smem_bytes, s, 1 << 20);
  cfg.gridDim = dim3(grid_blocks(sch.total, 1, resident) * Cfg::cluster, 1, 1);
  SPILLWAY_CUDA_TRY(cudaLaunchKernelEx(&cfg, &wgmma_sink_kernel<T, Sink, Op>, map_a, map_b, p, sch));
  SPILLWAY_CHECK_LAUNCH();
}

}  // namespace spillway::gemm::detail
