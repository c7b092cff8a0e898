// rk4_coupled: the mean-field two-field system integrated with RK4, state kept on the device.
//
//   dF/dt = -2i F - i delta (2G - 1),   dG/dt = -i (conj(delta) F - delta conj(F)),
//   F, G: N x N complex64, dt = 1e-4, delta0 = 1, and after every step delta <- mean(F).
//
// First, the seed program's own system as its author wrote it: the same right-hand side with
// delta <- SUM(F) (mean_field_coupling::sum()) and uniform fields F0 = G0 = 1. It blows up, and
// the example shows where and why: the sum grows with the number of elements (|delta| ~ N^2 after
// one step), each step then moves F by N^2 * dt times itself (1,678 at N = 4096), and float
// overflows within a few steps.
// Not a bug of the integrator: the coupling's strength scales with N^2. The stable variant that
// follows divides by N^2 (delta <- mean(F), mean_field_coupling::mean(n)) and starts from small
// random fields, as the benchmark does.
//
// On a GPU: N = 4096 for 1000 steps (override with --n and --steps). One fused kernel per step
// does the four RK4 stages and the reduction of F; delta(t) stays on the device until the end.
// Without a GPU it runs a small N on spillway's host implementation, and says so.
// Writes delta(t) to rk4_coupled_delta.csv and, where gnuplot is installed, |delta|(t) to
// rk4_coupled_delta.png. Exits non-zero when a self-check fails.
#include <spillway/core.hpp>
#include <spillway/ode.cuh>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace so = spillway::ode;
using cf = cuda::std::complex<float>;

namespace {

double cabs(cf v) { return std::hypot(static_cast<double>(v.real()), static_cast<double>(v.imag())); }

void random_fields(std::uint64_t n, std::uint64_t seed, std::vector<cf>& F, std::vector<cf>& G) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-7e-4f, 7e-4f);  // |.| <= 0.99e-3
  F.resize(n);
  G.resize(n);
  for (auto& e : F) e = cf(u(rng), u(rng));
  for (auto& e : G) e = cf(u(rng), u(rng));
}

// Runs the system on the device; returns delta(t) (steps + 1 values) and leaves the final fields in F, G.
std::vector<cf> run_device(std::uint64_t side, std::uint64_t steps, std::vector<cf>& F, std::vector<cf>& G, float* ms) {
  const std::uint64_t n = side * side;
  spillway::stream s;
  spillway::device_buffer<cf> dF(n, s), dG(n, s), traj(steps + 1, s);
  dF.copy_from_host_async(cuda::std::span<const cf>(F.data(), n), s);
  dG.copy_from_host_async(cuda::std::span<const cf>(G.data(), n), s);
  const so::systems::mean_field_coupling<float> mean{1.0 / static_cast<double>(n)};
  spillway::event_timer timer(s);
  so::rk4_integrate_coupled_async(so::systems::mean_field_rhs{}, mean, cf(1, 0), 0.0, 1e-4, steps,
                                  so::make_state_view(n, dF.data(), dG.data()), traj.span(), s);
  *ms = timer.stop();
  std::vector<cf> delta(steps + 1);
  traj.copy_to_host_async(cuda::std::span<cf>(delta.data(), delta.size()), s);  // once, at the end
  dF.copy_to_host_async(cuda::std::span<cf>(F.data(), n), s);
  dG.copy_to_host_async(cuda::std::span<cf>(G.data(), n), s);
  s.synchronize();
  return delta;
}

std::vector<cf> run_host(std::uint64_t side, std::uint64_t steps, std::vector<cf>& F, std::vector<cf>& G) {
  const so::systems::mean_field_coupling<float> mean{1.0 / static_cast<double>(side * side)};
  return so::host::rk4_integrate_coupled(so::systems::mean_field_rhs{}, mean, cf(1, 0), 0.0, 1e-4, steps, F, G);
}

// The seed's system: delta <- sum(F), uniform F0 = G0 = 1, delta0 = 1. Returns delta(t) for up to
// `steps` steps (device when there is one, else the host implementation).
std::vector<cf> run_seed_system(std::uint64_t side, std::uint64_t steps, bool gpu) {
  const std::uint64_t n = side * side;
  std::vector<cf> F(n, cf(1.0f, 0.0f)), G(n, cf(1.0f, 0.0f));
  const auto sum = so::systems::mean_field_coupling<float>::sum();
  if (!gpu) return so::host::rk4_integrate_coupled(so::systems::mean_field_rhs{}, sum, cf(1, 0), 0.0, 1e-4, steps, F, G);
  spillway::stream s;
  auto dF = spillway::device_buffer<cf>::from_host(F, s);
  auto dG = spillway::device_buffer<cf>::from_host(G, s);
  spillway::device_buffer<cf> traj(steps + 1, s);
  so::rk4_integrate_coupled_async(so::systems::mean_field_rhs{}, sum, cf(1, 0), 0.0, 1e-4, steps,
                                  so::make_state_view(n, dF.data(), dG.data()), traj.span(), s);
  return traj.to_host(s);
}

