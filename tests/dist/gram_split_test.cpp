// The distributed Gram's MPI-free logic: the predicted seconds of a rank's share and the split
// that balances them (dist/gram_split.hpp), and an owner's merge of sorted top-k lists
// (dist/topk_lists.hpp) against a host oracle. Random inputs from printed seeds.
#include <spillway/dist/gram_split.hpp>
#include <spillway/dist/topk_lists.hpp>
#include <support/gpu_test.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace sd = spillway::dist;
namespace sp = spillway::pairwise;

namespace {

using spillway::test::seed;  // the printed seeds every suite uses (tests/support)

// The bench's job: 100,000 x 200,000 bits, strips of 2,048 rows, 25,088-byte rows.
sd::gram_job_shape bench_shape(sd::gram_sink sink) {
  sd::gram_job_shape j;
  j.n = 100000;
  j.cols = 200000;
  j.strip_rows = 2048;
  j.row_bytes = 25088;
  j.sink = sink;
  return j;
}

std::int64_t strips_of(const sd::gram_job_shape& j) { return (j.n + j.strip_rows - 1) / j.strip_rows; }

sd::gram_job_shape random_shape(std::mt19937_64& g) {
  sd::gram_job_shape j;
  j.n = 1 + static_cast<std::int64_t>(g() % 5000);
  j.strip_rows = 1 + static_cast<std::int64_t>(g() % 700);
  j.cols = 1 + static_cast<std::int64_t>(g() % 100000);
  j.row_bytes = static_cast<std::size_t>((j.cols + 255) / 256 * 32);
  j.out_bytes = g() % 2 ? 4 : 8;
  j.sink = static_cast<sd::gram_sink>(g() % 3);
  j.slots = 1 + g() % 4;
  j.resident = g() % 4 != 0;
  return j;
}

sd::gram_cost_model random_model(std::mt19937_64& g) {
  std::uniform_real_distribution<double> f(0.1, 10.0);
  sd::gram_cost_model m;
  m.bit_macs_per_second *= f(g);
  m.h2d_bytes_per_second *= f(g);
  m.d2h_bytes_per_second *= f(g);
  m.score_bytes_per_second *= f(g);
  m.host_copy_bytes_per_second *= f(g);
  m.strip_seconds *= f(g);
  return m;
}

double max_seconds(const std::vector<sd::share_prediction>& p) {
  double m = 0;
  for (const auto& x : p) m = std::max(m, x.seconds);
  return m;
}

}  // namespace

TEST(GramShare, OneStripIsItsStagesInSequence) {
  sd::gram_job_shape j;
  j.n = 1000;
  j.cols = 5000;
  j.strip_rows = 1000;
  j.row_bytes = 640;
  sd::gram_cost_model m;
  m.strip_seconds = 1e-3;
  for (const auto sink : {sd::gram_sink::topk, sd::gram_sink::threshold, sd::gram_sink::triangle}) {
    j.sink = sink;
    const auto p = sd::predict_share(j, m, 0, 1);
    const double pairs = 1000.0 * 1000.0 - 1000.0 * 999.0 / 2.0;
    EXPECT_DOUBLE_EQ(p.pairs, pairs);
    EXPECT_EQ(p.upload_bytes, 1000u * 640u);
    EXPECT_DOUBLE_EQ(p.first_upload_seconds, 640e3 / m.h2d_bytes_per_second);
    EXPECT_DOUBLE_EQ(p.product_seconds, pairs * 5000.0 / m.bit_macs_per_second);
    const double scores = 1000.0 * 1000.0 * 4.0;
    if (sink == sd::gram_sink::triangle) {
      EXPECT_DOUBLE_EQ(p.sink_seconds, 0.0);
      EXPECT_DOUBLE_EQ(p.download_seconds, scores / m.d2h_bytes_per_second);
      EXPECT_DOUBLE_EQ(p.host_seconds, pairs * 4.0 / m.host_copy_bytes_per_second);
      EXPECT_EQ(p.download_bytes, static_cast<std::size_t>(scores));
    } else {
      EXPECT_DOUBLE_EQ(p.sink_seconds, scores / m.score_bytes_per_second);
      EXPECT_DOUBLE_EQ(p.download_seconds, 0.0);
      EXPECT_DOUBLE_EQ(p.host_seconds, 0.0);
    }
    EXPECT_NEAR(p.seconds,
                p.upload_seconds + p.product_seconds + p.sink_seconds + m.strip_seconds + p.download_seconds +
                    p.host_seconds,
                1e-15);
  }
  // Nothing to run: nothing predicted.
  EXPECT_EQ(sd::predict_share(j, m, 0, 0).seconds, 0.0);
  EXPECT_EQ(sd::predict_share(j, m, 3, 9).seconds, 0.0);
}

