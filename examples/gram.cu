// spillway-gram — the binary Gram matrix of a 0/1 matrix (co-occurrence counts, Jaccard/Tanimoto,
// cosine, Hamming), out of core on the GPU under a memory budget, checked against the host.
//
//   spillway-gram                                   # 2,000 x 5,000 random, packed upper triangle
//   spillway-gram --input a.npy --epilogue jaccard --sink topk --k 10 --output nn.npy
//   spillway-gram --raw a.bin --shape 100000x200000 --budget 8GiB --sink triangle --output c.npy
//   spillway-gram --rows 50000 --cols 4096 --sink threshold --threshold 0.8 --epilogue cosine
//
// Exits non-zero when a sampled entry differs from the host implementation. With no GPU it runs
// the host implementation (and says so).
#include <spillway/gram.cuh>
#include <spillway/io/npy.hpp>
#include <spillway/io/npz.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace sg = spillway::gram;

namespace {

struct args {
  std::string input, raw, output, csr, packed;  // packed: "" (0/1 bytes), "big" or "little"
  std::string save_input;                       // --fingerprints: the rows as np.packbits writes them
  std::int64_t rows = 2000, cols = 5000;
  bool cols_given = false;
  std::int64_t fingerprints = 0;  // > 0: that many random clustered fingerprints
  double density = 0.3;
  std::uint64_t seed = 42;
  std::size_t budget = 0;  // 0: default
  std::string epilogue = "counts", sink = "triangle", path = "automatic";
  int k = 10;
  double threshold = -1;
  bool both_halves = false, host_only = false, nonzero_as_one = false;
  int samples = 2000;
  bool profile = false;  // print each GPU run's trace: setup, product kernels busy and span
  int repeat = 1;        // timed runs after one warm-up run when > 1: each time and the median printed
};

void print_usage(std::FILE* f) {
  std::fprintf(
      f,
      "spillway-gram: the Gram matrix A*A^T of a 0/1 matrix (co-occurrence counts, Jaccard, cosine or\n"
      "Hamming for every pair of rows), bit-packed and computed on the GPU out of core under a memory\n"
      "budget, then checked against the host implementation on sampled entries. With no GPU (or --host)\n"
      "the host implementation computes it.\n\n"
      "usage: spillway-gram [options]\n"
      "input (one of; default: a random matrix):\n"
      "  --input A.npy          a 2-D .npy of uint8, int8 or bool 0/1 values\n"
      "  --raw A.bin --shape RxC  raw row-major bytes, R rows of C columns\n"
      "  --rows R --cols C      a random matrix of R x C (default 2000 x 5000)\n"
      "  --seed S --density P   its seed (default 42) and fraction of ones (default 0.3)\n"
      "  --fingerprints N       N random clustered fingerprints of --cols bits (default 2048): ~50 bits\n"
      "                         set, clusters of 40 around a centroid, so that cluster mates score\n"
      "                         Tanimoto ~0.7 (seeded by --seed; the threshold sink reports the mean\n"
      "                         neighbours per row)\n"
      "  --save-input F.npy     --fingerprints: also write them, packed 8 bits a byte (np.packbits order),\n"
      "                         as a rows x bytes uint8 .npy (N a multiple of 40: the first N rows of a\n"
      "                         larger set of the same seed)\n"
      "  --nonzero-as-one       any nonzero byte counts as 1 (default: values other than 0/1 are an error)\n"
      "  --packed ORDER         --input holds rows packed 8 bits a byte, as np.packbits(a, axis=1,\n"
      "                         bitorder=ORDER) writes them (big | little; fingerprints); --cols C: the\n"
      "                         bits per row (default 8 x the bytes per row)\n"
      "what to compute:\n"
      "  --epilogue E           counts | jaccard | cosine | hamming (default counts)\n"
      "  --sink S               full | triangle | condensed | topk | threshold (default triangle)\n"
      "  --k K                  neighbours per row for --sink topk (default 10)\n"
      "  --threshold T          --sink threshold keeps pairs >= T (<= T for hamming; default 0.5 for\n"
      "                         jaccard/cosine, 0.2*cols for hamming, 0.4*cols*density for counts)\n"
      "  --both-halves          threshold sink: list (j, i) as well as (i, j)\n"
      "  --csr OUT.npz          threshold sink: the result as CSR straight from the job\n"
      "                         (gram_threshold_csr), timed, then written as SciPy's .npz\n"
      "                         (scipy.sparse.load_npz reads it); not with --output\n"
      "how:\n"
      "  --budget SIZE          device memory per GPU, e.g. 4GiB, 512MiB (default 80%% of free memory)\n"
      "  --path P               automatic | wgmma | mma_sync | popc (default automatic)\n"
      "  --host                 run the host implementation only\n"
      "  --samples N            entries checked against the host (default 2000)\n"
      "  --repeat R             R > 1: one warm-up run, then R timed runs; each time and the median\n"
      "                         (the last run's result is checked and written)\n"
      "  --profile              GPU runs: the job's setup, its product kernels' busy time and span\n"
      "                         (CUDA events around every strip's products), the rest of the call\n"
      "  --output OUT.npy       write the result (top-k adds OUT.npy.indices.npy; threshold adds\n"
      "                         OUT.npy.row.npy and OUT.npy.col.npy)\n"
      "  -h, --help             this text\n\n"
      "example:\n"
      "  spillway-gram --rows 3000 --cols 5000 --epilogue jaccard --sink topk --k 10 --budget 4GiB\n");
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "spillway-gram: error: %s\n\n", why);
  print_usage(stderr);
  std::exit(2);
}

