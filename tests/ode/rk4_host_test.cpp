// Host implementation of the RK4 stepper: convergence order against analytic solutions (double),
// ensemble save layout, coupling, general right-hand sides, bad arguments. Runs everywhere.
#include <spillway/ode/rk4_host.hpp>
#include <spillway/ode/systems.hpp>
#include <support/gpu_test.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <cstdint>
#include <random>
#include <vector>

namespace so = spillway::ode;
using cd = cuda::std::complex<double>;

namespace {

constexpr double pi = 3.14159265358979323846;

// Observed order from errors at dt and dt/2.
double order(double e_dt, double e_half) { return std::log2(e_dt / e_half); }

double decay_error(double dt) {
  const double lambda = 2.0, t_end = 1.0;
  const auto steps = static_cast<std::uint64_t>(std::llround(t_end / dt));
  std::vector<double> y{1.0, -0.5, 3.0};
  const std::vector<double> y0 = y;
  so::host::rk4_integrate(so::systems::exponential_decay{}, lambda, 0.0, dt, steps, y);
  double e = 0;
  for (std::size_t i = 0; i < y.size(); ++i) e = std::max(e, std::abs(y[i] - y0[i] * std::exp(-lambda * t_end)));
  return e;
}

double cosine_error(double dt) {
  const double t0 = 0.3, t_end = 2.3;
  const auto steps = static_cast<std::uint64_t>(std::llround((t_end - t0) / dt));
  std::vector<double> y{1.0, 0.25};
  so::host::rk4_integrate(so::systems::cosine_growth{}, 0, t0, dt, steps, y);
  const double g = std::exp(std::sin(t_end) - std::sin(t0));
  return std::max(std::abs(y[0] - g), std::abs(y[1] - 0.25 * g));
}

double oscillator_error(double dt) {
  const double omega = 3.0, t_end = 2.0;
  const auto steps = static_cast<std::uint64_t>(std::llround(t_end / dt));
  std::vector<double> x{1.0, 0.0}, v{0.0, 1.5};
  so::host::rk4_integrate(so::systems::harmonic_oscillator{}, omega, 0.0, dt, steps, x, v);
  double e = 0;
  for (std::size_t i = 0; i < 2; ++i) {
    const double x0 = i == 0 ? 1.0 : 0.0, v0 = i == 0 ? 0.0 : 1.5;
    const double xe = x0 * std::cos(omega * t_end) + v0 / omega * std::sin(omega * t_end);
    const double ve = -x0 * omega * std::sin(omega * t_end) + v0 * std::cos(omega * t_end);
    e = std::max({e, std::abs(x[i] - xe), std::abs(v[i] - ve)});
  }
  return e;
}

double complex_error(double dt) {
  const cd lambda(-0.5, 4.0);
  const double t_end = 1.0;
  const auto steps = static_cast<std::uint64_t>(std::llround(t_end / dt));
  std::vector<cd> z{cd(1.0, 0.0), cd(-0.3, 0.7)};
  const std::vector<cd> z0 = z;
  so::host::rk4_integrate(so::systems::linear_complex{}, lambda, 0.0, dt, steps, z);
  const std::complex<double> g = std::exp(std::complex<double>(lambda.real(), lambda.imag()) * t_end);
  double e = 0;
  for (std::size_t i = 0; i < z.size(); ++i) {
    const std::complex<double> want = std::complex<double>(z0[i].real(), z0[i].imag()) * g;
    e = std::max(e, std::abs(std::complex<double>(z[i].real(), z[i].imag()) - want));
  }
  return e;
}

template <class F>
void expect_fourth_order(F error, std::vector<double> dts, const char* name) {
  for (double dt : dts) {
    const double e1 = error(dt), e2 = error(dt / 2);
    const double p = order(e1, e2);
    std::printf("[ order    ] %s dt=%g e=%.3e e(dt/2)=%.3e order=%.3f\n", name, dt, e1, e2, p);
    EXPECT_GE(p, 3.8) << name << " dt=" << dt;
    EXPECT_LE(p, 4.2) << name << " dt=" << dt;
  }
}

// A periodic 1-D diffusion stencil in the general form: du_i/dt = k (u_{i-1} - 2 u_i + u_{i+1}).
struct ring_diffusion {
  std::uint64_t n;
  void operator()(std::uint64_t i, double, const double& k, const double* u, double& du) const {
    const double l = u[(i + n - 1) % n], r = u[(i + 1) % n];
    du = k * (l - 2.0 * u[i] + r);
  }
};

}  // namespace

