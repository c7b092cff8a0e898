// spillway/gemm/detail/ooc_kernels.cuh — the out-of-core GEMM's kernels: the combine of a block's
// accumulator workspace into C, and the transpose of MN-major panels as they land.
#pragma once

#include <spillway/core/fault_hook.hpp>
#include <spillway/core/device.hpp>
#include <spillway/core/device_buffer.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/host_memory.hpp>
#include <spillway/core/host_registration.hpp>
#include <spillway/core/memory_budget.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/gemm/detail/validate.hpp>
#include <spillway/gemm/epilogue.hpp>
#include <spillway/gemm/gemm.cuh>
#include <spillway/gemm/matrix_view.hpp>
#include <spillway/gemm/ooc_options.hpp>
#include <spillway/gemm/ooc_plan.hpp>
#include <spillway/gemm/options.hpp>
#include <spillway/pipeline/host_workers.hpp>
#include <spillway/pipeline/host_operand.hpp>
#include <spillway/pipeline/job.hpp>
#include <spillway/pipeline/task_pipeline.hpp>

#include <cuda_runtime_api.h>


#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace spillway::gemm::detail {


/// C = W + β·C (converted to C's type): the last step of a block whose k chunks accumulated in an
/// accumulator-typed workspace because C is narrower (half/bf16 C of float sums, float C of int32).
template <class TC, class Acc>
__global__ void __launch_bounds__(256)
    ooc_combine_kernel(const Acc* __restrict__ w, TC* __restrict__ c, index_t count, Acc beta, bool read_c) {
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<index_t>(gridDim.x) * blockDim.x) {
    Acc v = w[i];
    if (read_c) v += beta * load_output<Acc>(c[i]);
    c[i] = convert_output<TC>(v);
  }
}

// ---- MN-major panels: transposed once as they land --------------------------------------------------

/// Threads of ooc_transpose_kernel; a block covers 8·V elements along a source line (128 bytes) and
/// 32·V source lines (V = 16 / element size).
inline constexpr int ooc_xpose_threads = 256;

/// ooc_transpose_kernel's tile for ES-byte elements: `len` elements along a source line, `lines`
/// source lines; tiles(len, lines) of them cover a panel (the launcher's grid, the kernel's loop).
template <int ES>
struct ooc_xpose_tile {
  static constexpr int V = 16 / ES;
  static constexpr index_t len = 8 * V, lines = 32 * V;
  SPILLWAY_HD static constexpr index_t tiles_along(index_t n) { return ceil_div(n, len); }
  SPILLWAY_HD static constexpr index_t tiles(index_t n, index_t l) { return tiles_along(n) * ceil_div(l, lines); }
};

/// One thread's V x V elements (V 16-byte vectors in, V out), transposed in registers. in[v] is
/// source line v; out row j holds element j of every line. Byte and half-word elements go through
/// PRMT (__byte_perm); 4- and 8-byte elements are only renamed.
template <int ES>
__device__ __forceinline__ uint4 ooc_xpose_row(const uint4 (&in)[16 / ES], int j) {
  constexpr int V = 16 / ES;
  auto word = [&](int v, int q) -> std::uint32_t {
    return q == 0 ? in[v].x : q == 1 ? in[v].y : q == 2 ? in[v].z : in[v].w;
  };
  std::uint32_t o[4];
  if constexpr (ES == 8) {
#pragma unroll
    for (int v = 0; v < V; ++v) {
      o[2 * v] = word(v, 2 * j);
      o[2 * v + 1] = word(v, 2 * j + 1);
    }
  } else if constexpr (ES == 4) {
#pragma unroll
    for (int v = 0; v < V; ++v) o[v] = word(v, j);
  } else if constexpr (ES == 2) {
    const unsigned sel = (j & 1) != 0 ? 0x7632u : 0x5410u;  // the high or the low half of each word
#pragma unroll
    for (int q = 0; q < 4; ++q) o[q] = __byte_perm(word(2 * q, j >> 1), word(2 * q + 1, j >> 1), sel);
  } else {
    static_assert(ES == 1, "element sizes 1, 2, 4 and 8");
    const unsigned b = static_cast<unsigned>(j & 3), sel = b | ((b + 4) << 4);  // byte b of x, then of y
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const std::uint32_t lo = __byte_perm(word(4 * q, j >> 2), word(4 * q + 1, j >> 2), sel);
      const std::uint32_t hi = __byte_perm(word(4 * q + 2, j >> 2), word(4 * q + 3, j >> 2), sel);
      o[q] = __byte_perm(lo, hi, 0x5410u);
    }
  }
  return make_uint4(o[0], o[1], o[2], o[3]);
}

