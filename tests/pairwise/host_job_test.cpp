// The host pair job (pairwise/host_job.hpp) on the host, no GPU: every result form (dense full,
// packed, condensed and A·Bᵀ; strips; top-k; threshold) over two kinds of rows — a plain dot
// product of double rows (an Ops written here) and the bit Gram's gram::host_ops — against a naive
// double loop over every pair, on random inputs from printed seeds, for block sizes of 1 row, a
// prime, automatic and more than n; then progress and cancellation, and the job's own refusals.
#include <spillway/gram/host_gram.hpp>
#include <spillway/pairwise/host_job.hpp>

#include <support/gpu_test.hpp>
#include <support/random_bits.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

namespace pw = spillway::pairwise;
namespace g = spillway::gram;

// ---- an Ops over double rows: scores are dot products (similarities: larger is better) ----------

struct dot_rows {
  const double* data = nullptr;
  std::int64_t rows = 0, cols = 0;
};

double dot(const dot_rows& a, std::int64_t i, const dot_rows& b, std::int64_t j) {
  double s = 0;
  for (std::int64_t c = 0; c < a.cols; ++c) s += a.data[i * a.cols + c] * b.data[j * b.cols + c];
  return s;
}

struct dot_ops {
  using view = dot_rows;
  view rows(const view& m, std::int64_t first, std::int64_t count) const {
    if (first < 0 || count < 0 || first + count > m.rows) throw std::out_of_range("dot_ops::rows");
    return view{m.data + first * m.cols, count, m.cols};
  }
  void dense(const view& a, const view& b, double* out, std::int64_t ldc) const {
    for (std::int64_t i = 0; i < a.rows; ++i)
      for (std::int64_t j = 0; j < b.rows; ++j) out[i * ldc + j] = dot(a, i, b, j);
  }
  pw::topk_result<double> topk(const view& a, const view& b, bool symmetric,
                               const pw::topk_options& k) const {
    return pw::detail::host_topk<double>(a.rows, symmetric, k, true, [&](std::int64_t i, auto&& emit) {
      for (std::int64_t j = 0; j < b.rows; ++j) emit(j, dot(a, i, b, j));
    });
  }
  pw::topk_result<double> topk(const view& a, const pw::topk_options& k) const { return topk(a, a, true, k); }
  pw::topk_result<double> topk(const view& a, const view& b, const pw::topk_options& k) const {
    return topk(a, b, false, k);
  }
  pw::coo_result<double> threshold(const view& a, const view& b, const pw::threshold_options& t) const {
    return pw::detail::host_threshold<double>(a.rows, false, t, true,
                                              [&](std::int64_t i, std::int64_t j0, auto&& emit) {
                                                for (std::int64_t j = j0; j < b.rows; ++j)
                                                  emit(j, dot(a, i, b, j));
                                              });
  }
};

/// Small integers as doubles: sums are exact, and equal scores (ties) are common.
std::vector<double> random_rows(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int> d(-2, 2);
  std::vector<double> v(static_cast<std::size_t>(rows * cols));
  for (auto& x : v) x = d(gen);
  return v;
}

// ---- the naive references: every pair, one at a time ---------------------------------------------

/// score(i, j) for every row i of A and column j (rows of B, or of A).
template <class V, class Score>
std::vector<V> naive_dense(std::int64_t n, std::int64_t m, Score&& score) {
  std::vector<V> out(static_cast<std::size_t>(n * m));
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < m; ++j) out[static_cast<std::size_t>(i * m + j)] = score(i, j);
  return out;
}

/// The layout's elements of a full symmetric n x n matrix.
template <class V>
std::vector<V> naive_layout(const std::vector<V>& full, std::int64_t n, pw::triangle_layout layout) {
  if (layout == pw::triangle_layout::full) return full;
  std::vector<V> out;
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = layout == pw::triangle_layout::upper_packed ? i : i + 1; j < n; ++j)
      out.push_back(full[static_cast<std::size_t>(i * n + j)]);
  return out;
}