std::size_t parse_bytes(const std::string& s) {
  try {
    return spillway::parse_byte_size(s);
  } catch (const spillway::logic_error& e) {
    usage((std::string("--budget: ") + e.what()).c_str());
  }
}

args parse(int argc, char** argv) {
  args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value after " + k).c_str());
      return argv[++i];
    };
    if (k == "--input") a.input = val();
    else if (k == "--raw") a.raw = val();
    else if (k == "--shape") {
      const std::string s = val();
      if (std::sscanf(s.c_str(), "%ldx%ld", &a.rows, &a.cols) != 2) usage("--shape must be RxC");
    } else if (k == "--rows") a.rows = std::atoll(val().c_str());
    else if (k == "--cols") {
      a.cols = std::atoll(val().c_str());
      a.cols_given = true;
    } else if (k == "--packed") {
      a.packed = val();
      if (a.packed != "big" && a.packed != "little") usage(("--packed: big or little, got '" + a.packed + "'").c_str());
    } else if (k == "--csr") a.csr = val();
    else if (k == "--save-input") a.save_input = val();
    else if (k == "--fingerprints") a.fingerprints = std::atoll(val().c_str());
    else if (k == "--seed") a.seed = std::strtoull(val().c_str(), nullptr, 0);
    else if (k == "--density") a.density = std::atof(val().c_str());
    else if (k == "--budget") a.budget = parse_bytes(val());
    else if (k == "--epilogue") a.epilogue = val();
    else if (k == "--sink") a.sink = val();
    else if (k == "--path") a.path = val();
    else if (k == "--k") a.k = std::atoi(val().c_str());
    else if (k == "--threshold") a.threshold = std::atof(val().c_str());
    else if (k == "--both-halves") a.both_halves = true;
    else if (k == "--host") a.host_only = true;
    else if (k == "--nonzero-as-one") a.nonzero_as_one = true;
    else if (k == "--samples") a.samples = std::atoi(val().c_str());
    else if (k == "--repeat") a.repeat = std::atoi(val().c_str());
    else if (k == "--profile") a.profile = true;
    else if (k == "--output") a.output = val();
    else if (k == "--help" || k == "-h") {
      print_usage(stdout);
      std::exit(0);
    }
    else usage(("unknown argument " + k).c_str());
  }
  if (a.rows < 1 || a.cols < 1) usage("rows and cols must be >= 1");
  if (!a.csr.empty() && a.sink != "threshold") usage("--csr writes the threshold sink's result: give --sink threshold");
  if (!a.csr.empty() && !a.output.empty())
    usage("--csr and --output: give one (the CSR or the COO's .npy files)");
  if (!a.packed.empty() && a.input.empty()) usage("--packed describes --input: give --input PACKED.npy");
  if (a.fingerprints < 0) usage("--fingerprints must be >= 1");
  if (!a.save_input.empty() && a.fingerprints == 0) usage("--save-input writes generated fingerprints: give --fingerprints N");
  if (a.repeat < 1) usage("--repeat must be >= 1");
  if (a.fingerprints > 0) {
    if (!a.input.empty() || !a.raw.empty()) usage("--fingerprints is an input of its own: drop --input / --raw");
    a.rows = a.fingerprints;
    if (!a.cols_given) a.cols = 2048;
    if (a.cols < 64) usage("--fingerprints needs --cols >= 64");
  }
  return a;
}

