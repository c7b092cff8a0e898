// spillway/similarity/host_similarity.hpp — all-pairs similarity of float, bf16 and half rows on
// the host: the same functions as <spillway/similarity/similarity.cuh> (inner product, cosine, Euclidean
// distance into the pairwise sinks) computed in double from the same input values, rounded to
// float once. The tests' oracle and the fallback on a machine with no GPU. Plain C++ (OpenMP when
// the build enables it).
#pragma once

#include <spillway/core/enum_name.hpp>
#include <spillway/core/error.hpp>
#include <spillway/gemm/matrix_view.hpp>
#include <spillway/pairwise/layout.hpp>
#include <spillway/pairwise/sinks.hpp>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <bitset>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace spillway::similarity {

// The row views are gemm's (the scores are GEMMs of rows): named here too, so that similarity code
// reads `similarity::row_major(data, n, d)`.
using ::spillway::gemm::layout;
using ::spillway::gemm::matrix_view;
using ::spillway::gemm::row_major;

/// What a pair of rows (a, b) becomes.
enum class similarity_metric {
  inner_product,  ///< a·b (a similarity: larger is closer)
  cosine,         ///< a·b / (|a|·|b|); a zero row → similarity_options::cosine_zero (default 0)
  euclidean       ///< |a − b| = sqrt(|a|² + |b|² − 2·a·b), clamped at 0 (a distance: smaller is closer)
};

inline const char* to_string(similarity_metric m) noexcept {
  return ::spillway::detail::enum_name(m, {"inner_product", "cosine", "euclidean"});
}

/// True for the metrics where larger means closer (all but Euclidean distance).
inline constexpr bool is_similarity(similarity_metric m) noexcept { return m != similarity_metric::euclidean; }

/// True for the row element types the similarity functions take.
template <class T>
inline constexpr bool is_similarity_input_v = std::is_same_v<std::remove_cv_t<T>, float> ||
                                              std::is_same_v<std::remove_cv_t<T>, __half> ||
                                              std::is_same_v<std::remove_cv_t<T>, __nv_bfloat16>;

