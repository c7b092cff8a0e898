// The Gram module's public API on the GPU: device packing, every layout/epilogue/sink against the
// host implementation on random inputs (printed seeds), every kernel path forced, A·Bᵀ, resident
// and streamed operands (≥ 9 strips), several devices, an output past 2^31 entries, bad inputs.
#include <spillway/gram.cuh>

#include <support/gpu_test.hpp>
#include <support/random_bits.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace spillway;
using namespace spillway::gram;

// An all-ones row, an all-zero row, and a duplicate (ties) among random rows.
std::vector<std::uint8_t> random_bits(std::int64_t rows, std::int64_t cols, double p, std::uint64_t seed) {
  auto v = spillway::test::random_bit_bytes(rows, cols, p, seed);
  spillway::test::plant_edge_rows(v, rows, cols, true);
  return v;
}

std::vector<kernel_path> runnable_paths() {
  std::vector<kernel_path> v;
  for (kernel_path p : {kernel_path::popc, kernel_path::mma_sync, kernel_path::wgmma}) {
    try {
      (void)spillway::gram::detail::resolve_path(p, current_device());
      v.push_back(p);
    } catch (const spillway::logic_error&) {
    }
  }
  return v;
}

template <class T>
void poison(std::vector<T>& v) {
  std::memset(static_cast<void*>(v.data()), 0xFF, v.size() * sizeof(T));
}

const std::vector<std::pair<std::int64_t, std::int64_t>> kShapes = {
    {1, 1}, {13, 1}, {3, 2049}, {97, 257}, {131, 1031}, {257, 65}, {300, 64}, {211, 4099}};

TEST(GramDevicePackGpu, MatchesHostPackAndRejectsBadValues) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = test::seed("gram-device-pack");
  spillway::stream s;
  for (auto [rows, cols] : kShapes) {
    const auto v = random_bits(rows, cols, 0.5, seed + static_cast<std::uint64_t>(rows + cols));
    device_buffer<std::uint8_t> d(v.size(), s.view());
    d.copy_from_host_async({v.data(), v.size()}, s.view());
    const device_bit_matrix m = pack_bits_device(d.data(), rows, cols, cols, s.view());
    const bit_matrix h = download(m, s.view());
    EXPECT_EQ(unpack_bits(h.view()), v) << rows << "x" << cols;
    EXPECT_TRUE(padding_is_zero(h.view()));
    const bit_matrix ref = pack_bits(v, rows, cols);
    ASSERT_EQ(0, std::memcmp(h.data(), ref.data(), ref.size_bytes()));
  }
  std::vector<std::uint8_t> bad(7 * 45, 0);
  bad[5 * 45 + 33] = 3;
  bad[6 * 45 + 1] = 2;
  device_buffer<std::uint8_t> d(bad.size(), s.view());
  d.copy_from_host_async({bad.data(), bad.size()}, s.view());
  try {
    (void)pack_bits_device(d.data(), 7, 45, 45, s.view());
    FAIL() << "no exception";
  } catch (const spillway::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("value 3 at (row 5, column 33)"), std::string::npos) << e.what();
  }
  const bit_matrix h = download(pack_bits_async(d.data(), 7, 45, 45, s.view()), s.view());
  EXPECT_TRUE(h.get(5, 33));
  EXPECT_TRUE(h.get(6, 1));
  EXPECT_FALSE(h.get(6, 2));
}

template <class OutT>
void check_dense(metric m, kernel_path path, std::int64_t rows, std::int64_t cols, std::int64_t max_panel, std::uint64_t seed,
                 std::optional<memory_budget> budget = std::nullopt, gram_report* rep = nullptr) {
  const auto v = random_bits(rows, cols, 0.35, seed);
  const bit_matrix a = pack_bits(v, rows, cols);
  score_options so;
  so.jaccard_empty = 0.5f;
  gram_options o;
  o.epilogue = m;
  o.scores = so;
  o.path = path;
  o.max_panel_rows = max_panel;
  o.budget = budget;
  o.report = rep;
  for (triangle_layout l : {triangle_layout::full, triangle_layout::upper_packed, triangle_layout::condensed}) {
    const auto n = static_cast<std::size_t>(layout_size(l, rows));
    std::vector<OutT> want(n), got(n);
    host_gram_dense(a.view(), want.data(), l, m, so);
    poison(got);
    gram_dense(a.view(), got.data(), l, o);
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(got[i], want[i]) << to_string(m) << " " << to_string(l) << " path " << to_string(path) << " " << rows
                                 << "x" << cols << " panel " << max_panel << " element " << i;
    }
  }
}

TEST(GramDenseGpu, EveryLayoutEveryPathMatchesHost) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = test::seed("gram-dense-paths");
  const auto paths = runnable_paths();
  ASSERT_FALSE(paths.empty());
  const auto props = get_device_properties(current_device());
  if (props.compute_capability() >= 80) EXPECT_GE(paths.size(), 2u);
  for (kernel_path p : paths) {
    for (auto [rows, cols] : kShapes) {
      check_dense<std::int32_t>(metric::counts, p, rows, cols, 0, seed + static_cast<std::uint64_t>(rows * 31 + cols));
      check_dense<std::int32_t>(metric::counts, p, rows, cols, 64, seed + 1);  // several strips
    }
  }
}

TEST(GramDenseGpu, EveryEpilogue) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = test::seed("gram-dense-epilogues");
  for (auto [rows, cols] : std::vector<std::pair<std::int64_t, std::int64_t>>{{61, 33}, {251, 1000}, {130, 65537}}) {
    if (cols <= 65535) check_dense<std::uint16_t>(metric::counts, kernel_path::automatic, rows, cols, 96, seed);
    check_dense<std::int32_t>(metric::hamming, kernel_path::automatic, rows, cols, 96, seed + 1);
    check_dense<float>(metric::jaccard, kernel_path::automatic, rows, cols, 0, seed + 2);
    check_dense<float>(metric::cosine, kernel_path::automatic, rows, cols, 50, seed + 3);
    check_dense<double>(metric::jaccard, kernel_path::automatic, rows, cols, 0, seed + 4);
  }
}

TEST(GramDenseGpu, StreamedUnderSmallBudgetNinePlusStrips) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = test::seed("gram-streamed");
  // 600 rows x 40,000 cols: A is 600 x 5,120 B = 3 MB; a 1.5 MB budget cannot hold it beside the slots.
  gram_report rep;
  check_dense<std::int32_t>(metric::counts, kernel_path::automatic, 600, 40000, 0, seed, memory_budget(1500000), &rep);
  EXPECT_FALSE(rep.plan.resident);
  EXPECT_GE(rep.plan.strips, 9);
  EXPECT_LE(rep.plan.total_bytes(), 1500000u);
  EXPECT_TRUE(rep.job.complete());
  check_dense<float>(metric::jaccard, kernel_path::automatic, 600, 40000, 0, seed + 1, memory_budget(1500000), &rep);
  EXPECT_GE(rep.plan.strips, 9);
  EXPECT_FALSE(rep.plan.resident);
}

