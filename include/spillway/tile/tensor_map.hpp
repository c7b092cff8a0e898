// spillway/tile/tensor_map.hpp — tensor maps for the tensor copy engine (TMA, sm_90+), built on the
// host: the driver's cuTensorMapEncodeTiled reached through the runtime's entry-point query (the
// driver library is never linked, so binaries load on machines with no driver), and one builder for
// 1- to 3-D row-pitched arrays that checks every TMA restriction itself and names the offending
// value, instead of surfacing an opaque CUresult.
//
// Dimension 0 is the contiguous one. A box that reaches past the array's extent is filled with
// zeros on loads and clipped on stores, so kernels need no predication on edge tiles.
#pragma once

#include <spillway/core/error.hpp>

#include <cuda.h>  // CUtensorMap and its enums only: the driver library is never linked
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <type_traits>

namespace spillway::tile {

/// cuTensorMapEncodeTiled (the 12.0 ABI) from the driver, found once; null when the driver offers none.
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    const cudaError_t e =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || fn == nullptr) {
      (void)cudaGetLastError();  // a missing entry point is an answer, not a sticky error
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

/// The tensor-map element type of T (1-, 2-, 4- and 8-byte integers, FP8, half, bf16, float, double).
template <class T>
constexpr CUtensorMapDataType tensor_map_data_type() {
  if constexpr (std::is_same_v<T, __half>) {
    return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  } else if constexpr (std::is_same_v<T, float>) {
    return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  } else if constexpr (std::is_same_v<T, double>) {
    return CU_TENSOR_MAP_DATA_TYPE_FLOAT64;
  } else if constexpr ((std::is_integral_v<T> && sizeof(T) == 1) || std::is_same_v<T, __nv_fp8_e4m3> ||
                       std::is_same_v<T, __nv_fp8_e5m2>) {
    return CU_TENSOR_MAP_DATA_TYPE_UINT8;  // neither signedness nor an FP8 format matters to a copy
  } else if constexpr (std::is_integral_v<T> && sizeof(T) == 2) {
    return CU_TENSOR_MAP_DATA_TYPE_UINT16;
  } else if constexpr (std::is_integral_v<T> && sizeof(T) == 4) {
    return std::is_signed_v<T> ? CU_TENSOR_MAP_DATA_TYPE_INT32 : CU_TENSOR_MAP_DATA_TYPE_UINT32;
  } else {
    static_assert(std::is_integral_v<T> && sizeof(T) == 8, "no tensor-map element type for T");
    return std::is_signed_v<T> ? CU_TENSOR_MAP_DATA_TYPE_INT64 : CU_TENSOR_MAP_DATA_TYPE_UINT64;
  }
}

/// Shared-memory swizzle of a box; the span is the bytes of one swizzled row (the box's contiguous
/// extent may not exceed it).
enum class swizzle { none = 0, b32 = 32, b64 = 64, b128 = 128 };

/// A `rank`-D array (1 to 3) of `elem_bytes`-byte elements: extents `dims[0..rank)` (dimension 0
/// contiguous), byte pitches `pitch[0..rank-1)` of dimensions 1.., copied in boxes of `box[0..rank)`
/// elements. `what` prefixes every error message (e.g. "gemm wgmma: A").
struct tensor_map_spec {
  CUtensorMapDataType data_type = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  int elem_bytes = 1;
  const void* base = nullptr;
  int rank = 2;
  std::int64_t dims[3] = {1, 1, 1};
  std::int64_t pitch[2] = {0, 0};
  int box[3] = {1, 1, 1};
  swizzle swz = swizzle::b128;
  CUtensorMapL2promotion l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  const char* what = "tensor map";
};

/// Encodes `spec` (throws logic_error naming the value that TMA cannot encode, cuda_error when the
/// driver has no encoder or refuses anyway).
inline CUtensorMap make_tensor_map(const tensor_map_spec& spec) {
  const std::string who = std::string(spec.what) + ": ";
  auto bad = [&](const std::string& msg) { throw logic_error(who + msg); };
  if (spec.rank < 1 || spec.rank > 3)
    bad("rank " + std::to_string(spec.rank) + " (this builder takes 1 to 3)");
  if (spec.base == nullptr) bad("null base address");
  if (reinterpret_cast<std::uintptr_t>(spec.base) % 16 != 0) {
    bad("base address " + std::to_string(reinterpret_cast<std::uintptr_t>(spec.base)) +
        " is not 16-byte aligned");
  }
  for (int d = 0; d < spec.rank; ++d) {
    if (spec.dims[d] < 1 || spec.dims[d] > (std::int64_t{1} << 32)) {
      bad("extent " + std::to_string(spec.dims[d]) + " of dimension " + std::to_string(d) +
          " is outside [1, 2^32]");
    }
    if (spec.box[d] < 1 || spec.box[d] > 256) {
      bad("box extent " + std::to_string(spec.box[d]) + " of dimension " + std::to_string(d) +
          " is outside [1, 256]");
    }
  }
  for (int d = 0; d + 1 < spec.rank; ++d) {
    if (spec.pitch[d] % 16 != 0 || spec.pitch[d] <= 0 || spec.pitch[d] >= (std::int64_t{1} << 40)) {
      bad("pitch " + std::to_string(spec.pitch[d]) + " bytes of dimension " + std::to_string(d + 1) +
          " is not a positive multiple of 16 below 2^40");
    }
  }
  const std::int64_t box_row_bytes = std::int64_t{spec.box[0]} * spec.elem_bytes;
  if (box_row_bytes % 16 != 0) {
    bad("the box's contiguous extent, " + std::to_string(box_row_bytes) + " bytes, is not a multiple of 16");
  }
  if (spec.swz != swizzle::none && box_row_bytes > static_cast<int>(spec.swz)) {
    bad("the box's contiguous extent, " + std::to_string(box_row_bytes) + " bytes, exceeds the " +
        std::to_string(static_cast<int>(spec.swz)) + "-byte swizzle span");
  }
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) {
    throw cuda_error(cudaErrorNotSupported, who + "the driver offers no cuTensorMapEncodeTiled");
  }
  cuuint64_t dims[3] = {};
  cuuint64_t strides[2] = {};
  cuuint32_t box[3] = {};
  const cuuint32_t elem_strides[3] = {1u, 1u, 1u};
  for (int d = 0; d < spec.rank; ++d) {
    dims[d] = static_cast<cuuint64_t>(spec.dims[d]);
    box[d] = static_cast<cuuint32_t>(spec.box[d]);
  }
  for (int d = 0; d + 1 < spec.rank; ++d) strides[d] = static_cast<cuuint64_t>(spec.pitch[d]);
  const CUtensorMapSwizzle swz = spec.swz == swizzle::b32    ? CU_TENSOR_MAP_SWIZZLE_32B
                                 : spec.swz == swizzle::b64  ? CU_TENSOR_MAP_SWIZZLE_64B
                                 : spec.swz == swizzle::b128 ? CU_TENSOR_MAP_SWIZZLE_128B
                                                             : CU_TENSOR_MAP_SWIZZLE_NONE;
  CUtensorMap map{};
  const CUresult r =
      encode(&map, spec.data_type, static_cast<cuuint32_t>(spec.rank), const_cast<void*>(spec.base), dims,
             strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swz, spec.l2_promotion,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::string shape;
    for (int d = 0; d < spec.rank; ++d) shape += (d ? " x " : "") + std::to_string(spec.dims[d]);
    throw cuda_error(cudaErrorInvalidValue, who + "cuTensorMapEncodeTiled failed (CUresult " +
                                                std::to_string(static_cast<int>(r)) + ") for extents " +
                                                shape);
  }
  return map;
}

