// spillway/core/launch.hpp — what code that runs on both sides shares, for every module: the
// host/device annotation (a plain C++ compiler sees plain host functions, so the host-only
// headers and the host implementations compile without nvcc), the declaration of a kernel defined
// in a header, and the index type of extents, strides and element indices.
#pragma once

#include <cstdint>

/// Marks a function callable from host and device code under nvcc, plain host code under a C++
/// compiler: functors that the kernels and the host implementations (the tests' oracles) both
/// evaluate carry it (map and gufunc bodies, ODE right-hand sides and couplings, the Gram
/// epilogues, the pairwise layouts). SPILLWAY_MAP_HD, SPILLWAY_ODE_HD and SPILLWAY_PAIRWISE_HD
/// are the same macro under their former names (deprecated; kept for callers' functors).
#if defined(__CUDACC__)
#define SPILLWAY_HD __host__ __device__
#else
#define SPILLWAY_HD
#endif

/// Declares a kernel defined in a header: `SPILLWAY_KERNEL void name(...) { ... }`, launched as
/// `name<<<grid, block, smem, stream>>>(...)`. A template with a defaulted parameter, so that every
/// translation unit that includes the header may define it without a duplicate symbol or an
/// unused-function warning (a `static __global__` warns #177 where a unit does not launch it),
/// and hidden, so that a shared library built with spillway exports none of its kernels.
#define SPILLWAY_KERNEL template <int SpillwayKernel_ = 0> __global__ __attribute__((visibility("hidden")))

namespace spillway {

/// Extents, strides and element indices of N-d views and matrices. Signed 64-bit: arrays pass
/// 2^31 elements and strides may be negative (reversed views).
using index_t = std::int64_t;

/// The most blocks of a 1-D grid (gridDim.x).
inline constexpr index_t max_grid_blocks = 0x7fffffff;

/// The default cap, for grid-stride kernels that take no device fact (the pairwise sink and
/// conversion kernels): more blocks than any device holds at once, few enough to launch anywhere.
inline constexpr index_t stride_grid_cap = 65535 * 16;

/// Blocks of a 1-D launch over `items` work items, `per_block` to a block: the blocks the items
/// need, at least one, at most `cap`. Every launcher sizes its grid here. A kernel that loops over
/// what its grid does not cover (grid-stride or persistent) takes the default cap, a few waves
/// (`k * multiprocessor_count`) or the blocks resident at once (`resident_blocks`, in
/// core/device.hpp); one that does not loop passes max_grid_blocks and checks the need itself.
constexpr unsigned grid_blocks(index_t items, index_t per_block, index_t cap = stride_grid_cap) noexcept {
  const index_t need = per_block > 0 ? (items + per_block - 1) / per_block : items;
  const index_t top = cap < max_grid_blocks ? cap : max_grid_blocks;
  return static_cast<unsigned>(need < 1 ? 1 : (need < top ? need : (top < 1 ? 1 : top)));
}

}  // namespace spillway
