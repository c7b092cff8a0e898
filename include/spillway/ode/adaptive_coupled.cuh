// spillway/ode/adaptive_coupled.cuh — adaptive Dormand–Prince 5(4) for the coupled elementwise
// system of rk4_integrate_coupled (ode/rk4.cuh): a large state of n elements in one or more
// arrays, rhs(t, p, y..., dydt...) per element, and the parameters recomputed after every accepted
// step from a reduction of the new state. ode/dopri5_coupled.hpp has the method and its control.
//
// Each attempt is one fused kernel: every element's seven stages in registers with the parameters
// held over the step, y5 written once to the other half of a ping-pong pair, and the error norm
// and the coupling summed into block partials; the last block to finish sums them in block order,
// accepts or rejects, updates the parameters, the time and the step, and records the observer.
// The attempts repeat under a CUDA graph's conditional while node that the last block clears when
// the integration ends: no host round trip at all between t0 and t1.
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/device_buffer.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/launch.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/ode/detail/coupled_kernels.cuh>
#include <spillway/ode/dopri5_coupled.hpp>
#include <spillway/ode/rk4.cuh>

#include <cuda_runtime_api.h>
#include <cuda/std/span>
#include <cuda/std/tuple>

#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>

namespace spillway::ode {

namespace detail {

// Elements per thread per sweep of the attempt kernel (a tuning knob like SPILLWAY_ODE_FUSED_ITEMS;
// the results do not depend on it beyond the reductions' summation order).
#ifndef SPILLWAY_ODE_COUPLED_ITEMS
#define SPILLWAY_ODE_COUPLED_ITEMS 2
#endif
inline constexpr int coupled_items = SPILLWAY_ODE_COUPLED_ITEMS;

/// Builds, runs (on `s`) and frees the graph whose while node repeats the attempt kernel.
template <class Args, class Kernel>
void run_attempts_graph(Kernel kernel, Args& args, int grid, int block, stream_view s) {
  cudaGraph_t graph = nullptr;
  SPILLWAY_CUDA_TRY(cudaGraphCreate(&graph, 0));
  cudaGraphExec_t exec = nullptr;
  const auto destroy = [&] {
    if (exec != nullptr) (void)cudaGraphExecDestroy(exec);  // an in-flight graph is freed once it completes
    (void)cudaGraphDestroy(graph);
  };
  try {
    SPILLWAY_CUDA_TRY(cudaGraphConditionalHandleCreate(&args.handle, graph, 1u, cudaGraphCondAssignDefault));
    cudaGraphNodeParams loop{};
    loop.type = cudaGraphNodeTypeConditional;
    loop.conditional.handle = args.handle;
    loop.conditional.type = cudaGraphCondTypeWhile;
    loop.conditional.size = 1;
    cudaGraphNode_t loop_node = nullptr;
    SPILLWAY_CUDA_TRY(cudaGraphAddNode(&loop_node, graph, nullptr, nullptr, 0, &loop));
    void* params[] = {&args};
    cudaKernelNodeParams kp{};
    kp.func = reinterpret_cast<void*>(kernel);
    kp.gridDim = dim3(static_cast<unsigned>(grid));
    kp.blockDim = dim3(static_cast<unsigned>(block));
    kp.kernelParams = params;
    cudaGraphNode_t attempt = nullptr;
    SPILLWAY_CUDA_TRY(cudaGraphAddKernelNode(&attempt, loop.conditional.phGraph_out[0], nullptr, 0, &kp));
    SPILLWAY_CUDA_TRY(cudaGraphInstantiate(&exec, graph, 0));
    SPILLWAY_CUDA_TRY(cudaGraphLaunch(exec, s.value()));
  } catch (...) {
    destroy();
    throw;
  }
  destroy();
}

}  // namespace detail

/// Enqueues the adaptive Dormand–Prince 5(4) integration of the coupled elementwise system from
/// t0 to t1 (either direction) on `s`.
///   rhs, coupling: as for rk4_integrate_coupled_async (ode/rk4.cuh). The parameters are held over
///             each step and become coupling.update(Σ contribution(i, y_new...), p) after every
///             accepted one (the coupled RK4's rule, so their lag is first order in the step:
///             bound it with o.h_max where the parameters move fast; see docs/ode.md).
///   o:        tolerances and step control (adaptive_options; fixed_dt must be 0). The error norm
///             is the mixed RMS over every element of every array (a complex element counts once,
///             by its modulus); the whole state shares one step.
///   y:        the initial state in, the state reached out (the caller's device arrays).
///   observer: device spans (each may be empty): the time and the parameters after every accepted
///             step, entry 0 being (t0, p0); entries past their length are not written.
///   stats:    a device pointer to one coupled_stats (or null): steps, status, time reached.
/// Scratch (one state copy and the partials) comes from spillway's pool on `s`. Throws logic_error
/// naming the offending value for bad options or sizes.
template <class Rhs, class Coupling, class... T>
void dopri5_integrate_coupled_async(const Rhs& rhs, const Coupling& coupling,
                                    typename Coupling::param_type p0, double t0, double t1,
                                    const adaptive_options& o, state_view<T...> y,
                                    const coupled_observer<typename Coupling::param_type>& observer,
                                    coupled_stats* stats, stream_view s) {
  static_assert(sizeof...(T) >= 1, "the state needs at least one array");
  static_assert((is_state_scalar_v<T> && ...),
                "state arrays hold float, double or cuda::std::complex of them");
  using P = typename Coupling::param_type;
  static_assert(std::is_trivially_copyable_v<P>, "param_type must be trivially copyable");
  using seq = std::index_sequence_for<T...>;
  using args_t = detail::coupled_args<Rhs, Coupling, T...>;
  constexpr const char* who = "dopri5_integrate_coupled_async";
  detail::check_coupled_adaptive(who, t0, t1, o);
  detail::check_state(who, y, seq{});
  if (!observer.times.empty() && !observer.params.empty() &&
      observer.times.size() != observer.params.size()) {
    throw logic_error(std::string(who) + ": observer.times holds " + std::to_string(observer.times.size()) +
                      " entries and observer.params " + std::to_string(observer.params.size()) +
                      "; give them the same length (or leave one empty)");
  }
  constexpr int block = detail::fused_block, items = detail::coupled_items;
  const auto attempt = &detail::coupled_attempt_kernel<block, items, Rhs, Coupling, T...>;
  const std::uint64_t n = y.size;
  const auto grid = static_cast<int>(grid_blocks(static_cast<index_t>(n > 0 ? n : 1), index_t{block} * items,
                                                 resident_blocks(attempt, block, 0, current_device())));
  std::tuple<device_buffer<T>...> scratch{device_buffer<T>(static_cast<std::size_t>(n), s)...};
  device_buffer<detail::coupled_control<P>> ctl(1, s);
  device_buffer<typename args_t::partial_type> partials(static_cast<std::size_t>(grid), s);
  const std::uint64_t capacity = observer.times.empty()    ? observer.params.size()
                                 : observer.params.empty() ? observer.times.size()
                                                           : observer.times.size();
  args_t a{rhs,
           coupling,
           detail::make_coupled_constants(t0, t1, o, detail::coarsest_epsilon<T...>(), n, sizeof...(T)),
           n,
           y.arrays,
           std::apply([](auto&... b) { return cuda::std::tuple<T*...>(b.data()...); }, scratch),
           ctl.data(),
           partials.data(),
           observer.times.empty() ? nullptr : observer.times.data(),
           observer.params.empty() ? nullptr : observer.params.data(),
           capacity,
           stats,
           cudaGraphConditionalHandle{}};
  const bool nothing = n == 0 || t1 == t0;
  detail::coupled_init_kernel<<<1, 1, 0, s.value()>>>(a, p0, o.h0, nothing ? 1u : 0u);
  SPILLWAY_CHECK_LAUNCH();
  if (!nothing) {
    if (!(o.h0 > 0)) {
      detail::coupled_first_step_kernel<0, block, items><<<grid, block, 0, s.value()>>>(a);
      SPILLWAY_CHECK_LAUNCH();
      detail::coupled_first_step_kernel<1, block, items><<<grid, block, 0, s.value()>>>(a);
      SPILLWAY_CHECK_LAUNCH();
    }
    detail::run_attempts_graph(attempt, a, grid, block, s);
  }
  const auto finish_grid = static_cast<int>(grid_blocks(static_cast<index_t>(n > 0 ? n : 1), 256,
                                                        index_t{8} * multiprocessor_count(current_device())));
  detail::coupled_finish_kernel<<<finish_grid, 256, 0, s.value()>>>(a);
  SPILLWAY_CHECK_LAUNCH();
}

/// The plain form: runs on a stream it owns and returns the statistics when `y` and the observer
/// hold the result.
template <class Rhs, class Coupling, class... T>
coupled_stats dopri5_integrate_coupled(const Rhs& rhs, const Coupling& coupling,
                                       typename Coupling::param_type p0, double t0, double t1,
                                       const adaptive_options& o, state_view<T...> y,
                                       const coupled_observer<typename Coupling::param_type>& observer = {}) {
  stream s;
  device_buffer<coupled_stats> d(1, s);
  dopri5_integrate_coupled_async(rhs, coupling, p0, t0, t1, o, y, observer, d.data(), s);
  coupled_stats r;
  SPILLWAY_CUDA_TRY(cudaMemcpyAsync(&r, d.data(), sizeof r, cudaMemcpyDeviceToHost, s.value()));
  s.synchronize();
  return r;
}

}  // namespace spillway::ode
