// RK4 benchmarks.
//
// The mean-field two-field system (F, G: N x N complex64, delta <- mean(F) after every step,
// dt = 1e-4, delta0 = 1, F0 and G0 random with |.| <= 1e-3 from a printed seed), per-step time of:
//   fused        spillway::ode::rk4_integrate_coupled_async: one kernel per step, the four stages
//                in registers, the reduction of F fused in (block partials + last-block finish),
//                delta(t) kept in a device array; blocks of steps replayed from a CUDA graph.
//   baseline_b   the user's best route: ping-pong device buffers, one kernel per field (each
//                computing all four stages for its field) reading delta from a full N x N device
//                array, a CUB sum of F, a kernel broadcasting the new delta into that array, and one
//                8-byte device-to-host copy of delta per step.
//   baseline_a   the user's first route: the same two kernels, then F and G copied to pageable host
//                memory, delta summed on the host and passed back to the next step's kernels.
//   adaptive     spillway::ode::dopri5_integrate_coupled_async at rtol = atol = 1e-6 over t in [0, T]:
//                time per accepted step (the whole integration over the accepted steps).
// Ensemble: 10^6 Lorenz systems x 1000 steps (dt = 0.001, rho over [20, 30], saving every 100) in
// system-steps/s, against a per-step launch with the state in global memory.
#include <spillway/core.hpp>
#include <spillway/ode.cuh>

#include <benchmark/benchmark.h>
#include <cub/device/device_reduce.cuh>
#include <cuda/std/functional>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

namespace so = spillway::ode;
using cf = cuda::std::complex<float>;

namespace {

constexpr double dt = 1e-4;
constexpr std::uint64_t seed = 20261121;

struct fields {
  std::size_t n;
  std::vector<cf> F, G;
};

const fields& initial(std::size_t side) {
  static fields cache[2];
  fields& f = cache[side == 512 ? 0 : 1];
  if (f.n != side * side) {
    f.n = side * side;
    std::mt19937_64 rng(seed + side);
    std::uniform_real_distribution<float> u(-7e-4f, 7e-4f);  // |.| <= 0.99e-3
    f.F.resize(f.n);
    f.G.resize(f.n);
    for (auto& e : f.F) e = cf(u(rng), u(rng));
    for (auto& e : f.G) e = cf(u(rng), u(rng));
  }
  return f;
}

struct device_fields {
  spillway::device_buffer<cf> F, G;
  device_fields(const fields& f, spillway::stream_view s) : F(f.n, s), G(f.n, s) {
    F.copy_from_host_async(cuda::std::span<const cf>(f.F.data(), f.n), s);
    G.copy_from_host_async(cuda::std::span<const cf>(f.G.data(), f.n), s);
  }
};

// ---- baselines: one kernel per field, each computing all four stages for its field -------------
template <bool WriteF>
__global__ void field_kernel_scalar(const cf* F, const cf* G, cf delta, cf* out, std::uint64_t n) {
  const std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  cf f = F[i], g = G[i];
  so::rk4_step_values(so::systems::mean_field_rhs{}, 0.0, dt, delta, f, g);
  out[i] = WriteF ? f : g;
}

template <bool WriteF>
__global__ void field_kernel_array(const cf* F, const cf* G, const cf* delta, cf* out, std::uint64_t n) {
  const std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  cf f = F[i], g = G[i];
  so::rk4_step_values(so::systems::mean_field_rhs{}, 0.0, dt, delta[i], f, g);
  out[i] = WriteF ? f : g;
}

__global__ void broadcast_kernel(const cf* sum, float scale, cf* delta, std::uint64_t n) {
  const std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const cf s = *sum;
  delta[i] = cf(s.real() * scale, s.imag() * scale);
}

unsigned blocks_for(std::uint64_t n) { return static_cast<unsigned>((n + 255) / 256); }

// Route (b). Returns delta after each step in `history` when given.
struct baseline_b {
  std::uint64_t n;
  spillway::device_buffer<cf> F2, G2, delta, sum;
  spillway::device_buffer<unsigned char> temp;
  std::size_t temp_bytes = 0;
  cf host_delta{1, 0};

