// spillway/tile/wgmma_mainloop.cuh — the collective mainloop of the warp-specialized wgmma kernels
// (sm_90a): a ring of shared-memory stages that one producer thread fills through the tensor copy
// engine and two consumer warpgroups drain with wgmma, guarded by a full and an empty mbarrier per
// stage. The Gram kernel (gram/detail/wgmma_kernel.cuh: BGMMA, 2-block clusters sharing B by
// multicast, claimed tiles) and the GEMM kernel (gemm/detail/wgmma_kernel.cuh: half, bf16, TF32,
// int8, a band order, batches) are two instantiations of it; each keeps its own tile source, its
// own loads (which maps, which coordinates, multicast or not) and its own epilogue.
//
// A stage is `StageBytes` = A's `bm` rows then B's `bn` rows of one k-slice, every row
// `RowBytes` (128: one row of the 128-byte swizzle, so the copy engine and the tensor cores agree
// on the layout). Consumer warpgroup `cw` owns rows [64 cw, 64 cw + 64) of the block tile and
// issues, per stage, RowBytes / 32 m64nNk(32 bytes) instructions back to back; it keeps one group
// in flight (wait_group 1) and hands the previous stage back once the group that read it is done.
// In a cluster of `Cluster` blocks whose producers multicast into each other, a stage is free once
// the consumer warps of every block have read it: each consumer warp arrives on every block's
// empty barrier.
//
// Its cost against the two inlined loops it replaced: docs/gram_kernels.md, "wgmma mainloop".
#pragma once

#include <spillway/tile/arch.cuh>
#include <spillway/tile/barrier.cuh>
#include <spillway/tile/wgmma.cuh>

#include <cstdint>

namespace spillway::tile {

/// A position in a ring of S stages: the stage and the parity of its mbarriers' current phase.
template <int S>
struct ring_position {
  int stage = 0;
  std::uint32_t phase = 0;
  __device__ __forceinline__ void advance() {
    if (++stage == S) {
      stage = 0;
      phase ^= 1u;
    }
  }
};

/// The ring of one block: S stages of StageBytes from `base` (1024-byte aligned), then the S full
/// and S empty mbarriers from `bars`. `Cluster` blocks share each stage's hand-back.
template <int S, int StageBytes, int Cluster = 1>
struct wgmma_ring {
  /// Shared-memory bytes of the barriers (after the stages and whatever the kernel puts between).
  static constexpr int barrier_bytes = 2 * S * 8;

  std::uint32_t base;  ///< shared address of stage 0
  std::uint32_t bars;  ///< shared address of full barrier 0

  __device__ __forceinline__ std::uint32_t stage(int st) const {
    return base + static_cast<std::uint32_t>(st * StageBytes);
  }
  __device__ __forceinline__ std::uint32_t full_bar(int st) const { return bars + static_cast<std::uint32_t>(st) * 8u; }
  __device__ __forceinline__ std::uint32_t empty_bar(int st) const {
    return bars + static_cast<std::uint32_t>(S + st) * 8u;
  }

  /// One thread per block, before any use (then fence_barrier_init() and a block or cluster
  /// barrier): the producer's arrival completes a full barrier, `consumer_warps` warps of every
  /// block of the cluster an empty one.
  __device__ __forceinline__ void init(int consumer_warps) const {
    for (int st = 0; st < S; ++st) {
      mbar_init(full_bar(st), 1);
      mbar_init(empty_bar(st), static_cast<std::uint32_t>(consumer_warps * Cluster));
    }
  }

  /// The producer thread: fills `num_k` stages in turn, each once the consumers have handed it
  /// back. `load(dst, full_bar, kb)` issues the tensor copies of k-slice kb into the stage at
  /// `dst`, completing StageBytes of transactions on `full_bar` (boxes partly outside a tensor map
  /// still deliver whole, zero-filled boxes).
  template <class Load>
  __device__ __forceinline__ void produce(ring_position<S>& pos, std::int64_t num_k, Load&& load) const {
    for (std::int64_t kb = 0; kb < num_k; ++kb) {
      mbar_wait_suspend(empty_bar(pos.stage), pos.phase ^ 1u);
      mbar_arrive_expect_tx(full_bar(pos.stage), StageBytes);
      load(stage(pos.stage), full_bar(pos.stage), kb);
      pos.advance();
    }
  }

  /// A consumer warp hands stage `st` back to the producer of every block of the cluster.
  __device__ __forceinline__ void release(int st, int lane) const {
    __syncwarp();
    if (lane == 0) {
      if constexpr (Cluster == 1) {
        mbar_arrive(empty_bar(st));
      } else {
        for (int c = 0; c < Cluster; ++c) mbar_arrive_cluster(empty_bar(st), static_cast<std::uint32_t>(c));
      }
    }
  }

