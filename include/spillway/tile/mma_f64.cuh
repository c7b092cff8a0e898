// spillway/tile/mma_f64.cuh — the double-precision warp MMA (DMMA, register-fed mma.sync f64) on a
// 16 x 8 x 16 warp tile, and the shared-memory fragment loads that feed it.
//
// One call computes D(16 x 8) += A(16 x 16) · B(16 x 8) for a warp, on every target with f64 tensor
// cores: sm_90+ issues one mma.sync.aligned.m16n8k16.row.col.f64 (the shape with the fewest
// instructions per flop; the m16n8k* f64 shapes exist from sm_90); sm_80..89 issue eight
// m8n8k4 (the only f64 shape there).
//
// Fragment registers (lane (g, t) with g = lane / 4, t = lane % 4; the PTX layout of m16n8k16 f64,
// slot s of the k dimension):
//   a[2v + h] = A(g + 8h, slot t + 4v)      v = 0..3, h = 0..1
//   b[v]      = B(slot t + 4v, g)
//   d[2h + j] = D(g + 8h, 2t + j)           j = 0..1
// DMMA.16x8x16 reads a[0..7], b[0..3] and d[0..3] each from consecutive registers, so a fragment
// costs no register moves only when a 16-byte shared load yields two neighbours of that order.
//
// K-slot relabelling. k is summed over, so any permutation of the 16 k-slots applied to A and B
// alike leaves the product unchanged. These helpers map slot t + 4v to physical k = 4t + v:
//   b[0..3] = B(4t .. 4t+3, g): 32 contiguous bytes of a K-major row, two 16-byte loads.
//   (a[2v], a[2v+1]) = (A(g, 4t+v), A(g+8, 4t+v)): one 16-byte load where rows g and g + 8 of a
//   16-row group are stored interleaved per k ("pair rows", see f64_pair_chunk).
// The eight m8n8k4 steps of the sm_80 path read a[2v + h] and b[v] (step v gives slot t the
// physical k = 4t + v), so both paths take the same fragments and layouts.
#pragma once

#include <spillway/tile/arch.cuh>

#include <cstdint>

namespace spillway::tile {

/// f64 elements of one lane's fragments for the 16 x 8 x 16 warp tile.
inline constexpr int f64_frag_a = 8;
inline constexpr int f64_frag_b = 4;
inline constexpr int f64_frag_d = 4;

// The functions exist in every compilation pass; on a target without f64 tensor cores their device
// bodies trap (dispatchers never launch the kernels there).

/// 16 bytes from shared memory (state-space address) into two doubles. Volatile so that it stays
/// between the barriers that order it with the cp.async writes of its stage (the mma asm, pure
/// register arithmetic, is not volatile and schedules freely).
__device__ __forceinline__ void lds_f64x2(double& x, double& y, std::uint32_t addr) {
#ifdef SPILLWAY_TILE_HAS_MMA
  asm volatile("ld.shared.v2.f64 {%0, %1}, [%2];\n" : "=d"(x), "=d"(y) : "r"(addr));
#else
  (void)addr;
  x = y = 0.0;
  __trap();
#endif
}

/// The 16-byte chunk where a pair row stores k-pair `c` (the two doubles (row g, k = c),
/// (row g + 8, k = c)), for pair row `p` (the row's g parity is p & 1). A pair row holds one k-tile
/// of a 16-row group's rows g and g + 8: 16 bytes per k, no padding. The XOR keeps the A fragment
/// loads conflict-free: one load instruction reads chunk 4t + v of pair rows g = 0, 1 in a
/// quarter-warp (t = 0..3), and chunks v, 4+v, 8+v, 12+v of one row and the same of the next row
/// land in 8 different 16-byte bank groups.
__host__ __device__ constexpr int f64_pair_chunk(int p, int c) { return c ^ (((c >> 3) & 1) << 1) ^ (p & 1); }

/// The A fragment of a 16 x 16 tile stored as pair rows: `addr[v]` is the shared address of k-pair
/// 4t + v of pair row g (f64_pair_chunk applied).
__device__ __forceinline__ void load_f64_frag_a(double (&a)[f64_frag_a], const std::uint32_t (&addr)[4]) {
#pragma unroll
  for (int v = 0; v < 4; ++v) lds_f64x2(a[2 * v], a[2 * v + 1], addr[v]);
}

/// The B fragment of a 16 x 8 tile stored K-major (row n holds B(·, n)). `row_g` is the shared
/// address of element (n = g, k = 4t); 16-byte aligned.
__device__ __forceinline__ void load_f64_frag_b(double (&b)[f64_frag_b], std::uint32_t row_g) {
  lds_f64x2(b[0], b[1], row_g);
  lds_f64x2(b[2], b[3], row_g + 16);
}

/// d += a · b on the 16 x 8 x 16 warp tile (fragments as in the header comment).
__device__ __forceinline__ void mma_f64_16x8x16(double (&d)[f64_frag_d], const double (&a)[f64_frag_a],
                                                const double (&b)[f64_frag_b]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, {%4, %5, %6, %7, %8, %9, %10, %11}, "
      "{%12, %13, %14, %15}, {%0, %1, %2, %3};\n"
      : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
      : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]), "d"(a[7]), "d"(b[0]),
        "d"(b[1]), "d"(b[2]), "d"(b[3]));
#elif defined(SPILLWAY_TILE_HAS_MMA)
  // m8n8k4: lane (g, t) holds A(g, slot t), B(slot t, g), D(g, 2t + j). Step v takes slot t + 4v
  // of the 16-deep tile; the two 8-row halves are separate instructions.
#pragma unroll
  for (int v = 0; v < 4; ++v) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};\n"
                   : "+d"(d[2 * h]), "+d"(d[2 * h + 1])
                   : "d"(a[2 * v + h]), "d"(b[v]));
    }
  }
#else
  (void)d, (void)a, (void)b;
  __trap();
#endif
}

}  // namespace spillway::tile
