// Adaptive Dormand–Prince 5(4) ensembles on the device (ode/adaptive.cuh) against the host
// implementation and a tight float64 reference: Lorenz systems with rho over [0, 21] (the
// published ensemble benchmark's family), float at 1e-6 and double at 1e-8, dense output at save
// times, per-system counts and statuses; outputs poisoned before the kernel writes them.
#include <spillway/core.hpp>
#include <spillway/ode.cuh>
#include <support/gpu_test.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace so = spillway::ode;

namespace {

// A save callback for dopri5_integrate on the host (an HD functor: the integrator is HD).
struct keep_saves {
  cuda::std::array<double, 3>* out;
  SPILLWAY_HD void operator()(std::uint64_t k, const cuda::std::array<double, 3>& v) const { out[k] = v; }
};

// est, beta: the error estimate and the PI term (Shampine's estimate with beta 0 is diffrax's
// convention).
template <class R>
void check_ensemble(double tol, std::uint64_t n,
                    so::dp5_error_estimate est = so::dp5_error_estimate::dormand_prince, double beta = 0.04) {
  spillway::stream s;
  const so::systems::lorenz_family<R> fam{n, R(10), R(8) / R(3), R(0), R(21)};
  std::vector<R> y0(3 * n);
  for (std::uint64_t i = 0; i < n; ++i) {
    y0[i] = R(1);
    y0[n + i] = R(0);
    y0[2 * n + i] = R(0);
  }
  const std::vector<R> times{R(0), R(0.25), R(0.5), R(1)};
  so::adaptive_options o;
  o.rtol = o.atol = tol;
  o.estimate = est;
  o.beta = beta;
  // Device, outputs poisoned.
  spillway::device_buffer<R> dy(y0.size(), s), dt(times.size(), s), dsaved(times.size() * 3 * n, s);
  spillway::device_buffer<std::uint32_t> dacc(n, s), drej(n, s);
  spillway::device_buffer<std::uint8_t> dst(n, s);
  dy.copy_from_host_async({y0.data(), y0.size()}, s);
  dt.copy_from_host_async({times.data(), times.size()}, s);
  dsaved.fill_bytes_async(0xFF, s);
  dacc.fill_bytes_async(0xFF, s);
  drej.fill_bytes_async(0xFF, s);
  dst.fill_bytes_async(0xFF, s);
  so::ensemble_outputs<R> dout{
      {dt.data(), times.size()}, dsaved.span(), dacc.span(), drej.span(), dst.span()};
  so::dopri5_ensemble_async(fam, R(0), R(1), o, dy.span(), dout, s);
  std::vector<R> y(y0.size()), saved(dsaved.size());
  std::vector<std::uint32_t> acc(n), rej(n);
  std::vector<std::uint8_t> st(n);
  dy.copy_to_host_async({y.data(), y.size()}, s);
  dsaved.copy_to_host_async({saved.data(), saved.size()}, s);
  dacc.copy_to_host_async({acc.data(), n}, s);
  drej.copy_to_host_async({rej.data(), n}, s);
  dst.copy_to_host_async({st.data(), n}, s);
  s.synchronize();
  // Host, the same code.
  std::vector<R> hy = y0, hsaved(saved.size());
  std::vector<std::uint32_t> hacc(n), hrej(n);
  std::vector<std::uint8_t> hst(n);
  so::host::dopri5_ensemble(fam, R(0), R(1), o, hy,
                            so::ensemble_outputs<R>{{times.data(), times.size()},
                                                    {hsaved.data(), hsaved.size()},
                                                    {hacc.data(), n},
                                                    {hrej.data(), n},
                                                    {hst.data(), n}});
  so::adaptive_options tight;
  tight.rtol = tight.atol = 1e-13;
  double worst = 0, worst_saved = 0;
  std::uint64_t count_diff = 0, acc_total = 0, hacc_total = 0, rejected_total = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    ASSERT_EQ(st[i], 0u) << "system " << i << ": " << so::to_string(static_cast<so::solve_status>(st[i]));
    acc_total += acc[i];
    hacc_total += hacc[i];
    rejected_total += rej[i];
    if (acc[i] != hacc[i] || rej[i] != hrej[i]) ++count_diff;
    // The float64 reference, at every save time.
    const so::systems::lorenz_family<double> f64{n, 10.0, 8.0 / 3.0, 0.0, 21.0};
    cuda::std::array<double, 3> ref{1.0, 0.0, 0.0};
    std::vector<cuda::std::array<double, 3>> at(times.size());
    const std::vector<double> t64(times.begin(), times.end());
    const auto r = so::dopri5_integrate<double, 3>(f64(i), 0.0, 1.0, ref, tight, t64.data(), t64.size(),
                                                   keep_saves{at.data()});
    ASSERT_EQ(r.status, so::solve_status::success);
    for (int d = 0; d < 3; ++d) {
      const double want = ref[d];
      worst =
          std::max(worst, std::abs(static_cast<double>(y[d * n + i]) - want) / (tol + tol * std::abs(want)));
      for (std::size_t k = 0; k < times.size(); ++k) {
        const double w = at[k][d];
        worst_saved = std::max(worst_saved, std::abs(static_cast<double>(saved[(k * 3 + d) * n + i]) - w) /
                                                (tol + tol * std::abs(w)));
      }
    }
  }
  // Within 10 tolerances (issue 36's rule); Shampine's estimate steps as the classic one at 1.5
  // times the tolerance, so its bound is 15 (measured on the host: double 1e-8 with the plain
  // controller 11.5, 97 of 2,000 systems past 10; docs/ode.md).
  const double limit = est == so::dp5_error_estimate::shampine ? 15.0 : 10.0;
  EXPECT_LT(worst, limit) << "end states: the worst error in units of the tolerance " << tol;
  EXPECT_LT(worst_saved, limit) << "saved states: the worst error in units of the tolerance " << tol;
  // Device and host run the same code; contraction into FMAs may move a borderline decision (the
  // plain controller rejects more steps, so has more of them: 29 of 2,048 float systems, H200).
  EXPECT_LE(count_diff, beta == 0 ? n / 40 : n / 100)
      << count_diff << " systems with other step counts than the host";
  EXPECT_NEAR(static_cast<double>(acc_total), static_cast<double>(hacc_total),
              0.001 * static_cast<double>(hacc_total));
  EXPECT_GT(acc_total, 10 * n);
  std::printf(
      "[ dopri5   ] %s tol %g (%s, beta %g): %.1f accepted, %.2f rejected steps per system; worst %.2f / "
      "%.2f "
      "tol\n",
      sizeof(R) == 4 ? "float" : "double", tol,
      est == so::dp5_error_estimate::shampine ? "shampine" : "dormand_prince", beta,
      static_cast<double>(acc_total) / static_cast<double>(n),
      static_cast<double>(rejected_total) / static_cast<double>(n), worst, worst_saved);
}