template <class V>
pw::topk_result<V> naive_topk(const std::vector<V>& full, std::int64_t n, std::int64_t m, bool symmetric,
                              const pw::topk_options& k, bool larger) {
  pw::topk_result<V> r = pw::detail::empty_topk<V>(n, k.k);
  for (std::int64_t i = 0; i < n; ++i) {
    std::vector<std::pair<V, std::int64_t>> c;
    for (std::int64_t j = 0; j < m; ++j)
      if (!(symmetric && j == i && !k.include_diagonal))
        c.emplace_back(full[static_cast<std::size_t>(i * m + j)], j);
    std::sort(c.begin(), c.end(), [&](const auto& x, const auto& y) {
      return pw::detail::topk_better(larger, x.first, x.second, y.first, y.second);
    });
    for (std::size_t t = 0; t < c.size() && t < static_cast<std::size_t>(k.k); ++t) {
      r.values[static_cast<std::size_t>(i * k.k) + t] = c[t].first;
      r.indices[static_cast<std::size_t>(i * k.k) + t] = c[t].second;
    }
  }
  return r;
}

template <class V>
pw::coo_result<V> naive_threshold(const std::vector<V>& full, std::int64_t n, std::int64_t m, bool symmetric,
                                  const pw::threshold_options& t, bool larger) {
  pw::coo_result<V> r;
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t j = 0; j < m; ++j) {
      if (symmetric && ((j == i && !t.include_diagonal) || (j < i && !t.both_halves))) continue;
      const V v = full[static_cast<std::size_t>(i * m + j)];
      if (pw::detail::passes(larger, v, t.threshold)) {
        r.row.push_back(i);
        r.col.push_back(j);
        r.value.push_back(v);
      }
    }
  }
  return r;
}

// ---- one check of every result form of one job shape ----------------------------------------------

/// Runs every form of the job over (ops, a, b) with `block` rows per block against `full` (the
/// naive n x m scores) and checks results and reports.
template <class V, class Ops>
void check_all_forms(const Ops& ops, const typename Ops::view& a, const typename Ops::view* b,
                     const std::vector<V>& full, std::int64_t block, bool larger, double threshold,
                     const std::string& what) {
  SCOPED_TRACE(what + " block_rows=" + std::to_string(block));
  const std::int64_t n = a.rows, m = b ? b->rows : n;
  pw::host_job_options o;
  o.block_rows = block;
  pw::host_pair_job<V, Ops> job(ops, a, b, o, "test");
  const std::int64_t per = job.block_rows();
  const std::size_t blocks = n == 0 ? 0 : static_cast<std::size_t>((n + per - 1) / per);
  const auto check_report = [&](const spillway::job_report& r) {
    EXPECT_EQ(r.tasks_total, blocks);
    EXPECT_EQ(r.tasks_completed, blocks);
    EXPECT_TRUE(r.complete());
    EXPECT_FALSE(r.cancelled);
    EXPECT_TRUE(r.devices.empty());
  };
  if (b == nullptr) {
    for (const auto layout :
         {pw::triangle_layout::full, pw::triangle_layout::upper_packed, pw::triangle_layout::condensed}) {
      std::vector<V> got(static_cast<std::size_t>(pw::layout_size(layout, n)), V{-7});
      check_report(job.dense(got.data(), layout));
      EXPECT_EQ(got, naive_layout(full, n, layout)) << "layout " << static_cast<int>(layout);
    }
  } else {
    const std::int64_t ldc = m + 3;  // padding between rows stays untouched
    std::vector<V> got(static_cast<std::size_t>(n * ldc), V{-7});
    check_report(job.dense(got.data(), ldc));
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t j = 0; j < ldc; ++j) {
        const V want = j < m ? full[static_cast<std::size_t>(i * m + j)] : V{-7};
        ASSERT_EQ(got[static_cast<std::size_t>(i * ldc + j)], want) << "(" << i << ", " << j << ")";
      }
    }
  }
  {
    std::vector<V> got(full.size(), V{-7});
    std::size_t calls = 0;
    std::int64_t next_row = 0;
    check_report(
        job.strips([&](std::int64_t first_row, std::int64_t rows, const V* values, std::int64_t cols) {
          ++calls;
          EXPECT_EQ(first_row, next_row) << "blocks in order";
          EXPECT_EQ(cols, m);
          next_row = first_row + rows;
          std::copy(values, values + rows * cols, got.begin() + first_row * m);
        }));
    EXPECT_EQ(calls, blocks);
    EXPECT_EQ(got, full);
  }
  for (const int k : {1, 3, pw::max_top_k}) {
    for (const bool diag : {false, true}) {
      const pw::topk_options ko{k, diag};
      spillway::job_report r;
      const auto got = job.topk(ko, &r);
      check_report(r);
      const auto want = naive_topk(full, n, m, b == nullptr, ko, larger);
      EXPECT_EQ(got.rows, n);
      EXPECT_EQ(got.k, k);
      EXPECT_EQ(got.indices, want.indices) << "k=" << k << " diagonal=" << diag;
      EXPECT_EQ(got.values, want.values) << "k=" << k << " diagonal=" << diag;
    }
  }
  for (const bool both : {false, true}) {
    for (const bool diag : {false, true}) {
      const pw::threshold_options to{threshold, both, diag};
      spillway::job_report r;
      const auto got = job.threshold(to, &r);
      check_report(r);
      const auto want = naive_threshold(full, n, m, b == nullptr, to, larger);
      EXPECT_EQ(got.row, want.row) << "both_halves=" << both << " diagonal=" << diag;
      EXPECT_EQ(got.col, want.col) << "both_halves=" << both << " diagonal=" << diag;
      EXPECT_EQ(got.value, want.value) << "both_halves=" << both << " diagonal=" << diag;
    }
  }
}

