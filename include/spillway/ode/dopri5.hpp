// spillway/ode/dopri5.hpp — adaptive Dormand–Prince 5(4) for one small system whose state lives in
// registers: embedded error estimate, per-trajectory step control (mixed absolute / relative
// tolerances, PI controller), step bounds, a cap on attempted steps with a status, and dense
// output (the method's continuous extension of order 4) at requested times. Plain C++ with
// SPILLWAY_HD: the host implementation (the tests' oracle) and the ensemble kernel
// (ode/adaptive.cuh) run this very code, one trajectory per call / per thread.
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/ode/config.hpp>
#include <spillway/ode/detail/checks.hpp>

#include <cuda/std/array>
#include <cuda/std/cmath>
#include <cuda/std/limits>
#include <cuda/std/span>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace spillway::ode {

/// How a trajectory's integration ended.
enum class solve_status : std::uint8_t {
  success = 0,         ///< reached t1
  max_steps = 1,       ///< adaptive_options::max_steps attempted steps without reaching t1
  step_too_small = 2,  ///< the controller asked for a step below the floor (see adaptive_options::h_min)
  not_finite = 3       ///< a fixed-step run ended with a non-finite state
};

inline const char* to_string(solve_status s) noexcept {
  switch (s) {
    case solve_status::success:
      return "success";
    case solve_status::max_steps:
      return "max_steps";
    case solve_status::step_too_small:
      return "step_too_small";
    case solve_status::not_finite:
      return "not_finite";
  }
  return "unknown";
}

/// Which embedded 4th-order solution y4 measures a step's error y5 − y4. Both are order-4
/// embeddings of the same 5th-order step (same stages, same y5); they differ only in size:
/// Shampine's is exactly 2/3 of Dormand and Prince's, so at equal tolerances it steps as the
/// classic pair does at 1.5 times them.
enum class dp5_error_estimate : std::uint8_t {
  /// b̂ = 5179/57600, 0, 7571/16695, 393/640, −92097/339200, 187/2100, 1/40 (Dormand & Prince 1980):
  /// Hairer's DOPRI5, SciPy's RK45, MATLAB's ode45, OrdinaryDiffEq's DP5.
  dormand_prince = 0,
  /// b̂ = 1951/21600, 0, 22642/50085, 451/720, −12231/42400, 649/6300, 1/60 (torchdiffeq's
  /// "Dormand–Prince–Shampine" tableau): diffrax's Dopri5, torchdiffeq's dopri5,
  /// jax.experimental.ode.odeint. With beta = 0 (their plain controller) a job steps as diffrax
  /// does at the same tolerances (docs/ode.md).
  shampine = 1
};

/// Step control of the adaptive methods. Error norm of a step (Hairer, Nørsett & Wanner II.4):
/// sqrt(mean_d ((y5_d − y4_d) / (atol + rtol · max(|y_d|, |y5_d|)))²); a step is accepted when it
/// is ≤ 1. A relative tolerance below 4 ε of the state's type (float 4.8·10⁻⁷, double 8.9·10⁻¹⁶)
/// is raised to 4 ε: below it the error estimate is rounding noise and the controller would shrink
/// the step until it stalls. atol = 0 needs states that stay away from zero.
struct adaptive_options {
  double rtol = 1e-6;
  double atol = 1e-6;
  double h0 = 0;     ///< first step (magnitude); 0: estimated from the problem (Hairer's starting step)
  double h_min = 0;  ///< a step below max(h_min, 16 ε |t|) in magnitude stops with step_too_small
  double h_max = 0;  ///< largest step (magnitude); 0: |t1 − t0|
  std::uint64_t max_steps = 100000;  ///< attempted steps per trajectory (accepted + rejected)
  /// > 0: fixed steps of this size with the 5th-order solution (no error control, the last step
  /// shortened to land on t1; every step counts as accepted).
  double fixed_dt = 0;
  double safety = 0.9;   ///< the new step is safety · err^(−1/5 + 0.75 β) · err_prev^β times the old
  double fac_min = 0.2;  ///< bounds on that factor (after a rejection it is at most 1)
  double fac_max = 10.0;
  double beta = 0.04;  ///< PI stabilization (Hairer's DOPRI5 value; 0: the plain controller)
  dp5_error_estimate estimate = dp5_error_estimate::dormand_prince;  ///< which y4 the error compares with
};

/// What one trajectory's integration did.
struct trajectory_stats {
  std::uint32_t accepted = 0;
  std::uint32_t rejected = 0;
  solve_status status = solve_status::success;
  double t = 0;  ///< the time reached (t1 on success)
};

