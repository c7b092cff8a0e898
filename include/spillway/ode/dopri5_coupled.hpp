// spillway/ode/dopri5_coupled.hpp — adaptive Dormand–Prince 5(4) for the coupled elementwise
// system of rk4_integrate_coupled: one state of n elements in one or more arrays, a right-hand side
// rhs(t, p, y..., dydt...) per element, and parameters p recomputed after every accepted step from a
// reduction of the new state (coupling.update(Σ contribution(i, y_new...), p)). One step size for
// the whole state; the error norm runs over every element, so a step is accepted or rejected as a
// whole. Plain C++ with SPILLWAY_HD: the element arithmetic, the first-step estimate and the
// accept/reject decision are shared by the device kernels (ode/adaptive_coupled.cuh) and the host
// implementation below (the tests' oracle), so both take the same decisions.
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/ode/config.hpp>
#include <spillway/ode/detail/checks.hpp>
#include <spillway/ode/dopri5.hpp>
#include <spillway/ode/rk4_element.hpp>
#include <spillway/ode/rk4_host.hpp>

#include <cuda/std/cmath>
#include <cuda/std/complex>
#include <cuda/std/limits>
#include <cuda/std/tuple>
#include <cuda/std/utility>

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace spillway::ode {

/// What a coupled adaptive integration did (the whole state shares one step size).
struct coupled_stats {
  double t = 0;  ///< the time reached (t1 on success)
  double h = 0;  ///< the step size the controller would take next (signed)
  std::uint64_t accepted = 0;
  std::uint64_t rejected = 0;
  solve_status status = solve_status::success;
};

namespace detail {

/// The job's constants, fixed by the options: what every pass reads.
struct coupled_constants {
  double t0, t1, dir, rtol, atol, h_max, h_min, eps;
  std::uint64_t max_steps;
  double components;  ///< state elements × arrays: the error norm's mean divides by it
  float safety, fac_min, fac_max, expo, beta;
  float est_scale;  ///< error_estimate_scale(adaptive_options::estimate)
};

/// The smallest-precision epsilon over the state's arrays (float if any array holds float).
template <class... T>
constexpr double coarsest_epsilon() {
  double e = 0;
  ((e = e > static_cast<double>(cuda::std::numeric_limits<real_of_t<T>>::epsilon())
            ? e
            : static_cast<double>(cuda::std::numeric_limits<real_of_t<T>>::epsilon())),
   ...);
  return e;
}

inline coupled_constants make_coupled_constants(double t0, double t1, const adaptive_options& o, double eps,
                                                std::uint64_t n, std::size_t arrays) {
  coupled_constants c{};
  c.t0 = t0;
  c.t1 = t1;
  c.dir = t1 >= t0 ? 1.0 : -1.0;
  c.rtol = std::fmax(o.rtol, 4 * eps);  // below 4 ε the estimate is rounding noise (dopri5.hpp)
  c.atol = o.atol;
  const double span = std::fabs(t1 - t0);
  c.h_max = o.h_max > 0 ? std::fmin(o.h_max, span) : span;
  c.h_min = o.h_min;
  c.eps = eps;
  c.max_steps = o.max_steps;
  c.components = static_cast<double>(n) * static_cast<double>(arrays);
  c.safety = static_cast<float>(o.safety);
  c.fac_min = static_cast<float>(o.fac_min);
  c.fac_max = static_cast<float>(o.fac_max);
  c.expo = 0.2f - 0.75f * static_cast<float>(o.beta);
  c.beta = static_cast<float>(o.beta);
  c.est_scale = error_estimate_scale(o.estimate);
  return c;
}

/// What the passes keep between kernels (device memory; a plain struct on the host).
template <class P>
struct coupled_control {
  P params;
  double t, h, err_prev;
  double dnf;  ///< the first-step estimate's ‖f(t0, y0)‖ between its two passes
  std::uint64_t accepted, rejected;
  unsigned arrived;  ///< blocks of the current pass that have published their partial
  unsigned parity;   ///< 0: the state is in the caller's arrays, 1: in the scratch arrays
  unsigned status;   ///< solve_status once done
  unsigned done;     ///< 1: no further step (every later pass returns at once)
  unsigned rejected_last;
};

template <class P>
SPILLWAY_HD void coupled_start(coupled_control<P>& c, const P& p0, double t0) {
  c.params = p0;
  c.t = t0;
  c.h = 0;
  c.err_prev = 1e-4;
  c.dnf = 0;
  c.accepted = c.rejected = 0;
  c.arrived = c.parity = c.rejected_last = 0;
  c.status = static_cast<unsigned>(solve_status::success);
  c.done = 0;
}

// Real coefficient times a state scalar (plus v): one fused multiply-add per real component.
template <class R>
SPILLWAY_HD R madd(R a, R k, R v) {
  return cuda::std::fma(a, k, v);
}
template <class R>
SPILLWAY_HD cuda::std::complex<R> madd(R a, const cuda::std::complex<R>& k, const cuda::std::complex<R>& v) {
  return {cuda::std::fma(a, k.real(), v.real()), cuda::std::fma(a, k.imag(), v.imag())};
}
template <class R>
SPILLWAY_HD R scaled(R a, R k) {
  return a * k;
}
template <class R>
SPILLWAY_HD cuda::std::complex<R> scaled(R a, const cuda::std::complex<R>& k) {
  return {a * k.real(), a * k.imag()};
}
/// max(|a|, |b|): for complex values one square root of the larger squared modulus (hypot where
/// that square overflows).
template <class R>
SPILLWAY_HD R larger_magnitude(R a, R b) {
  return cuda::std::fmax(cuda::std::fabs(a), cuda::std::fabs(b));
}
template <class R>
SPILLWAY_HD R larger_magnitude(const cuda::std::complex<R>& a, const cuda::std::complex<R>& b) {
  const R m2 = cuda::std::fmax(cuda::std::fma(a.real(), a.real(), a.imag() * a.imag()),
                               cuda::std::fma(b.real(), b.real(), b.imag() * b.imag()));
  if (m2 <= cuda::std::numeric_limits<R>::max()) return cuda::std::sqrt(m2);
  return cuda::std::fmax(cuda::std::hypot(a.real(), a.imag()), cuda::std::hypot(b.real(), b.imag()));
}
/// (|v| / sk)², computed as (v · (1/sk))² per real component (no underflow of sk²), in R.
template <class R>
SPILLWAY_HD R scaled_square(R v, R sk) {
  const R q = v / sk;
  return q * q;
}
template <class R>
SPILLWAY_HD R scaled_square(const cuda::std::complex<R>& v, R sk) {
  const R r = R(1) / sk, a = v.real() * r, b = v.imag() * r;
  return cuda::std::fma(a, a, b * b);
}

/// What one element's error sum is formed in: float when every array holds float (or complex
/// float), double otherwise.
template <class Tuple>
struct error_real;
template <class... T>
struct error_real<cuda::std::tuple<T...>> {
  using type = cuda::std::conditional_t<(cuda::std::is_same_v<real_of_t<T>, float> && ...), float, double>;
};
template <class Tuple>
using error_real_t = typename error_real<Tuple>::type;

/// v + c1 k1 + c2 k2 + ...: the coefficients (double, the step size already in them) cast to the
/// array's real type, one fused multiply-add per term and real component.
template <class T>
SPILLWAY_HD T lin(const T& v) {
  return v;
}
template <class T, class... Rest>
SPILLWAY_HD T lin(const T& v, double c, const T& k, const Rest&... rest) {
  return lin<T>(madd(static_cast<real_of_t<T>>(c), k, v), rest...);
}
/// c1 k1 + c2 k2 + ...
template <class T, class... Rest>
SPILLWAY_HD T wsum(double c, const T& k, const Rest&... rest) {
  return lin<T>(scaled(static_cast<real_of_t<T>>(c), k), rest...);
}

/// Σ over the arrays of (|v| / (atol + rtol · max(|a|, |b|)))² for one element (a complex value
/// counts once, by its modulus).
template <class Acc, class Tuple, cuda::std::size_t... I>
SPILLWAY_HD Acc scaled_sum(const Tuple& v, const Tuple& a, const Tuple& b, double rtol, double atol,
                           cuda::std::index_sequence<I...>) {
  using cuda::std::get;
  Acc s = 0;
  (
      [&] {
        using R = tuple_real_t<Tuple, I>;
        const R sk = static_cast<R>(atol) + static_cast<R>(rtol) * larger_magnitude(get<I>(a), get<I>(b));
        s += static_cast<Acc>(scaled_square(get<I>(v), sk));
      }(),
      ...);
  return s;
}

template <class Rhs, class P, class Tuple, cuda::std::size_t... I>
SPILLWAY_HD void call_rhs(const Rhs& rhs, double t, const P& p, const Tuple& y, Tuple& k,
                          cuda::std::index_sequence<I...>) {
  rhs(t, p, static_cast<const cuda::std::tuple_element_t<I, Tuple>&>(cuda::std::get<I>(y))...,
      cuda::std::get<I>(k)...);
}

/// coupling.contribution(i, y...) of one element held as a tuple.
template <class Coupling, class Tuple, cuda::std::size_t... I>
SPILLWAY_HD auto contribution_of(const Coupling& coupling, std::uint64_t i, const Tuple& v,
                                 cuda::std::index_sequence<I...>) {
  return coupling.contribution(i, cuda::std::get<I>(v)...);
}

/// Element-wise moves between the arrays' values and a tuple (no converting constructors: see
/// rk4_element.hpp).
template <class Tuple, cuda::std::size_t... I, class... T>
SPILLWAY_HD void tie_into(Tuple& v, cuda::std::index_sequence<I...>, const T&... y) {
  ((cuda::std::get<I>(v) = y), ...);
}
template <class Tuple, cuda::std::size_t... I, class... T>
SPILLWAY_HD void untie(const Tuple& v, cuda::std::index_sequence<I...>, T&... y) {
  ((y = cuda::std::get<I>(v)), ...);
}

/// The first-step estimate's second pass for one element: Σ ((f(t0 + h, y + h f0) − f0) / sk)²
/// with sk = atol + rtol |y| (h signed).
template <class Rhs, class P, class Tuple, cuda::std::size_t... I>
SPILLWAY_HD double first_step_difference(const Rhs& rhs, const P& p, double t0, double h, const Tuple& y,
                                         const coupled_constants& k, cuda::std::index_sequence<I...> seq) {
  using cuda::std::get;
  Tuple f0{}, f1{}, y1{};
  call_rhs(rhs, t0, p, y, f0, seq);
  ((get<I>(y1) = lin(get<I>(y), h, get<I>(f0))), ...);
  call_rhs(rhs, t0 + h, p, y1, f1, seq);
  ((get<I>(y1) = lin(get<I>(f1), -1.0, get<I>(f0))), ...);  // f1 − f0, exactly rounded
  return scaled_sum<double>(y1, y, y, k.rtol, k.atol, seq);
}

/// The first-step estimate's first pass for one element: Σ (y/sk)² and Σ (f0/sk)².
template <class Rhs, class P, class Tuple, cuda::std::size_t... I>
SPILLWAY_HD void first_step_norms(const Rhs& rhs, const P& p, double t0, const Tuple& y,
                                  const coupled_constants& k, double& sum_y, double& sum_f,
                                  cuda::std::index_sequence<I...> seq) {
  Tuple f0{};
  call_rhs(rhs, t0, p, y, f0, seq);
  sum_y += scaled_sum<double>(y, y, y, k.rtol, k.atol, seq);
  sum_f += scaled_sum<double>(f0, y, y, k.rtol, k.atol, seq);
}

/// One Dormand–Prince attempt of h from (t, y) for one element with the parameters p held over the
/// step: y5 (the 5th-order solution at t_new) and the element's Σ (|y5 − y4| / sk)² (in float for
/// a float state: the device sums a thread's elements in it, then the threads in double). Seven
/// right-hand sides (no FSAL: the parameters change after an accepted step).
template <class Rhs, class P, class Tuple, cuda::std::size_t... I>
SPILLWAY_HD error_real_t<Tuple> dp5_element(const Rhs& rhs, const P& p, double t, double h, double t_new,
                                            const Tuple& y, Tuple& y5, double rtol, double atol,
                                            cuda::std::index_sequence<I...> seq) {
  using cuda::std::get;
  const dp5_tableau<double> c = dp5_coefficients<double>(h);
  Tuple k1{}, k2{}, k3{}, k4{}, k5{}, k6{}, k7{}, yt{};
  call_rhs(rhs, t, p, y, k1, seq);
  ((get<I>(yt) = lin(get<I>(y), c.a21, get<I>(k1))), ...);
  call_rhs(rhs, t + h * 0.2, p, yt, k2, seq);
  ((get<I>(yt) = lin(get<I>(y), c.a31, get<I>(k1), c.a32, get<I>(k2))), ...);
  call_rhs(rhs, t + h * 0.3, p, yt, k3, seq);
  ((get<I>(yt) = lin(get<I>(y), c.a41, get<I>(k1), c.a42, get<I>(k2), c.a43, get<I>(k3))), ...);
  call_rhs(rhs, t + h * 0.8, p, yt, k4, seq);
  ((get<I>(yt) = lin(get<I>(y), c.a51, get<I>(k1), c.a52, get<I>(k2), c.a53, get<I>(k3), c.a54, get<I>(k4))),
   ...);
  call_rhs(rhs, t + h * (8.0 / 9.0), p, yt, k5, seq);
  ((get<I>(yt) = lin(get<I>(y), c.a61, get<I>(k1), c.a62, get<I>(k2), c.a63, get<I>(k3), c.a64, get<I>(k4),
                     c.a65, get<I>(k5))),
   ...);
  call_rhs(rhs, t_new, p, yt, k6, seq);
  ((get<I>(y5) = lin(get<I>(y), c.b1, get<I>(k1), c.b3, get<I>(k3), c.b4, get<I>(k4), c.b5, get<I>(k5), c.b6,
                     get<I>(k6))),
   ...);
  call_rhs(rhs, t_new, p, y5, k7, seq);
  // y5 − y4 = h Σ (b − b̂) k (the classic pair's weights, as dopri5_integrate).
  Tuple e{};
  ((get<I>(e) = wsum(h * (71.0 / 57600.0), get<I>(k1), h * (-71.0 / 16695.0), get<I>(k3), h * (71.0 / 1920.0),
                     get<I>(k4), h * (-17253.0 / 339200.0), get<I>(k5), h * (22.0 / 525.0), get<I>(k6),
                     h * (-1.0 / 40.0), get<I>(k7))),
   ...);
  return scaled_sum<error_real_t<Tuple>>(e, y, y5, rtol, atol, seq);
}

/// The attempt's step: h, or the rest of the way to t1 when that is shorter (then t_new = t1).
template <class P>
SPILLWAY_HD void attempt_span(const coupled_control<P>& c, const coupled_constants& k, double& h,
                              double& t_new, bool& last) {
  h = c.h;
  last = (c.t + h - k.t1) * k.dir >= 0;
  if (last) h = k.t1 - c.t;
  t_new = last ? k.t1 : c.t + h;
}

/// Stops the integration with `s` when the next attempt may not run: max_steps attempts made, or
/// a step below max(h_min, 16 ε |t|).
template <class P>
SPILLWAY_HD void check_next_attempt(coupled_control<P>& c, const coupled_constants& k) {
  if (c.done) return;
  if (c.accepted + c.rejected >= k.max_steps) {
    c.status = static_cast<unsigned>(solve_status::max_steps);
    c.done = 1;
  } else if (cuda::std::fabs(c.h) < cuda::std::fmax(k.h_min, 16 * k.eps * cuda::std::fabs(c.t))) {
    c.status = static_cast<unsigned>(solve_status::step_too_small);
    c.done = 1;
  }
}

/// Hairer's starting step, first half: from Σ (y/sk)² and Σ (f0/sk)² (sk = atol + rtol |y0|) the
/// trial step h_a, kept in c.h (magnitude), and ‖f0‖ in c.dnf.
template <class P>
SPILLWAY_HD void first_step_trial(coupled_control<P>& c, const coupled_constants& k, double sum_y,
                                  double sum_f) {
  const double dny = cuda::std::sqrt(sum_y / k.components), dnf = cuda::std::sqrt(sum_f / k.components);
  c.h = hairer_trial_step(dny, dnf, k.h_max);
  c.dnf = dnf;
}

/// Second half: from Σ ((f(t0 + h_a, y0 + h_a f0) − f0)/sk)² the starting step (signed in c.h).
template <class P>
SPILLWAY_HD void first_step_final(coupled_control<P>& c, const coupled_constants& k, double sum_df) {
  c.h = k.dir * hairer_starting_step(c.h, cuda::std::sqrt(sum_df / k.components) / c.h, c.dnf, k.h_max);
  check_next_attempt(c, k);
}

/// Accept or reject the attempt whose Σ (|y5 − y4| / sk)² over the state is `sum_err`, and choose
/// the next step (the controller of dopri5_integrate, in float). On acceptance the parameters
/// become coupling.update(total, p), c.parity flips (the caller swaps the state) and the result is
/// true: the caller records (c.accepted, c.t, c.params) in its observer.
template <class P, class Coupling, class A>
SPILLWAY_HD bool coupled_decide(coupled_control<P>& c, const coupled_constants& k, double sum_err,
                                const Coupling& coupling, const A& total) {
  double h = 0, t_new = 0;
  bool last = false;
  attempt_span(c, k, h, t_new, last);
  float err = k.est_scale * static_cast<float>(cuda::std::sqrt(sum_err / k.components));
  if (!(err == err) || !cuda::std::isfinite(err)) err = cuda::std::numeric_limits<float>::infinity();
  if (err <= 1.0f) {
    ++c.accepted;
    c.t = t_new;
    c.parity ^= 1u;
    if constexpr (coupling_reduces_v<Coupling>) c.params = coupling.update(total, c.params);
    if (last) {
      c.done = 1;
      c.status = static_cast<unsigned>(solve_status::success);
      return true;
    }
    const float fac = accepted_step_factor(err, static_cast<float>(c.err_prev), c.rejected_last != 0,
                                           k.safety, k.expo, k.beta, k.fac_min, k.fac_max);
    c.h = k.dir * cuda::std::fmin(cuda::std::fabs(c.h * static_cast<double>(fac)), k.h_max);
    c.err_prev = cuda::std::fmax(static_cast<double>(err), 1e-4);
    c.rejected_last = 0;
    check_next_attempt(c, k);
    return true;
  }
  ++c.rejected;
  c.h *= static_cast<double>(rejected_step_factor(err, k.safety, k.expo, k.fac_min));
  c.rejected_last = 1;
  check_next_attempt(c, k);
  return false;
}

template <class P>
SPILLWAY_HD coupled_stats stats_of(const coupled_control<P>& c) {
  coupled_stats s;
  s.t = c.t;
  s.h = c.h;
  s.accepted = c.accepted;
  s.rejected = c.rejected;
  s.status = static_cast<solve_status>(c.status);
  return s;
}

/// The options and observer buffers of a coupled adaptive job; messages name the value.
inline void check_coupled_adaptive(const char* who, double t0, double t1, const adaptive_options& o) {
  check_adaptive(who, t0, t1, o);
  if (o.fixed_dt > 0) {
    throw logic_error(std::string(who) + ": fixed_dt is " + num(o.fixed_dt) +
                      "; fixed steps of a coupled system are rk4_integrate_coupled's (give fixed_dt = 0)");
  }
}

}  // namespace detail

/// The observer of a coupled adaptive integration: the time and the parameters after every
/// accepted step. Entry 0 is (t0, p0), entry k the state after accepted step k; entries past the
/// spans' length are not written (coupled_stats::accepted says how many steps there were). Either
/// span may be empty; device memory for the device entry points.
template <class P>
struct coupled_observer {
  cuda::std::span<double> times;
  cuda::std::span<P> params;
};

namespace host {

/// The host implementation of ode::dopri5_integrate_coupled (ode/adaptive_coupled.cuh): the same
/// passes over the state, one element after another, sums in index order; the same decisions.
/// `y...` hold the initial state and receive the state reached. The tests' oracle and a fallback
/// with no GPU.
template <class Rhs, class Coupling, class... T>
coupled_stats dopri5_integrate_coupled(const Rhs& rhs, const Coupling& coupling,
                                       typename Coupling::param_type p0, double t0, double t1,
                                       const adaptive_options& o, std::vector<double>* times,
                                       std::vector<typename Coupling::param_type>* params,
                                       std::vector<T>&... y) {
  static_assert(sizeof...(T) >= 1, "the state needs at least one array");
  static_assert((is_state_scalar_v<T> && ...),
                "state arrays hold float, double or cuda::std::complex of them");
  using P = typename Coupling::param_type;
  using tuple_t = cuda::std::tuple<T...>;
  using seq = cuda::std::index_sequence_for<T...>;
  constexpr const char* who = "host::dopri5_integrate_coupled";
  ode::detail::check_coupled_adaptive(who, t0, t1, o);
  const std::uint64_t n = detail::common_size(who, y...);
  const auto k =
      ode::detail::make_coupled_constants(t0, t1, o, ode::detail::coarsest_epsilon<T...>(), n, sizeof...(T));
  ode::detail::coupled_control<P> c{};
  ode::detail::coupled_start(c, p0, t0);
  const auto record = [&](double t, const P& p) {
    if (times != nullptr) times->push_back(t);
    if (params != nullptr) params->push_back(p);
  };
  if (times != nullptr) times->clear();
  if (params != nullptr) params->clear();
  record(t0, p0);
  if (t1 == t0 || n == 0) return ode::detail::stats_of(c);

  std::vector<tuple_t> state(static_cast<std::size_t>(n)), next(static_cast<std::size_t>(n));
  for (std::uint64_t i = 0; i < n; ++i) ode::detail::tie_into(state[i], seq{}, y[i]...);
  if (o.h0 > 0) {
    c.h = k.dir * std::fmin(o.h0, k.h_max);
    ode::detail::check_next_attempt(c, k);
  } else {
    double sy = 0, sf = 0, sd = 0;
    for (std::uint64_t i = 0; i < n; ++i)
      ode::detail::first_step_norms(rhs, p0, t0, state[i], k, sy, sf, seq{});
    ode::detail::first_step_trial(c, k, sy, sf);
    for (std::uint64_t i = 0; i < n; ++i)
      sd += ode::detail::first_step_difference(rhs, p0, t0, k.dir * c.h, state[i], k, seq{});
    ode::detail::first_step_final(c, k, sd);
  }
  while (!c.done) {
    double h = 0, t_new = 0;
    bool last = false;
    ode::detail::attempt_span(c, k, h, t_new, last);
    double sum_err = 0;
    accum_of_t<Coupling> total{};
    for (std::uint64_t i = 0; i < n; ++i) {
      sum_err +=
          ode::detail::dp5_element(rhs, c.params, c.t, h, t_new, state[i], next[i], k.rtol, k.atol, seq{});
      if constexpr (coupling_reduces_v<Coupling>)
        total = total + ode::detail::contribution_of(coupling, i, next[i], seq{});
    }
    if (ode::detail::coupled_decide(c, k, sum_err, coupling, total)) {
      record(c.t, c.params);
      state.swap(next);
    }
  }
  for (std::uint64_t i = 0; i < n; ++i) ode::detail::untie(state[i], seq{}, y[i]...);
  return ode::detail::stats_of(c);
}

}  // namespace host

}  // namespace spillway::ode
