// spillway/pairwise/sinks.hpp — the sinks that shrink an all-pairs result (per-row top-k,
// threshold → COO): their options, their results, the ordering they share, and the host
// implementation over any score function (the oracle of the tests and the host fallback of every
// module whose scores come from rows: bit Gram, float similarity). Plain C++ (OpenMP when on).
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/core/launch.hpp>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace spillway::pairwise {

/// Largest k the top-k sink accepts.
inline constexpr int max_top_k = 128;

/// Per-row top-k: the k "most alike" columns of each row — the largest similarities, or the
/// smallest distances — ties broken by the smaller column index.
struct topk_options {
  int k = 8;                      ///< 1 ≤ k ≤ max_top_k (128)
  bool include_diagonal = false;  ///< A·Aᵀ only: whether row i may list itself
};

/// Per-row top-k lists, row-major rows x k. A row with fewer than k candidates (e.g. k ≥ n with
/// the diagonal excluded) ends with index −1 and value 0 in the unused places.
template <class V>
struct topk_result {
  std::int64_t rows = 0;
  int k = 0;
  std::vector<V> values;              ///< rows * k
  std::vector<std::int64_t> indices;  ///< rows * k, column index or −1
  [[nodiscard]] V value(std::int64_t r, int t) const { return values[static_cast<std::size_t>(r * k + t)]; }
  [[nodiscard]] std::int64_t index(std::int64_t r, int t) const { return indices[static_cast<std::size_t>(r * k + t)]; }
};

/// Threshold → sparse: keeps entries with value ≥ threshold (similarities) or ≤ threshold
/// (distances). A float score is compared with the threshold rounded to float (detail::passes),
/// so a score equal to the threshold as written passes: Jaccard 7/10 at 0.7.
struct threshold_options {
  double threshold = 0.0;
  bool both_halves = false;       ///< A·Aᵀ: also emit (j, i) for every kept (i, j), i < j
  bool include_diagonal = false;  ///< A·Aᵀ: whether (i, i) may be kept
};

/// Per-row neighbour counts (pairwise/sinks/neighbour_counts.cuh): a pair counts when its value
/// is ≥ threshold (similarities) or ≤ threshold (distances).
struct neighbour_count_options {
  double threshold = 0.0;
  bool include_diagonal = false;  ///< A·Aᵀ: whether row i counts itself when (i, i) passes
};

/// A sparse result in coordinate form, sorted by row, then column.
template <class V>
struct coo_result {
  std::vector<std::int64_t> row;
  std::vector<std::int64_t> col;
  std::vector<V> value;
  [[nodiscard]] std::size_t size() const noexcept { return row.size(); }
};

/// A sparse result in compressed sparse row form (SciPy's csr layout): row i's entries are
/// [indptr[i], indptr[i + 1]) of `col` and `value`, columns ascending.
template <class V>
struct csr_result {
  std::int64_t rows = 0, cols = 0;
  std::vector<std::int64_t> indptr;  ///< rows + 1
  std::vector<std::int64_t> col;
  std::vector<V> value;
  [[nodiscard]] std::size_t size() const noexcept { return col.size(); }
};

/// A COO result (sorted by row, then column, as every threshold result is) as CSR over a
/// rows x cols matrix; its columns and values move over. Throws logic_error naming the entry when
/// a row or column is outside the shape or the rows are not sorted.
template <class V>
csr_result<V> to_csr(coo_result<V>&& coo, std::int64_t rows, std::int64_t cols) {
  if (rows < 0 || cols < 0) {
    throw logic_error("to_csr: negative shape (" + std::to_string(rows) + ", " + std::to_string(cols) + ")");
  }
  if (coo.col.size() != coo.row.size() || coo.value.size() != coo.row.size()) {
    throw logic_error("to_csr: row, col and value have " + std::to_string(coo.row.size()) + ", " +
                      std::to_string(coo.col.size()) + " and " + std::to_string(coo.value.size()) +
                      " entries");
  }
  csr_result<V> c;
  c.rows = rows;
  c.cols = cols;
  c.indptr.assign(static_cast<std::size_t>(rows) + 1, 0);
  std::int64_t prev = 0;
  for (std::size_t e = 0; e < coo.row.size(); ++e) {
    const std::int64_t r = coo.row[e], x = coo.col[e];
    if (r < 0 || r >= rows || x < 0 || x >= cols) {
      throw logic_error("to_csr: entry " + std::to_string(e) + " at (" + std::to_string(r) + ", " +
                        std::to_string(x) + ") is outside the " + std::to_string(rows) + " x " +
                        std::to_string(cols) + " matrix");
    }
    if (r < prev) {
      throw logic_error("to_csr: entry " + std::to_string(e) + " of row " + std::to_string(r) +
                        " follows row " + std::to_string(prev) + " (the COO is not sorted by row)");
    }
    prev = r;
    ++c.indptr[static_cast<std::size_t>(r) + 1];
  }
  for (std::size_t r = 0; r < static_cast<std::size_t>(rows); ++r) c.indptr[r + 1] += c.indptr[r];
  c.col = std::move(coo.col);
  c.value = std::move(coo.value);
  coo.row.clear();
  return c;
}

namespace detail {

/// The order of every top-k list: better value first (larger for similarities, smaller for
/// distances), equal values by the smaller column.
template <class V>
inline bool topk_better(bool larger, V av, std::int64_t ac, V bv, std::int64_t bc) {
  if (av != bv) return larger ? av > bv : av < bv;
  return ac < bc;
}

/// Whether a score passes a threshold: ≥ for similarities (`larger`), ≤ for distances; one rule
/// for the host implementations and the device sinks. A floating-point score is compared with the
/// threshold rounded to its own type (a float score with float(threshold); beyond float's range, an
/// infinity), so a score equal to the threshold as the caller wrote it passes: a Jaccard of 7/10
/// is 0.7f, which compared in double (0.699999988 < 0.69999999999999996) was dropped. A ratio
/// c/u ≠ p/q stays on its side of float(p/q) while q·u < 1.6·10⁷ (docs/gram.md). Integer scores
/// (counts, Hamming) compare in double.
template <class V>
SPILLWAY_HD inline bool passes(bool larger, V v, double threshold) {
  if constexpr (std::is_same_v<V, float>) {
    const float t = threshold > static_cast<double>(FLT_MAX)    ? HUGE_VALF
                    : threshold < -static_cast<double>(FLT_MAX) ? -HUGE_VALF
                                                                : static_cast<float>(threshold);
    return larger ? v >= t : v <= t;
  } else {
    return larger ? static_cast<double>(v) >= threshold : static_cast<double>(v) <= threshold;
  }
}

inline void check_topk(const topk_options& o, const char* who) {
  if (o.k < 1 || o.k > max_top_k) {
    throw logic_error(std::string(who) + ": k must be in [1, " + std::to_string(max_top_k) + "], got " +
                      std::to_string(o.k));
  }
}

/// A result for rows with no columns: every place empty.
template <class V>
topk_result<V> empty_topk(std::int64_t rows, int k) {
  topk_result<V> r{rows, k, {}, {}};
  r.values.assign(static_cast<std::size_t>(rows * k), V{});
  r.indices.assign(static_cast<std::size_t>(rows * k), -1);
  return r;
}

/// Host top-k over rows [0, rows) of any score: `row_scores(i, emit)` calls emit(j, value) for
/// the candidate columns j of row i (in any order; symmetric: the diagonal is dropped here unless
/// asked for).
template <class V, class RowScores>
topk_result<V> host_topk(std::int64_t rows, bool symmetric, const topk_options& o, bool larger, RowScores&& row_scores) {
  topk_result<V> r = empty_topk<V>(rows, o.k);
#ifdef _OPENMP
#pragma omp parallel
#endif
  {
    std::vector<std::pair<V, std::int64_t>> cand;
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 16)
#endif
    for (std::int64_t i = 0; i < rows; ++i) {
      cand.clear();
      row_scores(i, [&](std::int64_t j, V v) {
        if (symmetric && j == i && !o.include_diagonal) return;
        cand.emplace_back(v, j);
      });
      const std::size_t kk = std::min<std::size_t>(static_cast<std::size_t>(o.k), cand.size());
      std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(kk), cand.end(),
                        [&](const auto& x, const auto& y) { return topk_better(larger, x.first, x.second, y.first, y.second); });
      for (std::size_t t = 0; t < kk; ++t) {
        r.values[static_cast<std::size_t>(i * o.k) + t] = cand[t].first;
        r.indices[static_cast<std::size_t>(i * o.k) + t] = cand[t].second;
      }
    }
  }
  return r;
}

