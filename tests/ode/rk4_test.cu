// Device RK4 against the host implementation: fused elementwise steps for every state type and
// mixed states, coupled systems (trajectory, determinism, graphs), snapshots, general right-hand
// sides, ensembles (Lorenz in double: relative error <= 1e-9 over 100 steps), convergence order on
// the device, a state past 2^31 elements, and bad arguments.
#include <spillway/core.hpp>
#include <spillway/ode.cuh>
#include <support/device_vectors.hpp>
#include <support/gpu_test.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace so = spillway::ode;
using cf = cuda::std::complex<float>;
using cd = cuda::std::complex<double>;

namespace {

using spillway::test::download;
using spillway::test::upload;

double mag(float v) { return std::abs(static_cast<double>(v)); }
double mag(double v) { return std::abs(v); }
template <class R>
double mag(cuda::std::complex<R> v) {
  return std::hypot(static_cast<double>(v.real()), static_cast<double>(v.imag()));
}

template <class T>
struct is_complex : std::false_type {};
template <class R>
struct is_complex<cuda::std::complex<R>> : std::true_type {};

template <class T>
T rnd(std::mt19937_64& g, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  if constexpr (is_complex<T>::value) {
    using R = typename T::value_type;
    const R re = static_cast<R>(u(g));
    return T(re, static_cast<R>(u(g)));
  } else {
    return static_cast<T>(u(g));
  }
}

// |dev - host| <= tol * max(1, |host|) elementwise; returns the worst scaled error.
template <class T>
double worst_error(const std::vector<T>& dev, const std::vector<T>& host) {
  double w = 0;
  for (std::size_t i = 0; i < host.size(); ++i) {
    w = std::max(w, mag(T(dev[i] - host[i])) / std::max(1.0, mag(host[i])));
  }
  return w;
}

// A mixed state: a double array and a complex<float> array, coupled elementwise.
struct mixed_rhs {
  SPILLWAY_HD void operator()(double t, const float& k, const double& x, const cf& z, double& dx, cf& dz) const {
    dx = -static_cast<double>(k) * x + static_cast<double>(z.real()) + 0.1 * t;
    dz = cf(-z.imag() * static_cast<float>(x), z.real() * static_cast<float>(x)) - k * z;
  }
};

template <std::size_t I, class D, class H>
void compare_one(const std::string& name, const D& d, const H& h, std::uint64_t n, std::uint64_t steps, double tol,
                 spillway::stream_view s) {
  EXPECT_LE(worst_error(download(std::get<I>(d), s), std::get<I>(h)), tol)
      << name << " array " << I << " n=" << n << " steps=" << steps;
}

template <class D, class H, std::size_t... I>
void compare_all(const std::string& name, const D& d, const H& h, std::uint64_t n, std::uint64_t steps, double tol,
                 spillway::stream_view s, std::index_sequence<I...>) {
  (compare_one<I>(name, d, h, n, steps, tol, s), ...);
}

template <class... T, class Rhs, class P>
void check_fused(const std::string& name, const Rhs& rhs, const P& p, std::uint64_t n, std::uint64_t steps,
                 double dt, double tol, std::mt19937_64& g, spillway::stream_view s, unsigned graph_steps) {
  std::tuple<std::vector<T>...> h{std::vector<T>(n)...};
  std::apply([&](auto&... v) { ((std::generate(v.begin(), v.end(), [&] { return rnd<typename std::decay_t<decltype(v)>::value_type>(g, -1, 1); })), ...); }, h);
  auto d = std::apply([&](auto&... v) { return std::make_tuple(upload(v, s)...); }, h);
  so::rk4_options opt;
  opt.graph_steps = graph_steps;
  std::apply([&](auto&... b) { so::rk4_integrate_async(rhs, p, 0.1, dt, steps, so::make_state_view(n, b.data()...), s, opt); }, d);
  std::apply([&](auto&... v) { so::host::rk4_integrate(rhs, p, 0.1, dt, steps, v...); }, h);
  compare_all(name, d, h, n, steps, tol, s, std::index_sequence_for<T...>{});
}

}  // namespace

