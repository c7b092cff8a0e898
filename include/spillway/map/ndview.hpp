// spillway/map/ndview.hpp — a non-owning N-d strided view (shape and strides chosen at run time).
//
// Why not cuda::std::mdspan: broadcasting, dimension collapsing and gufunc core dimensions all
// decide ranks at run time (a (4000,5) operand meets a (100,4000,5) one; a signature string names
// the core ranks), while mdspan fixes the rank in the type. ndview keeps the rank, extents and
// strides as data (rank <= max_rank), is trivially copyable so it travels to kernels by value, and
// is what a gufunc functor receives for each core instance. Strides count elements, not bytes.
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/map/config.hpp>

#include <cstddef>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

namespace spillway {

namespace detail {
inline std::string shape_string(const index_t* v, int n) {
  std::string s = "(";
  for (int i = 0; i < n; ++i) {
    if (i > 0) s += ",";
    s += std::to_string(v[i]);
  }
  if (n == 1) s += ",";
  return s + ")";
}
inline std::string shape_string(const std::vector<index_t>& v) {
  return shape_string(v.data(), static_cast<int>(v.size()));
}
}  // namespace detail

/// A view of `size()` elements of T at `data()` laid out by `extent(d)` and `stride(d)` (in
/// elements). Element (i0, i1, ...) lives at data() + i0*stride(0) + i1*stride(1) + ...
/// Trivially copyable; index with operator()(i0, i1, ...) on host or device, depending on where
/// the memory lives.
template <class T>
class ndview {
 public:
  using element_type = T;
  using value_type = std::remove_cv_t<T>;

  SPILLWAY_HD ndview() noexcept : data_(nullptr), rank_(0), extents_{}, strides_{} {}

  /// A contiguous row-major (C order) view of `shape`.
  ndview(T* data, std::initializer_list<index_t> shape) : ndview(data, std::vector<index_t>(shape)) {}
  ndview(T* data, const std::vector<index_t>& shape) : ndview() {
    set_shape(data, shape, "ndview");
    index_t s = 1;
    for (int d = rank_ - 1; d >= 0; --d) {
      strides_[d] = s;
      s *= extents_[d] > 0 ? extents_[d] : 1;
    }
  }
  /// A view with explicit strides (elements; may be 0 or negative).
  ndview(T* data, const std::vector<index_t>& shape, const std::vector<index_t>& strides) : ndview() {
    if (shape.size() != strides.size()) {
      throw logic_error("ndview: shape has " + std::to_string(shape.size()) + " dimensions but strides has " +
                        std::to_string(strides.size()));
    }
    set_shape(data, shape, "ndview");
    for (int d = 0; d < rank_; ++d) strides_[d] = strides[static_cast<std::size_t>(d)];
  }

  /// A view from raw parts (arrays of max_rank entries, rank <= max_rank; unchecked): what kernels
  /// build for core instances.
  SPILLWAY_HD static ndview from_parts(T* data, int rank, const index_t* extents, const index_t* strides) noexcept {
    // Copies all max_rank entries (the callers' arrays are max_rank long, zero past `rank`): a
    // constant trip count keeps the view in registers inside kernels instead of local memory.
    ndview v;
    v.data_ = data;
    v.rank_ = rank;
    for (int d = 0; d < max_rank; ++d) {
      v.extents_[d] = extents[d];
      v.strides_[d] = strides[d];
    }
    return v;
  }

  /// A const view of the same elements.
  template <class U = T, class = std::enable_if_t<!std::is_const_v<U>>>
  SPILLWAY_HD operator ndview<const U>() const noexcept {
    return ndview<const U>::from_parts(data_, rank_, extents_, strides_);
  }

  [[nodiscard]] SPILLWAY_HD T* data() const noexcept { return data_; }
  [[nodiscard]] SPILLWAY_HD int rank() const noexcept { return rank_; }
  [[nodiscard]] SPILLWAY_HD index_t extent(int d) const noexcept { return extents_[d]; }
  [[nodiscard]] SPILLWAY_HD index_t stride(int d) const noexcept { return strides_[d]; }
  [[nodiscard]] SPILLWAY_HD index_t size() const noexcept {
    index_t n = 1;
    for (int d = 0; d < rank_; ++d) n *= extents_[d];
    return n;
  }
  [[nodiscard]] SPILLWAY_HD bool empty() const noexcept { return size() == 0; }

  /// Element (i0, i1, ...); the number of indices must equal rank() (0 indices for a 0-d view).
  template <class... I>
  SPILLWAY_HD T& operator()(I... i) const noexcept {
    const index_t idx[] = {static_cast<index_t>(i)..., 0};
    index_t off = 0;
    for (int d = 0; d < static_cast<int>(sizeof...(I)); ++d) off += idx[d] * strides_[d];
    return data_[off];
  }
  /// Element i of a 1-d view.
  SPILLWAY_HD T& operator[](index_t i) const noexcept { return data_[i * strides_[0]]; }

