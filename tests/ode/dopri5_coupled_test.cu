// Adaptive Dormand–Prince 5(4) of coupled elementwise systems on the device
// (ode/adaptive_coupled.cuh) against the host implementation (ode/dopri5_coupled.hpp): the
// mean-field system in complex<float> and complex<double> with its delta <- mean(F) coupling (the
// same steps accepted and rejected, the observer, the state), rejections and the statuses that stop
// an integration, backward and empty integrations, no-coupling systems, and bad input. Outputs
// are poisoned before the kernels write them.
#include <spillway/core.hpp>
#include <spillway/ode.cuh>
#include <support/device_vectors.hpp>
#include <support/expect_throw.hpp>
#include <support/gpu_test.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace so = spillway::ode;

namespace {

using spillway::test::download;
using spillway::test::upload;

template <class R>
double mag(cuda::std::complex<R> v) {
  return std::hypot(static_cast<double>(v.real()), static_cast<double>(v.imag()));
}

// y' = −λ (y − cos t) − sin t with λ = p: stiff for large λ.
struct relax {
  SPILLWAY_HD void operator()(double t, const double& lambda, const double& y, double& d) const {
    d = -lambda * (y - cos(t)) - sin(t);
  }
};

// y' = y² (p unused): blows up at t = 1 / y0.
struct blow_up {
  SPILLWAY_HD void operator()(double, const double&, const double& y, double& d) const { d = y * y; }
};

struct device_result {
  so::coupled_stats stats;
  std::vector<double> times;
  std::vector<unsigned char> params_bytes;
};

/// Runs the device integration with poisoned observer (capacity entries) and stats.
template <class Rhs, class Coupling, class... T>
so::coupled_stats run_device(const Rhs& rhs, const Coupling& coupling, typename Coupling::param_type p0,
                             double t0, double t1, const so::adaptive_options& o, std::vector<double>& times,
                             std::vector<typename Coupling::param_type>& params, std::uint64_t capacity,
                             spillway::stream_view s, std::uint64_t n, spillway::device_buffer<T>&... y) {
  using P = typename Coupling::param_type;
  spillway::device_buffer<double> dt(capacity, s);
  spillway::device_buffer<P> dp(capacity, s);
  spillway::device_buffer<so::coupled_stats> st(1, s);
  dt.fill_bytes_async(0xFF, s);
  dp.fill_bytes_async(0xFF, s);
  st.fill_bytes_async(0xFF, s);
  so::dopri5_integrate_coupled_async(rhs, coupling, p0, t0, t1, o, so::make_state_view(n, y.data()...),
                                     so::coupled_observer<P>{dt.span(), dp.span()}, st.data(), s);
  times = download(dt, s);
  params = download(dp, s);
  return download(st, s)[0];
}

template <class R>
void check_mean_field(std::uint64_t n, double tol, double match, const char* salt,
                      so::dp5_error_estimate est = so::dp5_error_estimate::dormand_prince,
                      double beta = 0.04) {
  using C = cuda::std::complex<R>;
  std::mt19937_64 g(spillway::test::seed(salt));
  std::uniform_real_distribution<double> u(-7e-4, 7e-4);
  std::vector<C> F(n), G(n);
  for (auto& e : F) e = C(static_cast<R>(u(g)), static_cast<R>(u(g)));
  for (auto& e : G) e = C(static_cast<R>(u(g)), static_cast<R>(u(g)));
  const auto coupling = so::systems::mean_field_coupling<R>::mean(n);
  const C p0(static_cast<R>(0.3), static_cast<R>(-0.2));  // not the state's mean: delta jumps after step 1
  so::adaptive_options o;
  o.rtol = o.atol = tol;
  o.estimate = est;
  o.beta = beta;
  spillway::stream s;
  auto dF = upload(F, s), dG = upload(G, s);
  const std::uint64_t capacity = 4096;
  std::vector<double> times;
  std::vector<C> params;
  const so::coupled_stats got = run_device(so::systems::mean_field_rhs{}, coupling, p0, 0.0, 2.0, o, times,
                                           params, capacity, s, n, dF, dG);
  std::vector<double> want_t;
  std::vector<C> want_p;
  const so::coupled_stats want = so::host::dopri5_integrate_coupled(so::systems::mean_field_rhs{}, coupling,
                                                                    p0, 0.0, 2.0, o, &want_t, &want_p, F, G);
  std::printf(
      "[ coupled  ] n=%llu tol=%.0e: device %llu accepted / %llu rejected, host %llu / %llu, status %s\n",
      static_cast<unsigned long long>(n), tol, static_cast<unsigned long long>(got.accepted),
      static_cast<unsigned long long>(got.rejected), static_cast<unsigned long long>(want.accepted),
      static_cast<unsigned long long>(want.rejected), so::to_string(got.status));
  ASSERT_EQ(want.status, so::solve_status::success);
  EXPECT_EQ(got.status, want.status);
  EXPECT_EQ(got.t, 2.0);
  // The two sides take the same decisions but not bit-identical steps: the step factor's power is
  // the hardware's log2 / exp2 on the device and the library's pow on the host (a few float ulps),
  // and in float the error norm itself differs by rounding (the device contracts the right-hand
  // side's products into FMAs; the estimate is a difference of nearby stage sums). Double: the
  // same number of steps, times within 1e-6 relative. Float: within one step, times within 1%.
  const bool is_float = sizeof(R) == 4;
  if (is_float) {
    EXPECT_LE(std::max(got.accepted, want.accepted) - std::min(got.accepted, want.accepted), 1u);
  } else {
    EXPECT_EQ(got.accepted, want.accepted);
    EXPECT_EQ(got.rejected, want.rejected);
  }
  const double t_match = is_float ? 1e-2 : 1e-6;
  EXPECT_NEAR(got.h, want.h, t_match * std::abs(want.h));
  ASSERT_LT(want.accepted + 1, capacity);
  const std::uint64_t common = std::min(got.accepted, want.accepted);
  double worst_t = 0, worst_p = 0, scale = 0;
  for (std::uint64_t k = 0; k <= common; ++k) {
    worst_t = std::max(worst_t, std::abs(times[k] - want_t[k]));
    scale = std::max(scale, mag(want_p[k]));
  }
  worst_p = mag(C(params[got.accepted] - want_p[want.accepted]));  // delta at t1
  std::printf(
      "[ coupled  ] worst |t_dev - t_host| = %.3e, |delta_dev(t1) - delta_host(t1)| = %.3e (|delta| <= "
      "%.3e)\n",
      worst_t, worst_p, scale);
  EXPECT_LE(worst_t, t_match * 2.0);
  EXPECT_LE(worst_p, match * scale);
  // Entries past the last accepted step keep their poison.
  const std::vector<unsigned char> poison(sizeof(double), 0xFF);
  EXPECT_EQ(0, std::memcmp(&times[got.accepted + 1], poison.data(), poison.size()));
  // The end states agree well within the tolerance (mixed norm, atol = rtol = tol).
  const auto hF = download(dF, s), hG = download(dG, s);
  double worst = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    worst = std::max(worst, mag(C(hF[i] - F[i])) / (tol + tol * mag(F[i])));
    worst = std::max(worst, mag(C(hG[i] - G[i])) / (tol + tol * mag(G[i])));
  }
  std::printf("[ coupled  ] end states: worst |dev - host| = %.3e tolerances\n", worst);
  EXPECT_LE(worst, 0.1) << "state";
}

}  // namespace

