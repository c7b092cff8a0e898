// spillway/gemm/matrix_view.hpp — a non-owning view of a (possibly batched) matrix: rows, columns,
// layout (row- or column-major), leading dimension and, for strided batches, the distance between
// consecutive matrices. What every GEMM entry point takes for A, B and C.
//
//   auto a = spillway::gemm::row_major(d_a, m, k);          // ld = k
//   auto b = spillway::gemm::col_major(d_b, k, n, ldb);     // ld >= k
//   auto bt = b.t();                                        // op(B) = Bᵀ: a view, no copy
//
// A rank-2 (or rank-3, batch first) `spillway::ndview` of the map module converts when one of its
// two matrix dimensions has unit stride.
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/map/config.hpp>
#include <spillway/map/ndview.hpp>

#include <string>
#include <type_traits>

namespace spillway::gemm {

/// Element (i, j) of a row-major matrix lives at data[i * ld + j]; of a column-major one at
/// data[i + j * ld].
enum class layout { row_major, col_major };

inline const char* to_string(layout l) { return l == layout::row_major ? "row_major" : "col_major"; }

/// rows x cols elements of T at `data`, laid out by `order` with leading dimension `ld` (elements
/// between the starts of consecutive rows for row-major, columns for column-major), and for a
/// strided batch `batch_stride` elements between consecutive matrices (0: every batch entry reads
/// the same matrix, allowed for inputs only). Trivially copyable; nothing is checked until a GEMM
/// receives it (the GEMM names the offending value).
template <class T>
struct matrix_view {
  using element_type = T;
  using value_type = std::remove_cv_t<T>;

  T* data = nullptr;
  index_t rows = 0;
  index_t cols = 0;
  index_t ld = 0;
  layout order = layout::row_major;
  index_t batch_stride = 0;

  /// The same elements seen as the transpose: rows and columns swap, the layout flips, data and
  /// leading dimension stay. op(A) = Aᵀ is `a.t()`.
  [[nodiscard]] SPILLWAY_HD matrix_view t() const noexcept {
    return {data, cols, rows, ld, order == layout::row_major ? layout::col_major : layout::row_major, batch_stride};
  }
  /// Element (i, j) (host or device, wherever the memory lives).
  [[nodiscard]] SPILLWAY_HD T& operator()(index_t i, index_t j) const noexcept {
    return order == layout::row_major ? data[i * ld + j] : data[i + j * ld];
  }
  /// Matrix `b` of a strided batch.
  [[nodiscard]] SPILLWAY_HD matrix_view batch(index_t b) const noexcept {
    matrix_view v = *this;
    v.data = data + b * batch_stride;
    return v;
  }
  /// A const view of the same elements.
  template <class U = T, class = std::enable_if_t<!std::is_const_v<U>>>
  SPILLWAY_HD operator matrix_view<const U>() const noexcept {
    return {data, rows, cols, ld, order, batch_stride};
  }
  /// The smallest valid leading dimension for this shape and layout.
  [[nodiscard]] SPILLWAY_HD index_t min_ld() const noexcept {
    const index_t minor = order == layout::row_major ? cols : rows;
    return minor > 1 ? minor : 1;
  }
  [[nodiscard]] std::string describe() const {
    return std::to_string(rows) + " x " + std::to_string(cols) + " " + to_string(order) + ", ld " +
           std::to_string(ld) + (batch_stride != 0 ? ", batch stride " + std::to_string(batch_stride) : "");
  }
};

/// rows x cols row-major; ld defaults to cols.
template <class T>
matrix_view<T> row_major(T* data, index_t rows, index_t cols, index_t ld = -1, index_t batch_stride = 0) {
  return {data, rows, cols, ld < 0 ? (cols > 1 ? cols : 1) : ld, layout::row_major, batch_stride};
}
/// rows x cols column-major; ld defaults to rows.
template <class T>
matrix_view<T> col_major(T* data, index_t rows, index_t cols, index_t ld = -1, index_t batch_stride = 0) {
  return {data, rows, cols, ld < 0 ? (rows > 1 ? rows : 1) : ld, layout::col_major, batch_stride};
}

/// A matrix view of a rank-2 ndview, or of a rank-3 one whose first dimension is the batch. One of
/// the two matrix dimensions must have unit stride; the other stride is the leading dimension.
template <class T>
matrix_view<T> to_matrix_view(const ndview<T>& v) {
  if (v.rank() != 2 && v.rank() != 3) {
    throw logic_error("gemm: an ndview of rank " + std::to_string(v.rank()) + " " + v.shape_string() +
                      " is not a matrix (rank 2) or a batch of matrices (rank 3)");
  }
  const int r = v.rank() == 3 ? 1 : 0;
  const index_t rows = v.extent(r), cols = v.extent(r + 1);
  const index_t s0 = v.stride(r), s1 = v.stride(r + 1);
  const index_t bs = v.rank() == 3 ? v.stride(0) : 0;
  if (s1 == 1 || cols == 1) return {v.data(), rows, cols, s0, layout::row_major, bs};
  if (s0 == 1 || rows == 1) return {v.data(), rows, cols, s1, layout::col_major, bs};
  throw logic_error("gemm: ndview " + v.shape_string() + " with strides (" + std::to_string(s0) + "," +
                    std::to_string(s1) + ") has no unit-stride matrix dimension; copy it to a contiguous array");
}

}  // namespace spillway::gemm
