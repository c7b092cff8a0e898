// spillway/tile/wgmma.cuh — warpgroup MMA (wgmma.mma_async, sm_90a only) with both operands read
// from shared memory through matrix descriptors: the descriptor encoding for every swizzle mode,
// the fence / commit / wait protocol, and m64nNk* wrappers templated on the input type
// (half, bf16 -> f32 at k16; float as TF32 -> f32 at k8; int8 -> s32 and FP8 e4m3 / e5m2 -> f32 at
// k32; bits -> s32 as popc(a AND b) at k256) for N = 64, 128, 256.
//
// FP8: the tensor cores add the products into the f32 accumulators at reduced precision, so a long
// k drifts (all-positive e4m3 at k = 16384: 0.29 relative error, docs/gemm.md, "Accuracy"); callers
// that want FP32 accumulation promote partial sums into registers (gemm/detail/wgmma_kernel.cuh).
//
// Every wrapper consumes 32 bytes of K per row: with a K-major operand stored in rows of 128
// bytes under the 128-byte swizzle, one row of the swizzle pattern feeds four instructions, the
// descriptor's start address advancing 32 bytes each (the hardware applies the swizzle to the
// address it forms, so the advance stays inside the 1024-byte atom).
//
// TF32: the operands' FP32 bit patterns are read as they are; the tensor cores use the top 19 bits
// (sign, 8 exponent bits, 10 mantissa bits), i.e. each operand is truncated toward zero to TF32
// (relative error below 2^-10), not rounded.
//
// Accumulator layout of m64nN (per warpgroup, thread t = 32 w + lane): d[4 j + 0..1] hold row
// 16 w + lane / 4, columns 8 j + 2 (lane % 4) + 0..1; d[4 j + 2..3] the same columns of row
// 16 w + lane / 4 + 8 (j < N / 8).
//
// The functions exist in every compilation pass; off sm_90a their body traps (dispatchers never
// launch such kernels there: tile::build_features() & feature_wgmma).
#pragma once

#include <spillway/tile/arch.cuh>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

