// spillway-gemm — C = A·B on the GPU for one element type and kernel path, timed with CUDA events
// and checked on a random sample of entries against a double-precision host computation.
//
//   spillway-gemm                                            # 4096^3 float (exact FP32, SIMT)
//   spillway-gemm --type bf16 --m 8192 --n 8192 --k 8192     # bf16 in, float out (wgmma on H100/H200)
//   spillway-gemm --type tf32 --path mma_sync --m 64 --n 8192 --k 8192
//   spillway-gemm --a A.npy --b B.npy --type double --out C.npy
//   spillway-gemm --type bf16 --m 32768 --n 32768 --k 32768 --budget 8GiB   # host matrices, out of core
//
// A is m x k and B is k x n, both row-major (C order, as NumPy writes them). Inputs: .npy files of
// float32/float64 (converted to the chosen type; int8 reads int8 or int32; cfloat reads float32 of
// shape (rows, cols, 2) = NumPy complex64 viewed as float32), or random from --seed. C goes to --out
// as float32 (float, tf32, half, bf16), float64, int32, or float32 (m, n, 2) for cfloat. With no
// GPU it runs host_gemm (and says so). Exits non-zero when a sampled entry is outside the bound.
// With --budget the matrices stay in host memory (page-locked for the run unless --pageable) and
// gemm_out_of_core multiplies them block by block on every visible GPU within that much device
// memory each; it prints the plan (blocks, bytes moved, the copy-time floor) and the job's time.
#include <spillway/core/device.hpp>
#include <spillway/core/device_buffer.hpp>
#include <spillway/core/event_timer.hpp>
#include <spillway/core/host_registration.hpp>
#include <spillway/core/memory_budget.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/gemm.cuh>
#include <spillway/io/npy.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace g = spillway::gemm;
using spillway::index_t;
using cfloat = cuda::std::complex<float>;

namespace {

struct args {
  index_t m = 4096, n = 4096, k = 4096;
  std::string type = "float", path = "automatic", a_path, b_path, out_path;
  std::uint64_t seed = 42;
  int samples = 1000, reps = 5;
  bool shape_given = false;
  std::size_t budget = 0;  // > 0: out of core within this many bytes of device memory per GPU
  bool pageable = false;
};

void print_usage(std::FILE* f) {
  std::fprintf(
      f,
      "usage: spillway-gemm [--m M] [--n N] [--k K] [--type float|tf32|double|half|bf16|int8|cfloat]\n"
      "                     [--path automatic|simt|mma_sync|wgmma] [--a A.npy] [--b B.npy] [--out C.npy]\n"
      "                     [--seed S] [--samples N] [--reps R] [--budget SIZE [--pageable]] [--help]\n"
      "  C = A * B with A m x k and B k x n (row-major). Defaults: --m 4096 --n 4096 --k 4096 --type float\n"
      "  --path automatic --seed 42 --samples 1000 (entries checked against the host) --reps 5 (timed runs,\n"
      "  median reported, after 2 warm-ups). --a/--b replace the random inputs (and set m, k, n). With no "
      "GPU\n"
      "  and no shape given, host_gemm runs 512 x 512 x 512.\n"
      "  float is exact FP32 on the CUDA cores; tf32 runs float on the TF32 tensor cores (operands "
      "truncated\n"
      "  to 10 mantissa bits); half/bf16 accumulate in float; int8 in int32; cfloat is complex<float>.\n"
      "  --budget SIZE (e.g. 8GiB, 512MiB, 1.5GiB, 8000000000): keep A, B and C in host memory and run\n"
      "  gemm_out_of_core on every visible GPU with SIZE of device memory each (prints the plan, the bytes\n"
      "  moved and the copy-time floor; times whole jobs, host to host). The host matrices are page-locked\n"
      "  for the run (cudaHostRegister, not timed); --pageable leaves them pageable (staged copies).\n"
      "example: spillway-gemm --type bf16 --m 8192 --n 8192 --k 8192 --path wgmma\n"
      "         spillway-gemm --type tf32 --m 32768 --n 32768 --k 32768 --budget 8GiB --reps 3\n");
}

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "error: %s\n", why.c_str());
  print_usage(stderr);
  std::exit(2);
}

