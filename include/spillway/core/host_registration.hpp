// spillway/core/host_registration.hpp — RAII page-locking of memory the caller owns.
#pragma once

#include <spillway/core/error.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdio>
#include <exception>
#include <string>
#include <utility>

namespace spillway {

/// Page-locks (cudaHostRegister, portable) `bytes` of caller-owned memory at `ptr` for its lifetime,
/// so copies from/to it are truly asynchronous at full PCIe rate, without a staging copy.
/// Registering is slow (every page is locked); it pays for itself when the memory is copied more
/// than once or is large. A zero-byte registration is a valid no-op. Move-only.
class host_registration {
 public:
  host_registration() noexcept = default;
  host_registration(void* ptr, std::size_t bytes) : host_registration(ptr, bytes, cudaHostRegisterPortable) {}
  /// The same with cudaHostRegister's `flags` (cudaHostRegisterPortable and the others).
  host_registration(void* ptr, std::size_t bytes, unsigned flags) {
    if (bytes == 0) return;
    if (ptr == nullptr) {
      throw logic_error("host_registration: ptr is null but bytes is " + std::to_string(bytes));
    }
    const cudaError_t e = cudaHostRegister(ptr, bytes, flags);
    if (e == cudaErrorHostMemoryAlreadyRegistered) {
      (void)cudaGetLastError();
      throw logic_error("host_registration: memory at " + pointer_text(ptr) +
                        " is already registered (overlapping registrations are not allowed)");
    }
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      throw out_of_memory("host_registration: cannot page-lock " + detail::format_bytes(bytes), bytes, 0);
    }
    SPILLWAY_CUDA_CHECK(e, "cudaHostRegister of " + detail::format_bytes(bytes) + " for host_registration");
    ptr_ = ptr;
    bytes_ = bytes;
  }
  ~host_registration() { release(); }
  host_registration(const host_registration&) = delete;
  host_registration& operator=(const host_registration&) = delete;
  host_registration(host_registration&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  host_registration& operator=(host_registration&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }

  [[nodiscard]] void* data() const noexcept { return ptr_; }
  [[nodiscard]] std::size_t size_bytes() const noexcept { return bytes_; }
  [[nodiscard]] bool active() const noexcept { return ptr_ != nullptr; }

 private:
  static std::string pointer_text(const void* p) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%p", p);
    return buf;
  }
  void release() noexcept {
    if (ptr_ != nullptr) {
      (void)cudaHostUnregister(ptr_);
      ptr_ = nullptr;
      bytes_ = 0;
    }
  }
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

namespace detail {
/// Whether the runtime reports `ptr` as memory of type `t` (false where it cannot say).
inline bool pointer_is(const void* ptr, cudaMemoryType t) {
  cudaPointerAttributes a{};
  const cudaError_t e = cudaPointerGetAttributes(&a, ptr);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.type == t;
}
}  // namespace detail

/// Whether `ptr` is page-locked host memory (pinned_buffer, cudaHostAlloc or registered).
inline bool is_page_locked(const void* ptr) {
  return detail::pointer_is(ptr, cudaMemoryTypeHost);
}

/// Whether a job page-locks the pageable host memory a caller passes it, for the length of the call
/// (cudaHostRegister, undone before the call returns), so its copies run by DMA at the link's rate
/// instead of through staging copies. Page-locking runs at ~20 GB/s of the caller's memory (H200
/// host), so each job's `automatic` rule registers the operands where that measured faster than
/// staging them; the job's report says which it registered.
enum class page_lock {
  automatic,  ///< the job's measured rule (see its options)
  never,      ///< pageable memory is staged as it is
  always,     ///< every pageable host operand the job copies
};

/// Page-locks [ptr, ptr + bytes) for the lifetime of the result where that range is ordinary
/// (unregistered) host memory, for a job's call. `read_only`: the device only reads it; where the
/// plain registration is refused (a read-only file mapping), cudaHostRegisterReadOnly is tried on
/// devices that support it. Never throws for a refusal: where the range is already page-locked,
/// device or managed memory, partly registered, over the locked-memory limit, or refused by the
/// driver, the result is inactive and the memory stays as it was (slower copies, same results).
inline host_registration try_register_host(const void* ptr, std::size_t bytes, bool read_only) {
  if (ptr == nullptr || bytes == 0) return {};
  const void* last = static_cast<const unsigned char*>(ptr) + (bytes - 1);
  if (!detail::pointer_is(ptr, cudaMemoryTypeUnregistered) || !detail::pointer_is(last, cudaMemoryTypeUnregistered))
    return {};
  void* p = const_cast<void*>(ptr);  // registration changes no byte of it
  try {
    return host_registration(p, bytes, cudaHostRegisterPortable);
  } catch (const std::exception&) {
    (void)cudaGetLastError();
  }
  if (read_only) {
    int dev = 0, ro = 0;
    if (cudaGetDevice(&dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&ro, cudaDevAttrHostRegisterReadOnlySupported, dev) == cudaSuccess && ro != 0) {
      try {
        return host_registration(p, bytes, cudaHostRegisterPortable | cudaHostRegisterReadOnly);
      } catch (const std::exception&) {
      }
    }
    (void)cudaGetLastError();
  }
  return {};
}

}  // namespace spillway
