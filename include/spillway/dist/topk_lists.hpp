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

#ifdef _OPENMP
#include <omp.h>
#endif

namespace spillway::dist {

/// The host threads one rank's loops over lists may use: the host's processors shared among the
/// ranks on it (`ranks_on_host`, communicator::local_size()). Each rank taking every core made its
/// merges several times slower: the threads spin at the loop's barrier for those the other rank's
/// threads displaced (docs/distributed.md, "host_threads").
inline int host_threads(int ranks_on_host) {
#ifdef _OPENMP
  const int procs = omp_get_num_procs();
  return std::max(1, procs / std::max(1, ranks_on_host));
#else
  (void)ranks_on_host;
  return 1;
#endif
}

/// One entry of a list as it travels to its row's owner: the value and a 32-bit column (n < 2^31:
/// check_exchange bounds n·k), 8 bytes for 4-byte values against the 12 of the value + int64
/// vectors the lists are kept in; laid out as the device's entry (pairwise::detail::
/// topk_entry_size, which the split's cost model counts). Owners merge straight from these
/// (topk_list_ref).
template <class V>
struct topk_wire {
  V v;
  std::int32_t c;
};

/// Entries [0, count) of (values, indices) into `out`, on `threads` threads.
template <class V>
void pack_topk_wire(const V* values, const std::int64_t* indices, std::int64_t count, topk_wire<V>* out,
                    int threads = 1) {
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static) if (count > (1 << 16))
#endif
  for (std::int64_t e = 0; e < count; ++e) out[e] = topk_wire<V>{values[e], static_cast<std::int32_t>(indices[e])};
  (void)threads;
}

/// One sorted list per row of `rows` rows (k places each, row i at entries i·k ..): the values and
/// int64 columns a rank keeps, or the (value, int32 column) entries that arrived from another.
template <class V>
struct topk_list_ref {
  const V* v = nullptr;
  const std::int64_t* c = nullptr;
  const topk_wire<V>* w = nullptr;  ///< set: the entries as they travelled (v, c unused)
  [[nodiscard]] V value(std::size_t e) const { return w != nullptr ? w[e].v : v[e]; }
  [[nodiscard]] std::int64_t col(std::size_t e) const { return w != nullptr ? static_cast<std::int64_t>(w[e].c) : c[e]; }
};

/// The merged first k of each row of `lists` go to (out_v, out_c): a list's own storage (row i
/// into its row i, through a scratch row), or storage that no input row shares. `threads`: the
/// OpenMP threads to use (0: OpenMP's default; dist passes host_threads).
template <class V>
void merge_topk_refs(std::int64_t rows, int k, bool larger, const std::vector<topk_list_ref<V>>& lists, V* out_v,
                     std::int64_t* out_c, int threads = 0) {
#ifdef _OPENMP
  const int nt = threads > 0 ? threads : omp_get_max_threads();
#else
  (void)threads;
#endif
  const std::size_t L = lists.size();
  const auto kk = static_cast<std::size_t>(k);
  if (L == 2 && k <= pairwise::max_top_k) {
    // Two lists (two ranks, or a rank's own and one that arrived): a two-pointer merge, a fraction
    // of the time of the loop below over any number of lists (docs/distributed.md, "two-list
    // merge"; tests/dist compare the two).
    const topk_list_ref<V> la = lists[0], lb = lists[1];
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (rows * static_cast<std::int64_t>(k) > (1 << 16))
#endif
    for (std::int64_t i = 0; i < rows; ++i) {
      const std::size_t base = static_cast<std::size_t>(i) * kk;
      V sv[pairwise::max_top_k];
      std::int64_t sc[pairwise::max_top_k];
      int x = 0, y = 0, t = 0;
      for (; t < k; ++t) {
        const std::size_t ea = base + static_cast<std::size_t>(x), eb = base + static_cast<std::size_t>(y);
        const std::int64_t ca = x < k ? la.col(ea) : -1, cb = y < k ? lb.col(eb) : -1;
        const bool ha = ca >= 0, hb = cb >= 0;
        if (!ha && !hb) break;
        if (ha && (!hb || pairwise::detail::topk_better(larger, la.value(ea), ca, lb.value(eb), cb))) {
          sv[t] = la.value(ea);
          sc[t] = ca;
          ++x;
        } else {
          sv[t] = lb.value(eb);
          sc[t] = cb;
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
#pragma omp parallel num_threads(nt) if (rows * static_cast <std::int64_t>(L) * k > (1 << 16))
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
          if (lists[q].col(e) < 0) continue;
          if (best == L) {
            best = q;
            continue;
          }
          const std::size_t b = base + static_cast<std::size_t>(at[best]);
          if (pairwise::detail::topk_better(larger, lists[q].value(e), lists[q].col(e), lists[best].value(b),
                                            lists[best].col(b)))
            best = q;
        }
        if (best == L) break;
        const std::size_t b = base + static_cast<std::size_t>(at[best]++);
        sv[static_cast<std::size_t>(t)] = lists[best].value(b);
        sc[static_cast<std::size_t>(t)] = lists[best].col(b);
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

/// merge_topk_refs over lists kept as (values[q], indices[q]).
template <class V>
void merge_topk_lists(std::int64_t rows, int k, bool larger, const std::vector<const V*>& values,
                      const std::vector<const std::int64_t*>& indices, V* out_v, std::int64_t* out_c,
                      int threads = 0) {
  if (values.size() != indices.size())
    throw logic_error("merge_topk_lists: " + std::to_string(values.size()) + " value lists, " +
                      std::to_string(indices.size()) + " index lists");
  std::vector<topk_list_ref<V>> refs;
  for (std::size_t q = 0; q < values.size(); ++q) refs.push_back(topk_list_ref<V>{values[q], indices[q], nullptr});
  merge_topk_refs(rows, k, larger, refs, out_v, out_c, threads);
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
