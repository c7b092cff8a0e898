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

}  // namespace spillway
