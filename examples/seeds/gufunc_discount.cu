// Seed 3: the discount-factor generalized ufunc (the seed's Numba @guvectorize ran one thread for
// the whole array). Written from docs/map.md only.
//
//   spillway-seed-gufunc-discount
//
// cv[d] = multBy * discount[d] for 100 dates, core (m,o) = (4000,5): the functor takes a
// gufunc_team, so each date's 20,000 products are shared by a 256-thread block. Checked against
// the host target. With no GPU the host target runs the same functor.
#include <spillway/map.cuh>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

using spillway::gufunc_team, spillway::index_t, spillway::ndview;

struct multiply_core {  // one core instance: a (4000,5) slab of each input and of the output
  __host__ __device__ void operator()(gufunc_team t, ndview<const double> m, ndview<const double> d,
                                      ndview<double> out) const {
    const index_t cols = m.extent(1), n = m.extent(0) * cols;
    for (index_t i = t.rank(); i < n; i += t.size()) out(i / cols, i % cols) = m(i / cols, i % cols) * d(i / cols, i % cols);
  }
};
struct multiply {
  __host__ __device__ double operator()(double m, double d) const { return m * d; }
};

int main(int argc, char** argv) {
  if (argc > 1) {
    const bool help = std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0;
    std::fprintf(help ? stdout : stderr,
                 "spillway-seed-gufunc-discount: cv = multBy (4000,5) * discount (100,4000,5) as a generalized ufunc\n"
                 "\"(m,o),(m,o)->(m,o)\" whose functor takes a gufunc_team (a 256-thread block per date), checked\n"
                 "against the host target. Host target without a GPU.\n\n"
                 "usage: spillway-seed-gufunc-discount   (no options)\n\nexample:\n  spillway-seed-gufunc-discount\n");
    return help ? 0 : 2;
  }
  std::vector<double> mult_by(4000 * 5), discount(100 * 4000 * 5);
  std::mt19937_64 g(7);
  std::uniform_real_distribution<double> u(0.5, 1.5);
  for (auto& x : mult_by) x = u(g);
  for (auto& x : discount) x = u(g);
  const auto h_m = spillway::make_view(mult_by.data(), {4000, 5});
  const auto h_d = spillway::make_view(discount.data(), {100, 4000, 5});
  const auto want = spillway::map_host(multiply{}, h_m, h_d);  // the elementwise reference

  std::vector<double> got;
  if (spillway::device_count() == 0) {
    std::printf("no GPU (%s): the host target runs the gufunc\n", spillway::no_gpu_reason().c_str());
    got = spillway::gufunc_host<double>("(m,o),(m,o)->(m,o)", multiply_core{}, h_m, h_d).data;
  } else {
    spillway::stream s;
    auto d_m = spillway::device_array<double>::from_host(mult_by, {4000, 5}, s);
    auto d_d = spillway::device_array<double>::from_host(discount, {100, 4000, 5}, s);
    const auto samples = spillway::time_on_stream(s, [&](spillway::stream_view st) {
      (void)spillway::gufunc_async<double>(st, "(m,o),(m,o)->(m,o)", multiply_core{}, d_m, d_d);
    }, 3, 20);
    std::printf("gufunc on the GPU: %.3f ms (median of 20 after 3 warm-ups, CUDA events)\n", spillway::median(samples));
    got = spillway::gufunc_async<double>(s, "(m,o),(m,o)->(m,o)", multiply_core{}, d_m, d_d).to_host(s);
  }
  const bool ok = got == want.data;
  std::printf("%s: %zu elements %s the elementwise host result\n", ok ? "OK" : "FAILED", got.size(), ok ? "equal" : "differ from");
  return ok ? 0 : 1;
}
