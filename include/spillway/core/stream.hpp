// spillway/core/stream.hpp — stream_view (non-owning), stream (owning), event, stream_pool.
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/error.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace spillway {

class event;

namespace detail {
/// The answer of a cudaStreamQuery / cudaEventQuery: done (true), not yet (false, the sticky
/// "not ready" cleared), or an error thrown naming `what`.
inline bool query_done(cudaError_t e, const char* what) {
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  SPILLWAY_CUDA_CHECK(e, what);
  return true;
}
}  // namespace detail

/// A non-owning handle to a CUDA stream. It cannot be built from `0` or `nullptr`: the legacy
/// default stream synchronizes with every other stream and silently serializes pipelines, so
/// spillway never uses it. Use an owned `stream`, or `stream_view::per_thread()`.
class stream_view {
 public:
  explicit stream_view(cudaStream_t s) : s_(s) {
    if (s == nullptr) {
      throw logic_error(
          "stream_view: the null (legacy default) stream is not accepted; pass an owned "
          "spillway::stream or stream_view::per_thread()");
    }
  }
  stream_view(int) = delete;
  stream_view(std::nullptr_t) = delete;

  /// The per-thread default stream (does not synchronize with other streams).
  static stream_view per_thread() noexcept { return stream_view(cudaStreamPerThread, tag{}); }

  [[nodiscard]] cudaStream_t value() const noexcept { return s_; }
  operator cudaStream_t() const noexcept { return s_; }  // NOLINT: interop with CUDA calls

  void synchronize() const { SPILLWAY_CUDA_TRY(cudaStreamSynchronize(s_)); }
  /// True when all work enqueued so far has completed.
  [[nodiscard]] bool is_idle() const {
    return detail::query_done(cudaStreamQuery(s_), "cudaStreamQuery (stream_view::is_idle)");
  }
  /// Makes later work on this stream wait for `e` (no host blocking).
  inline void wait(const event& e) const;

  friend bool operator==(stream_view a, stream_view b) noexcept { return a.s_ == b.s_; }
  friend bool operator!=(stream_view a, stream_view b) noexcept { return a.s_ != b.s_; }

 private:
  struct tag {};
  stream_view(cudaStream_t s, tag) noexcept : s_(s) {}
  cudaStream_t s_;
};

/// An owned, non-blocking CUDA stream on the device that was current at construction.
class stream {
 public:
  stream() : device_(current_device()) {
    SPILLWAY_CUDA_TRY(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
  }
  explicit stream(int device) : device_(device) {
    device_guard g(device);
    SPILLWAY_CUDA_TRY(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
  }
  ~stream() { reset(); }
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;
  stream(stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)), device_(o.device_) {}
  stream& operator=(stream&& o) noexcept {
    if (this != &o) {
      reset();
      s_ = std::exchange(o.s_, nullptr);
      device_ = o.device_;
    }
    return *this;
  }

  [[nodiscard]] stream_view view() const {
    if (s_ == nullptr) throw logic_error("stream::view: this stream was moved from");
    return stream_view(s_);
  }
  operator stream_view() const { return view(); }  // NOLINT: an owned stream is usable as a view
  [[nodiscard]] cudaStream_t value() const noexcept { return s_; }
  /// So that `kernel<<<grid, block, 0, s>>>` and CUDA runtime calls take an owned stream as they
  /// take a stream_view (as RMM's cuda_stream_view does).
  operator cudaStream_t() const noexcept { return s_; }  // NOLINT: interop with CUDA calls
  [[nodiscard]] int device() const noexcept { return device_; }
  void synchronize() const { view().synchronize(); }

 private:
  void reset() noexcept {
    if (s_ != nullptr) {
      (void)cudaStreamDestroy(s_);  // destroys asynchronously once pending work finishes
      s_ = nullptr;
    }
  }
  cudaStream_t s_ = nullptr;
  int device_ = 0;
};

/// An owned CUDA event. Timing is off by default (cheaper to record and wait on); event_timer
/// asks for timing events.
class event {
 public:
  enum class timing : bool { disabled = false, enabled = true };

  explicit event(timing t = timing::disabled) {
    SPILLWAY_CUDA_TRY(cudaEventCreateWithFlags(
        &e_, t == timing::enabled ? cudaEventDefault : cudaEventDisableTiming));
  }
  ~event() {
    if (e_ != nullptr) (void)cudaEventDestroy(e_);
  }
  event(const event&) = delete;
  event& operator=(const event&) = delete;
  event(event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  event& operator=(event&& o) noexcept {
    if (this != &o) {
      if (e_ != nullptr) (void)cudaEventDestroy(e_);
      e_ = std::exchange(o.e_, nullptr);
    }
    return *this;
  }

  void record(stream_view s) { SPILLWAY_CUDA_TRY(cudaEventRecord(e_, s.value())); }
  void synchronize() const { SPILLWAY_CUDA_TRY(cudaEventSynchronize(e_)); }
  /// True when the work captured by the last record() has completed (or nothing was recorded).
  [[nodiscard]] bool is_complete() const {
    return detail::query_done(cudaEventQuery(e_), "cudaEventQuery (event::is_complete)");
  }
  [[nodiscard]] cudaEvent_t value() const noexcept { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

inline void stream_view::wait(const event& e) const {
  SPILLWAY_CUDA_TRY(cudaStreamWaitEvent(s_, e.value(), 0));
}

/// A fixed set of owned streams on one device, handed out round-robin.
class stream_pool {
 public:
  explicit stream_pool(std::size_t count, int device) {
    if (count == 0) throw logic_error("stream_pool: count must be at least 1, got 0");
    streams_.reserve(count);
    for (std::size_t i = 0; i < count; ++i) streams_.emplace_back(device);
  }
  explicit stream_pool(std::size_t count) : stream_pool(count, current_device()) {}

  [[nodiscard]] std::size_t size() const noexcept { return streams_.size(); }
  /// Stream `i % size()`.
  [[nodiscard]] stream_view get(std::size_t i) const { return streams_[i % streams_.size()].view(); }
  /// The next stream, round-robin.
  [[nodiscard]] stream_view next() noexcept { return streams_[next_++ % streams_.size()].view(); }
  void synchronize_all() const {
    for (const auto& s : streams_) s.synchronize();
  }

 private:
  std::vector<stream> streams_;
  std::size_t next_ = 0;
};

}  // namespace spillway
