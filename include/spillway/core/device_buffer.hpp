// spillway/core/device_buffer.hpp — typed, uninitialized, stream-ordered device memory.
#pragma once

#include <spillway/core/fault_hook.hpp>
#include <spillway/core/device.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/memory_pool.hpp>
#include <spillway/core/stream.hpp>

#include <cuda/std/span>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace spillway {

namespace detail {

inline std::size_t checked_bytes(std::size_t n, std::size_t elem, const char* who) {
  if (elem != 0 && n > std::numeric_limits<std::size_t>::max() / elem) {
    throw logic_error(std::string(who) + ": element count " + std::to_string(n) +
                      " times element size " + std::to_string(elem) + " overflows size_t");
  }
  return n * elem;
}

/// Allocates `bytes` from spillway's pool for the current device, stream-ordered on `s`.
/// On failure trims the pool's cache and retries once, then throws out_of_memory.
inline void* pool_allocate(std::size_t bytes, stream_view s, int device) {
  if (bytes == 0) return nullptr;
  cudaMemPool_t pool = device_pool(device);
  void* p = nullptr;
#if defined(SPILLWAY_FAULT_INJECTION)
  const int injected = ::spillway::fault::detail::device_allocation_fault(device);  // tries to fail (tests only)
#else
  constexpr int injected = 0;
#endif
  cudaError_t e = injected >= 1 ? cudaErrorMemoryAllocation : cudaMallocFromPoolAsync(&p, bytes, pool, s.value());
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    (void)cudaStreamSynchronize(s.value());
    (void)cudaMemPoolTrimTo(pool, 0);
    e = injected >= 2 ? cudaErrorMemoryAllocation : cudaMallocFromPoolAsync(&p, bytes, pool, s.value());
  }
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    // A failed pool allocation can leave part of the request reserved in the pool
    // (docs/reliability.md, "a failed pool allocation"): release it, so the free bytes reported
    // are what the device really has.
    (void)cudaStreamSynchronize(s.value());
    (void)cudaMemPoolTrimTo(pool, 0);
    (void)cudaGetLastError();
    std::size_t free_b = 0, total_b = 0;
    (void)cudaMemGetInfo(&free_b, &total_b);
    (void)cudaGetLastError();
    throw out_of_memory("device_buffer: cannot allocate " + format_bytes(bytes) + " on device " +
                            std::to_string(device) + ": " + format_bytes(free_b) + " free of " +
                            format_bytes(total_b),
                        bytes, free_b);
  }
  SPILLWAY_CUDA_CHECK(e, "cudaMallocFromPoolAsync of " + format_bytes(bytes) + " on device " + std::to_string(device) +
                            " for device_buffer");
  return p;
}

/// The elements a move-only owner of memory holds (device_buffer, pinned_buffer): a pointer and a
/// count, read through the accessors below, moved out whole (the source left empty). The owner
/// frees them (its release()) before it takes another's.
template <class T>
class owned_elements {
 public:
  using value_type = T;

  [[nodiscard]] T* data() noexcept { return data_; }
  [[nodiscard]] const T* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] cuda::std::span<T> span() noexcept { return {data_, size_}; }
  [[nodiscard]] cuda::std::span<const T> span() const noexcept { return {data_, size_}; }

 protected:
  owned_elements() noexcept = default;
  owned_elements(const owned_elements&) = delete;
  owned_elements& operator=(const owned_elements&) = delete;
  owned_elements(owned_elements&& o) noexcept { take(o); }
  owned_elements& operator=(owned_elements&&) = delete;
  ~owned_elements() = default;
  /// Takes `o`'s elements (this one's must have been released), leaving `o` empty.
  void take(owned_elements& o) noexcept {
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }

  T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace detail

/// A typed device allocation of `size()` elements of T, uninitialized, allocated and freed in
/// stream order (cudaMallocFromPoolAsync / cudaFreeAsync on spillway's per-device pool). Move-only:
/// copying device memory is an explicit call that names its stream.
///
/// The buffer remembers the stream it was allocated on; the memory is freed on that stream when the
/// buffer is destroyed, so work enqueued on it before then is safe. Work on other streams must be
/// ordered before the destructor by the caller (an event, or `set_stream`).
template <class T>
class device_buffer : public detail::owned_elements<T> {
  static_assert(std::is_trivially_copyable_v<T>, "device_buffer<T> needs a trivially copyable T");
  using detail::owned_elements<T>::data_, detail::owned_elements<T>::size_;

 public:
  /// An empty buffer (no allocation) bound to the per-thread stream.
  device_buffer() noexcept : stream_(stream_view::per_thread()) {}

  /// `n` uninitialized elements on the current device, stream-ordered on `s`.
  device_buffer(std::size_t n, stream_view s) : stream_(s), device_(current_device()) {
    data_ = static_cast<T*>(
        detail::pool_allocate(detail::checked_bytes(n, sizeof(T), "device_buffer"), s, device_));
    size_ = n;
  }

