// The seed's discount pricer at a size beyond device memory, as a streamed_job: several device
// steps per chunk on host arrays that move chunk by chunk, without one hand-written copy.
//
//   spillway-streamed-pricer [--dates N] [--budget SIZE]
//
// For each date d: cv[d] = multBy * discount[d] (core shape 4000 x 5, multBy broadcast), then the
// date's total pv[d] = sum(cv[d]). Per chunk of dates: step 1 a broadcasting device map (multBy
// resident on each slot, copied once), step 2 a device reduction over the core axes; spillway
// copies the discount slice in and the cv and pv slices out, staging pageable memory through
// pinned buffers and overlapping chunks on every GPU. Checked against the host (cv bit for bit,
// pv within the summation-order bound). Without a GPU the host target computes the same.
#include <spillway/map.cuh>
#include <spillway/pipeline.cuh>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

struct multiply {
  __host__ __device__ double operator()(double m, double d) const { return m * d; }
};
struct plus {
  __host__ __device__ double operator()(double a, double b) const { return a + b; }
};

namespace {

constexpr spillway::index_t rows = 4000, cols = 5, core = rows * cols;

void usage(std::FILE* f) {
  std::fprintf(f,
               "spillway-streamed-pricer: the seed's discount pricer over host arrays of any size: per date,\n"
               "cv = multBy (4000x5) * discount[date] and pv = sum(cv), two device steps per chunk of dates in a\n"
               "spillway::streamed_job (spillway moves the chunks; no hand-written copies), on every GPU under a\n"
               "per-GPU memory budget, checked against the host. Host target without a GPU.\n\n"
               "usage: spillway-streamed-pricer [--dates N] [--budget SIZE]\n"
               "  --dates N       dates (default 2000: 320 MB of discount factors and as much cv)\n"
               "  --budget SIZE   device memory per GPU, e.g. 256MiB, 4GiB (default 256MiB)\n\n"
               "example:\n  spillway-streamed-pricer --dates 20000 --budget 4GiB\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t dates = 2000, budget = std::size_t{256} << 20;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      usage(stdout);
      return 0;
    }
    try {
      if (i + 1 >= argc) throw spillway::logic_error(a + " needs a value");
      if (a == "--dates") dates = std::stoull(argv[++i]);
      else if (a == "--budget") budget = spillway::parse_byte_size(argv[++i]);
      else throw spillway::logic_error("unknown argument " + a);
      if (dates == 0) throw spillway::logic_error("--dates must be at least 1");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "spillway-streamed-pricer: error: %s\n\n", e.what());
      usage(stderr);
      return 2;
    }
  }
  const auto n_dates = static_cast<spillway::index_t>(dates);
  std::vector<double> mult_by(core), discount(dates * core);
  std::mt19937_64 g(11);
  std::uniform_real_distribution<double> u(0.5, 1.5);
  for (auto& x : mult_by) x = u(g);
  for (auto& x : discount) x = u(g);
  std::vector<double> cv(discount.size(), std::numeric_limits<double>::quiet_NaN());
  std::vector<double> pv(dates, std::numeric_limits<double>::quiet_NaN());

  if (spillway::device_count() == 0) {
    std::printf("no GPU (%s): the host target computes cv and pv\n", spillway::no_gpu_reason().c_str());
    spillway::map_host_into(spillway::make_view(cv.data(), {n_dates, rows, cols}), multiply{},
                            spillway::make_view(mult_by.data(), {rows, cols}),
                            spillway::make_view(discount.data(), {n_dates, rows, cols}));
    for (std::size_t d = 0; d < dates; ++d) {
      double s = 0;
      for (spillway::index_t k = 0; k < core; ++k) s += cv[d * core + k];
      pv[d] = s;
    }
  } else {
    spillway::streamed_job job(dates);                         // the units are dates
    const auto m = job.resident(mult_by);                      // whole, once per slot
    const auto disc = job.input(discount, core);               // core doubles per date
    const auto out_cv = job.output(cv, core);
    const auto out_pv = job.output(pv, 1);
    spillway::streamed_job_options o;
    o.budget = spillway::memory_budget(budget);
    const auto r = job.run(o, [&](const spillway::job_chunk& c) {
      const auto k = static_cast<spillway::index_t>(c.count());
      const spillway::ndview<double> cv_d(c.data(out_cv), {k, rows, cols});
      spillway::map_into_async(c.stream(), cv_d, multiply{}, spillway::ndview<const double>(c.data(m), {rows, cols}),
                               spillway::ndview<const double>(c.data(disc), {k, rows, cols}));
      spillway::reduce_into_async(c.stream(), spillway::ndview<const double>(cv_d), spillway::ndview<double>(c.data(out_pv), {k}),
                                  plus{}, 0.0, {1, 2});
    });
    std::printf("%zu dates (%.2f GB in, %.2f GB out) in %zu chunks on %zu GPU(s), budget %.0f MiB each: %.3f s\n", dates,
                8e-9 * static_cast<double>(discount.size()), 8e-9 * static_cast<double>(cv.size() + pv.size()),
                r.tasks_total, r.devices.size(), static_cast<double>(budget) / (1 << 20), r.elapsed_seconds);
  }

  // The check: cv exactly (one rounded product each), pv within n * eps of the sum of |terms|
  // (every term is positive here, so that is n * eps * pv; the device adds in another order).
  std::size_t bad = 0;
  for (std::size_t d = 0; d < dates; ++d) {
    double s = 0;
    for (spillway::index_t k = 0; k < core; ++k) {
      const double want = mult_by[static_cast<std::size_t>(k)] * discount[d * core + k];
      if (cv[d * core + k] != want && bad++ < 5) std::printf("cv[%zu][%ld] = %g, expected %g\n", d, long(k), cv[d * core + k], want);
      s += want;
    }
    const double tol = static_cast<double>(core) * std::numeric_limits<double>::epsilon() * s;
    if (!(std::fabs(pv[d] - s) <= tol) && bad++ < 5) std::printf("pv[%zu] = %.17g, expected %.17g (tolerance %g)\n", d, pv[d], s, tol);
  }
  std::printf("%s\n", bad ? "FAILED" : "OK: every cv matches exactly, every pv within its bound");
  return bad ? 1 : 0;
}
