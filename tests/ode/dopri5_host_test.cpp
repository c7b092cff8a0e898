// Adaptive Dormand–Prince 5(4) on the host (ode/dopri5.hpp): its order at fixed step, its error
// control against exact solutions, dense output, rejections, the statuses that stop a trajectory,
// the host ensemble, and the checks on bad input.
#include <spillway/ode/dopri5.hpp>
#include <spillway/ode/systems.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace {

using namespace spillway;
using namespace spillway::ode;

template <class Real>
using arr1 = cuda::std::array<Real, 1>;
template <class Real>
using arr2 = cuda::std::array<Real, 2>;

// y' = cos(t) y: y(t) = y0 exp(sin t − sin t0).
struct cosine_growth1 {
  template <class Real>
  void operator()(Real t, const arr1<Real>& y, arr1<Real>& d) const {
    d[0] = std::cos(t) * y[0];
  }
};

// x' = v, v' = −ω² x with x(0) = 1, v(0) = 0: x = cos ωt, v = −ω sin ωt.
struct oscillator {
  double omega = 3.0;
  template <class Real>
  void operator()(Real, const arr2<Real>& y, arr2<Real>& d) const {
    d[0] = y[1];
    d[1] = -static_cast<Real>(omega * omega) * y[0];
  }
};

// The mixed error norm of the acceptance criterion: max over components of |got − want| /
// (atol + rtol |want|).
template <class A>
double mixed_error(const A& got, const A& want, double rtol, double atol) {
  double e = 0;
  for (std::size_t d = 0; d < got.size(); ++d) {
    const double w = static_cast<double>(want[d]);
    e = std::max(e, std::abs(static_cast<double>(got[d]) - w) / (atol + rtol * std::abs(w)));
  }
  return e;
}

TEST(Dopri5Host, FixedStepConvergesAtOrderFive) {
  adaptive_options o;
  double prev = 0;
  for (int halvings = 0; halvings < 3; ++halvings) {
    o.fixed_dt = 0.1 / static_cast<double>(1 << halvings);
    arr1<double> y{1.0};
    const trajectory_stats r = dopri5_integrate<double, 1>(cosine_growth1{}, 0.0, 4.0, y, o);
    ASSERT_EQ(r.status, solve_status::success);
    EXPECT_EQ(r.rejected, 0u);
    EXPECT_EQ(r.accepted, static_cast<std::uint32_t>(std::lround(4.0 / o.fixed_dt)));
    const double err = std::abs(y[0] - std::exp(std::sin(4.0)));
    if (halvings > 0) {
      const double order = std::log2(prev / err);
      EXPECT_NEAR(order, 5.0, 0.2) << "dt " << o.fixed_dt << ": error " << err << " after " << prev;
    }
    prev = err;
  }
}

TEST(Dopri5Host, AdaptiveEndStateWithinTheTolerance) {
  for (const double tol : {1e-6, 1e-8, 1e-10}) {
    adaptive_options o;
    o.rtol = o.atol = tol;
    arr2<double> y{1.0, 0.0};
    const trajectory_stats r = dopri5_integrate<double, 2>(oscillator{}, 0.0, 10.0, y, o);
    ASSERT_EQ(r.status, solve_status::success);
    EXPECT_EQ(r.t, 10.0);
    const arr2<double> want{std::cos(30.0), -3.0 * std::sin(30.0)};
    EXPECT_LT(mixed_error(y, want, tol, tol), 10.0) << "tol " << tol << ", " << r.accepted << " steps";
    EXPECT_GT(r.accepted, 10u);
  }
  // Float at 1e-6 (its relative tolerance is above 4 eps = 4.8e-7, so it is used as given).
  adaptive_options o;
  arr2<float> y{1.0f, 0.0f};
  const trajectory_stats r = dopri5_integrate<float, 2>(oscillator{}, 0.0f, 2.0f, y, o);
  ASSERT_EQ(r.status, solve_status::success);
  const arr2<double> want{std::cos(6.0), -3.0 * std::sin(6.0)};
  EXPECT_LT(mixed_error(arr2<double>{y[0], y[1]}, want, 1e-6, 1e-6), 10.0);
}

