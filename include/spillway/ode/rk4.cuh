// spillway/ode/rk4.cuh — RK4 whose state stays on the device.
//
// The state is one or more device arrays of equal length (float, double, cuda::std::complex<float>
// or <double>, mixed freely). Three ways to step it:
//
//  * rk4_integrate[_async]: an elementwise system, rhs(t, p, y..., dydt...) per element. One fused
//    kernel per step runs the four stages in registers, so each state element is read once and
//    written once per step; the state ping-pongs between the caller's arrays and a scratch set.
//  * rk4_integrate_coupled[_async]: the same, plus global coupling: after every step the
//    parameters become coupling.update(sum_i coupling.contribution(i, y_new...), previous). The sum
//    is fused into the step kernel (block partials, then the last block to finish sums them in
//    block order and writes the new parameters for the next step's kernel): no host round trip,
//    and the result is bitwise reproducible run to run on a given device. The parameters after
//    every step (the observer, e.g. delta(t)) go to a device array the caller copies once.
//    Optional snapshots of the whole state every k steps.
//  * rk4_integrate_general[_async]: a right-hand side that reads any element of the stage's arrays
//    (stencils, gathers): four stage kernels per step.
//
// Steps are enqueued without host work between them; blocks of `graph_steps` steps are captured
// once into a CUDA graph and replayed, which removes most launch overhead for small states.
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/device_buffer.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/ode/config.hpp>
#include <spillway/ode/detail/checks.hpp>
#include <spillway/ode/detail/kernels.cuh>
#include <spillway/ode/rk4_element.hpp>

#include <cuda/std/span>
#include <cuda/std/tuple>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>