TEST(GramDenseGpu, GeneralABtResidentAndStreamed) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = test::seed("gram-abt");
  const std::int64_t ra = 173, rb = 389, cols = 20000, ldc = 401;  // B is 1 MB
  const auto va = random_bits(ra, cols, 0.3, seed), vb = random_bits(rb, cols, 0.6, seed + 1);
  const bit_matrix a = pack_bits(va, ra, cols), b = pack_bits(vb, rb, cols);
  for (metric m : {metric::counts, metric::hamming}) {
    std::vector<std::int32_t> want(static_cast<std::size_t>(ra * ldc), 0), got(want.size());
    host_gram_dense(a.view(), b.view(), want.data(), ldc, m);
    for (auto budget : {std::size_t{1} << 30, std::size_t{800000}}) {
      for (std::int64_t i = 0; i < ra; ++i) std::fill_n(got.begin() + i * ldc, ldc, -12345);
      gram_options o;
      o.epilogue = m;
      o.budget = memory_budget(budget);
      o.max_panel_rows = 40;
      gram_report rep;
      o.report = &rep;
      gram_dense(a.view(), b.view(), got.data(), ldc, o);
      EXPECT_EQ(rep.plan.resident, budget > 1000000);
      for (std::int64_t i = 0; i < ra; ++i) {
        for (std::int64_t j = 0; j < rb; ++j) ASSERT_EQ(got[i * ldc + j], want[i * ldc + j]) << i << "," << j;
        for (std::int64_t j = rb; j < ldc; ++j) ASSERT_EQ(got[i * ldc + j], -12345) << "padding column written";
      }
    }
  }
  std::vector<float> f(static_cast<std::size_t>(ra * rb));
  std::vector<float> fw(f.size());
  gram_options o;
  o.epilogue = metric::cosine;
  gram_dense(a.view(), b.view(), f.data(), rb, o);
  host_gram_dense(a.view(), b.view(), fw.data(), rb, metric::cosine);
  EXPECT_EQ(f, fw);
}

template <class V>
void check_topk(const bit_matrix& a, const topk_options& k, gram_options o, const char* what) {
  const auto got = gram_topk<V>(a.view(), k, o);
  const auto want = host_gram_topk<V>(a.view(), k, o.epilogue, o.scores);
  ASSERT_EQ(got.rows, want.rows);
  for (std::size_t i = 0; i < want.indices.size(); ++i) {
    ASSERT_EQ(got.indices[i], want.indices[i]) << what << " row " << i / static_cast<std::size_t>(k.k) << " rank " << i % static_cast<std::size_t>(k.k);
    ASSERT_EQ(got.values[i], want.values[i]) << what << " at " << i;
  }
}

TEST(GramTopKGpu, EveryMetricDiagonalOptionsAndStrips) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = test::seed("gram-topk");
  const auto v = random_bits(517, 700, 0.3, seed);
  const bit_matrix a = pack_bits(v, 517, 700);
  for (int kk : {1, 7, 32, 64, 100, 128}) {
    for (bool diag : {false, true}) {
      topk_options k;
      k.k = kk;
      k.include_diagonal = diag;
      gram_options o;
      o.max_panel_rows = 64;
      check_topk<std::int32_t>(a, k, o, "counts");
      o.epilogue = metric::hamming;
      check_topk<std::int32_t>(a, k, o, "hamming");
      o.epilogue = metric::jaccard;
      o.max_panel_rows = 0;
      check_topk<float>(a, k, o, "jaccard");
      o.epilogue = metric::cosine;
      o.budget = memory_budget(3000000);  // streamed
      check_topk<float>(a, k, o, "cosine streamed");
    }
  }
  // k larger than the candidates: padded with -1.
  const bit_matrix small = pack_bits(random_bits(5, 9, 0.5, seed), 5, 9);
  topk_options k;
  k.k = 10;
  check_topk<std::int32_t>(small, k, gram_options{}, "k > rows");
  // A·Bᵀ
  const bit_matrix b = pack_bits(random_bits(300, 700, 0.5, seed + 9), 300, 700);
  k.k = 16;
  gram_options o;
  o.max_panel_rows = 100;
  const auto got = gram_topk<std::int32_t>(a.view(), b.view(), k, o);
  const auto want = host_gram_topk<std::int32_t>(a.view(), b.view(), k);
  EXPECT_EQ(got.indices, want.indices);
  EXPECT_EQ(got.values, want.values);
}

// Strips wider than 1,024 columns, so that the row lists take their 16-byte loads (and, with n
// not a multiple of 4, rows that start off a 16-byte boundary), on every path: raw counts reach
// the score strip through the tile kernels' bulk-store epilogue where the strip's pitch is a
// multiple of 16 bytes (n = 2,600) and per element elsewhere (n = 2,601), the lower half of the
// diagonal block mirrored either way. Hamming scores the same strips through the per-element
// epilogue.
TEST(GramTopKGpu, WideStripsEveryPathMatchHost) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = test::seed("gram-topk-wide");
  const auto paths = runnable_paths();
  ASSERT_FALSE(paths.empty());
  int round = 0;
  for (std::int64_t n : {2600, 2601}) {
    const bit_matrix a = pack_bits(random_bits(n, 1500, 0.4, seed + static_cast<std::uint64_t>(n)), n, 1500);
    for (kernel_path p : paths) {
      topk_options k;
      k.k = round % 3 == 0 ? 32 : (round % 3 == 1 ? 64 : 5);
      k.include_diagonal = round % 2 == 1;
      ++round;
      gram_options o;
      o.path = p;
      o.max_panel_rows = 256;
      const std::string what = "n " + std::to_string(n) + " path " + to_string(p) + " k " + std::to_string(k.k) +
                               (k.include_diagonal ? " with diagonal" : "");
      check_topk<std::int32_t>(a, k, o, (what + " counts").c_str());
      if (p == paths.back()) {
        o.epilogue = metric::hamming;
        check_topk<std::int32_t>(a, k, o, (what + " hamming").c_str());
      }
    }
  }
}

// The mirrored side of A·Aᵀ top-k: the rows pass proposes, per column, the values that reach
// the column's bar, and only columns whose candidates overflow (bars still empty or masses of
// ties) are read in full. Random rows over many strips take the proposals almost everywhere;
// identical rows (every score tied) overflow every column group. Both against the host, for a
// larger-is-better and a smaller-is-better metric and for 4- and 8-byte scores.
TEST(GramTopKGpu, MirroredCandidatesAndFullColumns) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = test::seed("gram-topk-mirror");
  const std::int64_t n = 3000, cols = 3000, P = 128;
  std::int64_t groups = 0;  // column groups of the mirrored side over every strip
  for (std::int64_t i0 = 0; i0 < n; i0 += P) groups += (n - std::min(i0 + P, n) + 31) / 32;
  const bit_matrix a = pack_bits(random_bits(n, cols, 0.5, seed), n, cols);
  for (int kk : {32, 64, 128}) {
    topk_options k;
    k.k = kk;
    gram_options o;
    o.max_panel_rows = P;
    gram_report rep;
    o.report = &rep;
    check_topk<std::int32_t>(a, k, o, "counts");
    ASSERT_EQ(rep.plan.panel_rows, P);
    EXPECT_GE(rep.topk_full_column_groups, 0);
    // k ≤ 64: most columns' lists fill in their first strip, so their bars filter. With 128 places
    // and strips of 128 rows a list is full only after it, and most groups are read in full (the
    // lists are still checked: correctness does not depend on the bars).
    const bool bars_filter = kk <= 64;
    if (bars_filter)
      EXPECT_LT(rep.topk_full_column_groups, groups / 2)
          << "random rows: most column groups should take only their proposed candidates (of " << groups
          << ")";
    std::printf("k %d: %lld of %lld column groups read in full\n", kk,
                static_cast<long long>(rep.topk_full_column_groups), static_cast<long long>(groups));
    o.epilogue = metric::hamming;  // smaller is better
    check_topk<std::int32_t>(a, k, o, "hamming");
    if (bars_filter) EXPECT_LT(rep.topk_full_column_groups, groups / 2);
    o.epilogue = metric::cosine;
    check_topk<double>(a, k, o, "cosine double");
    o.epilogue = metric::jaccard;
    check_topk<float>(a, k, o, "jaccard");
  }
  // Every row the same: every score ties, every column's candidates overflow.
  std::vector<std::uint8_t> same = random_bits(1, cols, 0.5, seed + 1);
  std::vector<std::uint8_t> rows(static_cast<std::size_t>(n * cols));
  for (std::int64_t i = 0; i < n; ++i) std::copy(same.begin(), same.end(), rows.begin() + i * cols);
  const bit_matrix t = pack_bits(rows, n, cols);
  topk_options k;
  k.k = 32;
  gram_options o;
  o.max_panel_rows = P;
  gram_report rep;
  o.report = &rep;
  check_topk<std::int32_t>(t, k, o, "all tied");
  EXPECT_EQ(rep.topk_full_column_groups, groups);
}

