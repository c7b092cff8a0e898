// Seed 1: A·Aᵀ of a 0/1 matrix whose product does not fit in device memory (the seed program died
// with CUDA_ERROR_OUT_OF_MEMORY). Written from README.md and docs/gram.md only.
//
//   spillway-seed-gram-beyond-memory [--rows R] [--cols C] [--budget SIZE]
//
// Packs a random 0/1 matrix, computes Jaccard for every pair of rows strip by strip under a small
// device budget (the full float matrix never exists anywhere), keeps per-row the best partner, and
// checks a sample of rows against a direct count on the host. With no GPU the host implementation
// runs (gram_options::host_fallback).
#include <spillway/gram.cuh>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <vector>

namespace sg = spillway::gram;

int main(int argc, char** argv) {
  std::int64_t rows = 6000, cols = 3000;
  std::size_t budget = std::size_t{64} << 20;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("spillway-seed-gram-beyond-memory: Jaccard of every pair of rows of a random 0/1 matrix, delivered\n"
                  "strip by strip under a device memory budget (the result is never held whole); keeps each row's\n"
                  "best partner and checks sampled rows against the host. Host implementation without a GPU.\n\n"
                  "usage: spillway-seed-gram-beyond-memory [--rows R] [--cols C] [--budget SIZE]\n"
                  "  --rows R        rows (default 6000)\n  --cols C        columns (default 3000)\n"
                  "  --budget SIZE   device memory per GPU (default 64MiB)\n\n"
                  "example:\n  spillway-seed-gram-beyond-memory --rows 100000 --cols 20000 --budget 4GiB\n");
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "error: %s needs a value (see --help)\n", a.c_str());
      return 2;
    }
    if (a == "--rows") rows = std::atoll(argv[++i]);
    else if (a == "--cols") cols = std::atoll(argv[++i]);
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

  // The user's data: one byte per entry, 0 or 1.
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(rows * cols));
  std::mt19937_64 rng(2026);
  for (auto& b : bytes) b = (rng() % 10) < 3 ? 1 : 0;
  const sg::bit_matrix a = sg::pack_bits(bytes.data(), rows, cols);

  sg::gram_options o;
  o.epilogue = sg::metric::jaccard;
  o.budget = spillway::memory_budget(budget);
  o.host_fallback = true;  // no GPU: the host implementation computes the same strips
  // Best partner per row, from the strips (each strip: its rows, columns from its first row on).
  std::vector<float> best(static_cast<std::size_t>(rows), -1.0f);
  std::vector<std::int64_t> partner(static_cast<std::size_t>(rows), -1);
  std::mutex m;
  const auto report = sg::gram_strips<float>(a.view(), [&](const sg::gram_strip<float>& st) {
    std::lock_guard<std::mutex> g(m);
    for (std::int64_t i = st.first_row; i < st.first_row + st.rows; ++i)
      for (std::int64_t j = st.first_col; j < st.first_col + st.cols; ++j) {
        if (i == j) continue;
        const float v = st.at(i, j);
        // Symmetric: (i, j) is also (j, i). Ties go to the smaller index.
        if (v > best[i] || (v == best[i] && j < partner[i])) best[i] = v, partner[i] = j;
        if (j > i && (v > best[j] || (v == best[j] && i < partner[j]))) best[j] = v, partner[j] = i;
      }
  }, o);
  std::printf("%lld x %lld: %zu strips on %s\n", static_cast<long long>(rows), static_cast<long long>(cols),
              report.tasks_total, report.devices.empty() ? "the host (no GPU)" : "the GPU");

  // Check 40 rows by counting bits directly.
  int bad = 0;
  for (int s = 0; s < 40; ++s) {
    const std::int64_t i = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(rows));
    float want = -1.0f;
    std::int64_t want_j = -1;
    for (std::int64_t j = 0; j < rows; ++j) {
      if (j == i) continue;
      std::int64_t both = 0, either = 0;
      for (std::int64_t c = 0; c < cols; ++c) {
        const int x = bytes[i * cols + c], y = bytes[j * cols + c];
        both += x & y;
        either += x | y;
      }
      const float v = either == 0 ? 1.0f : static_cast<float>(static_cast<double>(both) / static_cast<double>(either));
      if (v > want) want = v, want_j = j;
    }
    if (best[i] != want || partner[i] != want_j) {
      if (bad++ < 5)
        std::printf("row %lld: best %g (row %lld), expected %g (row %lld)\n", static_cast<long long>(i), best[i],
                    static_cast<long long>(partner[i]), want, static_cast<long long>(want_j));
    }
  }
  std::printf("%s: best partners of 40 sampled rows %s the host count\n", bad ? "FAILED" : "OK", bad ? "differ from" : "match");
  return bad ? 1 : 0;
}
