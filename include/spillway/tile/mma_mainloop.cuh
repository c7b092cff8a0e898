// spillway/tile/mma_mainloop.cuh — the K-major mma.sync mainloop (sm_80+) that the tensor-core
// GEMM instantiates for half, bf16, TF32 and int8: both operands are rows of k bytes, every MMA
// step eats 32 bytes of k with the same fragment layout (tile/mma.cuh), so only the MMA
// instruction depends on the element type (mma_traits<T>). (A 1-bit traits entry that nothing
// instantiated was removed; the Gram kernels call mma_m16n8k256_b1_and directly.)
//
// Per block: a ring of `stages` shared stages, each one k-tile of 128 bytes for the BM rows of A
// and the BN rows of B, 128-byte-swizzled (tile/swizzle.cuh), filled by 16-byte cp.async (.cg);
// warps of (BM / WarpsM) x (BN / WarpsN) accumulators read fragments with ldmatrix.x4, double
// buffered in registers across the four 32-byte k-steps of a tile; one __syncthreads per k-tile.
//
// Edges: every 16-byte chunk is one cp.async whose source size is the bytes of k it holds (16, the
// 1..15 where k ends inside it, or 0 past k and for rows past an operand's `rows`); the rest is
// zero-filled, so nothing after k is read (it may hold NaNs or lie past the allocation) and zero
// operands add exact zeros: no result depends on padding.
#pragma once

#include <spillway/tile/arch.cuh>
#include <spillway/tile/cp_async.cuh>
#include <spillway/tile/mma.cuh>
#include <spillway/tile/swizzle.cuh>

#include <cstdint>

namespace spillway::tile {

/// A block tile of BM x BN accumulators over k-tiles of 128 bytes, computed by WarpsM x WarpsN
/// warps. BM and BN are multiples of 32 * WarpsM / ... (see the static_asserts).
template <int BM, int BN, int WarpsM, int WarpsN>
struct kmajor_mma_shape {
  static constexpr int bm = BM, bn = BN;
  static constexpr int warps_m = WarpsM, warps_n = WarpsN;
  static constexpr int threads = 32 * WarpsM * WarpsN;
  static constexpr int row_bytes = swizzle128_row_bytes;  ///< k bytes per tile
  static constexpr int wm = BM / WarpsM, wn = BN / WarpsN;
  static constexpr int mt = wm / 16;  ///< m16 fragments per warp
  static constexpr int nt = wn / 8;   ///< n8 fragments per warp
  static constexpr int ksteps = row_bytes / mma_k_bytes;
  static constexpr int rows_per_pass = threads / 8;  ///< rows one pass of 16-byte loads covers
  static constexpr int a_passes = BM / rows_per_pass, b_passes = BN / rows_per_pass;
  static constexpr int a_bytes = BM * row_bytes;
  static constexpr int stage_bytes = (BM + BN) * row_bytes;
  static_assert(wm % 16 == 0 && wn % 16 == 0, "warp tiles are multiples of 16 x 16");
  static_assert(BM % rows_per_pass == 0 && BN % rows_per_pass == 0, "whole load passes");
  static_assert(rows_per_pass % 8 == 0, "a load pass keeps the swizzle phase (row % 8)");
  static_assert(a_passes <= 32 && b_passes <= 32, "row masks are 32-bit");

