// Shared helpers for spillway's benchmarks: CUDA-event timing fed to Google Benchmark's manual
// time, and a "no GPU" skip.
#pragma once

#include <spillway/core.hpp>

#include <benchmark/benchmark.h>

#include <vector>

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
/// untimed warm-up), reporting the GPU time as the iteration's manual time. Returns each
/// iteration's time in milliseconds (for medians and ratios computed by the caller).
template <class Work>
std::vector<double> run_timed(benchmark::State& state, stream_view s, Work&& work) {
  work(s);  // warm-up
  s.synchronize();
  std::vector<double> ms;
  for (auto _ : state) {
    event_timer t(s);
    work(s);
    const double e = static_cast<double>(t.stop());
    state.SetIterationTime(e * 1e-3);
    ms.push_back(e);
  }
  return ms;
}

}  // namespace spillway::bench