  /// A buffer holding a copy of `src`, allocated and filled in order on `s`. From pageable memory
  /// the copy has read `src` when this returns; from pinned memory `src` must stay valid until `s`
  /// reaches the copy.
  static device_buffer from_host(cuda::std::span<const T> src, stream_view s) {
    device_buffer b(src.size(), s);
    b.copy_from_host_async(src, s);
    return b;
  }
  static device_buffer from_host(const std::vector<T>& src, stream_view s) {
    return from_host(cuda::std::span<const T>(src.data(), src.size()), s);
  }

  ~device_buffer() { release(); }

  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;

  device_buffer(device_buffer&& o) noexcept
      : detail::owned_elements<T>(std::move(o)), stream_(o.stream_), device_(o.device_) {}

  device_buffer& operator=(device_buffer&& o) noexcept {
    if (this != &o) {
      release();
      this->take(o);
      stream_ = o.stream_;
      device_ = o.device_;
    }
    return *this;
  }

  [[nodiscard]] stream_view stream() const noexcept { return stream_; }
  [[nodiscard]] int device() const noexcept { return device_; }

  /// Rebinds the stream on which the memory will be freed (the caller orders the streams).
  void set_stream(stream_view s) noexcept { stream_ = s; }

  /// Resizes to `n` elements on stream `s`: allocates new memory, copies the first min(size(), n)
  /// elements device-to-device on `s`, frees the old memory on `s`. New elements are uninitialized.
  /// If the allocation fails the buffer is unchanged.
  void resize(std::size_t n, stream_view s) {
    if (n == size_) {
      stream_ = s;
      return;
    }
    device_guard g(device_);
    T* fresh = static_cast<T*>(
        detail::pool_allocate(detail::checked_bytes(n, sizeof(T), "device_buffer::resize"), s, device_));
    if (data_ != nullptr && stream_ != s) {
      // The copy and the free run on s: order them after the work already on the old stream.
      event ordered;
      ordered.record(stream_);
      s.wait(ordered);
    }
    const std::size_t keep = std::min(n, size_);
    if (keep > 0) {
      SPILLWAY_CUDA_TRY(cudaMemcpyAsync(fresh, data_, keep * sizeof(T), cudaMemcpyDeviceToDevice, s.value()));
    }
    if (data_ != nullptr) (void)cudaFreeAsync(data_, s.value());  // after the copy, on s
    data_ = fresh;
    size_ = n;
    stream_ = s;
  }

  /// Enqueues a copy of `src` into elements [offset, offset + src.size()) on `s`. From pageable
  /// host memory the runtime stages the copy and it returns only once `src` has been read; from
  /// pinned or registered memory it is truly asynchronous and `src` must stay valid until `s`
  /// reaches it.
  void copy_from_host_async(cuda::std::span<const T> src, stream_view s, std::size_t offset = 0) {
    check_range(offset, src.size(), "copy_from_host_async");
    if (src.empty()) return;
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(data_ + offset, src.data(), src.size_bytes(),
                                      cudaMemcpyHostToDevice, s.value()));
  }

  /// Enqueues a copy of elements [offset, offset + dst.size()) into `dst` on `s`. The data is in
  /// `dst` only once `s` has reached this point (synchronize, or wait on an event).
  void copy_to_host_async(cuda::std::span<T> dst, stream_view s, std::size_t offset = 0) const {
    check_range(offset, dst.size(), "copy_to_host_async");
    if (dst.empty()) return;
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(dst.data(), data_ + offset, dst.size_bytes(),
                                      cudaMemcpyDeviceToHost, s.value()));
  }

  /// A host copy of the whole buffer: enqueues the copy on `s` and waits for `s` (so also for the
  /// work enqueued on `s` before it).
  [[nodiscard]] std::vector<T> to_host(stream_view s) const {
    std::vector<T> out(size_);
    copy_to_host_async(cuda::std::span<T>(out.data(), out.size()), s);
    s.synchronize();
    return out;
  }

  /// Enqueues a byte-wise fill (e.g. 0xFF to poison) of the whole buffer on `s`.
  void fill_bytes_async(unsigned char value, stream_view s) {
    if (size_ == 0) return;
    SPILLWAY_CUDA_TRY(cudaMemsetAsync(data_, value, this->size_bytes(), s.value()));
  }

 private:
  void check_range(std::size_t offset, std::size_t count, const char* who) const {
    if (offset > size_ || count > size_ - offset) {
      throw logic_error(std::string("device_buffer::") + who + ": range [" + std::to_string(offset) +
                        ", " + std::to_string(offset) + " + " + std::to_string(count) +
                        ") exceeds the buffer's " + std::to_string(size_) + " elements");
    }
  }

  void release() noexcept {
    if (data_ != nullptr) {
      int prev = 0;
      (void)cudaGetDevice(&prev);
      if (prev != device_) (void)cudaSetDevice(device_);
      (void)cudaFreeAsync(data_, stream_.value());
      if (prev != device_) (void)cudaSetDevice(prev);
      data_ = nullptr;
      size_ = 0;
    }
  }

  stream_view stream_;
  int device_ = 0;
};

/// Enqueues a device-to-device copy of `count` elements on `s`.
template <class T>
void copy_async(T* dst, const T* src, std::size_t count, stream_view s) {
  if (count == 0) return;
  SPILLWAY_CUDA_TRY(cudaMemcpyAsync(dst, src, count * sizeof(T), cudaMemcpyDefault, s.value()));
}

}  // namespace spillway
