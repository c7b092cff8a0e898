// Host side of the Gram module: packing (every input type, odd column counts, validation), the
// bit layout, unpack, popcounts, and the host reference products and sinks checked against a
// naive byte-by-byte definition.
#include <spillway/gram/bit_matrix.hpp>
#include <spillway/gram/host_gram.hpp>
#include <spillway/pairwise/plan.hpp>

#include <support/expect_throw.hpp>
#include <support/gpu_test.hpp>
#include <support/random_bits.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace spillway::gram;

// Some all-ones and all-zero rows among random rows.
std::vector<std::uint8_t> random_bits(std::int64_t rows, std::int64_t cols, double p, std::uint64_t seed) {
  auto v = spillway::test::random_bit_bytes(rows, cols, p, seed);
  spillway::test::plant_edge_rows(v, rows, cols, false);
  return v;
}

std::int32_t naive_count(const std::vector<std::uint8_t>& x, std::int64_t cols, std::int64_t i,
                         const std::vector<std::uint8_t>& y, std::int64_t j) {
  std::int32_t s = 0;
  for (std::int64_t c = 0; c < cols; ++c) s += x[static_cast<std::size_t>(i * cols + c)] & y[static_cast<std::size_t>(j * cols + c)];
  return s;
}

/// Rows whose Jaccard scores sit exactly on 0.7: three groups of four rows of 17 set bits, 40
/// columns apart; a row of a group is the one before it shifted by 3 columns, so neighbours share
/// 14 of 20 bits (7/10), rows two apart 11 of 23, three apart 8 of 26, groups nothing.
std::vector<std::uint8_t> rows_on_seven_tenths(std::int64_t n, std::int64_t cols) {
  std::vector<std::uint8_t> v(static_cast<std::size_t>(n * cols), 0);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t c = 0; c < 17; ++c)
      v[static_cast<std::size_t>(i * cols + 40 * (i / 4) + 3 * (i % 4) + c)] = 1;
  return v;
}

const std::vector<std::pair<std::int64_t, std::int64_t>> kShapes = {
    {1, 1}, {1, 7}, {13, 1}, {17, 31}, {31, 33}, {7, 64}, {37, 65}, {41, 255}, {23, 257}, {29, 1023}, {11, 1025}, {61, 2049}, {5, 0}};

TEST(PackBits, LayoutMatchesDefinitionForEveryShapeAndType) {
  const auto s = spillway::test::seed("pack-layout");
  for (auto [rows, cols] : kShapes) {
    const auto v = random_bits(rows, cols, 0.4, s + static_cast<std::uint64_t>(rows * 1000 + cols));
    const bit_matrix m = pack_bits(v, rows, cols);
    ASSERT_EQ(m.rows(), rows);
    ASSERT_EQ(m.cols(), cols);
    ASSERT_EQ(m.ld_words() % 32, 0);
    ASSERT_GE(m.ld_words() * 32, cols);
    ASSERT_EQ(reinterpret_cast<std::uintptr_t>(m.data()) % 128, 0u);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) {
        const bool bit = (m.row(r)[c / 32] >> (c % 32)) & 1u;
        ASSERT_EQ(bit, v[static_cast<std::size_t>(r * cols + c)] != 0) << rows << "x" << cols << " at " << r << "," << c;
      }
    EXPECT_TRUE(padding_is_zero(m.view()));
    EXPECT_EQ(unpack_bits(m.view()), v);
    // int8 and bool inputs pack identically.
    std::vector<std::int8_t> vi(v.begin(), v.end());
    std::unique_ptr<bool[]> vb(new bool[v.size() + 1]);
    for (std::size_t i = 0; i < v.size(); ++i) vb[i] = v[i] != 0;
    EXPECT_EQ(unpack_bits(pack_bits(vi.data(), rows, cols).view()), v);
    EXPECT_EQ(unpack_bits(pack_bits(vb.get(), rows, cols).view()), v);
    const auto pc = row_popcounts(m.view());
    for (std::int64_t r = 0; r < rows; ++r) {
      std::int32_t e = 0;
      for (std::int64_t c = 0; c < cols; ++c) e += v[static_cast<std::size_t>(r * cols + c)];
      ASSERT_EQ(pc[static_cast<std::size_t>(r)], e);
    }
  }
}

