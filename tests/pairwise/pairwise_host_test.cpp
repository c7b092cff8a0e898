// The pairwise layer on the host (no GPU, plain C++): the one planner of pair jobs, the host sinks
// every module's host implementation uses (top-k with ties, threshold, neighbour counts) and the
// triangle layouts (printed seeds). The float similarity's own host tests: tests/similarity/.
#include <spillway/gram/host_gram.hpp>
#include <spillway/pairwise/layout.hpp>
#include <spillway/pairwise/plan.hpp>
#include <spillway/pairwise/sinks.hpp>
#include <spillway/similarity/host_similarity.hpp>

#include <support/gpu_test.hpp>
#include <support/random_bits.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace {

namespace pw = spillway::pairwise;
namespace sim = spillway::similarity;

// The footprints the sinks give (pairwise/sinks/topk.cuh, dense.cuh: device code), as the data the
// planner reads.
pw::sink_footprint topk_footprint(int k, std::size_t out_bytes) {
  pw::sink_footprint f;
  f.mirror_candidates = true;
  f.bytes_per_row_per_slot = static_cast<std::size_t>(k) * pw::detail::topk_entry_size(out_bytes);
  return f;
}
pw::sink_footprint packed_footprint() {
  pw::sink_footprint f;
  f.scattered_layout = true;
  return f;
}

TEST(PairwisePlan, ResidentStreamedAndOnDevice) {
  pw::pair_plan_request r;
  r.rows_a = r.rows_b = 10000;
  r.row_bytes = 768 * 2;
  r.sink = topk_footprint(32, 4);
  r.budget_bytes = std::size_t{1} << 30;
  const pw::pair_plan p = pw::make_pair_plan(r, "test");
  EXPECT_TRUE(p.resident);
  EXPECT_EQ(p.panel_rows, 2048);
  EXPECT_EQ(p.resident_bytes, 10000u * 768u * 2u);
  EXPECT_EQ(p.topk_state_bytes, 10000u * 32u * 8u);
  EXPECT_EQ(p.buf_a, pw::pair_plan::none);
  EXPECT_EQ(p.buf_scratch, pw::pair_plan::none) << "top-k scores are written in place: no scratch";
  // A·Aᵀ top-k: a key per row for the mirrored side's bars, and per slot the candidate places of
  // the widest strip's columns.
  EXPECT_EQ(p.topk_bar_bytes, 10000u * 4u);
  ASSERT_NE(p.buf_cand, pw::pair_plan::none);
  EXPECT_EQ(p.slot_buffers[p.buf_cand], pw::detail::topk_mirror_bytes(2048, 10000, 4));
  // Counts (256-byte aligned), 16 places of 8 bytes per column, and per row a 32-bit hit mask per
  // lane per 1,024 values (10 chunks, one more for a row off a 16-byte boundary).
  EXPECT_EQ(pw::detail::topk_mirror_bytes(2048, 10000, 4),
            40192u + 10000u * static_cast<std::size_t>(pw::detail::topk_mirror_cap) * 8u + 2048u * 11u * 32u * 4u);
  {
    // Where the candidate area does not fit at a strip height, that height is planned without it
    // (every column group read in full) before the strips shrink.
    pw::pair_plan_request q = r;
    q.budget_bytes = pw::detail::plan_for(q, 2048, true, false).total_bytes();
    ASSERT_GT(pw::detail::plan_for(q, 2048, true, true).total_bytes(), q.budget_bytes);
    const pw::pair_plan c = pw::make_pair_plan(q, "test");
    EXPECT_EQ(c.panel_rows, 2048);
    EXPECT_EQ(c.buf_cand, pw::pair_plan::none);
    EXPECT_EQ(c.topk_bar_bytes, 0u);
  }
  EXPECT_LE(p.total_bytes(), r.budget_bytes);
  // Below the resident operand: streamed, two panel buffers per slot, still within the budget.
  r.budget_bytes = 12u << 20;
  const pw::pair_plan s = pw::make_pair_plan(r, "test");
  EXPECT_FALSE(s.resident);
  EXPECT_NE(s.buf_own, pw::pair_plan::none);
  EXPECT_NE(s.buf_stream, pw::pair_plan::none);
  EXPECT_LE(s.total_bytes(), r.budget_bytes);
  // Operands already on the device: never streamed, nothing resident to count, no A panel.
  r.operands_on_device = true;
  r.symmetric = false;
  r.budget_bytes = std::size_t{1} << 30;
  const pw::pair_plan d = pw::make_pair_plan(r, "test");
  EXPECT_TRUE(d.resident);
  EXPECT_EQ(d.resident_bytes, 0u);
  EXPECT_EQ(d.buf_a, pw::pair_plan::none);
  EXPECT_EQ(d.buf_cand, pw::pair_plan::none) << "A·Bᵀ has no mirrored side";
  EXPECT_EQ(d.topk_bar_bytes, 0u);
  // Dense triangle from a GEMM: one more P x W strip for the scatter.
  r.operands_on_device = false;
  r.symmetric = true;
  r.sink = packed_footprint();
  r.score_scratch = true;
  const pw::pair_plan t = pw::make_pair_plan(r, "test");
  ASSERT_NE(t.buf_scratch, pw::pair_plan::none);
  EXPECT_EQ(t.slot_buffers[t.buf_scratch], t.slot_buffers[0]);
  // Scores of 8 bytes: 8-byte score strips and 16-byte top-k entries.
  r.sink = topk_footprint(32, 8);
  r.score_scratch = false;
  r.out_bytes = 8;
  const pw::pair_plan e = pw::make_pair_plan(r, "test");
  EXPECT_EQ(e.slot_buffers[0], static_cast<std::size_t>(e.panel_rows) * 10000u * 8u);
  EXPECT_EQ(e.topk_state_bytes, 10000u * 32u * 16u);
  EXPECT_EQ(e.topk_bar_bytes, 10000u * 8u);
  EXPECT_EQ(e.slot_buffers[e.buf_cand], pw::detail::topk_mirror_bytes(static_cast<std::size_t>(e.panel_rows), 10000, 8));
  // Too small: the message starts with the job's name and states the minimum.
  r.budget_bytes = 1000;
  try {
    (void)pw::make_pair_plan(r, "similarity_topk");
    FAIL();
  } catch (const spillway::logic_error& ex) {
    const std::string w = ex.what();
    EXPECT_EQ(w.rfind("similarity_topk: ", 0), 0u) << w;
    EXPECT_NE(w.find("minimum"), std::string::npos) << w;
  }
}

