// spillway/pairwise/sinks/strips.cuh — strips handed to the caller as they finish: in host memory
// through the slot's pinned staging (on_strip, on the worker thread once the strip's copy is
// done), or in device memory on the strip's stream before any copy (on_device_strip). A·Aᵀ: a
// strip's columns from its first row on; A·Bᵀ: every column.
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/core/fault_hook.hpp>
#include <spillway/pairwise/sink_kernels.cuh>
#include <spillway/pairwise/sinks/sink.cuh>
#include <spillway/pairwise/strip.cuh>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace spillway::pairwise::detail {

template <class V>
struct strips_sink : sink_base {
  /// One of the two: the host form (through pinned staging) or the device form.
  std::function<void(const host_strip<V>&)> on_strip;
  std::function<void(const device_strip<V>&)> on_device_strip;

  [[nodiscard]] sink_footprint footprint() const { return {}; }
  /// The host form stages one strip per slot (the same bytes as its device output buffer).
  [[nodiscard]] std::vector<std::size_t> pinned_buffers(const pair_plan& p) const {
    if (!on_strip) return {};
    return {p.slot_buffers[0]};
  }
  template <class Job, class Compute>
  std::size_t enqueue(Job&, const strip_span& st, task_slot& slot, stream_view s, Compute&& compute) {
    V* u = slot.device<V>(0);
    if (st.symmetric)
      compute(score_writer<V>{u, st.first_row, st.end_row, st.cols, st.first_row, true});
    else
      compute(rect_writer<V>{u, st.first_row, st.rows_b});
    if (on_device_strip) {
      on_device_strip(device_strip<V>{{st.first_row, st.rows, st.first_col, st.cols, u}, slot.device(), s});
      return 0;
    }
    const auto bytes = static_cast<std::size_t>(st.rows * st.cols) * sizeof(V);
    SPILLWAY_CUDA_TRY(
        SPILLWAY_FAULT_CALL(cudaMemcpyAsync(slot.pinned<V>(0), u, bytes, cudaMemcpyDeviceToHost, s.value())));
    return bytes;
  }
  template <class Job>
  std::size_t complete(Job&, const strip_span& st, task_slot& slot) {
    if (!on_strip) return 0;
    host_strip<V> h;
    h.first_row = st.first_row;
    h.rows = st.rows;
    h.first_col = st.first_col;
    h.cols = st.cols;
    h.values = slot.pinned<V>(0);
    on_strip(h);
    return 0;
  }
};

}  // namespace spillway::pairwise::detail
