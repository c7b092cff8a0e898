// stream_transform — the elementwise product of two rows × cols float64 host arrays that need not
// fit in device memory, streamed through every visible GPU under a device-memory budget.
//
//   spillway-stream-transform [--rows N] [--cols N] [--budget 256MiB] [--pinned]
//
// The seed case is --rows 1000000 --cols 500 (two 4 GB inputs, a 4 GB output). The default is
// small enough to finish in seconds on a CPU-only machine, where the host implementation runs
// instead (and says so). Exits non-zero when the result differs from a plain host loop.
#include <spillway/core.hpp>
#include <spillway/pipeline.cuh>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct multiplies {
  __host__ __device__ double operator()(double a, double b) const { return a * b; }
};

// Draws a one-line progress bar on stderr, only once the job has run for a second.
bool draw_progress(const spillway::progress_info& p) {
  if (p.elapsed_seconds < 1.0 && p.tasks_done < p.tasks_total) return true;
  const int width = 40;
  const double f = p.tasks_total ? static_cast<double>(p.tasks_done) / static_cast<double>(p.tasks_total) : 1.0;
  const int fill = static_cast<int>(f * width);
  std::fprintf(stderr, "\r[%.*s%*s] %3.0f%%  %zu/%zu chunks  %.1f GB moved  %.1f s", fill,
               "########################################", width - fill, "", 100.0 * f, p.tasks_done,
               p.tasks_total, static_cast<double>(p.bytes_moved) / 1e9, p.elapsed_seconds);
  if (p.tasks_done == p.tasks_total) std::fprintf(stderr, "\n");
  return true;
}

void print_usage(std::FILE* f) {
  std::fprintf(f,
               "spillway-stream-transform: c = a * b for two rows x cols float64 host arrays that need not fit\n"
               "in device memory, streamed through every visible GPU under a per-GPU memory budget (copies in,\n"
               "compute and copies out overlapped), checked against a plain host loop; exits 1 on a mismatch.\n"
               "With no GPU the host implementation runs instead (and says so).\n\n"
               "usage: spillway-stream-transform [--rows N] [--cols N] [--budget SIZE] [--pinned]\n"
               "  --rows N        rows (default 20000; the seed case is 1000000)\n"
               "  --cols N        columns (default 500)\n"
               "  --budget SIZE   device memory per GPU, e.g. 256MiB, 4GiB (default 256MiB)\n"
               "  --pinned        inputs and output in pinned memory (default pageable, staged by spillway)\n"
               "  -h, --help      this text\n\n"
               "example (the seed's 12 GB job):\n"
               "  spillway-stream-transform --rows 1000000 --cols 500 --budget 4GiB --pinned\n");
}

std::size_t parse_size(const char* flag, const char* v) {
  char* end = nullptr;
  const unsigned long long x = std::strtoull(v, &end, 10);
  if (end == v || *end != '\0' || x == 0) {
    std::fprintf(stderr, "%s: expected a positive integer, got '%s'\n", flag, v);
    std::exit(2);
  }
  return static_cast<std::size_t>(x);
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t rows = 20000, cols = 500, budget = std::size_t{256} << 20;
  bool pinned = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--rows" || a == "--cols") && i + 1 < argc) {
      (a == "--rows" ? rows : cols) = parse_size(argv[i], argv[i + 1]);
      ++i;
    } else if (a == "--budget" && i + 1 < argc) {
      try {
        budget = spillway::parse_byte_size(argv[++i]);
      } catch (const spillway::logic_error& e) {
        std::fprintf(stderr, "spillway-stream-transform: error: --budget: %s\n", e.what());
        return 2;
      }
    } else if (a == "--pinned") {
      pinned = true;
    } else if (a == "--help" || a == "-h") {
      print_usage(stdout);
      return 0;
    } else {
      std::fprintf(stderr, "spillway-stream-transform: error: unknown or incomplete argument %s\n\n", a.c_str());
      print_usage(stderr);
      return 2;
    }
  }
  const std::size_t n = rows * cols;
  std::printf("c = a * b for %zu x %zu float64 (%.2f GB in, %.2f GB out), budget %.0f MiB per GPU, %s inputs\n",
              rows, cols, 2.0 * n * 8 / 1e9, n * 8 / 1e9, static_cast<double>(budget) / (1 << 20), pinned ? "pinned" : "pageable");

  // Pageable (std::vector) or pinned storage; the pipeline stages pageable data itself.
  std::vector<double> va, vb, vc;
  spillway::pinned_buffer<double> pa, pb, pc;
  const int gpus = spillway::device_count();
  if (pinned && gpus > 0) {
    pa = spillway::pinned_buffer<double>(n);
    pb = spillway::pinned_buffer<double>(n);
    pc = spillway::pinned_buffer<double>(n);
  } else {
    va.resize(n);
    vb.resize(n);
    vc.resize(n);
  }
  double* a = pinned && gpus > 0 ? pa.data() : va.data();
  double* b = pinned && gpus > 0 ? pb.data() : vb.data();
  double* c = pinned && gpus > 0 ? pc.data() : vc.data();
  for (std::size_t i = 0; i < n; ++i) {  // deterministic, non-trivial values
    a[i] = static_cast<double>((i * 2654435761u) % 1000003) * 1e-3 - 500.0;
    b[i] = 1.0 / static_cast<double>(1 + i % 977);
  }
  std::memset(c, 0xFF, n * sizeof(double));  // poison: every element must be written

  const auto t0 = std::chrono::steady_clock::now();
  if (gpus == 0) {
    std::printf("no GPU here (%s): running the host implementation\n", spillway::no_gpu_reason().c_str());
    spillway::transform_on_host(spillway::host_output(c, n), multiplies{}, spillway::host_input(a, n),
                                spillway::host_input(b, n));
  } else {
    spillway::transform_options o;
    o.budget = spillway::memory_budget(budget);
    o.progress = draw_progress;
    try {
      const auto r = spillway::streamed_map(o, spillway::host_output(c, n), multiplies{}, spillway::host_input(a, n),
                                            spillway::host_input(b, n));
      std::printf("%zu chunks over %zu GPU(s):", r.tasks_total, r.devices.size());
      for (std::size_t d = 0; d < r.devices.size(); ++d)
        std::printf(" GPU %d took %zu", r.devices[d], r.tasks_per_device[d]);
      std::printf("\n");
    } catch (const spillway::pipeline_error& e) {
      std::fprintf(stderr, "failed: %s (%zu of %zu chunks written)\n", e.what(), e.report().tasks_completed,
                   e.report().tasks_total);
      return 1;
    } catch (const spillway::logic_error& e) {
      std::fprintf(stderr, "bad arguments: %s\n", e.what());
      return 2;
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%.3f s, %.1f GB/s end to end (bytes in + bytes out over wall time)\n", s, 3.0 * n * 8 / 1e9 / s);

  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double want = a[i] * b[i];
    if (std::memcmp(&c[i], &want, sizeof want) != 0 && bad++ < 5) {
      std::fprintf(stderr, "mismatch at %zu: got %.17g, want %.17g\n", i, c[i], want);
    }
  }
  if (bad != 0) {
    std::printf("FAILED: %zu of %zu elements differ from the host\n", bad, n);
    return 1;
  }
  std::printf("OK: all %zu elements match the host bit for bit\n", n);
  return 0;
}