/// The optional outputs of an ensemble integration (device memory for the device entry points,
/// host memory for host::dopri5_ensemble); each empty, or sized as stated for n systems of D.
template <class Real>
struct ensemble_outputs {
  cuda::std::span<const Real> save_times;  ///< m times in the direction of integration, in [t0, t1]
  cuda::std::span<Real> saved;  ///< ≥ m·D·n: component d of system i at time k → [(k D + d) n + i]
  cuda::std::span<std::uint32_t> accepted;  ///< n: accepted steps per system
  cuda::std::span<std::uint32_t> rejected;  ///< n: rejected steps per system
  cuda::std::span<std::uint8_t> status;     ///< n: each system's solve_status
};

namespace detail {

/// Rejects options no integration can run with; messages name the offending value.
inline void check_adaptive(const char* who, double t0, double t1, const adaptive_options& o) {
  const std::string w(who);
  if (!std::isfinite(t0)) throw logic_error(w + ": t0 must be finite, got " + num(t0));
  if (!std::isfinite(t1)) throw logic_error(w + ": t1 must be finite, got " + num(t1));
  if (!(o.rtol >= 0) || !std::isfinite(o.rtol))
    throw logic_error(w + ": rtol must be finite and >= 0, got " + num(o.rtol));
  if (!(o.atol >= 0) || !std::isfinite(o.atol))
    throw logic_error(w + ": atol must be finite and >= 0, got " + num(o.atol));
  if (o.rtol == 0 && o.atol == 0)
    throw logic_error(w + ": rtol and atol are both 0; give at least one tolerance");
  if (!(o.h0 >= 0) || !std::isfinite(o.h0))
    throw logic_error(w + ": h0 must be finite and >= 0, got " + num(o.h0));
  if (!(o.h_min >= 0) || !std::isfinite(o.h_min))
    throw logic_error(w + ": h_min must be finite and >= 0, got " + num(o.h_min));
  if (!(o.h_max >= 0) || !std::isfinite(o.h_max))
    throw logic_error(w + ": h_max must be finite and >= 0, got " + num(o.h_max));
  if (o.h_max > 0 && o.h_min > o.h_max) {
    throw logic_error(w + ": h_min " + num(o.h_min) + " exceeds h_max " + num(o.h_max));
  }
  if (o.max_steps == 0) throw logic_error(w + ": max_steps must be >= 1, got 0");
  if (!(o.fixed_dt >= 0) || !std::isfinite(o.fixed_dt)) {
    throw logic_error(w + ": fixed_dt must be finite and >= 0 (0: adaptive), got " + num(o.fixed_dt));
  }
  if (!(o.safety > 0 && o.safety <= 1))
    throw logic_error(w + ": safety must be in (0, 1], got " + num(o.safety));
  if (!(o.fac_min > 0 && o.fac_min <= 1))
    throw logic_error(w + ": fac_min must be in (0, 1], got " + num(o.fac_min));
  if (!(o.fac_max >= 1) || !std::isfinite(o.fac_max))
    throw logic_error(w + ": fac_max must be finite and >= 1, got " + num(o.fac_max));
  if (!(o.beta >= 0 && o.beta < 0.2)) throw logic_error(w + ": beta must be in [0, 0.2), got " + num(o.beta));
  if (o.estimate != dp5_error_estimate::dormand_prince && o.estimate != dp5_error_estimate::shampine) {
    throw logic_error(w + ": estimate must be dormand_prince or shampine, got " +
                      std::to_string(static_cast<int>(o.estimate)));
  }
}

/// Save times: `m` values in the direction of integration (non-decreasing for t1 ≥ t0,
/// non-increasing otherwise), each within [t0, t1].
template <class Real>
inline void check_save_times(const char* who, double t0, double t1, const Real* times, std::uint64_t m) {
  const double dir = t1 >= t0 ? 1.0 : -1.0;
  for (std::uint64_t k = 0; k < m; ++k) {
    const double t = static_cast<double>(times[k]);
    if (!std::isfinite(t) || (t - t0) * dir < 0 || (t - t1) * dir > 0) {
      throw logic_error(std::string(who) + ": save time " + std::to_string(k) + " is " + num(t) +
                        ", outside [" + num(t0) + ", " + num(t1) + "]");
    }
    if (k > 0 && (t - static_cast<double>(times[k - 1])) * dir < 0) {
      throw logic_error(std::string(who) + ": save times must follow the direction of integration; time " +
                        std::to_string(k) + " (" + num(t) + ") comes after " +
                        num(static_cast<double>(times[k - 1])));
    }
  }
}

/// The sizes of an ensemble's state and outputs (the save times' values: check_save_times).
template <class Real>
inline void check_ensemble(const char* who, std::uint64_t state_size, std::size_t dim,
                           const ensemble_outputs<Real>& out) {
  const std::string w(who);
  if (state_size % dim != 0) {
    throw logic_error(w + ": state has " + std::to_string(state_size) +
                      " values, not a multiple of the dimension " + std::to_string(dim));
  }
  const std::uint64_t n = state_size / dim, m = out.save_times.size();
  if (m > 0 && out.saved.size() / dim / (n > 0 ? n : 1) < m) {
    throw logic_error(w + ": " + std::to_string(m) + " save times for " + std::to_string(n) + " systems of " +
                      std::to_string(dim) + " need " + std::to_string(m * dim * n) +
                      " saved values, saved holds " + std::to_string(out.saved.size()));
  }
  if (m == 0 && !out.saved.empty()) throw logic_error(w + ": saved is given but save_times is empty");
  auto per_system = [&](std::size_t size, const char* name) {
    if (size != 0 && size < n) {
      throw logic_error(w + ": " + name + " holds " + std::to_string(size) + " values for " +
                        std::to_string(n) + " systems");
    }
  };
  per_system(out.accepted.size(), "accepted");
  per_system(out.rejected.size(), "rejected");
  per_system(out.status.size(), "status");
}

template <class Real, std::size_t D>
using state_t = cuda::std::array<Real, D>;

/// The mixed-tolerance RMS norm of v scaled by atol + rtol · max(|a|, |b|), in `Out`: the state's
/// type for the starting step, float for a step's error (the accept decision and the step factor
/// need a few digits, and float division and sqrt cost a fraction of double's; a double component
/// whose scale is below 1e-30 is divided in double, its float image would underflow). A double
/// state's error on the device multiplies by the hardware's approximate reciprocal instead
/// (measured: adaptive double Lorenz 11.1 → 9.97 ms, the same steps; docs/ode.md).
template <class Out, class Real, std::size_t D>
SPILLWAY_HD Out scaled_rms(const state_t<Real, D>& v, const state_t<Real, D>& a, const state_t<Real, D>& b,
                           Real rtol, Real atol) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<Out, float> && std::is_same_v<Real, double>) {
    // A double state's error on the device: v times the hardware's approximate reciprocal of the
    // scale (MUFU, ~2^-23 relative), squares summed in double, one conversion to float for the root
    // (a conversion costs four FP64 operations' issue; the float path took two per component).
    double s = 0;
    for (std::size_t d = 0; d < D; ++d) {
      const double sk = atol + rtol * cuda::std::fmax(cuda::std::fabs(a[d]), cuda::std::fabs(b[d]));
      double r;
      asm("rcp.approx.ftz.f64 %0, %1;" : "=d"(r) : "d"(sk));
      const double q = v[d] * r;
      s = cuda::std::fma(q, q, s);
    }
    return cuda::std::sqrt(static_cast<float>(s) / static_cast<float>(D));
  }