TEST(Dopri5CoupledGpu, MeanFieldComplexDoubleMatchesHost) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  for (std::uint64_t n : {1ull, 1000ull, 70001ull})
    check_mean_field<double>(n, 1e-8, 1e-8, "Dopri5CoupledGpu.double");
}

TEST(Dopri5CoupledGpu, MeanFieldComplexFloatMatchesHost) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  for (std::uint64_t n : {1ull, 513ull, 262144ull})
    check_mean_field<float>(n, 1e-5, 1e-4, "Dopri5CoupledGpu.float");
}

// diffrax's convention (Shampine's estimate, the plain controller) on the device's decisions too.
TEST(Dopri5CoupledGpu, MeanFieldShampineEstimateMatchesHost) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  check_mean_field<double>(1000, 1e-8, 1e-8, "Dopri5CoupledGpu.shampine", so::dp5_error_estimate::shampine,
                           0.0);
}

TEST(Dopri5CoupledGpu, RejectionsAndStatuses) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  spillway::stream s;
  std::vector<double> times;
  std::vector<double> params;
  // Stiff: stops at max_steps (accepted + rejected), the state where it stopped, as the host.
  so::adaptive_options o;
  o.rtol = o.atol = 1e-6;
  o.max_steps = 300;
  const std::vector<double> y0{2.0, 0.5, -1.0};
  auto dy = upload(y0, s);
  const auto stiff =
      run_device(relax{}, so::no_coupling<double>{}, 1e6, 0.0, 10.0, o, times, params, 8, s, 3, dy);
  auto hy = y0;
  const auto want = so::host::dopri5_integrate_coupled(relax{}, so::no_coupling<double>{}, 1e6, 0.0, 10.0, o,
                                                       nullptr, nullptr, hy);
  EXPECT_EQ(stiff.status, so::solve_status::max_steps);
  EXPECT_EQ(stiff.accepted, want.accepted);
  EXPECT_EQ(stiff.rejected, want.rejected);
  EXPECT_EQ(stiff.accepted + stiff.rejected, 300u);
  const auto got_y = download(dy, s);
  for (std::size_t i = 0; i < y0.size(); ++i) EXPECT_NEAR(got_y[i], hy[i], 1e-9);  // steps equal to ~1e-7
  // A first step far too large: rejected, then recovered (mild lambda).
  o.max_steps = 100000;
  o.h0 = 5.0;
  auto dm = upload(y0, s);
  const auto mild =
      run_device(relax{}, so::no_coupling<double>{}, 2.0, 0.0, 10.0, o, times, params, 8, s, 3, dm);
  EXPECT_EQ(mild.status, so::solve_status::success);
  EXPECT_GE(mild.rejected, 1u);
  const auto got_m = download(dm, s);
  for (std::size_t i = 0; i < y0.size(); ++i)
    EXPECT_NEAR(got_m[i], std::cos(10.0) + (y0[i] - 1.0) * std::exp(-20.0), 1e-5);
  // A singularity: step_too_small near t = 1.
  o.h0 = 0;
  auto db = upload(std::vector<double>{1.0}, s);
  const auto blow =
      run_device(blow_up{}, so::no_coupling<double>{}, 0.0, 0.0, 2.0, o, times, params, 8, s, 1, db);
  EXPECT_EQ(blow.status, so::solve_status::step_too_small);
  EXPECT_NEAR(blow.t, 1.0, 1e-4);
}

