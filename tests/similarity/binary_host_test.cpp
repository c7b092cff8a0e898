// host_similarity_topk_binary — the binary-quantized mode's host form and no-GPU fallback — against
// a direct evaluation of its definition (printed seeds): each row's kc nearest rows by the Hamming
// distance of the sign bits (x > 0), ties to the smaller column; their cosines in double; the best
// k by the float score, ties to the smaller column. Random normal rows with planted ties (row 2
// all zero, rows 4 and 5 copies of row 3). Runs on every machine.
#include <spillway/similarity/host_similarity.hpp>

#include <support/gpu_test.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace {

namespace g = spillway::similarity;

std::vector<float> planted(std::int64_t n, std::int64_t d, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(n * d));
  for (auto& x : v) x = nd(gen);
  for (std::int64_t c = 0; c < d; ++c) {
    v[static_cast<std::size_t>(2 * d + c)] = 0.0f;
    v[static_cast<std::size_t>(4 * d + c)] = v[static_cast<std::size_t>(5 * d + c)] =
        v[static_cast<std::size_t>(3 * d + c)];
  }
  return v;
}

TEST(SimilarityBinaryHost, EqualsItsDefinition) {
  const std::int64_t n = 300, d = 70;
  const auto rows = planted(n, d, spillway::test::seed("SimilarityBinaryHost"));
  const auto at = [&](std::int64_t i, std::int64_t c) {
    return static_cast<double>(rows[static_cast<std::size_t>(i * d + c)]);
  };
  for (const auto& [k, kc] : std::vector<std::pair<int, int>>{{5, 20}, {16, 16}, {8, 128}}) {
    SCOPED_TRACE("k " + std::to_string(k) + " kc " + std::to_string(kc));
    const auto r = g::host_similarity_topk_binary(g::row_major(rows.data(), n, d, d), {k}, kc);
    ASSERT_EQ(r.rows, n);
    ASSERT_EQ(r.k, k);
    for (std::int64_t i = 0; i < n; ++i) {
      std::vector<std::int64_t> ham(static_cast<std::size_t>(n), 0), order;
      for (std::int64_t j = 0; j < n; ++j) {
        for (std::int64_t c = 0; c < d; ++c)
          ham[static_cast<std::size_t>(j)] += (at(i, c) > 0.0) != (at(j, c) > 0.0);
        if (j != i) order.push_back(j);
      }
      std::stable_sort(order.begin(), order.end(), [&](std::int64_t x, std::int64_t y) {
        return ham[static_cast<std::size_t>(x)] < ham[static_cast<std::size_t>(y)];
      });
      order.resize(std::min<std::size_t>(order.size(), static_cast<std::size_t>(kc)));
      std::vector<std::pair<float, std::int64_t>> scored;
      for (const std::int64_t j : order) {
        double dot = 0.0, ni = 0.0, nj = 0.0;
        for (std::int64_t c = 0; c < d; ++c) {
          dot += at(i, c) * at(j, c);
          ni += at(i, c) * at(i, c);
          nj += at(j, c) * at(j, c);
        }
        scored.emplace_back(
            ni == 0.0 || nj == 0.0 ? 0.0f : static_cast<float>(dot / (std::sqrt(ni) * std::sqrt(nj))), j);
      }
      std::sort(scored.begin(), scored.end(), [](const auto& x, const auto& y) {
        return x.first != y.first ? x.first > y.first : x.second < y.second;
      });
      for (int t = 0; t < k; ++t) {
        ASSERT_EQ(r.index(i, t), scored[static_cast<std::size_t>(t)].second) << "row " << i << " place " << t;
        ASSERT_EQ(r.value(i, t), scored[static_cast<std::size_t>(t)].first) << "row " << i << " place " << t;
      }
    }
  }
}

TEST(SimilarityBinaryHost, RefusesBadArguments) {
  std::vector<float> rows(8 * 4, 1.0f);
  const auto a = g::row_major(rows.data(), 8, 4, 4);
  const auto msg = [&](auto f) {
    try {
      f();
    } catch (const spillway::logic_error& e) {
      return std::string(e.what());
    }
    return std::string("no logic_error");
  };
  EXPECT_EQ(msg([&] { (void)g::host_similarity_topk_binary(a, {4}, 3); }),
            "host_similarity_topk_binary: candidates must be in [k = 4, 128], got 3");
  EXPECT_EQ(msg([&] {
              (void)g::host_similarity_topk_binary(a, {4, true});
            }),
            "host_similarity_topk_binary: include_diagonal is not taken (a row is its own best candidate)");
  EXPECT_NE(
      msg([&] { (void)g::host_similarity_topk_binary(a, {129}); }).find("k must be in [1, 128], got 129"),
      std::string::npos);
}

}  // namespace