#endif
  Out s = 0;
  for (std::size_t d = 0; d < D; ++d) {
    const Real sk = atol + rtol * cuda::std::fmax(cuda::std::fabs(a[d]), cuda::std::fabs(b[d]));
    const Out q = (sizeof(Out) >= sizeof(Real) || sk < Real(1e-30))
                      ? static_cast<Out>(v[d] / sk)
                      : static_cast<Out>(v[d]) / static_cast<Out>(sk);
    s += q * q;
  }
  return cuda::std::sqrt(s / static_cast<Out>(D));
}

/// a^x for the step controller (a > 0, a few digits suffice): the hardware's log2 and exp2 on the
/// device, the library's on the host.
SPILLWAY_HD inline float controller_pow(float a, float x) {
#if defined(__CUDA_ARCH__)
  return exp2f(x * __log2f(a));
#else
  return cuda::std::pow(a, x);
#endif
}

// The step control shared by the ensemble's loop (dopri5_run) and the coupled system's decisions
// (ode/dopri5_coupled.hpp).

/// The factor that turns the classic estimate y5 − y4 (the loops compute Dormand and Prince's
/// b − b̂) into the one `e` asks for: Shampine's b − b̂ is exactly 2/3 of it, weight by weight
/// (71/86400 against 71/57600 for k1, …, −1/60 against −1/40 for k7; tests/ode check it).
SPILLWAY_HD inline float error_estimate_scale(dp5_error_estimate e) {
  return e == dp5_error_estimate::shampine ? 2.0f / 3.0f : 1.0f;
}