// On the device as on the host: a Jaccard of exactly the threshold (14/20 at 0.7) passes, in the
// threshold sink and the neighbour counts.
TEST(GramThresholdGpu, JaccardAtExactlyTheThresholdPasses) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const std::int64_t n = 12, cols = 128;
  std::vector<std::uint8_t> v(static_cast<std::size_t>(n * cols), 0);
  for (std::int64_t i = 0; i < n; ++i)  // as tests/gram/host_gram_test.cpp's rows_on_seven_tenths
    for (std::int64_t c = 0; c < 17; ++c)
      v[static_cast<std::size_t>(i * cols + 40 * (i / 4) + 3 * (i % 4) + c)] = 1;
  const bit_matrix a = pack_bits(v, n, cols);
  threshold_options t;
  t.threshold = 0.7;
  gram_options o;
  o.epilogue = metric::jaccard;
  o.max_panel_rows = 5;
  const auto got = gram_threshold<float>(a.view(), t, o);
  const auto want = host_gram_threshold<float>(a.view(), t, metric::jaccard);
  ASSERT_EQ(want.size(), 9u);
  EXPECT_EQ(got.row, want.row);
  EXPECT_EQ(got.col, want.col);
  EXPECT_EQ(got.value, want.value);
  for (const float x : got.value) EXPECT_EQ(x, 0.7f);
  spillway::pairwise::neighbour_count_options nc;
  nc.threshold = 0.7;
  const auto counts = gram_neighbour_counts<float>(a.view(), nc, o);
  ASSERT_EQ(counts.size(), static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    EXPECT_EQ(counts[static_cast<std::size_t>(i)], (i % 4 == 0 || i % 4 == 3) ? 1 : 2) << "row " << i;
}

TEST(GramThresholdGpu, UpperAndBothHalvesMatchHost) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = test::seed("gram-threshold");
  const auto v = random_bits(389, 300, 0.3, seed);
  const bit_matrix a = pack_bits(v, 389, 300);
  for (bool both : {false, true})
    for (bool diag : {false, true}) {
      threshold_options t;
      t.threshold = 30;
      t.both_halves = both;
      t.include_diagonal = diag;
      gram_options o;
      o.max_panel_rows = 50;
      const auto got = gram_threshold<std::int32_t>(a.view(), t, o);
      const auto want = host_gram_threshold<std::int32_t>(a.view(), t);
      ASSERT_GT(want.size(), 100u);
      EXPECT_EQ(got.row, want.row);
      EXPECT_EQ(got.col, want.col);
      EXPECT_EQ(got.value, want.value);
      threshold_options tj = t;
      tj.threshold = 0.3;
      o.epilogue = metric::jaccard;
      const auto gj = gram_threshold<float>(a.view(), tj, o);
      const auto wj = host_gram_threshold<float>(a.view(), tj, metric::jaccard);
      EXPECT_EQ(gj.row, wj.row);
      EXPECT_EQ(gj.col, wj.col);
      EXPECT_EQ(gj.value, wj.value);
    }
  const bit_matrix b = pack_bits(random_bits(77, 300, 0.5, seed + 1), 77, 300);
  threshold_options t;
  t.threshold = 150;
  gram_options o;
  o.epilogue = metric::hamming;
  const auto got = gram_threshold<std::int32_t>(a.view(), b.view(), t, o);
  const auto want = host_gram_threshold<std::int32_t>(a.view(), b.view(), t, metric::hamming);
  ASSERT_GT(want.size(), 10u);
  EXPECT_EQ(got.row, want.row);
  EXPECT_EQ(got.col, want.col);
  EXPECT_EQ(got.value, want.value);
}

// gram_threshold_csr is gram_threshold's result as CSR (indptr over every row, columns ascending),
// and both keep the host's pairs whether the vectors sized ahead under the products hold the result
// or not: the strips' kept entries extrapolated from the first 60% of the work. Rows ordered by
// density (sparse first, dense last) make the extrapolation fall short (the vectors are dropped and
// sized again); random rows and the reverse order let them hold it.
TEST(GramThresholdGpu, CsrAndSizedAheadEqualTheHost) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = test::seed("gram-threshold-csr");
  const std::int64_t n = 1500, cols = 512;
  std::mt19937_64 g(seed);
  for (int order = 0; order < 3; ++order) {
    // order 0: density rising with the row, 1: falling, 2: random rows of one density.
    std::vector<std::uint8_t> v(static_cast<std::size_t>(n * cols));
    for (std::int64_t i = 0; i < n; ++i) {
      const double f = static_cast<double>(i) / static_cast<double>(n - 1);
      const double p = order == 0 ? 0.05 + 0.5 * f : order == 1 ? 0.55 - 0.5 * f : 0.3;
      std::bernoulli_distribution bit(p);
      for (std::int64_t c = 0; c < cols; ++c) v[static_cast<std::size_t>(i * cols + c)] = bit(g) ? 1 : 0;
    }
    const bit_matrix a = pack_bits(v, n, cols);
    for (bool both : {false, true}) {
      threshold_options t;
      t.threshold = 0.25;
      t.both_halves = both;
      gram_options o;
      o.epilogue = metric::jaccard;
      o.max_panel_rows = 128;
      const std::string what = "order " + std::to_string(order) + (both ? ", both halves" : ", upper");
      const auto want = host_gram_threshold<float>(a.view(), t, metric::jaccard);
      ASSERT_GT(want.size(), 1000u) << what;
      const auto got = gram_threshold<float>(a.view(), t, o);
      EXPECT_EQ(got.row, want.row) << what;
      EXPECT_EQ(got.col, want.col) << what;
      EXPECT_EQ(got.value, want.value) << what;
      const auto c = gram_threshold_csr<float>(a.view(), t, o);
      const auto wc = to_csr(host_gram_threshold<float>(a.view(), t, metric::jaccard), n, n);
      EXPECT_EQ(c.rows, n) << what;
      EXPECT_EQ(c.cols, n) << what;
      EXPECT_EQ(c.indptr, wc.indptr) << what;
      EXPECT_EQ(c.col, wc.col) << what;
      EXPECT_EQ(c.value, wc.value) << what;
    }
  }
  // A·Bᵀ: rows(A) x rows(B); B without rows: every row empty.
  const bit_matrix a = pack_bits(random_bits(300, cols, 0.4, seed + 1), 300, cols);
  const bit_matrix b = pack_bits(random_bits(211, cols, 0.4, seed + 2), 211, cols);
  threshold_options t;
  t.threshold = 0.3;
  gram_options o;
  o.epilogue = metric::jaccard;
  o.max_panel_rows = 64;
  const auto c = gram_threshold_csr<float>(a.view(), b.view(), t, o);
  const auto wc = to_csr(host_gram_threshold<float>(a.view(), b.view(), t, metric::jaccard), 300, 211);
  ASSERT_GT(wc.size(), 100u);
  EXPECT_EQ(c.rows, 300);
  EXPECT_EQ(c.cols, 211);
  EXPECT_EQ(c.indptr, wc.indptr);
  EXPECT_EQ(c.col, wc.col);
  EXPECT_EQ(c.value, wc.value);
  const bit_matrix none = pack_bits(std::vector<std::uint8_t>{}, 0, cols);
  const auto e = gram_threshold_csr<float>(a.view(), none.view(), t, o);
  EXPECT_EQ(e.rows, 300);
  EXPECT_EQ(e.cols, 0);
  EXPECT_EQ(e.indptr, std::vector<std::int64_t>(301, 0));
  EXPECT_TRUE(e.col.empty() && e.value.empty());
}

