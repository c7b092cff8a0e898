// spillway/gram/host_gram.hpp — the host implementation of the Gram products and their sinks:
// the tests' oracle and the fallback on a machine with no GPU. Plain C++ (OpenMP when available,
// __builtin_popcountll), the same semantics as the GPU API in <spillway/gram.cuh>.
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/gram/bit_matrix.hpp>
#include <spillway/gram/epilogue.hpp>
#include <spillway/pairwise/host_job.hpp>
#include <spillway/pairwise/sinks.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace spillway::gram {

// ---- sink options and results: the pairwise layer's (shared with float similarity) ---------------

using ::spillway::pairwise::coo_result;
using ::spillway::pairwise::csr_result;
using ::spillway::pairwise::max_top_k;
using ::spillway::pairwise::neighbour_count_options;
using ::spillway::pairwise::threshold_options;
using ::spillway::pairwise::to_csr;
using ::spillway::pairwise::topk_options;
using ::spillway::pairwise::topk_result;

namespace detail {

using ::spillway::pairwise::detail::check_topk;
using ::spillway::pairwise::detail::passes;
using ::spillway::pairwise::detail::topk_better;

inline void check_same_cols(const bit_matrix_view& a, const bit_matrix_view& b, const char* who) {
  if (a.cols != b.cols) {
    throw logic_error(std::string(who) + ": A has " + std::to_string(a.cols) + " columns but B has " +
                      std::to_string(b.cols) + "; A·Bᵀ needs equal column counts");
  }
  if (a.ld_words != b.ld_words) {
    throw logic_error(std::string(who) + ": A.ld_words (" + std::to_string(a.ld_words) + ") differs from B.ld_words (" +
                      std::to_string(b.ld_words) + ")");
  }
}

/// popcount(row i of a & row j of b) over the words that can hold bits.
inline std::int32_t and_count(const std::uint32_t* x, const std::uint32_t* y, std::int64_t nwords64) {
  std::int64_t s = 0;
  for (std::int64_t w = 0; w < nwords64; ++w) {
    std::uint64_t p, q;
    std::memcpy(&p, x + 2 * w, 8);
    std::memcpy(&q, y + 2 * w, 8);
    s += __builtin_popcountll(p & q);
  }
  return static_cast<std::int32_t>(s);
}

inline std::int64_t words64(const bit_matrix_view& a) { return (a.cols + 63) / 64; }

template <class Emit>
inline void for_row_scores(const bit_matrix_view& a, const bit_matrix_view& b, std::int64_t i, std::int64_t j0,
                           std::int64_t j1, Emit&& emit) {
  const std::int64_t nw = words64(a);
  const std::uint32_t* x = a.row(i);
  for (std::int64_t j = j0; j < j1; ++j) emit(j, and_count(x, b.row(j), nw));
}

/// The checks of an A·Bᵀ entry point `who`: both views, then their columns.
inline void check_pair(const bit_matrix_view& a, const bit_matrix_view& b, const char* who) {
  check_view(a, who, "a");
  check_view(b, who, "b");
  check_same_cols(a, b, who);
}

/// The metric's scores of rows of A against rows of B: the rows' popcounts (B's are A's where
/// `same`) and the scorer.
template <class V>
struct row_scorer {
  const bit_matrix_view& a;
  const bit_matrix_view& b;
  std::vector<std::int32_t> pa, pb;
  scorer sc;
  row_scorer(const bit_matrix_view& a_, const bit_matrix_view& b_, bool same, metric m, score_options so)
      : a(a_),
        b(b_),
        pa(row_popcounts(a_)),
        pb(same ? pa : row_popcounts(b_)),
        sc{m, so.jaccard_empty, so.cosine_zero} {}
  /// emit(j, score of (i, j)) for the columns j of [j0, b.rows), in order.
  template <class Emit>
  void row(std::int64_t i, std::int64_t j0, Emit&& emit) const {
    for_row_scores(a, b, i, j0, b.rows, [&](std::int64_t j, std::int32_t c) {
      emit(j, sc.template operator()<V>(c, pa[static_cast<std::size_t>(i)], pb[static_cast<std::size_t>(j)]));
    });
  }
};

}  // namespace detail

