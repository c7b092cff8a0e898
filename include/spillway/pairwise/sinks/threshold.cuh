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

#include <cstddef>
#include <cstdint>
#include <vector>

namespace spillway::pairwise::detail {

/// One strip's kept entries: per row offsets (rows + 1), then columns and values.
template <class V>
struct strip_sparse {
  std::vector<std::int64_t> offsets;  // rows + 1
  std::vector<std::int32_t> cols;
  std::vector<V> vals;
};

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
  template <class Job, class Compute>
  std::size_t enqueue(Job& job, const strip_span& st, task_slot& slot, stream_view s, Compute&& compute) {
    V* sc_buf = slot.device<V>(0);
    const std::int64_t PI = st.rows, W = st.cols;
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
    strip_sparse<V>& out = strips[static_cast<std::size_t>(st.strip)];
    const std::int64_t* offs = slot.pinned<std::int64_t>(0);
    out.offsets.assign(offs, offs + st.rows + 1);
    const auto total = static_cast<std::size_t>(out.offsets.back());
    out.cols.resize(total);
    out.vals.resize(total);
    if (total == 0) return 0;
    device_guard g(slot.device());
    const compact_area a = area_of(job.plan, slot, st.rows, st.cols);
    const stream_view s = slot.stream();
    SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(
        cudaMemcpyAsync(out.cols.data(), a.cols, total * 4u, cudaMemcpyDeviceToHost, s.value())));
    SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(
        cudaMemcpyAsync(out.vals.data(), a.vals, total * sizeof(V), cudaMemcpyDeviceToHost, s.value())));
    s.synchronize();
    return total * (4u + sizeof(V));
  }
  /// The COO sorted by row, then column (A·Aᵀ with both_halves: row i's mirrored entries j < i
  /// first, then its own, each ascending).
  template <class Job>
  coo_result<V> collect(Job& job) {
    coo_result<V> r;
    const std::int64_t P_ = job.plan.panel_rows;
    const std::int64_t n = job.prod.rows(false);
    std::size_t total = 0;
    for (const auto& s : strips) total += s.cols.size();
    if (!(job.symmetric && thr.both_halves)) {
      r.row.reserve(total);
      r.col.reserve(total);
      r.value.reserve(total);
      for (std::size_t I = 0; I < strips.size(); ++I) {
        const auto& s = strips[I];
        for (std::size_t q = 0; q + 1 < s.offsets.size(); ++q)
          for (auto e = s.offsets[q]; e < s.offsets[q + 1]; ++e) {
            r.row.push_back(static_cast<std::int64_t>(I) * P_ + static_cast<std::int64_t>(q));
            r.col.push_back(s.cols[static_cast<std::size_t>(e)]);
            r.value.push_back(s.vals[static_cast<std::size_t>(e)]);
          }
      }
      return r;
    }
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