TEST(Dopri5Host, DenseOutputAtTheSaveTimes) {
  adaptive_options o;
  o.rtol = o.atol = 1e-9;
  std::vector<double> times;
  for (int k = 0; k <= 40; ++k) times.push_back(0.25 * k);  // includes t0 and t1
  std::vector<arr2<double>> got(times.size());
  arr2<double> y{1.0, 0.0};
  const auto r = dopri5_integrate<double, 2>(oscillator{}, 0.0, 10.0, y, o, times.data(), times.size(),
                                             [&](std::uint64_t k, const arr2<double>& v) { got[k] = v; });
  ASSERT_EQ(r.status, solve_status::success);
  arr2<double> plain{1.0, 0.0};
  const auto q = dopri5_integrate<double, 2>(oscillator{}, 0.0, 10.0, plain, o);
  EXPECT_EQ(r.accepted, q.accepted) << "the save times must not cut the steps";
  EXPECT_EQ(y[0], plain[0]);
  for (std::size_t k = 0; k < times.size(); ++k) {
    const arr2<double> want{std::cos(3.0 * times[k]), -3.0 * std::sin(3.0 * times[k])};
    EXPECT_LT(mixed_error(got[k], want, 1e-9, 1e-9), 10.0) << "t = " << times[k];
  }
  EXPECT_EQ(got.front()[0], 1.0);
  EXPECT_EQ(got.back()[0], y[0]);  // the save at t1 is the end state
}

TEST(Dopri5Host, BackwardIntegration) {
  adaptive_options o;
  o.rtol = o.atol = 1e-10;
  arr1<double> y{std::exp(std::sin(3.0))};
  const auto r = dopri5_integrate<double, 1>(cosine_growth1{}, 3.0, 0.0, y, o);
  ASSERT_EQ(r.status, solve_status::success);
  EXPECT_EQ(r.t, 0.0);
  EXPECT_NEAR(y[0], 1.0, 1e-8);
}

// A first step far too long is rejected and the controller recovers: the result is the same
// tolerance's result.
TEST(Dopri5Host, RejectedStepsAreCountedAndRecovered) {
  const systems::lorenz<double> f{10.0, 8.0 / 3.0, 21.0};
  adaptive_options tight;
  tight.rtol = tight.atol = 1e-12;
  cuda::std::array<double, 3> want{1.0, 0.0, 0.0};
  const auto ref = dopri5_integrate<double, 3>(f, 0.0, 1.0, want, tight);
  ASSERT_EQ(ref.status, solve_status::success);
  adaptive_options o;
  o.rtol = o.atol = 1e-8;
  o.h0 = 1.0;
  cuda::std::array<double, 3> y{1.0, 0.0, 0.0};
  const auto r = dopri5_integrate<double, 3>(f, 0.0, 1.0, y, o);
  ASSERT_EQ(r.status, solve_status::success);
  EXPECT_GE(r.rejected, 2u);
  EXPECT_LT(mixed_error(y, want, 1e-8, 1e-8), 10.0);
}

// A stiff problem with an explicit method: the step is held at the stability bound, so a cap on
// the steps stops it with a status instead of looping.
TEST(Dopri5Host, StiffProblemStopsAtMaxSteps) {
  struct stiff {
    void operator()(double t, const arr1<double>& y, arr1<double>& d) const {
      d[0] = -1e6 * (y[0] - std::cos(t));
    }
  };
  adaptive_options o;
  o.max_steps = 2000;
  arr1<double> y{0.0};
  const auto r = dopri5_integrate<double, 1>(stiff{}, 0.0, 1.0, y, o);
  EXPECT_EQ(r.status, solve_status::max_steps);
  EXPECT_EQ(r.accepted + r.rejected, 2000u);
  EXPECT_LT(r.t, 0.1);
  EXPECT_TRUE(std::isfinite(y[0]));
}