  baseline_b(std::uint64_t n_, spillway::stream_view s) : n(n_), F2(n_, s), G2(n_, s), delta(n_, s), sum(1, s) {
    cub::DeviceReduce::Reduce(nullptr, temp_bytes, F2.data(), sum.data(), static_cast<int>(n), cuda::std::plus<cf>{}, cf(0, 0), s.value());
    temp = spillway::device_buffer<unsigned char>(temp_bytes, s);
    const std::vector<cf> ones(n, cf(1, 0));
    delta.copy_from_host_async(cuda::std::span<const cf>(ones.data(), n), s);
  }
  void steps(device_fields& d, std::uint64_t count, spillway::stream_view s, std::vector<cf>* history = nullptr) {
    const float scale = 1.0f / static_cast<float>(n);
    for (std::uint64_t k = 0; k < count; ++k) {
      field_kernel_array<true><<<blocks_for(n), 256, 0, s.value()>>>(d.F.data(), d.G.data(), delta.data(), F2.data(), n);
      field_kernel_array<false><<<blocks_for(n), 256, 0, s.value()>>>(d.F.data(), d.G.data(), delta.data(), G2.data(), n);
      std::swap(d.F, F2);
      std::swap(d.G, G2);
      cub::DeviceReduce::Reduce(temp.data(), temp_bytes, d.F.data(), sum.data(), static_cast<int>(n), cuda::std::plus<cf>{}, cf(0, 0),
                                s.value());
      broadcast_kernel<<<blocks_for(n), 256, 0, s.value()>>>(sum.data(), scale, delta.data(), n);
      SPILLWAY_CHECK_LAUNCH();
      cf host_sum;
      SPILLWAY_CUDA_TRY(cudaMemcpyAsync(&host_sum, sum.data(), sizeof(cf), cudaMemcpyDeviceToHost, s.value()));
      s.synchronize();
      host_delta = cf(host_sum.real() * scale, host_sum.imag() * scale);
      if (history != nullptr) history->push_back(host_delta);
    }
  }
};

// Route (a).
struct baseline_a {
  std::uint64_t n;
  spillway::device_buffer<cf> F2, G2;
  std::vector<cf> hF, hG;
  cf delta{1, 0};
  baseline_a(std::uint64_t n_, spillway::stream_view s) : n(n_), F2(n_, s), G2(n_, s), hF(n_), hG(n_) {}
  void steps(device_fields& d, std::uint64_t count, spillway::stream_view s) {
    for (std::uint64_t k = 0; k < count; ++k) {
      field_kernel_scalar<true><<<blocks_for(n), 256, 0, s.value()>>>(d.F.data(), d.G.data(), delta, F2.data(), n);
      field_kernel_scalar<false><<<blocks_for(n), 256, 0, s.value()>>>(d.F.data(), d.G.data(), delta, G2.data(), n);
      SPILLWAY_CHECK_LAUNCH();
      std::swap(d.F, F2);
      std::swap(d.G, G2);
      d.F.copy_to_host_async(cuda::std::span<cf>(hF.data(), n), s);
      d.G.copy_to_host_async(cuda::std::span<cf>(hG.data(), n), s);
      s.synchronize();
      double re = 0, im = 0;
      for (const cf& v : hF) {
        re += v.real();
        im += v.imag();
      }
      delta = cf(static_cast<float>(re / static_cast<double>(n)), static_cast<float>(im / static_cast<double>(n)));
    }
  }
};

void set_step_counters(benchmark::State& state, std::uint64_t n) {
  // Each step reads and writes F and G once: 32 bytes per element (the bandwidth floor's traffic).
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(32 * n));
  state.counters["steps_per_s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["N"] = static_cast<double>(static_cast<std::uint64_t>(std::llround(std::sqrt(static_cast<double>(n)))));
}

// Iteration time = per-step time, from CUDA events around a block of `per` steps.
void BM_coupled_fused(benchmark::State& state) {
  const std::size_t side = static_cast<std::size_t>(state.range(0));
  const std::uint64_t per = side >= 4096 ? 200 : 1000;
  spillway::stream s;
  device_fields d(initial(side), s);
  const std::uint64_t n = side * side;
  spillway::device_buffer<cf> traj(per + 1, s);
  so::rk4_options opt;
  opt.graph_steps = static_cast<unsigned>(state.range(1));
  const so::systems::mean_field_coupling<float> coupling{1.0 / static_cast<double>(n)};
  auto run = [&] {
    so::rk4_integrate_coupled_async(so::systems::mean_field_rhs{}, coupling, cf(1, 0), 0.0, dt, per,
                                    so::make_state_view(n, d.F.data(), d.G.data()), traj.span(), s, opt);
  };
  run();
  s.synchronize();
  for (auto _ : state) {
    spillway::event_timer t(s);
    run();
    state.SetIterationTime(static_cast<double>(t.stop()) * 1e-3 / static_cast<double>(per));
  }
  set_step_counters(state, n);
  state.counters["graph_steps"] = static_cast<double>(opt.graph_steps);
}

// The same system, adaptive (dopri5_integrate_coupled_async, rtol = atol = 1e-6, t in [0, T] with
// T = range(1), delta0 = 1): iteration time = the whole integration (start-step estimate, attempts under the
// graph's while node, the last copy) divided by the accepted steps; each iteration starts from the
// same initial fields (copied outside the timed region).
void BM_coupled_adaptive(benchmark::State& state) {
  const std::size_t side = static_cast<std::size_t>(state.range(0));
  const auto t1 = static_cast<double>(state.range(1));
  spillway::stream s;
  const fields& f0 = initial(side);
  device_fields start(f0, s), d(f0, s);
  const std::uint64_t n = side * side;
  const so::systems::mean_field_coupling<float> coupling{1.0 / static_cast<double>(n)};
  so::adaptive_options o;
  o.rtol = o.atol = 1e-6;
  spillway::device_buffer<so::coupled_stats> st(1, s);
  so::coupled_stats last{};
  auto run = [&] {
    so::dopri5_integrate_coupled_async(so::systems::mean_field_rhs{}, coupling, cf(1, 0), 0.0, t1, o,
                                       so::make_state_view(n, d.F.data(), d.G.data()), {}, st.data(), s);
  };
  auto reset = [&] {
    spillway::copy_async(d.F.data(), static_cast<const cf*>(start.F.data()), n, s);
    spillway::copy_async(d.G.data(), static_cast<const cf*>(start.G.data()), n, s);
  };
  reset();
  run();
  s.synchronize();
  for (auto _ : state) {
    reset();
    spillway::event_timer t(s);
    run();
    const float ms = t.stop();
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(&last, st.data(), sizeof last, cudaMemcpyDeviceToHost, s.value()));
    s.synchronize();
    state.SetIterationTime(static_cast<double>(ms) * 1e-3 / static_cast<double>(last.accepted));
  }
  set_step_counters(state, n);
  state.counters["accepted"] = static_cast<double>(last.accepted);
  state.counters["rejected"] = static_cast<double>(last.rejected);
}