TEST(GramShare, TheFirstStripRunWaitsForEveryPanelAfterIt) {
  // Rank 0 of two on the bench's job by pairs (strips 0..13): its first strip run is strip 13,
  // which reads panels 13..48 — 36 panels, 1.85 GB — before its first product.
  const auto j = bench_shape(sd::gram_sink::topk);
  const sd::gram_cost_model m;
  const auto p0 = sd::predict_share(j, m, 0, 14);
  const double panels = static_cast<double>(j.n - 13 * 2048) * 25088.0;
  EXPECT_NEAR(p0.first_upload_seconds, panels / m.h2d_bytes_per_second, 1e-12);
  EXPECT_EQ(p0.upload_bytes, static_cast<std::size_t>(j.n) * 25088u);  // all of A, once
  // The last rank's first strip reads one panel (the last, 1,696 rows).
  const auto p1 = sd::predict_share(j, m, 14, 49);
  EXPECT_NEAR(p1.first_upload_seconds, (100000.0 - 48 * 2048) * 25088.0 / m.h2d_bytes_per_second, 1e-12);
  EXPECT_EQ(p1.upload_bytes, static_cast<std::size_t>(j.n - 14 * 2048) * 25088u);
  // Compute-bound after that: the upload ahead of the products is the whole difference.
  EXPECT_GT(p0.seconds, p0.first_upload_seconds + p0.product_seconds + p0.sink_seconds);
  // (its narrowest strips, run first, wait on their panel's upload more than they compute: a few ms)
  EXPECT_LT(p1.seconds, p1.product_seconds + p1.sink_seconds + 35 * m.strip_seconds + 0.006);
  // The one-process job's top-32 measured 0.196–0.200 s on the H200: the default model says so.
  const double one = sd::predict_share(j, m, 0, 49).seconds;
  EXPECT_GT(one, 0.18);
  EXPECT_LT(one, 0.21);
  // Streamed: every strip uploads its own panel and all after it.
  auto js = j;
  js.resident = false;
  const auto ps = sd::predict_share(js, m, 0, 49);
  std::size_t up = 0;
  for (std::int64_t I = 0; I < 49; ++I) up += static_cast<std::size_t>(j.n - I * 2048) * 25088u;
  EXPECT_EQ(ps.upload_bytes, up);
}

TEST(GramShare, BoundsAndMonotoneOnRandomShapes) {
  std::mt19937_64 g(seed("gram share random"));
  for (int rep = 0; rep < 200; ++rep) {
    const auto j = random_shape(g);
    const auto m = random_model(g);
    const std::int64_t S = strips_of(j);
    const std::int64_t f = static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(S));
    const std::int64_t l = f + 1 + static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(S - f));
    const auto p = sd::predict_share(j, m, f, l);
    const double serial = p.upload_seconds + p.product_seconds + p.sink_seconds +
                          m.strip_seconds * static_cast<double>(l - f) + p.download_seconds + p.host_seconds;
    // No faster than its busiest engine, no slower than everything one after the other.
    const double busiest = std::max({p.upload_seconds, p.product_seconds + p.sink_seconds, p.download_seconds,
                                     p.host_seconds});
    EXPECT_GE(p.seconds, busiest * (1 - 1e-12)) << rep;
    EXPECT_LE(p.seconds, serial * (1 + 1e-12)) << rep;
    // One more strip at either end never predicts less (but for the rounding of sums taken in
    // another order: its panels' uploads are one sum instead of two).
    if (l < S) {
      EXPECT_GE(sd::predict_share(j, m, f, l + 1).seconds, p.seconds * (1 - 1e-12)) << rep;
    }
    if (f > 0) {
      EXPECT_GE(sd::predict_share(j, m, f - 1, l).seconds, p.seconds * (1 - 1e-12)) << rep;
    }
    // Resident: the share uploads its rows from its first on, once.
    if (j.resident) {
      EXPECT_EQ(p.upload_bytes, static_cast<std::size_t>(j.n - f * j.strip_rows) * j.row_bytes) << rep;
    }
  }
}