sg::metric parse_metric(const std::string& s) {
  if (s == "counts") return sg::metric::counts;
  if (s == "jaccard") return sg::metric::jaccard;
  if (s == "cosine") return sg::metric::cosine;
  if (s == "hamming") return sg::metric::hamming;
  usage(("unknown --epilogue " + s).c_str());
}

spillway::gram::kernel_path parse_path(const std::string& s) {
  if (s == "automatic") return sg::kernel_path::automatic;
  if (s == "wgmma") return sg::kernel_path::wgmma;
  if (s == "mma_sync") return sg::kernel_path::mma_sync;
  if (s == "popc") return sg::kernel_path::popc;
  usage(("unknown --path " + s).c_str());
}

// Clustered fingerprints, packed 8 bits a byte in np.packbits' (big) bit order: clusters of 40
// rows around a centroid of 50 random bits; a member keeps each centroid bit with probability 0.9
// and sets 5 random bits besides (about 50 bits a row), so cluster mates share ~40 of ~60 bits and
// about half of them reach Tanimoto 0.7. Each cluster draws from its own generator (seed, cluster).
std::vector<std::uint8_t> fingerprints(std::int64_t n, std::int64_t bits, std::uint64_t seed) {
  const std::int64_t row_bytes = (bits + 7) / 8, per = 40;
  std::vector<std::uint8_t> out(static_cast<std::size_t>(n * row_bytes), 0);
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
  for (std::int64_t c0 = 0; c0 < n; c0 += per) {
    std::mt19937_64 g(seed * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(c0 / per));
    std::vector<std::int64_t> centroid(50);
    for (auto& b : centroid) b = static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(bits));
    for (std::int64_t r = c0; r < std::min(n, c0 + per); ++r) {
      std::uint8_t* row = out.data() + r * row_bytes;
      auto set = [&](std::int64_t b) { row[b / 8] = static_cast<std::uint8_t>(row[b / 8] | (0x80u >> (b % 8))); };
      for (const std::int64_t b : centroid)
        if (g() % 10 != 0) set(b);
      for (int e = 0; e < 5; ++e) set(static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(bits)));
    }
  }
  return out;
}

