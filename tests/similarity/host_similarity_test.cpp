// Float similarity on the host (no GPU, plain C++): the host implementation, the tests' oracle
// and the no-GPU fallback, against a brute-force computation (printed seeds); and the forwarding
// headers that keep the old spillway::gemm names for one version.
#include <spillway/gemm/host_similarity.hpp>  // the forwarding header (kept for one version)
#include <spillway/pairwise/layout.hpp>
#include <spillway/similarity/host_similarity.hpp>

#include <support/gpu_test.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <type_traits>
#include <vector>

namespace {

namespace pw = spillway::pairwise;
namespace g = spillway::similarity;

TEST(HostSimilarity, TopKDenseAndZeroRowsAgainstBruteForce) {
  const auto seed = spillway::test::seed("HostSimilarity");
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const std::int64_t n = 40, d = 13;
  std::vector<float> rows(static_cast<std::size_t>(n * d));
  for (auto& x : rows) x = nd(gen);
  for (std::int64_t c = 0; c < d; ++c) {
    rows[static_cast<std::size_t>(2 * d + c)] = 0.0f;                                   // a zero row
    rows[static_cast<std::size_t>(4 * d + c)] = rows[static_cast<std::size_t>(3 * d + c)];  // a duplicate
  }
  const auto a = g::row_major(static_cast<const float*>(rows.data()), n, d);
  auto exact = [&](std::int64_t i, std::int64_t j, g::similarity_metric m) {
    double dot = 0, na = 0, nb = 0;
    for (std::int64_t c = 0; c < d; ++c) {
      const double x = rows[static_cast<std::size_t>(i * d + c)], y = rows[static_cast<std::size_t>(j * d + c)];
      dot += x * y;
      na += x * x;
      nb += y * y;
    }
    if (m == g::similarity_metric::inner_product) return dot;
    if (m == g::similarity_metric::cosine) return na == 0 || nb == 0 ? 0.0 : dot / std::sqrt(na * nb);
    return std::sqrt(std::max(0.0, na + nb - 2 * dot));
  };
  for (auto m : {g::similarity_metric::inner_product, g::similarity_metric::cosine, g::similarity_metric::euclidean}) {
    std::vector<float> full(static_cast<std::size_t>(n * n), -7.0f);
    g::host_similarity_dense(a, full.data(), pw::triangle_layout::full, m);
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < n; ++j)
        ASSERT_EQ(full[static_cast<std::size_t>(i * n + j)], static_cast<float>(exact(std::min(i, j), std::max(i, j), m)));
    const auto r = g::host_similarity_topk(a, {5}, m);
    for (std::int64_t i = 0; i < n; ++i)
      for (int t = 1; t < 5; ++t) {
        const bool ok = g::is_similarity(m) ? r.value(i, t - 1) >= r.value(i, t) : r.value(i, t - 1) <= r.value(i, t);
        ASSERT_TRUE(ok) << i;
      }
  }
  // Cosine: the zero row scores 0 with everyone; its list is all ties, smallest columns first.
  const auto c = g::host_similarity_topk(a, {3}, g::similarity_metric::cosine);
  EXPECT_EQ(c.index(2, 0), 0);
  EXPECT_EQ(c.index(2, 1), 1);
  EXPECT_EQ(c.index(2, 2), 3);
  EXPECT_EQ(c.index(3, 0), 4);  // the duplicate
  // NaN rows are found by index.
  rows[static_cast<std::size_t>(11 * d + 3)] = std::nanf("");
  EXPECT_EQ(g::detail::first_nonfinite_row(a), 11);
  EXPECT_THROW(g::detail::refuse_nonfinite(11, "t", "A"), spillway::logic_error);
}

// The old names (spillway::gemm::host_similarity_*, similarity_metric, is_similarity) are the
// similarity module's, through <spillway/gemm/host_similarity.hpp>.
TEST(HostSimilarity, OldGemmNamesForwardToTheSimilarityModule) {
  namespace old = spillway::gemm;
  static_assert(std::is_same_v<old::similarity_metric, g::similarity_metric>);
  static_assert(old::is_similarity_input_v<float> && !old::is_similarity(old::similarity_metric::euclidean));
  EXPECT_STREQ(old::to_string(old::similarity_metric::cosine), "cosine");
  const std::vector<float> rows{1, 0, 0, 1, 1, 1};
  const auto a = old::row_major(rows.data(), 3, 2);
  const auto was = old::host_similarity_topk(a, {1}, old::similarity_metric::inner_product);
  const auto now = g::host_similarity_topk(a, {1}, g::similarity_metric::inner_product);
  EXPECT_EQ(was.indices, now.indices);
  EXPECT_EQ(was.values, now.values);
  EXPECT_EQ(now.index(0, 0), 2);
}

}  // namespace
