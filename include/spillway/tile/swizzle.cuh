// spillway/tile/swizzle.cuh — the 128-byte XOR swizzle of shared-memory tiles whose rows are 128
// bytes (eight 16-byte chunks): chunk c of row r is stored at chunk c ^ (r % 8). Any 8 consecutive
// rows then put a given logical chunk in 8 distinct bank groups, so an ldmatrix that reads one
// chunk from each of 8 rows, and a warp of 16-byte cp.async stores that writes 4 whole rows, are
// both free of bank conflicts. (The same pattern as the tensor copy engine's 128-byte swizzle.)
#pragma once

#include <cstdint>

namespace spillway::tile {

inline constexpr int swizzle128_row_bytes = 128;

/// Byte offset of 16-byte chunk `chunk` (0..7) of row `row` in a 128-byte-swizzled tile.
__host__ __device__ constexpr std::uint32_t swizzle128(int row, int chunk) {
  return static_cast<std::uint32_t>(row * swizzle128_row_bytes + ((chunk ^ (row & 7)) << 4));
}

}  // namespace spillway::tile