// The threshold is decided in the tile epilogue (pairwise::append_writer behind a screen on the
// row's popcount): on clustered fingerprints (~50 of 2,048 bits, clusters of 30 whose members keep
// a centroid bit with probability 0.9, plus zero rows and duplicates) every kernel path and metric
// keeps exactly the host's pairs, including the ones at exactly the threshold, zero rows whose
// Jaccard (0/0) or cosine (cosine_zero) passes, and distances (Hamming).
TEST(GramThresholdGpu, DecidedInTheEpilogueEqualsTheHostOnEveryPathAndMetric) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = test::seed("gram-threshold-epilogue");
  const std::int64_t n = 700, cols = 2048;
  std::mt19937_64 g(seed);
  std::vector<std::uint8_t> v(static_cast<std::size_t>(n * cols), 0);
  std::vector<std::int64_t> centroid;
  for (std::int64_t i = 0; i < n; ++i) {
    if (i % 30 == 0) {
      centroid.clear();
      for (int b = 0; b < 45 + static_cast<int>(g() % 10); ++b)
        centroid.push_back(static_cast<std::int64_t>(g() % cols));
    }
    auto row = v.begin() + i * cols;
    if (i % 97 == 5) continue;  // a zero row
    if (i % 53 == 7) {          // a duplicate of the row before
      std::copy(row - cols, row, row);
      continue;
    }
    for (const std::int64_t c : centroid)
      if (g() % 10 != 0) row[c] = 1;
    for (int b = 0; b < 5; ++b) row[static_cast<std::int64_t>(g() % cols)] = 1;
  }
  const bit_matrix a = pack_bits(v, n, cols);
  struct check_case {
    metric m;
    double t;
    score_options so;
  };
  score_options zero_passes;
  zero_passes.cosine_zero = 1.0f;
  for (const kernel_path path : runnable_paths())
    for (const bool both : {false, true}) {
      gram_options o;
      o.path = path;
      o.max_panel_rows = 256;
      const std::string where = std::string(to_string(path)) + (both ? ", both halves" : ", upper");
      for (const check_case& k :
           {check_case{metric::jaccard, 0.7, {}}, check_case{metric::jaccard, 0.55, {}},
            check_case{metric::cosine, 0.75, {}}, check_case{metric::cosine, 0.75, zero_passes}}) {
        threshold_options t;
        t.threshold = k.t;
        t.both_halves = both;
        t.include_diagonal = k.t == 0.55;
        o.epilogue = k.m;
        o.scores = k.so;
        const auto got = gram_threshold<float>(a.view(), t, o);
        const auto want = host_gram_threshold<float>(a.view(), t, k.m, k.so);
        ASSERT_GT(want.size(), 1000u) << where;
        EXPECT_EQ(got.row, want.row) << where << " " << to_string(k.m) << " " << k.t;
        EXPECT_EQ(got.col, want.col) << where << " " << to_string(k.m) << " " << k.t;
        EXPECT_EQ(got.value, want.value) << where << " " << to_string(k.m) << " " << k.t;
        if (k.m == metric::jaccard && k.t == 0.7) {
          EXPECT_GT(std::count(want.value.begin(), want.value.end(), 0.7f), 0) << "no pair at exactly 0.7";
          const auto wd = host_gram_threshold<double>(a.view(), t, k.m, k.so);
          o.scores = k.so;
          const auto gd = gram_threshold<double>(a.view(), t, o);
          EXPECT_EQ(gd.row, wd.row) << where << " double";
          EXPECT_EQ(gd.col, wd.col) << where << " double";
          EXPECT_EQ(gd.value, wd.value) << where << " double";
        }
      }
      for (const check_case& k : {check_case{metric::hamming, 30, {}}, check_case{metric::counts, 40, {}}}) {
        threshold_options t;
        t.threshold = k.t;
        t.both_halves = both;
        o.epilogue = k.m;
        o.scores = {};
        const auto got = gram_threshold<std::int32_t>(a.view(), t, o);
        const auto want = host_gram_threshold<std::int32_t>(a.view(), t, k.m);
        ASSERT_GT(want.size(), 1000u) << where << " " << to_string(k.m);
        EXPECT_EQ(got.row, want.row) << where << " " << to_string(k.m);
        EXPECT_EQ(got.col, want.col) << where << " " << to_string(k.m);
        EXPECT_EQ(got.value, want.value) << where << " " << to_string(k.m);
      }
    }
}

TEST(GramInCoreGpu, DeviceGramAsyncOnOwnStream) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = test::seed("gram-incore");
  spillway::stream s;
  const std::int64_t n = 333, cols = 777;
  const bit_matrix a = pack_bits(random_bits(n, cols, 0.4, seed), n, cols);
  const device_bit_matrix d = upload_async(a.view(), s.view());
  for (triangle_layout l : {triangle_layout::full, triangle_layout::upper_packed, triangle_layout::condensed}) {
    const auto sz = static_cast<std::size_t>(layout_size(l, n));
    device_buffer<std::int32_t> out(sz, s.view());
    out.fill_bytes_async(0xFF, s.view());
    gram_async(d, out.data(), l, s.view());
    std::vector<std::int32_t> got(sz), want(sz);
    out.copy_to_host_async({got.data(), sz}, s.view());
    s.synchronize();
    host_gram_dense(a.view(), want.data(), l);
    EXPECT_EQ(got, want) << to_string(l);
  }
  const bit_matrix b = pack_bits(random_bits(100, cols, 0.4, seed + 1), 100, cols);
  const device_bit_matrix db = upload_async(b.view(), s.view());
  device_buffer<float> out(static_cast<std::size_t>(n * 100), s.view());
  out.fill_bytes_async(0xFF, s.view());
  gram_async(d, db, out.data(), 100, s.view(), metric::jaccard);
  std::vector<float> got(static_cast<std::size_t>(n * 100)), want(got.size());
  out.copy_to_host_async({got.data(), got.size()}, s.view());
  s.synchronize();
  host_gram_dense(a.view(), b.view(), want.data(), 100, metric::jaccard);
  EXPECT_EQ(got, want);
}

TEST(GramBigGpu, OutputPast2To31EntriesSampledAgainstHost) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = test::seed("gram-big");
  const std::int64_t n = 70000, cols = 48;  // n^2 = 4.9e9 entries; the packed triangle has 2.45e9
  const auto v = random_bits(n, cols, 0.5, seed);
  const bit_matrix a = pack_bits(v, n, cols);
  const std::int64_t tri = layout_size(triangle_layout::upper_packed, n);
  ASSERT_GT(tri, std::int64_t{1} << 31);
  std::vector<std::uint16_t> out(static_cast<std::size_t>(tri));
  std::fill(out.end() - 1000, out.end(), std::uint16_t{0xFFFF});
  gram_options o;
  gram_dense(a.view(), out.data(), triangle_layout::upper_packed, o);
  std::mt19937_64 g(seed);
  for (int t = 0; t < 20000; ++t) {
    std::int64_t i = static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(n));
    std::int64_t j = static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(n));
    if (t < 100) i = n - 1 - t / 10;  // the far end of the triangle, past 2^31
    if (j < i) std::swap(i, j);
    ASSERT_EQ(out[static_cast<std::size_t>(packed_row_offset(n, i) + (j - i))], host_count(a.view(), a.view(), i, j))
        << "(" << i << ", " << j << ")";
  }
  EXPECT_EQ(out.back(), host_count(a.view(), a.view(), n - 1, n - 1));
  // Top-k over the same 70,000 x 70,000 product: sampled rows against the host.
  topk_options k;
  k.k = 8;
  const auto r = gram_topk<std::int32_t>(a.view(), k, o);
  for (int t = 0; t < 30; ++t) {
    const std::int64_t i = t == 0 ? n - 1 : static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(n));
    std::vector<std::pair<std::int32_t, std::int64_t>> all;
    for (std::int64_t j = 0; j < n; ++j)
      if (j != i) all.emplace_back(host_count(a.view(), a.view(), i, j), j);
    std::partial_sort(all.begin(), all.begin() + 8, all.end(), [](auto& x, auto& y) {
      return x.first != y.first ? x.first > y.first : x.second < y.second;
    });
    for (int q = 0; q < 8; ++q) {
      ASSERT_EQ(r.index(i, q), all[static_cast<std::size_t>(q)].second) << "row " << i;
      ASSERT_EQ(r.value(i, q), all[static_cast<std::size_t>(q)].first);
    }
  }
}

