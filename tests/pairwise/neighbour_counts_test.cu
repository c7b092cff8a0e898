// The neighbour-count sink (pairwise/sinks/neighbour_counts.cuh): per-row counts of the pairs
// passing a threshold, from bit Gram (counts and Jaccard) and float similarity, against the host's
// threshold COO (both halves) counted per row — many strips, A·Aᵀ and A·Bᵀ, the diagonal in and
// out, one worker and two; and the host fallback with no GPU.
#include <spillway/gram.cuh>
#include <spillway/similarity.cuh>

#include <support/gpu_test.hpp>
#include <support/random_bits.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace spillway;
namespace pw = spillway::pairwise;

using spillway::test::random_bit_bytes;

// The oracle: per-row counts of a threshold COO of every passing entry (both halves for A·Aᵀ).
template <class Coo>
std::vector<std::int64_t> counts_of_coo(const Coo& c, std::int64_t rows) {
  std::vector<std::int64_t> n(static_cast<std::size_t>(rows), 0);
  for (const std::int64_t i : c.row) ++n[static_cast<std::size_t>(i)];
  return n;
}

// The counts must say something: neither every row empty nor every row full.
void expect_spread(const std::vector<std::int64_t>& c, std::int64_t cols, const std::string& what) {
  std::int64_t lo = cols, hi = 0;
  for (const std::int64_t x : c) {
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  EXPECT_LT(lo, hi) << what << ": every row has the same count " << lo << "; the threshold tests nothing";
  EXPECT_GT(hi, 0) << what;
}

TEST(NeighbourCountsGpu, GramCountsAndJaccardEqualTheHostCoo) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = test::seed("NeighbourCountsGpu.Gram");
  const std::int64_t n = 1500, m = 700, cols = 777;
  const gram::bit_matrix a = gram::pack_bits(random_bit_bytes(n, cols, 0.3, seed), n, cols);
  const gram::bit_matrix b = gram::pack_bits(random_bit_bytes(m, cols, 0.3, seed + 1), m, cols);
  for (const std::vector<int>& devices : test::two_worker_lists()) {
    for (const bool diag : {false, true}) {
      SCOPED_TRACE(test::list_name(devices) + (diag ? ", diagonal" : ", no diagonal"));
      gram::gram_options o;
      o.devices = devices;
      o.max_panel_rows = 128;  // 12 strips
      // Counts: a pair passes at >= 75 common ones (mean ~70 at p = 0.3, 777 columns).
      const pw::neighbour_count_options nc{75.0, diag};
      const auto got = gram::gram_neighbour_counts<std::int32_t>(a.view(), nc, o);
      const auto want =
          counts_of_coo(gram::host_gram_threshold<std::int32_t>(a.view(), {75.0, true, diag}), n);
      ASSERT_EQ(got, want);
      expect_spread(got, n, "counts");
      // Jaccard (float): >= 0.18 (mean ~0.176).
      gram::gram_options oj = o;
      oj.epilogue = gram::metric::jaccard;
      const pw::neighbour_count_options nj{0.18, diag};
      const auto gj = gram::gram_neighbour_counts<float>(a.view(), nj, oj);
      ASSERT_EQ(
          gj, counts_of_coo(
                  gram::host_gram_threshold<float>(a.view(), {0.18, true, diag}, gram::metric::jaccard), n));
      expect_spread(gj, n, "jaccard");
    }
    // A·Bᵀ: each row of A against every row of B.
    gram::gram_options o;
    o.devices = devices;
    o.max_panel_rows = 256;
    const auto got = gram::gram_neighbour_counts<std::int32_t>(a.view(), b.view(), {75.0, false}, o);
    ASSERT_EQ(got, counts_of_coo(
                       gram::host_gram_threshold<std::int32_t>(a.view(), b.view(), {75.0, false, false}), n));
    expect_spread(got, m, "A·Bᵀ");
  }
}

TEST(NeighbourCountsGpu, SimilarityCosineAndEuclideanEqualTheHostCoo) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = test::seed("NeighbourCountsGpu.Similarity");
  const std::int64_t n = 1200, d = 96;
  // Rows with a shared component, so cosines spread around a positive mean; values on a grid of
  // 1/8 so every score is exact in FP32 (the device and the host agree to the last bit).
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int> q(-8, 8);
  std::vector<float> rows(static_cast<std::size_t>(n * d));
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t k = 0; k < d; ++k)
      rows[static_cast<std::size_t>(i * d + k)] = static_cast<float>(q(gen) + (k < 8 ? 6 : 0)) / 8.0f;
  const similarity::matrix_view<const float> a{rows.data(), n, d, d};
  for (const std::vector<int>& devices : test::two_worker_lists()) {
    SCOPED_TRACE(test::list_name(devices));
    similarity::similarity_options o;
    o.devices = devices;
    o.max_panel_rows = 100;
    o.metric = similarity::similarity_metric::inner_product;  // exact on the grid: no rounding at the cut-off
    const double cut = 9.0;                             // mean ~4.8, sd ~3.6: about one pair in eight passes
    const auto got = similarity::similarity_neighbour_counts(a, {cut, false}, o);
    const auto want =
        counts_of_coo(similarity::host_similarity_threshold(a, {cut, true, false}, o.metric), n);
    ASSERT_EQ(got, want);
    expect_spread(got, n, "inner product");
    // Distances count pairs at or below the cut-off.
    o.metric = similarity::similarity_metric::euclidean;
    const auto ge = similarity::similarity_neighbour_counts(a, {8.0, true}, o);  // distances ~8.2 on average
    const auto we = counts_of_coo(similarity::host_similarity_threshold(a, {8.0, true, true}, o.metric), n);
    std::int64_t differ = 0;
    for (std::int64_t i = 0; i < n; ++i)
      differ += ge[static_cast<std::size_t>(i)] != we[static_cast<std::size_t>(i)];
    // Euclidean takes a square root: a pair at the cut-off may round either way (none expected at
    // these values, allowed for a handful).
    EXPECT_LE(differ, 3) << "rows whose Euclidean count differs from the host's";
    expect_spread(ge, n, "euclidean");
  }
}

// Runs everywhere: with host_fallback and no GPU (CI) the entry point counts on the host; where a
// GPU is present the same call runs on it. Either way the counts are the host COO's.
TEST(NeighbourCounts, HostFallbackOrDeviceCountsTheHostCoo) {
  const auto seed = test::seed("NeighbourCounts.HostFallback");
  const std::int64_t n = 300, cols = 200;
  const gram::bit_matrix a = gram::pack_bits(random_bit_bytes(n, cols, 0.3, seed), n, cols);
  gram::gram_options o;
  o.host_fallback = true;
  const auto got = gram::gram_neighbour_counts<std::int32_t>(a.view(), {20.0, false}, o);
  ASSERT_EQ(got, counts_of_coo(gram::host_gram_threshold<std::int32_t>(a.view(), {20.0, true, false}), n));
  expect_spread(got, n, "host fallback");
}

}  // namespace
