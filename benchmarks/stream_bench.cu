// stream_bench — the out-of-core elementwise multiply host→host: c = a * b for two
// 1,000,000 × 500 float64 host arrays (8 GB in, 4 GB out), streamed under a device-memory budget.
//
// Reported per case: wall seconds and end-to-end GB/s = (bytes in + bytes out) / wall time, next to
//  (a) the pinned copy roofline measured here: the same 8 GB H2D and 4 GB D2H as plain copies of
//      whole arrays on two streams at once (no compute, no chunking);
//  (b) a one-stream, no-overlap version: copy a chunk in, multiply, copy it out, chunk after chunk,
//      with the chunk size the pipeline uses for the same budget.
//
// Timing: every case is one synchronous host call (the pipeline returns only when the output is
// complete on the host; the baselines synchronize before returning), so its wall time is taken
// with a steady clock around the whole blocking call and fed to Google Benchmark as manual time.
// The timed region includes the scheduler's own setup (streams, slot allocation from spillway's
// pool, worker threads); inputs are filled and the output allocated and touched beforehand; one
// untimed warm-up run precedes each case. Median of the repetitions.
//
// SPILLWAY_STREAM_BENCH_ROWS overrides the row count (default 1,000,000) for quick runs.
#include <spillway/core.hpp>
#include <spillway/pipeline.cuh>

#include "bench_common.cuh"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace {

using spillway::operator""_GiB;

struct multiplies {
  __host__ __device__ double operator()(double a, double b) const { return a * b; }
};

constexpr std::size_t cols = 500;

std::size_t rows() {
  if (const char* v = std::getenv("SPILLWAY_STREAM_BENCH_ROWS")) return std::strtoull(v, nullptr, 10);
  return 1000000;
}

void parallel_for(std::size_t n, const std::function<void(std::size_t, std::size_t)>& f) {
  const unsigned t = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> th;
  for (unsigned i = 0; i < t; ++i) th.emplace_back([&, i] { f(n * i / t, n * (i + 1) / t); });
  for (auto& x : th) x.join();
}

// The arrays, built once: pinned and pageable copies of a and b, outputs of each kind.
struct arrays {
  std::size_t n = rows() * cols;
  spillway::pinned_buffer<double> pa, pb, pc;
  std::unique_ptr<double[]> va, vb, vc;
  arrays() : pa(n), pb(n), pc(n), va(new double[n]), vb(new double[n]), vc(new double[n]) {
    parallel_for(n, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) {
        pa[i] = va[i] = static_cast<double>((i * 2654435761u) % 1000003) * 1e-3 - 500.0;
        pb[i] = vb[i] = 1.0 / static_cast<double>(1 + i % 977);
      }
      std::memset(pc.data() + b, 0xFF, (e - b) * 8);  // touched, poisoned
      std::memset(vc.get() + b, 0xFF, (e - b) * 8);
    });
  }
  // Every element of c is a*b bit for bit (checked once per case, outside the timing).
  bool check(const double* c) const {
    std::atomic<std::size_t> bad{0};
    parallel_for(n, [&](std::size_t b, std::size_t e) {
      std::size_t local = 0;
      for (std::size_t i = b; i < e; ++i) {
        const double w = pa[i] * pb[i];
        if (std::memcmp(&w, c + i, 8) != 0) ++local;
      }
      bad += local;
    });
    return bad.load() == 0;
  }
  void poison(double* c) const {
    parallel_for(n, [&](std::size_t b, std::size_t e) { std::memset(c + b, 0xFF, (e - b) * 8); });
  }
};

arrays& data() {
  static arrays a;
  return a;
}

double bytes_total() { return 3.0 * static_cast<double>(data().n) * 8.0; }

template <class F>
double wall_seconds(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void report(benchmark::State& state, double seconds) {
  state.SetIterationTime(seconds);
  state.counters["GB/s"] = benchmark::Counter(bytes_total() / seconds / 1e9);
  state.counters["seconds"] = benchmark::Counter(seconds);
}

void finish(benchmark::State& state) {
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes_total()) * static_cast<std::int64_t>(state.iterations()));
}

spillway::transform_options options(std::size_t budget, std::vector<int> devices) {
  spillway::transform_options o;
  o.budget = spillway::memory_budget(budget);
  o.devices = std::move(devices);
  return o;
}

// The pipeline. args: budget GiB, pinned (1) or pageable (0) inputs and output, devices (1 or 2).
void BM_transform(benchmark::State& state) {
  const std::size_t budget = static_cast<std::size_t>(state.range(0)) << 30;
  const bool pinned = state.range(1) != 0;
  const int ndev = static_cast<int>(state.range(2));
  if (spillway::bench::skip_without_gpus(state, ndev)) return;
  const std::vector<int> devs = spillway::bench::first_devices(ndev);
  auto& d = data();
  double* c = pinned ? d.pc.data() : d.vc.get();
  const double* a = pinned ? d.pa.data() : d.va.get();
  const double* b = pinned ? d.pb.data() : d.vb.get();
  const auto o = options(budget, devs);
  auto run = [&] {
    const auto r = spillway::transform(o, spillway::host_output(c, d.n), multiplies{}, spillway::host_input(a, d.n),
                                       spillway::host_input(b, d.n));
    if (!r.complete()) throw std::runtime_error("transform incomplete");
    return r;
  };
  d.poison(c);
  const auto warm = run();  // warm-up: the pool grows, staging is pinned, threads start
  if (!d.check(c)) {
    state.SkipWithError("result differs from the host");
    return;
  }
  for (auto _ : state) report(state, wall_seconds(run));
  finish(state);
  state.counters["chunks"] = benchmark::Counter(static_cast<double>(warm.tasks_total));
  state.counters["slot_MiB"] =
      benchmark::Counter(static_cast<double>(warm.device_bytes_per_device) / warm.slots_per_device / (1 << 20));
  spillway::bench::split_counters(state, warm, "chunks");
}