TEST(Rk4FusedGpu, MatchesHostForEveryStateTypeShapeAndStepCount) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  std::mt19937_64 g(spillway::test::seed("Rk4FusedGpu.MatchesHost"));
  spillway::stream s;
  for (std::uint64_t n : {0ull, 1ull, 97ull, 4099ull, 300007ull}) {
    for (std::uint64_t steps : {1ull, 6ull, 67ull}) {
      check_fused<float>("decay float", so::systems::exponential_decay{}, 0.8, n, steps, 0.05, 2e-5, g, s, 8);
      check_fused<double, double>("oscillator double", so::systems::harmonic_oscillator{}, 2.0, n, steps, 0.05, 1e-13, g, s, 8);
      check_fused<cf>("linear complex<float>", so::systems::linear_complex{}, cf(-0.3f, 2.0f), n, steps, 0.05, 2e-5, g, s, 8);
      check_fused<cd>("linear complex<double>", so::systems::linear_complex{}, cd(-0.3, 2.0), n, steps, 0.05, 1e-13, g, s, 8);
      check_fused<double, cf>("mixed double + complex<float>", mixed_rhs{}, 0.5f, n, steps, 0.02, 2e-5, g, s, 8);
    }
  }
}

TEST(Rk4FusedGpu, GraphAndPlainLaunchesAgreeBitwise) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  std::mt19937_64 g(spillway::test::seed("Rk4FusedGpu.GraphAgrees"));
  spillway::stream s;
  const std::uint64_t n = 100003;
  std::vector<cf> z(n);
  for (auto& e : z) e = rnd<cf>(g, -1, 1);
  auto a = upload(z, s), b = upload(z, s);
  so::rk4_options with_graph, without;
  with_graph.graph_steps = 16;
  without.graph_steps = 0;
  so::rk4_integrate_async(so::systems::linear_complex{}, cf(-0.1f, 1.0f), 0.0, 0.01, 101, so::make_state_view(n, a.data()), s, with_graph);
  so::rk4_integrate(so::systems::linear_complex{}, cf(-0.1f, 1.0f), 0.0, 0.01, 101, so::make_state_view(n, b.data()), without);
  const auto ha = download(a, s), hb = download(b, s);
  EXPECT_EQ(0, std::memcmp(ha.data(), hb.data(), n * sizeof(cf)));
  EXPECT_NE(0, std::memcmp(ha.data(), z.data(), n * sizeof(cf)));  // it moved
}

TEST(Rk4FusedGpu, SnapshotsEveryKStepsMatchShorterHostRuns) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  std::mt19937_64 g(spillway::test::seed("Rk4FusedGpu.Snapshots"));
  spillway::stream s;
  const std::uint64_t n = 1001, steps = 23, every = 5;
  std::vector<double> x(n), v(n);
  for (auto& e : x) e = rnd<double>(g, -1, 1);
  for (auto& e : v) e = rnd<double>(g, -1, 1);
  auto dx = upload(x, s), dv = upload(v, s);
  spillway::device_buffer<double> sx(5 * n, s), sv(5 * n, s);  // one slot more than needed
  sx.fill_bytes_async(0xFF, s);
  sv.fill_bytes_async(0xFF, s);
  so::rk4_options opt;
  opt.snapshot_every = every;
  so::rk4_integrate_async(so::systems::harmonic_oscillator{}, 1.3, 0.0, 0.05, steps, so::make_state_view(n, dx.data(), dv.data()), s,
                          opt, so::make_state_view(5 * n, sx.data(), sv.data()));
  const auto hx = download(sx, s), hv = download(sv, s);
  for (std::uint64_t j = 1; j <= 4; ++j) {
    std::vector<double> rx = x, rv = v;
    so::host::rk4_integrate(so::systems::harmonic_oscillator{}, 1.3, 0.0, 0.05, j * every, rx, rv);
    const std::vector<double> gx(hx.begin() + static_cast<long>((j - 1) * n), hx.begin() + static_cast<long>(j * n));
    const std::vector<double> gv(hv.begin() + static_cast<long>((j - 1) * n), hv.begin() + static_cast<long>(j * n));
    EXPECT_LE(worst_error(gx, rx), 1e-13) << "snapshot " << j;
    EXPECT_LE(worst_error(gv, rv), 1e-13) << "snapshot " << j;
  }
  // The fifth slot (step 25 does not exist) is still poison.
  std::vector<unsigned char> poison(n * sizeof(double), 0xFF);
  EXPECT_EQ(0, std::memcmp(hx.data() + 4 * n, poison.data(), poison.size()));
  EXPECT_EQ(0, std::memcmp(hv.data() + 4 * n, poison.data(), poison.size()));
}

