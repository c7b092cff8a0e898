// spillway/map/config.hpp — what every map header shares: the index type, the rank limit, and the
// host/device annotation that lets the host-only headers compile under a plain C++ compiler.
#pragma once

#include <spillway/core/launch.hpp>

#include <cstdint>

/// The former name of SPILLWAY_HD (core/launch.hpp); deprecated, kept for callers' functors.
#define SPILLWAY_MAP_HD SPILLWAY_HD

namespace spillway {

// index_t (extents, strides, element indices): core/launch.hpp.

/// The largest rank an ndview, a broadcast loop or a gufunc operand may have.
inline constexpr int max_rank = 8;

}  // namespace spillway