namespace detail {

template <class T>
inline double to_double(T x) {
  if constexpr (std::is_same_v<std::remove_cv_t<T>, __half>) {
    return static_cast<double>(__half2float(x));
  } else if constexpr (std::is_same_v<std::remove_cv_t<T>, __nv_bfloat16>) {
    return static_cast<double>(__bfloat162float(x));
  } else {
    return static_cast<double>(x);
  }
}

/// The checks every similarity entry point makes on a row matrix: n x d row-major, ld ≥ d.
template <class T>
void check_rows(const matrix_view<const T>& a, const char* who, const char* name) {
  static_assert(is_similarity_input_v<T>, "similarity rows are float, __half or __nv_bfloat16");
  const std::string w = std::string(who) + ": " + name;
  if (a.order != layout::row_major) throw logic_error(w + " must be row-major (one row per vector), got " + a.describe());
  if (a.rows < 0 || a.cols < 0) throw logic_error(w + " has a negative extent: " + a.describe());
  if (a.ld < (a.cols > 1 ? a.cols : 1)) throw logic_error(w + ": ld " + std::to_string(a.ld) + " < cols " + std::to_string(a.cols));
  if (a.rows > 0 && a.cols > 0 && a.data == nullptr) throw logic_error(w + " is null with " + a.describe());
  if (a.rows > 0x7FFFFFFELL) {
    throw logic_error(w + " has " + std::to_string(a.rows) + " rows; column indices on the device are int32, so at most 2^31 - 2");
  }
}

template <class T>
void check_same_dims(const matrix_view<const T>& a, const matrix_view<const T>& b, const char* who) {
  if (a.cols != b.cols) {
    throw logic_error(std::string(who) + ": A has " + std::to_string(a.cols) + " columns but B has " +
                      std::to_string(b.cols) + "; A·Bᵀ needs rows of the same length");
  }
}

/// The checks of an A·Bᵀ entry point `who`: both row matrices, then their rows' length.
template <class T>
void check_pair(const matrix_view<const T>& a, const matrix_view<const T>& b, const char* who) {
  check_rows(a, who, "a");
  check_rows(b, who, "b");
  check_same_dims(a, b, who);
}

/// The first row (host memory) holding a NaN or an infinity, or -1.
template <class T>
std::int64_t first_nonfinite_row(const matrix_view<const T>& a) {
  std::int64_t first = std::numeric_limits<std::int64_t>::max();
#ifdef _OPENMP
#pragma omp parallel for schedule(static) reduction(min : first)
#endif
  for (std::int64_t i = 0; i < a.rows; ++i) {
    if (i >= first) continue;
    for (std::int64_t c = 0; c < a.cols; ++c) {
      if (!std::isfinite(to_double(a.data[i * a.ld + c]))) {
        first = i;
        break;
      }
    }
  }
  return first == std::numeric_limits<std::int64_t>::max() ? -1 : first;
}

inline void refuse_nonfinite(std::int64_t row, const char* who, const char* name) {
  if (row >= 0) {
    throw logic_error(std::string(who) + ": row " + std::to_string(row) + " of " + name +
                      " holds a NaN or an infinity; similarity scores of such rows are undefined (clean or drop "
                      "the row; similarity_options::check_finite = false skips this check)");
  }
}

/// Squared norms of every row, in double.
template <class T>
std::vector<double> host_sq_norms(const matrix_view<const T>& a) {
  std::vector<double> n(static_cast<std::size_t>(a.rows), 0.0);
  for (std::int64_t i = 0; i < a.rows; ++i) {
    double s = 0.0;
    for (std::int64_t c = 0; c < a.cols; ++c) {
      const double x = to_double(a.data[i * a.ld + c]);
      s += x * x;
    }
    n[static_cast<std::size_t>(i)] = s;
  }
  return n;
}

/// The binary mode's own refusals (similarity_topk_binary and its host form): the diagonal, and
/// the candidate count outside [k, max_top_k].
inline void check_binary(const pairwise::topk_options& k, int candidates, const char* who) {
  if (k.include_diagonal) {
    throw logic_error(std::string(who) + ": include_diagonal is not taken (a row is its own best candidate)");
  }
  if (candidates < k.k || candidates > pairwise::max_top_k) {
    throw logic_error(std::string(who) + ": candidates must be in [k = " + std::to_string(k.k) + ", " +
                      std::to_string(pairwise::max_top_k) + "], got " + std::to_string(candidates));
  }
}

/// Each row's sign bits (x > 0), 64 to a word, `words` words a row.
template <class T>
std::vector<std::uint64_t> host_sign_words(const matrix_view<const T>& a, std::int64_t words) {
  std::vector<std::uint64_t> w(static_cast<std::size_t>(a.rows * words), 0);
  for (std::int64_t i = 0; i < a.rows; ++i)
    for (std::int64_t c = 0; c < a.cols; ++c)
      if (to_double(a.data[i * a.ld + c]) > 0.0)
        w[static_cast<std::size_t>(i * words + c / 64)] |= std::uint64_t{1} << (c % 64);
  return w;
}

/// One score in double from the dot product and the two squared norms.
inline double host_score_from(similarity_metric m, double dot, double na, double nb, float cosine_zero) {
  switch (m) {
    case similarity_metric::inner_product: return dot;
    case similarity_metric::cosine:
      return (na == 0.0 || nb == 0.0) ? static_cast<double>(cosine_zero) : dot / (std::sqrt(na) * std::sqrt(nb));
    case similarity_metric::euclidean: {
      const double d2 = na + nb - 2.0 * dot;
      return d2 > 0.0 ? std::sqrt(d2) : 0.0;
    }
  }
  return 0.0;
}

/// Every score of row i of A against rows [j0, b.rows) of B, in ascending column order.
template <class T, class Emit>
void host_row_scores(const matrix_view<const T>& a, const matrix_view<const T>& b, const std::vector<double>& na,
                     const std::vector<double>& nb, std::int64_t i, std::int64_t j0, similarity_metric m,
                     float cosine_zero, Emit&& emit) {
  for (std::int64_t j = j0; j < b.rows; ++j) {
    double dot = 0.0;
    for (std::int64_t c = 0; c < a.cols; ++c) dot += to_double(a.data[i * a.ld + c]) * to_double(b.data[j * b.ld + c]);
    emit(j, static_cast<float>(host_score_from(m, dot, na[static_cast<std::size_t>(i)], nb[static_cast<std::size_t>(j)],
                                               cosine_zero)));
  }
}

}  // namespace detail

/// One score of row i of A against row j of B, in double (the tests' reference value).
template <class T>
double host_similarity_score(const matrix_view<const T>& a, const matrix_view<const T>& b, std::int64_t i, std::int64_t j,
                             similarity_metric m, float cosine_zero = 0.0f) {
  double dot = 0.0, na = 0.0, nb = 0.0;
  for (std::int64_t c = 0; c < a.cols; ++c) {
    const double x = detail::to_double(a.data[i * a.ld + c]), y = detail::to_double(b.data[j * b.ld + c]);
    dot += x * y;
    na += x * x;
    nb += y * y;
  }
  return detail::host_score_from(m, dot, na, nb, cosine_zero);
}

