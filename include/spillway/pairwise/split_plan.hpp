// spillway/pairwise/split_plan.hpp — a static split of a task list across P parts (GPUs of one
// host, MPI ranks) balanced by cost. Pure host logic, no MPI, no CUDA: the same planner serves a
// two-GPU Gram job and a Gram job across ranks.
//
//   // the row strips of A·Aᵀ (n = 100000 rows, strips of 2048): strip I costs its share of the
//   // upper triangle, so the first strips (widest rows) are the dearest
//   const auto tasks = spillway::pairwise::strip_tasks(100000, 2048, /*symmetric=*/true, row_bytes);
//   const auto plan = spillway::pairwise::split_contiguous(tasks, 2);
//   plan.parts[r].first .. plan.parts[r].last   // strips of part r; plan.imbalance() ≈ 1.0x
//
// Two policies: split_contiguous keeps each part one run of consecutive tasks (what a row-block
// distribution needs: a part's rows are contiguous, so its triangle rows and its COO entries are
// one contiguous range of the output); split_greedy (longest task first to the least-loaded part)
// balances better when tasks may go anywhere.
#pragma once

#include <spillway/core/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

namespace spillway::pairwise {

/// One task of a job: what it costs (any unit: bit-MACs, pairs, seconds) and the bytes it moves.
struct split_task {
  double cost = 0.0;
  std::size_t bytes = 0;
};

/// What one part received.
struct split_part {
  /// split_contiguous: tasks [first, last). split_greedy: unused (0, 0); see `tasks`.
  std::size_t first = 0, last = 0;
  /// The part's task indices, ascending (both policies).
  std::vector<std::size_t> tasks;
  double cost = 0.0;
  std::size_t bytes = 0;
  [[nodiscard]] std::size_t task_count() const noexcept { return tasks.size(); }
};

struct split_plan {
  std::vector<split_part> parts;
  /// owner[t]: the part that runs task t.
  std::vector<std::size_t> owner;
  double total_cost = 0.0;
  std::size_t total_bytes = 0;

  [[nodiscard]] double max_cost() const noexcept {
    double m = 0.0;
    for (const auto& p : parts) m = std::max(m, p.cost);
    return m;
  }
  /// The dearest part's cost over the mean part's (1.0 = perfect; the parallel time over the ideal).
  [[nodiscard]] double imbalance() const noexcept {
    if (parts.empty() || total_cost <= 0.0) return 1.0;
    return max_cost() / (total_cost / static_cast<double>(parts.size()));
  }
};

namespace detail {

inline void check_split(const std::vector<split_task>& tasks, std::size_t parts, const char* who) {
  if (parts == 0) throw logic_error(std::string(who) + ": parts must be >= 1, got 0");
  for (std::size_t t = 0; t < tasks.size(); ++t) {
    if (!(tasks[t].cost >= 0.0)) {  // also refuses NaN
      throw logic_error(std::string(who) + ": task " + std::to_string(t) + " has cost " +
                        std::to_string(tasks[t].cost) + "; costs must be finite and >= 0");
    }
  }
}

inline split_plan finish(const std::vector<split_task>& tasks, std::vector<split_part> parts,
                         std::vector<std::size_t> owner) {
  split_plan p;
  p.parts = std::move(parts);
  p.owner = std::move(owner);
  for (const auto& t : tasks) {
    p.total_cost += t.cost;
    p.total_bytes += t.bytes;
  }
  return p;
}

}  // namespace detail

/// Splits tasks 0..n-1 into `parts` runs of consecutive tasks whose costs are as even as a cut
/// between tasks allows: part q ends at the task boundary nearest to q+1 parts' share of the
/// total (ties: the earlier boundary), never before part q−1 ends. Parts may be empty (more parts
/// than tasks). Deterministic: every rank that calls it with the same tasks gets the same plan.
inline split_plan split_contiguous(const std::vector<split_task>& tasks, std::size_t parts) {
  detail::check_split(tasks, parts, "split_contiguous");
  const std::size_t n = tasks.size();
  std::vector<double> prefix(n + 1, 0.0);
  for (std::size_t t = 0; t < n; ++t) prefix[t + 1] = prefix[t] + tasks[t].cost;
  const double total = prefix[n];
  std::vector<split_part> out(parts);
  std::vector<std::size_t> owner(n, 0);
  std::size_t begin = 0;
  for (std::size_t q = 0; q < parts; ++q) {
    std::size_t end = n;
    if (q + 1 < parts) {
      const double target = total * static_cast<double>(q + 1) / static_cast<double>(parts);
      // First boundary whose prefix reaches the target, then the nearer of it and the one before.
      end = static_cast<std::size_t>(
          std::lower_bound(prefix.begin() + static_cast<std::ptrdiff_t>(begin), prefix.end(), target) -
          prefix.begin());
      if (end > n) end = n;
      if (end > begin && target - prefix[end - 1] <= prefix[end] - target) --end;
      // Zero-cost tasks never leave a part empty while later parts get work only because of ties.
      if (total <= 0.0) end = std::min(n, begin + (n - begin) / (parts - q));
    }
    split_part& p = out[q];
    p.first = begin;
    p.last = end;
    for (std::size_t t = begin; t < end; ++t) {
      p.tasks.push_back(t);
      p.cost += tasks[t].cost;
      p.bytes += tasks[t].bytes;
      owner[t] = q;
    }
    begin = end;
  }
  return detail::finish(tasks, std::move(out), std::move(owner));
}

/// Splits tasks across `parts` by longest-processing-time first: dearest task first, each to the
/// part with the least cost so far (ties: the lower part, the lower task index). Within 4/3 of the
/// best possible makespan; parts hold any tasks (listed ascending).
inline split_plan split_greedy(const std::vector<split_task>& tasks, std::size_t parts) {
  detail::check_split(tasks, parts, "split_greedy");
  const std::size_t n = tasks.size();
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return tasks[a].cost > tasks[b].cost; });
  std::vector<split_part> out(parts);
  std::vector<std::size_t> owner(n, 0);
  for (std::size_t t : order) {
    std::size_t best = 0;
    for (std::size_t q = 1; q < parts; ++q)
      if (out[q].cost < out[best].cost) best = q;
    out[best].tasks.push_back(t);
    out[best].cost += tasks[t].cost;
    out[best].bytes += tasks[t].bytes;
    owner[t] = best;
  }
  for (auto& p : out) std::sort(p.tasks.begin(), p.tasks.end());
  return detail::finish(tasks, std::move(out), std::move(owner));
}

