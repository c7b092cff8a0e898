// Adaptive Dormand–Prince 5(4) of coupled elementwise systems on the host
// (ode/dopri5_coupled.hpp): the coupled RK4's rule for the parameters (steps pinned to dt give
// RK4's trajectory to the methods' own error), order five on an exact solution, the error control
// against exact solutions, rejections, the statuses that stop an integration, backward
// integration, the observer, and the checks on bad input.
#include <spillway/ode/dopri5_coupled.hpp>
#include <spillway/ode/rk4_host.hpp>
#include <spillway/ode/systems.hpp>
#include <support/expect_throw.hpp>
#include <support/gpu_test.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace spillway;
using namespace spillway::ode;
using cd = cuda::std::complex<double>;

// y_i' = i ω_i y_i (p unused): y_i(t) = y_i(0) exp(i ω_i t), ω_i = p.real() · (1 + i / n).
struct rotation {
  std::uint64_t n;
  SPILLWAY_HD void operator()(double, const cd& p, const cd& y, cd& d) const {
    d = cd(-p.real() * y.imag(), p.real() * y.real());
  }
};

// y' = −λ (y − cos t) − sin t with λ = p: y = cos t + (y0 − 1) e^{−λ t}; stiff for large λ.
struct relax {
  SPILLWAY_HD void operator()(double t, const double& lambda, const double& y, double& d) const {
    d = -lambda * (y - std::cos(t)) - std::sin(t);
  }
};

// y' = y² (p unused): blows up at t = 1 / y0.
struct blow_up {
  SPILLWAY_HD void operator()(double, const double&, const double& y, double& d) const { d = y * y; }
};

std::vector<cd> random_fields(std::uint64_t n, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(-7e-4, 7e-4);
  std::vector<cd> v(n);
  for (auto& e : v) e = cd(u(g), u(g));
  return v;
}

cd mean_of(const std::vector<cd>& v) {
  cd m(0, 0);
  for (const auto& e : v) m += e;
  return m / static_cast<double>(v.size());
}

/// A mean-field case of n random complex fields (seeded by `name`, printed) and its coupling.
struct mean_field_case {
  std::vector<cd> F0, G0;
  systems::mean_field_coupling<double> coupling;
  cd p0;
  mean_field_case(std::uint64_t n, const char* name)
      : coupling(systems::mean_field_coupling<double>::mean(n)) {
    const auto s = test::seed(name);
    F0 = random_fields(n, s);
    G0 = random_fields(n, s + 1);
    p0 = mean_of(F0);
  }
};

TEST(Dopri5CoupledHost, PinnedStepsFollowTheCoupledRk4) {
  // h0 = h_max = dt and tolerances the steps always meet: the parameters are held over each step
  // and updated after it, as rk4_integrate_coupled does, so both methods' delta(t) agree to their
  // own (tiny) step errors; a free step size then takes far fewer steps.
  const std::uint64_t n = 1024;
  const mean_field_case c(n, "Dopri5CoupledHost.PinnedSteps");
  const auto &F0 = c.F0, &G0 = c.G0;
  const auto& coupling = c.coupling;
  const cd p0 = c.p0;
  const double dt = 1.0 / 512;
  auto F = F0, G = G0;
  const auto rk4 = host::rk4_integrate_coupled(systems::mean_field_rhs{}, coupling, p0, 0.0, dt, 512, F, G);
  adaptive_options o;
  o.rtol = o.atol = 1e-3;
  o.h0 = o.h_max = dt;
  auto F5 = F0, G5 = G0;
  std::vector<double> times;
  std::vector<cd> params;
  const coupled_stats r = host::dopri5_integrate_coupled(systems::mean_field_rhs{}, coupling, p0, 0.0, 1.0, o,
                                                         &times, &params, F5, G5);
  ASSERT_EQ(r.status, solve_status::success);
  EXPECT_EQ(r.accepted, 512u);
  EXPECT_EQ(r.rejected, 0u);
  EXPECT_EQ(r.t, 1.0);
  ASSERT_EQ(params.size(), 513u);
  ASSERT_EQ(times.size(), 513u);
  double worst = 0, scale = 0;
  for (std::size_t k = 0; k <= 512; ++k) {
    EXPECT_NEAR(times[k], static_cast<double>(k) * dt, 1e-14);
    worst = std::max(worst, cuda::std::abs(params[k] - rk4[k]));
    scale = std::max(scale, cuda::std::abs(rk4[k]));
  }
  std::printf("[ coupled  ] pinned dt=1/512: max |delta_dp5 - delta_rk4| = %.3e (|delta| <= %.3e)\n", worst,
              scale);
  EXPECT_LE(worst, 1e-9 * scale);
  double wf = 0;
  for (std::uint64_t i = 0; i < n; ++i) wf = std::max(wf, cuda::std::abs(F5[i] - F[i]));
  EXPECT_LE(wf, 1e-12);
  adaptive_options free;
  free.rtol = free.atol = 1e-8;
  auto F6 = F0, G6 = G0;
  const coupled_stats rf = host::dopri5_integrate_coupled(systems::mean_field_rhs{}, coupling, p0, 0.0, 1.0,
                                                          free, nullptr, nullptr, F6, G6);
  EXPECT_EQ(rf.status, solve_status::success);
  EXPECT_LT(rf.accepted, 100u);
}