__global__ void multiply_kernel(const double* a, const double* b, double* c, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    c[i] = a[i] * b[i];
}

// Baseline (b): one stream, chunk after chunk: H2D a, H2D b, multiply, D2H c. Same chunk size as
// the pipeline's plan for this budget; pinned memory (its best case).
void BM_no_overlap(benchmark::State& state) {
  if (spillway::bench::skip_without_gpu(state)) return;
  const std::size_t budget = static_cast<std::size_t>(state.range(0)) << 30;
  auto& d = data();
  const auto o = options(budget, {0});
  spillway::plan_request pr;
  pr.extent = d.n;
  pr.bytes_per_unit = {8, 8, 8};
  pr.budget_bytes = budget;
  pr.slots = o.slots_per_device;
  pr.granularity = o.granularity;
  pr.max_slot_bytes = o.max_chunk_bytes;
  const auto plan = spillway::make_chunk_plan(pr);
  const std::size_t chunk = plan.chunk_units();
  int sms = 0;
  SPILLWAY_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  auto run = [&] {
    spillway::device_guard g(0);
    spillway::stream s;
    spillway::device_buffer<double> da(chunk, s), db(chunk, s), dc(chunk, s);
    for (std::size_t begin = 0; begin < d.n; begin += chunk) {
      const std::size_t cnt = std::min(chunk, d.n - begin);
      SPILLWAY_CUDA_TRY(cudaMemcpyAsync(da.data(), d.pa.data() + begin, cnt * 8, cudaMemcpyHostToDevice, s.value()));
      SPILLWAY_CUDA_TRY(cudaMemcpyAsync(db.data(), d.pb.data() + begin, cnt * 8, cudaMemcpyHostToDevice, s.value()));
      const auto grid = static_cast<unsigned>(std::min<std::size_t>((cnt + 255) / 256, static_cast<std::size_t>(sms) * 8));
      multiply_kernel<<<grid, 256, 0, s.value()>>>(da.data(), db.data(), dc.data(), cnt);
      SPILLWAY_CHECK_LAUNCH();
      SPILLWAY_CUDA_TRY(cudaMemcpyAsync(d.pc.data() + begin, dc.data(), cnt * 8, cudaMemcpyDeviceToHost, s.value()));
    }
    s.synchronize();
  };
  d.poison(d.pc.data());
  run();
  if (!d.check(d.pc.data())) {
    state.SkipWithError("result differs from the host");
    return;
  }
  for (auto _ : state) report(state, wall_seconds(run));
  finish(state);
  state.counters["chunks"] = benchmark::Counter(static_cast<double>(plan.chunk_count()));
}

// Roofline (a): the job's bytes as plain pinned copies of whole arrays, H2D (a then b) on one
// stream while D2H (c) runs on another. Device buffers allocated outside the timing.
void BM_copy_roofline(benchmark::State& state) {
  if (spillway::bench::skip_without_gpu(state)) return;
  auto& d = data();
  spillway::device_guard g(0);
  spillway::stream up, down;
  spillway::device_buffer<double> da(d.n, up), db(d.n, up), dc(d.n, down);
  up.synchronize();
  down.synchronize();
  auto run = [&] {
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(da.data(), d.pa.data(), d.n * 8, cudaMemcpyHostToDevice, up.value()));
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(db.data(), d.pb.data(), d.n * 8, cudaMemcpyHostToDevice, up.value()));
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(d.pc.data(), dc.data(), d.n * 8, cudaMemcpyDeviceToHost, down.value()));
    up.synchronize();
    down.synchronize();
  };
  run();
  for (auto _ : state) report(state, wall_seconds(run));
  finish(state);
}

constexpr int reps = 5;

BENCHMARK(BM_copy_roofline)->Name("copy_roofline/pinned")->UseManualTime()->Iterations(1)->Repetitions(reps)
    ->ReportAggregatesOnly(true)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_no_overlap)->Name("no_overlap/pinned")->ArgNames({"budget_GiB"})->Arg(8)->Arg(1)->UseManualTime()
    ->Iterations(1)->Repetitions(reps)->ReportAggregatesOnly(true)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_transform)->Name("transform")->ArgNames({"budget_GiB", "pinned", "gpus"})
    ->Args({8, 1, 1})->Args({1, 1, 1})->Args({8, 0, 1})->Args({1, 0, 1})->Args({8, 1, 2})->Args({8, 0, 2})
    ->UseManualTime()->Iterations(1)->Repetitions(reps)->ReportAggregatesOnly(true)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
