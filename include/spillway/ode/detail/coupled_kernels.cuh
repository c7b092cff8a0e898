// spillway/ode/detail/coupled_kernels.cuh — the kernels of the coupled adaptive Dormand–Prince
// job (ode/adaptive_coupled.cuh): the two passes of the starting-step estimate and the fused
// attempt, each a sweep over the state with a block reduction whose last block decides, through
// the arithmetic of ode/dopri5_coupled.hpp; and the last copy of the state into the caller's arrays.
#pragma once

#include <spillway/ode/detail/kernels.cuh>
#include <spillway/ode/dopri5_coupled.hpp>

#include <cuda_runtime.h>
#include <cuda/std/tuple>
#include <cuda/std/utility>

#include <cstdint>

namespace spillway::ode::detail {

/// A pass's per-block partial: two error sums and the coupling's contribution.
template <class A>
struct coupled_partial {
  double e0 = 0, e1 = 0;
  A a{};
  SPILLWAY_HD friend coupled_partial operator+(const coupled_partial& x, const coupled_partial& y) {
    coupled_partial r;
    r.e0 = x.e0 + y.e0;
    r.e1 = x.e1 + y.e1;
    r.a = x.a + y.a;
    return r;
  }
};

template <class Rhs, class Coupling, class... T>
struct coupled_args {
  using param_type = typename Coupling::param_type;
  using partial_type = coupled_partial<accum_of_t<Coupling>>;
  Rhs rhs;
  Coupling coupling;
  coupled_constants k;
  std::uint64_t n;
  cuda::std::tuple<T*...> y;        ///< the caller's arrays (the state when parity is 0)
  cuda::std::tuple<T*...> scratch;  ///< the state when parity is 1
  coupled_control<param_type>* ctl;
  partial_type* partials;
  double* times;                      ///< observer (may be null): the time after accepted step k at [k]
  param_type* params;                 ///< observer (may be null): the parameters after accepted step k at [k]
  std::uint64_t capacity;             ///< entries of the observer arrays
  coupled_stats* stats;               ///< may be null
  cudaGraphConditionalHandle handle;  ///< the while node that repeats the attempt kernel
};

template <class... T, cuda::std::size_t... I>
__device__ inline void store_tuple(const cuda::std::tuple<T*...>& out, std::uint64_t i,
                                   const cuda::std::tuple<T...>& v, cuda::std::index_sequence<I...>) {
  (store_stream(cuda::std::get<I>(out) + i, cuda::std::get<I>(v)), ...);
}

template <class... T, cuda::std::size_t... I>
__device__ inline void copy_element(const cuda::std::tuple<T*...>& dst, const cuda::std::tuple<T*...>& src,
                                    std::uint64_t i, cuda::std::index_sequence<I...>) {
  ((cuda::std::get<I>(dst)[i] = cuda::std::get<I>(src)[i]), ...);
}

/// Writes observer entry k where the arrays hold it.
template <class Args, class P>
__device__ inline void observe(const Args& a, std::uint64_t k, double t, const P& p) {
  if (k >= a.capacity) return;
  if (a.times != nullptr) a.times[k] = t;
  if (a.params != nullptr) a.params[k] = p;
}

template <class Rhs, class Coupling, class... T>
__global__ void coupled_init_kernel(coupled_args<Rhs, Coupling, T...> a, typename Coupling::param_type p0,
                                    double h0, unsigned done) {
  coupled_control<typename Coupling::param_type> c{};
  coupled_start(c, p0, a.k.t0);
  c.done = done;
  if (h0 > 0) {
    c.h = a.k.dir * cuda::std::fmin(h0, a.k.h_max);
    check_next_attempt(c, a.k);
  }
  *a.ctl = c;
  observe(a, 0, a.k.t0, p0);
}

/// The starting-step estimate over the initial state (in the caller's arrays): Phase 0 the norms
/// of y0 and f(t0, y0), Phase 1 the difference quotient at the trial step.
template <int Phase, int Block, int Items, class Rhs, class Coupling, class... T>
__global__ void __launch_bounds__(Block) coupled_first_step_kernel(coupled_args<Rhs, Coupling, T...> a) {
  using seq = cuda::std::index_sequence_for<T...>;
  using R = typename coupled_args<Rhs, Coupling, T...>::partial_type;
  const auto c0 = *a.ctl;
  R acc{};
  sweep<Block, Items>(
      a.n, as_const_arrays(a.y),
      [&](std::uint64_t, const cuda::std::tuple<T...>& v) {
        if constexpr (Phase == 0) {
          first_step_norms(a.rhs, c0.params, a.k.t0, v, a.k, acc.e0, acc.e1, seq{});
        } else {
          acc.e0 += first_step_difference(a.rhs, c0.params, a.k.t0, a.k.dir * c0.h, v, a.k, seq{});
        }
      },
      seq{});
  R total{};
  if (!last_block_total<Block, true>(acc, a.partials, &a.ctl->arrived, total)) return;
  if (threadIdx.x != 0) return;
  auto c = *a.ctl;
  if constexpr (Phase == 0) {
    first_step_trial(c, a.k, total.e0, total.e1);
  } else {
    first_step_final(c, a.k, total.e0);
  }
  *a.ctl = c;
}

/// One attempt: every element stepped with the parameters held, y5 written to the other buffer,
/// the error and the coupling summed; the last block accepts or rejects, updates the parameters
/// and the step, and tells the graph's while node whether to attempt again.
template <int Block, int Items, class Rhs, class Coupling, class... T>
__global__ void __launch_bounds__(Block) coupled_attempt_kernel(coupled_args<Rhs, Coupling, T...> a) {
  using cuda::std::get;
  using seq = cuda::std::index_sequence_for<T...>;
  using R = typename coupled_args<Rhs, Coupling, T...>::partial_type;
  const auto c0 = *a.ctl;  // the last block rewrites it only after every block has counted in
  if (c0.done) {
    if (blockIdx.x == 0 && threadIdx.x == 0) cudaGraphSetConditional(a.handle, 0u);
    return;
  }
  double h = 0, t_new = 0;
  bool last = false;
  attempt_span(c0, a.k, h, t_new, last);
  const auto& out = c0.parity == 0 ? a.scratch : a.y;
  R acc{};
  error_real_t<cuda::std::tuple<T...>> err = 0;  // this thread's elements, then the grid in double
  sweep<Block, Items>(
      a.n, as_const_arrays(c0.parity == 0 ? a.y : a.scratch),
      [&](std::uint64_t i, const cuda::std::tuple<T...>& v) {
        cuda::std::tuple<T...> y5{};
        err += dp5_element(a.rhs, c0.params, c0.t, h, t_new, v, y5, a.k.rtol, a.k.atol, seq{});
        store_tuple(out, i, y5, seq{});
        if constexpr (coupling_reduces_v<Coupling>) acc.a = acc.a + contribution_of(a.coupling, i, y5, seq{});
      },
      seq{});
  acc.e0 = static_cast<double>(err);
  R total{};
  if (!last_block_total<Block, true>(acc, a.partials, &a.ctl->arrived, total)) return;
  if (threadIdx.x != 0) return;
  auto c = *a.ctl;
  if (coupled_decide(c, a.k, total.e0, a.coupling, total.a)) observe(a, c.accepted, c.t, c.params);
  *a.ctl = c;
  cudaGraphSetConditional(a.handle, c.done ? 0u : 1u);
}

/// After the last attempt: the state into the caller's arrays where it ended in the scratch ones,
/// and the statistics.
template <class Rhs, class Coupling, class... T>
__global__ void coupled_finish_kernel(coupled_args<Rhs, Coupling, T...> a) {
  const auto c = *a.ctl;
  if (blockIdx.x == 0 && threadIdx.x == 0 && a.stats != nullptr) *a.stats = stats_of(c);
  if (c.parity == 0) return;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n;
       i += stride)
    copy_element(a.y, a.scratch, i, cuda::std::index_sequence_for<T...>{});
}

}  // namespace spillway::ode::detail