  [[nodiscard]] std::vector<index_t> shape() const { return {extents_, extents_ + rank_}; }
  [[nodiscard]] std::vector<index_t> strides() const { return {strides_, strides_ + rank_}; }
  [[nodiscard]] std::string shape_string() const { return detail::shape_string(extents_, rank_); }

  /// True when the elements are dense in row-major order (size-1 dimensions ignored).
  [[nodiscard]] bool is_contiguous() const noexcept {
    index_t s = 1;
    for (int d = rank_ - 1; d >= 0; --d) {
      if (extents_[d] == 1) continue;
      if (extents_[d] == 0) return true;
      if (strides_[d] != s) return false;
      s *= extents_[d];
    }
    return true;
  }

  /// The same elements with the axes reordered: result axis k is this view's axis `axes[k]`.
  [[nodiscard]] ndview permuted(const std::vector<int>& axes) const {
    if (static_cast<int>(axes.size()) != rank_) {
      throw logic_error("ndview::permuted: axes has " + std::to_string(axes.size()) + " entries for a rank-" +
                        std::to_string(rank_) + " view");
    }
    ndview v = *this;
    bool seen[max_rank] = {};
    for (int k = 0; k < rank_; ++k) {
      const int a = axes[static_cast<std::size_t>(k)];
      if (a < 0 || a >= rank_ || seen[a]) {
        throw logic_error("ndview::permuted: axes[" + std::to_string(k) + "] = " + std::to_string(a) +
                          " is out of range or repeated for a rank-" + std::to_string(rank_) + " view");
      }
      seen[a] = true;
      v.extents_[k] = extents_[a];
      v.strides_[k] = strides_[a];
    }
    return v;
  }
  /// The axes reversed (a matrix transpose for rank 2).
  [[nodiscard]] ndview transposed() const {
    std::vector<int> axes(static_cast<std::size_t>(rank_));
    for (int k = 0; k < rank_; ++k) axes[static_cast<std::size_t>(k)] = rank_ - 1 - k;
    return permuted(axes);
  }
  /// Every `step`-th element along `axis` starting at `start` (step may be negative).
  [[nodiscard]] ndview strided(int axis, index_t start, index_t count, index_t step) const {
    if (axis < 0 || axis >= rank_) {
      throw logic_error("ndview::strided: axis " + std::to_string(axis) + " out of range for rank " +
                        std::to_string(rank_));
    }
    if (step == 0 || count < 0 || start < 0 || start >= extents_[axis] ||
        (count > 0 && (start + (count - 1) * step < 0 || start + (count - 1) * step >= extents_[axis]))) {
      throw logic_error("ndview::strided: start " + std::to_string(start) + ", count " + std::to_string(count) +
                        ", step " + std::to_string(step) + " do not fit axis " + std::to_string(axis) +
                        " of extent " + std::to_string(extents_[axis]));
    }
    ndview v = *this;
    v.data_ = data_ + start * strides_[axis];
    v.extents_[axis] = count;
    v.strides_[axis] = strides_[axis] * step;
    return v;
  }

 private:
  template <class>
  friend class ndview;

  void set_shape(T* data, const std::vector<index_t>& shape, const char* who) {
    if (shape.size() > static_cast<std::size_t>(max_rank)) {
      throw logic_error(std::string(who) + ": rank " + std::to_string(shape.size()) + " exceeds max_rank " +
                        std::to_string(max_rank));
    }
    rank_ = static_cast<int>(shape.size());
    for (int d = 0; d < rank_; ++d) {
      const index_t e = shape[static_cast<std::size_t>(d)];
      if (e < 0) {
        throw logic_error(std::string(who) + ": extent of dimension " + std::to_string(d) + " is " +
                          std::to_string(e) + " (must be >= 0)");
      }
      extents_[d] = e;
    }
    data_ = data;
    if (data == nullptr && size() != 0) {
      throw logic_error(std::string(who) + ": null data pointer for a non-empty view of shape " +
                        detail::shape_string(extents_, rank_));
    }
  }

  T* data_;
  int rank_;
  index_t extents_[max_rank];
  index_t strides_[max_rank];
};

/// A contiguous row-major view of `shape` over `data`.
template <class T>
ndview<T> make_view(T* data, const std::vector<index_t>& shape) {
  return ndview<T>(data, shape);
}
template <class T>
ndview<T> make_view(T* data, const std::vector<index_t>& shape, const std::vector<index_t>& strides) {
  return ndview<T>(data, shape, strides);
}

template <class T>
struct is_ndview : std::false_type {};
template <class T>
struct is_ndview<ndview<T>> : std::true_type {};

}  // namespace spillway
