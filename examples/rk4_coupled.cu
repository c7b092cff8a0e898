// rk4_coupled: the mean-field two-field system integrated with RK4, state kept on the device.
//
//   dF/dt = -2i F - i delta (2G - 1),   dG/dt = -i (conj(delta) F - delta conj(F)),
//   F, G: N x N complex64, dt = 1e-4, delta0 = 1, and after every step delta <- mean(F).
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
                   "spillway-rk4-coupled: RK4 of the coupled mean-field system dF/dt = -2iF - i delta (2G - 1),\n"
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