TEST(PackBits, StridedInputAndPaddedWords) {
  const auto s = spillway::test::seed("pack-strided");
  const std::int64_t rows = 19, cols = 70, ld = 101;
  std::vector<std::uint8_t> big(static_cast<std::size_t>(rows * ld), 7);  // junk between rows is ignored
  const auto v = random_bits(rows, cols, 0.5, s);
  for (std::int64_t r = 0; r < rows; ++r)
    std::copy_n(v.begin() + r * cols, cols, big.begin() + r * ld);
  EXPECT_EQ(unpack_bits(pack_bits(big.data(), rows, cols, ld).view()), v);
  EXPECT_EQ(padded_words(0), 32);
  EXPECT_EQ(padded_words(1), 32);
  EXPECT_EQ(padded_words(1024), 32);
  EXPECT_EQ(padded_words(1025), 64);
  EXPECT_EQ(padded_words(200000), 6272);
}

TEST(PackBits, RejectsNonBinaryNamingFirstBadEntry) {
  std::vector<std::uint8_t> v(5 * 40, 0);
  v[3 * 40 + 17] = 2;  // first in row-major order
  v[3 * 40 + 30] = 9;
  v[4 * 40 + 1] = 200;
  ASSERT_NO_FATAL_FAILURE(spillway::test::expect_throw_naming(
      [&] { (void)pack_bits(v, 5, 40); }, {"value 2", "row 3", "column 17"}));
  std::vector<std::int8_t> n(3 * 3, 0);
  n[5] = -1;
  try {
    (void)pack_bits(n.data(), 3, 3);
    FAIL() << "no exception";
  } catch (const spillway::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("value -1 at (row 1, column 2)"), std::string::npos) << e.what();
  }
  // nonzero_as_one accepts them.
  pack_options o;
  o.nonzero_as_one = true;
  const bit_matrix m = pack_bits(v.data(), 5, 40, 40, o);
  EXPECT_TRUE(m.get(3, 17));
  EXPECT_TRUE(m.get(3, 30));
  EXPECT_TRUE(m.get(4, 1));
  EXPECT_FALSE(m.get(4, 2));
  EXPECT_EQ(row_popcounts(m.view())[3], 2);
  const bit_matrix k = pack_bits(n.data(), 3, 3, 3, o);
  EXPECT_TRUE(k.get(1, 2));
  EXPECT_THROW((void)pack_bits(v.data(), -1, 4), spillway::logic_error);
  EXPECT_THROW((void)pack_bits(v.data(), 4, 40, 39), spillway::logic_error);
  EXPECT_THROW((void)pack_bits(v, 4, 40), spillway::logic_error);  // size mismatch
}

TEST(PackBits, Gather8IsExactForEveryByteCombination) {
  // Every 8-bit pattern spread over 8 bytes comes back as that pattern.
  for (unsigned p = 0; p < 256; ++p) {
    std::uint64_t x = 0;
    for (int k = 0; k < 8; ++k) x |= static_cast<std::uint64_t>((p >> k) & 1u) << (8 * k);
    ASSERT_EQ(spillway::gram::detail::gather8(x), p);
    // nonzero bytes (any value) map to 1
    std::uint64_t y = 0;
    for (int k = 0; k < 8; ++k) y |= static_cast<std::uint64_t>(((p >> k) & 1u) ? (0x80u | k) : 0u) << (8 * k);
    ASSERT_EQ(spillway::gram::detail::gather8(spillway::gram::detail::any_bit_per_byte(y)), p);
  }
}

// ---- host reference products -------------------------------------------------------------------

template <class OutT>
OutT naive_score(metric m, std::int32_t c, std::int32_t na, std::int32_t nb, score_options so) {
  switch (m) {
    case metric::counts: return static_cast<OutT>(c);
    case metric::hamming: return static_cast<OutT>(na + nb - 2 * c);
    case metric::jaccard: return na + nb - c == 0 ? static_cast<OutT>(so.jaccard_empty) : static_cast<OutT>(double(c) / double(na + nb - c));
    case metric::cosine: return (na == 0 || nb == 0) ? static_cast<OutT>(so.cosine_zero) : static_cast<OutT>(c / std::sqrt(double(na) * nb));
  }
  return OutT{};
}