TEST(PairwisePlan, SlotBytesAreWhatRunTasksAllocates) {
  // One rule: a planner's slot bytes are run_tasks' (each buffer at a 256-byte offset).
  std::mt19937_64 g(spillway::test::seed("slot bytes"));
  for (int trial = 0; trial < 50; ++trial) {
    pw::pair_plan p;
    const std::size_t n = 1 + g() % 7;
    for (std::size_t i = 0; i < n; ++i) p.slot_buffers.push_back(g() % 3 == 0 ? 0 : g() % 100000);
    std::vector<std::size_t> offsets;
    const std::size_t total = spillway::detail::slot_device_bytes(p.slot_buffers, &offsets);
    EXPECT_EQ(p.slot_bytes(), total);
    ASSERT_EQ(offsets.size(), n);
    std::size_t want = 0;
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_EQ(offsets[i], want);
      EXPECT_EQ(offsets[i] % spillway::detail::slot_buffer_alignment, 0u);
      want += (p.slot_buffers[i] + 255) / 256 * 256;
    }
    EXPECT_EQ(total, want);
  }
}

TEST(PairwisePlan, SeveralWorkersEndOnHeldStrips) {
  // One worker (and A·Bᵀ): the plain order. Several: every strip once, the descending run with
  // 2·workers strips a quarter of the way up held out to the end, narrower than a quarter of
  // the widest strip's width plus one panel.
  for (const std::int64_t strips : {1, 5, 31, 32, 49, 50, 200}) {
    for (const std::size_t workers : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{4}}) {
      pw::pair_plan p;
      p.strips = strips;
      p.hold_strips_for(workers, true);
      const std::string what = std::to_string(strips) + " strips, " + std::to_string(workers) + " workers";
      std::vector<std::int64_t> order;
      for (std::size_t t = 0; t < static_cast<std::size_t>(strips); ++t) order.push_back(p.strip_of_task(t, true));
      std::vector<std::int64_t> sorted = order;
      std::sort(sorted.begin(), sorted.end());
      for (std::int64_t i = 0; i < strips; ++i) ASSERT_EQ(sorted[static_cast<std::size_t>(i)], i) << what;
      const auto h = static_cast<std::int64_t>(2 * workers);
      if (workers == 1 || strips < 8 * h) {
        EXPECT_EQ(p.held_strips, 0) << what;
        for (std::int64_t t = 0; t < strips; ++t) EXPECT_EQ(order[static_cast<std::size_t>(t)], strips - 1 - t) << what;
        continue;
      }
      ASSERT_EQ(p.held_strips, h) << what;
      // The first task is still the last strip; strip 0 comes just before the held ones.
      EXPECT_EQ(order.front(), strips - 1) << what;
      EXPECT_EQ(order[static_cast<std::size_t>(strips - h - 1)], 0) << what;
      for (std::int64_t t = strips - h; t < strips; ++t) {
        const std::int64_t s = order[static_cast<std::size_t>(t)];
        EXPECT_LE(4 * (strips - s), strips + 3) << what << ": held strip " << s;  // ~ a quarter of the widest
        if (t > strips - h) {
          EXPECT_EQ(s, order[static_cast<std::size_t>(t - 1)] - 1) << what;
        }
      }
      // Everything before the held ones descends.
      for (std::int64_t t = 1; t < strips - h; ++t)
        EXPECT_LT(order[static_cast<std::size_t>(t)], order[static_cast<std::size_t>(t - 1)]) << what;
      // A·Bᵀ keeps strip t for task t whatever was held.
      EXPECT_EQ(p.strip_of_task(3, false), 3) << what;
    }
  }
}