TEST(GramMultiGpu, TwoDevicesGiveIdenticalResults) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  for (const auto& devices : test::two_worker_lists()) {
  SCOPED_TRACE(test::list_name(devices));
  const auto seed = test::seed("gram-multi");
  const bit_matrix a = pack_bits(random_bits(900, 2000, 0.4, seed), 900, 2000);
  gram_options o;
  o.devices = devices;
  o.max_panel_rows = 64;
  gram_report rep;
  o.report = &rep;
  std::vector<std::int32_t> got(static_cast<std::size_t>(900 * 900)), want(got.size());
  poison(got);
  gram_dense(a.view(), got.data(), triangle_layout::full, o);
  host_gram_dense(a.view(), want.data(), triangle_layout::full);
  EXPECT_EQ(got, want);
  EXPECT_EQ(rep.job.devices.size(), 2u);
  // How the strips' bytes went over the two copy links.
  ASSERT_EQ(rep.job.bytes_per_device.size(), 2u);
  EXPECT_GT(rep.job.bytes_per_device[0], 0u);
  EXPECT_GT(rep.job.bytes_per_device[1], 0u);
  EXPECT_EQ(rep.job.bytes_per_device[0] + rep.job.bytes_per_device[1], rep.job.bytes_moved);
  topk_options k;
  k.k = 20;
  const auto w = host_gram_topk<std::int32_t>(a.view(), k);
  // The second device's lists merge into the first's: into its free slot lists (3 slots) or a
  // buffer of their own (1 slot).
  for (const std::size_t slots : {std::size_t{3}, std::size_t{1}}) {
    o.slots_per_device = slots;
    const auto t = gram_topk<std::int32_t>(a.view(), k, o);
    EXPECT_EQ(rep.job.tasks_per_device.size(), 2u);
    EXPECT_GT(rep.job.tasks_per_device[1], 0u) << "slots " << slots;
    EXPECT_EQ(t.indices, w.indices) << "slots " << slots;
    EXPECT_EQ(t.values, w.values) << "slots " << slots;
  }
  // Similarity scores (float) and the diagonal kept, on the two devices.
  k.include_diagonal = true;
  o.epilogue = metric::jaccard;
  const auto tj = gram_topk<float>(a.view(), k, o);
  const auto wj = host_gram_topk<float>(a.view(), k, metric::jaccard);
  EXPECT_EQ(tj.indices, wj.indices);
  EXPECT_EQ(tj.values, wj.values);
  // The resident panels: each copied from the host once; the other worker took it from the one
  // that held it.
  EXPECT_TRUE(rep.plan.resident);
  EXPECT_GT(rep.peer_bytes, 0u);
  }
}

TEST(GramErrorsGpu, BadInputsThrowLogicErrorAndLeaveOutputUntouched) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const bit_matrix a = pack_bits(random_bits(10, 100, 0.5, 1), 10, 100);
  const bit_matrix b = pack_bits(random_bits(10, 101, 0.5, 2), 10, 101);
  std::vector<std::int32_t> out(100, 77);
  try {
    gram_dense(a.view(), b.view(), out.data(), 10);
    FAIL();
  } catch (const spillway::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("100"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("101"), std::string::npos);
  }
  EXPECT_EQ(out, std::vector<std::int32_t>(100, 77));
  topk_options k;
  k.k = 129;
  EXPECT_THROW((void)gram_topk<std::int32_t>(a.view(), k), spillway::logic_error);
  k.k = 0;
  EXPECT_THROW((void)gram_topk<std::int32_t>(a.view(), k), spillway::logic_error);
  std::vector<float> f(100);
  EXPECT_THROW(gram_dense(a.view(), f.data(), triangle_layout::full), spillway::logic_error);  // counts into float
  gram_options o;
  o.epilogue = metric::jaccard;
  EXPECT_THROW(gram_dense(a.view(), out.data(), triangle_layout::full, o), spillway::logic_error);  // jaccard into int
  const bit_matrix wide = pack_bits(random_bits(3, 70000, 0.5, 3), 3, 70000);
  std::vector<std::uint16_t> u(9);
  EXPECT_THROW(gram_dense(wide.view(), u.data(), triangle_layout::full), spillway::logic_error);
  o = gram_options{};
  o.budget = memory_budget(1000);
  EXPECT_THROW(gram_dense(a.view(), out.data(), triangle_layout::full, o), spillway::logic_error);
  o = gram_options{};
  o.devices = {device_count()};
  EXPECT_THROW(gram_dense(a.view(), out.data(), triangle_layout::full, o), spillway::logic_error);
  EXPECT_EQ(out, std::vector<std::int32_t>(100, 77));
}

TEST(GramProgressGpu, ReportsAndCancels) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const bit_matrix a = pack_bits(random_bits(640, 300, 0.5, 5), 640, 300);
  std::vector<std::int32_t> out(static_cast<std::size_t>(640 * 640));
  gram_options o;
  o.max_panel_rows = 32;
  std::size_t calls = 0, last_done = 0;
  o.progress = [&](const progress_info& p) {
    ++calls;
    last_done = p.tasks_done;
    EXPECT_EQ(p.tasks_total, 20u);
    return true;
  };
  const job_report r = gram_dense(a.view(), out.data(), triangle_layout::full, o);
  EXPECT_TRUE(r.complete());
  EXPECT_GE(calls, 2u);
  EXPECT_EQ(last_done, 20u);
  // Cancel at the first report. With 160 small strips the job cannot finish before the
  // cancellation is seen (at most the slots in flight complete after it); with 20 strips the fast
  // kernels finished all of them first on the H200, which made that check racy.
  o.max_panel_rows = 4;
  std::size_t total = 0;
  o.progress = [&](const progress_info& p) {
    total = p.tasks_total;
    return false;
  };
  const job_report c = gram_dense(a.view(), out.data(), triangle_layout::full, o);
  EXPECT_EQ(total, 160u);
  EXPECT_TRUE(c.cancelled);
  EXPECT_FALSE(c.complete());
  EXPECT_LT(c.tasks_completed, 160u);
}

}  // namespace