// The coupled path takes adaptive_options::estimate as the ensemble does: Shampine's estimate at
// tol steps as the classic one at 1.5 tol, and fewer steps than the classic at tol.
TEST(Dopri5CoupledHost, ShampineEstimateStepsAsTheClassicAtOneAndAHalfTheTolerance) {
  const mean_field_case c(256, "Dopri5CoupledHost.ShampineEstimate");
  const auto &F0 = c.F0, &G0 = c.G0;
  const auto& coupling = c.coupling;
  const cd p0 = c.p0;
  const auto run = [&](double tol, dp5_error_estimate e) {
    adaptive_options o;
    o.rtol = o.atol = tol;
    o.estimate = e;
    auto F = F0, G = G0;
    return host::dopri5_integrate_coupled(systems::mean_field_rhs{}, coupling, p0, 0.0, 2.0, o, nullptr,
                                          nullptr, F, G);
  };
  const coupled_stats sh = run(1e-9, dp5_error_estimate::shampine);
  const coupled_stats dp = run(1.5e-9, dp5_error_estimate::dormand_prince);
  const coupled_stats classic = run(1e-9, dp5_error_estimate::dormand_prince);
  ASSERT_EQ(sh.status, solve_status::success);
  std::printf("[ coupled  ] shampine %llu, classic at 1.5 tol %llu, classic %llu accepted steps\n",
              static_cast<unsigned long long>(sh.accepted), static_cast<unsigned long long>(dp.accepted),
              static_cast<unsigned long long>(classic.accepted));
  EXPECT_NEAR(static_cast<double>(sh.accepted), static_cast<double>(dp.accepted), 1.0);
  EXPECT_LT(sh.accepted, classic.accepted);
}

TEST(Dopri5CoupledHost, PinnedStepsConvergeAtOrderFive) {
  const std::uint64_t n = 16;
  std::vector<cd> y0(n);
  for (std::uint64_t i = 0; i < n; ++i) y0[i] = cd(1.0 + 0.1 * static_cast<double>(i), 0.5);
  const double t1 = 2.0, omega = 3.0;
  double prev = 0;
  for (int halvings = 0; halvings < 3; ++halvings) {
    adaptive_options o;
    o.rtol = o.atol = 1.0;  // every pinned step is accepted
    o.h0 = o.h_max = 0.1 / static_cast<double>(1 << halvings);
    auto y = y0;
    const coupled_stats r = host::dopri5_integrate_coupled(rotation{n}, no_coupling<cd>{}, cd(omega, 0), 0.0,
                                                           t1, o, nullptr, nullptr, y);
    ASSERT_EQ(r.status, solve_status::success);
    EXPECT_EQ(r.rejected, 0u);
    double e = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
      const cd want = y0[i] * cd(std::cos(omega * t1), std::sin(omega * t1));
      e = std::max(e, cuda::std::abs(y[i] - want));
    }
    if (halvings > 0) {
      const double order = std::log2(prev / e);
      std::printf("[ order    ] h = %.4f: error %.3e, observed order %.2f\n", o.h0, e, order);
      EXPECT_NEAR(order, 5.0, 0.2);
    }
    prev = e;
  }
}

TEST(Dopri5CoupledHost, AdaptiveWithinTheToleranceAndRejections) {
  // A first step far too large is rejected and recovered from; the end state meets the tolerance.
  const std::uint64_t n = 64;
  std::vector<cd> y0(n);
  for (std::uint64_t i = 0; i < n; ++i)
    y0[i] = cd(std::cos(0.1 * static_cast<double>(i)), std::sin(0.3 * static_cast<double>(i)));
  for (const double tol : {1e-6, 1e-9}) {
    adaptive_options o;
    o.rtol = o.atol = tol;
    o.h0 = 2.0;
    auto y = y0;
    const double t1 = 3.0, omega = 4.0;
    const coupled_stats r = host::dopri5_integrate_coupled(rotation{n}, no_coupling<cd>{}, cd(omega, 0), 0.0,
                                                           t1, o, nullptr, nullptr, y);
    ASSERT_EQ(r.status, solve_status::success);
    EXPECT_GE(r.rejected, 1u) << "tol " << tol;
    double e = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
      const cd want = y0[i] * cd(std::cos(omega * t1), std::sin(omega * t1));
      e = std::max(e, cuda::std::abs(y[i] - want) / (tol + tol * cuda::std::abs(want)));
    }
    std::printf("[ adaptive ] tol %.0e: %llu accepted, %llu rejected, end error %.2f tolerances\n", tol,
                static_cast<unsigned long long>(r.accepted), static_cast<unsigned long long>(r.rejected), e);
    EXPECT_LE(e, 10.0);
  }
}

