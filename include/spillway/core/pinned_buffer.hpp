// spillway/core/pinned_buffer.hpp — page-locked host memory.
#pragma once

#include <spillway/core/fault_hook.hpp>
#include <spillway/core/device_buffer.hpp>
#include <spillway/core/error.hpp>

#include <cuda/std/span>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <type_traits>
#include <utility>

namespace spillway {

/// `size()` uninitialized elements of T in page-locked (pinned) host memory, portable across
/// devices. Copies between it and the device run at full PCIe rate and are truly asynchronous.
/// Move-only. Pinning is slow (the OS maps and locks every page): allocate once, reuse.
template <class T>
class pinned_buffer : public detail::owned_elements<T> {
  static_assert(std::is_trivially_copyable_v<T>, "pinned_buffer<T> needs a trivially copyable T");
  using detail::owned_elements<T>::data_, detail::owned_elements<T>::size_;

 public:
  pinned_buffer() noexcept = default;
  explicit pinned_buffer(std::size_t n) {
    const std::size_t bytes = detail::checked_bytes(n, sizeof(T), "pinned_buffer");
    if (bytes == 0) return;
    void* p = nullptr;
#if defined(SPILLWAY_FAULT_INJECTION)
    const cudaError_t e = ::spillway::fault::detail::pinned_allocation_fault()
                              ? cudaErrorMemoryAllocation
                              : cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (e == cudaSuccess) ::spillway::fault::detail::pinned_allocated(bytes);
#else
    const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
#endif
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      throw out_of_memory("pinned_buffer: cannot pin " + detail::format_bytes(bytes) + " of host memory",
                          bytes, 0);
    }
    SPILLWAY_CUDA_CHECK(e, "cudaHostAlloc of " + detail::format_bytes(bytes) + " for pinned_buffer");
    data_ = static_cast<T*>(p);
    size_ = n;
  }
  ~pinned_buffer() { release(); }
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;
  pinned_buffer(pinned_buffer&& o) noexcept : detail::owned_elements<T>(std::move(o)) {}
  pinned_buffer& operator=(pinned_buffer&& o) noexcept {
    if (this != &o) {
      release();
      this->take(o);
    }
    return *this;
  }

  T& operator[](std::size_t i) noexcept { return data_[i]; }
  const T& operator[](std::size_t i) const noexcept { return data_[i]; }
  T* begin() noexcept { return data_; }
  T* end() noexcept { return data_ + size_; }
  const T* begin() const noexcept { return data_; }
  const T* end() const noexcept { return data_ + size_; }

 private:
  void release() noexcept {
    if (data_ != nullptr) {
      (void)cudaFreeHost(data_);
#if defined(SPILLWAY_FAULT_INJECTION)
      ::spillway::fault::detail::pinned_freed(size_ * sizeof(T));
#endif
      data_ = nullptr;
      size_ = 0;
    }
  }
};

}  // namespace spillway
