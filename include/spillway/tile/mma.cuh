// spillway/tile/mma.cuh — the warp-level tensor-core pieces (sm_80+): ldmatrix (x1/x2/x4 and
// .trans), the mma.sync shapes the GEMM and Gram kernels use, and per-type MMA traits.
//
// One observation keeps every kernel on this engine type-generic: for each K-major shape used
// here the MMA consumes 32 bytes of k per step and its fragments hold the same 32-bit words of
// the operand tiles, whatever the element:
//
//   shape                      element   k per step   32 bytes of k
//   m16n8k16 .f16/.bf16        16 bit    16           yes
//   m16n8k8  .tf32             32 bit     8           yes
//   m16n8k32 .s8               8 bit     32           yes
//   m16n8k256 .b1 (and.popc)   1 bit    256           yes
//
// In words of 4 bytes along k (g = lane / 4, t = lane % 4), A (16 rows x 8 words) is held as
// a[0] = (g, t), a[1] = (g + 8, t), a[2] = (g, t + 4), a[3] = (g + 8, t + 4), B (8 rows of n x 8
// words) as b[0] = (g, t), b[1] = (g, t + 4), and the accumulator as c[0..1] = (g, 2t..2t+1),
// c[2..3] = (g + 8, 2t..2t+1). That is exactly what ldmatrix (b16, non-transposed) delivers from a
// row-per-address tile, since it moves 32-bit words at (row lane/4, word lane%4) of each 8 x 16-byte
// matrix regardless of what the bits mean. So a mainloop moves bytes with ldmatrix and only the
// MMA instruction (mma_traits<T>::mma) depends on the type.
//
// The bodies exist in every compilation pass; where SPILLWAY_TILE_HAS_MMA is not defined they trap
// (dispatchers never launch such kernels there, see tile::build_features).
#pragma once

#include <spillway/tile/arch.cuh>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace spillway::tile {

/// Bytes of k that one mma.sync of every shape in this header consumes (see the table above).
inline constexpr int mma_k_bytes = 32;

// ---- ldmatrix ------------------------------------------------------------------------------------
// Lane l supplies the shared address of row l % 8 of matrix l / 8 (x4: lanes 0..31, x2: 0..15,
// x1: 0..7; other lanes' addresses are ignored but must be valid shared addresses).

using regs4 = std::uint32_t[4];
using regs2 = std::uint32_t[2];
// Each shape in a plain and a transposed form (".trans": each 8 x 8 matrix of b16 is transposed;
// 16-bit elements only).
#define SPILLWAY_TILE_LDMATRIX(name, form, regs_t, outs, ...)                                       \
  __device__ __forceinline__ void name(regs_t r, std::uint32_t addr) {                              \
    SPILLWAY_TILE_MMA_BODY(asm volatile("ldmatrix.sync.aligned.m8n8" form ".shared.b16 " outs ";\n" \
                                        : __VA_ARGS__                                               \
                                        : "r"(addr));)                                              \
    (void)r, (void)addr;                                                                            \
  }
#define SPILLWAY_TILE_LDMATRIX_X4(name, form)                                                         \
  SPILLWAY_TILE_LDMATRIX(name, ".x4" form, regs4&, "{%0, %1, %2, %3}, [%4]", "=r"(r[0]), \
                         "=r"(r[1]), "=r"(r[2]), "=r"(r[3]))
#define SPILLWAY_TILE_LDMATRIX_X2(name, form) \
  SPILLWAY_TILE_LDMATRIX(name, ".x2" form, regs2&, "{%0, %1}, [%2]", "=r"(r[0]), "=r"(r[1]))
#define SPILLWAY_TILE_LDMATRIX_X1(name, form) \
  SPILLWAY_TILE_LDMATRIX(name, ".x1" form, std::uint32_t&, "{%0}, [%1]", "=r"(r))
SPILLWAY_TILE_LDMATRIX_X4(ldmatrix_x4, "")
SPILLWAY_TILE_LDMATRIX_X2(ldmatrix_x2, "")
SPILLWAY_TILE_LDMATRIX_X1(ldmatrix_x1, "")
SPILLWAY_TILE_LDMATRIX_X4(ldmatrix_x4_trans, ".trans")
SPILLWAY_TILE_LDMATRIX_X2(ldmatrix_x2_trans, ".trans")
SPILLWAY_TILE_LDMATRIX_X1(ldmatrix_x1_trans, ".trans")
#undef SPILLWAY_TILE_LDMATRIX_X1
#undef SPILLWAY_TILE_LDMATRIX_X2
#undef SPILLWAY_TILE_LDMATRIX_X4
#undef SPILLWAY_TILE_LDMATRIX

