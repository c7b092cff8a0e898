// spillway/ode/systems.hpp — reference systems: right-hand sides with analytic solutions (used to
// verify RK4's order), the Lorenz family (the ensemble reference case) and the mean-field coupled
// two-field system of the rk4_coupled example. Plain C++ plus SPILLWAY_HD: the host
// implementation and the kernels call the same functors.
#pragma once

#include <spillway/ode/config.hpp>

#include <cuda/std/array>
#include <cuda/std/cmath>
#include <cuda/std/complex>
#include <cstdint>

namespace spillway::ode::systems {

/// dy/dt = -lambda y (p = lambda). Solution y0 exp(-lambda t).
struct exponential_decay {
  template <class T, class R>
  SPILLWAY_HD void operator()(double, const R& lambda, const T& y, T& dydt) const {
    dydt = -static_cast<real_of_t<T>>(lambda) * y;
  }
};

/// dy/dt = cos(t) y. Solution y0 exp(sin t - sin t0): exercises the stage times t + dt/2, t + dt.
struct cosine_growth {
  template <class T, class P>
  SPILLWAY_HD void operator()(double t, const P&, const T& y, T& dydt) const {
    dydt = static_cast<real_of_t<T>>(cuda::std::cos(t)) * y;
  }
};

/// x' = v, v' = -omega^2 x (p = omega): two state arrays. Solution from (x0, v0) at t0 = 0:
/// x = x0 cos(omega t) + v0/omega sin(omega t).
struct harmonic_oscillator {
  template <class T, class R>
  SPILLWAY_HD void operator()(double, const R& omega, const T& x, const T& v, T& dx, T& dv) const {
    using real = real_of_t<T>;
    dx = v;
    dv = -static_cast<real>(omega * omega) * x;
  }
};

/// z' = lambda z for complex z and complex lambda (p = lambda). Solution z0 exp(lambda t).
struct linear_complex {
  template <class R>
  SPILLWAY_HD void operator()(double, const cuda::std::complex<R>& lambda, const cuda::std::complex<R>& z,
                                  cuda::std::complex<R>& dz) const {
    // Written out: complex*complex in libcu++ carries Annex G inf/nan recovery branches.
    dz = cuda::std::complex<R>(lambda.real() * z.real() - lambda.imag() * z.imag(),
                               lambda.real() * z.imag() + lambda.imag() * z.real());
  }
};

/// The mean-field two-field system (per element of F and G, with delta held fixed in a step):
///   dF/dt = -2i F - i delta (2G - 1),   dG/dt = -i (conj(delta) F - delta conj(F)).
/// dG/dt is real (2 Im(conj(delta) F)), so Im(G) is an invariant: a cheap self-check.
struct mean_field_rhs {
  template <class R>
  SPILLWAY_HD void operator()(double, const cuda::std::complex<R>& delta, const cuda::std::complex<R>& f,
                                  const cuda::std::complex<R>& g, cuda::std::complex<R>& df,
                                  cuda::std::complex<R>& dg) const {
    using cuda::std::fma;
    const R dr = delta.real(), di = delta.imag();
    const R fr = f.real(), fi = f.imag();
    const R wr = fma(R(2), g.real(), R(-1)), wi = R(2) * g.imag();
    // -2i F - i delta w  with  -i (a + ib) = b - ia; fused multiply-adds written out, so the host
    // and the device round alike (a difference of products is not contracted).
    df = cuda::std::complex<R>(fma(R(2), fi, fma(dr, wi, di * wr)), fma(R(-2), fr, fma(di, wi, -(dr * wr))));
    dg = cuda::std::complex<R>(R(2) * fma(dr, fi, -(di * fr)), R(0));
  }
};

/// delta <- scale * sum(F) after every step, summed in complex<double>. The scale has no default
/// (a default of 1 made the "mean" coupling a sum): say which you mean,
///   mean_field_coupling<float>::mean(n)   // delta <- mean(F) over n elements (scale 1/n)
///   mean_field_coupling<float>::sum()     // delta <- sum(F)  (the seed program's coupling)
///   mean_field_coupling<float>{s}         // delta <- s * sum(F)
template <class R>
struct mean_field_coupling {
  using param_type = cuda::std::complex<R>;
  using accum_type = cuda::std::complex<double>;
  double scale;

  SPILLWAY_HD constexpr explicit mean_field_coupling(double s) noexcept : scale(s) {}
  /// delta <- mean(F) over `n` elements.
  static constexpr mean_field_coupling mean(std::uint64_t n) noexcept {
    return mean_field_coupling(n > 0 ? 1.0 / static_cast<double>(n) : 0.0);
  }
  /// delta <- sum(F).
  static constexpr mean_field_coupling sum() noexcept { return mean_field_coupling(1.0); }

  SPILLWAY_HD accum_type contribution(std::uint64_t, const cuda::std::complex<R>& f,
                                          const cuda::std::complex<R>&) const {
    return accum_type(static_cast<double>(f.real()), static_cast<double>(f.imag()));
  }
  SPILLWAY_HD param_type update(const accum_type& total, const param_type&) const {
    return param_type(static_cast<R>(total.real() * scale), static_cast<R>(total.imag() * scale));
  }
};

/// One Lorenz system: x' = sigma (y - x), y' = x (rho - z) - y, z' = x y - beta z.
template <class Real>
struct lorenz {
  Real sigma;
  Real beta;
  Real rho;
  SPILLWAY_HD void operator()(Real, const cuda::std::array<Real, 3>& s, cuda::std::array<Real, 3>& d) const {
    // Fused multiply-adds written out (a difference of products is not contracted): two
    // operations per component.
    d[0] = sigma * (s[1] - s[0]);
    d[1] = cuda::std::fma(s[0], rho - s[2], -s[1]);
    d[2] = cuda::std::fma(s[0], s[1], -beta * s[2]);
  }
};

/// The ensemble reference family: `count` Lorenz systems with sigma = 10, beta = 8/3 and rho spread
/// uniformly over [rho_lo, rho_hi] by system index (first system rho_lo, last rho_hi).
template <class Real>
struct lorenz_family {
  static constexpr unsigned dimension = 3;
  std::uint64_t count = 1;
  Real sigma = Real(10);
  Real beta = Real(8) / Real(3);
  Real rho_lo = Real(20);
  Real rho_hi = Real(30);

  SPILLWAY_HD lorenz<Real> operator()(std::uint64_t i) const {
    const Real f = count > 1 ? static_cast<Real>(i) / static_cast<Real>(count - 1) : Real(0);
    return lorenz<Real>{sigma, beta, rho_lo + (rho_hi - rho_lo) * f};
  }
};

}  // namespace spillway::ode::systems