TEST(GramSplit, TimedSplitIsTheBestContiguousCut) {
  // Against every cut: the largest predicted share is the smallest any contiguous cut allows.
  std::mt19937_64 g(seed("gram split brute force"));
  for (int rep = 0; rep < 60; ++rep) {
    auto j = random_shape(g);
    j.strip_rows = std::max<std::int64_t>(1, j.n / (1 + static_cast<std::int64_t>(g() % 30)));
    const auto m = random_model(g);
    const std::int64_t S = strips_of(j);
    const auto cost = [&](std::int64_t a, std::int64_t b) { return sd::predict_share(j, m, a, b).seconds; };
    for (std::size_t parts : {std::size_t{1}, std::size_t{2}, std::size_t{3}}) {
      double best = std::numeric_limits<double>::infinity();
      if (parts == 1) best = cost(0, S);
      if (parts == 2)
        for (std::int64_t x = 0; x <= S; ++x) best = std::min(best, std::max(cost(0, x), cost(x, S)));
      if (parts == 3)
        for (std::int64_t x = 0; x <= S; ++x)
          for (std::int64_t y = x; y <= S; ++y)
            best = std::min(best, std::max({cost(0, x), cost(x, y), cost(y, S)}));
      const auto s = sd::make_gram_split_timed(j, m, parts);
      ASSERT_EQ(s.predicted.size(), parts);
      ASSERT_EQ(s.bounds.size(), parts + 1);
      EXPECT_EQ(s.bounds.front(), 0);
      EXPECT_EQ(s.bounds.back(), j.n);
      EXPECT_TRUE(std::is_sorted(s.bounds.begin(), s.bounds.end()));
      EXPECT_NEAR(max_seconds(s.predicted), best, 1e-9 * best) << "rep " << rep << " parts " << parts;
      // The parts cover every strip once, in order; the predictions are those of the parts.
      std::size_t next = 0;
      for (std::size_t q = 0; q < parts; ++q) {
        const auto& p = s.plan.parts[q];
        EXPECT_EQ(p.first, next);
        next = p.last;
        EXPECT_DOUBLE_EQ(s.predicted[q].seconds,
                         cost(static_cast<std::int64_t>(p.first), static_cast<std::int64_t>(p.last)));
        for (std::size_t t = p.first; t < p.last; ++t) EXPECT_EQ(s.plan.owner[t], q);
      }
      EXPECT_EQ(next, static_cast<std::size_t>(S));
      // Deterministic, and rebuilt alike from its cuts (what the other ranks get by broadcast).
      const auto again = sd::make_gram_split_timed(j, m, parts);
      EXPECT_EQ(again.bounds, s.bounds);
      std::vector<std::size_t> cuts;
      for (const auto& p : s.plan.parts) cuts.push_back(p.first);
      cuts.push_back(static_cast<std::size_t>(S));
      const auto rebuilt = sd::gram_split_from_cuts(j, m, cuts);
      EXPECT_EQ(rebuilt.bounds, s.bounds);
      EXPECT_EQ(rebuilt.strips, s.strips);
    }
  }
}

TEST(GramSplit, TheBenchJobGivesRankZeroFewerRowsThanPairsWould) {
  // Two ranks: by pairs rank 0 owns [0, 28672) and waits 34 ms for its panels before its first
  // product; by predicted seconds it owns fewer rows and the slower share is shorter.
  const auto j = bench_shape(sd::gram_sink::topk);
  const sd::gram_cost_model m;
  const auto by_pairs = sd::make_gram_split(j.n, j.strip_rows, 2, j.row_bytes);
  EXPECT_EQ(by_pairs.bounds, (std::vector<std::int64_t>{0, 28672, 100000}));
  const auto timed = sd::make_gram_split_timed(j, m, 2);
  EXPECT_LT(timed.bounds[1], by_pairs.bounds[1]);
  const double pairs_max = std::max(sd::predict_share(j, m, 0, 14).seconds, sd::predict_share(j, m, 14, 49).seconds);
  EXPECT_LT(max_seconds(timed.predicted), pairs_max);
  EXPECT_LT(timed.predicted_imbalance(), 1.05);
  EXPECT_EQ(by_pairs.predicted_imbalance(), 1.0);  // not predicted
  for (std::size_t parts : {4, 8}) {
    const auto t = sd::make_gram_split_timed(j, m, parts);
    const auto p = sd::make_gram_split(j.n, j.strip_rows, parts, j.row_bytes);
    double pm = 0;
    for (std::size_t q = 0; q < parts; ++q)
      pm = std::max(pm, sd::predict_share(j, m, static_cast<std::int64_t>(p.plan.parts[q].first),
                                          static_cast<std::int64_t>(p.plan.parts[q].last))
                            .seconds);
    EXPECT_LE(max_seconds(t.predicted), pm) << parts;
  }
}

TEST(GramSplit, EdgeShapesAndBadModels) {
  sd::gram_job_shape j;
  j.n = 0;
  j.cols = 10;
  j.strip_rows = 16;
  j.row_bytes = 4;
  const sd::gram_cost_model m;
  auto s = sd::make_gram_split_timed(j, m, 3);
  EXPECT_EQ(s.bounds, (std::vector<std::int64_t>{0, 0, 0, 0}));
  EXPECT_EQ(s.strips, 0);
  j.n = 17;  // two strips, four parts: two parts own nothing
  s = sd::make_gram_split_timed(j, m, 4);
  EXPECT_EQ(s.bounds.back(), 17);
  int empty = 0;
  for (int q = 0; q < 4; ++q) empty += s.rows_of(q) == 0 ? 1 : 0;
  EXPECT_EQ(empty, 2);
  EXPECT_EQ(s.owner(16), s.owner(16));
  EXPECT_THROW((void)sd::make_gram_split_timed(j, m, 0), spillway::logic_error);
  auto bad = m;
  bad.h2d_bytes_per_second = 0;
  EXPECT_THROW((void)sd::make_gram_split_timed(j, bad, 2), spillway::logic_error);
  bad = m;
  bad.strip_seconds = -1;
  EXPECT_THROW((void)sd::predict_share(j, bad, 0, 1), spillway::logic_error);
  j.strip_rows = 0;
  EXPECT_THROW((void)sd::predict_share(j, m, 0, 1), spillway::logic_error);
}

