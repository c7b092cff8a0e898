// Shared helpers for spillway's benchmarks: CUDA-event timing fed to Google Benchmark's manual
// time, the "no GPU" / "too few GPUs" skips, and the per-device split of a job's report.
#pragma once

#include <spillway/core.hpp>
#include <spillway/pipeline/job.hpp>

#include <benchmark/benchmark.h>

#include <string>
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

/// True (and the benchmark marked skipped with the reason) when fewer than `gpus` GPUs are visible.
inline bool skip_without_gpus(benchmark::State& state, int gpus) {
  if (skip_without_gpu(state)) return true;
  if (device_count() < gpus) {
    state.SkipWithError(("needs " + std::to_string(gpus) + " GPUs; " + std::to_string(device_count()) +
                         " visible (run on a machine with as many)")
                            .c_str());
    return true;
  }
  return false;
}

/// Devices 0 .. gpus − 1.
inline std::vector<int> first_devices(int gpus) {
  std::vector<int> d;
  for (int i = 0; i < gpus; ++i) d.push_back(i);
  return d;
}

/// With several devices, how the job split over them: counters dev<d>_<unit> (its tasks) and
/// dev<d>_GB (its host<->device bytes), from the scheduler's report.
inline void split_counters(benchmark::State& state, const job_report& r, const char* unit) {
  if (r.devices.size() < 2) return;
  for (std::size_t d = 0; d < r.devices.size(); ++d) {
    const std::string dev = "dev" + std::to_string(r.devices[d]);
    state.counters[dev + "_" + unit] = static_cast<double>(r.tasks_per_device[d]);
    state.counters[dev + "_GB"] = static_cast<double>(r.bytes_per_device[d]) * 1e-9;
  }
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
