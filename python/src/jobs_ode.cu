// python/src/jobs_ode.cu — the ODE entry points of the Python binding: the Lorenz ensemble by RK4
// and by adaptive Dormand–Prince 5(4) (float32 and float64) and the mean-field coupled system
// (complex64), on the device or with the host implementation. Its own translation unit, so it
// compiles beside jobs.cu.
#include "jobs.hpp"

#include <spillway/core/device.hpp>
#include <spillway/core/device_buffer.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/ode.cuh>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace spillway::python {
namespace {

namespace so = spillway::ode;
using cf = cuda::std::complex<float>;

cudaStream_t as_stream(std::uintptr_t h) { return h == 0 ? cudaStreamLegacy : reinterpret_cast<cudaStream_t>(h); }

/// The Lorenz family of a request (lorenz_request, dopri5_request: n, sigma, beta, rho_lo, rho_hi).
template <class Real, class Request>
so::systems::lorenz_family<Real> family_of(const Request& r) {
  so::systems::lorenz_family<Real> f;
  f.count = r.n;
  f.sigma = static_cast<Real>(r.sigma);
  f.beta = static_cast<Real>(r.beta);
  f.rho_lo = static_cast<Real>(r.rho_lo);
  f.rho_hi = static_cast<Real>(r.rho_hi);
  return f;
}

std::uint64_t saves_of(const lorenz_request& r) { return r.save_every > 0 ? r.steps / r.save_every : 0; }

template <class Real>
void lorenz_on_device(const lorenz_request& r, Real* state, Real* saved, stream_view s) {
  const std::uint64_t ns = saves_of(r) * 3 * r.n;
  so::rk4_ensemble_async(family_of<Real>(r), static_cast<Real>(r.t0), static_cast<Real>(r.dt), r.steps,
                         saved != nullptr ? r.save_every : 0, cuda::std::span<Real>(state, 3 * r.n),
                         saved != nullptr ? cuda::std::span<Real>(saved, ns) : cuda::std::span<Real>(), s);
}

template <class Real>
void lorenz_host_typed(const lorenz_request& r, Real* state, Real* saved, bool on_host, int device) {
  const std::size_t nstate = static_cast<std::size_t>(3 * r.n);
  const std::size_t nsaved = saved != nullptr ? static_cast<std::size_t>(saves_of(r) * 3 * r.n) : 0;
  if (on_host) {
    std::vector<Real> y(state, state + nstate), out;
    so::host::rk4_ensemble(family_of<Real>(r), static_cast<Real>(r.t0), static_cast<Real>(r.dt), r.steps, r.save_every, y,
                           saved != nullptr ? &out : nullptr);
    std::memcpy(state, y.data(), nstate * sizeof(Real));
    if (saved != nullptr && nsaved > 0) std::memcpy(saved, out.data(), nsaved * sizeof(Real));
    return;
  }
  device_guard g(device);
  stream s(device);
  device_buffer<Real> dy(nstate, s.view()), ds(nsaved, s.view());
  SPILLWAY_CUDA_TRY(cudaMemcpyAsync(dy.data(), state, nstate * sizeof(Real), cudaMemcpyHostToDevice, s.value()));
  lorenz_on_device<Real>(r, dy.data(), saved != nullptr ? ds.data() : nullptr, s.view());
  SPILLWAY_CUDA_TRY(cudaMemcpyAsync(state, dy.data(), nstate * sizeof(Real), cudaMemcpyDeviceToHost, s.value()));
  if (nsaved > 0)
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(saved, ds.data(), nsaved * sizeof(Real), cudaMemcpyDeviceToHost, s.value()));
  s.synchronize();
}

so::adaptive_options options_of(const dopri5_request& r) {
  so::adaptive_options o;
  o.rtol = r.rtol;
  o.atol = r.atol;
  o.h0 = r.h0;
  o.h_min = r.h_min;
  o.h_max = r.h_max;
  o.max_steps = r.max_steps;
  o.fixed_dt = r.fixed_dt;
  o.safety = r.safety;
  o.fac_min = r.fac_min;
  o.fac_max = r.fac_max;
  o.beta = r.pi_beta;
  o.estimate = static_cast<so::dp5_error_estimate>(r.estimate);  // checked by check_adaptive
  return o;
}

