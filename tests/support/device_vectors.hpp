// Test support: host vectors to device buffers and back, in stream order.
#pragma once

#include <spillway/core/device_buffer.hpp>
#include <spillway/core/stream.hpp>

#include <cuda/std/span>

#include <vector>

namespace spillway::test {

/// A device copy of `h`, enqueued on `s`.
template <class T>
device_buffer<T> upload(const std::vector<T>& h, stream_view s) {
  device_buffer<T> d(h.size(), s);
  d.copy_from_host_async(cuda::std::span<const T>(h.data(), h.size()), s);
  return d;
}

/// The contents of `d` once the work on `s` before it is done (waits for `s`).
template <class T>
std::vector<T> download(const device_buffer<T>& d, stream_view s) {
  std::vector<T> h(d.size());
  d.copy_to_host_async(cuda::std::span<T>(h.data(), h.size()), s);
  s.synchronize();
  return h;
}

}  // namespace spillway::test