TEST(Dopri5CoupledHost, StiffStopsAtMaxStepsAndBlowUpAtStepTooSmall) {
  adaptive_options o;
  o.rtol = o.atol = 1e-6;
  o.max_steps = 300;
  std::vector<double> y{2.0, 0.5};
  const coupled_stats stiff =
      host::dopri5_integrate_coupled(relax{}, no_coupling<double>{}, 1e6, 0.0, 10.0, o, nullptr, nullptr, y);
  EXPECT_EQ(stiff.status, solve_status::max_steps);
  EXPECT_EQ(stiff.accepted + stiff.rejected, 300u);
  EXPECT_LT(stiff.t, 10.0);
  // The same problem, mild: success, and the state near cos t.
  std::vector<double> m{2.0, 0.5};
  o.max_steps = 100000;
  const coupled_stats mild =
      host::dopri5_integrate_coupled(relax{}, no_coupling<double>{}, 2.0, 0.0, 10.0, o, nullptr, nullptr, m);
  EXPECT_EQ(mild.status, solve_status::success);
  EXPECT_NEAR(m[0], std::cos(10.0) + std::exp(-20.0), 1e-5);
  std::vector<double> b{1.0};
  const coupled_stats blow =
      host::dopri5_integrate_coupled(blow_up{}, no_coupling<double>{}, 0.0, 0.0, 2.0, o, nullptr, nullptr, b);
  EXPECT_EQ(blow.status, solve_status::step_too_small);
  EXPECT_NEAR(blow.t, 1.0, 1e-4);  // the singularity at t = 1, to the tolerance
}

TEST(Dopri5CoupledHost, BackwardAndEmpty) {
  const std::uint64_t n = 8;
  std::vector<cd> y0(n, cd(1.0, 0.0));
  adaptive_options o;
  o.rtol = o.atol = 1e-9;
  auto y = y0;
  std::vector<double> times;
  const coupled_stats r = host::dopri5_integrate_coupled(rotation{n}, no_coupling<cd>{}, cd(2.0, 0), 1.0,
                                                         -1.0, o, &times, nullptr, y);
  ASSERT_EQ(r.status, solve_status::success);
  EXPECT_EQ(r.t, -1.0);
  EXPECT_LT(r.h, 0.0);
  EXPECT_NEAR(y[0].real(), std::cos(-4.0), 1e-7);
  EXPECT_NEAR(y[0].imag(), std::sin(-4.0), 1e-7);
  ASSERT_EQ(times.size(), r.accepted + 1);
  for (std::size_t k = 1; k < times.size(); ++k) EXPECT_LT(times[k], times[k - 1]);
  auto z = y0;
  const coupled_stats none = host::dopri5_integrate_coupled(rotation{n}, no_coupling<cd>{}, cd(2.0, 0), 1.0,
                                                            1.0, o, &times, nullptr, z);
  EXPECT_EQ(none.accepted, 0u);
  EXPECT_EQ(times.size(), 1u);
  EXPECT_EQ(z, y0);
}

TEST(Dopri5CoupledHost, BadInputThrowsNamingTheValue) {
  std::vector<double> y{1.0}, short_y;
  adaptive_options o;
  o.fixed_dt = 0.1;
  test::expect_throw_naming<logic_error>(
      [&] {
        host::dopri5_integrate_coupled(relax{}, no_coupling<double>{}, 1.0, 0.0, 1.0, o, nullptr, nullptr, y);
      },
      {"fixed_dt is 0.10000000000000001"});
  o = adaptive_options{};
  o.rtol = -1;
  test::expect_throw_naming<logic_error>(
      [&] {
        host::dopri5_integrate_coupled(relax{}, no_coupling<double>{}, 1.0, 0.0, 1.0, o, nullptr, nullptr, y);
      },
      {"rtol must be finite and >= 0, got -1"});
  o = adaptive_options{};
  std::vector<double> y2{1.0, 2.0};
  test::expect_throw_naming<logic_error>(
      [&] {
        host::dopri5_integrate_coupled(
            [](double, const double&, const double& a, const double& b, double& da, double& db) {
              da = b;
              db = -a;
            },
            no_coupling<double>{}, 1.0, 0.0, 1.0, o, nullptr, nullptr, y, y2);
      },
      {"state array 1 has 2 elements but array 0 has 1"});
}

}  // namespace