/// The outputs as spans of n systems (m saves); null pointers give empty spans.
template <class Real>
so::ensemble_outputs<Real> outputs_of(const dopri5_request& r, const Real* times, Real* saved, std::uint32_t* acc,
                                      std::uint32_t* rej, std::uint8_t* st) {
  const auto n = static_cast<std::size_t>(r.n), m = static_cast<std::size_t>(r.m);
  so::ensemble_outputs<Real> out;
  if (m > 0) out.save_times = cuda::std::span<const Real>(times, m);
  if (saved != nullptr) out.saved = cuda::std::span<Real>(saved, m * 3 * n);
  if (acc != nullptr) out.accepted = cuda::std::span<std::uint32_t>(acc, n);
  if (rej != nullptr) out.rejected = cuda::std::span<std::uint32_t>(rej, n);
  if (st != nullptr) out.status = cuda::std::span<std::uint8_t>(st, n);
  return out;
}

/// On device memory: the save times (host) copied to the device on `s` first.
template <class Real>
void dopri5_on_device(const dopri5_request& r, Real* state, const Real* host_times, Real* saved, std::uint32_t* acc,
                      std::uint32_t* rej, std::uint8_t* st, stream_view s) {
  device_buffer<Real> times(static_cast<std::size_t>(r.m), s);
  if (r.m > 0) {
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(times.data(), host_times, static_cast<std::size_t>(r.m) * sizeof(Real),
                                      cudaMemcpyHostToDevice, s.value()));
  }
  so::dopri5_ensemble_async(family_of<Real>(r), static_cast<Real>(r.t0), static_cast<Real>(r.t1), options_of(r),
                            cuda::std::span<Real>(state, static_cast<std::size_t>(3 * r.n)),
                            outputs_of<Real>(r, times.data(), saved, acc, rej, st), s);
}

template <class Real>
void dopri5_host_typed(const dopri5_request& r, Real* state, const Real* times, Real* saved, std::uint32_t* acc,
                       std::uint32_t* rej, std::uint8_t* st, bool on_host, int device) {
  const auto n = static_cast<std::size_t>(r.n), m = static_cast<std::size_t>(r.m);
  if (on_host) {
    std::vector<Real> y(state, state + 3 * n);
    so::host::dopri5_ensemble(family_of<Real>(r), static_cast<Real>(r.t0), static_cast<Real>(r.t1), options_of(r), y,
                              outputs_of<Real>(r, times, saved, acc, rej, st));
    std::memcpy(state, y.data(), 3 * n * sizeof(Real));
    return;
  }
  device_guard g(device);
  stream s(device);
  device_buffer<Real> dy(3 * n, s.view()), ds(saved != nullptr ? m * 3 * n : 0u, s.view());
  device_buffer<std::uint32_t> da(n, s.view()), dr(n, s.view());
  device_buffer<std::uint8_t> dst(n, s.view());
  SPILLWAY_CUDA_TRY(cudaMemcpyAsync(dy.data(), state, 3 * n * sizeof(Real), cudaMemcpyHostToDevice, s.value()));
  dopri5_on_device<Real>(r, dy.data(), times, saved != nullptr ? ds.data() : nullptr, da.data(), dr.data(), dst.data(),
                         s.view());
  const auto back = [&](void* dst_host, const void* src, std::size_t bytes) {
    if (dst_host != nullptr && bytes > 0)
      SPILLWAY_CUDA_TRY(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, s.value()));
  };
  back(state, dy.data(), 3 * n * sizeof(Real));
  back(saved, ds.data(), saved != nullptr ? m * 3 * n * sizeof(Real) : 0u);
  back(acc, da.data(), n * sizeof(std::uint32_t));
  back(rej, dr.data(), n * sizeof(std::uint32_t));
  back(st, dst.data(), n);
  s.synchronize();
}

so::systems::mean_field_coupling<float> coupling_of(const mean_field_request& r) {
  return so::systems::mean_field_coupling<float>(r.scale);
}

coupled_result result_of(const so::coupled_stats& st) {
  coupled_result r;
  r.accepted = st.accepted;
  r.rejected = st.rejected;
  r.status = static_cast<int>(st.status);
  r.t = st.t;
  r.h = st.h;
  return r;
}

/// Enqueues the integration on `s` and waits for it (the statistics come back to the host).
coupled_result mean_field_dopri5_on_device(const mean_field_dopri5_request& r, cf* f, cf* g, double* times, cf* deltas,
                                           stream_view s) {
  const auto& c = r.control;
  device_buffer<so::coupled_stats> st(1, s);
  const auto cap = static_cast<std::size_t>(r.capacity);
  so::coupled_observer<cf> obs{times != nullptr ? cuda::std::span<double>(times, cap) : cuda::std::span<double>(),
                               deltas != nullptr ? cuda::std::span<cf>(deltas, cap) : cuda::std::span<cf>()};
  so::dopri5_integrate_coupled_async(so::systems::mean_field_rhs{}, so::systems::mean_field_coupling<float>(r.scale),
                                     cf(r.delta_re, r.delta_im), c.t0, c.t1, options_of(c),
                                     so::make_state_view(c.n, f, g), obs, st.data(), s);
  so::coupled_stats out;
  SPILLWAY_CUDA_TRY(cudaMemcpyAsync(&out, st.data(), sizeof out, cudaMemcpyDeviceToHost, s.value()));
  s.synchronize();
  return result_of(out);
}

