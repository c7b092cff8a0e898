// spillway/gram/epilogue.hpp — what each entry of the Gram matrix becomes: a count, a Jaccard or
// cosine similarity, or a Hamming distance. The same inline code runs on the host (reference and
// fallback) and on the device (kernel epilogues), so both produce bit-identical results. The output
// layouts are the pairwise layer's (spillway/pairwise/layout.hpp), named here as before.
#pragma once

#include <spillway/core/enum_name.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/launch.hpp>
#include <spillway/pairwise/layout.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>


namespace spillway::gram {

/// The value computed for rows a and b with c = |a ∧ b| common set bits.
enum class metric {
  counts,   ///< c (int32, or uint16 when cols ≤ 65,535)
  jaccard,  ///< c / |a ∨ b| = c / (|a| + |b| − c); 0/0 (both rows empty) → score_options::jaccard_empty
  cosine,   ///< c / sqrt(|a|·|b|); a zero row → score_options::cosine_zero
  hamming   ///< |a| + |b| − 2c, a distance (smaller is closer)
};

inline const char* to_string(metric m) noexcept {
  return ::spillway::detail::enum_name(m, {"counts", "jaccard", "cosine", "hamming"});
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

// ---- output layouts: the pairwise layer's, shared with float similarity --------------------------

using ::spillway::pairwise::condensed_row_offset;
using ::spillway::pairwise::layout_size;
using ::spillway::pairwise::packed_row_offset;
using ::spillway::pairwise::to_string;
using ::spillway::pairwise::triangle_layout;
using ::spillway::pairwise::triangle_to_square;

}  // namespace spillway::gram
