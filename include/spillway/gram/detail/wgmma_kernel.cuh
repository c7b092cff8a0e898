// spillway/gram/detail/wgmma_kernel.cuh — the Hopper path's shared pieces (the kernel is
// wgmma_v2_kernel.cuh): wgmma.mma_async.sync.aligned.m64n256k256.s32.b1.b1.and.popc (BGMMA) with
// both operands read from shared memory through matrix descriptors, tiles brought in by the tensor
// copy engine (cp.async.bulk.tensor + mbarrier), the tensor-map encoder, and the block-tile
// constants.
//
// Block tile 128 (rows of A) x 256 (rows of B). A k-slice is 1024 bits = 128 bytes of each row,
// which is exactly one row of the 128-byte swizzle pattern: the tensor map's box is 32 words x
// rows with CU_TENSOR_MAP_SWIZZLE_128B, and the wgmma descriptors use the same swizzle, so the
// copy engine writes and the tensor cores read without bank conflicts. Each 1024-bit slice feeds
// four k256 MMAs; moving to the next one advances the descriptors' start address by 32 bytes
// inside the swizzle atom. 4 stages x 48 KiB.
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/gram/detail/kernel_schedule.cuh>

#include <cuda.h>  // CUtensorMap and its enums only: the driver library is never linked
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace spillway::gram::detail {

inline constexpr int wg_bm = 128;
inline constexpr int wg_bn = 256;
inline constexpr int wg_stages = 4;
inline constexpr int wg_threads = 384;  // warpgroup 0: producer; 1 and 2: consumers (64 rows each)
inline constexpr int wg_a_bytes = wg_bm * 128;
inline constexpr int wg_b_bytes = wg_bn * 128;
inline constexpr int wg_stage_bytes = wg_a_bytes + wg_b_bytes;
// Epilogue staging: 16 rows x 32 columns per consumer warp, row pitch 40 words (8-byte writes of
// the accumulator layout and 4-byte row reads are both free of bank conflicts).
inline constexpr int wg_stage_pitch = 40;
inline constexpr int wg_staging_bytes = 8 * 16 * wg_stage_pitch * 4;
// + 1 KiB to align the stages to the 1024-byte swizzle atom, + the staging tiles, + the mbarriers.
inline constexpr int wg_smem_bytes = wg_stages * wg_stage_bytes + 1024 + wg_staging_bytes + 2 * wg_stages * 8;

/// A 2-D tensor map over a bit panel: `rows` rows of `ld_words` words, box 32 words x `box_rows`
/// rows, 128-byte swizzle. Rows past the end read as zeros.
/// cuTensorMapEncodeTiled from the driver through the runtime's entry-point query (null when the
/// driver offers none).
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                           cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || fn == nullptr) {
      (void)cudaGetLastError();
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

inline CUtensorMap make_bit_tensor_map(const std::uint32_t* base, std::int64_t rows, std::int64_t ld_words,
                                       int box_rows) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) {
    throw cuda_error(cudaErrorNotSupported,
                     "gram: the driver offers no cuTensorMapEncodeTiled (needed by kernel_path::wgmma)");
  }
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(ld_words), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld_words) * 4u};
  const cuuint32_t box[2] = {32u, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem_strides[2] = {1u, 1u};
  const CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT32, 2, const_cast<std::uint32_t*>(base), dims,
                            strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    throw cuda_error(cudaErrorInvalidValue, "gram: cuTensorMapEncodeTiled failed (CUresult " +
                                                std::to_string(static_cast<int>(r)) + ") for a panel of " +
                                                std::to_string(rows) + " rows x " + std::to_string(ld_words) +
                                                " words");
  }
  return map;
}

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SPILLWAY_GRAM_HAS_WGMMA 1
#endif
// mbarrier transaction counts and the tensor copy engine: every target from sm_90 up (the
// wgmma path and the mma_sync v4 kernel share these helpers).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define SPILLWAY_GRAM_HAS_TMA 1
#endif

#ifdef SPILLWAY_GRAM_HAS_TMA
__device__ __forceinline__ void wg_mbar_init(std::uint32_t bar, std::uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void wg_mbar_expect_tx(std::uint32_t bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void wg_mbar_arrive(std::uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void wg_mbar_wait(std::uint32_t bar, std::uint32_t parity) {
  std::uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (done == 0);
}
__device__ __forceinline__ void wg_tma_load_2d(std::uint32_t dst, const CUtensorMap* map, int x, int y,
                                               std::uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(x), "r"(y), "r"(bar)
      : "memory");
}
#endif

#ifdef SPILLWAY_GRAM_HAS_WGMMA
// Shared-memory matrix descriptor: K-major, 128-byte swizzle, 8-row core groups 1024 bytes apart.
__device__ __forceinline__ std::uint64_t wg_desc(std::uint32_t smem_addr) {
  return static_cast<std::uint64_t>((smem_addr & 0x3FFFFu) >> 4) | (std::uint64_t{1} << 16) |
         (std::uint64_t{1024 >> 4} << 32) | (std::uint64_t{1} << 62);
}
__device__ __forceinline__ void wgmma_m64n256k256_b1(int (&d)[128], std::uint64_t desc_a, std::uint64_t desc_b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n256k256.s32.b1.b1.and.popc "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "%128, %129, 1;\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
        "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]),
        "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]),
        "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]),
        "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]),
        "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]),
        "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]),
        "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63]),
        "+r"(d[64]), "+r"(d[65]), "+r"(d[66]), "+r"(d[67]), "+r"(d[68]), "+r"(d[69]), "+r"(d[70]), "+r"(d[71]),
        "+r"(d[72]), "+r"(d[73]), "+r"(d[74]), "+r"(d[75]), "+r"(d[76]), "+r"(d[77]), "+r"(d[78]), "+r"(d[79]),
        "+r"(d[80]), "+r"(d[81]), "+r"(d[82]), "+r"(d[83]), "+r"(d[84]), "+r"(d[85]), "+r"(d[86]), "+r"(d[87]),
        "+r"(d[88]), "+r"(d[89]), "+r"(d[90]), "+r"(d[91]), "+r"(d[92]), "+r"(d[93]), "+r"(d[94]), "+r"(d[95]),
        "+r"(d[96]), "+r"(d[97]), "+r"(d[98]), "+r"(d[99]), "+r"(d[100]), "+r"(d[101]), "+r"(d[102]), "+r"(d[103]),
        "+r"(d[104]), "+r"(d[105]), "+r"(d[106]), "+r"(d[107]), "+r"(d[108]), "+r"(d[109]), "+r"(d[110]), "+r"(d[111]),
        "+r"(d[112]), "+r"(d[113]), "+r"(d[114]), "+r"(d[115]), "+r"(d[116]), "+r"(d[117]), "+r"(d[118]), "+r"(d[119]),
        "+r"(d[120]), "+r"(d[121]), "+r"(d[122]), "+r"(d[123]), "+r"(d[124]), "+r"(d[125]), "+r"(d[126]), "+r"(d[127])
      : "l"(desc_a), "l"(desc_b));
}
#endif

}  // namespace spillway::gram::detail
