// python/src/jobs_ode.cu — the RK4 entry points of the Python binding: the Lorenz ensemble
// (float32 and float64) and the mean-field coupled system (complex64), on the device or with the
// host implementation. Its own translation unit, so it compiles beside jobs.cu.
#include "jobs.hpp"

#include <spillway/core/device.hpp>
#include <spillway/core/device_buffer.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/ode.cuh>

#include <cuda_runtime_api.h>

#include <cstring>
#include <vector>

namespace spillway::python {
namespace {

namespace so = spillway::ode;
using cf = cuda::std::complex<float>;

cudaStream_t as_stream(std::uintptr_t h) { return h == 0 ? cudaStreamLegacy : reinterpret_cast<cudaStream_t>(h); }

template <class Real>
so::systems::lorenz_family<Real> family_of(const lorenz_request& r) {
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

so::systems::mean_field_coupling<float> coupling_of(const mean_field_request& r) {
  return so::systems::mean_field_coupling<float>(r.scale);
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

}  // namespace spillway::python