namespace {
// Small enough for compute-sanitizer (memcheck, racecheck): every sink, several strips, both the
// resident and the streamed operand, on the CUDA-core path.
TEST(GramSanitizeGpu, SmallEverySinkSeveralStrips) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = spillway::test::seed("gram-sanitize");
  const std::int64_t n = 400, cols = 8000;  // A is 400 KB: an 800 KB budget streams it for top-k and threshold
  const bit_matrix a = pack_bits(random_bits(n, cols, 0.4, seed), n, cols);
  for (std::size_t budget : {std::size_t{64} << 20, std::size_t{800000}}) {
    gram_options o;
    o.path = kernel_path::popc;
    o.max_panel_rows = 32;
    o.budget = memory_budget(budget);
    gram_report rep;
    o.report = &rep;
    for (int kk : {7, 40}) {
      topk_options k;
      k.k = kk;
      const auto got = gram_topk<std::int32_t>(a.view(), k, o);
      const auto want = host_gram_topk<std::int32_t>(a.view(), k);
      EXPECT_EQ(got.indices, want.indices);
      EXPECT_EQ(got.values, want.values);
    }
    EXPECT_EQ(rep.plan.resident, budget > 1000000);
    threshold_options t;
    t.threshold = 1400;
    t.both_halves = true;
    const auto g = gram_threshold<std::int32_t>(a.view(), t, o);
    const auto w = host_gram_threshold<std::int32_t>(a.view(), t);
    EXPECT_EQ(g.row, w.row);
    EXPECT_EQ(g.col, w.col);
    EXPECT_EQ(g.value, w.value);
    EXPECT_EQ(rep.plan.resident, budget > 1000000);
    EXPECT_GT(w.size(), 100u);
    std::vector<std::int32_t> full(static_cast<std::size_t>(n * n)), fw(full.size());
    poison(full);
    gram_dense(a.view(), full.data(), triangle_layout::full, o);
    host_gram_dense(a.view(), fw.data(), triangle_layout::full);
    EXPECT_EQ(full, fw);
  }
}
}  // namespace

// ---- no GPU (issue 16 item 7): a clear error by default, the host implementation on request ----
// These run where there is no GPU (CI) and skip on a GPU machine, which cannot hide its devices
// from a running process.
TEST(GramNoGpu, ErrorSaysNoGpuAndNamesTheOptionElseHostRuns) {
  if (spillway::device_count() > 0) GTEST_SKIP() << "this machine has a GPU; the no-GPU behaviour is tested in CI";
  const std::int64_t rows = 37, cols = 301;
  const auto bytes = random_bits(rows, cols, 0.3, spillway::test::seed("GramNoGpu"));
  const auto a = pack_bits(bytes.data(), rows, cols);
  std::vector<std::int32_t> tri(static_cast<std::size_t>(layout_size(triangle_layout::upper_packed, rows)), -7);
  gram_options o;
  try {
    gram_dense(a.view(), tri.data(), triangle_layout::upper_packed, o);
    FAIL() << "no throw";
  } catch (const spillway::no_gpu_error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("gram_dense needs a GPU"), std::string::npos) << w;
    EXPECT_NE(w.find("gram_options::host_fallback"), std::string::npos) << w;
  }
  EXPECT_EQ(tri, std::vector<std::int32_t>(tri.size(), -7)) << "the output must be untouched";
  o.host_fallback = true;
  const auto r = gram_dense(a.view(), tri.data(), triangle_layout::upper_packed, o);
  EXPECT_TRUE(r.complete());
  EXPECT_TRUE(r.devices.empty());
  std::vector<std::int32_t> want(tri.size());
  host_gram_dense(a.view(), want.data(), triangle_layout::upper_packed);
  EXPECT_EQ(tri, want);
  o.epilogue = metric::jaccard;
  const auto got = gram_topk<float>(a.view(), topk_options{5}, o);
  const auto ref = host_gram_topk<float>(a.view(), topk_options{5}, metric::jaccard);
  EXPECT_EQ(got.indices, ref.indices);
  EXPECT_EQ(got.values, ref.values);
}

// ---- issue 16 item 4: results strip by strip, views into gram_async -------------------------------
namespace {
// Fills `got` (n x n, -1 = never delivered) from the strips and counts them.
template <class V>
struct strip_collector {
  std::int64_t n;
  std::vector<V>* got;
  std::mutex* m;
  int* strips;
  void operator()(const gram_strip<V>& st) const {
    std::lock_guard<std::mutex> g(*m);
    ++*strips;
    for (std::int64_t i = st.first_row; i < st.first_row + st.rows; ++i)
      for (std::int64_t j = st.first_col; j < st.first_col + st.cols; ++j) (*got)[static_cast<std::size_t>(i * n + j)] = st.at(i, j);
  }
};
}  // namespace

TEST(GramStripsGpu, SymmetricStripsCoverTheUpperTriangleExactly) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const std::int64_t n = 1000, cols = 1500;  // not multiples of the tile
  const auto a = pack_bits(random_bits(n, cols, 0.3, test::seed("GramStripsGpu.Symmetric")), n, cols);
  std::vector<std::int32_t> want(static_cast<std::size_t>(n * n));
  host_gram_dense(a.view(), want.data(), triangle_layout::full);
  gram_options o;
  o.max_panel_rows = 128;  // 8 strips
  std::vector<std::int32_t> got(want.size(), -1);
  std::mutex m;
  int strips = 0;
  const auto r = gram_strips<std::int32_t>(a.view(), strip_collector<std::int32_t>{n, &got, &m, &strips}, o);
  EXPECT_TRUE(r.complete());
  EXPECT_GE(strips, 8);
  // Every (i, j >= i) delivered; everything delivered (the diagonal blocks' lower parts too) right.
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      const auto k = static_cast<std::size_t>(i * n + j);
      if (j >= i) ASSERT_NE(got[k], -1) << "(" << i << "," << j << ") never delivered";
      if (got[k] != -1) ASSERT_EQ(got[k], want[k]) << i << "," << j;
    }
}

TEST(GramStripsGpu, RectangularStripsAndJaccard) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = test::seed("GramStripsGpu.Rect");
  const auto a = pack_bits(random_bits(300, 2100, 0.2, seed), 300, 2100);
  const auto b = pack_bits(random_bits(211, 2100, 0.5, seed + 1), 211, 2100);
  std::vector<float> want(300 * 211);
  host_gram_dense(a.view(), b.view(), want.data(), 211, metric::jaccard);
  gram_options o;
  o.epilogue = metric::jaccard;
  o.max_panel_rows = 64;
  std::vector<float> got(want.size(), -1.0f);
  std::mutex m;
  int strips = 0;
  // A·Bᵀ: the collector's "n" is the row length, b.rows.
  const auto r = gram_strips<float>(a.view(), b.view(), strip_collector<float>{211, &got, &m, &strips}, o);
  EXPECT_TRUE(r.complete());
  EXPECT_GE(strips, 5);
  EXPECT_EQ(got, want);  // the same scoring code on both sides: bitwise equal
}

TEST(GramStripsGpu, CallbackExceptionStopsTheJob) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto a = pack_bits(random_bits(512, 300, 0.3, test::seed("GramStripsGpu.Throw")), 512, 300);
  gram_options o;
  o.max_panel_rows = 64;
  EXPECT_THROW(gram_strips<std::int32_t>(a.view(), [](const gram_strip<std::int32_t>&) { throw std::runtime_error("stop"); }, o),
               spillway::pipeline_error);
}