namespace {

// L disjoint candidate sets of each row (random values with many ties, distinct columns), each
// turned into its own sorted top-k list (−1 past its end), and the oracle: the first k of all.
template <class V>
void check_merge(std::mt19937_64& g, std::int64_t rows, int k, std::size_t L, bool larger) {
  std::vector<std::vector<V>> vals(L, std::vector<V>(static_cast<std::size_t>(rows * k), V{}));
  std::vector<std::vector<std::int64_t>> cols(L, std::vector<std::int64_t>(static_cast<std::size_t>(rows * k), -1));
  std::vector<V> want_v(static_cast<std::size_t>(rows * k), V{});
  std::vector<std::int64_t> want_c(static_cast<std::size_t>(rows * k), -1);
  const auto better = [larger](const std::pair<V, std::int64_t>& a, const std::pair<V, std::int64_t>& b) {
    return sp::detail::topk_better(larger, a.first, a.second, b.first, b.second);
  };
  for (std::int64_t i = 0; i < rows; ++i) {
    const auto n = static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(3 * k + 2));  // 0 .. 3k+1 candidates
    std::vector<std::pair<V, std::int64_t>> all;
    std::vector<std::vector<std::pair<V, std::int64_t>>> part(L);
    for (std::int64_t c = 0; c < n; ++c) {
      const auto v = static_cast<V>(static_cast<int>(g() % 7));  // ties on purpose
      const std::int64_t col = c * 3 + static_cast<std::int64_t>(g() % 3);
      all.emplace_back(v, col);
      part[g() % L].emplace_back(v, col);
    }
    std::sort(all.begin(), all.end(), better);
    for (std::size_t t = 0; t < std::min<std::size_t>(all.size(), static_cast<std::size_t>(k)); ++t) {
      want_v[static_cast<std::size_t>(i * k) + t] = all[t].first;
      want_c[static_cast<std::size_t>(i * k) + t] = all[t].second;
    }
    for (std::size_t q = 0; q < L; ++q) {
      std::sort(part[q].begin(), part[q].end(), better);
      for (std::size_t t = 0; t < std::min<std::size_t>(part[q].size(), static_cast<std::size_t>(k)); ++t) {
        vals[q][static_cast<std::size_t>(i * k) + t] = part[q][t].first;
        cols[q][static_cast<std::size_t>(i * k) + t] = part[q][t].second;
      }
    }
  }
  std::vector<const V*> vs;
  std::vector<const std::int64_t*> cs;
  for (std::size_t q = 0; q < L; ++q) {
    vs.push_back(vals[q].data());
    cs.push_back(cols[q].data());
  }
  // Into the first list's own storage, as an owner merges into its rows' lists.
  sd::merge_topk_lists<V>(rows, k, larger, vs, cs, vals[0].data(), cols[0].data());
  EXPECT_EQ(cols[0], want_c) << "rows " << rows << " k " << k << " lists " << L << (larger ? " larger" : " smaller");
  EXPECT_EQ(vals[0], want_v) << "rows " << rows << " k " << k << " lists " << L;
}

}  // namespace

TEST(TopkLists, MergeEqualsTheTopKOfAllCandidates) {
  std::mt19937_64 g(seed("topk lists merge"));
  for (const int k : {1, 2, 7, 32, 64})
    for (const std::size_t L : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{8}})
      for (const bool larger : {true, false}) {
        check_merge<std::int32_t>(g, 1 + static_cast<std::int64_t>(g() % 300), k, L, larger);
        check_merge<float>(g, 1 + static_cast<std::int64_t>(g() % 50), k, L, larger);
      }
  check_merge<double>(g, 0, 4, 2, true);  // no rows
  std::vector<const float*> v(2, nullptr);
  std::vector<const std::int64_t*> c(1, nullptr);
  EXPECT_THROW(sd::merge_topk_lists<float>(1, 1, true, v, c, nullptr, nullptr), spillway::logic_error);
}