TEST(Dopri5EnsembleGpu, LorenzFloatAtOneInAMillion) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  check_ensemble<float>(1e-6, 2048);
}

TEST(Dopri5EnsembleGpu, LorenzDoubleAtOneInTenToTheEight) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  check_ensemble<double>(1e-8, 2048);
}

// diffrax's convention (Shampine's estimate, the plain controller): fewer steps, the end states
// within 15 tolerances of the float64 reference (10 at the 1.5 tolerances it steps as).
TEST(Dopri5EnsembleGpu, LorenzShampineEstimatePlainController) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  check_ensemble<float>(1e-6, 2048, so::dp5_error_estimate::shampine, 0.0);
  check_ensemble<double>(1e-8, 2048, so::dp5_error_estimate::shampine, 0.0);
}

// Fixed steps and the statuses on the device: a stiff member stops at max_steps while the others
// finish; bad save times are refused before the launch, with the value.
TEST(Dopri5EnsembleGpu, FixedStepsStatusesAndBadInput) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  spillway::stream s;
  const std::uint64_t n = 1000;
  const so::systems::lorenz_family<double> fam{n, 10.0, 8.0 / 3.0, 0.0, 21.0};
  std::vector<double> y0(3 * n, 1.0);
  spillway::device_buffer<double> dy(y0.size(), s);
  dy.copy_from_host_async({y0.data(), y0.size()}, s);
  so::adaptive_options o;
  o.fixed_dt = 0.001;
  spillway::device_buffer<std::uint32_t> dacc(n, s);
  dacc.fill_bytes_async(0xFF, s);
  so::dopri5_ensemble_async(fam, 0.0, 1.0, o, dy.span(),
                            so::ensemble_outputs<double>{{}, {}, dacc.span(), {}, {}}, s);
  std::vector<double> y(y0.size());
  std::vector<std::uint32_t> acc(n);
  dy.copy_to_host_async({y.data(), y.size()}, s);
  dacc.copy_to_host_async({acc.data(), n}, s);
  s.synchronize();
  std::vector<double> hy = y0;
  so::host::dopri5_ensemble(fam, 0.0, 1.0, o, hy);
  double worst = 0;
  for (std::size_t k = 0; k < y.size(); ++k)
    worst = std::max(worst, std::abs(y[k] - hy[k]) / (1 + std::abs(hy[k])));
  EXPECT_LT(worst, 1e-12);
  EXPECT_TRUE(std::all_of(acc.begin(), acc.end(), [](std::uint32_t a) { return a == 1000u; }));
  // max_steps too small for t in [0, 1] at these tolerances: every system says so.
  so::adaptive_options few;
  few.rtol = few.atol = 1e-10;
  few.max_steps = 20;
  spillway::device_buffer<std::uint8_t> dst(n, s);
  dst.fill_bytes_async(0xFF, s);
  so::dopri5_ensemble_async(fam, 0.0, 1.0, few, dy.span(),
                            so::ensemble_outputs<double>{{}, {}, {}, {}, dst.span()}, s);
  std::vector<std::uint8_t> st(n);
  dst.copy_to_host_async({st.data(), n}, s);
  s.synchronize();
  EXPECT_TRUE(std::all_of(st.begin(), st.end(), [](std::uint8_t v) {
    return v == static_cast<std::uint8_t>(so::solve_status::max_steps);
  }));
  const std::vector<double> bad{0.5, 1.5};
  spillway::device_buffer<double> dbad(2, s), dsaved(2 * 3 * n, s);
  dbad.copy_from_host_async({bad.data(), 2}, s);
  try {
    so::dopri5_ensemble_async(fam, 0.0, 1.0, so::adaptive_options{}, dy.span(),
                              so::ensemble_outputs<double>{{dbad.data(), 2}, dsaved.span(), {}, {}, {}}, s);
    ADD_FAILURE() << "a save time past t1 was accepted";
  } catch (const spillway::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("save time 1 is 1.5, outside [0, 1]"), std::string::npos)
        << e.what();
  }
}

}  // namespace