TEST(PairwiseHostSinks, TopKTiesAndDiagonalAgainstBruteForce) {
  const auto seed = spillway::test::seed("PairwiseHostSinks.TopK");
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int> val(0, 5);  // few values: many ties
  const std::int64_t n = 57, m = 41;
  std::vector<int> s(static_cast<std::size_t>(n * m));
  for (auto& x : s) x = val(gen);
  for (bool larger : {true, false})
    for (bool sym : {false, true})
      for (bool diag : {false, true})
        for (int k : {1, 7, 64}) {
          const std::int64_t cols = sym ? n : m;
          std::vector<int> sq(static_cast<std::size_t>(n * cols));
          for (std::int64_t i = 0; i < n; ++i)
            for (std::int64_t j = 0; j < cols; ++j) sq[static_cast<std::size_t>(i * cols + j)] = s[static_cast<std::size_t>((i * cols + j) % (n * m))];
          const pw::topk_options o{k, diag};
          const auto r = pw::detail::host_topk<int>(n, sym, o, larger, [&](std::int64_t i, auto&& emit) {
            for (std::int64_t j = cols - 1; j >= 0; --j) emit(j, sq[static_cast<std::size_t>(i * cols + j)]);  // any order
          });
          for (std::int64_t i = 0; i < n; ++i) {
            std::vector<std::pair<int, std::int64_t>> all;
            for (std::int64_t j = 0; j < cols; ++j)
              if (!(sym && !diag && j == i)) all.emplace_back(sq[static_cast<std::size_t>(i * cols + j)], j);
            std::stable_sort(all.begin(), all.end(), [&](const auto& x, const auto& y) {
              return larger ? x.first > y.first : x.first < y.first;  // stable: ties keep the smaller column first
            });
            for (int t = 0; t < k; ++t) {
              if (t < static_cast<int>(all.size())) {
                ASSERT_EQ(r.index(i, t), all[static_cast<std::size_t>(t)].second) << i << "," << t;
                ASSERT_EQ(r.value(i, t), all[static_cast<std::size_t>(t)].first);
              } else {
                ASSERT_EQ(r.index(i, t), -1);
                ASSERT_EQ(r.value(i, t), 0);
              }
            }
          }
        }
}