TEST(Dopri5CoupledGpu, BackwardEmptyAndPlainForm) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  using C = cuda::std::complex<double>;
  spillway::stream s;
  const std::uint64_t n = 3000;
  std::vector<C> F(n, C(1e-3, 0)), G(n, C(0.25, 0));
  auto dF = upload(F, s), dG = upload(G, s);
  so::adaptive_options o;
  o.rtol = o.atol = 1e-9;
  const auto coupling = so::systems::mean_field_coupling<double>::mean(n);
  std::vector<double> times;
  std::vector<C> params;
  const auto back = run_device(so::systems::mean_field_rhs{}, coupling, C(1e-3, 0), 1.0, -0.5, o, times,
                               params, 2, s, n, dF, dG);
  auto hF = F, hG = G;
  const auto want = so::host::dopri5_integrate_coupled(so::systems::mean_field_rhs{}, coupling, C(1e-3, 0),
                                                       1.0, -0.5, o, nullptr, nullptr, hF, hG);
  EXPECT_EQ(back.status, so::solve_status::success);
  EXPECT_EQ(back.accepted, want.accepted);
  EXPECT_EQ(back.t, -0.5);
  EXPECT_LT(back.h, 0.0);
  EXPECT_EQ(times[0], 1.0);  // capacity 2: entries 0 and 1 only
  EXPECT_LT(times[1], 1.0);
  const auto gF = download(dF, s);
  for (std::uint64_t i = 0; i < n; i += 997)
    EXPECT_LE(mag(C(gF[i] - hF[i])), 1e-3 * (1e-9 + 1e-9 * mag(hF[i])));
  // t1 = t0: nothing moves; the observer gets (t0, p0); the plain form returns the stats.
  spillway::device_buffer<double> dt(4, s);
  dt.fill_bytes_async(0xFF, s);
  s.synchronize();
  const auto none = so::dopri5_integrate_coupled(so::systems::mean_field_rhs{}, coupling, C(2, 0), 0.5, 0.5,
                                                 o, so::make_state_view(n, dF.data(), dG.data()),
                                                 so::coupled_observer<C>{dt.span(), {}});
  EXPECT_EQ(none.accepted, 0u);
  EXPECT_EQ(none.status, so::solve_status::success);
  const auto ht = download(dt, s);
  EXPECT_EQ(ht[0], 0.5);
  EXPECT_EQ(download(dF, s), gF);
  // An empty state: nothing to integrate, no kernel reads it.
  const auto empty = so::dopri5_integrate_coupled(so::systems::mean_field_rhs{}, coupling, C(2, 0), 0.0, 1.0,
                                                  o, so::make_state_view<C, C>(0, nullptr, nullptr));
  EXPECT_EQ(empty.accepted, 0u);
}