template <class OutT>
void check_dense_all_layouts(metric m, std::uint64_t s) {
  score_options so;
  so.jaccard_empty = 0.25f;  // a non-default value, so the rule is visibly applied
  for (auto [rows, cols] : kShapes) {
    if (std::is_same_v<OutT, std::uint16_t> && cols > 65535) continue;
    const auto v = random_bits(rows, cols, 0.3, s + static_cast<std::uint64_t>(rows * 7 + cols));
    const bit_matrix a = pack_bits(v, rows, cols);
    std::vector<std::int32_t> pc(static_cast<std::size_t>(rows));
    for (std::int64_t r = 0; r < rows; ++r) pc[static_cast<std::size_t>(r)] = naive_count(v, cols, r, v, r);
    std::vector<OutT> full(static_cast<std::size_t>(rows * rows)), up(static_cast<std::size_t>(layout_size(triangle_layout::upper_packed, rows))),
        cond(static_cast<std::size_t>(layout_size(triangle_layout::condensed, rows)));
    host_gram_dense(a.view(), full.data(), triangle_layout::full, m, so);
    host_gram_dense(a.view(), up.data(), triangle_layout::upper_packed, m, so);
    host_gram_dense(a.view(), cond.data(), triangle_layout::condensed, m, so);
    std::size_t ui = 0, ci = 0;
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < rows; ++j) {
        const OutT e = naive_score<OutT>(m, naive_count(v, cols, i, v, j), pc[static_cast<std::size_t>(i)], pc[static_cast<std::size_t>(j)], so);
        ASSERT_EQ(full[static_cast<std::size_t>(i * rows + j)], e) << to_string(m) << " " << rows << "x" << cols << " (" << i << "," << j << ")";
        if (j >= i) {
          ASSERT_EQ(up[ui++], e);
          // offsets agree with sequential order
          ASSERT_EQ(packed_row_offset(rows, i) + (j - i), static_cast<std::int64_t>(ui - 1));
        }
        if (j > i) {
          ASSERT_EQ(condensed_row_offset(rows, i) + (j - i - 1), static_cast<std::int64_t>(ci));
          ASSERT_EQ(cond[ci++], e);
        }
      }
  }
}

TEST(HostGram, DenseLayoutsEveryMetricMatchNaive) {
  const auto s = spillway::test::seed("host-dense");
  check_dense_all_layouts<std::int32_t>(metric::counts, s);
  check_dense_all_layouts<std::uint16_t>(metric::counts, s + 1);
  check_dense_all_layouts<std::int32_t>(metric::hamming, s + 2);
  check_dense_all_layouts<float>(metric::jaccard, s + 3);
  check_dense_all_layouts<double>(metric::cosine, s + 4);
}

TEST(HostGram, GeneralABtMatchesNaiveAndRejectsMismatch) {
  const auto s = spillway::test::seed("host-abt");
  const std::int64_t ra = 23, rb = 41, cols = 333, ldc = 45;
  const auto va = random_bits(ra, cols, 0.5, s), vb = random_bits(rb, cols, 0.2, s + 1);
  const bit_matrix a = pack_bits(va, ra, cols), b = pack_bits(vb, rb, cols);
  std::vector<std::int32_t> out(static_cast<std::size_t>(ra * ldc), -7);
  host_gram_dense(a.view(), b.view(), out.data(), ldc);
  for (std::int64_t i = 0; i < ra; ++i) {
    for (std::int64_t j = 0; j < rb; ++j) ASSERT_EQ(out[static_cast<std::size_t>(i * ldc + j)], naive_count(va, cols, i, vb, j));
    for (std::int64_t j = rb; j < ldc; ++j) ASSERT_EQ(out[static_cast<std::size_t>(i * ldc + j)], -7);  // untouched
  }
  const bit_matrix c = pack_bits(random_bits(3, 334, 0.5, s), 3, 334);
  try {
    host_gram_dense(a.view(), c.view(), out.data(), ldc);
    FAIL();
  } catch (const spillway::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("333"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("334"), std::string::npos);
  }
  std::vector<float> f(4);
  EXPECT_THROW(host_gram_dense(a.view(), b.view(), f.data(), ldc, metric::counts), spillway::logic_error);
  const bit_matrix wide = pack_bits(random_bits(2, 70000, 0.5, s), 2, 70000);
  std::vector<std::uint16_t> u(4);
  EXPECT_THROW(host_gram_dense(wide.view(), u.data(), triangle_layout::full), spillway::logic_error);
}