/// The next step's factor after an accepted step: safety · err^(−expo) · err_prev^β (err = 0, an
/// exact step, gives fac_max), within [fac_min, fac_max] and at most 1 right after a rejection.
SPILLWAY_HD inline float accepted_step_factor(float err, float err_prev, bool rejected_last, float safety,
                                              float expo, float beta, float fac_min, float fac_max) {
  const float fac =
      err > 0.0f ? safety * controller_pow(err, -expo) * controller_pow(err_prev, beta) : fac_max;
  return cuda::std::fmin(rejected_last ? 1.0f : fac_max, cuda::std::fmax(fac_min, fac));
}

/// The factor of the retried step after a rejection: max(fac_min, safety · err^(−expo)).
SPILLWAY_HD inline float rejected_step_factor(float err, float safety, float expo, float fac_min) {
  return cuda::std::fmax(fac_min, safety * controller_pow(err, -expo));
}

/// Hairer's starting step, first half: the trial step from the norms of y0 and f(t0, y0).
template <class Real>
SPILLWAY_HD Real hairer_trial_step(Real dny, Real dnf, Real h_max) {
  const Real h = (dnf <= Real(1e-5) || dny <= Real(1e-5)) ? Real(1e-6) : Real(0.01) * dny / dnf;
  return cuda::std::fmin(h, h_max);
}

/// Second half: the starting step from the trial step h, the difference quotient's norm der2 and
/// ‖f(t0, y0)‖ (magnitude).
template <class Real>
SPILLWAY_HD Real hairer_starting_step(Real h, Real der2, Real dnf, Real h_max) {
  const Real der12 = cuda::std::fmax(cuda::std::fabs(der2), dnf);
  const Real h1 = der12 <= Real(1e-15) ? cuda::std::fmax(Real(1e-6), h * Real(1e-3))
                                       : cuda::std::pow(Real(0.01) / der12, Real(0.2));
  return cuda::std::fmin(cuda::std::fmin(Real(100) * h, h1), h_max);
}

/// Hairer's starting step for an order-5 method (one extra right-hand side evaluation).
template <class Real, std::size_t D, class F>
SPILLWAY_HD Real dopri5_first_step(const F& f, Real t, const state_t<Real, D>& y, const state_t<Real, D>& f0,
                                   Real dir, Real rtol, Real atol, Real h_max) {
  const Real dnf = scaled_rms<Real, Real, D>(f0, y, y, rtol, atol);
  const Real dny = scaled_rms<Real, Real, D>(y, y, y, rtol, atol);
  const Real h = hairer_trial_step(dny, dnf, h_max);
  state_t<Real, D> y1, f1, df;
  for (std::size_t d = 0; d < D; ++d) y1[d] = y[d] + dir * h * f0[d];
  f(t + dir * h, y1, f1);
  for (std::size_t d = 0; d < D; ++d) df[d] = f1[d] - f0[d];
  return hairer_starting_step(h, scaled_rms<Real, Real, D>(df, y, y, rtol, atol) / h, dnf, h_max);
}

/// A save callback that keeps nothing.
struct no_saves {
  template <class Real, std::size_t D>
  SPILLWAY_HD void operator()(std::uint64_t, const state_t<Real, D>&) const {}
};

}  // namespace detail

