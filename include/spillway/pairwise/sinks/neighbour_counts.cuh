// spillway/pairwise/sinks/neighbour_counts.cuh — per-row neighbour counts over a threshold: for
// each row i of A, how many columns j score at least `threshold` (similarities) or at most it
// (distances). What Taylor–Butina clustering of fingerprints asks first (each row's neighbour count
// at a Tanimoto cut-off orders the cluster centres), without the neighbours themselves: n counters
// per device, and only n int64 values reach the host.
//
// A·Aᵀ: a strip holds rows [I0, I1) against columns j ≥ I0, its diagonal block complete; each
// unordered pair {i, j}, i < j, is counted once where it lies above the diagonal (j > i), adding one
// to row i and one to row j, and (i, i) counts only when include_diagonal is set. A·Bᵀ: row i's
// columns are B's rows. Per strip, a warp per row adds its row's passing count with one atomic and
// each passing mirrored pair to its column's counter (sparse at the cut-offs clustering uses; a
// cut-off that most pairs pass costs one atomic per pair).
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/device_buffer.hpp>
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

namespace spillway::pairwise {

namespace detail {

/// Row r of a score strip (global row i0 + r, `w` columns from col0): adds its passing count to
/// counts[i0 + r]; A·Aᵀ also adds each passing pair above the diagonal to its column's counter.
template <class V>
__global__ void neighbour_count_kernel(const V* __restrict__ s, std::int64_t rows, std::int64_t w,
                                       std::int64_t i0, std::int64_t col0, bool symmetric, bool diagonal,
                                       bool larger, double threshold,
                                       unsigned long long* __restrict__ counts) {
  const std::int64_t warp = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const std::int64_t nwarps = (static_cast<std::int64_t>(gridDim.x) * blockDim.x) >> 5;
  const int lane = static_cast<int>(threadIdx.x & 31u);
  for (std::int64_t r = warp; r < rows; r += nwarps) {
    const std::int64_t xb = symmetric ? r : 0;  // A·Aᵀ: from the diagonal on (col0 == i0)
    unsigned long long n = 0;
    for (std::int64_t x0 = xb; x0 < w; x0 += 32) {
      const std::int64_t x = x0 + lane;
      const bool on_diag = symmetric && x == r;
      const bool p = x < w && passes(larger, s[r * w + x], threshold) && (diagonal || !on_diag);
      if (p && symmetric && !on_diag) atomicAdd(counts + col0 + x, 1ull);
      n += static_cast<unsigned long long>(__popc(__ballot_sync(0xFFFFFFFFu, p)));
    }
    if (lane == 0 && n != 0) atomicAdd(counts + i0 + r, n);
  }
}

template <class V>
struct neighbour_count_sink : sink_base {
  neighbour_count_options opt{};
  std::vector<device_buffer<unsigned long long>> counts;  // per worker: a counter per row of A

  neighbour_count_sink() = default;
  explicit neighbour_count_sink(const neighbour_count_options& o) : opt(o) {}

  [[nodiscard]] sink_footprint footprint() const {
    sink_footprint f;
    f.bytes_per_row = sizeof(unsigned long long);
    return f;
  }
  template <class Job>
  void setup(Job& job, std::size_t w, stream_view s) {
    const auto n = static_cast<std::size_t>(job.prod.rows(false));
    auto& c = per_worker(counts, w);
    c = device_buffer<unsigned long long>(n, s);
    if (n > 0) SPILLWAY_CUDA_TRY(cudaMemsetAsync(c.data(), 0, n * sizeof(unsigned long long), s.value()));
  }
  template <class Job, class Compute>
  std::size_t enqueue(Job& job, const strip_span& st, task_slot& slot, stream_view s, Compute&& compute) {
    V* sc = slot.device<V>(0);
    compute(score_writer<V>{sc, st.first_row, st.end_row, st.cols, st.first_col, st.symmetric});
    neighbour_count_kernel<V><<<grid_blocks(st.rows, 8), 256, 0, s.value()>>>(
        sc, st.rows, st.cols, st.first_row, st.first_col, st.symmetric, opt.include_diagonal,
        job.prod.larger(), opt.threshold, counts[slot.worker()].data());
    SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaGetLastError()));
    return 0;
  }
  /// Row i's count over every device's strips.
  template <class Job>
  std::vector<std::int64_t> collect(Job& job) {
    std::vector<std::int64_t> n(static_cast<std::size_t>(job.prod.rows(false)), 0);
    for (std::size_t w = 0; w < counts.size(); ++w) {
      device_guard g(job.ctx[w]->device);
      const std::vector<unsigned long long> h = counts[w].to_host(job.ctx[w]->setup->view());
      for (std::size_t i = 0; i < h.size(); ++i) n[i] += static_cast<std::int64_t>(h[i]);
    }
    return n;
  }
};

}  // namespace detail
}  // namespace spillway::pairwise