// y' = y² from 1 blows up at t = 1: the steps shrink to the floor and the trajectory stops there.
TEST(Dopri5Host, BlowUpStopsWithStepTooSmall) {
  struct blow_up {
    void operator()(double, const arr1<double>& y, arr1<double>& d) const { d[0] = y[0] * y[0]; }
  };
  adaptive_options o;
  arr1<double> y{1.0};
  const auto r = dopri5_integrate<double, 1>(blow_up{}, 0.0, 2.0, y, o);
  EXPECT_EQ(r.status, solve_status::step_too_small) << to_string(r.status) << " at t = " << r.t;
  EXPECT_NEAR(r.t, 1.0, 1e-3) << "y = " << y[0];
  EXPECT_GT(std::abs(y[0]), 1e6) << "t = " << r.t;
  o.h_min = 1e-3;  // a floor of the caller's
  arr1<double> z{1.0};
  const auto q = dopri5_integrate<double, 1>(blow_up{}, 0.0, 2.0, z, o);
  EXPECT_EQ(q.status, solve_status::step_too_small);
  EXPECT_LT(q.t, r.t);
  // Fixed steps through the pole: the state becomes non-finite and the trajectory says so.
  adaptive_options f;
  f.fixed_dt = 0.25;
  arr1<double> w{1.0};
  const auto p = dopri5_integrate<double, 1>(blow_up{}, 0.0, 4.0, w, f);
  EXPECT_EQ(p.status, solve_status::not_finite)
      << to_string(p.status) << " at t = " << p.t << ", y = " << w[0];
}

// A tolerance below the type's epsilon is raised to 4 eps: the run ends, accurate to rounding.
TEST(Dopri5Host, ToleranceBelowEpsilonIsRaised) {
  adaptive_options o;
  o.rtol = 1e-30;
  o.atol = 1e-30;
  arr1<double> y{1.0};
  const auto r = dopri5_integrate<double, 1>(cosine_growth1{}, 0.0, 1.0, y, o);
  ASSERT_EQ(r.status, solve_status::success);
  EXPECT_NEAR(y[0], std::exp(std::sin(1.0)), 1e-13);
  EXPECT_LT(r.accepted, 5000u);
}

TEST(Dopri5Host, HMaxBoundsEveryStep) {
  // Loose tolerances would allow a few large steps; h_max = 0.01 holds every step to it.
  adaptive_options o;
  o.rtol = o.atol = 1e-3;
  arr1<double> y{1.0};
  const auto free = dopri5_integrate<double, 1>(cosine_growth1{}, 0.0, 1.0, y, o);
  EXPECT_LT(free.accepted, 20u);
  o.h_max = 0.01;
  y = {1.0};
  const auto bounded = dopri5_integrate<double, 1>(cosine_growth1{}, 0.0, 1.0, y, o);
  ASSERT_EQ(bounded.status, solve_status::success);
  EXPECT_GE(bounded.accepted, 100u);
  EXPECT_LE(bounded.accepted, 101u);
}