/// A row-pitched matrix of T: `rows` rows of `cols` elements, `row_pitch` elements apart, boxes of
/// box_cols x box_rows; with `batch_pitch` > 0 a 3-D map whose third dimension holds `batches`
/// matrices `batch_pitch` elements apart (box extent 1 there), else a 2-D map.
template <class T>
CUtensorMap make_matrix_tensor_map(const T* base, std::int64_t rows, std::int64_t cols,
                                   std::int64_t row_pitch, int box_rows, int box_cols, swizzle swz,
                                   const char* what, std::int64_t batches = 1, std::int64_t batch_pitch = 0) {
  tensor_map_spec spec;
  spec.data_type = tensor_map_data_type<T>();
  spec.elem_bytes = static_cast<int>(sizeof(T));
  spec.base = base;
  spec.rank = batch_pitch > 0 ? 3 : 2;
  spec.dims[0] = cols;
  spec.dims[1] = rows;
  spec.dims[2] = batches;
  spec.pitch[0] = row_pitch * static_cast<std::int64_t>(sizeof(T));
  spec.pitch[1] = batch_pitch * static_cast<std::int64_t>(sizeof(T));
  spec.box[0] = box_cols;
  spec.box[1] = box_rows;
  spec.box[2] = 1;
  spec.swz = swz;
  spec.what = what;
  return make_tensor_map(spec);
}

}  // namespace spillway::tile