namespace detail {

/// v + a1 k1 + a2 k2 + ... as a chain of fused multiply-adds (one per term).
template <class Real>
SPILLWAY_HD Real fma_chain(Real v) {
  return v;
}
template <class Real, class... R>
SPILLWAY_HD Real fma_chain(Real v, Real a, Real k, R... rest) {
  return fma_chain<Real>(cuda::std::fma(a, k, v), rest...);
}

/// a1 k1 + a2 k2 + ...: one multiply, then a fused multiply-add per further term (explicit: the
/// compiler contracts a sum of products but not a difference, and host and device round alike).
template <class Real, class... R>
SPILLWAY_HD Real weighted_sum(Real a, Real k, R... rest) {
  return fma_chain<Real>(a * k, rest...);
}

/// The Dormand–Prince 5(4) coefficients a (stages) and b (the 5th-order weights; b2 = b7 = 0),
/// each times `h`: h = 1 gives the tableau (combinations y + h Σ a k, a step size that changes),
/// h = dt the fixed step's (combinations y + Σ (dt a) k: one fused multiply-add per term, the
/// products formed once per job).
template <class Real>
struct dp5_tableau {
  Real a21, a31, a32, a41, a42, a43, a51, a52, a53, a54, a61, a62, a63, a64, a65, b1, b3, b4, b5, b6;
};
template <class Real>
SPILLWAY_HD dp5_tableau<Real> dp5_coefficients(Real h) {
  const auto q = [h](Real p, Real r) { return h * (p / r); };
  return {q(1, 5),       q(3, 40),       q(9, 40),        q(44, 45),      q(-56, 15),
          q(32, 9),      q(19372, 6561), q(-25360, 2187), q(64448, 6561), q(-212, 729),
          q(9017, 3168), q(-355, 33),    q(46732, 5247),  q(49, 176),     q(-5103, 18656),
          q(35, 384),    q(500, 1113),   q(125, 192),     q(-2187, 6784), q(11, 84)};
}

/// The stages of one Dormand–Prince step of h from (t, y) with k1 = f(t, y) (c = 1/5, 3/10, 4/5,
/// 8/9, 1, 1): the 5th-order solution y5 at t_new (= t + h, or t1 exactly on the last step) and
/// k7 = f(t_new, y5), which is the next step's k1 (FSAL). k2 is scratch. `T`: the tableau times h
/// when Scaled (fixed steps), else the tableau itself.
template <bool Scaled, class Real, std::size_t D, class F>
SPILLWAY_HD void dp5_stages(const F& f, const dp5_tableau<Real>& T, Real t, Real h, Real t_new,
                            const state_t<Real, D>& y, const state_t<Real, D>& k1, state_t<Real, D>& k2,
                            state_t<Real, D>& k3, state_t<Real, D>& k4, state_t<Real, D>& k5,
                            state_t<Real, D>& k6, state_t<Real, D>& k7, state_t<Real, D>& y5) {
  const auto comb = [h](Real v, auto... ak) {
    if constexpr (Scaled) {
      return fma_chain<Real>(v, ak...);
    } else {
      return v + h * weighted_sum<Real>(ak...);
    }
  };
  state_t<Real, D> yt;
  for (std::size_t d = 0; d < D; ++d) yt[d] = comb(y[d], T.a21, k1[d]);
  f(t + h * Real(0.2), yt, k2);
  for (std::size_t d = 0; d < D; ++d) yt[d] = comb(y[d], T.a31, k1[d], T.a32, k2[d]);
  f(t + h * Real(0.3), yt, k3);
  for (std::size_t d = 0; d < D; ++d) yt[d] = comb(y[d], T.a41, k1[d], T.a42, k2[d], T.a43, k3[d]);
  f(t + h * Real(0.8), yt, k4);
  for (std::size_t d = 0; d < D; ++d)
    yt[d] = comb(y[d], T.a51, k1[d], T.a52, k2[d], T.a53, k3[d], T.a54, k4[d]);
  f(t + h * (Real(8) / Real(9)), yt, k5);
  for (std::size_t d = 0; d < D; ++d)
    yt[d] = comb(y[d], T.a61, k1[d], T.a62, k2[d], T.a63, k3[d], T.a64, k4[d], T.a65, k5[d]);
  f(t_new, yt, k6);
  for (std::size_t d = 0; d < D; ++d)
    y5[d] = comb(y[d], T.b1, k1[d], T.b3, k3[d], T.b4, k4[d], T.b5, k5[d], T.b6, k6[d]);
  f(t_new, y5, k7);
}

/// Dense output of an accepted step (t → t_new, size h) at the save times in (t, t_new]: Hairer's
/// continuous extension of DOPRI5 (order 4); a save time that is the step's end gets y5 itself.
/// Advances `next`.
template <class Real, std::size_t D, class Save>
SPILLWAY_HD void dp5_dense(const Save& save, const Real* save_times, std::uint64_t m, std::uint64_t& next,
                           Real dir, Real t, Real t_new, Real h, const state_t<Real, D>& y,
                           const state_t<Real, D>& y5, const state_t<Real, D>& k1, const state_t<Real, D>& k3,
                           const state_t<Real, D>& k4, const state_t<Real, D>& k5, const state_t<Real, D>& k6,
                           const state_t<Real, D>& k7) {
  if (!(next < m && (save_times[next] - t_new) * dir <= 0)) return;
  state_t<Real, D> r2, r3, r4, r5;
  for (std::size_t d = 0; d < D; ++d) {
    r2[d] = y5[d] - y[d];
    r3[d] = h * k1[d] - r2[d];
    r4[d] = r2[d] - h * k7[d] - r3[d];
    r5[d] = h * (Real(-12715105075.0 / 11282082432.0) * k1[d] + Real(87487479700.0 / 32700410799.0) * k3[d] +
                 Real(-10690763975.0 / 1880347072.0) * k4[d] + Real(701980252875.0 / 199316789632.0) * k5[d] +
                 Real(-1453857185.0 / 822651844.0) * k6[d] + Real(69997945.0 / 29380423.0) * k7[d]);
  }
  while (next < m && (save_times[next] - t_new) * dir <= 0) {
    if (save_times[next] == t_new) {
      save(next++, y5);
      continue;
    }
    const Real th = (save_times[next] - t) / h, th1 = Real(1) - th;
    state_t<Real, D> ys;
    for (std::size_t d = 0; d < D; ++d)
      ys[d] = y[d] + th * (r2[d] + th1 * (r3[d] + th * (r4[d] + th1 * r5[d])));
    save(next++, ys);
  }
}

/// Fixed steps of the tableau (adaptive_options::fixed_dt): step k ends at t0 + k dt (no
/// accumulated rounding), the last at t1; no error control, no per-step checks but the saves.
/// A non-finite state at the end is reported as not_finite.
template <class Real, std::size_t D, class F, class Save>
SPILLWAY_HD trajectory_stats dp5_fixed(const F& f, Real t0, Real t1, state_t<Real, D>& y,
                                       const adaptive_options& o, const Real* save_times, std::uint64_t m,
                                       std::uint64_t next, const Save& save) {
  trajectory_stats r;
  const Real dir = t1 > t0 ? Real(1) : Real(-1);
  const auto n = static_cast<std::uint64_t>(
      cuda::std::ceil(static_cast<double>(cuda::std::fabs(t1 - t0)) / o.fixed_dt - 1e-9));
  const std::uint64_t steps = n < o.max_steps ? n : o.max_steps;
  const Real h0 = dir * static_cast<Real>(o.fixed_dt);
  const dp5_tableau<Real> T0 = dp5_coefficients<Real>(h0);  // every step but a shortened last one
  state_t<Real, D> k1, k2, k3, k4, k5, k6, k7, y5;
  f(t0, y, k1);
  Real t = t0;
  // Steps of exactly h0 (t_new − t would differ from it by rounding and cost the tableau's
  // products every step), then the last, which lands on t1, with its own.
  const auto step = [&](const dp5_tableau<Real>& T, Real h, Real t_new) {
    dp5_stages<true, Real, D>(f, T, t, h, t_new, y, k1, k2, k3, k4, k5, k6, k7, y5);
    dp5_dense<Real, D>(save, save_times, m, next, dir, t, t_new, h, y, y5, k1, k3, k4, k5, k6, k7);
    y = y5;
    k1 = k7;
    t = t_new;
  };
  const std::uint64_t regular = steps < n ? steps : n - 1;
  for (std::uint64_t k = 0; k < regular; ++k) step(T0, h0, t0 + static_cast<Real>(k + 1) * h0);
  if (steps == n) step(dp5_coefficients<Real>(t1 - t), t1 - t, t1);
  r.accepted = static_cast<std::uint32_t>(steps);
  r.t = static_cast<double>(t);
  if (steps < n) r.status = solve_status::max_steps;
  for (std::size_t d = 0; d < D; ++d)
    if (!cuda::std::isfinite(y[d])) r.status = solve_status::not_finite;
  return r;
}

}  // namespace detail