TEST(Rk4HostOrder, ExponentialDecay) { expect_fourth_order(decay_error, {0.1, 0.05}, "decay"); }
TEST(Rk4HostOrder, TimeDependentRhs) { expect_fourth_order(cosine_error, {0.1, 0.05}, "cosine"); }
TEST(Rk4HostOrder, HarmonicOscillator) { expect_fourth_order(oscillator_error, {0.05, 0.025}, "oscillator"); }
TEST(Rk4HostOrder, LinearComplex) { expect_fourth_order(complex_error, {0.05, 0.025}, "complex"); }

TEST(Rk4HostOrder, GeneralStencilMatchesSemiDiscreteSolution) {
  // Fourier mode m of the ring: u_i = sin(2 pi m i / n) decays as exp(-4 k sin^2(pi m / n) t).
  const std::uint64_t n = 37;
  const int m = 3;
  const double k = 0.7, t_end = 1.0;
  const double rate = -4.0 * k * std::pow(std::sin(pi * m / static_cast<double>(n)), 2);
  auto err = [&](double dt) {
    std::vector<double> u(n);
    for (std::uint64_t i = 0; i < n; ++i) u[i] = std::sin(2 * pi * m * static_cast<double>(i) / static_cast<double>(n));
    const std::vector<double> u0 = u;
    so::host::rk4_integrate_general(ring_diffusion{n}, k, 0.0, dt, static_cast<std::uint64_t>(std::llround(t_end / dt)), u);
    double e = 0;
    for (std::uint64_t i = 0; i < n; ++i) e = std::max(e, std::abs(u[i] - u0[i] * std::exp(rate * t_end)));
    return e;
  };
  expect_fourth_order(err, {0.5, 0.25}, "ring diffusion");
}

TEST(Rk4Host, GeneralFormOfElementwiseRhsAgreesWithFusedForm) {
  std::mt19937_64 rng(spillway::test::seed("Rk4Host.GeneralAgrees"));
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> x(53), v(53);
  for (auto& e : x) e = u(rng);
  for (auto& e : v) e = u(rng);
  std::vector<double> x2 = x, v2 = v;
  const double omega = 1.7;
  so::host::rk4_integrate(so::systems::harmonic_oscillator{}, omega, 0.0, 0.01, 25, x, v);
  auto general = [](std::uint64_t i, double t, const double& w, const double* xs, const double* vs, double& dx, double& dv) {
    so::systems::harmonic_oscillator{}(t, w, xs[i], vs[i], dx, dv);
  };
  so::host::rk4_integrate_general(general, omega, 0.0, 0.01, 25, x2, v2);
  for (std::size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(x[i], x2[i], 1e-14) << i;
    EXPECT_NEAR(v[i], v2[i], 1e-14) << i;
  }
}

TEST(Rk4Host, EnsembleSavesMatchShorterRuns) {
  const std::uint64_t n = 13;
  so::systems::lorenz_family<double> fam;
  fam.count = n;
  std::mt19937_64 rng(spillway::test::seed("Rk4Host.EnsembleSaves"));
  std::uniform_real_distribution<double> u(-10, 10);
  std::vector<double> y0(3 * n);
  for (auto& e : y0) e = u(rng);
  std::vector<double> y = y0, saved;
  so::host::rk4_ensemble(fam, 0.0, 0.001, 47, 10, y, &saved);
  ASSERT_EQ(saved.size(), 4 * 3 * n);
  for (std::uint64_t j = 1; j <= 4; ++j) {
    std::vector<double> r = y0;
    so::host::rk4_ensemble(fam, 0.0, 0.001, j * 10, 0, r);
    for (std::uint64_t d = 0; d < 3; ++d)
      for (std::uint64_t i = 0; i < n; ++i) EXPECT_EQ(saved[((j - 1) * 3 + d) * n + i], r[d * n + i]) << j << " " << d << " " << i;
  }
  // The family spreads rho over [20, 30]: first and last systems.
  EXPECT_DOUBLE_EQ(fam(0).rho, 20.0);
  EXPECT_DOUBLE_EQ(fam(n - 1).rho, 30.0);
  // The final state differs from the initial one (the run did something).
  EXPECT_NE(y, y0);
}

