// spillway/map/config.hpp — what every map header shares: the index type, the rank limit, and the
// host/device annotation that lets the host-only headers compile under a plain C++ compiler.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define SPILLWAY_MAP_HD __host__ __device__
#else
#define SPILLWAY_MAP_HD
#endif

namespace spillway {

/// Extents, strides and element indices of N-d views. Signed 64-bit: arrays pass 2^31 elements and
/// strides may be negative (reversed views).
using index_t = std::int64_t;

/// The largest rank an ndview, a broadcast loop or a gufunc operand may have.
inline constexpr int max_rank = 8;

}  // namespace spillway