TEST(TopkLists, MergeToStorageNoInputShares) {
  // An owner whose rows' lists lie past the front merges them to the front: rows [0, rows) of the
  // buffer, its input rows [rows, 2 rows); each thread count gives the same lists.
  std::mt19937_64 g(seed("topk lists merge to the front"));
  const std::int64_t rows = 1 + static_cast<std::int64_t>(g() % 2000);
  const int k = 8;
  const auto kk = static_cast<std::size_t>(k);
  const auto per = static_cast<std::size_t>(rows) * kk;
  std::vector<float> own(2 * per), other(per);
  std::vector<std::int64_t> own_c(2 * per, -7), other_c(per);
  for (std::int64_t i = 0; i < rows; ++i) {
    std::vector<std::pair<float, std::int64_t>> a, b;
    for (int t = 0; t < k; ++t) {
      a.emplace_back(static_cast<float>(g() % 50), 2 * (i * k + t));
      b.emplace_back(static_cast<float>(g() % 50), 2 * (i * k + t) + 1);
    }
    const auto better = [](const auto& x, const auto& y) { return x.first > y.first || (x.first == y.first && x.second < y.second); };
    std::sort(a.begin(), a.end(), better);
    std::sort(b.begin(), b.end(), better);
    for (int t = 0; t < k; ++t) {
      const auto e = static_cast<std::size_t>(i) * kk + static_cast<std::size_t>(t);
      own[per + e] = a[static_cast<std::size_t>(t)].first;
      own_c[per + e] = a[static_cast<std::size_t>(t)].second;
      other[e] = b[static_cast<std::size_t>(t)].first;
      other_c[e] = b[static_cast<std::size_t>(t)].second;
    }
  }
  // The reference: merged in place (row i into row i) on one thread.
  std::vector<float> ref_v(own.begin() + static_cast<std::ptrdiff_t>(per), own.end());
  std::vector<std::int64_t> ref_c(own_c.begin() + static_cast<std::ptrdiff_t>(per), own_c.end());
  sd::merge_topk_lists<float>(rows, k, true, {ref_v.data(), other.data()}, {ref_c.data(), other_c.data()},
                              ref_v.data(), ref_c.data(), 1);
  for (const int threads : {1, 2, 5}) {
    auto v = own;
    auto c = own_c;
    sd::merge_topk_lists<float>(rows, k, true, {v.data() + per, other.data()}, {c.data() + per, other_c.data()},
                                v.data(), c.data(), threads);
    EXPECT_TRUE(std::equal(ref_v.begin(), ref_v.end(), v.begin())) << "rows " << rows << " threads " << threads;
    EXPECT_TRUE(std::equal(ref_c.begin(), ref_c.end(), c.begin())) << "rows " << rows << " threads " << threads;
    // The input rows stay as they were.
    EXPECT_TRUE(std::equal(own_c.begin() + static_cast<std::ptrdiff_t>(per), own_c.end(), c.begin() + static_cast<std::ptrdiff_t>(per)));
  }
}

TEST(TopkLists, WireEntriesRoundTrip) {
  // The lists travel as (value, int32 column): the columns of an n < 2^31 job and the empty
  // places (-1) come back as they left.
  std::mt19937_64 g(seed("topk wire"));
  const std::int64_t count = 100000 + static_cast<std::int64_t>(g() % 1000);  // past the threaded cut
  std::vector<double> v(static_cast<std::size_t>(count));
  std::vector<std::int64_t> c(static_cast<std::size_t>(count));
  for (std::int64_t e = 0; e < count; ++e) {
    v[static_cast<std::size_t>(e)] = static_cast<double>(g() % 1000) / 7.0;
    c[static_cast<std::size_t>(e)] = g() % 5 == 0 ? -1 : static_cast<std::int64_t>(g() % 0x7FFFFFFFu);
  }
  EXPECT_EQ(sizeof(sd::topk_wire<float>), 8u);
  EXPECT_EQ(sizeof(sd::topk_wire<std::int32_t>), 8u);
  std::vector<sd::topk_wire<double>> w(static_cast<std::size_t>(count));
  sd::pack_topk_wire(v.data(), c.data(), count, w.data(), 3);
  // Read back as an owner's merge reads them.
  const sd::topk_list_ref<double> ref{nullptr, nullptr, w.data()};
  std::vector<double> v2(v.size(), -1.0);
  std::vector<std::int64_t> c2(c.size(), 42);
  for (std::int64_t e = 0; e < count; ++e) {
    v2[static_cast<std::size_t>(e)] = ref.value(static_cast<std::size_t>(e));
    c2[static_cast<std::size_t>(e)] = ref.col(static_cast<std::size_t>(e));
  }
  EXPECT_EQ(v2, v);
  EXPECT_EQ(c2, c);
  EXPECT_EQ(sizeof(sd::topk_wire<double>), spillway::pairwise::detail::topk_entry_size(sizeof(double)));
  EXPECT_EQ(sizeof(sd::topk_wire<float>), spillway::pairwise::detail::topk_entry_size(sizeof(float)));
  EXPECT_GE(sd::host_threads(1), 1);
  EXPECT_GE(sd::host_threads(1000000), 1);
  EXPECT_LE(sd::host_threads(2), sd::host_threads(1));
}

