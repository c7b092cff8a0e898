// spillway-knn — all-pairs k nearest neighbours of embedding rows: reads an n x d .npy of float32,
// float16, or bf16 (stored as uint16, with --bf16), computes every row's top-k by cosine, inner
// product or Euclidean distance out of core on the GPU under a memory budget (A·Aᵀ, symmetric
// half only), writes the indices (int64) and scores (float32) as .npy, and checks sampled rows
// against the host in double. Exit status 1 when a sampled row is wrong.
//
//   spillway-knn --input emb.npy --k 32 --metric cosine --budget 8GiB --output nn
//   spillway-knn --rows 20000 --dim 768 --bf16 --k 32                # random rows, no files
//
// Built a second time as spillway-knn-mpi (where MPI is found: SPILLWAY_KNN_MPI) it runs the job
// across MPI ranks, one GPU per rank (spillway::dist::similarity_topk): every rank reads or draws
// the same rows, owns a block of result rows, and the .npy files are written once through MPI-IO;
// rank 0 prints, gathers the lists and checks the sampled rows.
//
//   mpirun -np 2 spillway-knn-mpi --rows 1000000 --dim 768 --bf16 --k 32 --budget 8GiB --repeat 3
#include <spillway/core/host_registration.hpp>
#include <spillway/core/memory_budget.hpp>
#include <spillway/io/npy.hpp>
#include <spillway/similarity.cuh>
#ifdef SPILLWAY_KNN_MPI
#include <spillway/dist.hpp>
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace {

namespace g = spillway::similarity;

#ifdef SPILLWAY_KNN_MPI
const spillway::dist::communicator* comm = nullptr;  // the job's ranks (set in main)
int comm_size() {
  return comm->size();
}
#else
int comm_size() {
  return 1;
}
#endif

struct args {
  std::string input, output;
  bool bf16 = false;
  std::int64_t rows = 0, dim = 0;  // random input when no --input
  int k = 32;
  std::string metric = "cosine";
  std::size_t budget = 0;  // 0: default
  std::int64_t check = 16;
  bool tf32 = false;
  bool host = false;
  bool profile = false;
  int repeat = 1;
  std::string rows_memory = "pinned";
  std::int64_t max_panel_rows = 0;
  std::vector<int> devices;  // empty: the current device
  std::uint64_t seed = 42;
  std::int64_t clusters = 0;  // > 0: random rows around that many centres
  double spread = 1.0;        // noise around a centre, relative to the centre's per-value scale
  bool spread_set = false;
  int binary = 0;  // > 0: the binary-quantized mode too, with this many candidates a row
};

void print_usage(std::FILE* f) {
#ifdef SPILLWAY_KNN_MPI
  std::fprintf(f,
               "spillway-knn-mpi: spillway-knn across MPI ranks, one GPU per rank (mpirun -np N spillway-knn-mpi\n"
               "[options]; spillway::dist::similarity_topk): every rank reads or draws the same rows and owns a\n"
               "block of result rows; the .npy files are written once through MPI-IO; rank 0 prints, gathers the\n"
               "lists and checks the sampled rows. --host and --devices are not taken. The options:\n\n");
#endif
  std::fprintf(
      f,
      "spillway-knn: every row's k nearest rows of an embedding matrix (A·Aᵀ, symmetric half only),\n"
      "out of core on the GPU under a memory budget, written as .npy and checked on sampled rows\n"
      "against the host in double. With no GPU (or --host) the host implementation runs.\n\n"
      "usage: spillway-knn [options]\n"
      "  --input E.npy          n x d rows: float32 ('<f4'), float16 ('<f2'), or bf16 stored as uint16\n"
      "                         ('<u2', with --bf16)\n"
      "  --bf16                 the uint16 input holds bf16 bit patterns (and random rows are bf16)\n"
      "  --rows N --dim D       no --input: N random normal rows of D values (float32, or bf16 with --bf16)\n"
      "  --k K                  neighbours per row, 1..128 (default 32); the row itself is excluded\n"
      "  --metric M             cosine | ip | euclidean (default cosine; a zero row scores 0 under cosine)\n"
      "  --budget SIZE          device memory per GPU, e.g. 4GiB, 512MiB (default 80%% of free memory)\n"
      "  --tf32                 float32 rows on the TF32 tensor cores (default exact FP32)\n"
      "  --max-panel-rows P     cap on rows per strip (default automatic, 2048)\n"
      "  --devices 0,1          GPUs to use (a GPU may be named twice); default: the current one for\n"
      "                         the fused top-k (bf16 / float16 / --tf32 rows), every visible GPU for\n"
      "                         the strip path (other rows)\n"
      "  --check S              rows sampled for the host check (default 16; 0: none)\n"
      "  --seed S               random rows and the sample (default 42)\n"
      "  --clusters C           random rows around C centres instead (each centre random normal, a\n"
      "                         row its centre plus --spread times random normal noise, centres\n"
      "                         drawn at random per row: members spread over the matrix); cosine\n"
      "                         of two rows of one centre about 1 / (1 + spread^2)\n"
      "  --spread S             the noise of --clusters (default 1.0)\n"
      "  --host                 run on the host implementation\n"
      "  --rows-memory M        pinned: the rows are page-locked before the timed call (default);\n"
      "                         pageable: the call page-locks them itself (similarity_options::lock,\n"
      "                         timed with it); staged: page_lock::never, copied from pageable memory\n"
      "  --repeat R             R timed calls after one untimed warm-up call on the same rows (device\n"
      "                         contexts, kernels and pools in place); prints each time and the median\n"
      "                         (default 1: one cold call, no warm-up)\n"
      "  --binary C             also the binary-quantized mode (similarity_topk_binary: C sign-bit\n"
      "                         candidates a row, C >= k, rescored exactly; cosine, one GPU), timed the\n"
      "                         same way, with its recall@k against the exact lists\n"
      "  --profile              print the fused top-k's phases (rows in + seeds, GEMMs with the sink,\n"
      "                         merges, whole device part; CUDA events around each chunk's GEMM and\n"
      "                         merges, recorded only with --profile), its chunks and recomputed rows\n"
      "  --output PREFIX        write PREFIX.indices.npy (int64 n x k) and\n"
      "                         PREFIX.scores.npy (float32 n x k)\n"
      "  -h, --help             this text\n\n"
      "example:\n"
      "  spillway-knn --rows 20000 --dim 768 --bf16 --k 32 --budget 4GiB --output nn\n");
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "spillway-knn: %s\n\n", why);
  print_usage(stderr);
  std::exit(2);
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
    else if (k == "--output") a.output = val();
    else if (k == "--bf16") a.bf16 = true;
    else if (k == "--rows") a.rows = std::atoll(val().c_str());
    else if (k == "--dim") a.dim = std::atoll(val().c_str());
    else if (k == "--k") a.k = std::atoi(val().c_str());
    else if (k == "--metric") a.metric = val();
    else if (k == "--budget") {
      try {
        a.budget = spillway::parse_byte_size(val());
      } catch (const std::exception& e) {
        usage((std::string("--budget: ") + e.what()).c_str());
      }
    } else if (k == "--tf32") a.tf32 = true;
    else if (k == "--max-panel-rows") a.max_panel_rows = std::atoll(val().c_str());
    else if (k == "--devices") {
      const std::string v = val();
      std::size_t at = 0;
      while (at <= v.size()) {
        const std::size_t end = std::min(v.find(',', at), v.size());
        const std::string item = v.substr(at, end - at);
        char* stop = nullptr;
        const long d = std::strtol(item.c_str(), &stop, 10);
        if (item.empty() || *stop != '\0' || d < 0) usage(("--devices: a list of device ordinals such as 0,1; got '" + v + "'").c_str());
        a.devices.push_back(static_cast<int>(d));
        at = end + 1;
      }
    }
    else if (k == "--check") a.check = std::atoll(val().c_str());
    else if (k == "--seed") a.seed = std::strtoull(val().c_str(), nullptr, 0);
    else if (k == "--clusters") {
      const std::string v = val();
      char* stop = nullptr;
      const long long c = std::strtoll(v.c_str(), &stop, 10);
      if (v.empty() || *stop != '\0' || c < 1) usage(("--clusters: a count >= 1; got '" + v + "'").c_str());
      a.clusters = c;
    } else if (k == "--spread") {
      const std::string v = val();
      char* stop = nullptr;
      const double x = std::strtod(v.c_str(), &stop);
      if (v.empty() || *stop != '\0' || !(x >= 0) || !std::isfinite(x))
        usage(("--spread: a finite value >= 0; got '" + v + "'").c_str());
      a.spread = x;
      a.spread_set = true;
    } else if (k == "--host")
      a.host = true;
    else if (k == "--profile") a.profile = true;
    else if (k == "--binary") {
      const std::string v = val();
      char* stop = nullptr;
      const long c = std::strtol(v.c_str(), &stop, 10);
      if (v.empty() || *stop != '\0' || c < 1 || c > spillway::pairwise::max_top_k)
        usage(("--binary: a candidate count in 1..128; got '" + v + "'").c_str());
      a.binary = static_cast<int>(c);
    } else if (k == "--repeat") {
      const std::string v = val();
      char* stop = nullptr;
      const long r = std::strtol(v.c_str(), &stop, 10);
      if (v.empty() || *stop != '\0' || r < 1 || r > 1000) usage(("--repeat: a count in 1..1000; got '" + v + "'").c_str());
      a.repeat = static_cast<int>(r);
    } else if (k == "--rows-memory") {
      a.rows_memory = val();
      if (a.rows_memory != "pinned" && a.rows_memory != "pageable" && a.rows_memory != "staged")
        usage(("--rows-memory: pinned, pageable or staged, got '" + a.rows_memory + "'").c_str());
    } else if (k == "--help" || k == "-h") {
      print_usage(stdout);
      std::exit(0);
    } else
      usage(("unknown argument " + k).c_str());
  }
  if (a.input.empty() && (a.rows < 2 || a.dim < 1)) usage("give --input, or --rows (>= 2) and --dim (>= 1)");
  if (a.clusters > 0 && !a.input.empty()) usage("--clusters makes random rows: it does not go with --input");
  if (a.clusters > a.rows && a.input.empty())
    usage(("--clusters: at most --rows centres (" + std::to_string(a.rows) + "); got " +
           std::to_string(a.clusters))
              .c_str());
  if (a.spread_set && a.clusters == 0) usage("--spread is the noise of --clusters: give --clusters too");
  if (a.k < 1 || a.k > spillway::pairwise::max_top_k) usage("--k must be in 1..128");
  if (a.binary > 0 && a.binary < a.k) usage("--binary: at least --k candidates a row");
  if (a.binary > 0 && (a.host || a.metric != "cosine")) usage("--binary: cosine on the GPU only");