TEST(HostPairJob, DotProductRowsEqualANaiveLoop) {
  const std::uint64_t seed = spillway::test::seed("HostPairJob.Dot");
  for (const std::int64_t n : {0, 1, 2, 37, 97}) {
    for (const std::int64_t m : {1, 29}) {
      const std::int64_t d = 5;
      const auto av = random_rows(n, d, seed + static_cast<std::uint64_t>(n));
      const auto bv = random_rows(m, d, seed + 1000 + static_cast<std::uint64_t>(m));
      const dot_rows a{av.data(), n, d}, b{bv.data(), m, d};
      const auto sym =
          naive_dense<double>(n, n, [&](std::int64_t i, std::int64_t j) { return dot(a, i, a, j); });
      const auto rect =
          naive_dense<double>(n, m, [&](std::int64_t i, std::int64_t j) { return dot(a, i, b, j); });
      for (const std::int64_t block : {std::int64_t{1}, std::int64_t{7}, std::int64_t{0}, n + 5}) {
        if (block == 1 && n > 40) continue;  // one-row blocks: the small shapes suffice (ASan time)
        const std::string what = "n=" + std::to_string(n) + " m=" + std::to_string(m);
        if (m == 1) check_all_forms<double>(dot_ops{}, a, nullptr, sym, block, true, 2.0, what + " A·Aᵀ");
        check_all_forms<double>(dot_ops{}, a, &b, rect, block, true, 2.0, what + " A·Bᵀ");
      }
    }
  }
}

