// spillway/ode/adaptive.cuh — adaptive Dormand–Prince 5(4) over many independent small systems,
// one per thread, each system's state and stages in registers and its step size its own
// (ode/dopri5.hpp: the method, its step control and dense output). The state touches memory at
// the start, at the requested save times and at the end; per system the accepted and rejected
// steps and a status come back.
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/core/launch.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/ode/dopri5.hpp>

#include <cuda_runtime_api.h>
#include <cuda/std/span>

#include <cstdint>
#include <type_traits>
#include <vector>

namespace spillway::ode {

namespace detail {

/// The systems of thread (blockIdx, threadIdx), grid-stride: the body of the ensemble kernels.
template <int Block, class Family, class Real, std::size_t D, bool Bounded>
__device__ __forceinline__ void dopri5_ensemble_body(const Family& family, Real t0, Real t1,
                                                     const adaptive_options& o, Real* state,
                                                     const Real* save_times, std::uint64_t m, Real* saved,
                                                     std::uint32_t* accepted, std::uint32_t* rejected,
                                                     std::uint8_t* status, std::uint64_t n) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * Block;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * Block + threadIdx.x; i < n; i += stride) {
    dopri5_system<Real, D, Bounded>(family, i, n, t0, t1, o, state, save_times, m, saved, accepted, rejected,
                                    status);
  }
}

#define SPILLWAY_DOPRI5_KERNEL_PARAMS                                                                        \
  Family family, Real t0, Real t1, adaptive_options o, Real *state, const Real *save_times, std::uint64_t m, \
      Real *saved, std::uint32_t *accepted, std::uint32_t *rejected, std::uint8_t *status, std::uint64_t n
#define SPILLWAY_DOPRI5_KERNEL_ARGS \
  family, t0, t1, o, state, save_times, m, saved, accepted, rejected, status, n

/// Double (and any type but float): the register allocator's own choice (96 registers for Lorenz).
template <int Block, class Family, class Real, std::size_t D, bool Bounded>
__global__ void __launch_bounds__(Block) dopri5_ensemble_kernel(SPILLWAY_DOPRI5_KERNEL_PARAMS) {
  dopri5_ensemble_body<Block, Family, Real, D, Bounded>(SPILLWAY_DOPRI5_KERNEL_ARGS);
}

/// Float: at least 8 blocks per SM asked of the allocator (64 registers, no spills): fixed-step
/// DP5 26.9 → 25.9 ms, adaptive 2.96 → 2.93 ms on the H200 (Lorenz, 8.39M systems). For double
/// the same hint measured 11.6 ms against 9.96 (spills), 6 blocks 10.0.
template <int Block, class Family, class Real, std::size_t D, bool Bounded>
__global__ void __launch_bounds__(Block, 8) dopri5_ensemble_kernel_8(SPILLWAY_DOPRI5_KERNEL_PARAMS) {
  dopri5_ensemble_body<Block, Family, Real, D, Bounded>(SPILLWAY_DOPRI5_KERNEL_ARGS);
}

#undef SPILLWAY_DOPRI5_KERNEL_PARAMS
#undef SPILLWAY_DOPRI5_KERNEL_ARGS

/// The ensemble kernel for Real and the bound.
template <int Block, class Family, class Real, std::size_t D, bool Bounded>
constexpr auto dopri5_ensemble_kernel_for() {
  if constexpr (std::is_same_v<Real, float>) {
    return &dopri5_ensemble_kernel_8<Block, Family, Real, D, Bounded>;
  } else {
    return &dopri5_ensemble_kernel<Block, Family, Real, D, Bounded>;
  }
}

}  // namespace detail

/// Enqueues the adaptive Dormand–Prince 5(4) integration of n = state.size() / D independent
/// systems from t0 to t1 on `s` (either direction).
///   family:  family(std::uint64_t i) -> system i, called as f(Real t, const cuda::std::array<Real,
///            D>& y, cuda::std::array<Real, D>& dydt) (as for rk4_ensemble_async).
///   o:       tolerances and step control (adaptive_options; fixed_dt > 0: fixed steps).
///   state:   device, structure of arrays (component d of system i at state[d n + i]): the
///            initial states in, the states reached out (at t1 where the status is success).
///   out:     device spans, each optional: save times and the dense output at them, accepted and
///            rejected steps, status (ensemble_outputs). With save times the call waits for `s`
///            once, to check their m values on the host.
/// Throws logic_error naming the offending value for bad options, sizes or save times.
template <class Family, class Real, std::size_t D = Family::dimension>
void dopri5_ensemble_async(const Family& family, Real t0, Real t1, const adaptive_options& o,
                           cuda::std::span<Real> state, const ensemble_outputs<Real>& out, stream_view s) {
  static_assert(std::is_same_v<Real, float> || std::is_same_v<Real, double>,
                "ensembles hold float or double");
  static_assert(D >= 1, "a system has at least one component");
  constexpr const char* who = "dopri5_ensemble_async";
  detail::check_adaptive(who, static_cast<double>(t0), static_cast<double>(t1), o);
  detail::check_ensemble<Real>(who, state.size(), D, out);
  const std::uint64_t m = out.save_times.size();
  if (m > 0) {
    std::vector<Real> times(static_cast<std::size_t>(m));
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(times.data(), out.save_times.data(), m * sizeof(Real),
                                      cudaMemcpyDeviceToHost, s.value()));
    s.synchronize();
    detail::check_save_times(who, static_cast<double>(t0), static_cast<double>(t1), times.data(), m);
  }
  const std::uint64_t n = state.size() / D;
  if (n == 0) return;
  constexpr int block = 128;
  // One thread per system (grid-stride past 2^30 blocks).
  const unsigned blocks = grid_blocks(static_cast<index_t>(n), block, index_t{1} << 30);
  // Two instantiations: the loop that holds steps to h_max only where h_max binds (dopri5.hpp).
  const auto kernel = detail::steps_bounded(o, static_cast<double>(t0), static_cast<double>(t1))
                          ? detail::dopri5_ensemble_kernel_for<block, Family, Real, D, true>()
                          : detail::dopri5_ensemble_kernel_for<block, Family, Real, D, false>();
  kernel<<<blocks, block, 0, s.value()>>>(
      family, t0, t1, o, state.data(), m > 0 ? out.save_times.data() : nullptr, m,
      out.saved.empty() ? nullptr : out.saved.data(), out.accepted.empty() ? nullptr : out.accepted.data(),
      out.rejected.empty() ? nullptr : out.rejected.data(), out.status.empty() ? nullptr : out.status.data(),
      n);
  SPILLWAY_CHECK_LAUNCH();
}

/// The plain form: runs on a stream it owns and returns when `state` and `out` hold the result.
template <class Family, class Real, std::size_t D = Family::dimension>
void dopri5_ensemble(const Family& family, Real t0, Real t1, const adaptive_options& o,
                     cuda::std::span<Real> state, const ensemble_outputs<Real>& out = {}) {
  stream s;
  dopri5_ensemble_async<Family, Real, D>(family, t0, t1, o, state, out, s);
  s.synchronize();
}

}  // namespace spillway::ode
