// spillway/dist/topk_lists.hpp — what an owner does with the per-row top-k lists that reach it
// (pure host logic: no MPI, no CUDA). Each list is sorted best first in the one total order of the
// top-k sinks (better value, then smaller column), −1 past its last entry; the lists of one row
// hold disjoint candidates (each pair is computed by one rank). So the row's final list is the
// first k of a k-way merge of them — no re-offer of every entry, and exactly the one-process list.
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/pairwise/sinks.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace spillway::dist {

/// `lists` sorted per-row lists of `k` places for `rows` rows, list q's row i at
/// (values[q] + i·k, indices[q] + i·k). The merged first k of each row go to (out_v, out_c) (which
/// may be any list's own storage: each row is merged into a scratch row first).
template <class V>
void merge_topk_lists(std::int64_t rows, int k, bool larger, const std::vector<const V*>& values,
                      const std::vector<const std::int64_t*>& indices, V* out_v, std::int64_t* out_c) {
  if (values.size() != indices.size())
    throw logic_error("merge_topk_lists: " + std::to_string(values.size()) + " value lists, " +
                      std::to_string(indices.size()) + " index lists");
  const std::size_t L = values.size();
  const auto kk = static_cast<std::size_t>(k);
  if (L == 2 && k <= pairwise::max_top_k) {
    // Two lists (two ranks, or a rank's own and one that arrived): a two-pointer merge. The loop
    // below over any number of lists took 20 ms for 50,000 rows of k = 32 on one core of the lent
    // H200 pair's host (12 ns an entry); this one a fraction of that (tests/dist compare the two).
    const V* const va = values[0];
    const V* const vb = values[1];
    const std::int64_t* const ca = indices[0];
    const std::int64_t* const cb = indices[1];
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (rows * static_cast<std::int64_t>(k) > (1 << 16))
#endif
    for (std::int64_t i = 0; i < rows; ++i) {
      const std::size_t base = static_cast<std::size_t>(i) * kk;
      V sv[pairwise::max_top_k];
      std::int64_t sc[pairwise::max_top_k];
      int x = 0, y = 0, t = 0;
      for (; t < k; ++t) {
        const bool ha = x < k && ca[base + static_cast<std::size_t>(x)] >= 0;
        const bool hb = y < k && cb[base + static_cast<std::size_t>(y)] >= 0;
        if (!ha && !hb) break;
        const std::size_t ea = base + static_cast<std::size_t>(x), eb = base + static_cast<std::size_t>(y);
        if (ha && (!hb || pairwise::detail::topk_better(larger, va[ea], ca[ea], vb[eb], cb[eb]))) {
          sv[t] = va[ea];
          sc[t] = ca[ea];
          ++x;
        } else {
          sv[t] = vb[eb];
          sc[t] = cb[eb];
          ++y;
        }
      }
      for (; t < k; ++t) {
        sv[t] = V{};
        sc[t] = -1;
      }
      std::copy(sv, sv + k, out_v + base);
      std::copy(sc, sc + k, out_c + base);
    }
    return;
  }
#ifdef _OPENMP
#pragma omp parallel if (rows * static_cast <std::int64_t>(L) * k > (1 << 16))
#endif
  {
    std::vector<int> at(L);
    std::vector<V> sv(kk);
    std::vector<std::int64_t> sc(kk);
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
    for (std::int64_t i = 0; i < rows; ++i) {
      const std::size_t base = static_cast<std::size_t>(i) * kk;
      std::fill(at.begin(), at.end(), 0);
      int t = 0;
      for (; t < k; ++t) {
        std::size_t best = L;
        for (std::size_t q = 0; q < L; ++q) {
          if (at[q] >= k) continue;
          const std::size_t e = base + static_cast<std::size_t>(at[q]);
          if (indices[q][e] < 0) continue;
          if (best == L) {
            best = q;
            continue;
          }
          const std::size_t b = base + static_cast<std::size_t>(at[best]);
          if (pairwise::detail::topk_better(larger, values[q][e], indices[q][e], values[best][b],
                                            indices[best][b]))
            best = q;
        }
        if (best == L) break;
        const std::size_t b = base + static_cast<std::size_t>(at[best]++);
        sv[static_cast<std::size_t>(t)] = values[best][b];
        sc[static_cast<std::size_t>(t)] = indices[best][b];
      }
      for (; t < k; ++t) {
        sv[static_cast<std::size_t>(t)] = V{};
        sc[static_cast<std::size_t>(t)] = -1;
      }
      std::copy(sv.begin(), sv.end(), out_v + base);
      std::copy(sc.begin(), sc.end(), out_c + base);
    }
  }
}

/// Keeps rows [from, to) of `r` (rows numbered from 0), moving them to the front: no new storage.
template <class V>
void keep_topk_rows(pairwise::topk_result<V>& r, std::int64_t from, std::int64_t to) {
  if (from < 0 || to < from || to > r.rows)
    throw logic_error("keep_topk_rows: rows [" + std::to_string(from) + ", " + std::to_string(to) + ") of " +
                      std::to_string(r.rows));
  const auto k = static_cast<std::ptrdiff_t>(r.k);
  if (from > 0) {
    std::move(r.values.begin() + from * k, r.values.begin() + to * k, r.values.begin());
    std::move(r.indices.begin() + from * k, r.indices.begin() + to * k, r.indices.begin());
  }
  r.values.resize(static_cast<std::size_t>((to - from) * k));
  r.indices.resize(static_cast<std::size_t>((to - from) * k));
  r.rows = to - from;
}

}  // namespace spillway::dist