namespace {
template <class R>
void check_coupled(std::uint64_t n, std::uint64_t steps, double dt, double tol, const char* salt) {
  using C = cuda::std::complex<R>;
  std::mt19937_64 g(spillway::test::seed(salt));
  spillway::stream s;
  std::vector<C> F(n), G(n);
  for (auto& e : F) e = rnd<C>(g, -7e-4, 7e-4);
  for (auto& e : G) e = rnd<C>(g, -7e-4, 7e-4);
  auto dF = upload(F, s), dG = upload(G, s);
  spillway::device_buffer<C> traj(steps + 3, s);
  traj.fill_bytes_async(0xFF, s);
  so::systems::mean_field_coupling<R> coupling{1.0 / static_cast<double>(std::max<std::uint64_t>(n, 1))};
  so::rk4_options opt;
  opt.graph_steps = 8;
  so::rk4_integrate_coupled_async(so::systems::mean_field_rhs{}, coupling, C(1, 0), 0.0, dt, steps,
                                  so::make_state_view(n, dF.data(), dG.data()), cuda::std::span<C>(traj.data(), steps + 1), s,
                                  opt);
  const auto want = so::host::rk4_integrate_coupled(so::systems::mean_field_rhs{}, coupling, C(1, 0), 0.0, dt, steps, F, G);
  const auto got = download(traj, s);
  double scale = 0;
  for (std::uint64_t k = 1; k <= steps; ++k) scale = std::max(scale, mag(want[k]));
  ASSERT_GT(scale, 0.0);
  double worst = 0;
  for (std::uint64_t k = 0; k <= steps; ++k) worst = std::max(worst, mag(C(got[k] - want[k])) / scale);
  std::printf("[ coupled  ] n=%llu steps=%llu max|delta|=%.3e worst relative trajectory error=%.3e\n",
              static_cast<unsigned long long>(n), static_cast<unsigned long long>(steps), scale, worst);
  EXPECT_LE(worst, tol) << "n=" << n;
  std::vector<unsigned char> poison(2 * sizeof(C), 0xFF);
  EXPECT_EQ(0, std::memcmp(got.data() + steps + 1, poison.data(), poison.size())) << "wrote past steps + 1";
  EXPECT_LE(worst_error(download(dF, s), F), tol * 1e-2 + 1e-9);
  // Im(G) is an invariant of the system: the device keeps it to rounding.
  const auto hG = download(dG, s);
  double drift = 0;
  for (std::uint64_t i = 0; i < n; ++i) drift = std::max(drift, std::abs(static_cast<double>(hG[i].imag() - G[i].imag())));
  EXPECT_LE(drift, 1e-9);
}
}  // namespace

TEST(Rk4CoupledGpu, MeanFieldComplexDoubleMatchesHost) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  for (std::uint64_t n : {1ull, 1000ull, 4096ull, 70001ull}) check_coupled<double>(n, 150, 1e-2, 1e-11, "Rk4CoupledGpu.double");
}

TEST(Rk4CoupledGpu, MeanFieldComplexFloatMatchesHost) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  for (std::uint64_t n : {1ull, 513ull, 4096ull, 262144ull}) check_coupled<float>(n, 120, 1e-4, 2e-5, "Rk4CoupledGpu.float");
}

