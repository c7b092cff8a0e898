// Seed 2: an elementwise job over host arrays larger than device memory (the seed program copied
// whole arrays to the GPU and ran out of memory). Written from README.md and docs/pipeline.md only.
//
//   spillway-seed-bigger-than-vram [--n N] [--budget SIZE]
//
// c[i] = a[i] * b[i] + 1 for three float64 host arrays, streamed through every GPU in chunks that
// fit the budget (copies in, compute and copies out overlapped), checked element by element, by
// spillway::streamed_map (the map over host arrays; spillway::transform is its older name).
// With no GPU the host implementation runs (transform_options::host_fallback).
#include <spillway/pipeline.cuh>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

struct fma1 {
  __host__ __device__ double operator()(double a, double b) const { return a * b + 1.0; }
};

int main(int argc, char** argv) {
  std::size_t n = 50'000'000;  // 1.2 GB in all; the seed's case is 1.5e9 (36 GB)
  std::size_t budget = std::size_t{256} << 20;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("spillway-seed-bigger-than-vram: c = a * b + 1 over float64 host arrays of any size, streamed\n"
                  "through every GPU in chunks that fit a per-GPU memory budget, checked element by element.\n"
                  "Host implementation without a GPU.\n\n"
                  "usage: spillway-seed-bigger-than-vram [--n N] [--budget SIZE]\n"
                  "  --n N           elements per array (default 50000000)\n"
                  "  --budget SIZE   device memory per GPU (default 256MiB)\n\n"
                  "example:\n  spillway-seed-bigger-than-vram --n 1500000000 --budget 8GiB\n");
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "error: %s needs a value (see --help)\n", a.c_str());
      return 2;
    }
    if (a == "--n") n = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--budget") {
      try {
        budget = spillway::parse_byte_size(argv[++i]);  // 4GiB, 512MiB, 8000000000…
      } catch (const spillway::logic_error& e) {
        std::fprintf(stderr, "error: --budget: %s\n", e.what());
        return 2;
      }
    }
    else {
      std::fprintf(stderr, "error: unknown argument %s (see --help)\n", a.c_str());
      return 2;
    }
  }
  std::vector<double> a(n), b(n), c(n, -1.0);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = static_cast<double>(i % 1000) * 0.25;
    b[i] = static_cast<double>(i % 7) - 3.0;
  }
  spillway::transform_options o;
  o.budget = spillway::memory_budget(budget);
  o.host_fallback = true;
  const auto r = spillway::streamed_map(o, c, fma1{}, a, b);  // pageable vectors: spillway stages them
  std::printf("%zu elements in %zu chunks on %s, %.2f s\n", n, r.tasks_total,
              r.devices.empty() ? "the host (no GPU)" : (std::to_string(r.devices.size()) + " GPU(s)").c_str(),
              r.elapsed_seconds);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (c[i] != a[i] * b[i] + 1.0 && bad++ < 5) std::printf("c[%zu] = %g, expected %g\n", i, c[i], a[i] * b[i] + 1.0);
  }
  std::printf("%s\n", bad ? "FAILED" : "OK: every element matches");
  return bad ? 1 : 0;
}