TEST(Dopri5CoupledGpu, BadInputThrowsNamingTheValue) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  using C = cuda::std::complex<float>;
  spillway::stream s;
  spillway::device_buffer<C> F(16, s), G(16, s);
  spillway::device_buffer<double> t3(3, s);
  spillway::device_buffer<C> p4(4, s);
  const auto coupling = so::systems::mean_field_coupling<float>::mean(16);
  so::adaptive_options o;
  spillway::test::expect_throw_naming<spillway::logic_error>(
      [&] {
        so::dopri5_integrate_coupled_async(so::systems::mean_field_rhs{}, coupling, C(1, 0), 0.0, 1.0, o,
                                           so::make_state_view(16, F.data(), G.data()),
                                           so::coupled_observer<C>{t3.span(), p4.span()}, nullptr, s);
      },
      {"observer.times holds 3", "observer.params 4"});
  o.fixed_dt = 1e-3;
  spillway::test::expect_throw_naming<spillway::logic_error>(
      [&] {
        so::dopri5_integrate_coupled_async(so::systems::mean_field_rhs{}, coupling, C(1, 0), 0.0, 1.0, o,
                                           so::make_state_view(16, F.data(), G.data()), {}, nullptr, s);
      },
      {"fixed_dt is 0.001"});
  o = so::adaptive_options{};
  spillway::test::expect_throw_naming<spillway::logic_error>(
      [&] {
        so::dopri5_integrate_coupled_async(so::systems::mean_field_rhs{}, coupling, C(1, 0), 0.0, 1.0, o,
                                           so::make_state_view(16, F.data(), static_cast<C*>(nullptr)), {},
                                           nullptr, s);
      },
      {"state array 1 is null"});
  o.atol = std::nan("");
  spillway::test::expect_throw_naming<spillway::logic_error>(
      [&] {
        so::dopri5_integrate_coupled_async(so::systems::mean_field_rhs{}, coupling, C(1, 0), 0.0, 1.0, o,
                                           so::make_state_view(16, F.data(), G.data()), {}, nullptr, s);
      },
      {"atol must be finite"});
}