namespace detail {

/// True when adaptive_options::h_max bounds the steps below the whole span |t1 − t0|.
inline SPILLWAY_HD bool steps_bounded(const adaptive_options& o, double t0, double t1) {
  return o.h_max > 0 && o.h_max < cuda::std::fabs(t1 - t0);
}

/// The adaptive integration of dopri5_integrate. Bounded: every new step is held to h_max (the
/// ensemble kernel is instantiated for each, so the common unbounded case keeps the loop it had
/// before the bound: measured 26.9 / 11.1 ms against 27.9 / 11.7 ms with the bound compiled in,
/// fixed-step float / adaptive double, ode_bench, H200).
template <bool Bounded, class Real, std::size_t D, class F, class Save>
SPILLWAY_HD trajectory_stats dopri5_run(const F& f, Real t0, Real t1, cuda::std::array<Real, D>& y,
                                        const adaptive_options& o, const Real* save_times, std::uint64_t m,
                                        const Save& save) {
  using st = state_t<Real, D>;
  constexpr Real eps = cuda::std::numeric_limits<Real>::epsilon();
  trajectory_stats r;
  r.t = static_cast<double>(t0);
  std::uint64_t next = 0;  // the next save time
  while (next < m && save_times[next] == t0) save(next++, y);
  if (t1 == t0) return r;
  if (o.fixed_dt > 0) return dp5_fixed<Real, D>(f, t0, t1, y, o, save_times, m, next, save);
  const Real dir = t1 > t0 ? Real(1) : Real(-1);
  const Real rtol = cuda::std::fmax(static_cast<Real>(o.rtol), Real(4) * eps);
  const Real atol = static_cast<Real>(o.atol);
  const Real span = cuda::std::fabs(t1 - t0);
  const Real h_max = o.h_max > 0 ? cuda::std::fmin(static_cast<Real>(o.h_max), span) : span;
  // The controller works in float (detail::scaled_rms<float>, controller_pow).
  const float expo = 0.2f - 0.75f * static_cast<float>(o.beta);
  const float beta = static_cast<float>(o.beta);
  const float safety = static_cast<float>(o.safety), fac_min = static_cast<float>(o.fac_min);
  const float fac_max = static_cast<float>(o.fac_max);
  const float est_scale = error_estimate_scale(o.estimate);
  const Real h_min = static_cast<Real>(o.h_min);

  const detail::dp5_tableau<Real> T = detail::dp5_coefficients<Real>(Real(1));
  st k1, k2, k3, k4, k5, k6, k7, y5;
  f(t0, y, k1);
  Real h = o.h0 > 0 ? cuda::std::fmin(static_cast<Real>(o.h0), h_max)
                    : detail::dopri5_first_step<Real, D>(f, t0, y, k1, dir, rtol, atol, h_max);
  h *= dir;
  Real t = t0;
  float err_prev = 1e-4f;
  bool rejected_last = false;
  for (;;) {
    if (static_cast<std::uint64_t>(r.accepted) + r.rejected >= o.max_steps) {
      r.status = solve_status::max_steps;
      break;
    }
    if (cuda::std::fabs(h) < cuda::std::fmax(h_min, Real(16) * eps * cuda::std::fabs(t))) {
      r.status = solve_status::step_too_small;
      break;
    }
    const bool last = (t + h - t1) * dir >= 0;
    if (last) h = t1 - t;
    const Real t_new = last ? t1 : t + h;
    detail::dp5_stages<false, Real, D>(f, T, t, h, t_new, y, k1, k2, k3, k4, k5, k6, k7, y5);
    st e;  // y5 − y4 = h Σ (b − b̂) k
    for (std::size_t d = 0; d < D; ++d)
      e[d] = h * detail::weighted_sum<Real>(Real(71) / Real(57600), k1[d], Real(-71) / Real(16695), k3[d],
                                            Real(71) / Real(1920), k4[d], Real(-17253) / Real(339200), k5[d],
                                            Real(22) / Real(525), k6[d], Real(-1) / Real(40), k7[d]);
    float err = est_scale * detail::scaled_rms<float, Real, D>(e, y, y5, rtol, atol);
    if (!(err == err) || !cuda::std::isfinite(err)) err = cuda::std::numeric_limits<float>::infinity();
    if (err <= 1.0f) {
      detail::dp5_dense<Real, D>(save, save_times, m, next, dir, t, t_new, h, y, y5, k1, k3, k4, k5, k6, k7);
      ++r.accepted;
      t = t_new;
      y = y5;
      k1 = k7;
      if (last) break;
      h *= static_cast<Real>(
          accepted_step_factor(err, err_prev, rejected_last, safety, expo, beta, fac_min, fac_max));
      if constexpr (Bounded) h = dir * cuda::std::fmin(cuda::std::fabs(h), h_max);
      err_prev = cuda::std::fmax(err, 1e-4f);
      rejected_last = false;
    } else {
      ++r.rejected;
      h *= static_cast<Real>(rejected_step_factor(err, safety, expo, fac_min));
      rejected_last = true;
    }
  }
  r.t = static_cast<double>(t);
  return r;
}

}  // namespace detail