  /// Row (within the block) of accumulator element acc[mi][ni][2 h + e] of warp `warp`, lane `lane`.
  __host__ __device__ static constexpr int acc_row(int warp, int lane, int mi, int h) {
    return (warp / WarpsN) * wm + mi * 16 + (lane >> 2) + h * 8;
  }
  /// Column (within the block) of accumulator element acc[mi][ni][2 h + e].
  __host__ __device__ static constexpr int acc_col(int warp, int lane, int ni, int e) {
    return (warp % WarpsN) * wn + ni * 8 + 2 * (lane & 3) + e;
  }
};

/// Where one operand's block rows come from: row r (< rows) starts at `base + r * ld_bytes`; rows
/// at or past `rows` (which may be <= 0) read as zeros.
struct kmajor_rows {
  const unsigned char* base = nullptr;
  std::int64_t ld_bytes = 0;
  std::int64_t rows = 0;
};

/// 16-byte cp.async (.cg, L2 128-byte prefetch) that reads only the first `src_bytes` (0..16) bytes
/// of `src` and zero-fills the rest of the destination chunk: one instruction covers a full chunk,
/// the chunk k ends inside (element-exact zero fill, nothing past k is read) and an absent row or
/// tile (0 bytes: `src` is never dereferenced).
__device__ __forceinline__ void cp_async16_zfill(std::uint32_t dst, const void* src, int src_bytes) {
#ifdef SPILLWAY_TILE_HAS_MMA
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
#else
  (void)dst, (void)src, (void)src_bytes;
  __trap();
#endif
}

/// Waits until at most `pending` (0, 1 or 2) cp.async groups are in flight (the stage count is a
/// run-time value: as many as the device's shared memory holds).
__device__ __forceinline__ void cp_async_wait_pending(int pending) {
  if (pending >= 2) {
    cp_async_wait<2>();
  } else if (pending == 1) {
    cp_async_wait<1>();
  } else {
    cp_async_wait<0>();
  }
}

template <class Acc, int MT, int NT>
__device__ __forceinline__ void mma_zero(Acc (&acc)[MT][NT][4]) {
#pragma unroll
  for (int mi = 0; mi < MT; ++mi)
#pragma unroll
    for (int ni = 0; ni < NT; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][ni][e] = Acc(0);
}

/// acc += A·Bᵀ over `k_bytes` bytes of k for the block tile (A: Shape::bm rows, B: Shape::bn
/// rows), with `stages` (2..4) ring stages of Shape::stage_bytes at `smem` (128-byte aligned).
/// Called by all Shape::threads threads of the block. On return every cp.async has landed and
/// every thread is past a barrier, so the caller may reuse `smem` (e.g. to stage an epilogue).
template <class Traits, class Shape>
__device__ __forceinline__ void mma_sync_kmajor_mainloop(unsigned char* smem, const kmajor_rows& a,
                                                         const kmajor_rows& b, std::int64_t k_bytes, int stages,
                                                         typename Traits::accumulator (&acc)[Shape::mt][Shape::nt][4]) {
#ifdef SPILLWAY_TILE_HAS_MMA
  using S = Shape;
  const std::uint32_t smem_base = smem_addr(smem);
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int warp_m = warp / S::warps_n;
  const int warp_n = warp % S::warps_n;

  // Loads: thread tid moves chunk tid % 8 of rows tid / 8 + pass * rows_per_pass; the swizzled
  // offset is the same for every pass but for the row step (rows_per_pass is a multiple of 8).
  const int ld_row = tid >> 3;
  const int ld_chunk = tid & 7;
  const std::uint32_t st_off = swizzle128(ld_row, ld_chunk);
  constexpr std::uint32_t pass_bytes = S::rows_per_pass * S::row_bytes;
  std::uint32_t a_ok = 0, b_ok = 0;  // bit i: the row of pass i exists
#pragma unroll
  for (int i = 0; i < S::a_passes; ++i) {
    a_ok |= static_cast<std::uint32_t>(static_cast<std::int64_t>(ld_row) + i * S::rows_per_pass < a.rows) << i;
  }
#pragma unroll
  for (int i = 0; i < S::b_passes; ++i) {
    b_ok |= static_cast<std::uint32_t>(static_cast<std::int64_t>(ld_row) + i * S::rows_per_pass < b.rows) << i;
  }
  const unsigned char* const a_src = a.base + ld_row * a.ld_bytes + ld_chunk * 16;
  const unsigned char* const b_src = b.base + ld_row * b.ld_bytes + ld_chunk * 16;
  const std::int64_t a_step = S::rows_per_pass * a.ld_bytes, b_step = S::rows_per_pass * b.ld_bytes;
  const std::int64_t ktiles = (k_bytes + S::row_bytes - 1) / S::row_bytes;
  const std::int64_t chunk_k_bytes = k_bytes - ld_chunk * 16;  // k bytes from this thread's chunk of tile 0 on

  // One code path for every tile, branch-free (so the compiler can interleave it with the MMAs):
  // each chunk copies min(16, bytes of k left) bytes, none past k, none for absent rows, none for
  // tiles past the end (the ring's last refills, which nothing reads).
  auto load_tile = [&](std::int64_t kt, int stage) {
    const std::uint32_t sa = smem_base + static_cast<std::uint32_t>(stage * S::stage_bytes) + st_off;
    const std::uint32_t sb = sa + S::a_bytes;
    const std::int64_t koff = kt * S::row_bytes;
    const std::int64_t left = chunk_k_bytes - koff;
    const int bytes = left >= 16 ? 16 : (left > 0 ? static_cast<int>(left) : 0);
    const unsigned char* src = a_src + koff;
#pragma unroll
    for (int i = 0; i < S::a_passes; ++i, src += a_step) {
      cp_async16_zfill(sa + i * pass_bytes, src, (a_ok >> i) & 1u ? bytes : 0);
    }
    src = b_src + koff;
#pragma unroll
    for (int i = 0; i < S::b_passes; ++i, src += b_step) {
      cp_async16_zfill(sb + i * pass_bytes, src, (b_ok >> i) & 1u ? bytes : 0);
    }
  };

  // Fragment reads (ldmatrix.x4). A: lanes address rows (lane % 8) + 8 ((lane / 8) % 2) at chunk
  // lane / 16 of the k-step, giving a[0..3] = (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4) in
  // words; B: rows (lane % 8) + 8 (lane / 16) at chunk (lane / 8) % 2, giving b[0..1] of two n8
  // fragments. Every fragment row is ≡ lane (mod 8), so the k-step's chunk pair (2 ks, 2 ks + 1)
  // enters as an XOR with ks << 5, which flips only chunk bits.
  const std::uint32_t a_frag_off = swizzle128(warp_m * S::wm + (lane & 7) + ((lane >> 3) & 1) * 8, lane >> 4);
  const std::uint32_t b_frag_off =
      S::a_bytes + swizzle128(warp_n * S::wn + (lane & 7) + (lane >> 4) * 8, (lane >> 3) & 1);
  std::uint32_t af[2][S::mt][4];
  std::uint32_t bf[2][S::nt][2];
  auto load_frags = [&](int buf, int stage, int ks) {
    const std::uint32_t base = smem_base + static_cast<std::uint32_t>(stage * S::stage_bytes);
    const std::uint32_t ka = base + (a_frag_off ^ static_cast<std::uint32_t>(ks << 5));
    const std::uint32_t kb = base + (b_frag_off ^ static_cast<std::uint32_t>(ks << 5));
#pragma unroll
    for (int mi = 0; mi < S::mt; ++mi) ldmatrix_x4(af[buf][mi], ka + mi * 16 * S::row_bytes);
#pragma unroll
    for (int np = 0; np < S::nt / 2; ++np) {
      std::uint32_t r[4];
      ldmatrix_x4(r, kb + np * 16 * S::row_bytes);
      bf[buf][2 * np][0] = r[0];
      bf[buf][2 * np][1] = r[1];
      bf[buf][2 * np + 1][0] = r[2];
      bf[buf][2 * np + 1][1] = r[3];
    }
  };

  // Prologue: stages - 1 tiles in flight (past the end they copy nothing but keep the group count uniform).
  for (int st = 0; st < stages - 1; ++st) {
    load_tile(st, st);
    cp_async_commit();
  }
  cp_async_wait_pending(stages - 2);
  __syncthreads();

  int read_stage = 0;
  int write_stage = stages - 1;
  load_frags(0, 0, 0);
  for (std::int64_t kt = 0; kt < ktiles; ++kt) {
#pragma unroll
    for (int ks = 0; ks < S::ksteps; ++ks) {
      if (ks == S::ksteps - 1) {
        // Tile kt + 1 has landed, and every warp is done with tile kt - 1's stage (its last
        // fragments were read at ks - 1 of the previous tile), which the ks == 0 load refills.
        cp_async_wait_pending(stages - 2);
        __syncthreads();
        read_stage = read_stage + 1 == stages ? 0 : read_stage + 1;
      }
      load_frags((ks + 1) & 1, read_stage, (ks + 1) % S::ksteps);
      if (ks == 0) {
        load_tile(kt + stages - 1, write_stage);
        cp_async_commit();
        write_stage = write_stage + 1 == stages ? 0 : write_stage + 1;
      }
#pragma unroll
      for (int mi = 0; mi < S::mt; ++mi)
#pragma unroll
        for (int ni = 0; ni < S::nt; ++ni) Traits::mma(acc[mi][ni], af[ks & 1][mi], bf[ks & 1][ni]);
    }
  }
  cp_async_wait<0>();
  __syncthreads();
#else
  (void)smem, (void)a, (void)b, (void)k_bytes, (void)stages, (void)acc;
  __trap();
#endif
}

}  // namespace spillway::tile