void BM_coupled_baseline_b(benchmark::State& state) {
  const std::size_t side = static_cast<std::size_t>(state.range(0));
  const std::uint64_t per = side >= 4096 ? 20 : 200;
  spillway::stream s;
  device_fields d(initial(side), s);
  baseline_b b(side * side, s);
  b.steps(d, 2, s);
  for (auto _ : state) {
    spillway::event_timer t(s);
    b.steps(d, per, s);
    state.SetIterationTime(static_cast<double>(t.stop()) * 1e-3 / static_cast<double>(per));
  }
  set_step_counters(state, side * side);
}

void BM_coupled_baseline_a(benchmark::State& state) {
  const std::size_t side = static_cast<std::size_t>(state.range(0));
  const std::uint64_t per = side >= 4096 ? 2 : 10;
  spillway::stream s;
  device_fields d(initial(side), s);
  baseline_a a(side * side, s);
  a.steps(d, 1, s);
  for (auto _ : state) {
    spillway::event_timer t(s);
    a.steps(d, per, s);
    state.SetIterationTime(static_cast<double>(t.stop()) * 1e-3 / static_cast<double>(per));
  }
  set_step_counters(state, side * side);
}

// The bandwidth floor measured here: copying F and G device-to-device (the same bytes a fused step
// reads and writes).
void BM_copy_floor(benchmark::State& state) {
  const std::size_t side = static_cast<std::size_t>(state.range(0));
  const std::uint64_t n = side * side;
  spillway::stream s;
  device_fields d(initial(side), s);
  spillway::device_buffer<cf> F2(n, s), G2(n, s);
  const int per = 20;
  auto run = [&] {
    for (int k = 0; k < per; ++k) {
      spillway::copy_async(F2.data(), d.F.data(), n, s);
      spillway::copy_async(G2.data(), d.G.data(), n, s);
    }
  };
  run();
  for (auto _ : state) {
    spillway::event_timer t(s);
    run();
    state.SetIterationTime(static_cast<double>(t.stop()) * 1e-3 / per);
  }
  set_step_counters(state, n);
}