TEST(Rk4CoupledGpu, TrajectoryIsBitwiseReproducibleWithAndWithoutGraphs) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  std::mt19937_64 g(spillway::test::seed("Rk4CoupledGpu.Reproducible"));
  const std::uint64_t n = 1000003, steps = 77;
  std::vector<cf> F(n), G(n);
  for (auto& e : F) e = rnd<cf>(g, -7e-4, 7e-4);
  for (auto& e : G) e = rnd<cf>(g, -7e-4, 7e-4);
  so::systems::mean_field_coupling<float> coupling{1.0 / static_cast<double>(n)};
  std::vector<std::vector<cf>> runs;
  std::vector<std::vector<cf>> finals;
  for (int run = 0; run < 3; ++run) {
    spillway::stream s;
    auto dF = upload(F, s), dG = upload(G, s);
    spillway::device_buffer<cf> traj(steps + 1, s);
    traj.fill_bytes_async(0xFF, s);
    so::rk4_options opt;
    opt.graph_steps = run == 2 ? 0 : 16;
    if (run == 1) {
      s.synchronize();
      so::rk4_integrate_coupled(so::systems::mean_field_rhs{}, coupling, cf(1, 0), 0.0, 1e-4, steps,
                                so::make_state_view(n, dF.data(), dG.data()), traj.span(), opt);
    } else {
      so::rk4_integrate_coupled_async(so::systems::mean_field_rhs{}, coupling, cf(1, 0), 0.0, 1e-4, steps,
                                      so::make_state_view(n, dF.data(), dG.data()), traj.span(), s, opt);
    }
    runs.push_back(download(traj, s));
    finals.push_back(download(dF, s));
  }
  for (int run = 1; run < 3; ++run) {
    EXPECT_EQ(0, std::memcmp(runs[0].data(), runs[static_cast<std::size_t>(run)].data(), (steps + 1) * sizeof(cf))) << run;
    EXPECT_EQ(0, std::memcmp(finals[0].data(), finals[static_cast<std::size_t>(run)].data(), n * sizeof(cf))) << run;
  }
  EXPECT_NE(runs[0][steps], runs[0][steps - 1]);
}

namespace {
struct ring_diffusion {
  std::uint64_t n;
  SPILLWAY_HD void operator()(std::uint64_t i, double t, const double& k, const double* u, const cd* z, double& du, cd& dz) const {
    const double l = u[(i + n - 1) % n], r = u[(i + 1) % n];
    du = k * (l - 2.0 * u[i] + r) + 0.01 * t;
    const cd zl = z[(i + n - 1) % n], zr = z[(i + 1) % n];
    dz = cd(0.0, k) * (zl - 2.0 * z[i] + zr) + u[i] * z[i];
  }
};
}  // namespace

TEST(Rk4GeneralGpu, StencilRhsMatchesHost) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  std::mt19937_64 g(spillway::test::seed("Rk4GeneralGpu.Stencil"));
  spillway::stream s;
  for (std::uint64_t n : {1ull, 2ull, 1009ull, 65537ull}) {
    std::vector<double> u(n);
    std::vector<cd> z(n);
    for (auto& e : u) e = rnd<double>(g, -1, 1);
    for (auto& e : z) e = rnd<cd>(g, -1, 1);
    auto du = upload(u, s);
    auto dz = upload(z, s);
    so::rk4_integrate_general_async(ring_diffusion{n}, 0.3, 0.0, 0.05, 21, so::make_state_view(n, du.data(), dz.data()), s);
    so::host::rk4_integrate_general(ring_diffusion{n}, 0.3, 0.0, 0.05, 21, u, z);
    EXPECT_LE(worst_error(download(du, s), u), 1e-13) << n;
    EXPECT_LE(worst_error(download(dz, s), z), 1e-13) << n;
  }
}