/// A·Aᵀ similarity into host memory `out` in `layout` (layout_size(layout, a.rows) floats).
template <class T>
void host_similarity_dense(matrix_view<T> a_, float* out, pairwise::triangle_layout layout,
                           similarity_metric m = similarity_metric::cosine, float cosine_zero = 0.0f) {
  const matrix_view<const std::remove_cv_t<T>> a = a_;
  detail::check_rows(a, "host_similarity_dense", "a");
  const std::int64_t n = a.rows;
  if (pairwise::layout_size(layout, n) > 0 && out == nullptr) throw logic_error("host_similarity_dense: out is null");
  const std::vector<double> na = detail::host_sq_norms(a);
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 16)
#endif
  for (std::int64_t i = 0; i < n; ++i) {
    detail::host_row_scores(a, a, na, na, i, i, m, cosine_zero, [&](std::int64_t j, float v) {
      switch (layout) {
        case pairwise::triangle_layout::full:
          out[i * n + j] = v;
          out[j * n + i] = v;
          break;
        case pairwise::triangle_layout::upper_packed: out[pairwise::packed_row_offset(n, i) + (j - i)] = v; break;
        case pairwise::triangle_layout::condensed:
          if (j > i) out[pairwise::condensed_row_offset(n, i) + (j - i - 1)] = v;
          break;
      }
    });
  }
}

/// A·Bᵀ similarity into host memory `out` (a.rows x b.rows, `ldc` ≥ b.rows between rows).
template <class T>
void host_similarity_dense(matrix_view<T> a_, matrix_view<T> b_, float* out, std::int64_t ldc,
                           similarity_metric m = similarity_metric::cosine, float cosine_zero = 0.0f) {
  const matrix_view<const std::remove_cv_t<T>> a = a_, b = b_;
  detail::check_pair(a, b, "host_similarity_dense");
  if (ldc < b.rows) throw logic_error("host_similarity_dense: ldc (" + std::to_string(ldc) + ") < b.rows (" + std::to_string(b.rows) + ")");
  if (a.rows > 0 && b.rows > 0 && out == nullptr) throw logic_error("host_similarity_dense: out is null");
  const std::vector<double> na = detail::host_sq_norms(a), nb = detail::host_sq_norms(b);
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 16)
#endif
  for (std::int64_t i = 0; i < a.rows; ++i) {
    detail::host_row_scores(a, b, na, nb, i, 0, m, cosine_zero, [&](std::int64_t j, float v) { out[i * ldc + j] = v; });
  }
}

/// Per-row top-k of A·Aᵀ (the diagonal excluded unless asked for).
template <class T>
pairwise::topk_result<float> host_similarity_topk(matrix_view<T> a_, const pairwise::topk_options& k,
                                                  similarity_metric m = similarity_metric::cosine, float cosine_zero = 0.0f) {
  const matrix_view<const std::remove_cv_t<T>> a = a_;
  detail::check_rows(a, "host_similarity_topk", "a");
  pairwise::detail::check_topk(k, "host_similarity_topk");
  const std::vector<double> na = detail::host_sq_norms(a);
  return pairwise::detail::host_topk<float>(a.rows, true, k, is_similarity(m), [&](std::int64_t i, auto&& emit) {
    detail::host_row_scores(a, a, na, na, i, 0, m, cosine_zero, emit);
  });
}

/// The binary-quantized mode (similarity_topk_binary) on the host: each row's `candidates` nearest
/// rows by the Hamming distance of the rows' sign bits (x > 0; ties to the smaller column), their
/// cosines in double, the best k kept (ties to the smaller column; the diagonal excluded). The
/// distances cost n²·d/64 word operations: for tests, small inputs and the no-GPU fallback.
template <class T>
pairwise::topk_result<float> host_similarity_topk_binary(matrix_view<T> a_, const pairwise::topk_options& k,
                                                         int candidates = pairwise::max_top_k,
                                                         float cosine_zero = 0.0f) {
  const matrix_view<const std::remove_cv_t<T>> a = a_;
  constexpr const char* who = "host_similarity_topk_binary";
  detail::check_rows(a, who, "a");
  pairwise::detail::check_topk(k, who);
  detail::check_binary(k, candidates, who);
  const std::int64_t n = a.rows, words = (a.cols + 63) / 64;
  const std::vector<std::uint64_t> sign = detail::host_sign_words(a, words);
  const std::vector<double> na = detail::host_sq_norms(a);
  return pairwise::detail::host_topk<float>(n, true, k, true, [&](std::int64_t i, auto&& emit) {
    std::vector<std::pair<std::int64_t, std::int64_t>> hj;  // (distance, column): ties to the smaller column
    hj.reserve(static_cast<std::size_t>(n));
    for (std::int64_t j = 0; j < n; ++j) {
      if (j == i) continue;
      std::int64_t h = 0;
      for (std::int64_t w = 0; w < words; ++w)
        h += static_cast<std::int64_t>(std::bitset<64>(sign[static_cast<std::size_t>(i * words + w)] ^
                                                       sign[static_cast<std::size_t>(j * words + w)])
                                           .count());
      hj.emplace_back(h, j);
    }
    const auto m = std::min<std::size_t>(static_cast<std::size_t>(candidates), hj.size());
    std::partial_sort(hj.begin(), hj.begin() + static_cast<std::ptrdiff_t>(m), hj.end());
    for (std::size_t q = 0; q < m; ++q) {
      const std::int64_t j = hj[q].second;
      double dot = 0.0;
      for (std::int64_t c = 0; c < a.cols; ++c)
        dot += detail::to_double(a.data[i * a.ld + c]) * detail::to_double(a.data[j * a.ld + c]);
      emit(j, static_cast<float>(detail::host_score_from(similarity_metric::cosine, dot,
                                                         na[static_cast<std::size_t>(i)],
                                                         na[static_cast<std::size_t>(j)], cosine_zero)));
    }
  });
}

