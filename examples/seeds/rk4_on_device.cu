// Seed 4: RK4 of ~10^7 coupled complex ODEs whose state never leaves the device (the seed copied F
// and G to the host every step). Written from README.md and docs/ode.md only.
//
//   spillway-seed-rk4-on-device [--n SIDE] [--steps STEPS]
//
// dF/dt = -2iF - i delta (2G - 1), dG/dt = -i (conj(delta) F - delta conj(F)), delta <- mean(F) after
// every step (the seed summed; see examples/rk4_coupled.cu for why that overflows). delta(t) stays
// on the device and is copied once at the end. Checks: the last delta is the mean of the final F,
// and Im G never moves (dG/dt is real). With no GPU the host implementation runs a smaller grid.
#include <spillway/ode.cuh>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace so = spillway::ode;
using cf = cuda::std::complex<float>;

int main(int argc, char** argv) {
  const bool gpu = spillway::device_count() > 0;
  std::uint64_t side = gpu ? 4096 : 128, steps = 200;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("spillway-seed-rk4-on-device: RK4 of two N x N complex64 fields coupled through delta <- mean(F),\n"
                  "the state on the device for all steps, delta(t) copied once at the end; checks delta against the\n"
                  "final fields. Host implementation (smaller grid) without a GPU.\n\n"
                  "usage: spillway-seed-rk4-on-device [--n SIDE] [--steps STEPS]\n"
                  "  --n SIDE        grid side (default 4096 on a GPU, 128 without)\n"
                  "  --steps STEPS   steps of dt = 1e-4 (default 200)\n\n"
                  "example:\n  spillway-seed-rk4-on-device --n 2048 --steps 1000\n");
      return 0;
    }
    if (i + 1 >= argc || (a != "--n" && a != "--steps")) {
      std::fprintf(stderr, "error: unknown or incomplete argument %s (see --help)\n", a.c_str());
      return 2;
    }
    (a == "--n" ? side : steps) = std::strtoull(argv[++i], nullptr, 10);
  }
  const std::uint64_t n = side * side;
  std::vector<cf> F(n), G(n);
  std::mt19937_64 rng(4);
  std::uniform_real_distribution<float> u(-7e-4f, 7e-4f);
  for (auto& z : F) z = cf(u(rng), u(rng));
  for (auto& z : G) z = cf(u(rng), u(rng));
  const std::vector<cf> G0 = G;
  const auto coupling = so::systems::mean_field_coupling<float>::mean(n);
  std::vector<cf> delta;
  if (gpu) {
    spillway::stream s;
    auto dF = spillway::device_buffer<cf>::from_host(F, s);
    auto dG = spillway::device_buffer<cf>::from_host(G, s);
    spillway::device_buffer<cf> traj(steps + 1, s);
    spillway::event_timer t(s);
    so::rk4_integrate_coupled_async(so::systems::mean_field_rhs{}, coupling, cf(1, 0), 0.0, 1e-4, steps,
                                    so::make_state_view(n, dF.data(), dG.data()), traj.span(), s);
    const float ms = t.stop();
    std::printf("N = %llu, %llu steps on the GPU: %.4f ms per step\n", static_cast<unsigned long long>(side),
                static_cast<unsigned long long>(steps), ms / static_cast<double>(steps));
    delta = traj.to_host(s);  // the one copy of delta(t)
    F = dF.to_host(s);
    G = dG.to_host(s);
  } else {
    std::printf("no GPU (%s): host implementation, N = %llu\n", spillway::no_gpu_reason().c_str(),
                static_cast<unsigned long long>(side));
    delta = so::host::rk4_integrate_coupled(so::systems::mean_field_rhs{}, coupling, cf(1, 0), 0.0, 1e-4, steps, F, G);
  }
  double re = 0, im = 0;
  for (const cf& z : F) re += z.real(), im += z.imag();
  const double mr = re / static_cast<double>(n), mi = im / static_cast<double>(n);
  const double err = std::hypot(mr - delta.back().real(), mi - delta.back().imag()) /
                     std::max(std::hypot(mr, mi), 1e-30);
  bool im_g_fixed = true;
  for (std::uint64_t i = 0; i < n; ++i) im_g_fixed = im_g_fixed && G[i].imag() == G0[i].imag();
  // delta is summed in double and rounded to float once: relative 1e-5 is several float ulps.
  const bool ok = delta.size() == steps + 1 && err <= 1e-5 && im_g_fixed;
  std::printf("delta(end) = (%.6e, %.6e), mean of final F = (%.6e, %.6e): relative difference %.1e; Im G %s\n",
              delta.back().real(), delta.back().imag(), mr, mi, err, im_g_fixed ? "unchanged" : "CHANGED");
  std::printf("%s\n", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}