// ---- ensemble -------------------------------------------------------------------------------------
constexpr std::uint64_t ens_n = 1000000, ens_steps = 1000, ens_every = 100;

template <class Real>
std::vector<Real> lorenz_initial() {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-10, 10);
  std::vector<Real> y(3 * ens_n);
  for (std::uint64_t i = 0; i < ens_n; ++i) {
    y[i] = static_cast<Real>(u(rng));
    y[ens_n + i] = static_cast<Real>(u(rng));
    y[2 * ens_n + i] = static_cast<Real>(25 + u(rng));
  }
  return y;
}

template <class Real>
void BM_ensemble_lorenz(benchmark::State& state) {
  spillway::stream s;
  const auto y0 = lorenz_initial<Real>();
  spillway::device_buffer<Real> y(y0.size(), s), saved(ens_steps / ens_every * 3 * ens_n, s);
  so::systems::lorenz_family<Real> fam;
  fam.count = ens_n;
  auto reset = [&] { y.copy_from_host_async(cuda::std::span<const Real>(y0.data(), y0.size()), s); };
  reset();
  so::rk4_ensemble_async(fam, Real(0), Real(0.001), ens_steps, ens_every, y.span(), saved.span(), s);
  for (auto _ : state) {
    reset();
    spillway::event_timer t(s);
    so::rk4_ensemble_async(fam, Real(0), Real(0.001), ens_steps, ens_every, y.span(), saved.span(), s);
    state.SetIterationTime(static_cast<double>(t.stop()) * 1e-3);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>((2 * 3 + ens_steps / ens_every * 3) * ens_n * sizeof(Real)));
  state.counters["system_steps_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * static_cast<double>(ens_n * ens_steps), benchmark::Counter::kIsRate);
}

// The per-step route: one launch per step, the state read from and written to global memory.
template <class Real>
__global__ void lorenz_one_step(so::systems::lorenz_family<Real> fam, Real t, Real h, Real* y, std::uint64_t n) {
  const std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  cuda::std::array<Real, 3> v{y[i], y[n + i], y[2 * n + i]};
  so::rk4_step_array(fam(i), t, h, v);
  y[i] = v[0];
  y[n + i] = v[1];
  y[2 * n + i] = v[2];
}

void BM_ensemble_lorenz_per_step_launch(benchmark::State& state) {
  using Real = float;
  spillway::stream s;
  const auto y0 = lorenz_initial<Real>();
  spillway::device_buffer<Real> y(y0.size(), s), saved(ens_steps / ens_every * 3 * ens_n, s);
  so::systems::lorenz_family<Real> fam;
  fam.count = ens_n;
  auto run = [&] {
    for (std::uint64_t k = 0; k < ens_steps; ++k) {
      lorenz_one_step<Real><<<blocks_for(ens_n), 256, 0, s.value()>>>(fam, static_cast<Real>(k) * 0.001f, 0.001f, y.data(), ens_n);
      if ((k + 1) % ens_every == 0) {
        spillway::copy_async(saved.data() + ((k + 1) / ens_every - 1) * 3 * ens_n, y.data(), 3 * ens_n, s);
      }
    }
    SPILLWAY_CHECK_LAUNCH();
  };
  y.copy_from_host_async(cuda::std::span<const Real>(y0.data(), y0.size()), s);
  run();
  for (auto _ : state) {
    y.copy_from_host_async(cuda::std::span<const Real>(y0.data(), y0.size()), s);
    spillway::event_timer t(s);
    run();
    state.SetIterationTime(static_cast<double>(t.stop()) * 1e-3);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(2 * 3 * ens_n * sizeof(Real) * ens_steps));
  state.counters["system_steps_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * static_cast<double>(ens_n * ens_steps), benchmark::Counter::kIsRate);
}

// Same inputs through the fused route and route (b): their delta(t) must agree (float rounding).
bool cross_check() {
  const std::size_t side = 512;
  const std::uint64_t n = side * side, steps = 50;
  spillway::stream s;
  device_fields a(initial(side), s), b(initial(side), s);
  spillway::device_buffer<cf> traj(steps + 1, s);
  so::rk4_integrate_coupled_async(so::systems::mean_field_rhs{}, so::systems::mean_field_coupling<float>{1.0 / static_cast<double>(n)},
                                  cf(1, 0), 0.0, dt, steps, so::make_state_view(n, a.F.data(), a.G.data()), traj.span(), s);
  std::vector<cf> fused(steps + 1), ref;
  traj.copy_to_host_async(cuda::std::span<cf>(fused.data(), fused.size()), s);
  baseline_b base(n, s);
  base.steps(b, steps, s, &ref);
  double worst = 0, scale = 0;
  for (std::uint64_t k = 0; k < steps; ++k) {
    const cf d = fused[k + 1] - ref[k];
    worst = std::max(worst, static_cast<double>(std::hypot(d.real(), d.imag())));
    scale = std::max(scale, static_cast<double>(std::hypot(ref[k].real(), ref[k].imag())));
  }
  const double rel = worst / scale;
  std::printf("cross-check N=512, %llu steps: max |delta_fused - delta_b| / max |delta| = %.3e (seed %llu)\n",
              static_cast<unsigned long long>(steps), rel, static_cast<unsigned long long>(seed));
  return rel < 1e-4;
}

}  // namespace

// Coupled benchmarks: iteration time is the per-step time of a block of steps, so the iteration
// count is fixed (a minimum time would multiply the blocks).
BENCHMARK(BM_coupled_fused)->Args({512, 32})->Args({512, 0})->Args({4096, 32})->Args({4096, 0})->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(10);
BENCHMARK(BM_coupled_adaptive)
    ->Args({512, 10})
    ->Args({4096, 1})
    ->Args({4096, 10})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(10);
BENCHMARK(BM_copy_floor)->Arg(4096)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(10);
BENCHMARK(BM_coupled_baseline_b)->Arg(512)->Arg(4096)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(10);
BENCHMARK(BM_coupled_baseline_a)->Arg(512)->Arg(4096)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_ensemble_lorenz<float>)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(20);
BENCHMARK(BM_ensemble_lorenz<double>)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(10);
BENCHMARK(BM_ensemble_lorenz_per_step_launch)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(10);

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (spillway::device_count() == 0) {
    std::printf("spillway_rk4_bench: no GPU here (%s); nothing to measure\n", spillway::no_gpu_reason().c_str());
    return 0;
  }
  std::printf("inputs: F0, G0 uniform complex in [-7e-4, 7e-4]^2 (seed %llu + N), delta0 = 1, dt = 1e-4\n",
              static_cast<unsigned long long>(seed));
  if (!cross_check()) {
    std::printf("cross-check FAILED\n");
    return 1;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