/// Integrates y' = f(t, y) from t0 to t1 (either direction) with the Dormand–Prince 5(4) pair,
/// `y` holding the initial state and receiving the state reached. f is called as
/// f(Real t, const cuda::std::array<Real, D>& y, cuda::std::array<Real, D>& dydt). At each of the
/// `m` save times (in the direction of integration, within [t0, t1]) the dense output is handed to
/// save(k, y_k). Options are not checked here (the ensemble entry points check them once:
/// detail::check_adaptive).
template <class Real, std::size_t D, class F, class Save = detail::no_saves>
SPILLWAY_HD trajectory_stats dopri5_integrate(const F& f, Real t0, Real t1, cuda::std::array<Real, D>& y,
                                              const adaptive_options& o, const Real* save_times = nullptr,
                                              std::uint64_t m = 0, const Save& save = Save{}) {
  if (detail::steps_bounded(o, static_cast<double>(t0), static_cast<double>(t1)))
    return detail::dopri5_run<true, Real, D>(f, t0, t1, y, o, save_times, m, save);
  return detail::dopri5_run<false, Real, D>(f, t0, t1, y, o, save_times, m, save);
}

namespace detail {

/// System i of an ensemble (structure-of-arrays state, component d of system i at [d n + i])
/// integrated, its saves and counts written: the body of the host loop and of the kernel.
template <class Real, std::size_t D, bool Bounded, class Family>
SPILLWAY_HD void dopri5_system(const Family& family, std::uint64_t i, std::uint64_t n, Real t0, Real t1,
                               const adaptive_options& o, Real* state, const Real* save_times,
                               std::uint64_t m, Real* saved, std::uint32_t* accepted, std::uint32_t* rejected,
                               std::uint8_t* status) {
  const auto f = family(i);
  state_t<Real, D> y;
  for (std::size_t d = 0; d < D; ++d) y[d] = state[d * n + i];
  const auto put = [&](std::uint64_t k, const state_t<Real, D>& v) {
    for (std::size_t d = 0; d < D; ++d) saved[(k * D + d) * n + i] = v[d];
  };
  const trajectory_stats r = saved != nullptr
                                 ? dopri5_run<Bounded, Real, D>(f, t0, t1, y, o, save_times, m, put)
                                 : dopri5_run<Bounded, Real, D>(f, t0, t1, y, o, nullptr, 0, no_saves{});
  for (std::size_t d = 0; d < D; ++d) state[d * n + i] = y[d];
  if (accepted != nullptr) accepted[i] = r.accepted;
  if (rejected != nullptr) rejected[i] = r.rejected;
  if (status != nullptr) status[i] = static_cast<std::uint8_t>(r.status);
}

}  // namespace detail