#ifdef SPILLWAY_KNN_MPI
  if (a.binary > 0) usage("--binary: spillway-knn only (one GPU), not across ranks");
#endif
  return a;
}

g::similarity_metric parse_metric(const std::string& s) {
  if (s == "cosine") return g::similarity_metric::cosine;
  if (s == "ip" || s == "inner_product") return g::similarity_metric::inner_product;
  if (s == "euclidean") return g::similarity_metric::euclidean;
  usage(("unknown --metric " + s).c_str());
}

/// The rows as read, in one of three element types.
struct rows_t {
  enum class kind { f32, f16, bf16 } type = kind::f32;
  std::int64_t n = 0, d = 0;
  std::vector<unsigned char> bytes;  // n * d elements, C order
};

rows_t load(const args& a) {
  rows_t r;
  if (!a.input.empty()) {
    if (!std::ifstream(a.input, std::ios::binary)) usage(("cannot open " + a.input).c_str());
    spillway::io::npy_array arr = spillway::io::read_npy(a.input);
    if (arr.header.shape.size() != 2) usage("--input must be a 2-D array (rows x dim)");
    r.n = arr.header.shape[0];
    r.d = arr.header.shape[1];
    if (arr.header.dtype == spillway::io::npy_dtype::f4) r.type = rows_t::kind::f32;
    else if (arr.header.dtype == spillway::io::npy_dtype::f2) r.type = rows_t::kind::f16;
    else if (arr.header.dtype == spillway::io::npy_dtype::u2 && a.bf16) r.type = rows_t::kind::bf16;
    else if (arr.header.dtype == spillway::io::npy_dtype::u2) usage("a uint16 --input needs --bf16 (bf16 bit patterns)");
    else usage("--input must hold float32, float16, or bf16 as uint16");
    r.bytes = std::move(arr.bytes);
    std::printf("input: %s, %lld x %lld %s\n", a.input.c_str(), static_cast<long long>(r.n), static_cast<long long>(r.d),
                r.type == rows_t::kind::f32 ? "float32" : (r.type == rows_t::kind::f16 ? "float16" : "bf16"));
    return r;
  }
  r.n = a.rows;
  r.d = a.dim;
  r.type = a.bf16 ? rows_t::kind::bf16 : rows_t::kind::f32;
  const std::size_t es = a.bf16 ? 2 : 4;
  r.bytes.resize(static_cast<std::size_t>(r.n * r.d) * es);
  // Blocks of 4,096 rows, each from a generator seeded by (seed, block), in parallel: the same rows
  // for a seed whatever the thread count (10^7 x 768 values in seconds, not minutes).
  constexpr std::int64_t block_rows = 4096;
  const std::int64_t blocks = (r.n + block_rows - 1) / block_rows;
  // --clusters: the centres first (one generator), then each row = a random centre + noise.
  std::vector<float> centres(static_cast<std::size_t>(a.clusters * r.d));
  {
    std::mt19937_64 cg(a.seed ^ 0xc3a5c85c97cb3127ULL);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (float& x : centres) x = nd(cg);
  }
  const auto spread = static_cast<float>(a.spread);
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic)
#endif
  for (std::int64_t blk = 0; blk < blocks; ++blk) {
    std::seed_seq seq{static_cast<std::uint32_t>(a.seed), static_cast<std::uint32_t>(a.seed >> 32),
                      static_cast<std::uint32_t>(blk), static_cast<std::uint32_t>(blk >> 32)};
    std::mt19937_64 gen(seq);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const std::int64_t end = std::min(r.n, (blk + 1) * block_rows) * r.d;
    const float* centre = nullptr;
    for (std::int64_t q = blk * block_rows * r.d; q < end; ++q) {
      if (a.clusters > 0 && q % r.d == 0) {
        centre = centres.data() +
                 static_cast<std::size_t>(
                     static_cast<std::int64_t>(gen() % static_cast<std::uint64_t>(a.clusters)) * r.d);
      }
      const float x = a.clusters > 0 ? centre[q % r.d] + spread * nd(gen) : nd(gen);
      if (a.bf16) {
        const __nv_bfloat16 b = __float2bfloat16_rn(x);
        std::memcpy(&r.bytes[static_cast<std::size_t>(q) * 2], &b, 2);
      } else {
        std::memcpy(&r.bytes[static_cast<std::size_t>(q) * 4], &x, 4);
      }
    }
  }
  std::printf("input: random %lld x %lld %s, seed %llu", static_cast<long long>(r.n),
              static_cast<long long>(r.d), a.bf16 ? "bf16" : "float32",
              static_cast<unsigned long long>(a.seed));
  if (a.clusters > 0)
    std::printf(", around %lld centres, spread %.3g", static_cast<long long>(a.clusters), a.spread);
  std::printf("\n");
  return r;
}