namespace spillway::ode {

/// A non-owning view of a state: `size` elements in each of the device arrays.
template <class... T>
struct state_view {
  std::uint64_t size = 0;
  cuda::std::tuple<T*...> arrays{};
};

/// state_view over device arrays of `n` elements each: make_state_view(n, F.data(), G.data()).
template <class... T>
state_view<T...> make_state_view(std::uint64_t n, T*... arrays) {
  return state_view<T...>{n, cuda::std::tuple<T*...>(arrays...)};
}

struct rk4_options {
  /// Write the whole state after every k-th step into the snapshots view (0: no snapshots).
  /// Snapshot j (after step (j + 1) k) of array a is elements [j n, (j + 1) n) of that array.
  std::uint64_t snapshot_every = 0;
  /// Steps captured per CUDA graph and replayed (rounded down to even; 0 or 1: plain launches).
  /// Used only when there are at least two such blocks of steps.
  unsigned graph_steps = 32;
};

namespace detail {

// Threads per block and elements per thread per sweep of the fused step kernel: each thread first
// loads `fused_items` elements of every array, then steps them, so that many loads are in flight.
// SPILLWAY_ODE_FUSED_ITEMS overrides the default (a tuning knob; results do not depend on it
// beyond the reduction's summation order).
#ifndef SPILLWAY_ODE_FUSED_ITEMS
#define SPILLWAY_ODE_FUSED_ITEMS 2
#endif
inline constexpr int fused_block = 256;
inline constexpr int fused_items = SPILLWAY_ODE_FUSED_ITEMS;

template <class... T, std::size_t... I>
void check_state(const char* who, const state_view<T...>& y, std::index_sequence<I...>) {
  const void* ptrs[] = {static_cast<const void*>(cuda::std::get<I>(y.arrays))...};
  if (y.size == 0) return;
  for (std::size_t a = 0; a < sizeof...(T); ++a) {
    if (ptrs[a] == nullptr) {
      throw logic_error(std::string(who) + ": state array " + std::to_string(a) + " is null but size is " +
                        std::to_string(y.size));
    }
  }
}

template <class... T, std::size_t... I>
void copy_state_async(const cuda::std::tuple<T*...>& dst, const cuda::std::tuple<T*...>& src, std::uint64_t n,
                      stream_view s, std::index_sequence<I...>) {
  (copy_async(cuda::std::get<I>(dst), static_cast<const T*>(cuda::std::get<I>(src)), static_cast<std::size_t>(n), s),
   ...);
}

}  // namespace detail

/// Enqueues `steps` RK4 steps of the coupled elementwise system on `s` (see the file comment).
///   rhs:      rhs(double t, const P& p, const T&... y, T&... dydt), callable on the device
///   coupling: param_type, accum_type (value-initialised = zero, summed with +),
///             contribution(std::uint64_t i, const T&... y_new) -> accum_type,
///             update(const accum_type& total, const param_type& previous) -> param_type
///   y:        initial state in, final state out (the caller's device arrays)
///   trajectory: empty, or a device array of at least steps + 1 parameters: [0] = p0, [k] = the
///             parameters after step k. Copy it to the host once at the end.
///   snapshots: when opt.snapshot_every = k > 0, device arrays of at least (steps / k) * n each.
/// Scratch memory comes from spillway's pool on `s` and is released in stream order.
template <class Rhs, class Coupling, class... T>
void rk4_integrate_coupled_async(const Rhs& rhs, const Coupling& coupling, typename Coupling::param_type p0,
                                 double t0, double dt, std::uint64_t steps, state_view<T...> y,
                                 cuda::std::span<typename Coupling::param_type> trajectory, stream_view s,
                                 const rk4_options& opt = {}, state_view<T...> snapshots = {}) {
  static_assert(sizeof...(T) >= 1, "the state needs at least one array");
  static_assert((is_state_scalar_v<T> && ...), "state arrays hold float, double or cuda::std::complex of them");
  using P = typename Coupling::param_type;
  static_assert(std::is_trivially_copyable_v<P>, "param_type must be trivially copyable");
  using seq = std::index_sequence_for<T...>;
  constexpr const char* who = "rk4_integrate_coupled_async";
  detail::check_time(who, t0, dt);
  detail::check_state(who, y, seq{});
  if (!trajectory.empty() && trajectory.size() < steps + 1) {
    throw logic_error(std::string(who) + ": trajectory holds " + std::to_string(trajectory.size()) +
                      " parameters; " + std::to_string(steps) + " steps need " + std::to_string(steps + 1) +
                      " (or pass an empty span)");
  }
  const bool want_snaps = opt.snapshot_every > 0;
  detail::check_snapshots(who, opt.snapshot_every, steps, y.size, snapshots.size,
                          snapshots.size > 0 || cuda::std::get<0>(snapshots.arrays) != nullptr);
  if (want_snaps && steps / opt.snapshot_every > 0) detail::check_state(who, snapshots, seq{});

  using args_t = detail::fused_args<Rhs, Coupling, T...>;
  using A = typename args_t::accum_type;
  // A resident grid: the steps of one launch meet at grid-wide barriers.
  const auto grid = static_cast<int>(grid_blocks(
      static_cast<index_t>(y.size), index_t{detail::fused_block} * detail::fused_items,
      resident_blocks(&detail::fused_step_kernel<detail::fused_block, detail::fused_items, Rhs, Coupling, T...>,
                      detail::fused_block, 0, current_device())));

  const std::uint64_t n = y.size;
  std::tuple<device_buffer<T>...> scratch{device_buffer<T>(static_cast<std::size_t>(n), s)...};
  device_buffer<detail::control_block<P>> ctl(1, s);
  device_buffer<A> partials(static_cast<std::size_t>(grid), s);

  const cuda::std::tuple<T*...> other =
      std::apply([](auto&... b) { return cuda::std::tuple<T*...>(b.data()...); }, scratch);
  // Built in place: a coupling need not be default-constructible (mean_field_coupling is not).
  const auto make_args = [&](int parity) {
    const auto& src = parity == 0 ? y.arrays : other;
    const auto& dst = parity == 0 ? other : y.arrays;
    return args_t{rhs,
                  coupling,
                  t0,
                  dt,
                  n,
                  detail::as_const_arrays(src),
                  dst,
                  ctl.data(),
                  partials.data(),
                  trajectory.empty() ? nullptr : trajectory.data(),
                  static_cast<std::uint64_t>(trajectory.size()),
                  snapshots.arrays,
                  want_snaps ? opt.snapshot_every : 0,
                  want_snaps ? steps / opt.snapshot_every : 0};
  };
  const args_t args[2] = {make_args(0), make_args(1)};

  detail::init_control_kernel<P><<<1, 1, 0, s.value()>>>(ctl.data(), p0, args[0].trajectory);
  SPILLWAY_CHECK_LAUNCH();

  const auto launch = [&](int parity, cudaStream_t st) {
    detail::fused_step_kernel<detail::fused_block, detail::fused_items, Rhs, Coupling, T...>
        <<<grid, detail::fused_block, 0, st>>>(args[parity]);
    SPILLWAY_CHECK_LAUNCH();
  };

  std::uint64_t done = 0;
  const std::uint64_t block = opt.graph_steps & ~1u;
  if (block >= 2 && steps >= 2 * block) {
    // Capture `block` steps (even, so the graph starts and ends on the caller's arrays) once on a
    // private stream; replaying it needs no per-step host work. The step count and parameters live
    // in the control block, so every replay is the same graph.
    stream capture;
    cudaGraph_t graph = nullptr;
    SPILLWAY_CUDA_TRY(cudaStreamBeginCapture(capture.value(), cudaStreamCaptureModeThreadLocal));
    try {
      for (std::uint64_t k = 0; k < block; ++k) launch(static_cast<int>(k & 1u), capture.value());
    } catch (...) {
      (void)cudaStreamEndCapture(capture.value(), &graph);
      if (graph != nullptr) (void)cudaGraphDestroy(graph);
      throw;
    }
    SPILLWAY_CUDA_TRY(cudaStreamEndCapture(capture.value(), &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
    (void)cudaGraphDestroy(graph);
    SPILLWAY_CUDA_CHECK(e, "cudaGraphInstantiate of the RK4 step graph");
    cudaError_t le = cudaSuccess;
    for (; done + block <= steps && le == cudaSuccess; done += block) le = cudaGraphLaunch(exec, s.value());
    (void)cudaGraphExecDestroy(exec);  // an in-flight graph is freed once it completes
    SPILLWAY_CUDA_TRY(le);
  }
  for (; done < steps; ++done) launch(static_cast<int>(done & 1u), s.value());
  if (steps % 2 == 1 && n > 0) detail::copy_state_async(y.arrays, other, n, s, seq{});
}

/// The plain form: runs on a stream it owns and returns when the result is in `y` and
/// `trajectory`. Work producing `y` on other streams must be complete before the call.
template <class Rhs, class Coupling, class... T>
void rk4_integrate_coupled(const Rhs& rhs, const Coupling& coupling, typename Coupling::param_type p0, double t0,
                           double dt, std::uint64_t steps, state_view<T...> y,
                           cuda::std::span<typename Coupling::param_type> trajectory, const rk4_options& opt = {},
                           state_view<T...> snapshots = {}) {
  stream s;
  rk4_integrate_coupled_async(rhs, coupling, p0, t0, dt, steps, y, trajectory, s, opt, snapshots);
  s.synchronize();
}

/// Enqueues `steps` fused RK4 steps of the elementwise system rhs(t, p, y..., dydt...) with fixed
/// parameters `p` (passed by value to every step).
template <class Rhs, class P, class... T>
void rk4_integrate_async(const Rhs& rhs, const P& p, double t0, double dt, std::uint64_t steps, state_view<T...> y,
                         stream_view s, const rk4_options& opt = {}, state_view<T...> snapshots = {}) {
  rk4_integrate_coupled_async(rhs, no_coupling<P>{}, p, t0, dt, steps, y, cuda::std::span<P>{}, s, opt, snapshots);
}

/// The plain form of rk4_integrate_async.
template <class Rhs, class P, class... T>
void rk4_integrate(const Rhs& rhs, const P& p, double t0, double dt, std::uint64_t steps, state_view<T...> y,
                   const rk4_options& opt = {}, state_view<T...> snapshots = {}) {
  stream s;
  rk4_integrate_async(rhs, p, t0, dt, steps, y, s, opt, snapshots);
  s.synchronize();
}

/// Enqueues `steps` RK4 steps of a general system: rhs(std::uint64_t i, double t, const P& p,
/// const T*... y, T&... dydt_i) computes element i's derivative and may read any element of the
/// stage's arrays. Four kernels per step; scratch (three state copies) from spillway's pool.
template <class Rhs, class P, class... T>
void rk4_integrate_general_async(const Rhs& rhs, const P& p, double t0, double dt, std::uint64_t steps,
                                 state_view<T...> y, stream_view s) {
  static_assert(sizeof...(T) >= 1, "the state needs at least one array");
  static_assert((is_state_scalar_v<T> && ...), "state arrays hold float, double or cuda::std::complex of them");
  using seq = std::index_sequence_for<T...>;
  constexpr const char* who = "rk4_integrate_general_async";
  detail::check_time(who, t0, dt);
  detail::check_state(who, y, seq{});
  const std::uint64_t n = y.size;
  if (n == 0 || steps == 0) return;
  std::tuple<device_buffer<T>...> a{device_buffer<T>(static_cast<std::size_t>(n), s)...};
  std::tuple<device_buffer<T>...> b{device_buffer<T>(static_cast<std::size_t>(n), s)...};
  std::tuple<device_buffer<T>...> acc{device_buffer<T>(static_cast<std::size_t>(n), s)...};
  const auto ptrs = [](auto& tup) {
    return std::apply([](auto&... v) { return cuda::std::tuple<T*...>(v.data()...); }, tup);
  };
  const auto pa = ptrs(a), pb = ptrs(b), pacc = ptrs(acc);
  constexpr int threads = 256;
  const auto grid = static_cast<int>(
      grid_blocks(static_cast<index_t>(n), threads, index_t{16} * multiprocessor_count(current_device())));
  for (std::uint64_t k = 0; k < steps; ++k) {
    const double t = t0 + static_cast<double>(k) * dt;
    detail::general_stage_kernel<0><<<grid, threads, 0, s.value()>>>(rhs, p, t, dt, n, y.arrays, y.arrays, pa, pacc);
    SPILLWAY_CHECK_LAUNCH();
    detail::general_stage_kernel<1><<<grid, threads, 0, s.value()>>>(rhs, p, t, dt, n, y.arrays, pa, pb, pacc);
    SPILLWAY_CHECK_LAUNCH();
    detail::general_stage_kernel<2><<<grid, threads, 0, s.value()>>>(rhs, p, t, dt, n, y.arrays, pb, pa, pacc);
    SPILLWAY_CHECK_LAUNCH();
    detail::general_stage_kernel<3><<<grid, threads, 0, s.value()>>>(rhs, p, t, dt, n, y.arrays, pa, pa, pacc);
    SPILLWAY_CHECK_LAUNCH();
  }
}

/// The plain form of rk4_integrate_general_async.
template <class Rhs, class P, class... T>
void rk4_integrate_general(const Rhs& rhs, const P& p, double t0, double dt, std::uint64_t steps,
                           state_view<T...> y) {
  stream s;
  rk4_integrate_general_async(rhs, p, t0, dt, steps, y, s);
  s.synchronize();
}

}  // namespace spillway::ode