TEST(Rk4Host, CoupledMeanFieldKeepsImGAndTracksMeanOfF) {
  using cf = cuda::std::complex<double>;
  const std::uint64_t n = 64;
  std::mt19937_64 rng(spillway::test::seed("Rk4Host.CoupledMeanField"));
  std::uniform_real_distribution<double> u(-7e-4, 7e-4);
  std::vector<cf> F(n), G(n);
  for (auto& e : F) e = cf(u(rng), u(rng));
  for (auto& e : G) e = cf(u(rng), u(rng));
  const std::vector<cf> G0 = G;
  so::systems::mean_field_coupling<double> c{1.0 / static_cast<double>(n)};
  const auto traj = so::host::rk4_integrate_coupled(so::systems::mean_field_rhs{}, c, cf(1, 0), 0.0, 1e-4, 30, F, G);
  ASSERT_EQ(traj.size(), 31u);
  EXPECT_EQ(traj[0], cf(1, 0));
  cf mean(0, 0);
  for (const auto& e : F) mean += e;
  mean /= static_cast<double>(n);
  EXPECT_NEAR(traj.back().real(), mean.real(), 1e-15);
  EXPECT_NEAR(traj.back().imag(), mean.imag(), 1e-15);
  EXPECT_GT(std::abs(std::complex<double>(traj[1].real(), traj[1].imag()) - 1.0), 0.5);  // delta was recomputed
  for (std::uint64_t i = 0; i < n; ++i) EXPECT_NEAR(G[i].imag(), G0[i].imag(), 1e-17) << i;
}

TEST(Rk4Host, CouplingThatIgnoresTheSumEqualsTheUncoupledRun) {
  struct keep {
    using param_type = double;
    using accum_type = double;
    accum_type contribution(std::uint64_t, const double& y) const { return y; }
    param_type update(const accum_type&, const param_type& prev) const { return prev; }
  };
  std::vector<double> a{1.0, 2.0, -3.0}, b = a;
  const auto traj = so::host::rk4_integrate_coupled(so::systems::exponential_decay{}, keep{}, 0.5, 0.0, 0.1, 9, a);
  so::host::rk4_integrate(so::systems::exponential_decay{}, 0.5, 0.0, 0.1, 9, b);
  EXPECT_EQ(a, b);
  for (double p : traj) EXPECT_EQ(p, 0.5);
}

TEST(Rk4Host, BadArgumentsThrowAndLeaveStateUntouched) {
  std::vector<double> x{1.0, 2.0}, v{3.0};
  const auto x0 = x, v0 = v;
  try {
    so::host::rk4_integrate(so::systems::harmonic_oscillator{}, 1.0, 0.0, 0.1, 5, x, v);
    FAIL() << "size mismatch accepted";
  } catch (const spillway::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("state array 1 has 1 elements"), std::string::npos) << e.what();
  }
  EXPECT_EQ(x, x0);
  EXPECT_EQ(v, v0);
  try {
    so::host::rk4_integrate(so::systems::exponential_decay{}, 1.0, 0.0, 0.0, 5, x);
    FAIL() << "dt = 0 accepted";
  } catch (const spillway::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("dt must be finite and non-zero, got 0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(so::host::rk4_integrate(so::systems::exponential_decay{}, 1.0, std::nan(""), 0.1, 5, x),
               spillway::logic_error);
  EXPECT_EQ(x, x0);
  std::vector<double> e(7, 1.0);
  try {
    so::host::rk4_ensemble(so::systems::lorenz_family<double>{}, 0.0, 0.01, 3, 0, e);
    FAIL() << "state size 7 accepted for dimension 3";
  } catch (const spillway::logic_error& ex) {
    EXPECT_NE(std::string(ex.what()).find("7 values"), std::string::npos) << ex.what();
  }
  EXPECT_EQ(e, std::vector<double>(7, 1.0));
}
