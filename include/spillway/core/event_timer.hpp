// spillway/core/event_timer.hpp — timing GPU work with CUDA events, never a host clock.
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/core/stream.hpp>

#include <algorithm>
#include <cstddef>
#include <vector>

namespace spillway {

/// Times the work enqueued on a stream between start() and stop() with a pair of CUDA events.
/// Launches are asynchronous: a host clock around them measures how fast the launch queue
/// accepts work, not how long the GPU takes. The events are stamped by the GPU itself.
///
///   event_timer t(s);          // records the start event on s
///   launch(s); launch(s);
///   float ms = t.stop();       // records the stop event, waits for it, returns milliseconds
class event_timer {
 public:
  /// Records the start event on `s` now.
  explicit event_timer(stream_view s) : stream_(s), start_(event::timing::enabled), stop_(event::timing::enabled) {
    start_.record(stream_);
  }
  event_timer(const event_timer&) = delete;
  event_timer& operator=(const event_timer&) = delete;

  /// Re-records the start event.
  void restart() {
    start_.record(stream_);
    stopped_ = false;
  }
  /// Records the stop event (once), waits for it, and returns elapsed milliseconds.
  float stop() {
    if (!stopped_) {
      stop_.record(stream_);
      stopped_ = true;
    }
    stop_.synchronize();
    float ms = 0.0f;
    SPILLWAY_CUDA_TRY(cudaEventElapsedTime(&ms, start_.value(), stop_.value()));
    return ms;
  }

 private:
  stream_view stream_;
  event start_;
  event stop_;
  bool stopped_ = false;
};

/// Median of a sample (the sample is copied); 0 for an empty one.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  const std::size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) {
    m = (m + *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid))) / 2.0;
  }
  return m;
}

/// Runs `work(s)` `warmup` times, then `repetitions` times each timed with events; returns every
/// timed sample in milliseconds (take the median).
template <class Work>
std::vector<double> time_on_stream(stream_view s, Work&& work, int warmup, int repetitions) {
  for (int i = 0; i < warmup; ++i) work(s);
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(repetitions > 0 ? repetitions : 0));
  for (int i = 0; i < repetitions; ++i) {
    event_timer t(s);
    work(s);
    samples.push_back(static_cast<double>(t.stop()));
  }
  return samples;
}

}  // namespace spillway
