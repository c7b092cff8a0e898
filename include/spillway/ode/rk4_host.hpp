// spillway/ode/rk4_host.hpp — the host implementation of spillway's RK4 stepper: the same
// functions as the device API, on std::vector state, single-threaded and plain C++. It is the
// tests' oracle and the fallback the examples use on a machine with no GPU.
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/ode/config.hpp>
#include <spillway/ode/detail/checks.hpp>
#include <spillway/ode/rk4_element.hpp>

#include <cuda/std/array>
#include <cuda/std/tuple>

#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace spillway::ode::host {

namespace detail {
template <class... T>
inline std::uint64_t common_size(const char* who, const std::vector<T>&... y) {
  const std::uint64_t sizes[] = {static_cast<std::uint64_t>(y.size())...};
  for (std::size_t a = 1; a < sizeof...(T); ++a) ode::detail::check_same_size(who, sizes[0], sizes[a], a);
  return sizes[0];
}
}  // namespace detail

/// Advances the elementwise system `rhs(t, p, y..., dydt...)` by `steps` RK4 steps of dt from t0;
/// the arrays `y...` (equal sizes) hold the initial state and receive the final one.
template <class Rhs, class P, class... T>
void rk4_integrate(const Rhs& rhs, const P& p, double t0, double dt, std::uint64_t steps, std::vector<T>&... y) {
  static_assert(sizeof...(T) >= 1, "rk4_integrate needs at least one state array");
  static_assert((is_state_scalar_v<T> && ...), "state arrays hold float, double or cuda::std::complex of them");
  ode::detail::check_time("host::rk4_integrate", t0, dt);
  const std::uint64_t n = detail::common_size("host::rk4_integrate", y...);
  for (std::uint64_t s = 0; s < steps; ++s) {
    const double t = t0 + static_cast<double>(s) * dt;
    for (std::uint64_t i = 0; i < n; ++i) rk4_step_values(rhs, t, dt, p, y[i]...);
  }
}

/// The coupled form: after every step the parameters become
/// `coupling.update(sum_i coupling.contribution(i, y_new...), previous)`. Returns the parameter
/// trajectory: element 0 is p0, element s the parameters after step s (steps + 1 values).
/// The sum runs in index order in Coupling::accum_type.
template <class Rhs, class Coupling, class... T>
std::vector<typename Coupling::param_type> rk4_integrate_coupled(const Rhs& rhs, const Coupling& coupling,
                                                                 typename Coupling::param_type p0, double t0,
                                                                 double dt, std::uint64_t steps,
                                                                 std::vector<T>&... y) {
  static_assert(sizeof...(T) >= 1, "rk4_integrate_coupled needs at least one state array");
  static_assert((is_state_scalar_v<T> && ...), "state arrays hold float, double or cuda::std::complex of them");
  ode::detail::check_time("host::rk4_integrate_coupled", t0, dt);
  const std::uint64_t n = detail::common_size("host::rk4_integrate_coupled", y...);
  std::vector<typename Coupling::param_type> trajectory;
  trajectory.reserve(static_cast<std::size_t>(steps + 1));
  trajectory.push_back(p0);
  typename Coupling::param_type p = p0;
  for (std::uint64_t s = 0; s < steps; ++s) {
    const double t = t0 + static_cast<double>(s) * dt;
    for (std::uint64_t i = 0; i < n; ++i) rk4_step_values(rhs, t, dt, p, y[i]...);
    if constexpr (coupling_reduces_v<Coupling>) {
      typename Coupling::accum_type total{};
      for (std::uint64_t i = 0; i < n; ++i) total = total + coupling.contribution(i, y[i]...);
      p = coupling.update(total, p);
    }
    trajectory.push_back(p);
  }
  return trajectory;
}