TEST(TopkLists, KeepRowsMovesThemToTheFront) {
  sp::topk_result<std::int32_t> r{5, 2, {0, 1, 10, 11, 20, 21, 30, 31, 40, 41}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}};
  sd::keep_topk_rows(r, 1, 4);
  EXPECT_EQ(r.rows, 3);
  EXPECT_EQ(r.values, (std::vector<std::int32_t>{10, 11, 20, 21, 30, 31}));
  EXPECT_EQ(r.indices, (std::vector<std::int64_t>{2, 3, 4, 5, 6, 7}));
  sd::keep_topk_rows(r, 0, 3);  // all of them: unchanged
  EXPECT_EQ(r.rows, 3);
  sd::keep_topk_rows(r, 3, 3);
  EXPECT_EQ(r.rows, 0);
  EXPECT_TRUE(r.values.empty());
  EXPECT_THROW(sd::keep_topk_rows(r, 0, 1), spillway::logic_error);
}

// ---- dealt strips: who computes a strip apart from who owns its rows ----------------------------

namespace {

// Every strip dealt once, parts' tasks ascending and consistent with plan.owner, the owners'
// bounds equal blocks.
void expect_valid_dealt(const sd::gram_split& s, std::size_t parts, const std::string& what) {
  ASSERT_EQ(s.plan.parts.size(), parts) << what;
  ASSERT_EQ(s.plan.owner.size(), static_cast<std::size_t>(s.strips)) << what;
  std::vector<int> seen(static_cast<std::size_t>(s.strips), 0);
  for (std::size_t q = 0; q < parts; ++q) {
    const auto& t = s.plan.parts[q].tasks;
    EXPECT_TRUE(std::is_sorted(t.begin(), t.end())) << what;
    for (const std::size_t I : t) {
      ++seen[I];
      EXPECT_EQ(s.plan.owner[I], q) << what;
    }
  }
  for (std::size_t I = 0; I < seen.size(); ++I) EXPECT_EQ(seen[I], 1) << what << " strip " << I;
  EXPECT_EQ(s.bounds, sd::equal_row_bounds(s.n, parts)) << what;
}

}  // namespace

TEST(GramDeal, CyclicAndSnakeDealInTheRunOrder) {
  // Seven strips run 6, 5, .., 0. Cyclic over three: 6→0, 5→1, 4→2, 3→0, 2→1, 1→2, 0→0.
  EXPECT_EQ(sd::deal_strips(7, 3, sd::strip_deal::cyclic), (std::vector<std::size_t>{0, 2, 1, 0, 2, 1, 0}));
  // Snake: 6→0, 5→1, 4→2, 3→2, 2→1, 1→0, 0→0.
  EXPECT_EQ(sd::deal_strips(7, 3, sd::strip_deal::snake), (std::vector<std::size_t>{0, 0, 1, 2, 2, 1, 0}));
  EXPECT_EQ(sd::deal_strips(4, 1, sd::strip_deal::cyclic), (std::vector<std::size_t>{0, 0, 0, 0}));
  EXPECT_TRUE(sd::deal_strips(0, 2, sd::strip_deal::snake).empty());
  EXPECT_THROW((void)sd::deal_strips(4, 0, sd::strip_deal::cyclic), spillway::logic_error);
  EXPECT_THROW((void)sd::deal_strips(4, 2, sd::strip_deal::greedy), spillway::logic_error);
  EXPECT_EQ(sd::equal_row_bounds(10, 3), (std::vector<std::int64_t>{0, 4, 7, 10}));
  EXPECT_EQ(sd::equal_row_bounds(2, 4), (std::vector<std::int64_t>{0, 1, 2, 2, 2}));
  // The split: rank 1 of two computes strips 2 and 0 of four and owns rows [50, 100).
  const auto s = sd::make_gram_split_dealt(100, 25, 2, sd::strip_deal::cyclic);
  expect_valid_dealt(s, 2, "cyclic 4 strips");
  EXPECT_EQ(s.deal, sd::strip_deal::cyclic);
  EXPECT_EQ(s.plan.parts[0].tasks, (std::vector<std::size_t>{1, 3}));
  EXPECT_EQ(s.plan.parts[1].tasks, (std::vector<std::size_t>{0, 2}));
  EXPECT_EQ(s.touched_from(0), 25);
  EXPECT_EQ(s.touched_from(1), 0);
  EXPECT_EQ(s.bounds, (std::vector<std::int64_t>{0, 50, 100}));
  // Both ranks' strips touch both blocks: each sends the other its lists.
  EXPECT_TRUE(s.lists_meet(0, 1));
  EXPECT_TRUE(s.lists_meet(1, 0));
  EXPECT_FALSE(s.lists_meet(0, 0));
  EXPECT_DOUBLE_EQ(s.plan.total_cost, 100.0 * 101.0 / 2.0);
}