void mean_field_on_device(const mean_field_request& r, cf* f, cf* g, cf* traj, stream_view s) {
  so::rk4_integrate_coupled_async(so::systems::mean_field_rhs{}, coupling_of(r), cf(r.delta_re, r.delta_im), r.t0, r.dt,
                                  r.steps, so::make_state_view(r.n, f, g), cuda::std::span<cf>(traj, r.steps + 1), s);
}

}  // namespace

void lorenz_device(const lorenz_request& r, std::uintptr_t state, std::uintptr_t saved, int device, std::uintptr_t stream) {
  device_guard g(device);
  const stream_view s(as_stream(stream));
  if (r.dbl) lorenz_on_device<double>(r, reinterpret_cast<double*>(state), reinterpret_cast<double*>(saved), s);
  else lorenz_on_device<float>(r, reinterpret_cast<float*>(state), reinterpret_cast<float*>(saved), s);
}

void lorenz_host(const lorenz_request& r, void* state, void* saved, bool on_host, int device) {
  if (r.dbl) lorenz_host_typed<double>(r, static_cast<double*>(state), static_cast<double*>(saved), on_host, device);
  else lorenz_host_typed<float>(r, static_cast<float*>(state), static_cast<float*>(saved), on_host, device);
}

void dopri5_lorenz_device(const dopri5_request& r, std::uintptr_t state, const void* save_times, std::uintptr_t saved,
                          std::uintptr_t accepted, std::uintptr_t rejected, std::uintptr_t status, int device,
                          std::uintptr_t stream) {
  device_guard g(device);
  const stream_view s(as_stream(stream));
  auto* acc = reinterpret_cast<std::uint32_t*>(accepted);
  auto* rej = reinterpret_cast<std::uint32_t*>(rejected);
  auto* st = reinterpret_cast<std::uint8_t*>(status);
  if (r.dbl) {
    dopri5_on_device<double>(r, reinterpret_cast<double*>(state), static_cast<const double*>(save_times),
                             reinterpret_cast<double*>(saved), acc, rej, st, s);
  } else {
    dopri5_on_device<float>(r, reinterpret_cast<float*>(state), static_cast<const float*>(save_times),
                            reinterpret_cast<float*>(saved), acc, rej, st, s);
  }
}

void dopri5_lorenz_host(const dopri5_request& r, void* state, const void* save_times, void* saved, void* accepted,
                        void* rejected, void* status, bool on_host, int device) {
  auto* acc = static_cast<std::uint32_t*>(accepted);
  auto* rej = static_cast<std::uint32_t*>(rejected);
  auto* st = static_cast<std::uint8_t*>(status);
  if (r.dbl) {
    dopri5_host_typed<double>(r, static_cast<double*>(state), static_cast<const double*>(save_times),
                              static_cast<double*>(saved), acc, rej, st, on_host, device);
  } else {
    dopri5_host_typed<float>(r, static_cast<float*>(state), static_cast<const float*>(save_times),
                             static_cast<float*>(saved), acc, rej, st, on_host, device);
  }
}

void mean_field_device(const mean_field_request& r, std::uintptr_t f, std::uintptr_t g, std::uintptr_t trajectory,
                       int device, std::uintptr_t stream) {
  device_guard dg(device);
  mean_field_on_device(r, reinterpret_cast<cf*>(f), reinterpret_cast<cf*>(g), reinterpret_cast<cf*>(trajectory),
                       stream_view(as_stream(stream)));
}

