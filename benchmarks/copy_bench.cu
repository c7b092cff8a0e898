// copy_bench: the copy roofline the other benchmarks quote. Host<->device copies with pinned and
// pageable host memory, one or several streams, one direction or both at once, plus the
// device-to-device copy (the HBM roofline, counting bytes read + bytes written). GB/s = 1e9 B/s.
// Every case is timed with CUDA events (manual time); run with --benchmark_repetitions=N
// --benchmark_report_aggregates_only=true to get medians.
#include "bench_common.cuh"

#include <cstring>
#include <vector>

namespace {

using spillway::device_buffer;
using spillway::pinned_buffer;
using spillway::stream;

enum class host_kind { pinned, pageable };

constexpr std::size_t kBytes = std::size_t{1} << 30;  // 1 GiB per direction: far past any cache

struct host_memory {
  explicit host_memory(host_kind k, std::size_t bytes) : kind(k) {
    if (k == host_kind::pinned) {
      pinned = pinned_buffer<unsigned char>(bytes);
      ptr = pinned.data();
    } else {
      pageable.resize(bytes);
      ptr = pageable.data();
    }
    std::memset(ptr, 0x5a, bytes);  // touch every page: no first-touch faults in the timing
  }
  host_kind kind;
  pinned_buffer<unsigned char> pinned;
  std::vector<unsigned char> pageable;
  unsigned char* ptr = nullptr;
};

// One direction, the transfer split over `streams` streams.
void BM_Copy(benchmark::State& state, cudaMemcpyKind dir, host_kind hk) {
  if (spillway::bench::skip_without_gpu(state)) return;
  const auto nstreams = static_cast<std::size_t>(state.range(0));
  host_memory host(hk, kBytes);
  stream main_stream;
  spillway::stream_pool pool(nstreams);
  device_buffer<unsigned char> dev(kBytes, main_stream);
  dev.fill_bytes_async(0x3c, main_stream);
  main_stream.synchronize();
  const std::size_t part = kBytes / nstreams;
  spillway::event fork;
  std::vector<spillway::event> joins(nstreams);
  spillway::bench::run_timed(state, main_stream, [&](spillway::stream_view s) {
    fork.record(s);
    for (std::size_t i = 0; i < nstreams; ++i) {
      auto st = pool.get(i);
      st.wait(fork);
      unsigned char* d = dev.data() + i * part;
      unsigned char* h = host.ptr + i * part;
      const std::size_t bytes = (i + 1 == nstreams) ? kBytes - i * part : part;
      if (dir == cudaMemcpyHostToDevice) {
        SPILLWAY_CUDA_TRY(cudaMemcpyAsync(d, h, bytes, dir, st.value()));
      } else {
        SPILLWAY_CUDA_TRY(cudaMemcpyAsync(h, d, bytes, dir, st.value()));
      }
      joins[i].record(st);
      s.wait(joins[i]);
    }
  });
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(kBytes));
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(kBytes) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

// H2D and D2H at the same time on two streams (the H200 has separate copy engines each way).
void BM_CopyBothWays(benchmark::State& state, host_kind hk) {
  if (spillway::bench::skip_without_gpu(state)) return;
  host_memory up(hk, kBytes), down(hk, kBytes);
  stream s_main, s_up, s_down;
  device_buffer<unsigned char> d_up(kBytes, s_main), d_down(kBytes, s_main);
  d_down.fill_bytes_async(0x11, s_main);
  s_main.synchronize();
  spillway::event fork, j1, j2;
  spillway::bench::run_timed(state, s_main, [&](spillway::stream_view s) {
    fork.record(s);
    s_up.view().wait(fork);
    s_down.view().wait(fork);
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(d_up.data(), up.ptr, kBytes, cudaMemcpyHostToDevice, s_up.value()));
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(down.ptr, d_down.data(), kBytes, cudaMemcpyDeviceToHost, s_down.value()));
    j1.record(s_up);
    j2.record(s_down);
    s.wait(j1);
    s.wait(j2);
  });
  const double moved = 2.0 * static_cast<double>(kBytes);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(2 * kBytes));
  state.counters["GB/s"] = benchmark::Counter(moved / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// Device-to-device: the HBM roofline; bytes read + bytes written.
void BM_CopyDeviceToDevice(benchmark::State& state) {
  if (spillway::bench::skip_without_gpu(state)) return;
  const std::size_t bytes = std::size_t{4} << 30;
  stream s;
  device_buffer<unsigned char> a(bytes, s), b(bytes, s);
  a.fill_bytes_async(0x77, s);
  spillway::bench::run_timed(state, s, [&](spillway::stream_view st) {
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, st.value()));
  });
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(2 * bytes));
  state.counters["GB/s"] = benchmark::Counter(2.0 * static_cast<double>(bytes) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK_CAPTURE(BM_Copy, H2D_pinned, cudaMemcpyHostToDevice, host_kind::pinned)
    ->Arg(1)->Arg(4)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK_CAPTURE(BM_Copy, D2H_pinned, cudaMemcpyDeviceToHost, host_kind::pinned)
    ->Arg(1)->Arg(4)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK_CAPTURE(BM_Copy, H2D_pageable, cudaMemcpyHostToDevice, host_kind::pageable)
    ->Arg(1)->Arg(4)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK_CAPTURE(BM_Copy, D2H_pageable, cudaMemcpyDeviceToHost, host_kind::pageable)
    ->Arg(1)->Arg(4)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK_CAPTURE(BM_CopyBothWays, pinned, host_kind::pinned)
    ->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK_CAPTURE(BM_CopyBothWays, pageable, host_kind::pageable)
    ->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_CopyDeviceToDevice)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);

}  // namespace

BENCHMARK_MAIN();