TEST(GramDeal, PredictStripsIsPredictShareForARunAndOrderFree) {
  std::mt19937_64 g(seed("predict strips"));
  for (int rep = 0; rep < 100; ++rep) {
    const auto j = random_shape(g);
    const auto m = random_model(g);
    const std::int64_t S = strips_of(j);
    const std::int64_t f = static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(S + 1));
    const std::int64_t l = f + static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(S - f + 1));
    std::vector<std::int64_t> run;
    for (std::int64_t I = f; I < l; ++I) run.push_back(I);
    const auto a = sd::predict_share(j, m, f, l);
    std::shuffle(run.begin(), run.end(), g);
    const auto b = sd::predict_strips(j, m, run);
    EXPECT_DOUBLE_EQ(a.seconds, b.seconds) << rep;
    EXPECT_EQ(a.upload_bytes, b.upload_bytes) << rep;
    EXPECT_EQ(a.strips, static_cast<std::size_t>(l - f)) << rep;
  }
  sd::gram_job_shape j = bench_shape(sd::gram_sink::topk);
  EXPECT_THROW((void)sd::predict_strips(j, sd::gram_cost_model{}, {49}), spillway::logic_error);
}

TEST(GramDeal, ColumnsWithoutABarAreReadInFull) {
  // Four strips of P rows over two ranks, cyclic: rank 0 runs 3 then 1, rank 1 runs 2 then 0.
  // Rank 0's strip 1 meets columns of strip 2 it never had (P of them); rank 1's strip 2 those of
  // strip 3, its strip 0 those of strip 1. One rank running all four reads none in full.
  sd::gram_job_shape j;
  j.n = 400;
  j.strip_rows = 100;
  j.cols = 1000;
  j.row_bytes = 128;
  j.sink = sd::gram_sink::topk;
  const sd::gram_cost_model m;
  EXPECT_DOUBLE_EQ(sd::predict_strips(j, m, {3, 1}).full_column_bytes, 100.0 * 100.0 * 4.0);
  EXPECT_DOUBLE_EQ(sd::predict_strips(j, m, {2, 0}).full_column_bytes, 2.0 * 100.0 * 100.0 * 4.0);
  EXPECT_DOUBLE_EQ(sd::predict_share(j, m, 0, 4).full_column_bytes, 0.0);
  // Rank 1's strip 0 uploads panel 1 (its strip 2 uploaded panels 2 and 3): every panel once.
  EXPECT_EQ(sd::predict_strips(j, m, {2, 0}).upload_bytes, 400u * 128u);
  EXPECT_EQ(sd::predict_strips(j, m, {3, 1}).upload_bytes, 300u * 128u);
  j.sink = sd::gram_sink::triangle;
  EXPECT_DOUBLE_EQ(sd::predict_strips(j, m, {2, 0}).full_column_bytes, 0.0);
}

TEST(GramDeal, RandomDealsAreValidAndTheirListsBalance) {
  std::mt19937_64 g(seed("dealt splits"));
  for (int rep = 0; rep < 60; ++rep) {
    auto j = random_shape(g);
    j.sink = sd::gram_sink::topk;
    j.k = 1 + static_cast<int>(g() % 64);
    const auto m = random_model(g);
    const std::size_t parts = 1 + g() % 6;
    for (const auto d : {sd::strip_deal::cyclic, sd::strip_deal::snake, sd::strip_deal::greedy}) {
      const std::string what = std::string(sd::deal_name(d)) + " rep " + std::to_string(rep);
      const auto s = sd::make_gram_split_dealt(j, m, parts, d);
      expect_valid_dealt(s, parts, what);
      ASSERT_EQ(s.predicted.size(), parts) << what;
      double sent = 0, received = 0, pairs = 0;
      for (std::size_t q = 0; q < parts; ++q) {
        const auto& t = s.plan.parts[q].tasks;
        const auto p = sd::predict_strips(j, m, std::vector<std::int64_t>(t.begin(), t.end()));
        EXPECT_DOUBLE_EQ(s.predicted[q].seconds, p.seconds) << what;
        sent += s.predicted[q].sent_bytes;
        received += s.predicted[q].received_bytes;
        pairs += s.predicted[q].pairs;
        EXPECT_GE(s.predicted[q].after_seconds(), 0.0) << what;
      }
      EXPECT_DOUBLE_EQ(sent, received) << what;
      EXPECT_NEAR(pairs, static_cast<double>(j.n) * static_cast<double>(j.n + 1) / 2.0, 1e-6 * pairs + 1e-9) << what;
      // Rebuilt from the dealer and the bounds (another rank's, broadcast): the same split.
      std::vector<std::size_t> dealer(s.plan.owner.begin(), s.plan.owner.end());
      const auto again = sd::gram_split_from_deal(j, m, dealer, s.bounds, d);
      EXPECT_EQ(again.plan.owner, s.plan.owner) << what;
      EXPECT_DOUBLE_EQ(again.predicted_job_seconds(), s.predicted_job_seconds()) << what;
      if (parts == 1) {
        EXPECT_EQ(s.predicted[0].sent_bytes, 0.0) << what;  // one rank: nothing exchanged
        EXPECT_EQ(s.predicted[0].exchange_seconds, 0.0) << what;
      }
    }
  }
}

