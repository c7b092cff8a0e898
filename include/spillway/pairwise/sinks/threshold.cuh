// spillway/pairwise/sinks/threshold.cuh — threshold → sparse: each strip's passing entries are
// counted, scanned and compacted on the device (only those cross the link); the per-row offsets
// come back through the slot's pinned staging, and once the strip's work has finished the kept
// columns and values are copied out (complete, on the worker thread: enqueue never waits).
// collect assembles the COO sorted by row, then column. A job whose threshold is decided in the
// producer's epilogue sizes the COO's vectors ahead, under the products (sized_ahead).
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/fault_hook.hpp>
#include <spillway/core/large_vector.hpp>
#include <spillway/core/launch.hpp>
#include <spillway/pairwise/sink_kernels.cuh>
#include <spillway/pairwise/sinks.hpp>
#include <spillway/pairwise/sinks/sink.cuh>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <future>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace spillway::pairwise::detail {

/// One strip's kept entries: per row offsets (rows + 1), then columns and values; or, decided in
/// the producer's epilogue, the appended entries as they came (strip-local rows, no offsets).
template <class V>
struct strip_sparse {
  std::vector<std::int64_t> offsets;  // rows + 1
  std::vector<std::int32_t> rows;     // appended: each entry's strip-local row
  std::vector<std::int32_t> cols;
  std::vector<V> vals;
};

/// Whether a producer decides a threshold in its own epilogue (static constexpr bool
/// decides_threshold: the bit Gram's tile kernels, into an append_writer).
template <class P, class = void>
struct decides_threshold : std::false_type {};
template <class P>
struct decides_threshold<P, std::void_t<decltype(P::decides_threshold)>>
    : std::bool_constant<P::decides_threshold> {};

/// Runs f(q) for q in [0, 3) on three threads (OpenMP sections); an exception from any is rethrown
/// afterwards (one must not leave an OpenMP section).
template <class F>
void on_three_threads(F&& f) {
  std::exception_ptr failed[3];
  const auto guarded = [&](int q) {
    try {
      f(q);
    } catch (...) {
      failed[q] = std::current_exception();
    }
  };
#pragma omp parallel sections num_threads(3)
  {
#pragma omp section
    guarded(0);
#pragma omp section
    guarded(1);
#pragma omp section
    guarded(2);
  }
  for (const std::exception_ptr& e : failed)
    if (e) std::rethrow_exception(e);
}

/// A COO's three vectors sized ahead, while the products run. Sizing writes (and first touches)
/// every page: for the ChEMBL-size fingerprint search's 30 M entries (600 MB) that took 0.12-0.15 s
/// after the products, with the three vectors on threads of their own. Once 60% of the pairs are
/// done, the entries kept so far extrapolate the result (+10%), and a thread of its own sizes the
/// vectors to that; collect takes them if they are large enough (shrinking a vector of trivial
/// elements is free) and drops them otherwise. Not attempted when the estimate is over a quarter
/// of the host's memory.
template <class V>
struct sized_ahead {
  std::int64_t work_total = 0;  // pairs of the job's strips (rows x columns)
  bool both = false;            // the COO holds both halves
  bool rows = true;             // a row vector too (COO; not for CSR)
  std::atomic<std::int64_t> work_done{0}, kept{0};
  std::atomic<bool> started{false};
  std::future<void> ready;  // the sizing thread
  bool ok = false;          // set by that thread
  std::size_t size = 0;
  std::vector<std::int64_t> row, col;
  std::vector<V> value;