/// Ensemble: `n` independent systems of dimension D; system i is `family(i)`, called as
/// `f(t, y, dydt)` on cuda::std::array<Real, D>. `state` is structure-of-arrays: component d of
/// system i at state[d * n + i] (initial in, final out). When save_every > 0 and `saved` is given,
/// after every save_every-th step j the state is appended: saved[((j / save_every - 1) * D + d) * n + i].
template <class Family, class Real, std::size_t D = Family::dimension>
void rk4_ensemble(const Family& family, Real t0, Real dt, std::uint64_t steps, std::uint64_t save_every,
                  std::vector<Real>& state, std::vector<Real>* saved = nullptr) {
  ode::detail::check_time("host::rk4_ensemble", static_cast<double>(t0), static_cast<double>(dt));
  if (state.size() % D != 0) {
    throw logic_error("host::rk4_ensemble: state has " + std::to_string(state.size()) +
                      " values, not a multiple of the dimension " + std::to_string(D));
  }
  const std::uint64_t n = state.size() / D;
  const std::uint64_t saves = save_every > 0 ? steps / save_every : 0;
  if (saved != nullptr) saved->assign(static_cast<std::size_t>(saves * D * n), Real(0));
  for (std::uint64_t i = 0; i < n; ++i) {
    const auto f = family(i);
    cuda::std::array<Real, D> y{};
    for (std::size_t d = 0; d < D; ++d) y[d] = state[d * n + i];
    for (std::uint64_t s = 0; s < steps; ++s) {
      rk4_step_array(f, t0 + static_cast<Real>(s) * dt, dt, y);
      if (saved != nullptr && save_every > 0 && (s + 1) % save_every == 0) {
        const std::uint64_t slot = (s + 1) / save_every - 1;
        for (std::size_t d = 0; d < D; ++d) (*saved)[(slot * D + d) * n + i] = y[d];
      }
    }
    for (std::size_t d = 0; d < D; ++d) state[d * n + i] = y[d];
  }
}

/// General (non-elementwise) RHS: `rhs(i, t, p, y_ptr..., dydt_i...)` computes the derivative of
/// element i and may read any element of the stage's arrays (stencils, gathers). Matches
/// ode::rk4_integrate_general_async.
template <class Rhs, class P, class... T>
void rk4_integrate_general(const Rhs& rhs, const P& p, double t0, double dt, std::uint64_t steps,
                           std::vector<T>&... y) {
  static_assert(sizeof...(T) >= 1, "rk4_integrate_general needs at least one state array");
  static_assert((is_state_scalar_v<T> && ...), "state arrays hold float, double or cuda::std::complex of them");
  ode::detail::check_time("host::rk4_integrate_general", t0, dt);
  const std::uint64_t n = detail::common_size("host::rk4_integrate_general", y...);
  const auto sz = static_cast<std::size_t>(n);
  std::tuple<std::vector<T>...> a{std::vector<T>(sz)...};
  std::tuple<std::vector<T>...> b{std::vector<T>(sz)...};
  std::tuple<std::vector<T>...> acc{std::vector<T>(sz)...};
  using seq = cuda::std::index_sequence_for<T...>;
  const auto ptrs = [](auto& tup) {
    return std::apply([](auto&... v) { return cuda::std::tuple<T*...>(v.data()...); }, tup);
  };
  const cuda::std::tuple<T*...> py(y.data()...);
  const auto pa = ptrs(a), pb = ptrs(b), pacc = ptrs(acc);
  for (std::uint64_t s = 0; s < steps; ++s) {
    const double t = t0 + static_cast<double>(s) * dt;
    for (std::uint64_t i = 0; i < n; ++i) ode::detail::general_stage_element<0>(rhs, p, t, dt, i, py, py, pa, pacc, seq{});
    for (std::uint64_t i = 0; i < n; ++i) ode::detail::general_stage_element<1>(rhs, p, t, dt, i, py, pa, pb, pacc, seq{});
    for (std::uint64_t i = 0; i < n; ++i) ode::detail::general_stage_element<2>(rhs, p, t, dt, i, py, pb, pa, pacc, seq{});
    for (std::uint64_t i = 0; i < n; ++i) ode::detail::general_stage_element<3>(rhs, p, t, dt, i, py, pa, pa, pacc, seq{});
  }
}

}  // namespace spillway::ode::host