TEST(GramDeal, TheBenchJobIsFasterDealtOnTwoRanks) {
  // 100,000 x 200,000, top-32, two ranks: contiguous (by predicted seconds) rank 0 waits ~35 ms
  // for its panels; dealt cyclic no rank waits for more than two panels and the shares are
  // within a few per cent. The best split for top-k is a deal; the triangle keeps contiguous.
  auto j = bench_shape(sd::gram_sink::topk);
  const sd::gram_cost_model m;
  const auto timed = sd::make_gram_split_timed(j, m, 2);
  const auto cyc = sd::make_gram_split_dealt(j, m, 2, sd::strip_deal::cyclic);
  EXPECT_EQ(cyc.plan.parts[0].tasks.size(), 25u);
  EXPECT_EQ(cyc.plan.parts[0].tasks.back(), 48u);  // the first strip run, the narrowest
  EXPECT_GT(timed.predicted[0].first_upload_seconds, 0.03);
  for (const auto& p : cyc.predicted) EXPECT_LE(p.first_upload_seconds, 2.0 * 2048.0 * 25088.0 / 55e9 + 1e-12);
  EXPECT_LT(max_seconds(cyc.predicted), 0.93 * max_seconds(timed.predicted));
  EXPECT_LT(cyc.predicted_imbalance(), 1.03);
  EXPECT_LT(cyc.predicted_job_seconds(), timed.predicted_job_seconds());
  // Each rank sends the other the lists of its 50,000 rows: 50,000 x 32 x 8 bytes (int32 values,
  // int32 columns on the wire).
  EXPECT_DOUBLE_EQ(cyc.predicted[0].sent_bytes, 50000.0 * 32.0 * 8.0);
  // Longest first: the shares end within a narrow strip of each other (cyclic: 4 ms apart).
  const auto greedy = sd::make_gram_split_dealt(j, m, 2, sd::strip_deal::greedy);
  EXPECT_LT(greedy.predicted_imbalance(), 1.002);
  EXPECT_LT(std::abs(greedy.predicted[0].seconds - greedy.predicted[1].seconds), 0.5e-3);
  EXPECT_LT(greedy.predicted_job_seconds(), cyc.predicted_job_seconds());
  const auto best = sd::make_gram_split_best(j, m, 2);
  EXPECT_NE(best.deal, sd::strip_deal::contiguous);
  for (const auto d : {sd::strip_deal::cyclic, sd::strip_deal::snake, sd::strip_deal::greedy})
    EXPECT_LE(best.predicted_job_seconds(), sd::make_gram_split_dealt(j, m, 2, d).predicted_job_seconds());
  EXPECT_LE(best.predicted_job_seconds(), timed.predicted_job_seconds());
  // One rank: nothing to deal.
  EXPECT_EQ(sd::make_gram_split_best(j, m, 1).deal, sd::strip_deal::contiguous);
  j.sink = sd::gram_sink::triangle;
  EXPECT_EQ(sd::make_gram_split_best(j, m, 2).deal, sd::strip_deal::contiguous);
  // Printed for the record (docs/distributed.md).
  j.sink = sd::gram_sink::topk;
  for (std::size_t parts : {1, 2, 4}) {
    for (const auto d : {sd::strip_deal::contiguous, sd::strip_deal::cyclic, sd::strip_deal::snake,
                         sd::strip_deal::greedy}) {
      if (parts == 1 && d != sd::strip_deal::contiguous) continue;
      const auto s = d == sd::strip_deal::contiguous ? sd::make_gram_split_timed(j, m, parts)
                                                     : sd::make_gram_split_dealt(j, m, parts, d);
      double after = 0;
      for (const auto& p : s.predicted) after = std::max(after, p.after_seconds());
      std::printf("[ model    ] %zu rank(s) %-10s slowest share %.4f s, lists %.4f s, job %.4f s\n", parts,
                  sd::deal_name(d), max_seconds(s.predicted), after, s.predicted_job_seconds());
    }
  }
}