/// Host threshold → COO over rows [0, rows): `row_scores(i, j0, emit)` calls emit(j, value) for
/// columns j ≥ j0 in ascending order. Symmetric: the upper triangle (j ≥ i), or every column with
/// both_halves; the diagonal unless asked for.
template <class V, class RowScores>
coo_result<V> host_threshold(std::int64_t rows, bool symmetric, const threshold_options& o, bool larger,
                             RowScores&& row_scores) {
  std::vector<std::vector<std::pair<std::int64_t, V>>> kept(static_cast<std::size_t>(rows));
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 16)
#endif
  for (std::int64_t i = 0; i < rows; ++i) {
    auto& out = kept[static_cast<std::size_t>(i)];
    const std::int64_t j0 = symmetric ? (o.both_halves ? 0 : i) : 0;
    row_scores(i, j0, [&](std::int64_t j, V v) {
      if (symmetric && j == i && !o.include_diagonal) return;
      if (passes(larger, v, o.threshold)) out.emplace_back(j, v);
    });
  }
  coo_result<V> r;
  std::size_t total = 0;
  for (const auto& v : kept) total += v.size();
  r.row.reserve(total);
  r.col.reserve(total);
  r.value.reserve(total);
  for (std::int64_t i = 0; i < rows; ++i) {
    for (const auto& e : kept[static_cast<std::size_t>(i)]) {
      r.row.push_back(i);
      r.col.push_back(e.first);
      r.value.push_back(e.second);
    }
  }
  return r;
}

/// Host per-row neighbour counts over rows [0, rows): `row_scores(i, j0, emit)` as for
/// host_threshold, read from column 0 on (A·Aᵀ: both halves; the diagonal as asked). Only the
/// counts are kept, no COO.
template <class RowScores>
std::vector<std::int64_t> host_neighbour_counts(std::int64_t rows, bool symmetric,
                                                const neighbour_count_options& o, bool larger,
                                                RowScores&& row_scores) {
  std::vector<std::int64_t> counts(static_cast<std::size_t>(rows), 0);
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 16)
#endif
  for (std::int64_t i = 0; i < rows; ++i) {
    std::int64_t c = 0;
    row_scores(i, 0, [&](std::int64_t j, auto v) {
      if (symmetric && j == i && !o.include_diagonal) return;
      if (passes(larger, v, o.threshold)) ++c;
    });
    counts[static_cast<std::size_t>(i)] = c;
  }
  return counts;
}

}  // namespace detail

}  // namespace spillway::pairwise