namespace {
template <class R>
void check_lorenz(std::uint64_t n, std::uint64_t steps, std::uint64_t every, double tol, const char* salt) {
  std::mt19937_64 g(spillway::test::seed(salt));
  spillway::stream s;
  std::vector<R> y(3 * n);
  for (std::uint64_t i = 0; i < n; ++i) {
    y[i] = rnd<R>(g, -15, 15);
    y[n + i] = rnd<R>(g, -15, 15);
    y[2 * n + i] = rnd<R>(g, 5, 40);
  }
  so::systems::lorenz_family<R> fam;
  fam.count = n;
  const std::uint64_t saves = steps / every;
  auto dy = upload(y, s);
  spillway::device_buffer<R> saved((saves + 1) * 3 * n, s);
  saved.fill_bytes_async(0xFF, s);
  so::rk4_ensemble_async(fam, R(0), R(0.001), steps, every, dy.span(), saved.span(), s);
  std::vector<R> hs;
  so::host::rk4_ensemble(fam, R(0), R(0.001), steps, every, y, &hs);
  const auto got = download(dy, s);
  const auto got_saved = download(saved, s);
  double worst = 0, worst_saved = 0;
  for (std::size_t i = 0; i < y.size(); ++i) worst = std::max(worst, std::abs(double(got[i]) - double(y[i])) / std::max(1.0, std::abs(double(y[i]))));
  for (std::size_t i = 0; i < hs.size(); ++i)
    worst_saved = std::max(worst_saved, std::abs(double(got_saved[i]) - double(hs[i])) / std::max(1.0, std::abs(double(hs[i]))));
  std::printf("[ lorenz   ] %s n=%llu steps=%llu worst relative error final %.3e saved %.3e\n", sizeof(R) == 8 ? "double" : "float",
              static_cast<unsigned long long>(n), static_cast<unsigned long long>(steps), worst, worst_saved);
  EXPECT_LE(worst, tol);
  EXPECT_LE(worst_saved, tol);
  std::vector<unsigned char> poison(3 * n * sizeof(R), 0xFF);
  EXPECT_EQ(0, std::memcmp(got_saved.data() + saves * 3 * n, poison.data(), poison.size()));
}
}  // namespace

TEST(Rk4EnsembleGpu, LorenzDoubleHundredStepsWithinOneInABillion) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  for (std::uint64_t n : {1ull, 127ull, 1000ull, 100003ull}) check_lorenz<double>(n, 100, 10, 1e-9, "Rk4EnsembleGpu.double");
}

TEST(Rk4EnsembleGpu, LorenzFloatMatchesHost) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  for (std::uint64_t n : {1ull, 129ull, 100003ull}) check_lorenz<float>(n, 100, 25, 1e-4, "Rk4EnsembleGpu.float");
}

namespace {
template <class Rhs, class P, class T>
double device_error(const Rhs& rhs, const P& p, double t0, double t_end, double dt, const std::vector<T>& y0,
                    const std::vector<T>& exact) {
  spillway::stream s;
  auto d = upload(y0, s);
  so::rk4_integrate_async(rhs, p, t0, dt, static_cast<std::uint64_t>(std::llround((t_end - t0) / dt)),
                          so::make_state_view(y0.size(), d.data()), s);
  const auto got = download(d, s);
  double e = 0;
  for (std::size_t i = 0; i < got.size(); ++i) e = std::max(e, mag(T(got[i] - exact[i])));
  return e;
}
}  // namespace

TEST(Rk4OrderGpu, ObservedOrderIsFourOnTheDevice) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const std::vector<double> y0{1.0, -0.5, 3.0};
  std::vector<double> decay_exact;
  for (double v : y0) decay_exact.push_back(v * std::exp(-2.0));
  std::vector<double> cos_exact;
  for (double v : y0) cos_exact.push_back(v * std::exp(std::sin(2.3) - std::sin(0.3)));
  const cd lambda(-0.5, 4.0);
  const std::vector<cd> z0{cd(1, 0), cd(-0.3, 0.7)};
  std::vector<cd> z_exact;
  for (const cd& z : z0) {
    const auto w = std::complex<double>(z.real(), z.imag()) * std::exp(std::complex<double>(lambda.real(), lambda.imag()));
    z_exact.emplace_back(w.real(), w.imag());
  }
  for (double dt : {0.1, 0.05}) {
    const double e1 = device_error(so::systems::exponential_decay{}, 2.0, 0.0, 1.0, dt, y0, decay_exact);
    const double e2 = device_error(so::systems::exponential_decay{}, 2.0, 0.0, 1.0, dt / 2, y0, decay_exact);
    const double c1 = device_error(so::systems::cosine_growth{}, 0, 0.3, 2.3, dt, y0, cos_exact);
    const double c2 = device_error(so::systems::cosine_growth{}, 0, 0.3, 2.3, dt / 2, y0, cos_exact);
    const double z1 = device_error(so::systems::linear_complex{}, lambda, 0.0, 1.0, dt / 2, z0, z_exact);
    const double z2 = device_error(so::systems::linear_complex{}, lambda, 0.0, 1.0, dt / 4, z0, z_exact);
    const double pd = std::log2(e1 / e2), pc = std::log2(c1 / c2), pz = std::log2(z1 / z2);
    std::printf("[ order    ] device dt=%g decay %.3f cosine %.3f complex %.3f\n", dt, pd, pc, pz);
    for (double p : {pd, pc, pz}) {
      EXPECT_GE(p, 3.8) << dt;
      EXPECT_LE(p, 4.2) << dt;
    }
  }
  // Harmonic oscillator (two arrays) on the device.
  for (double dt : {0.05, 0.025}) {
    double e[2];
    for (int h = 0; h < 2; ++h) {
      const double step = h == 0 ? dt : dt / 2;
      spillway::stream s;
      auto x = upload(std::vector<double>{1.0, 0.0}, s), v = upload(std::vector<double>{0.0, 1.5}, s);
      so::rk4_integrate_async(so::systems::harmonic_oscillator{}, 3.0, 0.0, step, static_cast<std::uint64_t>(std::llround(2.0 / step)),
                              so::make_state_view(2, x.data(), v.data()), s);
      const auto hx = download(x, s), hv = download(v, s);
      e[h] = std::max({std::abs(hx[0] - std::cos(6.0)), std::abs(hv[0] + 3.0 * std::sin(6.0)),
                       std::abs(hx[1] - 0.5 * std::sin(6.0)), std::abs(hv[1] - 1.5 * std::cos(6.0))});
    }
    const double p = std::log2(e[0] / e[1]);
    std::printf("[ order    ] device oscillator dt=%g order %.3f\n", dt, p);
    EXPECT_GE(p, 3.8);
    EXPECT_LE(p, 4.2);
  }
}