void mean_field_host(const mean_field_request& r, void* f, void* g, void* trajectory, bool on_host, int device) {
  auto* fp = static_cast<cf*>(f);
  auto* gp = static_cast<cf*>(g);
  auto* tp = static_cast<cf*>(trajectory);
  const std::size_t n = static_cast<std::size_t>(r.n);
  if (on_host) {
    std::vector<cf> fv(fp, fp + n), gv(gp, gp + n);
    const auto traj = so::host::rk4_integrate_coupled(so::systems::mean_field_rhs{}, coupling_of(r),
                                                      cf(r.delta_re, r.delta_im), r.t0, r.dt, r.steps, fv, gv);
    std::memcpy(fp, fv.data(), n * sizeof(cf));
    std::memcpy(gp, gv.data(), n * sizeof(cf));
    std::memcpy(tp, traj.data(), traj.size() * sizeof(cf));
    return;
  }
  device_guard dg(device);
  stream s(device);
  device_buffer<cf> df(n, s.view()), dgb(n, s.view()), dt(static_cast<std::size_t>(r.steps + 1), s.view());
  SPILLWAY_CUDA_TRY(cudaMemcpyAsync(df.data(), fp, n * sizeof(cf), cudaMemcpyHostToDevice, s.value()));
  SPILLWAY_CUDA_TRY(cudaMemcpyAsync(dgb.data(), gp, n * sizeof(cf), cudaMemcpyHostToDevice, s.value()));
  mean_field_on_device(r, df.data(), dgb.data(), dt.data(), s.view());
  SPILLWAY_CUDA_TRY(cudaMemcpyAsync(fp, df.data(), n * sizeof(cf), cudaMemcpyDeviceToHost, s.value()));
  SPILLWAY_CUDA_TRY(cudaMemcpyAsync(gp, dgb.data(), n * sizeof(cf), cudaMemcpyDeviceToHost, s.value()));
  SPILLWAY_CUDA_TRY(cudaMemcpyAsync(tp, dt.data(), static_cast<std::size_t>(r.steps + 1) * sizeof(cf), cudaMemcpyDeviceToHost,
                                    s.value()));
  s.synchronize();
}

coupled_result mean_field_dopri5_device(const mean_field_dopri5_request& r, std::uintptr_t f, std::uintptr_t g,
                                        std::uintptr_t times, std::uintptr_t deltas, int device, std::uintptr_t stream) {
  device_guard dg(device);
  return mean_field_dopri5_on_device(r, reinterpret_cast<cf*>(f), reinterpret_cast<cf*>(g),
                                     reinterpret_cast<double*>(times), reinterpret_cast<cf*>(deltas),
                                     stream_view(as_stream(stream)));
}

coupled_result mean_field_dopri5_host(const mean_field_dopri5_request& r, void* f, void* g, void* times, void* deltas,
                                      bool on_host, int device) {
  auto* fp = static_cast<cf*>(f);
  auto* gp = static_cast<cf*>(g);
  auto* tp = static_cast<double*>(times);
  auto* dp = static_cast<cf*>(deltas);
  const auto n = static_cast<std::size_t>(r.control.n), cap = static_cast<std::size_t>(r.capacity);
  if (on_host) {
    std::vector<cf> fv(fp, fp + n), gv(gp, gp + n), pv;
    std::vector<double> tv;
    const auto& c = r.control;
    const so::coupled_stats st = so::host::dopri5_integrate_coupled(
        so::systems::mean_field_rhs{}, so::systems::mean_field_coupling<float>(r.scale), cf(r.delta_re, r.delta_im),
        c.t0, c.t1, options_of(c), &tv, &pv, fv, gv);
    std::memcpy(fp, fv.data(), n * sizeof(cf));
    std::memcpy(gp, gv.data(), n * sizeof(cf));
    const std::size_t k = std::min(cap, tv.size());
    if (tp != nullptr && k > 0) std::memcpy(tp, tv.data(), k * sizeof(double));
    if (dp != nullptr && k > 0) std::memcpy(dp, pv.data(), k * sizeof(cf));
    return result_of(st);
  }
  device_guard dg(device);
  stream s(device);
  device_buffer<cf> df(n, s.view()), dgb(n, s.view()), dd(dp != nullptr ? cap : 0u, s.view());
  device_buffer<double> dt(tp != nullptr ? cap : 0u, s.view());
  SPILLWAY_CUDA_TRY(cudaMemcpyAsync(df.data(), fp, n * sizeof(cf), cudaMemcpyHostToDevice, s.value()));
  SPILLWAY_CUDA_TRY(cudaMemcpyAsync(dgb.data(), gp, n * sizeof(cf), cudaMemcpyHostToDevice, s.value()));
  const coupled_result out = mean_field_dopri5_on_device(r, df.data(), dgb.data(), tp != nullptr ? dt.data() : nullptr,
                                                         dp != nullptr ? dd.data() : nullptr, s.view());
  SPILLWAY_CUDA_TRY(cudaMemcpyAsync(fp, df.data(), n * sizeof(cf), cudaMemcpyDeviceToHost, s.value()));
  SPILLWAY_CUDA_TRY(cudaMemcpyAsync(gp, dgb.data(), n * sizeof(cf), cudaMemcpyDeviceToHost, s.value()));
  const std::size_t k = std::min<std::size_t>(cap, out.accepted + 1);
  if (tp != nullptr && k > 0)
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(tp, dt.data(), k * sizeof(double), cudaMemcpyDeviceToHost, s.value()));
  if (dp != nullptr && k > 0)
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(dp, dd.data(), k * sizeof(cf), cudaMemcpyDeviceToHost, s.value()));
  s.synchronize();
  return out;
}

}  // namespace spillway::python
