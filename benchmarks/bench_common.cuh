// Shared helpers for spillway's benchmarks: CUDA-event timing fed to Google Benchmark's manual
// time, and a "no GPU" skip.
#pragma once

#include <spillway/core.hpp>

#include <benchmark/benchmark.h>

namespace spillway::bench {

/// True (and the benchmark marked skipped with the reason) when no GPU is present.
inline bool skip_without_gpu(benchmark::State& state) {
  if (device_count() == 0) {
    state.SkipWithError(("no CUDA GPU: " + no_gpu_reason()).c_str());
    return true;
  }
  return false;
}

/// Runs `work(stream)` once per benchmark iteration, timed with CUDA events on `s` (after one
/// untimed warm-up), reporting the GPU time as the iteration's manual time.
template <class Work>
void run_timed(benchmark::State& state, stream_view s, Work&& work) {
  work(s);  // warm-up
  s.synchronize();
  for (auto _ : state) {
    event_timer t(s);
    work(s);
    state.SetIterationTime(static_cast<double>(t.stop()) * 1e-3);
  }
}

}  // namespace spillway::bench