template <class V>
void check_topk(metric m, bool diag, int k, std::int64_t rows, std::int64_t cols, std::uint64_t s) {
  const auto v = random_bits(rows, cols, 0.3, s);
  // Duplicate rows force ties that the column index must break.
  auto w = v;
  if (rows > 8) std::copy_n(w.begin() + 4 * cols, cols, w.begin() + 7 * cols);
  const bit_matrix a = pack_bits(w, rows, cols);
  topk_options o;
  o.k = k;
  o.include_diagonal = diag;
  const auto r = host_gram_topk<V>(a.view(), o, m);
  const bool larger = is_similarity(m);
  for (std::int64_t i = 0; i < rows; ++i) {
    std::vector<std::pair<V, std::int64_t>> all;
    for (std::int64_t j = 0; j < rows; ++j) {
      if (j == i && !diag) continue;
      all.emplace_back(naive_score<V>(m, naive_count(w, cols, i, w, j), naive_count(w, cols, i, w, i), naive_count(w, cols, j, w, j), {}), j);
    }
    std::stable_sort(all.begin(), all.end(), [&](auto& x, auto& y) { return larger ? x.first > y.first : x.first < y.first; });
    for (int t = 0; t < k; ++t) {
      if (t < static_cast<int>(all.size())) {
        ASSERT_EQ(r.index(i, t), all[static_cast<std::size_t>(t)].second) << "row " << i << " rank " << t;
        ASSERT_EQ(r.value(i, t), all[static_cast<std::size_t>(t)].first);
      } else {
        ASSERT_EQ(r.index(i, t), -1);
        ASSERT_EQ(r.value(i, t), V{});
      }
    }
  }
}

TEST(HostGram, TopKEveryMetricTiesAndDiagonal) {
  const auto s = spillway::test::seed("host-topk");
  check_topk<std::int32_t>(metric::counts, false, 5, 37, 100, s);
  check_topk<std::int32_t>(metric::counts, true, 64, 53, 17, s + 1);  // k > rows: padded with -1
  check_topk<std::int32_t>(metric::hamming, false, 3, 29, 65, s + 2);
  check_topk<float>(metric::jaccard, false, 7, 31, 200, s + 3);
  check_topk<float>(metric::cosine, true, 1, 19, 3, s + 4);
  const bit_matrix a = pack_bits(random_bits(4, 4, 0.5, s), 4, 4);
  topk_options o;
  o.k = 129;
  EXPECT_THROW((void)host_gram_topk<std::int32_t>(a.view(), o), spillway::logic_error);
  o.k = 0;
  EXPECT_THROW((void)host_gram_topk<std::int32_t>(a.view(), o), spillway::logic_error);
}

// A Jaccard of exactly the threshold passes: 14/20 at 0.7 (compared in double, the float score
// 0.699999988 fell below 0.69999999999999996 and the pair was dropped); the kept pairs are the
// ones the exact rational test 10·c ≥ 7·(a + b − c) keeps, for float and double scores.
TEST(HostGram, JaccardAtExactlyTheThresholdPasses) {
  const std::int64_t n = 12, cols = 128;
  const auto v = rows_on_seven_tenths(n, cols);
  const bit_matrix a = pack_bits(v, n, cols);
  threshold_options o;
  o.threshold = 0.7;
  std::vector<std::pair<std::int64_t, std::int64_t>> want;
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = i + 1; j < n; ++j) {
      const std::int64_t c = naive_count(v, cols, i, v, j);
      const std::int64_t u = naive_count(v, cols, i, v, i) + naive_count(v, cols, j, v, j) - c;
      if (10 * c >= 7 * u) want.emplace_back(i, j);
    }
  ASSERT_EQ(want.size(), 9u) << "three neighbours in each of three groups";
  const auto f = host_gram_threshold<float>(a.view(), o, metric::jaccard);
  const auto d = host_gram_threshold<double>(a.view(), o, metric::jaccard);
  for (const auto* r : {&f.row, &d.row}) ASSERT_EQ(r->size(), want.size());
  for (std::size_t t = 0; t < want.size(); ++t) {
    EXPECT_EQ(f.row[t], want[t].first);
    EXPECT_EQ(f.col[t], want[t].second);
    EXPECT_EQ(f.value[t], 0.7f);
    EXPECT_EQ(d.row[t], want[t].first);
    EXPECT_EQ(d.col[t], want[t].second);
  }
  // Distances the same way: Hamming of the neighbours is 6, kept at ≤ 6.
  o.threshold = 6;
  EXPECT_EQ(host_gram_threshold<std::int32_t>(a.view(), o, metric::hamming).size(), want.size());
}

