// spillway/pairwise/layout.hpp — how a symmetric n x n result of all pairs (A·Aᵀ of bit rows, the
// similarity of float rows) is laid out in a dense output: full, packed upper triangle, SciPy's
// condensed order. Host and device code alike (the index arithmetic runs in kernel epilogues).
#pragma once

#include <spillway/core/enum_name.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/launch.hpp>

#include <cstdint>
#include <string>
#include <vector>

/// The former name of SPILLWAY_HD (core/launch.hpp); deprecated.
#define SPILLWAY_PAIRWISE_HD SPILLWAY_HD

namespace spillway::pairwise {

/// How A·Aᵀ (n x n, symmetric) is laid out in a dense output.
enum class triangle_layout {
  full,          ///< n x n row-major (computed once per pair, mirrored)
  upper_packed,  ///< upper triangle with the diagonal, row-major: row i holds columns i..n-1; n(n+1)/2
  condensed      ///< SciPy's pdist order: upper triangle without the diagonal; n(n-1)/2
};

inline const char* to_string(triangle_layout l) noexcept {
  return ::spillway::detail::enum_name(l, {"full", "upper_packed", "condensed"});
}

/// Elements a layout holds for n rows.
inline std::int64_t layout_size(triangle_layout l, std::int64_t n) noexcept {
  switch (l) {
    case triangle_layout::full: return n * n;
    case triangle_layout::upper_packed: return n * (n + 1) / 2;
    case triangle_layout::condensed: return n > 0 ? n * (n - 1) / 2 : 0;
  }
  return 0;
}

/// Where row i starts in the packed upper triangle (with diagonal): (i, j ≥ i) is at
/// packed_row_offset(n, i) + (j − i).
SPILLWAY_HD inline std::int64_t packed_row_offset(std::int64_t n, std::int64_t i) noexcept {
  return i * n - i * (i - 1) / 2;
}
/// Where row i starts in the condensed layout: (i, j > i) is at condensed_row_offset(n, i) + (j − i − 1),
/// which is SciPy's n·i − i(i+1)/2 + (j − i − 1).
SPILLWAY_HD inline std::int64_t condensed_row_offset(std::int64_t n, std::int64_t i) noexcept {
  return i * (n - 1) - i * (i - 1) / 2;
}

/// The full symmetric n x n matrix (row-major) from a packed upper triangle or a condensed one
/// (SciPy's squareform): `src` holds layout_size(layout, n) elements; the diagonal of a condensed
/// triangle (which it does not store) is `diagonal` (e.g. the count of each row, 1 for Jaccard, 0
/// for Hamming). A `full` source is copied as it is.
template <class V>
std::vector<V> triangle_to_square(const V* src, std::int64_t n, triangle_layout layout, V diagonal = V{}) {
  if (n < 0) throw logic_error("triangle_to_square: n is " + std::to_string(n));
  if (layout_size(layout, n) > 0 && src == nullptr) throw logic_error("triangle_to_square: src is null");
  std::vector<V> out(static_cast<std::size_t>(n * n));
  if (layout == triangle_layout::full) {
    for (std::int64_t k = 0; k < n * n; ++k) out[static_cast<std::size_t>(k)] = src[k];
    return out;
  }
  const bool wd = layout == triangle_layout::upper_packed;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t base = wd ? packed_row_offset(n, i) - i : condensed_row_offset(n, i) - i - 1;
    out[static_cast<std::size_t>(i * n + i)] = wd ? src[base + i] : diagonal;
    for (std::int64_t j = i + 1; j < n; ++j) {
      const V v = src[base + j];
      out[static_cast<std::size_t>(i * n + j)] = v;
      out[static_cast<std::size_t>(j * n + i)] = v;
    }
  }
  return out;
}

}  // namespace spillway::pairwise