// Runs the seed's system and says where it stops being finite; false when it did not blow up.
bool show_seed_blow_up(std::uint64_t side, bool gpu) {
  const std::uint64_t steps = 10;
  const auto d = run_seed_system(side, steps, gpu);
  std::printf("the seed's system (delta <- sum(F), F0 = G0 = 1, N = %llu, %s):\n", static_cast<unsigned long long>(side),
              gpu ? "GPU" : "host implementation");
  std::size_t bad = d.size();
  for (std::size_t k = 0; k < d.size(); ++k) {
    const double a = cabs(d[k]);
    std::printf("  step %2zu  |delta| = %.3e\n", k, a);
    if (!std::isfinite(a)) {
      bad = k;
      break;
    }
  }
  const double growth = static_cast<double>(side * side) * 1e-4;
  if (bad == d.size()) {
    std::printf("  still finite after %llu steps (N^2 dt = %.3g per step is too small to blow up here)\n",
                static_cast<unsigned long long>(steps), growth);
    return false;
  }
  std::printf("  -> not finite at step %zu: delta is a sum over N^2 = %llu elements of F ~ 1, so after one step\n"
              "     |delta| ~ N^2, and each step then changes F by about |delta| * dt, N^2 * dt = %.0f times F\n"
              "     itself; F and G feed each other through delta and the growth compounds until float\n"
              "     overflows (double lasts only a step or two longer). Use the mean (mean_field_coupling::\n"
              "     mean(n), below) or scale the sum: the integrator is not at fault.\n",
              bad, static_cast<unsigned long long>(side * side), growth);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const bool gpu = spillway::device_count() > 0;
  std::uint64_t side = gpu ? 4096 : 64;
  std::uint64_t steps = 1000;
  const std::uint64_t seed = 20261121;
  for (int a = 1; a < argc; a += 2) {
    const bool has_value = a + 1 < argc;
    if (std::strcmp(argv[a], "--n") == 0 && has_value) {
      side = std::strtoull(argv[a + 1], nullptr, 10);
    } else if (std::strcmp(argv[a], "--steps") == 0 && has_value) {
      steps = std::strtoull(argv[a + 1], nullptr, 10);
    } else {
      const bool help = std::strcmp(argv[a], "--help") == 0 || std::strcmp(argv[a], "-h") == 0;
      if (!help) std::fprintf(stderr, "rk4_coupled: unknown or incomplete argument %s\n", argv[a]);
      std::fprintf(help ? stdout : stderr,
                   "spillway-rk4-coupled: first the seed program's own system (delta <- sum(F), uniform F0 = G0 = 1)\n"
                   "for 10 steps, showing where and why it overflows; then the stable variant:\n"
                   "RK4 of the coupled mean-field system dF/dt = -2iF - i delta (2G - 1),\n"
                   "dG/dt = -i (conj(delta) F - delta conj(F)), delta <- mean(F) after every step, on a SIDE x SIDE\n"
                   "grid of complex64 F and G, with the state on the device the whole time; writes delta(t) to\n"
                   "rk4_coupled_delta.csv and checks it against the host implementation (exits 1 on a mismatch).\n\n"
                   "usage: spillway-rk4-coupled [--n SIDE] [--steps STEPS]\n"
                   "  --n SIDE        grid side (default 4096 on a GPU, 64 on the host implementation without one)\n"
                   "  --steps STEPS   RK4 steps of dt = 1e-4 (default 1000)\n"
                   "  -h, --help      this text\n\n"
                   "example:\n  spillway-rk4-coupled --n 1024 --steps 2000\n");
      return help ? 0 : 2;
    }
  }
  if (side == 0 || steps == 0) {
    std::fprintf(stderr, "rk4_coupled: --n and --steps must be positive\n");
    return 2;
  }
  // The seed's system first (N = 4096 on a GPU, 512 on the host: big enough to blow up).
  const bool blew_up = show_seed_blow_up(gpu ? 4096 : 512, gpu);
  std::printf("\nthe stable variant (delta <- mean(F), small random fields):\n");
  const std::uint64_t n = side * side;
  std::vector<cf> F, G;
  random_fields(n, seed, F, G);
  const std::vector<cf> G0 = G;
  std::vector<cf> delta;
  bool ok = true;
  if (gpu) {
    float ms = 0;
    delta = run_device(side, steps, F, G, &ms);
    std::printf("GPU: N = %llu (%llu complex64 per field), %llu steps in %.2f ms = %.4f ms/step (seed %llu)\n",
                static_cast<unsigned long long>(side), static_cast<unsigned long long>(n),
                static_cast<unsigned long long>(steps), ms, ms / static_cast<double>(steps),
                static_cast<unsigned long long>(seed));
    // Check 1: a small copy of the problem on the device and on the host implementation.
    std::vector<cf> f1, g1;
    random_fields(48 * 48, seed + 1, f1, g1);
    std::vector<cf> f2 = f1, g2 = g1;
    float unused = 0;
    const auto dd = run_device(48, steps, f1, g1, &unused);
    const auto hd = run_host(48, steps, f2, g2);
    double worst = 0, scale = 0;
    for (std::size_t k = 0; k < dd.size(); ++k) {
      worst = std::max(worst, cabs(dd[k] - hd[k]));
      scale = std::max(scale, cabs(hd[k]));
    }
    std::printf("check: N = 48 device vs host delta(t): max difference %.3e of max |delta| %.3e\n", worst, scale);
    ok = ok && worst <= 1e-4 * scale;
  } else {
    std::printf("No GPU here (%s): running N = %llu on spillway's host implementation instead of N = 4096.\n",
                spillway::no_gpu_reason().c_str(), static_cast<unsigned long long>(side));
    delta = run_host(side, steps, F, G);
  }
  // Check 2: the final delta is the mean of the final F.
  double re = 0, im = 0;
  for (const cf& v : F) {
    re += v.real();
    im += v.imag();
  }
  const cf mean(static_cast<float>(re / static_cast<double>(n)), static_cast<float>(im / static_cast<double>(n)));
  const double mean_err = cabs(mean - delta.back()) / std::max(cabs(delta.back()), 1e-30);
  std::printf("check: final delta = (%.6e, %.6e), mean of final F = (%.6e, %.6e), relative difference %.2e\n",
              delta.back().real(), delta.back().imag(), mean.real(), mean.imag(), mean_err);
  ok = ok && mean_err <= 1e-4;
  // Check 3: dG/dt is real, so Im(G) must not move at all.
  double drift = 0;
  for (std::uint64_t i = 0; i < n; ++i) drift = std::max(drift, std::abs(static_cast<double>(G[i].imag() - G0[i].imag())));
  std::printf("check: max |Im G(t_end) - Im G(0)| = %.2e (an invariant)\n", drift);
  ok = ok && drift == 0.0;
  ok = ok && blew_up;  // the seed's system must show its overflow, or the explanation above is wrong

  std::FILE* csv = std::fopen("rk4_coupled_delta.csv", "w");
  if (csv == nullptr) {
    std::fprintf(stderr, "rk4_coupled: cannot write rk4_coupled_delta.csv\n");
    return 1;
  }
  std::fprintf(csv, "step,t,re_delta,im_delta,abs_delta\n");
  for (std::size_t k = 0; k < delta.size(); ++k) {
    std::fprintf(csv, "%zu,%.6e,%.9e,%.9e,%.9e\n", k, 1e-4 * static_cast<double>(k), delta[k].real(), delta[k].imag(), cabs(delta[k]));
  }
  std::fclose(csv);
  std::printf("wrote rk4_coupled_delta.csv (%zu rows)\n", delta.size());
  if (std::system("command -v gnuplot > /dev/null 2>&1") == 0) {
    std::FILE* gp = std::fopen("rk4_coupled_delta.gp", "w");
    if (gp != nullptr) {
      std::fprintf(gp,
                   "set terminal png size 900,500\nset output 'rk4_coupled_delta.png'\nset datafile separator ','\n"
                   "set xlabel 't'\nset ylabel '|delta|'\nset logscale y\nset title 'mean-field RK4, N = %llu'\n"
                   "plot 'rk4_coupled_delta.csv' every ::2 using 2:5 with lines title '|delta|(t)'\n",
                   static_cast<unsigned long long>(side));
      std::fclose(gp);
      if (std::system("gnuplot rk4_coupled_delta.gp") == 0) std::printf("wrote rk4_coupled_delta.png\n");
    }
  } else {
    std::printf("gnuplot not installed: no PNG (plot column abs_delta of the CSV against t)\n");
  }
  std::printf("%s\n", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}
