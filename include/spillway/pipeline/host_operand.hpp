// spillway/pipeline/host_operand.hpp — how a streamed job sees a host array: pointer, length, and
// whether the memory is page-locked (copied directly by DMA) or pageable (staged through pinned
// buffers by host threads).
//
// Why staging: a cudaMemcpyAsync from pageable memory is effectively synchronous — the driver
// copies it through its own small pinned bounce buffer and returns only when the source has been
// read, so it neither overlaps with the caller nor with other copies. The pipeline instead copies
// pageable chunks into its own pinned staging on several host threads and lets the copy engines
// DMA from there asynchronously.
//
// These are the flat map's operands (one element per output element). Broadcast operands are the
// ndview overload's (map/streamed.cuh); arrays with several elements per unit, scratch and
// resident tables are streamed_job's (streamed_job.hpp).
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/core/host_memory.hpp>
#include <spillway/core/host_registration.hpp>

#include <cuda/std/span>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

namespace spillway {


/// A contiguous host array a job reads: `size` elements of T at `data`.
template <class T>
struct host_operand {
  using value_type = T;
  const T* data = nullptr;
  std::size_t size = 0;
  host_memory memory = host_memory::detect;
};

/// A contiguous host array a job writes.
template <class T>
struct host_result {
  using value_type = T;
  T* data = nullptr;
  std::size_t size = 0;
  host_memory memory = host_memory::detect;
};

template <class T>
host_operand<T> host_input(const T* data, std::size_t size, host_memory m = host_memory::detect) {
  return {data, size, m};
}
namespace detail {
template <class R, class = void>
struct has_is_contiguous : std::false_type {};
template <class R>
struct has_is_contiguous<R, std::void_t<decltype(std::declval<const R&>().is_contiguous())>> : std::true_type {};

// A shaped view (anything with is_contiguous(), e.g. spillway::ndview) is a flat operand only
// when it is contiguous; a strided or broadcast view read as flat memory would silently give
// wrong elements, so it is refused here (the shape-aware transform overload takes such views).
template <class R>
void require_flat(const R& r, const char* who) {
  if constexpr (has_is_contiguous<R>::value) {
    if (!r.is_contiguous()) {
      throw logic_error(std::string(who) +
                        ": a strided or broadcast view cannot be streamed as a flat array; pass an "
                        "ndview output to use the shape-aware (broadcasting) transform, or copy the "
                        "view to contiguous memory");
    }
  } else {
    (void)r;
    (void)who;
  }
}
}  // namespace detail

/// From anything contiguous with data() and size() (std::vector, pinned_buffer, span, a contiguous
/// view…). A non-contiguous view throws logic_error.
template <class R, class T = std::remove_cv_t<std::remove_pointer_t<decltype(std::declval<const R&>().data())>>>
host_operand<T> host_input(const R& r, host_memory m = host_memory::detect) {
  detail::require_flat(r, "host_input");
  return {r.data(), static_cast<std::size_t>(r.size()), m};
}
template <class T>
host_result<T> host_output(T* data, std::size_t size, host_memory m = host_memory::detect) {
  return {data, size, m};
}
template <class R, class T = std::remove_pointer_t<decltype(std::declval<R&>().data())>,
          class = std::enable_if_t<!std::is_const_v<T>>>
host_result<T> host_output(R& r, host_memory m = host_memory::detect) {
  detail::require_flat(r, "host_output");
  return {r.data(), static_cast<std::size_t>(r.size()), m};
}

namespace detail {

template <class T>
struct is_host_operand : std::false_type {};
template <class T>
struct is_host_operand<host_operand<T>> : std::true_type {};
template <class T>
struct is_host_result : std::false_type {};
template <class T>
struct is_host_result<host_result<T>> : std::true_type {};

template <class T>
host_operand<T> as_input(const host_operand<T>& o) { return o; }
template <class R, std::enable_if_t<!is_host_operand<R>::value, int> = 0>
auto as_input(const R& r) { return host_input(r); }

template <class T>
host_result<T> as_output(const host_result<T>& o) { return o; }
template <class R, std::enable_if_t<!is_host_result<std::remove_cv_t<R>>::value, int> = 0>
auto as_output(R& r) { return host_output(r); }

/// Whether [p, p + bytes) is page-locked host memory (first and last byte checked). False on a
/// machine without a GPU.
inline bool page_locked_range(const void* p, std::size_t bytes) {
  if (p == nullptr || bytes == 0) return false;
  return is_page_locked(p) && is_page_locked(static_cast<const unsigned char*>(p) + (bytes - 1));
}

inline host_memory resolve_memory(host_memory m, const void* p, std::size_t bytes) {
  if (m != host_memory::detect) return m;
  return page_locked_range(p, bytes) ? host_memory::page_locked : host_memory::pageable;
}

}  // namespace detail
}  // namespace spillway
