// timing: why a host clock around asynchronous launches lies, and how event_timer gets it right.
//
// A user timed a loop of 1000 matrix-multiply launches with a host clock, then timed the copy of
// the result back to the host, and saw the "copy" grow with the loop count. Kernel launches only
// enqueue work: the host clock stops as soon as the launch queue has accepted the launches, and the
// blocking copy that follows waits for all of them to finish, so the copy absorbs the kernels' time.
// CUDA events are stamped by the GPU itself when the stream reaches them.
//
// Usage: spillway-timing [--iterations 1000] [--n 512]   (or positionally: [iterations] [n])
#include <spillway/spillway.cuh>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace {

// Deliberately plain: one thread per output element, the textbook loop.
__global__ void matmul(const float* a, const float* b, float* c, int n) {
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row < n && col < n) {
    float acc = 0.0f;
    for (int k = 0; k < n; ++k) acc += a[row * n + k] * b[k * n + col];
    c[row * n + col] = acc;
  }
}

double host_ms(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void print_usage(std::FILE* f) {
  std::fprintf(f,
               "spillway-timing: times a loop of naive n x n matrix-multiply launches two ways - a host clock\n"
               "around the launches and around the copy back (which wrongly absorbs the kernels' time), and\n"
               "event_timer (CUDA events stamped by the GPU) - and shows that only the events are right.\n"
               "With no GPU it says so and exits 0.\n\n"
               "usage: spillway-timing [--iterations N] [--n N]   (also positionally: [iterations] [n])\n"
               "  --iterations N   kernel launches in the loop (default 1000)\n"
               "  --n N            matrix side (default 512)\n"
               "  -h, --help       this text\n\n"
               "example:\n  spillway-timing --iterations 200 --n 1024\n");
}

int main(int argc, char** argv) {
  int iterations = 1000, n = 512, positional = 0;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (std::strcmp(a, "--help") == 0 || std::strcmp(a, "-h") == 0) {
      print_usage(stdout);
      return 0;
    }
    if ((std::strcmp(a, "--iterations") == 0 || std::strcmp(a, "--n") == 0) && i + 1 < argc) {
      (a[2] == 'i' ? iterations : n) = std::atoi(argv[++i]);
    } else if (a[0] != '-' && positional < 2) {
      (positional++ == 0 ? iterations : n) = std::atoi(a);
    } else {
      std::fprintf(stderr, "spillway-timing: error: unknown or incomplete argument %s\n\n", a);
      print_usage(stderr);
      return 2;
    }
  }
  if (iterations <= 0 || n <= 0) {
    std::fprintf(stderr, "spillway-timing: error: iterations and n must be > 0\n\n");
    print_usage(stderr);
    return 2;
  }
  if (!spillway::gpu_available()) {
    std::printf("No GPU on this machine (%s): nothing to time. This example needs a CUDA GPU.\n",
                spillway::no_gpu_reason().c_str());
    return 0;
  }
  const std::size_t elems = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
  std::mt19937 rng(12345);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> a(elems), b(elems), c(elems, std::nanf(""));
  for (auto& x : a) x = dist(rng);
  for (auto& x : b) x = dist(rng);

  spillway::stream s;
  spillway::device_buffer<float> da(elems, s), db(elems, s), dc(elems, s);
  da.copy_from_host_async(cuda::std::span<const float>(a.data(), elems), s);
  db.copy_from_host_async(cuda::std::span<const float>(b.data(), elems), s);
  const dim3 block(16, 16);
  const dim3 grid(static_cast<unsigned>((n + 15) / 16), static_cast<unsigned>((n + 15) / 16));
  auto launch_loop = [&] {
    for (int i = 0; i < iterations; ++i) {
      matmul<<<grid, block, 0, s.value()>>>(da.data(), db.data(), dc.data(), n);
      SPILLWAY_CHECK_LAUNCH();
    }
  };
  launch_loop();  // warm-up: module load, first-launch costs
  s.synchronize();

  // 1. The wrong way: host clock around asynchronous launches, then around the blocking copy.
  auto t0 = std::chrono::steady_clock::now();
  launch_loop();
  const double wrong_loop_ms = host_ms(t0);
  t0 = std::chrono::steady_clock::now();
  dc.copy_to_host_async(cuda::std::span<float>(c.data(), elems), s);  // pageable: returns when done
  s.synchronize();
  const double wrong_copy_ms = host_ms(t0);

  // 2. The right way: events on the stream around the same loop and the same copy.
  spillway::event_timer loop_timer(s);
  launch_loop();
  const float loop_ms = loop_timer.stop();
  spillway::event_timer copy_timer(s);
  dc.copy_to_host_async(cuda::std::span<float>(c.data(), elems), s);
  const float copy_ms = copy_timer.stop();

  std::printf("%d launches of a %d x %d matmul, then one %.1f MB copy back to the host\n", iterations, n, n,
              elems * 4 / 1e6);
  std::printf("  host clock : loop %9.3f ms   copy back %9.3f ms   <- the copy 'contains' the kernels\n",
              wrong_loop_ms, wrong_copy_ms);
  std::printf("  event_timer: loop %9.3f ms   copy back %9.3f ms   (%.3f ms per matmul)\n", loop_ms, copy_ms,
              loop_ms / iterations);

  // Check a sample of entries against the host.
  int bad = 0;
  std::mt19937 pick(777);
  for (int t = 0; t < 64; ++t) {
    const int i = static_cast<int>(pick() % static_cast<unsigned>(n));
    const int j = static_cast<int>(pick() % static_cast<unsigned>(n));
    double ref = 0.0;
    for (int k = 0; k < n; ++k) ref += static_cast<double>(a[i * n + k]) * b[k * n + j];
    const double got = c[static_cast<std::size_t>(i) * n + j];
    if (!(std::fabs(got - ref) <= 1e-3 * (1.0 + std::fabs(ref)))) ++bad;
  }
  if (bad != 0) {
    std::printf("check FAILED: %d of 64 sampled entries differ from the host\n", bad);
    return 1;
  }
  std::printf("check: 64 sampled entries match the host (tolerance 1e-3 relative)\n");
  return 0;
}