/// The row strips of an all-pairs job as tasks: strip I holds rows [I·P, min(I·P + P, n)). For
/// A·Aᵀ (symmetric) a strip computes its rows against the columns from its first row on and
/// only the upper half of its diagonal block: cost = rows·(n − I·P) − rows·(rows − 1)/2 pairs.
/// For A·Bᵀ every strip costs rows·cols_b pairs. Bytes: the strip's own rows of `row_bytes`.
inline std::vector<split_task> strip_tasks(std::int64_t n, std::int64_t strip_rows, bool symmetric,
                                           std::size_t row_bytes = 0, std::int64_t cols_b = -1) {
  if (n < 0) throw logic_error("strip_tasks: n is " + std::to_string(n));
  if (strip_rows < 1)
    throw logic_error("strip_tasks: strip_rows must be >= 1, got " + std::to_string(strip_rows));
  const std::int64_t w = symmetric ? n : (cols_b < 0 ? n : cols_b);
  std::vector<split_task> t;
  for (std::int64_t r0 = 0; r0 < n; r0 += strip_rows) {
    const std::int64_t r = std::min(strip_rows, n - r0);
    const double rows = static_cast<double>(r);
    const double cost = symmetric ? rows * static_cast<double>(n - r0) - rows * (rows - 1.0) / 2.0
                                  : rows * static_cast<double>(w);
    t.push_back({cost, static_cast<std::size_t>(r) * row_bytes});
  }
  return t;
}

/// One tile pair (I, J) of a tiled all-pairs job: rows [I·T, ..) against rows [J·T, ..).
struct tile_pair {
  std::int64_t i = 0, j = 0;
};

/// The tile pairs of an n x n job in tiles of T rows: for A·Aᵀ (symmetric) the upper triangle
/// I ≤ J, row by row, a diagonal tile costing half its area (only i ≤ j inside it is needed);
/// otherwise every (I, J). Cost is in pairs; bytes are the two tiles' rows of `row_bytes`
/// (one tile on the diagonal).
inline std::vector<split_task> tile_pair_tasks(std::int64_t n, std::int64_t tile, bool symmetric,
                                               std::size_t row_bytes = 0,
                                               std::vector<tile_pair>* pairs = nullptr) {
  if (n < 0) throw logic_error("tile_pair_tasks: n is " + std::to_string(n));
  if (tile < 1) throw logic_error("tile_pair_tasks: tile must be >= 1, got " + std::to_string(tile));
  const std::int64_t nt = (n + tile - 1) / tile;
  std::vector<split_task> t;
  if (pairs != nullptr) pairs->clear();
  for (std::int64_t I = 0; I < nt; ++I) {
    const std::int64_t ri = std::min(tile, n - I * tile);
    for (std::int64_t J = symmetric ? I : 0; J < nt; ++J) {
      const std::int64_t rj = std::min(tile, n - J * tile);
      const bool diag = symmetric && I == J;
      const double area = static_cast<double>(ri) * static_cast<double>(rj);
      const double cost = diag ? static_cast<double>(ri) * static_cast<double>(ri + 1) / 2.0 : area;
      const std::size_t bytes = static_cast<std::size_t>(diag ? ri : ri + rj) * row_bytes;
      t.push_back({cost, bytes});
      if (pairs != nullptr) pairs->push_back({I, J});
    }
  }
  return t;
}

}  // namespace spillway::pairwise