args parse(int argc, char** argv) {
  args a;
  for (int i = 1; i < argc; ++i) {
    const std::string key = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) usage("missing value after " + key);
      return argv[++i];
    };
    if (key == "--m" || key == "--n" || key == "--k") {
      (key == "--m" ? a.m : key == "--n" ? a.n : a.k) = std::atoll(val().c_str());
      a.shape_given = true;
    } else if (key == "--type")
      a.type = val();
    else if (key == "--path")
      a.path = val();
    else if (key == "--a")
      a.a_path = val();
    else if (key == "--b")
      a.b_path = val();
    else if (key == "--out")
      a.out_path = val();
    else if (key == "--seed")
      a.seed = std::strtoull(val().c_str(), nullptr, 0);
    else if (key == "--samples")
      a.samples = std::atoi(val().c_str());
    else if (key == "--reps")
      a.reps = std::atoi(val().c_str());
    else if (key == "--budget") {
      try {
        a.budget = spillway::parse_byte_size(val());
      } catch (const std::exception& e) {
        usage(std::string("--budget: ") + e.what());
      }
    } else if (key == "--pageable")
      a.pageable = true;
    else if (key == "--help" || key == "-h") {
      print_usage(stdout);
      std::exit(0);
    } else
      usage("unknown argument " + key);
  }
  if (a.m < 1 || a.n < 1 || a.k < 1) usage("--m, --n and --k must be >= 1");
  if (a.reps < 1) usage("--reps must be >= 1");
  return a;
}

g::gemm_path parse_path(const std::string& s) {
  if (s == "automatic") return g::gemm_path::automatic;
  if (s == "simt") return g::gemm_path::simt;
  if (s == "mma_sync") return g::gemm_path::mma_sync;
  if (s == "wgmma") return g::gemm_path::wgmma;
  usage("unknown --path " + s);
}

template <class T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, std::int8_t>)
    return static_cast<T>(v);
  else
    return g::detail::convert_output<T>(v);
}

template <class T>
double to_double(T x) {
  return g::detail::load_output<double>(x);
}

/// rows x cols of T: from the .npy at `path` (rows and cols taken from it) or random from `rng`
/// (floats uniform in [-1, 1], ints in [-128, 127]).
template <class T>
std::vector<T> load_or_generate(const std::string& path, index_t& rows, index_t& cols, std::mt19937_64& rng,
                                const char* name) {
  std::vector<T> v;
  if (path.empty()) {
    v.resize(static_cast<std::size_t>(rows * cols));
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    std::uniform_int_distribution<int> d(-128, 127);
    for (auto& x : v) {
      if constexpr (std::is_same_v<T, std::int8_t>)
        x = static_cast<T>(d(rng));
      else if constexpr (std::is_same_v<T, cfloat>)
        x = cfloat(static_cast<float>(u(rng)), static_cast<float>(u(rng)));
      else
        x = from_double<T>(u(rng));
    }
    return v;
  }
  const spillway::io::npy_array arr = spillway::io::read_npy(path);
  const auto& sh = arr.header.shape;
  const bool complex_in = std::is_same_v<T, cfloat>;
  if (sh.size() != (complex_in ? 3u : 2u) || (complex_in && sh[2] != 2)) {
    usage(std::string("--") + name + " must be a 2-D array" +
          (complex_in ? " of shape (rows, cols, 2), float32" : ""));
  }
  rows = sh[0];
  cols = sh[1];
  const std::size_t count = static_cast<std::size_t>(rows * cols);
  v.resize(count);
  using spillway::io::npy_dtype;
  const npy_dtype dt = arr.header.dtype;
  if constexpr (std::is_same_v<T, cfloat>) {
    const float* p = arr.data<float>();
    for (std::size_t e = 0; e < count; ++e) v[e] = cfloat(p[2 * e], p[2 * e + 1]);
  } else if constexpr (std::is_same_v<T, std::int8_t>) {
    if (dt == npy_dtype::i1) {
      const std::int8_t* p = arr.data<std::int8_t>();
      v.assign(p, p + count);
    } else {
      const std::int32_t* p = arr.data<std::int32_t>();  // throws naming the dtype when it is not int32
      for (std::size_t e = 0; e < count; ++e) {
        if (p[e] < -128 || p[e] > 127) usage(std::string("--") + name + " holds a value outside int8");
        v[e] = static_cast<std::int8_t>(p[e]);
      }
    }
  } else if (dt == npy_dtype::f8) {
    const double* p = arr.data<double>();
    for (std::size_t e = 0; e < count; ++e) v[e] = from_double<T>(p[e]);
  } else {
    const float* p = arr.data<float>();
    for (std::size_t e = 0; e < count; ++e) v[e] = from_double<T>(p[e]);
  }
  std::printf("%s: %s, %ld x %ld %s\n", name, path.c_str(), static_cast<long>(rows), static_cast<long>(cols),
              spillway::io::npy_descr(dt));
  return v;
}