  sized_ahead() = default;
  sized_ahead(const sized_ahead&) = delete;
  sized_ahead& operator=(const sized_ahead&) = delete;
  ~sized_ahead() {
    if (ready.valid()) ready.wait();  // the vectors outlive their sizing thread
  }
  /// A strip of `work` pairs kept `entries`: past 60% of the work, start the sizing thread (once).
  void note(std::int64_t work, std::int64_t entries) {
    const std::int64_t done = work_done.fetch_add(work) + work;
    const std::int64_t k = kept.fetch_add(entries) + entries;
    if (10 * done < 6 * work_total || started.exchange(true)) return;
    const double per_pair = static_cast<double>(k) / static_cast<double>(done);
    const double est = per_pair * static_cast<double>(work_total) * (both ? 2.0 : 1.0) * 1.1 + 4096.0;
    const double bytes = est * static_cast<double>(16 + sizeof(V));
    if (bytes > 0.25 * ::spillway::detail::host_memory_bytes()) return;
    const auto n = static_cast<std::size_t>(est);
    try {
      ready = std::async(std::launch::async, [this, n] {
        try {
          on_three_threads([&](int q) {
            if (q == 0 && rows) ::spillway::detail::size_large(row, n);
            if (q == 1) ::spillway::detail::size_large(col, n);
            if (q == 2) ::spillway::detail::size_large(value, n);
          });
          size = n;
          ok = true;
        } catch (...) {
          ok = false;  // collect sizes its own
        }
      });
    } catch (...) {
      // No thread to size them on: collect sizes its own.
    }
  }
  /// Whether the vectors are sized to at least `all` (waits for the sizing thread).
  bool holds(std::size_t all) {
    if (!ready.valid()) return false;
    ready.wait();
    return ok && size >= all;
  }
};

template <class V>
struct threshold_sink : sink_base {
  threshold_options thr{};
  std::vector<strip_sparse<V>> strips;  // by strip index
  /// Size the COO ahead while the products run (collect; the distributed job collects parts and
  /// turns this off).
  bool size_ahead = true;
  /// The caller collects CSR (collect_csr): no row vector is sized ahead.
  bool csr = false;
  std::shared_ptr<sized_ahead<V>> ahead;

  threshold_sink() = default;
  explicit threshold_sink(const threshold_options& o) : thr(o) {}

