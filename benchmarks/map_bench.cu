// Elementwise maps, broadcasting and a gufunc against the HBM roofline and the baselines a user
// would otherwise reach for, all measured in this binary:
//   - the roofline: a device-to-device cudaMemcpyAsync (read + write bytes per second);
//   - thrust::transform (CUB's DeviceTransform underneath) for a*b;
//   - a naive one-thread-per-element kernel for a*b (what a hand-written CUDA port does).
// GB/s counts each array's stored bytes once (a broadcast operand once, not once per use) plus
// the output written once. Times are CUDA-event times after a warm-up; the summary uses medians.
// Each sample starts behind a 200 µs hold kernel, so the events bracket the GPU's work and not the
// host's enqueue (planning, launch); rows named *_e2e leave the hold out and count the host work
// between the events too (what a caller that synchronises after every call sees).
#include <spillway/core/event_timer.hpp>
#include <spillway/map.cuh>

#include <benchmark/benchmark.h>

#include <thrust/execution_policy.h>
#include <thrust/functional.h>
#include <thrust/transform.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace {

using spillway::index_t;

constexpr index_t kMulN = 134217728;  // 2^27 float64: 1 GiB per array

/// Median GB/s per benchmark name, for the ratio summary printed after the run.
std::map<std::string, double>& results() {
  static std::map<std::string, double> r;
  return r;
}

__global__ void init_kernel(double* p, index_t n, std::uint64_t salt) {
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<index_t>(gridDim.x) * blockDim.x) {
    std::uint64_t x = (static_cast<std::uint64_t>(i) + salt) * 0x9E3779B97F4A7C15ULL;
    x ^= x >> 29;
    p[i] = 0.5 + static_cast<double>(x % 1000003) / 1000003.0;  // in [0.5, 1.5): never zero
  }
}
__global__ void init_kernel_f(float* p, index_t n, std::uint64_t salt) {
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<index_t>(gridDim.x) * blockDim.x) {
    std::uint64_t x = (static_cast<std::uint64_t>(i) + salt) * 0x9E3779B97F4A7C15ULL;
    x ^= x >> 29;
    p[i] = 0.5f + static_cast<float>(x % 1009) / 1009.0f;
  }
}

template <class T>
spillway::device_array<T> filled(const std::vector<index_t>& shape, std::uint64_t salt, spillway::stream_view s) {
  spillway::device_array<T> a(shape, s);
  if constexpr (std::is_same_v<T, double>) {
    init_kernel<<<1024, 256, 0, s.value()>>>(a.data(), a.size(), salt);
  } else {
    init_kernel_f<<<1024, 256, 0, s.value()>>>(a.data(), a.size(), salt);
  }
  SPILLWAY_CUDA_TRY(cudaGetLastError());
  return a;
}

__global__ void naive_mul_kernel(const double* a, const double* b, double* out, index_t n) {
  const index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] * b[i];
}

struct mul {
  __host__ __device__ double operator()(double x, double y) const { return x * y; }
};

/// Keeps the stream busy for about `ns` nanoseconds of GPU time (one thread spinning on the
/// global timer), so that what is enqueued behind it is enqueued before the GPU gets to it.
__global__ void hold_kernel(unsigned long long ns) {
  unsigned long long t0 = 0, t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

/// How a sample is taken. `gpu`: a 200 µs hold kernel runs ahead of the start event, so the host
/// work of an enqueue (planning, argument set-up, the launch call) happens while the GPU is busy
/// and the events time only the GPU's work (what nvbench does with its blocking kernel). `e2e`:
/// no hold: the host work of the enqueue between the two events is counted as well, which is what
/// a caller that synchronises after every call sees (the rows named *_e2e).
enum class sample { gpu, e2e };

/// Times `work(stream)` with events: one warm-up, then one sample per benchmark iteration.
template <class Work>
void timed(benchmark::State& state, const std::string& name, double bytes, spillway::stream_view s, Work&& work,
           sample how = sample::gpu) {
  work(s);
  s.synchronize();
  std::vector<double> ms;
  for (auto _ : state) {
    if (how == sample::gpu) {
      hold_kernel<<<1, 1, 0, s.value()>>>(200000ull);
      SPILLWAY_CUDA_TRY(cudaGetLastError());
    }
    spillway::event_timer t(s);
    work(s);
    const double m = t.stop();
    ms.push_back(m);
    state.SetIterationTime(m / 1e3);
  }
  const double med = spillway::median(ms);
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes) * static_cast<std::int64_t>(state.iterations()));
  state.counters["GB/s"] = bytes / (med * 1e-3) / 1e9;
  state.counters["median_ms"] = med;
  results()[name] = bytes / (med * 1e-3) / 1e9;
}