TEST(GramAsyncViewsGpu, RowRangesOfDeviceMatrices) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = test::seed("GramAsyncViewsGpu");
  spillway::stream s;
  const std::int64_t n = 400, cols = 1111;
  const bit_matrix a = pack_bits(random_bits(n, cols, 0.4, seed), n, cols);
  const device_bit_matrix d = upload_async(a.view(), s.view());
  // Rows [96, 96 + 150) of A against all of A, through views only.
  const auto strip = row_range(d.view(), 96, 150);
  device_buffer<std::int32_t> out(150 * n, s.view());
  out.fill_bytes_async(0x7f, s.view());
  gram_async(strip, d.view(), out.data(), n, s.view());
  const auto got = out.to_host(s.view());
  std::vector<std::int32_t> want(150 * n);
  host_gram_dense(row_range(a.view(), 96, 150), a.view(), want.data(), n);
  EXPECT_EQ(got, want);
  // The A·Aᵀ form on a view equals the form on the matrix.
  device_buffer<std::int32_t> tri(static_cast<std::size_t>(layout_size(triangle_layout::upper_packed, 150)), s.view());
  gram_async(strip, tri.data(), triangle_layout::upper_packed, s.view());
  std::vector<std::int32_t> want_tri(tri.size());
  host_gram_dense(row_range(a.view(), 96, 150), want_tri.data(), triangle_layout::upper_packed);
  EXPECT_EQ(tri.to_host(s.view()), want_tri);
}

TEST(GramNoGpu, StripsRunOnTheHostWhenAllowed) {
  if (spillway::device_count() > 0) GTEST_SKIP() << "this machine has a GPU; the no-GPU behaviour is tested in CI";
  const std::int64_t n = 1500, cols = 100;  // two host strips of 1024 rows
  const auto a = pack_bits(random_bits(n, cols, 0.3, test::seed("GramNoGpu.Strips")), n, cols);
  std::vector<std::int32_t> want(static_cast<std::size_t>(n * n));
  host_gram_dense(a.view(), want.data(), triangle_layout::full);
  gram_options o;
  EXPECT_THROW(gram_strips<std::int32_t>(a.view(), [](const gram_strip<std::int32_t>&) {}, o), spillway::no_gpu_error);
  o.host_fallback = true;
  std::vector<std::int32_t> got(want.size(), -1);
  std::mutex m;
  int strips = 0;
  const auto r = gram_strips<std::int32_t>(a.view(), strip_collector<std::int32_t>{n, &got, &m, &strips}, o);
  EXPECT_TRUE(r.complete());
  EXPECT_EQ(strips, 2);
  EXPECT_EQ(got, want);
}

// Every A·Aᵀ and A·Bᵀ form of the sparse entry points and the A·Bᵀ strips and dense forms: without
// host_fallback a no_gpu_error naming the host function, with it the host function's result; the
// empty shapes return before either.
TEST(GramNoGpu, EveryFormRunsItsHostFunctionWhenAllowed) {
  if (spillway::device_count() > 0)
    GTEST_SKIP() << "this machine has a GPU; the no-GPU behaviour is tested in CI";
  const std::int64_t n = 45, m = 29, cols = 130;
  const auto a = pack_bits(random_bits(n, cols, 0.3, test::seed("GramNoGpu.Forms.A")), n, cols);
  const auto b = pack_bits(random_bits(m, cols, 0.3, test::seed("GramNoGpu.Forms.B")), m, cols);
  const auto z = pack_bits(random_bits(0, cols, 0.3, 1), 0, cols);
  const topk_options k{5, false};
  const threshold_options t{10.0, false, false};
  const pairwise::neighbour_count_options nc{10.0, false};
  gram_options o;
  const auto refuses = [](const char* host_function, auto&& call) {
    try {
      call();
      ADD_FAILURE() << host_function << ": no throw";
    } catch (const spillway::no_gpu_error& e) {
      EXPECT_NE(std::string(e.what()).find(host_function), std::string::npos) << e.what();
    }
  };
  refuses("host_gram_topk", [&] { (void)gram_topk<std::int32_t>(a.view(), b.view(), k, o); });
  refuses("host_gram_threshold", [&] { (void)gram_threshold<std::int32_t>(a.view(), t, o); });
  refuses("host_gram_threshold", [&] { (void)gram_threshold<std::int32_t>(a.view(), b.view(), t, o); });
  refuses("host_gram_threshold", [&] { (void)gram_threshold_csr<std::int32_t>(a.view(), t, o); });
  refuses("host_gram_threshold", [&] { (void)gram_threshold_csr<std::int32_t>(a.view(), b.view(), t, o); });
  refuses("host_gram_neighbour_counts", [&] { (void)gram_neighbour_counts<std::int32_t>(a.view(), nc, o); });
  refuses("host_gram_neighbour_counts",
          [&] { (void)gram_neighbour_counts<std::int32_t>(a.view(), b.view(), nc, o); });
  refuses("host_gram_dense per strip", [&] {
    (void)gram_strips<std::int32_t>(
        a.view(), b.view(), [](const gram_strip<std::int32_t>&) {}, o);
  });
  // The empty shapes, before any fallback.
  const auto none = gram_topk<std::int32_t>(z.view(), k, o);
  EXPECT_EQ(none.rows, 0);
  EXPECT_EQ(none.k, k.k);
  EXPECT_TRUE(none.values.empty());
  const auto no_b = gram_topk<std::int32_t>(a.view(), z.view(), k, o);
  EXPECT_EQ(no_b.rows, n);
  EXPECT_EQ(no_b.indices, std::vector<std::int64_t>(static_cast<std::size_t>(n * k.k), -1));
  EXPECT_EQ(gram_threshold<std::int32_t>(z.view(), t, o).size(), 0u);
  EXPECT_EQ(gram_threshold<std::int32_t>(a.view(), z.view(), t, o).size(), 0u);
  EXPECT_EQ(gram_threshold_csr<std::int32_t>(z.view(), t, o).indptr, std::vector<std::int64_t>(1, 0));
  EXPECT_EQ(gram_threshold_csr<std::int32_t>(a.view(), z.view(), t, o).indptr,
            std::vector<std::int64_t>(static_cast<std::size_t>(n) + 1, 0));
  EXPECT_TRUE(gram_neighbour_counts<std::int32_t>(z.view(), nc, o).empty());
  EXPECT_EQ(gram_neighbour_counts<std::int32_t>(a.view(), z.view(), nc, o),
            std::vector<std::int64_t>(static_cast<std::size_t>(n), 0));
  EXPECT_TRUE(gram_strips<std::int32_t>(
                  a.view(), z.view(), [](const gram_strip<std::int32_t>&) {}, o)
                  .tasks_total == 0);

  o.host_fallback = true;
  const auto tk = gram_topk<std::int32_t>(a.view(), b.view(), k, o);
  const auto tk_ref = host_gram_topk<std::int32_t>(a.view(), b.view(), k);
  EXPECT_EQ(tk.indices, tk_ref.indices);
  EXPECT_EQ(tk.values, tk_ref.values);
  const auto same_coo = [](const coo_result<std::int32_t>& x, const coo_result<std::int32_t>& y) {
    EXPECT_GT(y.size(), 0u);
    EXPECT_EQ(x.row, y.row);
    EXPECT_EQ(x.col, y.col);
    EXPECT_EQ(x.value, y.value);
  };
  same_coo(gram_threshold<std::int32_t>(a.view(), t, o), host_gram_threshold<std::int32_t>(a.view(), t));
  same_coo(gram_threshold<std::int32_t>(a.view(), b.view(), t, o),
           host_gram_threshold<std::int32_t>(a.view(), b.view(), t));
  const auto same_csr = [](const csr_result<std::int32_t>& x, const csr_result<std::int32_t>& y) {
    EXPECT_GT(y.size(), 0u);
    EXPECT_EQ(x.rows, y.rows);
    EXPECT_EQ(x.cols, y.cols);
    EXPECT_EQ(x.indptr, y.indptr);
    EXPECT_EQ(x.col, y.col);
    EXPECT_EQ(x.value, y.value);
  };
  same_csr(gram_threshold_csr<std::int32_t>(a.view(), t, o),
           to_csr(host_gram_threshold<std::int32_t>(a.view(), t), n, n));
  same_csr(gram_threshold_csr<std::int32_t>(a.view(), b.view(), t, o),
           to_csr(host_gram_threshold<std::int32_t>(a.view(), b.view(), t), n, m));
  EXPECT_EQ(gram_neighbour_counts<std::int32_t>(a.view(), nc, o),
            host_gram_neighbour_counts<std::int32_t>(a.view(), nc));
  EXPECT_EQ(gram_neighbour_counts<std::int32_t>(a.view(), b.view(), nc, o),
            host_gram_neighbour_counts<std::int32_t>(a.view(), b.view(), nc));
  std::vector<std::int32_t> want(static_cast<std::size_t>(n * m)), dense(want.size(), -1),
      strips(want.size(), -1);
  host_gram_dense(a.view(), b.view(), want.data(), m);
  EXPECT_TRUE(gram_dense(a.view(), b.view(), dense.data(), m, o).complete());
  EXPECT_EQ(dense, want);
  const auto r = gram_strips<std::int32_t>(
      a.view(), b.view(),
      [&](const gram_strip<std::int32_t>& st) {
        for (std::int64_t i = st.first_row; i < st.first_row + st.rows; ++i)
          for (std::int64_t j = st.first_col; j < st.first_col + st.cols; ++j)
            strips[static_cast<std::size_t>(i * m + j)] = st.at(i, j);
      },
      o);
  EXPECT_TRUE(r.complete());
  EXPECT_EQ(strips, want);
}