// The one threshold rule (pw::detail::passes, host and device): a float score against the
// threshold rounded to float, so a score equal to the threshold as written passes; a threshold
// beyond float's range is an infinity; double and integer scores compare in double.
TEST(PairwiseHostSinks, ThresholdRuleComparesInTheScoresType) {
  using pw::detail::passes;
  const float seven_tenths = static_cast<float>(14.0 / 20.0);  // a Jaccard of 14/20 as a float score
  EXPECT_TRUE(passes(true, seven_tenths, 0.7));
  EXPECT_FALSE(passes(true, std::nextafter(seven_tenths, 0.0f), 0.7));
  EXPECT_TRUE(passes(false, seven_tenths, 0.7));  // distances: ≤
  EXPECT_FALSE(passes(false, std::nextafter(seven_tenths, 1.0f), 0.7));
  EXPECT_TRUE(passes(true, 14.0 / 20.0, 0.7));  // double: the same value
  EXPECT_FALSE(passes(true, std::nextafter(14.0 / 20.0, 0.0), 0.7));
  EXPECT_FALSE(passes(true, 3.0e38f, 1e300));  // beyond float's range: +inf, nothing passes
  EXPECT_TRUE(passes(false, 3.0e38f, 1e300));
  EXPECT_TRUE(passes(true, -3.0e38f, -1e300));
  EXPECT_TRUE(passes(true, std::int32_t{13}, 12.5));  // integers in double: 12 does not pass 12.5
  EXPECT_FALSE(passes(true, std::int32_t{12}, 12.5));
  EXPECT_FALSE(passes(true, std::nanf(""), 0.0));
}

// COO (sorted by row, then column) to CSR: row pointers over empty rows at either end, columns and
// values moved over; out-of-shape entries and unsorted rows refused naming the entry.
TEST(PairwiseHostSinks, CooToCsr) {
  pw::coo_result<float> c;
  c.row = {1, 1, 3, 3, 3};
  c.col = {0, 4, 1, 2, 4};
  c.value = {0.5f, 0.25f, 1.0f, 2.0f, 3.0f};
  const pw::csr_result<float> r = pw::to_csr(std::move(c), 5, 6);
  EXPECT_EQ(r.rows, 5);
  EXPECT_EQ(r.cols, 6);
  EXPECT_EQ(r.indptr, (std::vector<std::int64_t>{0, 0, 2, 2, 5, 5}));
  EXPECT_EQ(r.col, (std::vector<std::int64_t>{0, 4, 1, 2, 4}));
  EXPECT_EQ(r.value, (std::vector<float>{0.5f, 0.25f, 1.0f, 2.0f, 3.0f}));
  EXPECT_EQ(r.size(), 5u);
  const auto empty = pw::to_csr(pw::coo_result<double>{}, 3, 3);
  EXPECT_EQ(empty.indptr, (std::vector<std::int64_t>{0, 0, 0, 0}));
  auto refused = [](pw::coo_result<float> x, const char* says) {
    try {
      (void)pw::to_csr(std::move(x), 4, 4);
      ADD_FAILURE() << "accepted: " << says;
    } catch (const spillway::logic_error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused({{2, 1}, {0, 0}, {1.0f, 1.0f}}, "entry 1 of row 1 follows row 2");
  refused({{0, 4}, {0, 0}, {1.0f, 1.0f}}, "entry 1 at (4, 0) is outside the 4 x 4 matrix");
  refused({{0}, {-1}, {1.0f}}, "entry 0 at (0, -1)");
  refused({{0, 1}, {0}, {1.0f, 1.0f}}, "row, col and value have 2, 1 and 2 entries");
}

TEST(PairwiseHostSinks, ThresholdUpperBothHalvesAndDiagonal) {
  const std::int64_t n = 9;
  auto score = [](std::int64_t i, std::int64_t j) { return static_cast<double>((i * 7 + j * 7) % 10); };  // symmetric
  for (bool both : {false, true})
    for (bool diag : {false, true}) {
      pw::threshold_options o;
      o.threshold = 6;
      o.both_halves = both;
      o.include_diagonal = diag;
      const auto r = pw::detail::host_threshold<double>(n, true, o, true, [&](std::int64_t i, std::int64_t j0, auto&& emit) {
        for (std::int64_t j = j0; j < n; ++j) emit(j, score(i, j));
      });
      std::size_t q = 0;
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t j = both ? 0 : i; j < n; ++j) {
          if (i == j && !diag) continue;
          if (score(i, j) < 6) continue;
          ASSERT_LT(q, r.size());
          EXPECT_EQ(r.row[q], i);
          EXPECT_EQ(r.col[q], j);
          EXPECT_EQ(r.value[q], score(i, j));
          ++q;
        }
      EXPECT_EQ(q, r.size());
    }
}

TEST(PairwiseLayout, OffsetsMatchSciPyAndSquareform) {
  for (std::int64_t n : {0, 1, 2, 5, 17}) {
    std::vector<int> packed(static_cast<std::size_t>(pw::layout_size(pw::triangle_layout::upper_packed, n)));
    std::vector<int> cond(static_cast<std::size_t>(pw::layout_size(pw::triangle_layout::condensed, n)));
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = i; j < n; ++j) {
        packed[static_cast<std::size_t>(pw::packed_row_offset(n, i) + (j - i))] = static_cast<int>(100 * i + j);
        if (j > i) {
          const std::int64_t scipy = n * i - i * (i + 1) / 2 + (j - i - 1);
          EXPECT_EQ(pw::condensed_row_offset(n, i) + (j - i - 1), scipy);
          cond[static_cast<std::size_t>(scipy)] = static_cast<int>(100 * i + j);
        }
      }
    const auto a = pw::triangle_to_square(packed.data(), n, pw::triangle_layout::upper_packed);
    const auto b = pw::triangle_to_square(cond.data(), n, pw::triangle_layout::condensed, -1);
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        const int want = static_cast<int>(100 * std::min(i, j) + std::max(i, j));
        EXPECT_EQ(a[static_cast<std::size_t>(i * n + j)], want);
        EXPECT_EQ(b[static_cast<std::size_t>(i * n + j)], i == j ? -1 : want);
      }
  }
  // Gram's names are the pairwise layer's.
  static_assert(std::is_same_v<spillway::gram::triangle_layout, pw::triangle_layout>);
  static_assert(std::is_same_v<spillway::gram::topk_result<float>, pw::topk_result<float>>);
  static_assert(std::is_same_v<spillway::gram::coo_result<int>, pw::coo_result<int>>);
}

