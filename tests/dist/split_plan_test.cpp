// The static split planner (pairwise/split_plan.hpp): MPI-free, host only.
#include <spillway/pairwise/split_plan.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace sp = spillway::pairwise;

namespace {

std::vector<sp::split_task> costs(std::initializer_list<double> c) {
  std::vector<sp::split_task> t;
  for (double x : c) t.push_back({x, 10});
  return t;
}

// Every task in exactly one part; owner[] agrees with the parts; sums add up.
void check_partition(const sp::split_plan& p, const std::vector<sp::split_task>& tasks) {
  std::vector<int> seen(tasks.size(), 0);
  double cost = 0;
  std::size_t bytes = 0;
  for (std::size_t q = 0; q < p.parts.size(); ++q) {
    double c = 0;
    std::size_t b = 0;
    for (std::size_t t : p.parts[q].tasks) {
      ASSERT_LT(t, tasks.size());
      ++seen[t];
      EXPECT_EQ(p.owner[t], q);
      c += tasks[t].cost;
      b += tasks[t].bytes;
    }
    EXPECT_DOUBLE_EQ(c, p.parts[q].cost);
    EXPECT_EQ(b, p.parts[q].bytes);
    cost += c;
    bytes += b;
  }
  for (std::size_t t = 0; t < tasks.size(); ++t) EXPECT_EQ(seen[t], 1) << "task " << t;
  EXPECT_DOUBLE_EQ(cost, p.total_cost);
  EXPECT_EQ(bytes, p.total_bytes);
}

}  // namespace

TEST(SplitPlan, ContiguousEqualCostsSplitEvenly) {
  const auto t = costs({1, 1, 1, 1, 1, 1});
  const auto p = sp::split_contiguous(t, 3);
  check_partition(p, t);
  for (std::size_t q = 0; q < 3; ++q) {
    EXPECT_EQ(p.parts[q].first, 2 * q);
    EXPECT_EQ(p.parts[q].last, 2 * q + 2);
  }
  EXPECT_DOUBLE_EQ(p.imbalance(), 1.0);
}

TEST(SplitPlan, ContiguousRunsAreConsecutiveAndOrdered) {
  std::mt19937_64 g(12345);
  std::vector<sp::split_task> t(97);
  for (auto& x : t) x = {static_cast<double>(g() % 1000), static_cast<std::size_t>(g() % 100)};
  for (std::size_t parts : {1u, 2u, 3u, 5u, 96u, 97u, 150u}) {
    const auto p = sp::split_contiguous(t, parts);
    check_partition(p, t);
    ASSERT_EQ(p.parts.size(), parts);
    std::size_t at = 0;
    for (const auto& part : p.parts) {
      EXPECT_EQ(part.first, at);
      for (std::size_t k = 0; k < part.tasks.size(); ++k) EXPECT_EQ(part.tasks[k], part.first + k);
      at = part.last;
    }
    EXPECT_EQ(at, t.size());
  }
}

TEST(SplitPlan, ContiguousCutsNearTheIdealShare) {
  // Cutting at the nearest boundary: no part exceeds its share by more than the dearest task.
  std::mt19937_64 g(777);
  std::vector<sp::split_task> t(500);
  double mx = 0;
  for (auto& x : t) {
    x.cost = 1.0 + static_cast<double>(g() % 50);
    mx = std::max(mx, x.cost);
  }
  const auto p = sp::split_contiguous(t, 4);
  for (const auto& part : p.parts) EXPECT_LE(part.cost, p.total_cost / 4 + 2 * mx);
  EXPECT_LT(p.imbalance(), 1.05);
}