/// Compares `n` elements at the start and at the end of two device arrays (spot check).
template <class T>
void expect_same(const T* x, const T* y, index_t size, const char* what, spillway::stream_view s) {
  const index_t n = std::min<index_t>(size, 1 << 16);
  std::vector<T> hx(static_cast<std::size_t>(2 * n)), hy(static_cast<std::size_t>(2 * n));
  for (int part = 0; part < 2; ++part) {
    const index_t off = part == 0 ? 0 : size - n;
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(hx.data() + part * n, x + off, n * sizeof(T), cudaMemcpyDeviceToHost, s.value()));
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(hy.data() + part * n, y + off, n * sizeof(T), cudaMemcpyDeviceToHost, s.value()));
  }
  s.synchronize();
  for (std::size_t i = 0; i < hx.size(); ++i) {
    if (!(hx[i] == hy[i])) {
      std::fprintf(stderr, "MISMATCH in %s at sample %zu: %.17g vs %.17g\n", what, i, static_cast<double>(hx[i]),
                   static_cast<double>(hy[i]));
      std::exit(2);
    }
  }
}

// ---- a*b on 2^27 float64 -----------------------------------------------------------------------

struct mul_case {
  spillway::stream s;
  spillway::device_array<double> a, b, out, ref;
  mul_case()
      : a(filled<double>({kMulN}, 1, s)), b(filled<double>({kMulN}, 2, s)), out({kMulN}, s), ref({kMulN}, s) {
    naive_mul_kernel<<<static_cast<unsigned>((kMulN + 255) / 256), 256, 0, s.value()>>>(a.data(), b.data(), ref.data(), kMulN);
    s.synchronize();
  }
};
mul_case& mul_data() {
  static mul_case c;
  return c;
}
constexpr double kMulBytes = 3.0 * kMulN * sizeof(double);

void BM_d2d_copy_roofline(benchmark::State& state) {
  auto& c = mul_data();
  timed(state, "d2d", 2.0 * kMulN * sizeof(double), c.s, [&](spillway::stream_view s) {
    spillway::copy_async(c.out.data(), c.a.data(), static_cast<std::size_t>(kMulN), s);
  });
}

template <int U>
void BM_map_mul(benchmark::State& state) {
  auto& c = mul_data();
  c.out.buffer().fill_bytes_async(0xFF, c.s);
  timed(state, std::string("map_mul_u") + std::to_string(U), kMulBytes, c.s,
        [&](spillway::stream_view s) { spillway::detail::map_into_impl<U>(s, c.out.view(), mul{}, c.a, c.b); });
  expect_same(c.out.data(), c.ref.data(), kMulN, "map a*b", c.s);
}

void BM_map_mul_default(benchmark::State& state) {
  auto& c = mul_data();
  c.out.buffer().fill_bytes_async(0xFF, c.s);
  timed(state, "map_mul", kMulBytes, c.s, [&](spillway::stream_view s) {
    spillway::map_into_async(s, c.out.view(), mul{}, c.a, c.b);
  });
  expect_same(c.out.data(), c.ref.data(), kMulN, "map a*b", c.s);
}

void BM_thrust_transform_mul(benchmark::State& state) {
  auto& c = mul_data();
  c.out.buffer().fill_bytes_async(0xFF, c.s);
  timed(state, "thrust_mul", kMulBytes, c.s, [&](spillway::stream_view s) {
    thrust::transform(thrust::cuda::par_nosync.on(s.value()), c.a.data(), c.a.data() + kMulN, c.b.data(),
                      c.out.data(), thrust::multiplies<double>());
  });
  expect_same(c.out.data(), c.ref.data(), kMulN, "thrust a*b", c.s);
}

void BM_naive_mul(benchmark::State& state) {
  auto& c = mul_data();
  c.out.buffer().fill_bytes_async(0xFF, c.s);
  timed(state, "naive_mul", kMulBytes, c.s, [&](spillway::stream_view s) {
    naive_mul_kernel<<<static_cast<unsigned>((kMulN + 255) / 256), 256, 0, s.value()>>>(c.a.data(), c.b.data(),
                                                                                       c.out.data(), kMulN);
  });
  expect_same(c.out.data(), c.ref.data(), kMulN, "naive a*b", c.s);
}

// ---- broadcast (k*100, 4000, 5) ⊙ (4000, 5) float64 -----------------------------------------------