// The 0/1 input, packed.
sg::bit_matrix load(args& a) {
  if (a.fingerprints > 0) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<std::uint8_t> fp = fingerprints(a.rows, a.cols, a.seed);
    sg::bit_matrix m = sg::from_packed_bytes(fp.data(), a.rows, a.cols, sg::bit_order::big);
    if (!a.save_input.empty()) spillway::io::write_npy(a.save_input, fp.data(), {a.rows, (a.cols + 7) / 8});
    std::printf("input: %ld random clustered fingerprints of %ld bits, seed %llu, made in %.3f s\n", a.rows, a.cols,
                static_cast<unsigned long long>(a.seed),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return m;
  }
  if (!a.input.empty()) {
    const spillway::io::npy_array arr = spillway::io::read_npy(a.input);
    if (arr.header.shape.size() != 2) usage("--input must be a 2-D array");
    a.rows = arr.header.shape[0];
    if (!a.packed.empty()) {
      if (arr.header.dtype != spillway::io::npy_dtype::u1) usage("--packed: the input must hold uint8 bytes (np.packbits)");
      const std::int64_t row_bytes = arr.header.shape[1];
      if (!a.cols_given) a.cols = 8 * row_bytes;
      if (a.cols < 1 || a.cols > 8 * row_bytes) {
        usage(("--cols " + std::to_string(a.cols) + " does not fit rows of " + std::to_string(row_bytes) + " packed bytes").c_str());
      }
      std::printf("input: %s, %ld rows of %ld bits packed (%s bit order)\n", a.input.c_str(), a.rows, a.cols, a.packed.c_str());
      return sg::from_packed_bytes(arr.data<std::uint8_t>(), a.rows, a.cols,
                                   a.packed == "big" ? sg::bit_order::big : sg::bit_order::little, row_bytes);
    }
    a.cols = arr.header.shape[1];
    std::printf("input: %s, %ld x %ld %s\n", a.input.c_str(), a.rows, a.cols, spillway::io::npy_descr(arr.header.dtype));
    const sg::pack_options po{a.nonzero_as_one, sg::host_memory::pageable};
    if (arr.header.dtype == spillway::io::npy_dtype::b1) return sg::pack_bits(arr.data<bool>(), a.rows, a.cols, a.cols, po);
    if (arr.header.dtype == spillway::io::npy_dtype::u1) return sg::pack_bits(arr.data<std::uint8_t>(), a.rows, a.cols, a.cols, po);
    if (arr.header.dtype == spillway::io::npy_dtype::i1) return sg::pack_bits(arr.data<std::int8_t>(), a.rows, a.cols, a.cols, po);
    usage("--input must hold uint8, int8 or bool");
  }
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(a.rows * a.cols));
  if (!a.raw.empty()) {
    std::ifstream in(a.raw, std::ios::binary);
    if (!in) usage(("cannot open " + a.raw).c_str());
    in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (static_cast<std::size_t>(in.gcount()) != bytes.size()) usage("--raw file is smaller than --shape says");
    std::printf("input: %s, %ld x %ld raw bytes\n", a.raw.c_str(), a.rows, a.cols);
  } else {
    std::mt19937_64 g(a.seed);
    const auto cut = static_cast<std::uint64_t>(a.density * 18446744073709551615.0);
    for (auto& b : bytes) b = g() < cut ? 1 : 0;
    std::printf("input: random %ld x %ld, density %.2f, seed %llu\n", a.rows, a.cols, a.density,
                static_cast<unsigned long long>(a.seed));
  }
  const auto t0 = std::chrono::steady_clock::now();
  sg::bit_matrix m = sg::pack_bits(bytes.data(), a.rows, a.cols, a.cols, sg::pack_options{a.nonzero_as_one, sg::host_memory::pageable});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("packed on the host in %.3f s (%.2f GB/s of 0/1 input)\n", s, static_cast<double>(bytes.size()) / s / 1e9);
  return m;
}

