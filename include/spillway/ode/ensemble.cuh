// spillway/ode/ensemble.cuh — RK4 over many independent small systems, one per thread, each
// system's state in registers across all steps; the state touches memory only at the start, at
// save points and at the end.
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/launch.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/ode/config.hpp>
#include <spillway/ode/detail/checks.hpp>
#include <spillway/ode/detail/kernels.cuh>

#include <cuda/std/span>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

namespace spillway::ode {

/// Enqueues `steps` RK4 steps of `n = state.size() / D` independent systems on `s`.
///   family:  family(std::uint64_t i) -> the system i, called as f(Real t, const
///            cuda::std::array<Real, D>& y, cuda::std::array<Real, D>& dydt); D defaults to
///            Family::dimension. Per-system constants (e.g. Lorenz's rho) are computed once per
///            thread when family(i) is called.
///   state:   device, structure of arrays: component d of system i at state[d n + i]; initial
///            state in, final state out.
///   saved:   empty, or (with save_every = k > 0) a device array of at least (steps / k) D n values:
///            after step j k, component d of system i goes to saved[((j - 1) D + d) n + i].
template <class Family, class Real, std::size_t D = Family::dimension>
void rk4_ensemble_async(const Family& family, Real t0, Real dt, std::uint64_t steps, std::uint64_t save_every,
                        cuda::std::span<Real> state, cuda::std::span<Real> saved, stream_view s) {
  static_assert(std::is_same_v<Real, float> || std::is_same_v<Real, double>, "ensembles hold float or double");
  static_assert(D >= 1, "a system has at least one component");
  constexpr const char* who = "rk4_ensemble_async";
  detail::check_time(who, static_cast<double>(t0), static_cast<double>(dt));
  if (state.size() % D != 0) {
    throw logic_error(std::string(who) + ": state has " + std::to_string(state.size()) +
                      " values, not a multiple of the dimension " + std::to_string(D));
  }
  const std::uint64_t n = state.size() / D;
  if (!saved.empty() && save_every == 0) {
    throw logic_error(std::string(who) + ": saved is given but save_every is 0");
  }
  const std::uint64_t saves = save_every > 0 ? steps / save_every : 0;
  if (!saved.empty() && saved.size() / D / std::max<std::uint64_t>(n, 1) < saves) {
    throw logic_error(std::string(who) + ": save_every = " + std::to_string(save_every) + " over " +
                      std::to_string(steps) + " steps needs " + std::to_string(saves * D * n) +
                      " saved values, saved holds " + std::to_string(saved.size()));
  }
  if (n == 0) return;
  constexpr int block = 128;
  // Every system runs all steps: one thread each (grid-stride past 2^30 blocks).
  const unsigned blocks = grid_blocks(static_cast<index_t>(n), block, index_t{1} << 30);
  detail::ensemble_kernel<block, Family, Real, D>
      <<<blocks, block, 0, s.value()>>>(family, t0, dt, steps, saved.empty() ? 0 : save_every, state.data(),
                                        saved.empty() ? nullptr : saved.data(), n);
  SPILLWAY_CHECK_LAUNCH();
}

/// The plain form: runs on a stream it owns and returns when `state` and `saved` hold the result.
template <class Family, class Real, std::size_t D = Family::dimension>
void rk4_ensemble(const Family& family, Real t0, Real dt, std::uint64_t steps, std::uint64_t save_every,
                  cuda::std::span<Real> state, cuda::std::span<Real> saved = {}) {
  stream s;
  rk4_ensemble_async<Family, Real, D>(family, t0, dt, steps, save_every, state, saved, s);
  s.synchronize();
}

}  // namespace spillway::ode