template <int U, bool E2E = false>
void BM_broadcast(benchmark::State& state) {
  const index_t outer = state.range(0);
  spillway::stream s;
  auto big = filled<double>({outer, 4000, 5}, 3, s);
  auto small = filled<double>({4000, 5}, 4, s);
  auto out = spillway::device_array<double>({outer, 4000, 5}, s);
  out.buffer().fill_bytes_async(0xFF, s);
  const double bytes = static_cast<double>((2 * big.size() + small.size()) * sizeof(double));
  timed(state,
        std::string("broadcast_u") + std::to_string(U) + "_" + std::to_string(outer * 20000) +
            (E2E ? "_e2e" : ""),
        bytes, s, [&](spillway::stream_view st) { spillway::detail::map_into_impl<U>(st, out.view(), mul{}, small, big); },
        E2E ? sample::e2e : sample::gpu);
  // Check the last rows against a naive computation of the same product.
  auto ref = spillway::device_array<double>({outer, 4000, 5}, s);
  std::vector<double> hs(20000), hb(20000), ho(20000);
  const index_t last = (outer - 1) * 20000;
  SPILLWAY_CUDA_TRY(cudaMemcpyAsync(hs.data(), small.data(), 20000 * 8, cudaMemcpyDeviceToHost, s.value()));
  SPILLWAY_CUDA_TRY(cudaMemcpyAsync(hb.data(), big.data() + last, 20000 * 8, cudaMemcpyDeviceToHost, s.value()));
  SPILLWAY_CUDA_TRY(cudaMemcpyAsync(ho.data(), out.data() + last, 20000 * 8, cudaMemcpyDeviceToHost, s.value()));
  s.synchronize();
  for (int i = 0; i < 20000; ++i) {
    if (ho[static_cast<std::size_t>(i)] != hs[static_cast<std::size_t>(i)] * hb[static_cast<std::size_t>(i)]) {
      std::fprintf(stderr, "MISMATCH in broadcast at %d\n", i);
      std::exit(2);
    }
  }
}

/// a*b and the D2D copy on `elements` contiguous float64: the same-size references for the
/// broadcast case (whose small operand adds under 1% of the bytes).
void BM_same_size_refs(benchmark::State& state) {
  const index_t n = state.range(0);
  spillway::stream s;
  auto a = filled<double>({n}, 7, s);
  auto b = filled<double>({n}, 8, s);
  auto out = spillway::device_array<double>({n}, s);
  const bool copy = state.range(1) != 0;
  const bool e2e = state.range(2) != 0;  // the *_e2e rows: host enqueue work counted too
  timed(state, (copy ? "d2d_" : "map_mul_") + std::to_string(n) + (e2e ? "_e2e" : ""),
        (copy ? 2.0 : 3.0) * static_cast<double>(n) * 8, s,
        [&](spillway::stream_view st) {
          if (copy) {
            spillway::copy_async(out.data(), a.data(), static_cast<std::size_t>(n), st);
          } else {
            spillway::map_into_async(st, out.view(), mul{}, a, b);
          }
        },
        e2e ? sample::e2e : sample::gpu);
}

// ---- gufunc per-row dot (1e6, 64) float32 ------------------------------------------------------

struct dot_fn {
  __host__ __device__ void operator()(spillway::gufunc_team t, spillway::ndview<const float> a,
                                      spillway::ndview<const float> b, spillway::ndview<float> out) const {
    float acc = 0;
    for (index_t i = t.rank(); i < a.extent(0); i += t.size()) acc += a(i) * b(i);
    acc = t.sum(acc);
    if (t.leader()) out() = acc;
  }
};

