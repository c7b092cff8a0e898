// spillway/ode/rk4_element.hpp — one classical RK4 step of an elementwise system, for one element,
// shared by the fused kernels and the host implementation (so both evaluate identical arithmetic).
// Plain C++: no nvcc needed.
#pragma once

#include <spillway/ode/config.hpp>

#include <cuda/std/array>
#include <cuda/std/cstddef>
#include <cuda/std/cstdint>
#include <cuda/std/tuple>
#include <cuda/std/utility>

namespace spillway::ode {

namespace detail {

template <class Tuple, cuda::std::size_t I>
using tuple_real_t = real_of_t<cuda::std::tuple_element_t<I, Tuple>>;

/// One RK4 step of y (a tuple of state scalars) under `rhs(t, p, y..., dydt...)`.
/// The stage combination is k1 + 2 k2 + 2 k3 + k4 accumulated in the state's own precision.
template <class Rhs, class P, class Tuple, cuda::std::size_t... I>
SPILLWAY_HD inline void rk4_tuple_step(const Rhs& rhs, double t, double dt, const P& p, Tuple& y,
                                           cuda::std::index_sequence<I...>) {
  using cuda::std::get;
  Tuple k{};
  Tuple s{};
  Tuple acc{};
  const double half = 0.5 * dt;
  rhs(t, p, static_cast<const cuda::std::tuple_element_t<I, Tuple>&>(get<I>(y))..., get<I>(k)...);
  ((get<I>(acc) = get<I>(k)), ...);
  ((get<I>(s) = get<I>(y) + static_cast<tuple_real_t<Tuple, I>>(half) * get<I>(k)), ...);
  rhs(t + half, p, static_cast<const cuda::std::tuple_element_t<I, Tuple>&>(get<I>(s))..., get<I>(k)...);
  ((get<I>(acc) = get<I>(acc) + static_cast<tuple_real_t<Tuple, I>>(2) * get<I>(k)), ...);
  ((get<I>(s) = get<I>(y) + static_cast<tuple_real_t<Tuple, I>>(half) * get<I>(k)), ...);
  rhs(t + half, p, static_cast<const cuda::std::tuple_element_t<I, Tuple>&>(get<I>(s))..., get<I>(k)...);
  ((get<I>(acc) = get<I>(acc) + static_cast<tuple_real_t<Tuple, I>>(2) * get<I>(k)), ...);
  ((get<I>(s) = get<I>(y) + static_cast<tuple_real_t<Tuple, I>>(dt) * get<I>(k)), ...);
  rhs(t + dt, p, static_cast<const cuda::std::tuple_element_t<I, Tuple>&>(get<I>(s))..., get<I>(k)...);
  ((get<I>(y) = get<I>(y) + static_cast<tuple_real_t<Tuple, I>>(dt / 6.0) * (get<I>(acc) + get<I>(k))),
   ...);
}

// Element-wise moves in and out of the tuple (libcu++'s tuple converting constructors trip some
// host compilers when the first element is a class type such as complex).
template <class Rhs, class P, cuda::std::size_t... I, class... T>
SPILLWAY_HD inline void rk4_refs_step(const Rhs& rhs, double t, double dt, const P& p,
                                          cuda::std::index_sequence<I...> seq, T&... y) {
  cuda::std::tuple<T...> v{};
  ((cuda::std::get<I>(v) = y), ...);
  rk4_tuple_step(rhs, t, dt, p, v, seq);
  ((y = cuda::std::get<I>(v)), ...);
}

}  // namespace detail

/// Advances the values `y...` (one element of each state array) by one RK4 step of size dt from
/// time t. The right-hand side is called as `rhs(t, p, y..., dydt...)` with `const T&` states and
/// `T&` derivatives that it must all assign.
template <class Rhs, class P, class... T>
SPILLWAY_HD inline void rk4_step_values(const Rhs& rhs, double t, double dt, const P& p, T&... y) {
  detail::rk4_refs_step(rhs, t, dt, p, cuda::std::index_sequence_for<T...>{}, y...);
}

/// Advances a small system's state `y` (D values of Real) by one RK4 step. `f(t, y, dydt)` is the
/// system (for ensembles, the member returned by `family(i)`).
template <class F, class Real, cuda::std::size_t D>
SPILLWAY_HD inline void rk4_step_array(const F& f, Real t, Real dt, cuda::std::array<Real, D>& y) {
  cuda::std::array<Real, D> k{};
  cuda::std::array<Real, D> s{};
  cuda::std::array<Real, D> acc{};
  const Real half = dt * Real(0.5);
  f(t, static_cast<const cuda::std::array<Real, D>&>(y), k);
  for (cuda::std::size_t d = 0; d < D; ++d) {
    acc[d] = k[d];
    s[d] = y[d] + half * k[d];
  }
  f(t + half, static_cast<const cuda::std::array<Real, D>&>(s), k);
  for (cuda::std::size_t d = 0; d < D; ++d) {
    acc[d] = acc[d] + Real(2) * k[d];
    s[d] = y[d] + half * k[d];
  }
  f(t + half, static_cast<const cuda::std::array<Real, D>&>(s), k);
  for (cuda::std::size_t d = 0; d < D; ++d) {
    acc[d] = acc[d] + Real(2) * k[d];
    s[d] = y[d] + dt * k[d];
  }
  f(t + dt, static_cast<const cuda::std::array<Real, D>&>(s), k);
  const Real sixth = dt / Real(6);
  for (cuda::std::size_t d = 0; d < D; ++d) y[d] = y[d] + sixth * (acc[d] + k[d]);
}

namespace detail {

/// Stage `Stage` (0..3) of a general RK4 step for element i, where the right-hand side
/// `rhs(i, t, p, src_ptr..., dydt_i...)` may read any element of the stage's source arrays.
/// Stage 0 reads y and writes acc and dst; stages 1 and 2 read src (the previous stage's dst) and
/// write acc and dst; stage 3 reads src and updates y[i] in place (no other element of y is read
/// in stage 3, so the in-place write is safe). Shared by the kernels and the host implementation.
template <int Stage, class Rhs, class P, class... T, cuda::std::size_t... I>
SPILLWAY_HD inline void general_stage_element(const Rhs& rhs, const P& p, double t, double dt,
                                                  cuda::std::uint64_t i, const cuda::std::tuple<T*...>& y,
                                                  const cuda::std::tuple<T*...>& src,
                                                  const cuda::std::tuple<T*...>& dst,
                                                  const cuda::std::tuple<T*...>& acc,
                                                  cuda::std::index_sequence<I...>) {
  using cuda::std::get;
  cuda::std::tuple<T...> k{};
  const double ts = Stage == 0 ? t : (Stage == 3 ? t + dt : t + 0.5 * dt);
  rhs(i, ts, p, static_cast<const T*>(get<I>(src))..., get<I>(k)...);
  if constexpr (Stage == 0) {
    ((get<I>(acc)[i] = get<I>(k)), ...);
    ((get<I>(dst)[i] = get<I>(y)[i] + static_cast<real_of_t<T>>(0.5 * dt) * get<I>(k)), ...);
  } else if constexpr (Stage == 1 || Stage == 2) {
    ((get<I>(acc)[i] = get<I>(acc)[i] + static_cast<real_of_t<T>>(2) * get<I>(k)), ...);
    ((get<I>(dst)[i] = get<I>(y)[i] + static_cast<real_of_t<T>>(Stage == 1 ? 0.5 * dt : dt) * get<I>(k)), ...);
  } else {
    ((get<I>(y)[i] = get<I>(y)[i] + static_cast<real_of_t<T>>(dt / 6.0) * (get<I>(acc)[i] + get<I>(k))), ...);
  }
}

}  // namespace detail

}  // namespace spillway::ode