// ---- issue 16 item 4, the device form: strips handed over in device memory on their stream ------
namespace {
// Copies each device strip into its place in a device n x ld matrix on `dst_device` with a copy
// enqueued on the strip's own stream (no host copy of the strip). With several devices a strip of
// device 1 goes to a matrix of device 0: the plain 2-D copy (cudaMemcpyDefault) works into memory
// of spillway's pool, which grants its peers access; copy_to (a 2-D peer copy) works into any.
template <class V>
struct device_strip_collector {
  V* dst;
  std::int64_t ld;
  std::mutex* m;
  int* strips;
  int dst_device = 0;
  bool peer_copy = false;
  void operator()(const gram_device_strip<V>& st) const {
    {
      std::lock_guard<std::mutex> g(*m);
      ++*strips;
    }
    EXPECT_EQ(spillway::current_device(), st.device);
    if (peer_copy) {
      st.copy_to(dst, ld, dst_device);
      return;
    }
    SPILLWAY_CUDA_TRY(cudaMemcpy2DAsync(dst + st.first_row * ld + st.first_col, static_cast<std::size_t>(ld) * sizeof(V),
                                        st.values, static_cast<std::size_t>(st.cols) * sizeof(V),
                                        static_cast<std::size_t>(st.cols) * sizeof(V), static_cast<std::size_t>(st.rows),
                                        cudaMemcpyDefault, st.stream.value()));
  }
};
}  // namespace

TEST(GramDeviceStripsGpu, SymmetricEqualsTheHostFormAndTheReference) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const std::int64_t n = 1000, cols = 1500;
  const auto a = pack_bits(random_bits(n, cols, 0.3, test::seed("GramDeviceStripsGpu.Symmetric")), n, cols);
  std::vector<std::int32_t> want(static_cast<std::size_t>(n * n));
  host_gram_dense(a.view(), want.data(), triangle_layout::full);
  gram_options o;
  o.max_panel_rows = 128;  // 8 strips on 3 slots: buffers are reused while copies are in flight
  // Every visible device; the destination lives on device 0, so with two GPUs half the strips
  // arrive on device 1 and go over by a 2-D peer copy (device_strip::copy_to).
  gram_report rep;
  o.report = &rep;
  spillway::stream s;
  device_buffer<std::int32_t> d(static_cast<std::size_t>(n * n), s.view());
  d.fill_bytes_async(0xFF, s.view());  // -1 everywhere: "never delivered"
  s.synchronize();
  std::mutex m;
  int strips = 0;
  const auto r = gram_device_strips<std::int32_t>(a.view(), device_strip_collector<std::int32_t>{d.data(), n, &m, &strips, 0, true}, o);
  EXPECT_TRUE(r.complete());
  EXPECT_EQ(strips, 8);
  ASSERT_TRUE(rep.plan.resident);
  EXPECT_EQ(r.bytes_moved, static_cast<std::size_t>(n) * a.view().ld_words * 4u)
      << "A's rows copied in once (the resident panels; a panel another device holds comes from it, not the host); "
         "the device form copies nothing to the host";
  const std::vector<std::int32_t> got = d.to_host(s.view());
  // The host form of the same job, for the same entries.
  std::vector<std::int32_t> host_form(want.size(), -1);
  int host_strips = 0;
  (void)gram_strips<std::int32_t>(a.view(), strip_collector<std::int32_t>{n, &host_form, &m, &host_strips}, o);
  EXPECT_EQ(got, host_form);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      const auto k = static_cast<std::size_t>(i * n + j);
      if (j >= i) ASSERT_NE(got[k], -1) << "(" << i << "," << j << ") never delivered";
      if (got[k] != -1) ASSERT_EQ(got[k], want[k]) << i << "," << j;
    }
}

TEST(GramDeviceStripsGpu, RectangularJaccardEqualsTheHostForm) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = test::seed("GramDeviceStripsGpu.Rect");
  const auto a = pack_bits(random_bits(300, 2100, 0.2, seed), 300, 2100);
  const auto b = pack_bits(random_bits(211, 2100, 0.5, seed + 1), 211, 2100);
  gram_options o;
  o.epilogue = metric::jaccard;
  o.max_panel_rows = 64;
  std::vector<float> host_form(300 * 211, -1.0f);
  std::mutex m;
  int strips = 0;
  (void)gram_strips<float>(a.view(), b.view(), strip_collector<float>{211, &host_form, &m, &strips}, o);
  spillway::stream s;
  device_buffer<float> d(300 * 211, s.view());
  d.fill_bytes_async(0x7f, s.view());
  s.synchronize();
  int dev_strips = 0;
  const auto r = gram_device_strips<float>(a.view(), b.view(), device_strip_collector<float>{d.data(), 211, &m, &dev_strips}, o);
  EXPECT_TRUE(r.complete());
  EXPECT_EQ(dev_strips, 5);
  EXPECT_EQ(d.to_host(s.view()), host_form);  // bitwise: one kernel, one scorer
  std::vector<float> want(300 * 211);
  host_gram_dense(a.view(), b.view(), want.data(), 211, metric::jaccard);
  EXPECT_EQ(host_form, want);
}

TEST(GramDeviceStripsGpu, CallbackExceptionStopsTheJob) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto a = pack_bits(random_bits(512, 300, 0.3, test::seed("GramDeviceStripsGpu.Throw")), 512, 300);
  gram_options o;
  o.max_panel_rows = 64;
  EXPECT_THROW(gram_device_strips<std::int32_t>(
                   a.view(), [](const gram_device_strip<std::int32_t>&) { throw std::runtime_error("stop"); }, o),
               spillway::pipeline_error);
}

TEST(GramNoGpu, DeviceStripsRefuseWithoutAGpuEvenWithTheHostFallback) {
  if (spillway::device_count() > 0) GTEST_SKIP() << "this machine has a GPU; the no-GPU behaviour is tested in CI";
  const auto a = pack_bits(random_bits(40, 100, 0.3, test::seed("GramNoGpu.DeviceStrips")), 40, 100);
  gram_options o;
  o.host_fallback = true;
  try {
    (void)gram_device_strips<std::int32_t>(a.view(), [](const gram_device_strip<std::int32_t>&) {}, o);
    FAIL() << "expected no_gpu_error";
  } catch (const spillway::no_gpu_error& e) {
    EXPECT_NE(std::string(e.what()).find("gram_device_strips"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("gram_strips"), std::string::npos) << e.what();
  }
}