// ---- fragments -----------------------------------------------------------------------------------

/// A operand of one m16 x (32 bytes of k) step, B operand of one n8 x (32 bytes of k) step, and an
/// m16n8 accumulator of `Acc` (float or int32).
struct fragment_a {
  std::uint32_t r[4];
};
struct fragment_b {
  std::uint32_t r[2];
};
template <class Acc>
struct fragment_c {
  Acc v[4];
};

// ---- mma.sync ------------------------------------------------------------------------------------

// Every m16n8 mma.sync below takes the same fragments: four A registers, two B registers, four
// accumulators updated in place ("+f" for f32, "+r" for s32); only the instruction differs.
#define SPILLWAY_TILE_MMA_M16N8(instr, acc)                                                                 \
  SPILLWAY_TILE_MMA_BODY(asm volatile(instr                                                                 \
                                      " {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"  \
                                      : acc(d[0]), acc(d[1]), acc(d[2]), acc(d[3])                          \
                                      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));) \
  (void)d, (void)a, (void)b

/// d += a * b for m16n8k16, f16 inputs, f32 accumulation.
__device__ __forceinline__ void mma_m16n8k16_f16(float (&d)[4], const std::uint32_t (&a)[4],
                                                 const std::uint32_t (&b)[2]) {
  SPILLWAY_TILE_MMA_M16N8("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "+f");
}
/// d += a * b for m16n8k16, bf16 inputs, f32 accumulation.
__device__ __forceinline__ void mma_m16n8k16_bf16(float (&d)[4], const std::uint32_t (&a)[4],
                                                  const std::uint32_t (&b)[2]) {
  SPILLWAY_TILE_MMA_M16N8("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "+f");
}
/// d += a * b for m16n8k8, tf32 inputs (FP32 bit patterns; the tensor core uses their top 19
/// bits, i.e. truncates the mantissa to 10 bits), f32 accumulation.
__device__ __forceinline__ void mma_m16n8k8_tf32(float (&d)[4], const std::uint32_t (&a)[4],
                                                 const std::uint32_t (&b)[2]) {
  SPILLWAY_TILE_MMA_M16N8("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", "+f");
}
/// d += a * b for m16n8k32, s8 inputs, s32 accumulation (wrapping, no .satfinite: the same
/// arithmetic as a plain int32 sum of products).
__device__ __forceinline__ void mma_m16n8k32_s8(std::int32_t (&d)[4], const std::uint32_t (&a)[4],
                                                const std::uint32_t (&b)[2]) {
  SPILLWAY_TILE_MMA_M16N8("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32", "+r");
}
/// d += popc(a AND b) for m16n8k256, b1 inputs, s32 accumulation.
__device__ __forceinline__ void mma_m16n8k256_b1_and(std::int32_t (&d)[4], const std::uint32_t (&a)[4],
                                                     const std::uint32_t (&b)[2]) {
  SPILLWAY_TILE_MMA_M16N8("mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.and.popc", "+r");
}
#undef SPILLWAY_TILE_MMA_M16N8

// ---- traits --------------------------------------------------------------------------------------

/// What a K-major mainloop needs to know about an operand element: the accumulator type, the k
/// elements per 32-byte step, and the MMA for one m16n8 x 32-byte step (same fragment layout for
/// every type, see the header comment).
template <class T>
struct mma_traits;

#define SPILLWAY_TILE_MMA_TRAITS(T, Acc, k_step, instruction)                            \
  template <>                                                                            \
  struct mma_traits<T> {                                                                 \
    using accumulator = Acc;                                                             \
    static constexpr int k_per_step = k_step;                                            \
    __device__ __forceinline__ static void mma(Acc (&d)[4], const std::uint32_t (&a)[4], \
                                               const std::uint32_t (&b)[2]) {            \
      instruction(d, a, b);                                                              \
    }                                                                                    \
  };
SPILLWAY_TILE_MMA_TRAITS(__half, float, 16, mma_m16n8k16_f16)
SPILLWAY_TILE_MMA_TRAITS(__nv_bfloat16, float, 16, mma_m16n8k16_bf16)
SPILLWAY_TILE_MMA_TRAITS(float, float, 8,
                         mma_m16n8k8_tf32)  // float runs as TF32 (truncated; see mma_m16n8k8_tf32)
SPILLWAY_TILE_MMA_TRAITS(std::int8_t, std::int32_t, 32, mma_m16n8k32_s8)
#undef SPILLWAY_TILE_MMA_TRAITS

}  // namespace spillway::tile
