// ufunc: the discount-factor case, cv = multBy * discount, with multBy of shape (4000,5) broadcast
// against discount of shape (100,4000,5) — as an elementwise map, as a generalized ufunc
// "(m,o),(m,o)->(m,o)", and on the host target. Prints the times and checks every result against
// the host's; exits non-zero on a mismatch. Without a GPU it runs the host target only and says so.
#include <spillway/core/event_timer.hpp>
#include <spillway/map.cuh>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

using spillway::index_t;

namespace {

// __host__ __device__ so the same functor runs on either target and its return type deduces.
struct multiply {
  __host__ __device__ double operator()(double m, double d) const { return m * d; }
};

// One core instance is a (4000,5) slab; its 20000 products are shared among the team's threads.
struct multiply_core {
  __host__ __device__ void operator()(spillway::gufunc_team t, spillway::ndview<const double> m,
                                      spillway::ndview<const double> d, spillway::ndview<double> out) const {
    const index_t cols = m.extent(1);
    const index_t n = m.extent(0) * cols;
    for (index_t i = t.rank(); i < n; i += t.size()) out(i / cols, i % cols) = m(i / cols, i % cols) * d(i / cols, i % cols);
  }
};

int mismatches(const std::vector<double>& got, const std::vector<double>& want, const char* what) {
  int bad = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i] && bad++ < 5) std::printf("  %s: element %zu is %.17g, expected %.17g\n", what, i, got[i], want[i]);
  }
  std::printf("  %-22s %s\n", what, bad == 0 ? "matches the host result" : "MISMATCH");
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const bool help = std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0;
    std::FILE* f = help ? stdout : stderr;
    if (!help) std::fprintf(stderr, "spillway-ufunc: error: unknown argument %s\n\n", argv[i]);
    std::fprintf(f,
                 "spillway-ufunc: cv = multBy * discount with multBy (4000,5) broadcast against discount\n"
                 "(100,4000,5), computed three ways (a device elementwise map, a device generalized ufunc\n"
                 "\"(m,o),(m,o)->(m,o)\", the host target), timed with CUDA events (median of 20 after 3\n"
                 "warm-ups) and checked against the host result; exits 1 on a mismatch. With no GPU it runs\n"
                 "the host target only and says so.\n\n"
                 "usage: spillway-ufunc [-h|--help]   (no other options: the shapes are the seed's)\n\n"
                 "example:\n  spillway-ufunc\n");
    return help ? 0 : 2;
  }
  const std::vector<index_t> small_shape{4000, 5}, big_shape{100, 4000, 5};
  std::vector<double> mult_by(4000 * 5), discount(100 * 4000 * 5);
  std::mt19937_64 g(20260101);
  std::uniform_real_distribution<double> u(0.5, 1.5);
  for (auto& x : mult_by) x = u(g);
  for (auto& x : discount) x = u(g);

  // Host target: a plain (OpenMP) loop over host memory, no PCIe trip.
  const auto h_mult_by = spillway::make_view(mult_by.data(), small_shape);
  const auto h_discount = spillway::make_view(discount.data(), big_shape);
  const auto t0 = std::chrono::steady_clock::now();
  const auto host_cv = spillway::map_host(multiply{}, h_mult_by, h_discount);
  const auto t1 = std::chrono::steady_clock::now();
  std::printf("cv = multBy (4000,5) * discount (100,4000,5) -> (100,4000,5)\n");
  std::printf("  host target map        %8.3f ms\n", std::chrono::duration<double, std::milli>(t1 - t0).count());

  if (spillway::device_count() == 0) {
    std::printf("no GPU here (%s): ran the host target only\n", spillway::no_gpu_reason().c_str());
    return 0;
  }

  spillway::stream s;
  auto d_mult_by = spillway::device_array<double>::from_host(mult_by, small_shape, s);
  auto d_discount = spillway::device_array<double>::from_host(discount, big_shape, s);
  spillway::device_array<double> cv(big_shape, s);
  int bad = 0;

  // 1. Elementwise map with broadcasting: (4000,5) meets (100,4000,5) without tiling by hand.
  cv.buffer().fill_bytes_async(0xFF, s);  // poison: a result that was never written cannot match
  const auto map_ms = spillway::median(spillway::time_on_stream(
      s, [&](spillway::stream_view st) { spillway::map_into_async(st, cv.view(), multiply{}, d_mult_by, d_discount); }, 3,
      20));
  std::printf("  device map             %8.3f ms (median of 20, CUDA events)\n", map_ms);
  bad += mismatches(cv.to_host(s), host_cv.data, "device map");

  // 2. The same as a generalized ufunc: loop dimension 100, core (m,o) = (4000,5); each core
  //    instance gets a block of threads, never one thread for the whole array.
  cv.buffer().fill_bytes_async(0xFF, s);
  const auto gu_ms = spillway::median(spillway::time_on_stream(
      s,
      [&](spillway::stream_view st) {
        spillway::gufunc_into_async(st, "(m,o),(m,o)->(m,o)", cv.view(), multiply_core{}, d_mult_by, d_discount);
      },
      3, 20));
  std::printf("  device gufunc          %8.3f ms (median of 20, CUDA events)\n", gu_ms);
  bad += mismatches(cv.to_host(s), host_cv.data, "device gufunc");

  // 3. The gufunc on the host target gives the same answer.
  const auto host_gu = spillway::gufunc_host<double>("(m,o),(m,o)->(m,o)", multiply_core{}, h_mult_by, h_discount);
  bad += mismatches(host_gu.data, host_cv.data, "host gufunc");

  if (bad != 0) {
    std::printf("FAILED: %d mismatching elements\n", bad);
    return 1;
  }
  std::printf("OK\n");
  return 0;
}