namespace spillway::tile {

/// The swizzle of a shared-memory operand as the descriptor encodes it (bits 62-63).
enum class smem_swizzle : std::uint32_t { none = 0, b128 = 1, b64 = 2, b32 = 3 };

/// A wgmma shared-memory matrix descriptor: start address, leading- and stride-dimension byte
/// offsets (multiples of 16), swizzle mode. Base offset 0: operand tiles start on a swizzle-atom
/// boundary (1024 bytes for 128B) plus the in-row K advance.
__host__ __device__ constexpr std::uint64_t make_smem_desc(std::uint32_t smem_addr, std::uint32_t lbo_bytes,
                                                           std::uint32_t sbo_bytes, smem_swizzle swz) {
  return static_cast<std::uint64_t>((smem_addr & 0x3FFFFu) >> 4) |
         (static_cast<std::uint64_t>((lbo_bytes & 0x3FFFFu) >> 4) << 16) |
         (static_cast<std::uint64_t>((sbo_bytes & 0x3FFFFu) >> 4) << 32) |
         (static_cast<std::uint64_t>(swz) << 62);
}

/// A K-major operand whose rows are `SwizzleBytes` (32, 64 or 128) bytes of K, stored as the tensor
/// copy engine writes a box with that swizzle: 8-row groups are 8 * SwizzleBytes apart (the
/// leading offset is unused for swizzled K-major layouts).
template <int SwizzleBytes>
__host__ __device__ constexpr std::uint64_t kmajor_desc(std::uint32_t smem_addr) {
  static_assert(SwizzleBytes == 32 || SwizzleBytes == 64 || SwizzleBytes == 128, "swizzle span");
  constexpr smem_swizzle swz =
      SwizzleBytes == 128 ? smem_swizzle::b128 : (SwizzleBytes == 64 ? smem_swizzle::b64 : smem_swizzle::b32);
  return make_smem_desc(smem_addr, 16, 8 * SwizzleBytes, swz);
}

/// Input-type tag of the 1-bit MMA: K-major rows of bits, D += popc(A AND B) (BGMMA).
struct b1_and_popc {};

/// The accumulator type of wgmma on T.
template <class T>
using wgmma_acc_t =
    std::conditional_t<std::is_same_v<T, std::int8_t> || std::is_same_v<T, b1_and_popc>, std::int32_t, float>;

/// K elements one wgmma instruction consumes (32 bytes of each row; 256 bits for b1).
template <class T>
inline constexpr int wgmma_k = std::is_same_v<T, b1_and_popc> ? 256 : 32 / static_cast<int>(sizeof(T));

/// Orders register writes to accumulators before the wgmma that reads them (before the first
/// wgmma of a batch).
__device__ __forceinline__ void wgmma_fence() {
#ifdef SPILLWAY_TILE_HAS_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

/// Closes the group of wgmma instructions issued since the last commit.
__device__ __forceinline__ void wgmma_commit() {
#ifdef SPILLWAY_TILE_HAS_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

/// Waits until at most `Pending` committed groups are in flight; the accumulators of the finished
/// ones may be read and their shared-memory operands overwritten.
template <int Pending>
__device__ __forceinline__ void wgmma_wait() {
#ifdef SPILLWAY_TILE_HAS_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(Pending) : "memory");
#else
  __trap();
#endif
}

/// Keeps the compiler from moving accumulator reads or writes across an in-flight wgmma.
template <class Acc, int R>
__device__ __forceinline__ void wgmma_fence_operands(Acc (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) {
    if constexpr (std::is_same_v<Acc, float>) {
      asm volatile("" : "+f"(d[i])::"memory");
    } else {
      asm volatile("" : "+r"(d[i])::"memory");
    }
  }
}

// Operand-list macros (generated): the accumulator registers as one brace list, the descriptors
// and the scale-d flag after them, and the "+f"/"+r" constraints of R accumulators.
// clang-format off
#define SPILLWAY_WG_REGS32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define SPILLWAY_WG_REGS64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define SPILLWAY_WG_REGS128 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
#define SPILLWAY_WG_F32(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define SPILLWAY_WG_R32(d) "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31])
#define SPILLWAY_WG_F64(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define SPILLWAY_WG_R64(d) "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]), "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]), "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]), "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])
#define SPILLWAY_WG_F128(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define SPILLWAY_WG_R128(d) "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]), "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]), "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]), "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63]), "+r"(d[64]), "+r"(d[65]), "+r"(d[66]), "+r"(d[67]), "+r"(d[68]), "+r"(d[69]), "+r"(d[70]), "+r"(d[71]), "+r"(d[72]), "+r"(d[73]), "+r"(d[74]), "+r"(d[75]), "+r"(d[76]), "+r"(d[77]), "+r"(d[78]), "+r"(d[79]), "+r"(d[80]), "+r"(d[81]), "+r"(d[82]), "+r"(d[83]), "+r"(d[84]), "+r"(d[85]), "+r"(d[86]), "+r"(d[87]), "+r"(d[88]), "+r"(d[89]), "+r"(d[90]), "+r"(d[91]), "+r"(d[92]), "+r"(d[93]), "+r"(d[94]), "+r"(d[95]), "+r"(d[96]), "+r"(d[97]), "+r"(d[98]), "+r"(d[99]), "+r"(d[100]), "+r"(d[101]), "+r"(d[102]), "+r"(d[103]), "+r"(d[104]), "+r"(d[105]), "+r"(d[106]), "+r"(d[107]), "+r"(d[108]), "+r"(d[109]), "+r"(d[110]), "+r"(d[111]), "+r"(d[112]), "+r"(d[113]), "+r"(d[114]), "+r"(d[115]), "+r"(d[116]), "+r"(d[117]), "+r"(d[118]), "+r"(d[119]), "+r"(d[120]), "+r"(d[121]), "+r"(d[122]), "+r"(d[123]), "+r"(d[124]), "+r"(d[125]), "+r"(d[126]), "+r"(d[127])
#define SPILLWAY_WG_DA32 "%32"
#define SPILLWAY_WG_DB32 "%33"
#define SPILLWAY_WG_SC32 "%34"
#define SPILLWAY_WG_DA64 "%64"
#define SPILLWAY_WG_DB64 "%65"
#define SPILLWAY_WG_SC64 "%66"
#define SPILLWAY_WG_DA128 "%128"
#define SPILLWAY_WG_DB128 "%129"
#define SPILLWAY_WG_SC128 "%130"
// clang-format on

#define SPILLWAY_WG_ISSUE(INSTR, TAIL, R, OPS, d, da, db, sc)                                               \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SPILLWAY_WG_SC##R ", 0;\n" INSTR " " SPILLWAY_WG_REGS##R \
               ", " SPILLWAY_WG_DA##R ", " SPILLWAY_WG_DB##R ", p" TAIL ";\n}\n"                            \
               : OPS##R(d)                                                                                  \
               : "l"(da), "l"(db), "r"(sc))

/// D (+)= A * B^T for one m64nNk(32 bytes) step: A is 64 x K at `desc_a`, B is N x K at `desc_b`,
/// both K-major; `accumulate` = false overwrites D (the first step of a tile, no zeroing needed).
template <class T, int N>
__device__ __forceinline__ void wgmma_ss(wgmma_acc_t<T> (&d)[N / 2], std::uint64_t desc_a,
                                         std::uint64_t desc_b, bool accumulate) {
  static_assert(N == 64 || N == 128 || N == 256, "wgmma_ss: N is 64, 128 or 256");
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, float> ||
                    std::is_same_v<T, std::int8_t> || std::is_same_v<T, __nv_fp8_e4m3> ||
                    std::is_same_v<T, __nv_fp8_e5m2> || std::is_same_v<T, b1_and_popc>,
                "wgmma_ss: half, bf16, float (TF32), int8, FP8 (e4m3, e5m2) or b1_and_popc");
#ifdef SPILLWAY_TILE_HAS_WGMMA
  const std::uint32_t sc = accumulate ? 1u : 0u;
  // One instruction at the three widths: "wgmma.mma_async.sync.aligned.m64n" N SHAPE, where the
  // accumulators of N / 2 registers are "+f" (OPS = SPILLWAY_WG_F) or "+r" (SPILLWAY_WG_R).
#define SPILLWAY_WG_ISSUE_N(SHAPE, TAIL, OPS)                                                                  \
  if constexpr (N == 256)                                                                                      \
    SPILLWAY_WG_ISSUE("wgmma.mma_async.sync.aligned.m64n256" SHAPE, TAIL, 128, OPS, d, desc_a, desc_b, sc);    \
  if constexpr (N == 128)                                                                                      \
    SPILLWAY_WG_ISSUE("wgmma.mma_async.sync.aligned.m64n128" SHAPE, TAIL, 64, OPS, d, desc_a, desc_b, sc);     \
  if constexpr (N == 64) SPILLWAY_WG_ISSUE("wgmma.mma_async.sync.aligned.m64n64" SHAPE, TAIL, 32, OPS, d, desc_a, desc_b, sc);
  if constexpr (std::is_same_v<T, __half>) {
    SPILLWAY_WG_ISSUE_N("k16.f32.f16.f16", ", 1, 1, 0, 0", SPILLWAY_WG_F)
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    SPILLWAY_WG_ISSUE_N("k16.f32.bf16.bf16", ", 1, 1, 0, 0", SPILLWAY_WG_F)
  } else if constexpr (std::is_same_v<T, float>) {
    SPILLWAY_WG_ISSUE_N("k8.f32.tf32.tf32", ", 1, 1", SPILLWAY_WG_F)
  } else if constexpr (std::is_same_v<T, __nv_fp8_e4m3>) {
    SPILLWAY_WG_ISSUE_N("k32.f32.e4m3.e4m3", ", 1, 1", SPILLWAY_WG_F)
  } else if constexpr (std::is_same_v<T, __nv_fp8_e5m2>) {
    SPILLWAY_WG_ISSUE_N("k32.f32.e5m2.e5m2", ", 1, 1", SPILLWAY_WG_F)
  } else if constexpr (std::is_same_v<T, b1_and_popc>) {
    SPILLWAY_WG_ISSUE_N("k256.s32.b1.b1.and.popc", "", SPILLWAY_WG_R)
  } else {
    SPILLWAY_WG_ISSUE_N("k32.s32.s8.s8", "", SPILLWAY_WG_R)
  }
#undef SPILLWAY_WG_ISSUE_N
#else
  (void)d, (void)desc_a, (void)desc_b, (void)accumulate;
  __trap();
#endif
}

#undef SPILLWAY_WG_ISSUE

}  // namespace spillway::tile