/// range(0): the team size (0 = automatic: the staged shared-memory path for these dense rows,
/// one slot per team; -1 = automatic team on the direct path, staging off; >0 = that team on the
/// direct path; -2 = the staged path forced to two slots per team; -5 = the
/// default, timed end to end: the host work of the call counted too).
void BM_gufunc_dot(benchmark::State& state) {
  const int arg = static_cast<int>(state.range(0));
  const int team = arg < 0 ? 0 : arg;
  const bool staged = arg >= 0 || arg <= -2;
  const index_t rows = 1000000, n = 64;
  spillway::stream s;
  auto a = filled<float>({rows, n}, 5, s);
  auto b = filled<float>({rows, n}, 6, s);
  auto out = spillway::device_array<float>({rows}, s);
  out.buffer().fill_bytes_async(0xFF, s);
  const double bytes = static_cast<double>((2 * rows * n + rows) * sizeof(float));
  spillway::gufunc_spec spec("(n),(n)->()", team, staged);
  spec.stage_buffers = arg == -2 ? 2 : 0;
  const std::string name = arg == 0    ? "dot_default"
                           : arg == -5 ? "dot_default_e2e"
                           : arg == -1 ? "dot_direct_auto"
                           : arg == -2 ? "dot_staged_two_slots"
                                       : "dot_team" + std::to_string(team);
  timed(state, name, bytes, s,
        [&](spillway::stream_view st) { spillway::gufunc_into_async(st, spec, out.view(), dot_fn{}, a, b); },
        arg == -5 ? sample::e2e : sample::gpu);
  std::vector<float> ha(64 * 4), hb(64 * 4), ho(4);
  SPILLWAY_CUDA_TRY(cudaMemcpyAsync(ha.data(), a.data() + (rows - 4) * n, 4 * n * 4, cudaMemcpyDeviceToHost, s.value()));
  SPILLWAY_CUDA_TRY(cudaMemcpyAsync(hb.data(), b.data() + (rows - 4) * n, 4 * n * 4, cudaMemcpyDeviceToHost, s.value()));
  SPILLWAY_CUDA_TRY(cudaMemcpyAsync(ho.data(), out.data() + rows - 4, 4 * 4, cudaMemcpyDeviceToHost, s.value()));
  s.synchronize();
  for (int r = 0; r < 4; ++r) {
    double ref = 0;
    for (int i = 0; i < 64; ++i) ref += static_cast<double>(ha[static_cast<std::size_t>(r * 64 + i)]) * hb[static_cast<std::size_t>(r * 64 + i)];
    if (std::fabs(ho[static_cast<std::size_t>(r)] - ref) > 1e-4 * std::fabs(ref)) {
      std::fprintf(stderr, "MISMATCH in dot row %d: %g vs %g\n", r, static_cast<double>(ho[static_cast<std::size_t>(r)]), ref);
      std::exit(2);
    }
  }
}

constexpr int kIters = 30;

}  // namespace

BENCHMARK(BM_d2d_copy_roofline)->UseManualTime()->Iterations(kIters)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_map_mul_default)->UseManualTime()->Iterations(kIters)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_map_mul<2>)->UseManualTime()->Iterations(kIters)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_map_mul<8>)->UseManualTime()->Iterations(kIters)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_thrust_transform_mul)->UseManualTime()->Iterations(kIters)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_naive_mul)->UseManualTime()->Iterations(kIters)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_d2d_copy_roofline)->Name("BM_d2d_copy_roofline_again")->UseManualTime()->Iterations(kIters)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_broadcast<spillway::detail::map_unroll>)->Arg(100)->Arg(1000)->Arg(10000)->UseManualTime()->Iterations(kIters)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_broadcast<2>)->Arg(1000)->UseManualTime()->Iterations(kIters)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_broadcast<spillway::detail::map_unroll, true>)->Arg(1000)->UseManualTime()->Iterations(kIters)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_same_size_refs)->Args({20000000, 0, 0})->Args({20000000, 1, 0})->Args({200000000, 0, 0})->Args({200000000, 1, 0})->Args({20000000, 1, 1})->UseManualTime()->Iterations(kIters)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_d2d_copy_roofline)->Name("BM_d2d_copy_roofline_before_dot")->UseManualTime()->Iterations(kIters)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_gufunc_dot)->Arg(0)->Arg(-5)->Arg(-2)->Arg(-1)->Arg(1)->Arg(4)->Arg(8)->Arg(16)->Arg(32)->UseManualTime()->Iterations(kIters)->Unit(benchmark::kMillisecond);

int main(int argc, char** argv) {
  if (spillway::device_count() == 0) {
    std::printf("no GPU here (%s): nothing to measure\n", spillway::no_gpu_reason().c_str());
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  auto& r = results();
  const double d2d = std::max(r["d2d"], 1e-9);
  const double thr = std::max(r["thrust_mul"], 1e-9);
  const double mm = std::max(r["map_mul"], 1e-9);
  std::printf("\nSUMMARY (median GB/s; device %s)\n", spillway::get_device_properties(spillway::current_device()).name.c_str());
  std::printf("  d2d copy roofline            %8.1f\n", d2d);
  std::printf("  map a*b (default)            %8.1f  = %.3fx thrust, %.3fx d2d\n", mm, mm / thr, mm / d2d);
  const double dot = r["dot_default"];
  std::printf("  gufunc row dot (default)     %8.1f  = %.3fx d2d (goal >= 0.80x; %.4f ms)\n", dot, dot / d2d,
              dot > 0 ? (2.0 * 1000000 * 64 + 1000000) * 4 / (dot * 1e9) * 1e3 : 0.0);
  for (const auto& [k, v] : r) {
    if (k == "d2d" || k == "map_mul") continue;
    std::printf("  %-28s %8.1f  = %.3fx map a*b, %.3fx d2d, %.3fx thrust\n", k.c_str(), v, v / mm, v / d2d, v / thr);
  }
  return 0;
}