template <class T>
g::accumulator_t<T> accumulator_one() {
  return g::accumulator_t<T>(1);
}
template <class T>
g::accumulator_t<T> accumulator_zero() {
  return g::accumulator_t<T>(0);
}

// Machine epsilon of the accumulator: one ulp per operation (also covers tensor cores whose FP32
// accumulation truncates).
double accumulator_epsilon(const std::string& type) {
  if (type == "double") return std::ldexp(1.0, -52);
  if (type == "int8") return 0.0;
  return std::ldexp(1.0, -23);
}

template <class T, class TC>
int run(args a, bool gpu) {
  std::mt19937_64 rng(a.seed);
  index_t ka = a.k, kb = a.k;
  std::vector<T> ha = load_or_generate<T>(a.a_path, a.m, ka, rng, "a");
  std::vector<T> hb = load_or_generate<T>(a.b_path, kb, a.n, rng, "b");
  if (ka != kb)
    usage("A is " + std::to_string(a.m) + " x " + std::to_string(ka) + " but B has " + std::to_string(kb) +
          " rows");
  a.k = ka;
  const index_t m = a.m, n = a.n, k = a.k;
  if (a.a_path.empty() && a.b_path.empty()) {
    std::printf("inputs: random, seed %llu\n", static_cast<unsigned long long>(a.seed));
  }
  std::vector<TC> hc(static_cast<std::size_t>(m * n));
  g::gemm_options o;
  o.path = parse_path(a.path);
  o.math = a.type == "tf32" ? g::math_mode::tf32 : g::math_mode::exact;
  const bool complex = std::is_same_v<T, cfloat>;
  const double flops =
      (complex ? 8.0 : 2.0) * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  bool tf32 = false;

  if (gpu && a.budget > 0) {
    const g::gemm_path path = g::resolve_path<T>(o, spillway::current_device());
    tf32 = a.type == "tf32" && path != g::gemm_path::simt;
    g::ooc_options oo;
    oo.budget = spillway::memory_budget(a.budget);
    std::unique_ptr<spillway::host_registration> ra, rb, rc;
    if (!a.pageable) {
      ra = std::make_unique<spillway::host_registration>(ha.data(), ha.size() * sizeof(T));
      rb = std::make_unique<spillway::host_registration>(hb.data(), hb.size() * sizeof(T));
      rc = std::make_unique<spillway::host_registration>(hc.data(), hc.size() * sizeof(TC));
    }
    auto job = [&] {
      return g::gemm_out_of_core(accumulator_one<T>(), g::row_major<const T>(ha.data(), m, k),
                                 g::row_major<const T>(hb.data(), k, n), accumulator_zero<T>(),
                                 g::row_major(hc.data(), m, n), o, oo);
    };
    g::ooc_report rep = job();  // warm-up: pools, pinned staging, kernel set-up
    std::printf("out of core on %zu GPU(s), budget %s each, path %s%s, %s memory\nplan: %s\n"
                "planned at an in-core time of %.1f ms (%s), C blocks %s\n",
                rep.job.devices.size(), spillway::detail::format_bytes(a.budget).c_str(), g::to_string(path),
                tf32 ? " (TF32)" : "", rep.a_page_locked ? "page-locked" : "pageable", rep.plan.describe().c_str(),
                rep.compute_seconds * 1e3, rep.compute_estimated ? "estimated for the device" : "given",
                rep.plan.c_staged ? "staged through pinned buffers" : "copied straight into C");
    std::vector<double> secs;
    for (int r = 0; r < a.reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();  // a synchronous job: host to host
      rep = job();
      secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(secs.begin(), secs.end());
    const double med = secs[secs.size() / 2];
    std::printf("%ld x %ld x %ld %s out of core: median %.3f ms of %d jobs, %.2f TFLOP/s; moved %.3f GB "
                "(%.1f GB/s); copy floor %.3f ms (%.2f x)\n",
                static_cast<long>(m), static_cast<long>(n), static_cast<long>(k), a.type.c_str(), med * 1e3, a.reps,
                flops / med / 1e12, static_cast<double>(rep.job.bytes_moved) / 1e9,
                static_cast<double>(rep.job.bytes_moved) / med / 1e9, rep.plan.floor_seconds * 1e3,
                med / rep.plan.floor_seconds);
  } else if (gpu) {
    const int dev = spillway::current_device();
    const g::gemm_path path = g::resolve_path<T>(o, dev);  // a refused forced path throws here, named
    tf32 = a.type == "tf32" && path != g::gemm_path::simt;
    const auto prop = spillway::get_device_properties(dev);
    const auto plan = g::detail::plan_split_k(m, n, k, 1, o.split_k, prop.multiprocessors);
    std::printf("GPU %d: %s (compute capability %d.%d), path %s%s, split-K %ld slice(s)\n", dev,
                prop.name.c_str(), prop.cc_major, prop.cc_minor, g::to_string(path), tf32 ? " (TF32)" : "",
                static_cast<long>(plan.slices()));
    spillway::stream s;
    spillway::device_buffer<T> da(ha.size(), s), db(hb.size(), s);
    spillway::device_buffer<TC> dc(hc.size(), s);
    da.copy_from_host_async(cuda::std::span<const T>(ha.data(), ha.size()), s);
    db.copy_from_host_async(cuda::std::span<const T>(hb.data(), hb.size()), s);
    auto work = [&](spillway::stream_view st) {
      g::gemm_async(st, accumulator_one<T>(), g::row_major<const T>(da.data(), m, k),
                    g::row_major<const T>(db.data(), k, n), accumulator_zero<T>(),
                    g::row_major(dc.data(), m, n), o);
    };
    const std::vector<double> ms = spillway::time_on_stream(s, work, 2, a.reps);
    const double med = spillway::median(ms);
    dc.copy_to_host_async(cuda::std::span<TC>(hc.data(), hc.size()), s);
    s.synchronize();
    std::printf("%ld x %ld x %ld %s: median %.3f ms of %d runs, %.2f TFLOP/s%s\n", static_cast<long>(m),
                static_cast<long>(n), static_cast<long>(k), a.type.c_str(), med, a.reps,
                flops / (med * 1e-3) / 1e12, complex ? " (8 real flops per complex multiply-add)" : "");
  } else {
    const auto t0 = std::chrono::steady_clock::now();
    g::host_gemm(accumulator_one<T>(), g::row_major<const T>(ha.data(), m, k),
                 g::row_major<const T>(hb.data(), k, n), accumulator_zero<T>(),
                 g::row_major(hc.data(), m, n));
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("host_gemm %ld x %ld x %ld %s: %.3f s, %.2f GFLOP/s (exact %s arithmetic, no TF32)\n",
                static_cast<long>(m), static_cast<long>(n), static_cast<long>(k), a.type.c_str(), sec,
                flops / sec / 1e9, a.type == "tf32" ? "FP32" : "accumulator");
  }

  // Check a sample against double precision. Bound (docs/gemm.md, tests/gemm/gemm_check.hpp):
  // |c - ref| <= 1.25 ((k + 2) eps + 2 u_op) S + 16 eps S + u_out |ref|, S = sum |a_ik b_kj|,
  // eps the accumulator's machine epsilon, u_op = 2^-10 for TF32 (truncated operands), u_out the
  // rounding of a narrower C.
  const double u_acc = accumulator_epsilon(a.type);
  const double u_op = tf32 ? std::ldexp(1.0, -10) : 0.0;
  const double u_out = std::is_same_v<TC, __half>          ? std::ldexp(1.0, -11)
                       : std::is_same_v<TC, __nv_bfloat16> ? std::ldexp(1.0, -8)
                                                           : 0.0;
  std::uniform_int_distribution<index_t> ri(0, m - 1), rj(0, n - 1);
  long bad = 0;
  double worst = 0;
  for (int t = 0; t < a.samples; ++t) {
    const index_t i = t == 0 ? m - 1 : ri(rng), j = t == 0 ? n - 1 : rj(rng);
    double re = 0, im = 0, sabs = 0;
    for (index_t x = 0; x < k; ++x) {
      const T av = ha[static_cast<std::size_t>(i * k + x)], bv = hb[static_cast<std::size_t>(x * n + j)];
      if constexpr (std::is_same_v<T, cfloat>) {
        const double ar = av.real(), ai = av.imag(), br = bv.real(), bi = bv.imag();
        re += ar * br - ai * bi;
        im += ar * bi + ai * br;
        sabs += std::hypot(ar, ai) * std::hypot(br, bi);
      } else {
        const double p = to_double(av) * to_double(bv);
        re += p;
        sabs += std::fabs(p);
      }
    }
    const TC cv = hc[static_cast<std::size_t>(i * n + j)];
    double err = 0, mag = 0;
    if constexpr (std::is_same_v<TC, cfloat>) {
      err = std::hypot(cv.real() - re, cv.imag() - im);
      mag = std::hypot(re, im);
    } else {
      err = std::fabs(to_double(cv) - re);
      mag = std::fabs(re);
    }
    const double tol =
        1.25 * ((static_cast<double>(k) + 2) * u_acc + 2 * u_op) * sabs + 16 * u_acc * sabs + u_out * mag;
    if (tol > 0) worst = std::max(worst, err / tol);
    if (!(err <= tol)) {
      if (bad++ < 5)
        std::printf("  C(%ld, %ld): |err| %.3g > bound %.3g\n", static_cast<long>(i), static_cast<long>(j),
                    err, tol);
    }
  }
  if (!a.out_path.empty()) {
    if constexpr (std::is_same_v<TC, cfloat>) {
      spillway::io::write_npy(a.out_path, reinterpret_cast<const float*>(hc.data()), {m, n, 2});
    } else if constexpr (std::is_same_v<TC, __half> || std::is_same_v<TC, __nv_bfloat16>) {
      std::vector<float> f(hc.size());
      for (std::size_t e = 0; e < hc.size(); ++e) f[e] = static_cast<float>(to_double(hc[e]));
      spillway::io::write_npy(a.out_path, f, {m, n});
    } else {
      spillway::io::write_npy(a.out_path, hc, {m, n});
    }
    std::printf("wrote %s\n", a.out_path.c_str());
  }
  if (bad > 0) {
    std::printf("CHECK FAILED: %ld of %d sampled entries outside the bound\n", bad, a.samples);
    return 1;
  }
  std::printf("check: %d sampled entries within the bound (worst |err| / bound %.3g)\n", a.samples, worst);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  args a = parse(argc, argv);
  const bool gpu = spillway::gpu_available();
  if (!gpu) {
    std::printf("no GPU (%s): running host_gemm\n", spillway::no_gpu_reason().c_str());
    if (!a.shape_given && a.a_path.empty() && a.b_path.empty()) {
      a.m = a.n = a.k = 512;  // the default 4096^3 would take minutes on the CPU
      std::printf("no shape given: 512 x 512 x 512 on the host\n");
    }
  }
  try {
    if (a.type == "float" || a.type == "tf32") return run<float, float>(a, gpu);
    if (a.type == "double") return run<double, double>(a, gpu);
    if (a.type == "half") return run<__half, float>(a, gpu);
    if (a.type == "bf16") return run<__nv_bfloat16, float>(a, gpu);
    if (a.type == "int8") return run<std::int8_t, std::int32_t>(a, gpu);
    if (a.type == "cfloat") return run<cfloat, cfloat>(a, gpu);
    usage("unknown --type " + a.type);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