namespace host {

/// The host implementation of ode::dopri5_ensemble (ode/adaptive.cuh): the same integration of
/// n = state.size() / D independent systems family(i), single-threaded, on host memory. The
/// tests' oracle and a fallback with no GPU.
template <class Family, class Real, std::size_t D = Family::dimension>
void dopri5_ensemble(const Family& family, Real t0, Real t1, const adaptive_options& o,
                     std::vector<Real>& state, const ensemble_outputs<Real>& out = {}) {
  static_assert(std::is_same_v<Real, float> || std::is_same_v<Real, double>,
                "ensembles hold float or double");
  constexpr const char* who = "host::dopri5_ensemble";
  ode::detail::check_adaptive(who, static_cast<double>(t0), static_cast<double>(t1), o);
  ode::detail::check_ensemble<Real>(who, state.size(), D, out);
  ode::detail::check_save_times(who, static_cast<double>(t0), static_cast<double>(t1), out.save_times.data(),
                                out.save_times.size());
  const std::uint64_t n = state.size() / D;
  const auto run = [&](auto bounded) {
    for (std::uint64_t i = 0; i < n; ++i) {
      ode::detail::dopri5_system<Real, D, decltype(bounded)::value>(
          family, i, n, t0, t1, o, state.data(), out.save_times.data(), out.save_times.size(),
          out.saved.empty() ? nullptr : out.saved.data(),
          out.accepted.empty() ? nullptr : out.accepted.data(),
          out.rejected.empty() ? nullptr : out.rejected.data(),
          out.status.empty() ? nullptr : out.status.data());
    }
  };
  if (ode::detail::steps_bounded(o, static_cast<double>(t0), static_cast<double>(t1))) {
    run(std::true_type{});
  } else {
    run(std::false_type{});
  }
}

}  // namespace host

}  // namespace spillway::ode
