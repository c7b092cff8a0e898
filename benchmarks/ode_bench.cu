// ode_bench — the published GPU ensemble benchmark (the DiffEqGPU paper's Lorenz problem):
// 8,388,608 Lorenz systems (sigma 10, beta 8/3, rho spread over [0, 21] by index), u0 = (1, 0, 0),
// t in [0, 1], states resident on the device; the timed region is the integration from the
// initial states to the final ones (CUDA events, medians of the repetitions).
//   rk4_fixed        RK4 at dt = 0.001 (1,000 steps)
//   dopri5_fixed     the Dormand–Prince 5(4) tableau at dt = 0.001, no error control
//   dopri5_adaptive  adaptive Dormand–Prince 5(4), rtol = atol = 1e-6 (float) / 1e-8 (double)
// Counters: accepted and rejected steps per system (read after the timed runs).
#include <spillway/core.hpp>
#include <spillway/ode.cuh>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

namespace so = spillway::ode;

namespace {

constexpr std::uint64_t n_systems = std::uint64_t{1} << 23;  // 8,388,608

template <class Real>
so::systems::lorenz_family<Real> family() {
  return so::systems::lorenz_family<Real>{n_systems, Real(10), Real(8) / Real(3), Real(0), Real(21)};
}

template <class Real>
std::vector<Real> initial() {
  std::vector<Real> y(3 * n_systems, Real(0));
  std::fill(y.begin(), y.begin() + static_cast<std::ptrdiff_t>(n_systems), Real(1));
  return y;
}

template <class Real>
void BM_rk4_fixed(benchmark::State& state) {
  spillway::stream s;
  const auto y0 = initial<Real>();
  spillway::device_buffer<Real> y(y0.size(), s);
  const auto fam = family<Real>();
  auto reset = [&] { y.copy_from_host_async(cuda::std::span<const Real>(y0.data(), y0.size()), s); };
  reset();
  so::rk4_ensemble_async(fam, Real(0), Real(0.001), 1000, 0, y.span(), cuda::std::span<Real>{}, s);
  for (auto _ : state) {
    reset();
    spillway::event_timer t(s);
    so::rk4_ensemble_async(fam, Real(0), Real(0.001), 1000, 0, y.span(), cuda::std::span<Real>{}, s);
    state.SetIterationTime(static_cast<double>(t.stop()) * 1e-3);
  }
  state.counters["accepted_per_system"] = 1000;
}

template <class Real>
void run_dopri5(benchmark::State& state, const so::adaptive_options& o) {
  spillway::stream s;
  const auto y0 = initial<Real>();
  spillway::device_buffer<Real> y(y0.size(), s);
  spillway::device_buffer<std::uint32_t> acc(n_systems, s), rej(n_systems, s);
  spillway::device_buffer<std::uint8_t> st(n_systems, s);
  const so::ensemble_outputs<Real> out{{}, {}, acc.span(), rej.span(), st.span()};
  const auto fam = family<Real>();
  auto reset = [&] { y.copy_from_host_async(cuda::std::span<const Real>(y0.data(), y0.size()), s); };
  reset();
  so::dopri5_ensemble_async(fam, Real(0), Real(1), o, y.span(), out, s);
  for (auto _ : state) {
    reset();
    spillway::event_timer t(s);
    so::dopri5_ensemble_async(fam, Real(0), Real(1), o, y.span(), out, s);
    state.SetIterationTime(static_cast<double>(t.stop()) * 1e-3);
  }
  std::vector<std::uint32_t> a(n_systems), r(n_systems);
  std::vector<std::uint8_t> v(n_systems);
  acc.copy_to_host_async({a.data(), a.size()}, s);
  rej.copy_to_host_async({r.data(), r.size()}, s);
  st.copy_to_host_async({v.data(), v.size()}, s);
  s.synchronize();
  const auto n = static_cast<double>(n_systems);
  state.counters["accepted_per_system"] =
      static_cast<double>(std::accumulate(a.begin(), a.end(), std::uint64_t{0})) / n;
  state.counters["rejected_per_system"] =
      static_cast<double>(std::accumulate(r.begin(), r.end(), std::uint64_t{0})) / n;
  state.counters["not_success"] =
      static_cast<double>(std::count_if(v.begin(), v.end(), [](std::uint8_t x) { return x != 0; }));
}

template <class Real>
void BM_dopri5_fixed(benchmark::State& state) {
  so::adaptive_options o;
  o.fixed_dt = 0.001;
  run_dopri5<Real>(state, o);
}

template <class Real>
void BM_dopri5_adaptive(benchmark::State& state) {
  so::adaptive_options o;
  o.rtol = o.atol = sizeof(Real) == 4 ? 1e-6 : 1e-8;
  run_dopri5<Real>(state, o);
}

// diffrax's convention (Shampine's error estimate, the plain controller): its steps against
// diffrax's Dopri5 at the same tolerances (benchmarks/ode_diffrax_baseline.py).
template <class Real>
void BM_dopri5_adaptive_shampine_plain(benchmark::State& state) {
  so::adaptive_options o;
  o.rtol = o.atol = sizeof(Real) == 4 ? 1e-6 : 1e-8;
  o.estimate = so::dp5_error_estimate::shampine;
  o.beta = 0;
  run_dopri5<Real>(state, o);
}

}  // namespace

BENCHMARK(BM_rk4_fixed<float>)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5);
BENCHMARK(BM_dopri5_fixed<float>)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5);
BENCHMARK(BM_dopri5_adaptive<float>)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5);
BENCHMARK(BM_dopri5_adaptive<double>)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5);
BENCHMARK(BM_dopri5_adaptive_shampine_plain<float>)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);
BENCHMARK(BM_dopri5_adaptive_shampine_plain<double>)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);
BENCHMARK_MAIN();