  [[nodiscard]] sink_footprint footprint() const {
    sink_footprint f;
    f.compaction = true;
    return f;
  }
  template <class Job>
  void start(Job& job) {
    strips.assign(static_cast<std::size_t>(job.plan.strips), strip_sparse<V>{});
    ahead.reset();
    if constexpr (fused<Job>) {
      if (!size_ahead) return;
      ahead = std::make_shared<sized_ahead<V>>();
      // span_of_task (pair_job.cuh, found through the job's namespace) owns the strip arithmetic.
      for (std::size_t t = 0; t < static_cast<std::size_t>(job.plan.strips); ++t) {
        const strip_span st = span_of_task(job, t);
        ahead->work_total += st.rows * st.cols;
      }
      ahead->both = job.symmetric && thr.both_halves;
      ahead->rows = !csr;
    }
  }
  /// The strip's row offsets (P + 1 int64) come back through pinned staging.
  [[nodiscard]] std::vector<std::size_t> pinned_buffers(const pair_plan& p) const {
    return {static_cast<std::size_t>(p.panel_rows + 1) * 8u};
  }
  /// The compaction area of a slot: offsets, then columns, then values.
  struct compact_area {
    std::int64_t* offs;
    std::int32_t* cols;
    V* vals;
  };
  static compact_area area_of(const pair_plan& p, task_slot& slot, std::int64_t rows, std::int64_t cols) {
    std::byte* comp = slot.device<std::byte>(p.buf_compact);
    const std::size_t at_cols = round8(static_cast<std::size_t>(p.panel_rows + 1) * 8u);
    const std::size_t at_vals = at_cols + round8(static_cast<std::size_t>(rows * cols) * 4u);
    return {reinterpret_cast<std::int64_t*>(comp), reinterpret_cast<std::int32_t*>(comp + at_cols),
            reinterpret_cast<V*>(comp + at_vals)};
  }
  /// Decided in the producer's epilogue: the strip's passing pairs are appended (row, column,
  /// value) where the slot's score strip and compacted lists would be, and nothing else is
  /// written. Needs 4-byte room per entry in the score strip for the rows.
  template <class Job>
  static constexpr bool fused = decides_threshold<std::decay_t<decltype(std::declval<Job&>().prod)>>::value &&
                                sizeof(V) >= 4;
  template <class Job, class Compute>
  std::size_t enqueue(Job& job, const strip_span& st, task_slot& slot, stream_view s, Compute&& compute) {
    V* sc_buf = slot.device<V>(0);
    const std::int64_t PI = st.rows, W = st.cols;
    if constexpr (fused<Job>) {
      const compact_area a = area_of(job.plan, slot, PI, W);
      auto* count = reinterpret_cast<unsigned long long*>(a.offs);
      SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaMemsetAsync(count, 0, 8, s.value())));
      compute(append_writer<V>{reinterpret_cast<std::int32_t*>(sc_buf), a.cols, a.vals, count, st.first_row,
                               thr.threshold, job.prod.larger(),
                               st.symmetric ? (thr.include_diagonal ? 0 : 1) : -1});
      SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(
          cudaMemcpyAsync(slot.pinned<std::int64_t>(0), count, 8, cudaMemcpyDeviceToHost, s.value())));
      return 8;
    }
    compute(score_writer<V>{sc_buf, st.first_row, st.end_row, W, st.first_col, st.symmetric});
    const compact_area a = area_of(job.plan, slot, PI, W);
    const int shift = st.symmetric ? (thr.include_diagonal ? 0 : 1) : -1;
    const bool larger = job.prod.larger();
    threshold_count_kernel<V>
        <<<grid_blocks(PI, 8), 256, 0, s.value()>>>(sc_buf, PI, W, shift, larger, thr.threshold, a.offs);
    SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaGetLastError()));
    exclusive_scan_kernel<<<1, 1024, 0, s.value()>>>(a.offs, PI);
    SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaGetLastError()));
    threshold_write_kernel<V><<<grid_blocks(PI, 8), 256, 0, s.value()>>>(
        sc_buf, PI, W, shift, larger, thr.threshold, st.first_col, a.offs, a.cols, a.vals);
    SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaGetLastError()));
    const auto bytes = static_cast<std::size_t>(PI + 1) * 8u;
    SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(
        cudaMemcpyAsync(slot.pinned<std::int64_t>(0), a.offs, bytes, cudaMemcpyDeviceToHost, s.value())));
    return bytes;
  }
  /// The kept count (the last offset, now on the host) sizes the copies of columns and values.
  template <class Job>
  std::size_t complete(Job& job, const strip_span& st, task_slot& slot) {
    if constexpr (fused<Job>) return complete_appended(job, st, slot);
    strip_sparse<V>& out = strips[static_cast<std::size_t>(st.strip)];
    const std::int64_t* offs = slot.pinned<std::int64_t>(0);
    out.offsets.assign(offs, offs + st.rows + 1);
    const auto total = static_cast<std::size_t>(out.offsets.back());
    const compact_area a = area_of(job.plan, slot, st.rows, st.cols);
    fetch(slot, total, out, nullptr, a.cols, a.vals);
    return total * (4u + sizeof(V));
  }
  /// Sizes the strip's host lists to `total` entries and copies them from the device (the rows
  /// only where `rows` is given) on the slot's stream, then waits for it.
  static void fetch(task_slot& slot, std::size_t total, strip_sparse<V>& out, const std::int32_t* rows,
                    const std::int32_t* cols, const V* vals) {
    if (rows != nullptr) out.rows.resize(total);
    out.cols.resize(total);
    out.vals.resize(total);
    if (total == 0) return;
    device_guard g(slot.device());
    const stream_view s = slot.stream();
    const auto copy = [&](void* dst, const void* src, std::size_t bytes) {
      SPILLWAY_CUDA_TRY(
          SPILLWAY_FAULT_CALL(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s.value())));
    };
    if (rows != nullptr) copy(out.rows.data(), rows, total * 4u);
    copy(out.cols.data(), cols, total * 4u);
    copy(out.vals.data(), vals, total * sizeof(V));
    s.synchronize();
  }
  /// The appended entries (their count now on the host) copied out as they came; collect orders them.
  template <class Job>
  std::size_t complete_appended(Job& job, const strip_span& st, task_slot& slot) {
    strip_sparse<V>& out = strips[static_cast<std::size_t>(st.strip)];
    const auto total = static_cast<std::size_t>(slot.pinned<std::int64_t>(0)[0]);
    if (total > static_cast<std::size_t>(st.rows) * static_cast<std::size_t>(st.cols)) {
      throw logic_error("threshold sink: strip " + std::to_string(st.strip) + " appended " +
                        std::to_string(total) + " pairs, more than its " + std::to_string(st.rows) + " x " +
                        std::to_string(st.cols) + " entries");
    }
    const compact_area a = area_of(job.plan, slot, st.rows, st.cols);
    fetch(slot, total, out, reinterpret_cast<const std::int32_t*>(slot.device<V>(0)), a.cols, a.vals);
    if (ahead) ahead->note(st.rows * st.cols, static_cast<std::int64_t>(total));
    return 8 + total * (8u + sizeof(V));
  }
  /// The entries of strips [first, last) (each pair once, as kept: no mirrored half), sorted by
  /// row, then column: a rank's share of the distributed job.
  template <class Job>
  coo_result<V> collect_strips(Job& job, std::size_t first, std::size_t last) {
    if constexpr (fused<Job>) return collect_appended(job, first, last, false, nullptr);
    coo_result<V> r;
    const std::int64_t P_ = job.plan.panel_rows;
    std::size_t total = 0;
    for (std::size_t I = first; I < last; ++I) total += strips[I].cols.size();
    r.row.reserve(total);
    r.col.reserve(total);
    r.value.reserve(total);
    for (std::size_t I = first; I < last; ++I) {
      const auto& s = strips[I];
      for (std::size_t q = 0; q + 1 < s.offsets.size(); ++q) {
        for (auto e = s.offsets[q]; e < s.offsets[q + 1]; ++e) {
          r.row.push_back(static_cast<std::int64_t>(I) * P_ + static_cast<std::int64_t>(q));
          r.col.push_back(s.cols[static_cast<std::size_t>(e)]);
          r.value.push_back(s.vals[static_cast<std::size_t>(e)]);
        }
      }
    }
    return r;
  }
  /// A short row's m entries (distinct columns) sorted by column in place, values alongside.
  static void sort_short_row(std::int64_t* col, V* value, std::size_t m) {
    for (std::size_t x = 1; x < m; ++x) {
      const std::int64_t c = col[x];
      const V v = value[x];
      std::size_t y = x;
      for (; y > 0 && col[y - 1] > c; --y) {
        col[y] = col[y - 1];
        value[y] = value[y - 1];
      }
      col[y] = c;
      value[y] = v;
    }
  }
  /// The appended entries of strips [first, last) as the COO sorted by row, then column (both halves: each
  /// pair (i, j), i ≠ j, also as (j, i)), in parallel: rows counted, placed, then each row's
  /// entries sorted by column. Into the vectors sized `ahead` where they hold the result.
  template <class Job>
  coo_result<V> collect_appended(Job& job, std::size_t first, std::size_t last, bool both,
                                 sized_ahead<V>* pre) {
    std::vector<std::int64_t> start;
    return assemble(job, first, last, both, pre, true, start);
  }
  /// collect_appended's work; `with_rows` false leaves the row vector empty (CSR: `start`, the
  /// rows' first entries and the end, is its indptr).
  template <class Job>
  coo_result<V> assemble(Job& job, std::size_t first, std::size_t last, bool both, sized_ahead<V>* pre,
                         bool with_rows, std::vector<std::int64_t>& start) {
    const std::int64_t P_ = job.plan.panel_rows;
    const std::int64_t n = job.prod.rows(false);
    const auto f0 = static_cast<std::int64_t>(first), ns = static_cast<std::int64_t>(last);
    start.assign(static_cast<std::size_t>(n) + 1, 0);
#pragma omp parallel for schedule(dynamic, 4)
    for (std::int64_t I = f0; I < ns; ++I) {
      const strip_sparse<V>& s = strips[static_cast<std::size_t>(I)];
      for (std::size_t e = 0; e < s.rows.size(); ++e) {
        const std::int64_t i = I * P_ + s.rows[e], j = s.cols[e];
#pragma omp atomic
        ++start[static_cast<std::size_t>(i) + 1];
        if (both && j != i) {
#pragma omp atomic
          ++start[static_cast<std::size_t>(j) + 1];
        }
      }
    }
    for (std::size_t q = 0; q < static_cast<std::size_t>(n); ++q) start[q + 1] += start[q];
    const auto all = static_cast<std::size_t>(start[static_cast<std::size_t>(n)]);
    coo_result<V> r;
    if (pre != nullptr && pre->holds(all) && (pre->rows || !with_rows)) {
      r.row = std::move(pre->row);
      r.col = std::move(pre->col);
      r.value = std::move(pre->value);
      r.row.resize(with_rows ? all : 0);
      r.col.resize(all);
      r.value.resize(all);
      ::spillway::detail::release_unused(r.row);
      ::spillway::detail::release_unused(r.col);
      ::spillway::detail::release_unused(r.value);
    } else {
      if (pre != nullptr) {
        pre->row = {};
        pre->col = {};
        pre->value = {};
      }
      on_three_threads([&](int q) {
        if (q == 0) ::spillway::detail::size_large(r.row, with_rows ? all : 0);
        if (q == 1) ::spillway::detail::size_large(r.col, all);
        if (q == 2) ::spillway::detail::size_large(r.value, all);
      });
    }
    std::vector<std::int64_t> fill(start.begin(), start.end() - 1);
#pragma omp parallel for schedule(dynamic, 4)
    for (std::int64_t I = f0; I < ns; ++I) {
      const strip_sparse<V>& s = strips[static_cast<std::size_t>(I)];
      for (std::size_t e = 0; e < s.rows.size(); ++e) {
        const std::int64_t i = I * P_ + s.rows[e], j = s.cols[e];
        std::int64_t m;
#pragma omp atomic capture
        m = fill[static_cast<std::size_t>(i)]++;
        r.col[static_cast<std::size_t>(m)] = j;
        r.value[static_cast<std::size_t>(m)] = s.vals[e];
        if (both && j != i) {
#pragma omp atomic capture
          m = fill[static_cast<std::size_t>(j)]++;
          r.col[static_cast<std::size_t>(m)] = i;
          r.value[static_cast<std::size_t>(m)] = s.vals[e];
        }
      }
    }
    // Each row's entries by column: insertion sort in place for short rows (no allocation), a
    // sort of (column, value) pairs for long ones; an allocation that fails is rethrown here.
    std::exception_ptr failed;
#pragma omp parallel
    {
      std::vector<std::pair<std::int64_t, V>> row;
#pragma omp for schedule(dynamic, 1024)
      for (std::int64_t q = 0; q < n; ++q) {
        const auto b = static_cast<std::size_t>(start[static_cast<std::size_t>(q)]);
        const auto e = static_cast<std::size_t>(start[static_cast<std::size_t>(q) + 1]);
        if (with_rows)
          for (std::size_t x = b; x < e; ++x) r.row[x] = q;
        if (e - b <= 32) {
          sort_short_row(r.col.data() + b, r.value.data() + b, e - b);
          continue;
        }
        try {
          row.clear();
          for (std::size_t x = b; x < e; ++x) row.emplace_back(r.col[x], r.value[x]);
        } catch (...) {
#pragma omp critical(spillway_threshold_collect)
          if (!failed) failed = std::current_exception();
          continue;
        }
        std::sort(row.begin(), row.end(), [](const auto& u, const auto& w) { return u.first < w.first; });
        for (std::size_t x = b; x < e; ++x) {
          r.col[x] = row[x - b].first;
          r.value[x] = row[x - b].second;
        }
      }
    }
    if (failed) std::rethrow_exception(failed);
    return r;
  }
  /// The result as CSR over the job's rows x columns (`csr` set before the job: nothing is sized
  /// for a row vector); a job that does not append assembles its COO and converts it.
  template <class Job>
  csr_result<V> collect_csr(Job& job) {
    const std::int64_t n = job.prod.rows(false), cols = job.symmetric ? n : job.prod.rows(true);
    if constexpr (fused<Job>) {
      csr_result<V> c;
      c.rows = n;
      c.cols = cols;
      coo_result<V> r =
          assemble(job, 0, strips.size(), job.symmetric && thr.both_halves, ahead.get(), false, c.indptr);
      c.col = std::move(r.col);
      c.value = std::move(r.value);
      return c;
    } else {
      return to_csr(collect(job), n, cols);
    }
  }
  /// The COO sorted by row, then column (A·Aᵀ with both_halves: row i's mirrored entries j < i
  /// first, then its own, each ascending).
  template <class Job>
  coo_result<V> collect(Job& job) {
    if constexpr (fused<Job>)
      return collect_appended(job, 0, strips.size(), job.symmetric && thr.both_halves, ahead.get());
    if (!(job.symmetric && thr.both_halves)) return collect_strips(job, 0, strips.size());
    coo_result<V> r;
    const std::int64_t P_ = job.plan.panel_rows;
    const std::int64_t n = job.prod.rows(false);
    // Both halves: row i holds the mirrored (j < i) entries, then its own (j ≥ i), each ascending.
    std::vector<std::int64_t> lower(static_cast<std::size_t>(n) + 1, 0),
        upper(static_cast<std::size_t>(n), 0);
    for (std::size_t I = 0; I < strips.size(); ++I) {
      const auto& s = strips[I];
      for (std::size_t q = 0; q + 1 < s.offsets.size(); ++q) {
        const std::int64_t i = static_cast<std::int64_t>(I) * P_ + static_cast<std::int64_t>(q);
        upper[static_cast<std::size_t>(i)] = s.offsets[q + 1] - s.offsets[q];
        for (auto e = s.offsets[q]; e < s.offsets[q + 1]; ++e) {
          const std::int64_t j = s.cols[static_cast<std::size_t>(e)];
          if (j != i) ++lower[static_cast<std::size_t>(j)];
        }
      }
    }
    std::vector<std::int64_t> start(static_cast<std::size_t>(n) + 1, 0);
    for (std::int64_t i = 0; i < n; ++i)
      start[static_cast<std::size_t>(i) + 1] = start[static_cast<std::size_t>(i)] +
                                               lower[static_cast<std::size_t>(i)] +
                                               upper[static_cast<std::size_t>(i)];
    const auto all = static_cast<std::size_t>(start[static_cast<std::size_t>(n)]);
    r.row.resize(all);
    r.col.resize(all);
    r.value.resize(all);
    std::vector<std::int64_t> fill_lo(start.begin(), start.end() - 1);
    for (std::size_t I = 0; I < strips.size(); ++I) {
      const auto& s = strips[I];
      for (std::size_t q = 0; q + 1 < s.offsets.size(); ++q) {
        const std::int64_t i = static_cast<std::int64_t>(I) * P_ + static_cast<std::int64_t>(q);
        std::int64_t at = start[static_cast<std::size_t>(i)] + lower[static_cast<std::size_t>(i)];
        for (auto e = s.offsets[q]; e < s.offsets[q + 1]; ++e) {
          const std::int64_t j = s.cols[static_cast<std::size_t>(e)];
          const V v = s.vals[static_cast<std::size_t>(e)];
          r.row[static_cast<std::size_t>(at)] = i;
          r.col[static_cast<std::size_t>(at)] = j;
          r.value[static_cast<std::size_t>(at)] = v;
          ++at;
          if (j != i) {
            const auto m = static_cast<std::size_t>(fill_lo[static_cast<std::size_t>(j)]++);
            r.row[m] = j;
            r.col[m] = i;
            r.value[m] = v;
          }
        }
      }
    }
    return r;
  }
};

}  // namespace spillway::pairwise::detail