/// popcount(row i of A & row j of B): one entry of A·Bᵀ.
inline std::int32_t host_count(const bit_matrix_view& a, const bit_matrix_view& b, std::int64_t i, std::int64_t j) {
  return detail::and_count(a.row(i), b.row(j), detail::words64(a));
}

/// One entry of the metric for rows i of A and j of B (popcounts given).
template <class OutT>
inline OutT host_score(const bit_matrix_view& a, const bit_matrix_view& b, std::int64_t i, std::int64_t j, metric m,
                       std::int32_t na, std::int32_t nb, score_options so = {}) {
  return detail::scorer{m, so.jaccard_empty, so.cosine_zero}.template operator()<OutT>(host_count(a, b, i, j), na, nb);
}

/// A·Aᵀ of `a` into host memory `out` in `layout` (layout_size(layout, rows) elements).
template <class OutT>
void host_gram_dense(const bit_matrix_view& a, OutT* out, triangle_layout layout, metric m = metric::counts,
                     score_options so = {}) {
  detail::check_view(a, "host_gram_dense", "a");
  detail::check_output_type<OutT>(m, a.cols, "host_gram_dense");
  const std::int64_t n = a.rows;
  if (layout_size(layout, n) > 0 && out == nullptr) throw logic_error("host_gram_dense: out is null");
  const detail::row_scorer<OutT> rs(a, a, true, m, so);
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 16)
#endif
  for (std::int64_t i = 0; i < n; ++i) {
    rs.row(i, i, [&](std::int64_t j, OutT v) {
      switch (layout) {
        case triangle_layout::full:
          out[i * n + j] = v;
          out[j * n + i] = v;
          break;
        case triangle_layout::upper_packed: out[packed_row_offset(n, i) + (j - i)] = v; break;
        case triangle_layout::condensed:
          if (j > i) out[condensed_row_offset(n, i) + (j - i - 1)] = v;
          break;
      }
    });
  }
}

/// A·Bᵀ into host memory `out`, row-major a.rows x b.rows with `ldc` (≥ b.rows) between rows.
template <class OutT>
void host_gram_dense(const bit_matrix_view& a, const bit_matrix_view& b, OutT* out, std::int64_t ldc,
                     metric m = metric::counts, score_options so = {}) {
  detail::check_pair(a, b, "host_gram_dense");
  detail::check_output_type<OutT>(m, a.cols, "host_gram_dense");
  if (ldc < b.rows) throw logic_error("host_gram_dense: ldc (" + std::to_string(ldc) + ") < b.rows (" + std::to_string(b.rows) + ")");
  if (a.rows > 0 && b.rows > 0 && out == nullptr) throw logic_error("host_gram_dense: out is null");
  const detail::row_scorer<OutT> rs(a, b, false, m, so);
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 16)
#endif
  for (std::int64_t i = 0; i < a.rows; ++i) {
    rs.row(i, 0, [&](std::int64_t j, OutT v) { out[i * ldc + j] = v; });
  }
}

namespace detail {
template <class V>
topk_result<V> host_topk_impl(const bit_matrix_view& a, const bit_matrix_view& b, bool symmetric,
                              const topk_options& o, metric m, score_options so) {
  check_topk(o, "host_gram_topk");
  check_output_type<V>(m, a.cols, "host_gram_topk");
  const row_scorer<V> rs(a, b, symmetric, m, so);
  return ::spillway::pairwise::detail::host_topk<V>(a.rows, symmetric, o, is_similarity(m),
                                                    [&](std::int64_t i, auto&& emit) { rs.row(i, 0, emit); });
}
}  // namespace detail

/// Per-row top-k of A·Aᵀ.
template <class V>
topk_result<V> host_gram_topk(const bit_matrix_view& a, const topk_options& o, metric m = metric::counts,
                              score_options so = {}) {
  detail::check_view(a, "host_gram_topk", "a");
  return detail::host_topk_impl<V>(a, a, true, o, m, so);
}

/// Per-row top-k of A·Bᵀ (columns are rows of B; include_diagonal is ignored).
template <class V>
topk_result<V> host_gram_topk(const bit_matrix_view& a, const bit_matrix_view& b, const topk_options& o,
                              metric m = metric::counts, score_options so = {}) {
  detail::check_pair(a, b, "host_gram_topk");
  return detail::host_topk_impl<V>(a, b, false, o, m, so);
}

