// Test support: random 0/1 matrices as bytes (one per bit, row-major), and the edge rows a Gram
// test plants in them. Host-only.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace spillway::test {

/// rows x cols bytes, each 1 with probability p (std::bernoulli_distribution over mt19937_64(seed)).
inline std::vector<std::uint8_t> random_bit_bytes(std::int64_t rows, std::int64_t cols, double p, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::bernoulli_distribution b(p);
  std::vector<std::uint8_t> v(static_cast<std::size_t>(rows * cols));
  for (auto& x : v) x = b(g) ? 1 : 0;
  return v;
}

/// Row 1 all ones and row 2 all zeros (more than 3 rows); with `duplicate`, where there are more
/// than 4 rows, also row 4 a copy of row 3 (ties in every score of the two).
inline void plant_edge_rows(std::vector<std::uint8_t>& v, std::int64_t rows, std::int64_t cols, bool duplicate) {
  if (rows <= (duplicate ? 4 : 3)) return;
  for (std::int64_t c = 0; c < cols; ++c) {
    v[static_cast<std::size_t>(1 * cols + c)] = 1;
    v[static_cast<std::size_t>(2 * cols + c)] = 0;
    if (duplicate) v[static_cast<std::size_t>(4 * cols + c)] = v[static_cast<std::size_t>(3 * cols + c)];
  }
}

}  // namespace spillway::test