/// Per-row top-k of A·Bᵀ: for each row of A, the k closest rows of B.
template <class T>
pairwise::topk_result<float> host_similarity_topk(matrix_view<T> a_, matrix_view<T> b_,
                                                  const pairwise::topk_options& k,
                                                  similarity_metric m = similarity_metric::cosine, float cosine_zero = 0.0f) {
  const matrix_view<const std::remove_cv_t<T>> a = a_, b = b_;
  detail::check_pair(a, b, "host_similarity_topk");
  pairwise::detail::check_topk(k, "host_similarity_topk");
  const std::vector<double> na = detail::host_sq_norms(a), nb = detail::host_sq_norms(b);
  return pairwise::detail::host_topk<float>(a.rows, false, k, is_similarity(m), [&](std::int64_t i, auto&& emit) {
    detail::host_row_scores(a, b, na, nb, i, 0, m, cosine_zero, emit);
  });
}

/// Threshold of A·Aᵀ → COO (upper triangle, or both halves), sorted by row then column.
template <class T>
pairwise::coo_result<float> host_similarity_threshold(matrix_view<T> a_, const pairwise::threshold_options& t,
                                                      similarity_metric m = similarity_metric::cosine,
                                                      float cosine_zero = 0.0f) {
  const matrix_view<const std::remove_cv_t<T>> a = a_;
  detail::check_rows(a, "host_similarity_threshold", "a");
  const std::vector<double> na = detail::host_sq_norms(a);
  return pairwise::detail::host_threshold<float>(a.rows, true, t, is_similarity(m),
                                                 [&](std::int64_t i, std::int64_t j0, auto&& emit) {
                                                   detail::host_row_scores(a, a, na, na, i, j0, m, cosine_zero, emit);
                                                 });
}

/// Per-row neighbour counts of A·Aᵀ (similarity_neighbour_counts' host form): for each row, the
/// rows scoring ≥ threshold (≤ for Euclidean distance), the row itself only with include_diagonal.
template <class T>
std::vector<std::int64_t> host_similarity_neighbour_counts(matrix_view<T> a_,
                                                           const pairwise::neighbour_count_options& o,
                                                           similarity_metric m = similarity_metric::cosine,
                                                           float cosine_zero = 0.0f) {
  const matrix_view<const std::remove_cv_t<T>> a = a_;
  detail::check_rows(a, "host_similarity_neighbour_counts", "a");
  const std::vector<double> na = detail::host_sq_norms(a);
  return pairwise::detail::host_neighbour_counts(
      a.rows, true, o, is_similarity(m), [&](std::int64_t i, std::int64_t j0, auto&& emit) {
        detail::host_row_scores(a, a, na, na, i, j0, m, cosine_zero, emit);
      });
}

/// Threshold of A·Bᵀ → COO, sorted by row then column.
template <class T>
pairwise::coo_result<float> host_similarity_threshold(matrix_view<T> a_, matrix_view<T> b_,
                                                      const pairwise::threshold_options& t,
                                                      similarity_metric m = similarity_metric::cosine,
                                                      float cosine_zero = 0.0f) {
  const matrix_view<const std::remove_cv_t<T>> a = a_, b = b_;
  detail::check_pair(a, b, "host_similarity_threshold");
  const std::vector<double> na = detail::host_sq_norms(a), nb = detail::host_sq_norms(b);
  return pairwise::detail::host_threshold<float>(a.rows, false, t, is_similarity(m),
                                                 [&](std::int64_t i, std::int64_t j0, auto&& emit) {
                                                   detail::host_row_scores(a, b, na, nb, i, j0, m, cosine_zero, emit);
                                                 });
}

}  // namespace spillway::similarity