namespace {
__global__ void fill_pattern(float* y, std::uint64_t n) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = 1.0f + static_cast<float>(i % 1000) * 1e-3f;
}
struct decay_half {
  SPILLWAY_HD void operator()(double, const double&, const float& y, float& dy) const { dy = -0.5f * y; }
};
struct mean_of_state {
  using param_type = double;
  using accum_type = double;
  double inv_n;
  SPILLWAY_HD accum_type contribution(std::uint64_t, const float& y) const { return static_cast<double>(y); }
  SPILLWAY_HD param_type update(const accum_type& total, const param_type&) const { return total * inv_n; }
};
}  // namespace

TEST(Rk4LargeGpu, StatePastTwoToThe31ElementsStepsAndReduces) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const std::uint64_t n = (std::uint64_t{1} << 31) + 19;
  const auto mem = spillway::get_memory_info(spillway::current_device());
  if (mem.free_bytes < 3 * n * sizeof(float)) GTEST_SKIP() << "needs " << 3 * n * sizeof(float) << " bytes of device memory";
  spillway::stream s;
  spillway::device_buffer<float> y(n, s);
  fill_pattern<<<4096, 256, 0, s.value()>>>(y.data(), n);
  SPILLWAY_CHECK_LAUNCH();
  spillway::device_buffer<double> traj(4, s);
  traj.fill_bytes_async(0xFF, s);
  const std::uint64_t steps = 3;
  so::rk4_integrate_coupled_async(decay_half{}, mean_of_state{1.0 / static_cast<double>(n)}, 7.0, 0.0, 0.1, steps,
                                  so::make_state_view(n, y.data()), traj.span(), s);
  // Host: each residue class r = i % 1000 evolves identically.
  std::vector<std::vector<float>> per_step(steps + 1, std::vector<float>(1000));
  for (int r = 0; r < 1000; ++r) {
    float v = 1.0f + static_cast<float>(r) * 1e-3f;
    per_step[0][static_cast<std::size_t>(r)] = v;
    for (std::uint64_t k = 1; k <= steps; ++k) {
      so::rk4_step_values(decay_half{}, 0.1 * static_cast<double>(k - 1), 0.1, 0.0, v);
      per_step[k][static_cast<std::size_t>(r)] = v;
    }
  }
  std::vector<double> count(1000, static_cast<double>(n / 1000));
  for (std::uint64_t r = 0; r < n % 1000; ++r) count[r] += 1;
  const auto got_traj = download(traj, s);
  EXPECT_EQ(got_traj[0], 7.0);
  for (std::uint64_t k = 1; k <= steps; ++k) {
    double sum = 0;
    for (int r = 0; r < 1000; ++r) sum += count[static_cast<std::size_t>(r)] * static_cast<double>(per_step[k][static_cast<std::size_t>(r)]);
    EXPECT_NEAR(got_traj[k], sum / static_cast<double>(n), 1e-6 * sum / static_cast<double>(n)) << k;
  }
  // Elements on both sides of 2^31 and the very last one.
  std::vector<float> tail(64);
  const std::uint64_t first = (std::uint64_t{1} << 31) - 45;
  y.copy_to_host_async(cuda::std::span<float>(tail.data(), tail.size()), s, first);
  float head = 0;
  y.copy_to_host_async(cuda::std::span<float>(&head, 1), s, 0);
  s.synchronize();
  for (std::uint64_t j = 0; j < tail.size(); ++j) {
    const std::uint64_t i = first + j;
    ASSERT_LT(i, n);
    EXPECT_NEAR(tail[j], per_step[steps][i % 1000], 2e-6f) << i;
  }
  EXPECT_NEAR(head, per_step[steps][0], 2e-6f);
}