// The host neighbour counts (the entry points' fallback) count without building a COO: they must
// equal the per-row counts of the host threshold's COO (both halves, the diagonal as asked).
TEST(HostNeighbourCounts, EqualTheThresholdCooCountedPerRow) {
  namespace gr = spillway::gram;
  const auto count_rows = [](const auto& coo, std::int64_t rows) {
    std::vector<std::int64_t> n(static_cast<std::size_t>(rows), 0);
    for (const std::int64_t i : coo.row) ++n[static_cast<std::size_t>(i)];
    return n;
  };
  const auto seed = spillway::test::seed("HostNeighbourCounts");
  const std::int64_t n = 300, m = 170, cols = 200;
  const gr::bit_matrix a = gr::pack_bits(spillway::test::random_bit_bytes(n, cols, 0.3, seed), n, cols);
  const gr::bit_matrix b = gr::pack_bits(spillway::test::random_bit_bytes(m, cols, 0.3, seed + 1), m, cols);
  for (const bool diag : {false, true}) {
    const auto got = gr::host_gram_neighbour_counts<std::int32_t>(a.view(), {20.0, diag});
    EXPECT_EQ(got, count_rows(gr::host_gram_threshold<std::int32_t>(a.view(), {20.0, true, diag}), n));
    EXPECT_NE(*std::min_element(got.begin(), got.end()), *std::max_element(got.begin(), got.end()));
    // Hamming is a distance: pairs at most 50 bits apart.
    EXPECT_EQ(
        gr::host_gram_neighbour_counts<std::int32_t>(a.view(), {50.0, diag}, gr::metric::hamming),
        count_rows(gr::host_gram_threshold<std::int32_t>(a.view(), {50.0, true, diag}, gr::metric::hamming),
                   n));
  }
  EXPECT_EQ(
      gr::host_gram_neighbour_counts<float>(a.view(), b.view(), {0.18, false}, gr::metric::jaccard),
      count_rows(
          gr::host_gram_threshold<float>(a.view(), b.view(), {0.18, false, false}, gr::metric::jaccard), n));
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> rows(static_cast<std::size_t>(n * 16));
  for (auto& x : rows) x = nd(gen);
  const sim::matrix_view<const float> v{rows.data(), n, 16, 16};
  const auto cs = sim::host_similarity_neighbour_counts(v, {0.3, false});
  EXPECT_EQ(cs, count_rows(sim::host_similarity_threshold(v, {0.3, true, false}), n));
  EXPECT_NE(*std::min_element(cs.begin(), cs.end()), *std::max_element(cs.begin(), cs.end()));
}

}  // namespace