TEST(Dopri5Host, EnsembleEqualsSystemBySystem) {
  const systems::lorenz_family<double> fam{200, 10.0, 8.0 / 3.0, 0.0, 21.0};
  const std::uint64_t n = fam.count;
  std::vector<double> state(3 * n);
  for (std::uint64_t i = 0; i < n; ++i) {
    state[i] = 1.0;
    state[n + i] = 0.0;
    state[2 * n + i] = 0.0;
  }
  const std::vector<double> times{0.0, 0.5, 1.0};
  std::vector<double> saved(times.size() * 3 * n, -7.0);
  std::vector<std::uint32_t> acc(n, 0xFFFFFFFFu), rej(n, 0xFFFFFFFFu);
  std::vector<std::uint8_t> st(n, 0xFF);
  adaptive_options o;
  o.rtol = o.atol = 1e-8;
  ensemble_outputs<double> out{{times.data(), times.size()},
                               {saved.data(), saved.size()},
                               {acc.data(), n},
                               {rej.data(), n},
                               {st.data(), n}};
  host::dopri5_ensemble(fam, 0.0, 1.0, o, state, out);
  for (std::uint64_t i = 0; i < n; i += 37) {
    cuda::std::array<double, 3> y{1.0, 0.0, 0.0};
    const auto r = dopri5_integrate<double, 3>(fam(i), 0.0, 1.0, y, o);
    EXPECT_EQ(state[i], y[0]);
    EXPECT_EQ(state[n + i], y[1]);
    EXPECT_EQ(state[2 * n + i], y[2]);
    EXPECT_EQ(acc[i], r.accepted);
    EXPECT_EQ(rej[i], r.rejected);
    EXPECT_EQ(st[i], 0u);
    EXPECT_EQ(saved[(0 * 3 + 0) * n + i], 1.0);   // t0: the initial state
    EXPECT_EQ(saved[(2 * 3 + 2) * n + i], y[2]);  // t1: the end state
    EXPECT_NE(saved[(1 * 3 + 0) * n + i], -7.0);  // t = 0.5 written
  }
}

TEST(Dopri5Host, BadInputThrowsNamingTheValue) {
  const systems::lorenz_family<double> fam{4};
  std::vector<double> state(12, 1.0);
  // Runs the host ensemble on `y` with the default options changed by `set` and expects a
  // logic_error whose message holds `what`.
  auto throws = [&](auto&& set, double t0, double t1, const std::string& what,
                    const ensemble_outputs<double>& out = {}, std::vector<double>* y = nullptr) {
    adaptive_options o;
    set(o);
    try {
      host::dopri5_ensemble(fam, t0, t1, o, y != nullptr ? *y : state, out);
      ADD_FAILURE() << "no exception; expected one naming " << what;
    } catch (const logic_error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  const auto as_given = [](adaptive_options&) {};
  throws([](adaptive_options& o) { o.rtol = -1; }, 0, 1, "rtol must be finite and >= 0, got -1");
  throws([](adaptive_options& o) { o.rtol = o.atol = 0; }, 0, 1, "rtol and atol are both 0");
  throws([](adaptive_options& o) { o.max_steps = 0; }, 0, 1, "max_steps must be >= 1");
  throws([](adaptive_options& o) { o.fixed_dt = -0.5; }, 0, 1,
         "fixed_dt must be finite and >= 0 (0: adaptive), got -0.5");
  throws([](adaptive_options& o) { o.h_min = 2, o.h_max = 1; }, 0, 1, "h_min 2 exceeds h_max 1");
  throws(as_given, std::nan(""), 1, "t0 must be finite");
  throws(as_given, 0, INFINITY, "t1 must be finite, got inf");
  const std::vector<double> late{0.5, 2.0};
  std::vector<double> saved(2 * 12);
  throws(as_given, 0, 1, "save time 1 is 2, outside [0, 1]",
         {{late.data(), 2}, {saved.data(), saved.size()}, {}, {}, {}});
  const std::vector<double> back{0.5, 0.25};
  throws(as_given, 0, 1, "save times must follow the direction of integration; time 1 (0.25) comes after 0.5",
         {{back.data(), 2}, {saved.data(), saved.size()}, {}, {}, {}});
  throws(as_given, 0, 1, "2 save times for 4 systems of 3 need 24 saved values, saved holds 23",
         {{late.data(), 2}, {saved.data(), 23}, {}, {}, {}});
  std::vector<std::uint32_t> few(3);
  throws(as_given, 0, 1, "accepted holds 3 values for 4 systems", {{}, {}, {few.data(), 3}, {}, {}});
  std::vector<double> odd(11, 1.0);
  throws(as_given, 0, 1, "state has 11 values, not a multiple of the dimension 3", {}, &odd);
}

}  // namespace
