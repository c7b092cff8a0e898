// spillway/gram/epilogue.hpp — what each entry of the Gram matrix becomes: a count, a Jaccard or
// cosine similarity, or a Hamming distance. The same inline code runs on the host (reference and
// fallback) and on the device (kernel epilogues), so both produce bit-identical results.
#pragma once

#include <spillway/core/error.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__CUDACC__)
#define SPILLWAY_HD __host__ __device__
#else
#define SPILLWAY_HD
#endif

namespace spillway::gram {

/// The value computed for rows a and b with c = |a ∧ b| common set bits.
enum class metric {
  counts,   ///< c (int32, or uint16 when cols ≤ 65,535)
  jaccard,  ///< c / |a ∨ b| = c / (|a| + |b| − c); 0/0 (both rows empty) → score_options::jaccard_empty
  cosine,   ///< c / sqrt(|a|·|b|); a zero row → score_options::cosine_zero
  hamming   ///< |a| + |b| − 2c, a distance (smaller is closer)
};

inline const char* to_string(metric m) noexcept {
  switch (m) {
    case metric::counts: return "counts";
    case metric::jaccard: return "jaccard";
    case metric::cosine: return "cosine";
    case metric::hamming: return "hamming";
  }
  return "?";
}

/// True for metrics where a larger value means "more alike" (all but Hamming).
inline constexpr bool is_similarity(metric m) noexcept { return m != metric::hamming; }

/// Values for the cases a formula leaves undefined.
struct score_options {
  /// Jaccard of two all-zero rows (0/0). Default 1.0: two empty sets are identical (the
  /// convention of SciPy's jaccard distance, which is 0 for them).
  float jaccard_empty = 1.0f;
  /// Cosine when either row is all zero (0/0). Default 0.0: a zero vector is like nothing.
  float cosine_zero = 0.0f;
};

namespace detail {

/// Computes one entry from the count and the two rows' popcounts.
struct scorer {
  metric m = metric::counts;
  float jaccard_empty = 1.0f;
  float cosine_zero = 0.0f;

  template <class OutT>
  SPILLWAY_HD OutT operator()(std::int32_t c, std::int32_t na, std::int32_t nb) const {
    if constexpr (std::is_floating_point_v<OutT>) {
      if (m == metric::jaccard) {
        const std::int32_t u = na + nb - c;
        return u == 0 ? static_cast<OutT>(jaccard_empty)
                      : static_cast<OutT>(static_cast<double>(c) / static_cast<double>(u));
      }
      if (m == metric::cosine) {
        if (na == 0 || nb == 0) return static_cast<OutT>(cosine_zero);
        // Double precision, IEEE-rounded sqrt and division on both host and device.
        return static_cast<OutT>(static_cast<double>(c) /
                                 std::sqrt(static_cast<double>(na) * static_cast<double>(nb)));
      }
      if (m == metric::hamming) return static_cast<OutT>(na + nb - 2 * c);
      return static_cast<OutT>(c);
    } else {
      if (m == metric::hamming) return static_cast<OutT>(na + nb - 2 * c);
      return static_cast<OutT>(c);
    }
  }
};

/// Checks that OutT can hold `m` for `cols` columns: integers (int32, uint16 when cols ≤ 65,535)
/// for counts and Hamming, float/double for Jaccard and cosine.
template <class OutT>
inline void check_output_type(metric m, std::int64_t cols, const char* who) {
  constexpr bool is_f = std::is_same_v<OutT, float> || std::is_same_v<OutT, double>;
  constexpr bool is_i32 = std::is_same_v<OutT, std::int32_t>;
  constexpr bool is_u16 = std::is_same_v<OutT, std::uint16_t>;
  static_assert(is_f || is_i32 || is_u16, "gram output type must be int32, uint16, float or double");
  if (m == metric::jaccard || m == metric::cosine) {
    if (!is_f) throw logic_error(std::string(who) + ": metric " + to_string(m) + " needs a float or double output");
  } else {
    if (is_f) throw logic_error(std::string(who) + ": metric " + to_string(m) + " needs an int32 or uint16 output");
    if (is_u16 && cols > 65535) {
      throw logic_error(std::string(who) + ": uint16 output holds counts only up to 65,535 columns; cols is " +
                        std::to_string(cols));
    }
  }
  if (cols > 0x7FFFFFFFLL) {
    throw logic_error(std::string(who) + ": cols is " + std::to_string(cols) + "; counts are int32, so cols must be < 2^31");
  }
}

}  // namespace detail

// ---- output layouts -------------------------------------------------------------------------

/// How A·Aᵀ (n x n, symmetric) is laid out in a dense host output.
enum class triangle_layout {
  full,          ///< n x n row-major (computed once per pair, mirrored)
  upper_packed,  ///< upper triangle with the diagonal, row-major: row i holds columns i..n-1; n(n+1)/2
  condensed      ///< SciPy's pdist order: upper triangle without the diagonal; n(n-1)/2
};

inline const char* to_string(triangle_layout l) noexcept {
  switch (l) {
    case triangle_layout::full: return "full";
    case triangle_layout::upper_packed: return "upper_packed";
    case triangle_layout::condensed: return "condensed";
  }
  return "?";
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
  if (n > 0 && src == nullptr) throw logic_error("triangle_to_square: src is null");
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

}  // namespace spillway::gram
