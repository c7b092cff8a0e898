// spillway/pairwise/sinks/dense.cuh — the dense sinks: every score of a strip straight into the
// caller's host matrix with device→host copies (cudaMemcpy2DAsync where rows are strided) while
// the next strip computes on another slot. A·Aᵀ packed upper triangle or condensed (packed_sink),
// A·Aᵀ full rows with the mirrored column strip (full_sink), A·Bᵀ rows (rect_sink).
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/core/fault_hook.hpp>
#include <spillway/pairwise/layout.hpp>
#include <spillway/pairwise/sink_kernels.cuh>
#include <spillway/pairwise/sinks/sink.cuh>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace spillway::pairwise::detail {

/// A·Aᵀ into the packed upper triangle (with_diagonal) or SciPy's condensed layout (without), `out`
/// holding the whole layout in host memory.
template <class V>
struct packed_sink : sink_base {
  V* out = nullptr;
  bool with_diagonal = true;

  packed_sink() = default;
  packed_sink(V* o, bool diagonal) : out(o), with_diagonal(diagonal) {}

  [[nodiscard]] sink_footprint footprint() const {
    sink_footprint f;
    f.scattered_layout = true;
    return f;
  }
  template <class Job, class Compute>
  std::size_t enqueue(Job&, const strip_span& st, task_slot& slot, stream_view s, Compute&& compute) {
    V* u = slot.device<V>(0);
    const std::int64_t n = st.n;
    const bool wd = with_diagonal;
    const std::int64_t base = wd ? packed_row_offset(n, st.first_row) : condensed_row_offset(n, st.first_row);
    const std::int64_t end =
        st.end_row == n ? layout_size(wd ? triangle_layout::upper_packed : triangle_layout::condensed, n)
                        : (wd ? packed_row_offset(n, st.end_row) : condensed_row_offset(n, st.end_row));
    compute(packed_writer<V>{u, n, base, wd});
    if (end <= base) return 0;
    const auto bytes = static_cast<std::size_t>(end - base) * sizeof(V);
    SPILLWAY_CUDA_TRY(
        SPILLWAY_FAULT_CALL(cudaMemcpyAsync(out + base, u, bytes, cudaMemcpyDeviceToHost, s.value())));
    return bytes;
  }
};

/// A·Aᵀ into a full n x n row-major matrix `out` in host memory: each strip's rows from their
/// diagonal on, and the mirrored column strip below it.
template <class V>
struct full_sink : sink_base {
  V* out = nullptr;

  full_sink() = default;
  explicit full_sink(V* o) : out(o) {}

  [[nodiscard]] sink_footprint footprint() const {
    sink_footprint f;
    f.scattered_layout = true;
    f.mirror_strip = true;
    return f;
  }
  template <class Job, class Compute>
  std::size_t enqueue(Job& job, const strip_span& st, task_slot& slot, stream_view s, Compute&& compute) {
    constexpr std::size_t vb = sizeof(V);
    V* u = slot.device<V>(0);
    V* tt = slot.device<V>(job.plan.buf_mirror);
    const std::int64_t n = st.n, I0 = st.first_row, I1 = st.end_row, PI = st.rows, W = st.cols;
    compute(full_writer<V>{u, tt, I0, I1, W, PI});
    SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaMemcpy2DAsync(
        out + I0 * n + I0, static_cast<std::size_t>(n) * vb, u, static_cast<std::size_t>(W) * vb,
        static_cast<std::size_t>(W) * vb, static_cast<std::size_t>(PI), cudaMemcpyDeviceToHost, s.value())));
    if (n - I1 > 0) {
      SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(
          cudaMemcpy2DAsync(out + I1 * n + I0, static_cast<std::size_t>(n) * vb, tt,
                            static_cast<std::size_t>(PI) * vb, static_cast<std::size_t>(PI) * vb,
                            static_cast<std::size_t>(n - I1), cudaMemcpyDeviceToHost, s.value())));
    }
    return static_cast<std::size_t>(PI * W + (n - I1) * PI) * vb;
  }
};

/// A·Bᵀ into rows_a x rows_b host memory `out` with `ldc` values between rows.
template <class V>
struct rect_sink : sink_base {
  V* out = nullptr;
  std::int64_t ldc = 0;

  rect_sink() = default;
  rect_sink(V* o, std::int64_t ld) : out(o), ldc(ld) {}

  [[nodiscard]] sink_footprint footprint() const { return {}; }
  template <class Job, class Compute>
  std::size_t enqueue(Job&, const strip_span& st, task_slot& slot, stream_view s, Compute&& compute) {
    constexpr std::size_t vb = sizeof(V);
    V* u = slot.device<V>(0);
    compute(rect_writer<V>{u, st.first_row, st.rows_b});
    SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(
        cudaMemcpy2DAsync(out + st.first_row * ldc, static_cast<std::size_t>(ldc) * vb, u,
                          static_cast<std::size_t>(st.rows_b) * vb, static_cast<std::size_t>(st.rows_b) * vb,
                          static_cast<std::size_t>(st.rows), cudaMemcpyDeviceToHost, s.value())));
    return static_cast<std::size_t>(st.rows * st.rows_b) * vb;
  }
};

}  // namespace spillway::pairwise::detail