TEST(SplitPlan, UpperTriangleStripsGiveTheFirstRankFewerRows) {
  // A·Aᵀ, 100,000 rows in strips of 2048: rows near the top are the widest.
  const auto t = sp::strip_tasks(100000, 2048, true, 25000);
  ASSERT_EQ(t.size(), 49u);
  double pairs = 0;
  for (const auto& x : t) pairs += x.cost;
  EXPECT_DOUBLE_EQ(pairs, 100000.0 * 100001.0 / 2.0);  // every i <= j exactly once
  EXPECT_EQ(t.back().bytes, static_cast<std::size_t>(100000 - 48 * 2048) * 25000u);
  const auto p = sp::split_contiguous(t, 2);
  // Half the triangle lies in the first 1 - 1/sqrt(2) = 29.3% of the rows.
  const double cut_row = static_cast<double>(p.parts[0].last * 2048);
  EXPECT_NEAR(cut_row / 100000.0, 0.293, 0.03);
  EXPECT_LT(p.imbalance(), 1.03);
  check_partition(p, t);
}

TEST(SplitPlan, RectangularStripsCostTheirArea) {
  const auto t = sp::strip_tasks(10, 4, false, 8, 7);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_DOUBLE_EQ(t[0].cost, 28);
  EXPECT_DOUBLE_EQ(t[2].cost, 14);
  EXPECT_EQ(t[2].bytes, 16u);
}

TEST(SplitPlan, TilePairsCoverTheUpperTriangleOnce) {
  std::vector<sp::tile_pair> pairs;
  const std::int64_t n = 1000, tile = 128;  // 8 tiles, the last of 104 rows
  const auto t = sp::tile_pair_tasks(n, tile, true, 4, &pairs);
  ASSERT_EQ(t.size(), 36u);  // 8 * 9 / 2
  ASSERT_EQ(pairs.size(), t.size());
  double sum = 0;
  for (std::size_t q = 0; q < t.size(); ++q) {
    EXPECT_LE(pairs[q].i, pairs[q].j);
    sum += t[q].cost;
    if (pairs[q].i == pairs[q].j) {
      const double r = pairs[q].i == 7 ? 104.0 : 128.0;
      EXPECT_DOUBLE_EQ(t[q].cost, r * (r + 1) / 2);  // a diagonal tile: half its area
    }
  }
  EXPECT_DOUBLE_EQ(sum, 1000.0 * 1001.0 / 2.0);
  const auto full = sp::tile_pair_tasks(n, tile, false);
  EXPECT_EQ(full.size(), 64u);
}

TEST(SplitPlan, GreedyBalancesTilePairsForTwoGpus) {
  const auto t = sp::tile_pair_tasks(20000, 512, true, 3200);
  const auto g = sp::split_greedy(t, 2);
  check_partition(g, t);
  EXPECT_LT(g.imbalance(), 1.01);
  for (const auto& part : g.parts) EXPECT_TRUE(std::is_sorted(part.tasks.begin(), part.tasks.end()));
  // LPT is never worse than the contiguous split on the same tasks.
  EXPECT_LE(g.max_cost(), sp::split_contiguous(t, 2).max_cost() + 1e-9);
}

TEST(SplitPlan, EdgeCases) {
  const std::vector<sp::split_task> none;
  const auto p = sp::split_contiguous(none, 3);
  ASSERT_EQ(p.parts.size(), 3u);
  for (const auto& part : p.parts) EXPECT_EQ(part.task_count(), 0u);
  EXPECT_DOUBLE_EQ(p.imbalance(), 1.0);
  const auto z = costs({0, 0, 0, 0});
  const auto pz = sp::split_contiguous(z, 2);
  check_partition(pz, z);
  EXPECT_EQ(pz.parts[0].task_count(), 2u);  // zero costs: split by count
  const auto one = sp::split_greedy(costs({5}), 4);
  check_partition(one, costs({5}));
  EXPECT_EQ(one.parts[0].task_count(), 1u);
  EXPECT_THROW(sp::split_contiguous(costs({1}), 0), spillway::logic_error);
  EXPECT_THROW(sp::split_greedy(costs({1, -2}), 2), spillway::logic_error);
  EXPECT_THROW(sp::strip_tasks(10, 0, true), spillway::logic_error);
  EXPECT_TRUE(sp::strip_tasks(0, 16, true).empty());
}