  /// A consumer warpgroup's k-loop over one tile: d = A(rows [64 cw, 64 cw + 64) of the block
  /// tile) · B(N rows)ᵀ over `num_k` stages, with the input type `Op` of tile::wgmma_ss (the first
  /// instruction overwrites d: no zeroing pass). A's rows start at the stage, B's `ABytes` in. On
  /// return every stage it read is handed back and d may be read.
  template <class Op, int N, int RowBytes, int ABytes, class Acc>
  __device__ __forceinline__ void consume(ring_position<S>& pos, std::int64_t num_k, int cw, int lane,
                                          Acc (&d)[N / 2]) const {
    constexpr int steps = RowBytes / 32;
    int prev = -1;
    for (std::int64_t kb = 0; kb < num_k; ++kb) {
      mbar_wait(full_bar(pos.stage), pos.phase);
      const std::uint32_t a_addr = stage(pos.stage) + static_cast<std::uint32_t>(cw * 64 * RowBytes);
      const std::uint32_t b_addr = stage(pos.stage) + static_cast<std::uint32_t>(ABytes);
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < steps; ++ks) {
        wgmma_ss<Op, N>(d, kmajor_desc<RowBytes>(a_addr + 32u * ks), kmajor_desc<RowBytes>(b_addr + 32u * ks),
                        kb > 0 || ks > 0);
      }
      wgmma_commit();
      wgmma_wait<1>();
      if (prev >= 0) release(prev, lane);
      prev = pos.stage;
      pos.advance();
    }
    wgmma_wait<0>();
    wgmma_fence_operands(d);
    if (prev >= 0) release(prev, lane);
  }

  /// consume() with the tensor cores' sums promoted to FP32 registers once per stage (FP8: each
  /// k-slice of RowBytes elements is summed from zero on the tensor cores, then added to d). The N
  /// columns go in four parts of N / 4 through two sets of N / 8 scratch accumulators used in turn,
  /// so one part's instructions are always in flight while the previous part is added (wait_group
  /// 1) and the registers hold 3N / 4 sums instead of 2N; a stage is handed back once its last
  /// part has been added. Part q's scratch t[i] is d[N / 8 · q + i]: the m64n(N/4) layout is the
  /// m64nN layout's q-th quarter of columns.
  ///
  /// Measured on the H200 (FP8 8192³ against cuBLASLt's promoted FP8, 8-10 alternated pairs): this
  /// form 0.88x with each part's descriptors built once and advanced by constants, 0.73-0.80x when
  /// every instruction built its own (the loop is issue-bound). Not kept: two halves through one
  /// scratch set, each waited for before the next was issued, 0.79x; the four parts drained at the
  /// end of every stage (no group carried into the next) 0.74x; a 128 x 128 tile with two
  /// double-buffered m64n128 scratch sets (64 + 2 x 64 registers) 0.80x in stage pairs and 0.65x
  /// with a group carried across the loop (those three before the descriptor change). ptxas cannot
  /// follow the group carried across the loop here either and injects one full wait per stage
  /// before its add (info C7517). A span of 256 (two stages per scratch sum, half the adds) ran
  /// 0.93x but its worst long-k error was 33x the 128-k loop's (1.2e-3): not kept. Eight parts of
  /// N / 8 through three or four scratch sets, drained per stage (groups carried across the back
  /// edge make ptxas serialize every wgmma, info C7514; four sets spill): 0.63-0.65x. The gap to the
  /// fast form (0.96x) is open (docs/gemm.md, "FP8").
  template <class Op, int N, int RowBytes, int ABytes>
  __device__ __forceinline__ void consume_promoted(ring_position<S>& pos, std::int64_t num_k, int cw,
                                                   int lane, float (&d)[N / 2]) const {
    constexpr int steps = RowBytes / 32;
    constexpr int parts = 4;
    constexpr int width = N / parts;  // columns per part
    constexpr int regs = width / 2;   // scratch accumulators per part
    float t0[regs], t1[regs];
#pragma unroll
    for (int i = 0; i < N / 2; ++i) d[i] = 0.0f;
    const auto issue = [&](int st, int part, float(&t)[regs]) {
      const std::uint32_t a_addr = stage(st) + static_cast<std::uint32_t>(cw * 64 * RowBytes);
      const std::uint32_t b_addr = stage(st) + static_cast<std::uint32_t>(ABytes + part * width * RowBytes);
      // Each step's descriptors are the first ones + 2 (32 bytes in the 16-byte units of the start
      // address field, which cannot carry out of its 14 bits below the 228 KiB of shared memory):
      // one descriptor build per operand and part instead of one per instruction (the promoted
      // loop is issue-bound; docs/gemm.md, "FP8").
      const std::uint64_t desc_a = kmajor_desc<RowBytes>(a_addr), desc_b = kmajor_desc<RowBytes>(b_addr);
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < steps; ++ks) {
        wgmma_ss<Op, width>(t, desc_a + 2u * ks, desc_b + 2u * ks, ks > 0);
      }
      wgmma_commit();
    };
    const auto add = [&](int part, float(&t)[regs]) {
      wgmma_fence_operands(t);
#pragma unroll
      for (int i = 0; i < regs; ++i) d[part * regs + i] += t[i];
    };
    if (num_k <= 0) return;
    mbar_wait(full_bar(pos.stage), pos.phase);
    issue(pos.stage, 0, t0);
    for (std::int64_t kb = 0; kb < num_k; ++kb) {
      // Parts 0..2: the next part of this stage goes in while the previous one is added.
      issue(pos.stage, 1, t1);
      wgmma_wait<1>();
      add(0, t0);
      issue(pos.stage, 2, t0);
      wgmma_wait<1>();
      add(1, t1);
      issue(pos.stage, 3, t1);
      wgmma_wait<1>();
      add(2, t0);
      // Part 3: the next stage's part 0 goes in first, where there is one.
      ring_position<S> next = pos;
      next.advance();
      if (kb + 1 < num_k) {
        mbar_wait(full_bar(next.stage), next.phase);
        issue(next.stage, 0, t0);
        wgmma_wait<1>();
      } else {
        wgmma_wait<0>();
      }
      add(3, t1);
      release(pos.stage, lane);
      pos = next;
    }
  }
};

}  // namespace spillway::tile
