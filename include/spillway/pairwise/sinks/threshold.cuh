// spillway/pairwise/sinks/threshold.cuh — threshold → sparse: each strip's passing entries are
// counted, scanned and compacted on the device (only those cross the link); the per-row offsets
// come back through the slot's pinned staging, and once the strip's work has finished the kept
// columns and values are copied out (complete, on the worker thread: enqueue never waits).
// collect assembles the COO sorted by row, then column.
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/fault_hook.hpp>
#include <spillway/core/launch.hpp>
#include <spillway/pairwise/sink_kernels.cuh>
#include <spillway/pairwise/sinks.hpp>
#include <spillway/pairwise/sinks/sink.cuh>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
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

template <class V>
struct threshold_sink : sink_base {
  threshold_options thr{};
  std::vector<strip_sparse<V>> strips;  // by strip index

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
    return 8 + total * (8u + sizeof(V));
  }
  /// The entries of strips [first, last) (each pair once, as kept: no mirrored half), sorted by
  /// row, then column: a rank's share of the distributed job.
  template <class Job>
  coo_result<V> collect_strips(Job& job, std::size_t first, std::size_t last) {
    if constexpr (fused<Job>) return collect_appended(job, first, last, false);
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
  /// The appended entries of strips [first, last) as the COO sorted by row, then column (both halves: each
  /// pair (i, j), i ≠ j, also as (j, i)), in parallel: rows counted, placed, then each row's
  /// entries sorted by column.
  template <class Job>
  coo_result<V> collect_appended(Job& job, std::size_t first, std::size_t last, bool both) {
    const std::int64_t P_ = job.plan.panel_rows;
    const std::int64_t n = job.prod.rows(false);
    const auto f0 = static_cast<std::int64_t>(first), ns = static_cast<std::int64_t>(last);
    std::vector<std::int64_t> start(static_cast<std::size_t>(n) + 1, 0);
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
    std::vector<std::int64_t> fill;
    // Sizing a vector writes (and first touches) all of it on one thread: the three one after
    // another took ~0.3 s of a ChEMBL-size fingerprint search (30 M entries, 600 MB); each sizes on
    // a thread of its own. An allocation that fails is rethrown here (an exception must not leave
    // an OpenMP section).
    std::exception_ptr failed[4];
    const auto sized = [&failed](int q, auto&& f) {
      try {
        f();
      } catch (...) {
        failed[q] = std::current_exception();
      }
    };
#pragma omp parallel sections num_threads(4)
    {
#pragma omp section
      sized(0, [&] { r.row.resize(all); });
#pragma omp section
      sized(1, [&] { r.col.resize(all); });
#pragma omp section
      sized(2, [&] { r.value.resize(all); });
#pragma omp section
      sized(3, [&] { fill.assign(start.begin(), start.end() - 1); });
    }
    for (const std::exception_ptr& e : failed)
      if (e) std::rethrow_exception(e);
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
#pragma omp parallel
    {
      std::vector<std::pair<std::int64_t, V>> row;
#pragma omp for schedule(dynamic, 1024)
      for (std::int64_t q = 0; q < n; ++q) {
        const auto b = static_cast<std::size_t>(start[static_cast<std::size_t>(q)]);
        const auto e = static_cast<std::size_t>(start[static_cast<std::size_t>(q) + 1]);
        for (std::size_t x = b; x < e; ++x) r.row[x] = q;
        bool sorted = true;
        for (std::size_t x = b + 1; x < e && sorted; ++x) sorted = r.col[x - 1] < r.col[x];
        if (sorted) continue;
        row.clear();
        for (std::size_t x = b; x < e; ++x) row.emplace_back(r.col[x], r.value[x]);
        std::sort(row.begin(), row.end(), [](const auto& u, const auto& w) { return u.first < w.first; });
        for (std::size_t x = b; x < e; ++x) {
          r.col[x] = row[x - b].first;
          r.value[x] = row[x - b].second;
        }
      }
    }
    return r;
  }
  /// The COO sorted by row, then column (A·Aᵀ with both_halves: row i's mirrored entries j < i
  /// first, then its own, each ascending).
  template <class Job>
  coo_result<V> collect(Job& job) {
    if constexpr (fused<Job>)
      return collect_appended(job, 0, strips.size(), job.symmetric && thr.both_halves);
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