TEST(HostGram, ThresholdBothHalvesSortedAndComplete) {
  const auto s = spillway::test::seed("host-threshold");
  const std::int64_t rows = 47, cols = 90;
  const auto v = random_bits(rows, cols, 0.4, s);
  const bit_matrix a = pack_bits(v, rows, cols);
  for (bool both : {false, true})
    for (bool diag : {false, true}) {
      threshold_options o;
      o.threshold = 16;
      o.both_halves = both;
      o.include_diagonal = diag;
      const auto r = host_gram_threshold<std::int32_t>(a.view(), o);
      std::size_t t = 0;
      for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < rows; ++j) {
          if (!both && j < i) continue;
          if (!diag && j == i) continue;
          const auto c = naive_count(v, cols, i, v, j);
          if (c < 16) continue;
          ASSERT_LT(t, r.size());
          ASSERT_EQ(r.row[t], i);
          ASSERT_EQ(r.col[t], j);
          ASSERT_EQ(r.value[t], c);
          ++t;
        }
      EXPECT_EQ(t, r.size());
      EXPECT_GT(t, 0u);
    }
  // Hamming keeps distances <= threshold.
  threshold_options o;
  o.threshold = 30;
  const auto h = host_gram_threshold<std::int32_t>(a.view(), o, metric::hamming);
  for (std::size_t t = 0; t < h.size(); ++t) EXPECT_LE(h.value[t], 30);
  EXPECT_GT(h.size(), 0u);
}

}  // namespace

namespace {
using namespace spillway::gram;

TEST(GramPlan, FitsBudgetAndPrefersResident) {
  // A Gram job's plan: the pair planner with the bit matrix's row bytes and a popcount per row.
  namespace pw = spillway::pairwise;
  pw::pair_plan_request r;
  r.rows_a = r.rows_b = 100000;
  r.row_bytes = static_cast<std::size_t>(padded_words(200000)) * 4u;
  r.aux_bytes = 4;
  r.sink.scattered_layout = true;  // the packed triangle's footprint (pairwise/sinks/dense.cuh)
  r.budget_bytes = std::size_t{8} << 30;
  const pw::pair_plan g = pw::make_pair_plan(r, "gram");
  EXPECT_TRUE(g.resident);
  EXPECT_LE(g.total_bytes(), r.budget_bytes);
  EXPECT_EQ(g.strips, (100000 + g.panel_rows - 1) / g.panel_rows);
  EXPECT_GE(g.panel_rows, 1024);
  // A budget far too small for A streams it in panels, still within budget, with many strips.
  r.rows_a = r.rows_b = 1000;
  r.row_bytes = 640 * 4;  // A is 2.56 MB
  r.budget_bytes = 1500000;
  const pw::pair_plan s = pw::make_pair_plan(r, "gram");
  EXPECT_FALSE(s.resident);
  EXPECT_LE(s.total_bytes(), r.budget_bytes);
  EXPECT_GE(s.strips, 9);
  // Far too small: logic_error with the minimum.
  r.budget_bytes = 1000;
  try {
    (void)pw::make_pair_plan(r, "gram");
    FAIL();
  } catch (const spillway::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("minimum"), std::string::npos);
  }
  // max_panel_rows is honoured; top-k state is counted per slot.
  r.budget_bytes = std::size_t{1} << 30;
  r.max_panel_rows = 100;
  r.sink = pw::sink_footprint{};  // top-k's (pairwise/sinks/topk.cuh): lists of 32 int32 entries per slot
  r.sink.mirror_candidates = true;
  r.sink.bytes_per_row_per_slot = 32u * pw::detail::topk_entry_size(4);
  const pw::pair_plan t = pw::make_pair_plan(r, "gram");
  EXPECT_EQ(t.panel_rows, 100);
  EXPECT_EQ(t.strips, 10);
  EXPECT_EQ(t.topk_state_bytes, 1000u * 32u * 8u);
  EXPECT_GE(t.shared_bytes, t.slots * t.topk_state_bytes);
}
}  // namespace