TEST(Rk4ArgsGpu, BadArgumentsThrowBeforeTouchingTheState) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  std::mt19937_64 g(spillway::test::seed("Rk4ArgsGpu.Bad"));
  spillway::stream s;
  const std::uint64_t n = 333;
  std::vector<cf> F(n), G(n);
  for (auto& e : F) e = rnd<cf>(g, -1, 1);
  for (auto& e : G) e = rnd<cf>(g, -1, 1);
  auto dF = upload(F, s), dG = upload(G, s);
  spillway::device_buffer<cf> traj(5, s);
  const so::systems::mean_field_coupling<float> c{1.0 / n};
  const auto state = so::make_state_view(n, dF.data(), dG.data());
  auto expect_message = [](auto&& fn, const std::string& needle) {
    try {
      fn();
      ADD_FAILURE() << "accepted; expected: " << needle;
    } catch (const spillway::logic_error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_message([&] { so::rk4_integrate_coupled_async(so::systems::mean_field_rhs{}, c, cf(1, 0), 0.0, 1e-4, 10, state, traj.span(), s); },
                 "trajectory holds 5 parameters; 10 steps need 11");
  expect_message([&] { so::rk4_integrate_coupled_async(so::systems::mean_field_rhs{}, c, cf(1, 0), 0.0, std::nan(""), 3, state, traj.span(), s); },
                 "dt must be finite and non-zero, got nan");
  expect_message([&] {
    so::rk4_integrate_coupled_async(so::systems::mean_field_rhs{}, c, cf(1, 0), 0.0, 1e-4, 3, so::make_state_view(n, dF.data(), static_cast<cf*>(nullptr)),
                                    traj.span(), s);
  }, "state array 1 is null but size is 333");
  so::rk4_options opt;
  opt.snapshot_every = 2;
  expect_message([&] {
    so::rk4_integrate_async(so::systems::linear_complex{}, cf(0, 1), 0.0, 0.1, 9, so::make_state_view(n, dF.data()), s, opt,
                            so::make_state_view(3 * n, dG.data()));
  }, "snapshot_every = 2 over 9 steps needs 4 x 333 elements per array, snapshots hold 999");
  spillway::device_buffer<double> ens(10, s);
  expect_message([&] { so::rk4_ensemble_async(so::systems::lorenz_family<double>{}, 0.0, 0.01, 5, 0, ens.span(), cuda::std::span<double>{}, s); },
                 "state has 10 values, not a multiple of the dimension 3");
  spillway::device_buffer<double> ens9(9, s), small(5, s);
  expect_message([&] { so::rk4_ensemble_async(so::systems::lorenz_family<double>{}, 0.0, 0.01, 5, 2, ens9.span(), small.span(), s); },
                 "needs 18 saved values, saved holds 5");
  EXPECT_EQ(0, std::memcmp(download(dF, s).data(), F.data(), n * sizeof(cf)));
  EXPECT_EQ(0, std::memcmp(download(dG, s).data(), G.data(), n * sizeof(cf)));
}
