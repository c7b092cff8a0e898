// spillway/map/device_array.hpp — an owned N-d device array: a device_buffer plus its shape.
#pragma once

#include <spillway/core/device_buffer.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/map/config.hpp>
#include <spillway/map/ndview.hpp>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace spillway {

/// A contiguous row-major array of T in device memory from spillway's pool (uninitialized,
/// stream-ordered, move-only). What map/gufunc/reduce return when they allocate the output.
template <class T>
class device_array {
 public:
  device_array() = default;
  /// Uninitialized storage for `shape`, allocated on stream `s`.
  device_array(std::vector<index_t> shape, stream_view s) : shape_(std::move(shape)) {
    ndview<T> check(reinterpret_cast<T*>(alignof(T)), shape_);  // validates rank and extents
    buffer_ = device_buffer<T>(static_cast<std::size_t>(check.size()), s);
  }
  /// A copy of `host` (size must match `shape`) on stream `s`; returns once the copy is enqueued
  /// (pageable `host` is read before it returns).
  static device_array from_host(const std::vector<T>& host, std::vector<index_t> shape, stream_view s) {
    device_array a(std::move(shape), s);
    if (static_cast<std::size_t>(a.size()) != host.size()) {
      throw logic_error("device_array::from_host: shape " + detail::shape_string(a.shape_) + " has " +
                        std::to_string(a.size()) + " elements but the host vector has " + std::to_string(host.size()));
    }
    a.buffer_.copy_from_host_async({host.data(), host.size()}, s);
    return a;
  }

  [[nodiscard]] ndview<T> view() { return ndview<T>(buffer_.data(), shape_); }
  [[nodiscard]] ndview<const T> view() const { return ndview<const T>(buffer_.data(), shape_); }
  [[nodiscard]] const std::vector<index_t>& shape() const noexcept { return shape_; }
  [[nodiscard]] index_t size() const noexcept { return static_cast<index_t>(buffer_.size()); }
  [[nodiscard]] T* data() noexcept { return buffer_.data(); }
  [[nodiscard]] const T* data() const noexcept { return buffer_.data(); }
  [[nodiscard]] device_buffer<T>& buffer() noexcept { return buffer_; }
  [[nodiscard]] const device_buffer<T>& buffer() const noexcept { return buffer_; }

  /// Copies the array to the host on `s` and waits for it.
  [[nodiscard]] std::vector<T> to_host(stream_view s) const {
    std::vector<T> h(buffer_.size());
    buffer_.copy_to_host_async({h.data(), h.size()}, s);
    s.synchronize();
    return h;
  }

 private:
  std::vector<index_t> shape_;
  device_buffer<T> buffer_;
};

}  // namespace spillway