TEST(HostPairJob, BitGramRowsEqualANaiveLoop) {
  const std::uint64_t seed = spillway::test::seed("HostPairJob.Gram");
  for (const std::int64_t n : {1, 67, 110}) {
    const std::int64_t cols = 70, m = 41;
    auto ab = spillway::test::random_bit_bytes(n, cols, 0.3, seed + static_cast<std::uint64_t>(n));
    spillway::test::plant_edge_rows(ab, n, cols, true);
    const auto bb = spillway::test::random_bit_bytes(m, cols, 0.3, seed + 7);
    const auto a = g::pack_bits(ab.data(), n, cols);
    const auto b = g::pack_bits(bb.data(), m, cols);
    // Counts straight from the bytes: the naive loop shares nothing with the job.
    const auto count = [&](const std::vector<std::uint8_t>& x, std::int64_t i,
                           const std::vector<std::uint8_t>& y, std::int64_t j) {
      std::int32_t s = 0;
      for (std::int64_t c = 0; c < cols; ++c)
        s += x[static_cast<std::size_t>(i * cols + c)] & y[static_cast<std::size_t>(j * cols + c)];
      return s;
    };
    const auto sym =
        naive_dense<std::int32_t>(n, n, [&](std::int64_t i, std::int64_t j) { return count(ab, i, ab, j); });
    const auto rect =
        naive_dense<std::int32_t>(n, m, [&](std::int64_t i, std::int64_t j) { return count(ab, i, bb, j); });
    const g::bit_matrix_view av = a.view(), bv = b.view();
    for (const std::int64_t block : {std::int64_t{1}, std::int64_t{13}, std::int64_t{0}, n + 1}) {
      const std::string what = "counts n=" + std::to_string(n);
      check_all_forms<std::int32_t>(g::host_ops<std::int32_t>{}, av, nullptr, sym, block, true, 8.0,
                                    what + " A·Aᵀ");
      check_all_forms<std::int32_t>(g::host_ops<std::int32_t>{}, av, &bv, rect, block, true, 8.0,
                                    what + " A·Bᵀ");
    }
    // Jaccard (float): the naive loop scores each pair with host_score from its popcounts.
    const auto pa = g::row_popcounts(av), pb = g::row_popcounts(bv);
    const auto jsym = naive_dense<float>(n, n, [&](std::int64_t i, std::int64_t j) {
      return g::host_score<float>(av, av, i, j, g::metric::jaccard, pa[static_cast<std::size_t>(i)],
                                  pa[static_cast<std::size_t>(j)]);
    });
    const auto jrect = naive_dense<float>(n, m, [&](std::int64_t i, std::int64_t j) {
      return g::host_score<float>(av, bv, i, j, g::metric::jaccard, pa[static_cast<std::size_t>(i)],
                                  pb[static_cast<std::size_t>(j)]);
    });
    const g::host_ops<float> jops{g::metric::jaccard, {}};
    check_all_forms<float>(jops, av, nullptr, jsym, 11, true, 0.25, "jaccard A·Aᵀ n=" + std::to_string(n));
    check_all_forms<float>(jops, av, &bv, jrect, 11, true, 0.25, "jaccard A·Bᵀ n=" + std::to_string(n));
  }
}

// ---- progress and cancellation -------------------------------------------------------------------

TEST(HostPairJob, ProgressAtTheStartAndAfterEveryBlock) {
  const auto av = random_rows(50, 3, spillway::test::seed("HostPairJob.Progress"));
  const dot_rows a{av.data(), 50, 3};
  std::vector<std::pair<std::size_t, std::size_t>> seen;
  pw::host_job_options o;
  o.block_rows = 10;
  o.progress = [&](const spillway::progress_info& p) {
    seen.emplace_back(p.tasks_done, p.tasks_total);
    return true;
  };
  pw::host_pair_job<double, dot_ops> job(dot_ops{}, a, nullptr, o);
  std::vector<double> out(50 * 50);
  const auto r = job.dense(out.data(), pw::triangle_layout::full);
  const std::vector<std::pair<std::size_t, std::size_t>> want = {{0, 5}, {1, 5}, {2, 5},
                                                                 {3, 5}, {4, 5}, {5, 5}};
  EXPECT_EQ(seen, want);
  EXPECT_TRUE(r.complete());
  EXPECT_EQ(r.completed, std::vector<bool>(5, true));
}

