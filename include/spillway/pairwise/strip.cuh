// spillway/pairwise/strip.cuh — a strip of an all-pairs result as the pair job hands it to its
// sink and to the caller: where it lies (strip_span: rows, columns, the job's shape), its values in
// host memory (host_strip, a per-strip callback's view) or in device memory (device_strip).
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/core/stream.hpp>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace spillway::pairwise {

/// Where strip task t of a pair job lies, as the job computes it for its sink: rows [first_row,
/// end_row) of A against columns [first_col, first_col + cols) (A·Aᵀ: the columns from the strip's
/// first row on; A·Bᵀ: every row of B).
struct strip_span {
  std::int64_t strip = 0;      ///< I: the strip's index (rows I·P ..)
  std::int64_t first_row = 0;  ///< I0
  std::int64_t end_row = 0;    ///< I1 = min(I0 + P, n)
  std::int64_t rows = 0;       ///< I1 − I0
  std::int64_t first_col = 0;  ///< A·Aᵀ: I0; A·Bᵀ: 0
  std::int64_t cols = 0;       ///< W: A·Aᵀ n − I0; A·Bᵀ rows of B
  std::int64_t n = 0;          ///< rows of A
  std::int64_t rows_b = 0;     ///< rows of B (n for A·Aᵀ)
  bool symmetric = true;       ///< A·Aᵀ
};

/// One finished strip of an all-pairs result, handed to a per-strip callback: rows
/// [first_row, first_row + rows) and columns [first_col, first_col + cols), row-major with `cols`
/// values per row, in host memory that is valid only during the callback (copy what you keep).
/// For A·Aᵀ a strip holds the columns from its own first row on (first_col == first_row: the
/// upper triangle and the diagonal block, complete); by symmetry the rest of those rows is in
/// earlier strips' columns. For A·Bᵀ first_col is 0 and cols is all of them.
template <class V>
struct strip_place {
  std::int64_t first_row = 0;
  std::int64_t rows = 0;
  std::int64_t first_col = 0;
  std::int64_t cols = 0;
  const V* values = nullptr;
  /// Where entry (i, j) (global indices) lies in `values`.
  [[nodiscard]] const V* address(std::int64_t i, std::int64_t j) const noexcept {
    return values + (i - first_row) * cols + (j - first_col);
  }
};

template <class V>
struct host_strip : strip_place<V> {
  /// Entry (i, j) in the matrix's own indices (first_row <= i < first_row + rows, likewise j).
  [[nodiscard]] V at(std::int64_t i, std::int64_t j) const noexcept { return *this->address(i, j); }
};

/// The same strip in DEVICE memory of `device`, before any device→host copy, handed over on the
/// strip's `stream`. Work the callback enqueues on `stream` sees the finished strip; the buffer is
/// reused for a later strip only after everything enqueued on `stream` before the callback
/// returned has completed, so a kernel or a copy the callback enqueues there needs no
/// synchronization.
template <class V>
struct device_strip : strip_place<V> {
  using strip_place<V>::first_row, strip_place<V>::rows, strip_place<V>::first_col, strip_place<V>::cols,
      strip_place<V>::values;
  int device = 0;
  stream_view stream;
  /// Address of entry (i, j) (global indices) in device memory: dereference it on the device only.
  [[nodiscard]] const V* at(std::int64_t i, std::int64_t j) const noexcept { return this->address(i, j); }
  /// Enqueues on `stream` the copy of the strip into its place in a row-major matrix `dst` with `ld`
  /// values per row, in device memory of `dst_device` — which need not be the strip's device: a
  /// strip of device 1 copied into a buffer of device 0 is a 2-D peer copy (cudaMemcpy3DPeerAsync;
  /// over NVLink where the devices have it, else staged by the driver). dst points at entry (0, 0).
  void copy_to(V* dst, std::int64_t ld, int dst_device) const {
    if (rows == 0 || cols == 0) return;
    if (ld < first_col + cols) {
      throw logic_error("device_strip::copy_to: ld " + std::to_string(ld) +
                        " is less than the strip's last column + 1 (" + std::to_string(first_col + cols) +
                        ")");
    }
    cudaMemcpy3DPeerParms p{};
    p.srcPtr =
        make_cudaPitchedPtr(const_cast<V*>(values), static_cast<std::size_t>(cols) * sizeof(V),
                            static_cast<std::size_t>(cols) * sizeof(V), static_cast<std::size_t>(rows));
    p.srcDevice = device;
    p.dstPtr =
        make_cudaPitchedPtr(dst + first_row * ld + first_col, static_cast<std::size_t>(ld) * sizeof(V),
                            static_cast<std::size_t>(cols) * sizeof(V), static_cast<std::size_t>(rows));
    p.dstDevice = dst_device;
    p.extent = make_cudaExtent(static_cast<std::size_t>(cols) * sizeof(V), static_cast<std::size_t>(rows), 1);
    SPILLWAY_CUDA_TRY(cudaMemcpy3DPeerAsync(&p, stream.value()));
  }
};

}  // namespace spillway::pairwise