/// Runs the job on rows of type T and checks `check` sampled rows; returns the number of bad rows.
template <class T>
int run(const args& a, const rows_t& r) {
  const auto* data = reinterpret_cast<const T*>(r.bytes.data());
  const auto view = g::row_major(data, r.n, r.d);
  g::similarity_options o;
  o.metric = parse_metric(a.metric);
  if (a.tf32) o.gemm.math = g::math_mode::tf32;
  if (a.budget > 0) o.budget = spillway::memory_budget(a.budget);
  o.max_panel_rows = a.max_panel_rows;
  o.devices = a.devices;
  o.host_fallback = true;  // no GPU: the host implementation
  g::pair_report rep;
  o.report = &rep;
  // Page-locked rows are copied at the link's rate while strips compute. The call page-locks
  // pageable rows itself (similarity_options::lock) at ~20 GB/s of rows, every call: a program that
  // calls more than once registers them once, as here (the timed call then runs on locked rows).
  spillway::host_registration pin;
  if (!a.host && spillway::device_count() > 0 && a.rows_memory == "pinned") {
    pin = spillway::host_registration(const_cast<unsigned char*>(r.bytes.data()), r.bytes.size());
  }
  if (a.rows_memory == "staged") o.lock = spillway::page_lock::never;
  // The fused top-k times its phases only when asked (events on its stream, read after the job).
  auto& hook = g::detail::fused_topk_hook();
  hook.profile = a.profile;
  g::topk_result<float> nn;
#ifdef SPILLWAY_KNN_MPI
  // Each rank's own rows' lists; rank 0 gathers them all after the timed calls.
  spillway::dist::similarity_job_options jo;
  jo.local = o;
  jo.local.report = nullptr;
  spillway::dist::gram_report drep;
  spillway::dist::topk_block<float> mine;
  const auto call = [&] {
    comm->barrier();  // every rank starts the timed call together
    mine = spillway::dist::similarity_topk(*comm, view, {a.k}, jo, &drep);
  };
#else
  const auto call = [&] {
    nn = a.host ? g::host_similarity_topk(view, {a.k}, o.metric) : g::similarity_topk(view, {a.k}, o);
  };
#endif
  if (a.repeat > 1) call();  // the warm-up: contexts of every device, kernels loaded, pools grown
  std::vector<double> times;
  for (int t = 0; t < a.repeat; ++t) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
#ifdef SPILLWAY_KNN_MPI
  nn = spillway::dist::gather_topk(*comm, mine, r.n);  // rank 0: every row; the others: none
#endif
  if (a.repeat > 1) {
    std::printf("times after a warm-up call:");
    for (const double x : times) std::printf(" %.3f", x);
    std::printf(" s\n");
  }
  std::sort(times.begin(), times.end());
  const double secs = times[times.size() / 2];
  const double pairs = 0.5 * static_cast<double>(r.n) * static_cast<double>(r.n + 1);
  std::printf("top-%d %s of %lld rows in %.3f s%s (%.1f TFLOP/s of symmetric-half work)", a.k, a.metric.c_str(),
              static_cast<long long>(r.n), secs, a.repeat > 1 ? " (median)" : "", 2.0 * pairs * static_cast<double>(r.d) / secs / 1e12);
#ifdef SPILLWAY_KNN_MPI
  {
    const auto& L = drep.local;
    std::printf("; %d rank(s), %s, lists to their owners %s", comm->size(),
                drep.on_gpu ? "one GPU each" : "host implementation",
                drep.lists_on_device ? "GPU to GPU" : "through the host");
    std::printf(
        "\nrank 0 of the last call: setup %.3f s, its strips %.3f s (%zu), wait %.3f s, lists collected %.3f "
        "s, "
        "exchanged %.3f s, merged %.3f s",
        L.setup_seconds, L.compute_seconds, drep.run.ranks.empty() ? std::size_t{0} : drep.run.ranks[0].tasks,
        L.wait_seconds, L.collect_seconds, L.exchange_seconds, L.merge_seconds);
  }
#endif
  if (!a.host && !rep.job.devices.empty()) {
    std::printf("; %lld strips of %lld rows, operand %s, %zu GPU(s), rows %s%s", static_cast<long long>(rep.plan.strips),
                static_cast<long long>(rep.plan.panel_rows), rep.plan.resident ? "resident" : "streamed",
                rep.job.devices.size(), a.rows_memory.c_str(), rep.a_registered ? " (page-locked by the call)" : "");
    std::size_t slot_bytes = 0;
    for (const std::size_t b : rep.plan.slot_buffers) slot_bytes += b;
    const double gib = 1024.0 * 1024.0 * 1024.0;
    std::printf("; device memory planned per GPU %.2f GiB (rows %.2f GiB, budget %.2f GiB)",
                static_cast<double>(rep.plan.shared_bytes + rep.plan.slots * slot_bytes) / gib,
                static_cast<double>(rep.plan.resident_bytes) / gib,
                static_cast<double>(rep.budget_bytes) / gib);
  }
  std::printf("\n");
  {
    // How alike the neighbours are: the mean score over every row's list (filled places only).
    double sum = 0;
    std::int64_t filled = 0;
#ifdef _OPENMP
#pragma omp parallel for reduction(+ : sum, filled)
#endif
    for (std::int64_t i = 0; i < nn.rows; ++i)
      for (int t = 0; t < a.k; ++t)
        if (nn.index(i, t) >= 0) {
          sum += static_cast<double>(nn.value(i, t));
          ++filled;
        }
    std::printf("mean %s score of the listed neighbours: %.4f (%lld places filled)\n", a.metric.c_str(),
                filled > 0 ? sum / static_cast<double>(filled) : 0.0, static_cast<long long>(filled));
  }
  if (a.profile) {
    if (!a.host && hook.last_ran) {
      std::printf(
          "profile (fused top-k): rows in + seeds %.1f ms, GEMMs with the sink %.1f ms, merges %.1f ms, "
          "device part %.1f ms; %lld chunks, %llu rows recomputed on the CUDA cores, %.1f candidates per "
          "row passed the filter (seeds not counted)\n",
          static_cast<double>(hook.seed_ms), static_cast<double>(hook.gemm_ms),
          static_cast<double>(hook.merge_ms), static_cast<double>(hook.device_ms),
          static_cast<long long>(hook.last_chunks.load()),
          static_cast<unsigned long long>(hook.last_recomputed_rows.load()),
          static_cast<double>(hook.last_candidates.load()) / static_cast<double>(r.n));
      if (hook.worker_ms.size() > 1) {
        std::printf("profile (per GPU): device part");
        for (const float x : hook.worker_ms) std::printf(" %.1f", static_cast<double>(x));
        std::printf(" ms; %lld bar exchanges; ", static_cast<long long>(hook.last_exchanges.load()));
      } else {
        std::printf("profile: ");
      }
      std::printf("lists merged and brought to the host in %.1f ms\n", static_cast<double>(hook.collect_ms));
    } else if (comm_size() > 1) {
      std::printf(
          "profile: the phases of each rank's job are above (the fused top-k's own events are not "
          "gathered across ranks)\n");
    } else {
      std::printf("profile: none (the job did not take the fused top-k, which needs bf16 / float16 / --tf32 rows, "
                  "a Hopper GPU and a budget that holds the rows)\n");
    }
  }

#ifndef SPILLWAY_KNN_MPI
  if (a.binary > 0) {
    // The approximate mode on the same rows, timed the same way, and its recall@k against the
    // exact lists above (every row): the share of the exact lists' columns it lists too.
    g::similarity_options bo;
    if (a.budget > 0) bo.budget = spillway::memory_budget(a.budget);
    bo.devices = a.devices;
    g::topk_result<float> bn;
    const auto bcall = [&] { bn = g::similarity_topk_binary(view, {a.k}, bo, a.binary); };
    if (a.repeat > 1) bcall();
    std::vector<double> bt;
    for (int t = 0; t < a.repeat; ++t) {
      const auto t0 = std::chrono::steady_clock::now();
      bcall();
      bt.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(bt.begin(), bt.end());
    std::int64_t found = 0, listed = 0;
#ifdef _OPENMP
#pragma omp parallel for reduction(+ : found, listed)
#endif
    for (std::int64_t i = 0; i < r.n; ++i) {
      for (int t = 0; t < a.k; ++t) {
        const std::int64_t j = nn.index(i, t);
        if (j < 0) continue;
        ++listed;
        for (int q = 0; q < a.k; ++q) found += bn.index(i, q) == j ? 1 : 0;
      }
    }
    const double bs = bt[bt.size() / 2];
    std::printf(
        "binary-quantized top-%d (%d sign-bit candidates a row, rescored exactly) in %.3f s%s: %.2fx the "
        "exact job; recall@%d against it %.4f\n",
        a.k, a.binary, bs, a.repeat > 1 ? " (median)" : "", secs / bs, a.k,
        listed > 0 ? static_cast<double>(found) / static_cast<double>(listed) : 0.0);
    if (a.profile) {
      std::printf(
          "profile (binary, last call): sign words %.1f ms, with the seeds %.1f ms, 1-bit GEMMs with the "
          "sink %.1f ms, merges %.1f ms, rescoring %.1f ms, device part %.1f ms; %lld chunks, %llu rows "
          "recomputed, %.1f candidates per row passed the filter (seeds not counted)\n",
          static_cast<double>(hook.signs_ms), static_cast<double>(hook.seed_ms),
          static_cast<double>(hook.gemm_ms), static_cast<double>(hook.merge_ms),
          static_cast<double>(hook.rescore_ms), static_cast<double>(hook.device_ms),
          static_cast<long long>(hook.last_chunks.load()),
          static_cast<unsigned long long>(hook.last_recomputed_rows.load()),
          static_cast<double>(hook.last_candidates.load()) / static_cast<double>(r.n));
    }
  }
#endif

  if (!a.output.empty()) {
#ifdef SPILLWAY_KNN_MPI
    // One file each, every rank writing its rows' range through MPI-IO.
    const std::int64_t k = a.k;
    spillway::dist::write_npy_at_all(*comm, a.output + ".indices.npy", {r.n, k}, mine.lists.indices.data(),
                                     mine.first_row * k, mine.lists.rows * k);
    spillway::dist::write_npy_at_all(*comm, a.output + ".scores.npy", {r.n, k}, mine.lists.values.data(),
                                     mine.first_row * k, mine.lists.rows * k);
#else
    spillway::io::write_npy(a.output + ".indices.npy", nn.indices, {r.n, a.k});
    spillway::io::write_npy(a.output + ".scores.npy", nn.values, {r.n, a.k});
#endif
    std::printf("wrote %s.indices.npy and %s.scores.npy\n", a.output.c_str(), a.output.c_str());
  }

  // The check: each listed j's host score (double) is within eps of the listed value and within
  // 2 eps of the host's k-th best (eps: the float-accumulation bound 4(d + 8)·2^-24 on cosine, plus
  // 2·2^-10 under TF32; times |a||b| for inner products; √(eps·(|a|² + |b|²)) for distances).
  const double u = std::ldexp(1.0, -24);
  const double e_cos = 4.0 * static_cast<double>(r.d + 8) * u + (a.tf32 ? 2.0 * std::ldexp(1.0, -10) : 0.0);
  const bool larger = g::is_similarity(o.metric);
  std::mt19937_64 pick(a.seed ^ 0x5eedULL);
  int bad = 0;
  const std::int64_t samples = nn.rows == r.n ? std::min(a.check, r.n) : 0;  // (MPI: rank 0 checks)
  for (std::int64_t s = 0; s < samples; ++s) {
    const std::int64_t i = s == 0 ? 0 : static_cast<std::int64_t>(pick() % static_cast<std::uint64_t>(r.n));
    std::vector<double> host(static_cast<std::size_t>(r.n)), eps(static_cast<std::size_t>(r.n));
    const double ni = g::host_similarity_score(view, view, i, i, g::similarity_metric::inner_product);
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (std::int64_t j = 0; j < r.n; ++j) {
      host[static_cast<std::size_t>(j)] = g::host_similarity_score(view, view, i, j, o.metric);
      const double nj = g::host_similarity_score(view, view, j, j, g::similarity_metric::inner_product);
      eps[static_cast<std::size_t>(j)] = o.metric == g::similarity_metric::cosine ? e_cos
                                         : o.metric == g::similarity_metric::inner_product ? e_cos * std::sqrt(ni * nj)
                                                                                           : std::sqrt(e_cos * (ni + nj));
    }
    std::vector<double> others;
    for (std::int64_t j = 0; j < r.n; ++j)
      if (j != i) others.push_back(host[static_cast<std::size_t>(j)]);
    const int kk = static_cast<int>(std::min<std::int64_t>(a.k, r.n - 1));
    std::nth_element(others.begin(), others.begin() + (kk - 1), others.end(),
                     [&](double x, double y) { return larger ? x > y : x < y; });
    const double kth = others[static_cast<std::size_t>(kk - 1)];
    const double row_eps = *std::max_element(eps.begin(), eps.end());
    bool ok = true;
    for (int t = 0; t < kk && ok; ++t) {
      const std::int64_t j = nn.index(i, t);
      if (j < 0 || j >= r.n || j == i) {
        ok = false;
        break;
      }
      const double h = host[static_cast<std::size_t>(j)];
      ok = std::fabs(static_cast<double>(nn.value(i, t)) - h) <= eps[static_cast<std::size_t>(j)] &&
           (larger ? h >= kth - 2 * row_eps : h <= kth + 2 * row_eps);
    }
    if (!ok) {
      ++bad;
      std::printf("row %lld: WRONG (first listed %lld, value %.6f)\n", static_cast<long long>(i),
                  static_cast<long long>(nn.index(i, 0)), static_cast<double>(nn.value(i, 0)));
    }
  }
  if (samples > 0) {
    std::printf("check: %lld sampled rows against the host in double: %s (eps %.2e on cosine)\n",
                static_cast<long long>(samples), bad == 0 ? "all correct" : "WRONG", e_cos);
  }
  if (nn.rows > 0) {
    std::printf("row 0's nearest: %lld (%.4f)", static_cast<long long>(nn.index(0, 0)), static_cast<double>(nn.value(0, 0)));
    if (a.k > 1) std::printf(", %lld (%.4f)", static_cast<long long>(nn.index(0, 1)), static_cast<double>(nn.value(0, 1)));
    std::printf("\n");
  }
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
#ifdef SPILLWAY_KNN_MPI
  spillway::dist::environment env(argc, argv);
  const spillway::dist::communicator world;
  comm = &world;
  // Rank 0 prints; the others' output would repeat it.
  if (world.rank() != 0 && std::freopen("/dev/null", "w", stdout) == nullptr) return 1;
#endif
  args a = parse(argc, argv);
#ifdef SPILLWAY_KNN_MPI
  if (a.host || !a.devices.empty())
    usage("spillway-knn-mpi runs one GPU per rank: --host and --devices are not taken");
#endif
  try {
    const rows_t r = load(a);
    if (r.n < 2) usage("need at least 2 rows");
    if (!a.host && spillway::device_count() == 0) std::printf("no GPU: running the host implementation\n");
    int bad = 0;
    switch (r.type) {
      case rows_t::kind::f32: bad = run<float>(a, r); break;
      case rows_t::kind::f16: bad = run<__half>(a, r); break;
      case rows_t::kind::bf16: bad = run<__nv_bfloat16>(a, r); break;
    }
    return bad == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spillway-knn: %s\n", e.what());
    return 1;
  }
}