TEST(HostPairJob, CancelStopsBeforeTheNextBlock) {
  const std::int64_t n = 40;
  const auto av = random_rows(n, 4, spillway::test::seed("HostPairJob.Cancel"));
  const dot_rows a{av.data(), n, 4};
  const auto full =
      naive_dense<double>(n, n, [&](std::int64_t i, std::int64_t j) { return dot(a, i, a, j); });
  for (const std::size_t stop_after : {std::size_t{0}, std::size_t{2}, std::size_t{4}}) {
    SCOPED_TRACE("stop after " + std::to_string(stop_after) + " blocks");
    pw::host_job_options o;
    o.block_rows = 10;  // 4 blocks
    o.progress = [&](const spillway::progress_info& p) { return p.tasks_done < stop_after; };
    pw::host_pair_job<double, dot_ops> job(dot_ops{}, a, nullptr, o);
    std::vector<double> out(static_cast<std::size_t>(n * n), -7.0);
    const auto r = job.dense(out.data(), pw::triangle_layout::full);
    // Cancelling after the last block is no cancellation: the output is whole.
    EXPECT_EQ(r.cancelled, stop_after < 4);
    EXPECT_EQ(r.tasks_total, 4u);
    EXPECT_EQ(r.tasks_completed, stop_after);
    for (std::size_t t = 0; t < 4; ++t) EXPECT_EQ(r.completed[t], t < stop_after) << "block " << t;
    // The completed blocks' rows hold their upper part (their columns from the block's first row on).
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(stop_after) * 10; ++i)
      for (std::int64_t j = i; j < n; ++j)
        ASSERT_EQ(out[static_cast<std::size_t>(i * n + j)], full[static_cast<std::size_t>(i * n + j)]);
    const auto lists = job.topk(pw::topk_options{3, false});
    EXPECT_EQ(lists.rows, n);
  }
}

// ---- the job's own refusals -----------------------------------------------------------------------

template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const spillway::logic_error& e) {
    return e.what();
  }
  return "(no logic_error)";
}

TEST(HostPairJob, RefusesBadArgumentsNamingTheCaller) {
  const auto av = random_rows(6, 2, 1), bv = random_rows(4, 2, 2);
  const dot_rows a{av.data(), 6, 2}, b{bv.data(), 4, 2};
  pw::host_job_options bad;
  bad.block_rows = -1;
  EXPECT_EQ(message_of([&] { (void)pw::host_pair_job<double, dot_ops>(dot_ops{}, a, nullptr, bad, "who"); }),
            "who: block_rows must be >= 0 (0: automatic), got -1");
  pw::host_pair_job<double, dot_ops> sym(dot_ops{}, a, nullptr, {}, "who");
  pw::host_pair_job<double, dot_ops> rect(dot_ops{}, a, &b, {}, "who");
  EXPECT_EQ(sym.block_rows(), 64) << "automatic: at least 64 rows";
  EXPECT_EQ(message_of([&] { sym.dense(nullptr, pw::triangle_layout::condensed); }), "who: out is null");
  EXPECT_EQ(message_of([&] { rect.dense(nullptr, 4); }), "who: out is null");
  std::vector<double> out(64);
  EXPECT_EQ(message_of([&] { rect.dense(out.data(), 3); }), "who: ldc (3) is smaller than b.rows (4)");
  EXPECT_EQ(message_of([&] { rect.dense(out.data(), pw::triangle_layout::full); }),
            "who: a triangle layout is for A·Aᵀ (no B)");
  EXPECT_EQ(message_of([&] { sym.dense(out.data(), 6); }), "who: the A·Bᵀ form needs B");
  EXPECT_EQ(message_of([&] { sym.topk(pw::topk_options{0, false}); }), "who: k must be in [1, 128], got 0");
  EXPECT_EQ(message_of([&] {
              rect.topk(pw::topk_options{129, false});
            }),
            "who: k must be in [1, 128], got 129");
}

}  // namespace