/// dst (len rows of `lines` elements, K-major, pitch dld) = the transpose of src (`lines` lines of
/// `len` elements, pitch sld): dst[r·dld + x] = src[x·sld + r]. Elements are ES bytes; src, dst,
/// sld·ES and dld·ES are multiples of 16 bytes and sld ≥ round_up(len, V), dld ≥ round_up(lines, V)
/// (V = 16 / ES), so every access is a whole 16-byte vector. Each thread reads V vectors of V
/// consecutive lines (8 lanes along a line: 128 contiguous bytes per line and instruction),
/// transposes them in registers and writes V vectors, one per destination row (4 lanes along a row,
/// 8 warps of the block side by side along it: 512 contiguous bytes of each row per block). Columns
/// [lines, round_up(lines, V)) of dst are written as zeros; rows ≥ len are not written; source
/// elements of the vectors past `len` (inside the pitch) are read and dropped.
template <int ES>
__global__ void __launch_bounds__(ooc_xpose_threads)
    ooc_transpose_kernel(const std::byte* __restrict__ src, index_t sld, index_t lines, index_t len,
                         std::byte* __restrict__ dst, index_t dld) {
  using tile = ooc_xpose_tile<ES>;
  constexpr int V = tile::V;
  constexpr index_t tile_r = tile::len, tile_x = tile::lines;
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const index_t tiles_r = tile::tiles_along(len), tiles = tile::tiles(len, lines);
  for (index_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const index_t r0 = t % tiles_r * tile_r + (lane & 7) * V;
    const index_t x0 = t / tiles_r * tile_x + (warp * 4 + (lane >> 3)) * V;
    if (r0 >= len || x0 >= lines) continue;
    uint4 in[V];
#pragma unroll
    for (int v = 0; v < V; ++v) {
      in[v] = x0 + v < lines ? *reinterpret_cast<const uint4*>(src + ((x0 + v) * sld + r0) * ES)
                             : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int j = 0; j < V; ++j) {
      if (r0 + j < len)
        *reinterpret_cast<uint4*>(dst + ((r0 + j) * dld + x0) * ES) = ooc_xpose_row<ES>(in, j);
    }
  }
}

/// Enqueues ooc_transpose_kernel for elements of type T on s (see there for the preconditions).
template <class T>
void ooc_transpose(const T* src, index_t sld, index_t lines, index_t len, T* dst, index_t dld,
                   stream_view s) {
  constexpr int es = static_cast<int>(sizeof(T));
  static_assert(es == 1 || es == 2 || es == 4 || es == 8, "ooc_transpose: element sizes 1, 2, 4 and 8");
  if (lines <= 0 || len <= 0) return;
  const index_t tiles = ooc_xpose_tile<es>::tiles(len, lines);
  const unsigned grid = grid_blocks(tiles, 1, index_t{1} << 20);
  ooc_transpose_kernel<es><<<grid, ooc_xpose_threads, 0, s.value()>>>(
      reinterpret_cast<const std::byte*>(src), sld, lines, len, reinterpret_cast<std::byte*>(dst), dld);
}

}  // namespace spillway::gemm::detail