namespace detail {
template <class V>
coo_result<V> host_threshold_impl(const bit_matrix_view& a, const bit_matrix_view& b, bool symmetric,
                                  const threshold_options& o, metric m, score_options so) {
  check_output_type<V>(m, a.cols, "host_gram_threshold");
  const row_scorer<V> rs(a, b, symmetric, m, so);
  return ::spillway::pairwise::detail::host_threshold<V>(
      a.rows, symmetric, o, is_similarity(m),
      [&](std::int64_t i, std::int64_t j0, auto&& emit) { rs.row(i, j0, emit); });
}
}  // namespace detail

/// Threshold of A·Aᵀ → COO (upper triangle, or both halves), sorted by row then column.
template <class V>
coo_result<V> host_gram_threshold(const bit_matrix_view& a, const threshold_options& o, metric m = metric::counts,
                                  score_options so = {}) {
  detail::check_view(a, "host_gram_threshold", "a");
  return detail::host_threshold_impl<V>(a, a, true, o, m, so);
}

/// Threshold of A·Bᵀ → COO, sorted by row then column.
template <class V>
coo_result<V> host_gram_threshold(const bit_matrix_view& a, const bit_matrix_view& b, const threshold_options& o,
                                  metric m = metric::counts, score_options so = {}) {
  detail::check_pair(a, b, "host_gram_threshold");
  return detail::host_threshold_impl<V>(a, b, false, o, m, so);
}

namespace detail {
template <class V>
std::vector<std::int64_t> host_counts_impl(const bit_matrix_view& a, const bit_matrix_view& b, bool symmetric,
                                           const neighbour_count_options& o, metric m, score_options so) {
  check_output_type<V>(m, a.cols, "host_gram_neighbour_counts");
  const row_scorer<V> rs(a, b, symmetric, m, so);
  return ::spillway::pairwise::detail::host_neighbour_counts(
      a.rows, symmetric, o, is_similarity(m),
      [&](std::int64_t i, std::int64_t j0, auto&& emit) { rs.row(i, j0, emit); });
}
}  // namespace detail

/// Per-row neighbour counts of A·Aᵀ (gram_neighbour_counts' host form): for each row, the rows
/// whose value (as V) passes the threshold, the row itself only with include_diagonal.
template <class V>
std::vector<std::int64_t> host_gram_neighbour_counts(const bit_matrix_view& a,
                                                     const neighbour_count_options& o,
                                                     metric m = metric::counts, score_options so = {}) {
  detail::check_view(a, "host_gram_neighbour_counts", "a");
  return detail::host_counts_impl<V>(a, a, true, o, m, so);
}

/// Per-row neighbour counts of A·Bᵀ (include_diagonal is ignored).
template <class V>
std::vector<std::int64_t> host_gram_neighbour_counts(const bit_matrix_view& a, const bit_matrix_view& b,
                                                     const neighbour_count_options& o,
                                                     metric m = metric::counts, score_options so = {}) {
  detail::check_pair(a, b, "host_gram_neighbour_counts");
  return detail::host_counts_impl<V>(a, b, false, o, m, so);
}

/// The host functions above as a pairwise host pair job's `Ops` (pairwise/host_job.hpp): blocks
/// of a bit matrix's rows scored with metric `m`, each block one call of host_gram_dense,
/// host_gram_topk or host_gram_threshold on row_range views (their checks and messages, their
/// OpenMP loops). gram_strips' host fallback and the Python binding's host path run on it.
template <class V>
struct host_ops {
  using view = bit_matrix_view;
  metric m = metric::counts;
  score_options scores{};
  [[nodiscard]] view rows(const view& v, std::int64_t first, std::int64_t count) const {
    return row_range(v, first, count);
  }
  void dense(const view& a, const view& b, V* out, std::int64_t ldc) const {
    host_gram_dense(a, b, out, ldc, m, scores);
  }
  [[nodiscard]] topk_result<V> topk(const view& a, const topk_options& k) const {
    return host_gram_topk<V>(a, k, m, scores);
  }
  [[nodiscard]] topk_result<V> topk(const view& a, const view& b, const topk_options& k) const {
    return host_gram_topk<V>(a, b, k, m, scores);
  }
  [[nodiscard]] coo_result<V> threshold(const view& a, const view& b, const threshold_options& t) const {
    return host_gram_threshold<V>(a, b, t, m, scores);
  }
};

}  // namespace spillway::gram