template <class V>
int run(const args& a, const sg::bit_matrix& m, bool gpu) {
  const sg::metric met = parse_metric(a.epilogue);
  sg::gram_options o;
  o.epilogue = met;
  o.path = parse_path(a.path);
  if (a.budget > 0) o.budget = spillway::memory_budget(a.budget);
  sg::gram_report rep;
  o.report = &rep;
  spillway::pairwise::pair_trace trace;
  if (a.profile) o.trace = &trace;
  const auto t0 = std::chrono::steady_clock::now();
  o.progress = [t0](const spillway::progress_info& p) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 1.0) std::fprintf(stderr, "\r  strips %zu / %zu (%.1f s)%s", p.tasks_done, p.tasks_total, s,
                              p.tasks_done == p.tasks_total ? "\n" : "");
    return true;
  };
  const sg::bit_matrix_view A = m.view();
  const std::int64_t n = A.rows;
  std::mt19937_64 g(a.seed ^ 0xC0FFEE);
  const std::vector<std::int32_t> pc = sg::row_popcounts(A);
  auto want = [&](std::int64_t i, std::int64_t j) {
    return sg::host_score<V>(A, A, i, j, met, pc[static_cast<std::size_t>(i)], pc[static_cast<std::size_t>(j)]);
  };
  long bad = 0;
  // f runs the job; release (if given) drops the previous run's result before the clock starts.
  auto timed = [&](auto&& f, auto&&... release) {
    std::vector<double> times;
    for (int run = 0; run < (a.repeat > 1 ? a.repeat + 1 : 1); ++run) {
      (release(), ...);
      const auto s0 = std::chrono::steady_clock::now();
      f();
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count());
      if (gpu && a.profile) {
        double busy = 0, first = 1e30, last = 0;
        for (std::size_t t = 0; t < trace.start_ms.size(); ++t) {
          if (!(trace.end_ms[t] >= trace.start_ms[t])) continue;
          busy += trace.end_ms[t] - trace.start_ms[t];
          first = std::min<double>(first, trace.start_ms[t]);
          last = std::max<double>(last, trace.end_ms[t]);
        }
        std::printf(
            "profile: setup %.3f s; products busy %.3f s, span %.3f s (first start %.3f s after setup); "
            "the rest of the call %.3f s\n",
            trace.setup_seconds, busy / 1e3, (last - first) / 1e3, first / 1e3,
            times.back() - trace.setup_seconds - last / 1e3);
      }
      if (a.repeat > 1) std::printf("%s run %d: %.4f s\n", run == 0 ? "warm-up" : "timed", run, times.back());
    }
    if (a.repeat > 1) times.erase(times.begin());
    std::sort(times.begin(), times.end());
    const double s = times[times.size() / 2];
    std::printf("%s computed %s / %s in %.3f s%s", gpu ? "GPU" : "host", a.epilogue.c_str(), a.sink.c_str(), s,
                a.repeat > 1 ? " (median)" : "");
    if (gpu)
      std::printf(" (%ld strips of %ld rows, operand %s, budget %.2f GiB)",
                  static_cast<long>(rep.plan.strips), static_cast<long>(rep.plan.panel_rows),
                  rep.plan.resident ? "resident" : "streamed",
                  static_cast<double>(rep.budget_bytes) / (1 << 30));
    std::printf("\n");
  };

  if (a.sink == "full" || a.sink == "triangle" || a.sink == "condensed") {
    const sg::triangle_layout l = a.sink == "full" ? sg::triangle_layout::full
                                  : a.sink == "triangle" ? sg::triangle_layout::upper_packed
                                                         : sg::triangle_layout::condensed;
    const auto size = static_cast<std::size_t>(sg::layout_size(l, n));
    // Pinned output on the GPU path: the device→host copies run at full rate and overlap compute.
    spillway::pinned_buffer<V> pinned;
    std::vector<V> pageable;
    V* out = nullptr;
    if (gpu) {
      pinned = spillway::pinned_buffer<V>(size);
      out = pinned.data();
    } else {
      pageable.resize(size);
      out = pageable.data();
    }
    timed([&] {
      if (gpu) sg::gram_dense(A, out, l, o);
      else sg::host_gram_dense(A, out, l, met);
    });
    for (int t = 0; t < a.samples && n > 0; ++t) {
      std::int64_t i = static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(n));
      std::int64_t j = static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(n));
      if (j < i) std::swap(i, j);
      if (l == sg::triangle_layout::condensed && i == j) continue;
      const std::int64_t at = l == sg::triangle_layout::full ? i * n + j
                              : l == sg::triangle_layout::upper_packed ? sg::packed_row_offset(n, i) + (j - i)
                                                                       : sg::condensed_row_offset(n, i) + (j - i - 1);
      if (out[at] != want(i, j)) ++bad;
      if (l == sg::triangle_layout::full && out[j * n + i] != want(i, j)) ++bad;
    }
    if (!a.output.empty()) {
      if (l == sg::triangle_layout::full) spillway::io::write_npy(a.output, out, {n, n});
      else spillway::io::write_npy(a.output, out, {static_cast<std::int64_t>(size)});
    }
  } else if (a.sink == "topk") {
    sg::topk_options k;
    k.k = a.k;
    sg::topk_result<V> r;
    timed([&] { r = gpu ? sg::gram_topk<V>(A, k, o) : sg::host_gram_topk<V>(A, k, met); });
    const bool larger = sg::is_similarity(met);
    for (int t = 0; t < std::min<int>(a.samples / 100 + 1, static_cast<int>(n)); ++t) {
      const std::int64_t i = static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(n));
      std::vector<std::pair<V, std::int64_t>> all;
      for (std::int64_t j = 0; j < n; ++j)
        if (j != i) all.emplace_back(want(i, j), j);
      const std::size_t kk = std::min<std::size_t>(static_cast<std::size_t>(a.k), all.size());
      std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(kk), all.end(), [&](auto& x, auto& y) {
        return sg::detail::topk_better(larger, x.first, x.second, y.first, y.second);
      });
      for (std::size_t q = 0; q < kk; ++q)
        if (r.index(i, static_cast<int>(q)) != all[q].second || r.value(i, static_cast<int>(q)) != all[q].first) ++bad;
    }
    if (!a.output.empty()) {
      spillway::io::write_npy(a.output, r.values, {n, a.k});
      spillway::io::write_npy(a.output + ".indices.npy", r.indices, {n, a.k});
    }
  } else if (a.sink == "threshold") {
    sg::threshold_options t;
    t.threshold = a.threshold >= 0 ? a.threshold : (sg::is_similarity(met) ? (met == sg::metric::counts ? 0.4 * a.cols * a.density : 0.5) : 0.2 * a.cols);
    t.both_halves = a.both_halves;
    // --csr: the CSR straight from the job (gram_threshold_csr), else the COO (gram_threshold).
    sg::coo_result<V> r;
    sg::csr_result<V> c;
    const bool csr = !a.csr.empty();
    if (csr) {
      timed(
          [&] {
            c = gpu ? sg::gram_threshold_csr<V>(A, t, o)
                    : sg::to_csr(sg::host_gram_threshold<V>(A, t, met), n, n);
          },
          [&] { c = {}; });
    } else {
      timed([&] { r = gpu ? sg::gram_threshold<V>(A, t, o) : sg::host_gram_threshold<V>(A, t, met); },
            [&] { r = {}; });
    }
    const std::size_t kept = csr ? c.size() : r.size();
    std::printf("threshold %g kept %zu entries as %s (mean neighbours per row %.1f)\n", t.threshold, kept,
                csr ? "CSR" : "COO",
                static_cast<double>(kept) * (t.both_halves ? 1.0 : 2.0) / static_cast<double>(n));
    const std::vector<std::int64_t>& cols = csr ? c.col : r.col;
    const std::vector<V>& vals = csr ? c.value : r.value;
    if (csr && c.indptr.size() != static_cast<std::size_t>(n) + 1) ++bad;
    for (int s = 0; s < std::min<int>(a.samples / 100 + 1, static_cast<int>(n)) && bad == 0; ++s) {
      const std::int64_t i = static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(n));
      std::int64_t lo = csr ? c.indptr[static_cast<std::size_t>(i)]
                            : std::lower_bound(r.row.begin(), r.row.end(), i) - r.row.begin();
      const std::int64_t hi = csr ? c.indptr[static_cast<std::size_t>(i) + 1]
                                  : std::upper_bound(r.row.begin(), r.row.end(), i) - r.row.begin();
      for (std::int64_t j = a.both_halves ? 0 : i + 1; j < n; ++j) {
        if (j == i) continue;
        const V v = want(i, j);
        if (!sg::detail::passes(sg::is_similarity(met), v, t.threshold)) continue;
        if (lo >= hi || cols[static_cast<std::size_t>(lo)] != j || vals[static_cast<std::size_t>(lo)] != v) {
          ++bad;
          break;
        }
        ++lo;
      }
      if (lo != hi) ++bad;  // entries the host does not keep
    }
    if (!a.output.empty()) {
      const auto sz = static_cast<std::int64_t>(r.size());
      spillway::io::write_npy(a.output + ".row.npy", r.row, {sz});
      spillway::io::write_npy(a.output + ".col.npy", r.col, {sz});
      spillway::io::write_npy(a.output, r.value, {sz});
    }
    if (csr) {
      const auto t0 = std::chrono::steady_clock::now();
      spillway::io::write_csr_npz(a.csr, c.rows, c.cols, c.indptr, c.col, c.value);
      std::printf("CSR (%zu entries) written to %s in %.3f s\n", c.size(), a.csr.c_str(),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  } else {
    usage(("unknown --sink " + a.sink).c_str());
  }
  if (!a.output.empty()) std::printf("wrote %s\n", a.output.c_str());
  if (bad != 0) {
    std::printf("CHECK FAILED: %ld sampled entries differ from the host implementation\n", bad);
    return 1;
  }
  std::printf("check: sampled entries match the host implementation\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  args a = parse(argc, argv);
  try {
    const sg::bit_matrix m = load(a);
    bool gpu = !a.host_only && spillway::gpu_available();
    if (!gpu) {
      std::printf("%s: running the host implementation\n",
                  a.host_only ? "--host given" : ("no GPU (" + spillway::no_gpu_reason() + ")").c_str());
    } else {
      const auto p = spillway::get_device_properties(0);
      std::printf("GPU: %s (cc %d.%d), %d device(s)\n", p.name.c_str(), p.cc_major, p.cc_minor, spillway::device_count());
    }
    const sg::metric met = parse_metric(a.epilogue);
    if (met == sg::metric::jaccard || met == sg::metric::cosine) return run<float>(a, m, gpu);
    return run<std::int32_t>(a, m, gpu);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
