// spillway-gram-mpi — the binary Gram matrix A·Aᵀ of a 0/1 matrix across MPI ranks, one GPU per
// rank (the host implementation where a rank has none, or with --host). Rows are split between
// the ranks by each share's predicted seconds on its GPU (dist/gram_split.hpp; by pairs on the
// host, or with --split pairs); each rank runs its strips through the one-process out-of-core
// Gram; the results meet in ONE file per output: the triangle and the top-k lists through MPI-IO,
// the threshold COO in rank order.
//
//   mpirun -np 2 spillway-gram-mpi --input A.npy --sink topk --k 32 --output nn.npy
//   mpirun -np 2 spillway-gram-mpi --rows 100000 --cols 200000 --sink triangle --output c.npy
//   mpirun -np 2 spillway-gram-mpi --bench --output /local/disk/c.npy   # 100,000 x 200,000
//
// Prints each rank's rows, tasks, bytes and time, its phases (setup, compute, wait, collect,
// exchange, merge, write: seconds and bytes), the split's predicted share against the measured
// one, and the total. --check compares with the
// one-process job on rank 0 (exact) and exits non-zero when anything differs: the host
// implementation's result, which the one-process GPU jobs equal exactly (tests/gram) — so this
// program compiles the distributed path's kernels only.
#include <spillway/core/device.hpp>
#include <spillway/core/memory_budget.hpp>
#include <spillway/dist.hpp>
#include <spillway/gram/host_gram.hpp>
#include <spillway/io/npy.hpp>

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace sd = spillway::dist;
namespace sg = spillway::gram;
namespace sp = spillway::pairwise;

namespace {

struct args {
  std::string input, raw, output;
  std::int64_t rows = 4000, cols = 5000;
  std::uint64_t seed = 42;
  std::string sink = "topk", epilogue = "counts", layout = "upper_packed";
  int k = 32;
  double threshold = -1;
  bool diagonal = false, host = false, check = false, broadcast = false, bench = false, sync = false,
       independent_io = false;
  std::size_t budget = 0;
  std::int64_t strip_rows = 0;
  int repeat = 1;
  std::string split = "auto";
  bool alltoallv = false;
  bool host_exchange = false;
  sd::gram_cost_model model{};
};

void print_usage(std::FILE* f) {
  std::fprintf(
      f,
      "spillway-gram-mpi: the Gram matrix A*A^T of a 0/1 matrix across MPI ranks, one GPU per rank (the\n"
      "host implementation where a rank has none). Rows are split by each rank's predicted seconds on its\n"
      "GPU (by pairs on the host); the triangle and the top-k lists go into one .npy each through MPI-IO.\n"
      "Prints each rank's phases (setup, compute, wait, collect, exchange, merge, write) and its predicted\n"
      "against its measured share.\n\n"
      "usage: mpirun -np N spillway-gram-mpi [options]\n"
      "input (one of; default: a random matrix):\n"
      "  --input A.npy          a 2-D .npy of uint8, int8 or bool 0/1 values, read by every rank\n"
      "  --raw A.bin --shape RxC  raw row-major 0/1 bytes, R rows of C columns, read by every rank\n"
      "  --broadcast            rank 0 reads (or makes) the matrix and broadcasts it\n"
      "  --rows R --cols C      a random matrix, density 1/2, made alike on every rank (default 4000 x "
      "5000)\n"
      "  --seed S               its seed (default 42)\n"
      "what to compute:\n"
      "  --sink S               topk | triangle | threshold | all (default topk)\n"
      "  --k K                  neighbours per row (default 32); --diagonal lets a row list itself\n"
      "  --layout L             triangle layout: upper_packed | condensed (default upper_packed)\n"
      "  --threshold T          threshold sink: keep pairs >= T (<= T for hamming; default: cols/4)\n"
      "  --epilogue E           counts | jaccard | cosine | hamming (default counts)\n"
      "how:\n"
      "  --host                 the host implementation on every rank\n"
      "  --budget SIZE          device memory per rank's GPU, e.g. 8GiB (default 80%% of free)\n"
      "  --strip-rows P         rows per strip, the unit of the split (default: the planner's)\n"
      "  --split S              auto | model | pairs | cyclic | snake | greedy: who computes which strips\n"
      "                         (each rank OWNS one contiguous block of rows whatever the split). model /\n"
      "                         pairs: the strips of its own rows, cut by each share's predicted seconds\n"
      "                         on its GPU or by pairs alone; cyclic / snake / greedy (top-k only): the\n"
      "                         strips dealt across the matrix in the order one process runs them, round\n"
      "                         robin, back and forth, or longest first to the rank predicted least busy;\n"
      "                         auto (default): top-k the fastest of model and the deals as the model\n"
      "                         predicts them, the triangle and threshold model. --bench with several\n"
      "                         ranks runs top-k under each\n"
      "  --alltoallv            top-k lists to their owners with MPI_Alltoallv even where every rank is on\n"
      "                         one host (default there: GPU to GPU, else through the host's shared memory)\n"
      "  --host-exchange        top-k lists to their owners through the host even where every rank is on\n"
      "                         one host (default there: GPU to GPU by CUDA IPC, each owner merging on its GPU)\n"
      "  --model-rate R         the model's b1 product rate, bit-MAC/s (default 5.8e15)\n"
      "  --model-h2d B          its upload rate, bytes/s (default 55e9); --model-d2h B likewise (55e9)\n"
      "  --model-score B        its rate of the top-k/threshold sink's pass over the scores, bytes/s (1e12)\n"
      "  --model-host-copy B    its rate of the triangle's copy out of the staging, bytes/s (10e9)\n"
      "  --model-exchange B     its rate of the top-k lists' exchange, bytes sent + received/s (8e9)\n"
      "  --model-collect B      its rate of the GPU's lists to the host, bytes/s (20e9)\n"
      "  --model-merge E        its rate of an owner's k-way merge, list entries/s (1e9)\n"
      "  --output OUT.npy       write the result (top-k adds OUT.npy.indices.npy; threshold adds\n"
      "                         OUT.npy.row.npy and OUT.npy.col.npy; --sink all: OUT.npy.<sink>.npy)\n"
      "  --check                compare with the one-process job (host implementation) on rank 0, exactly\n"
      "  --repeat N             run each job N times, report the median (default 1)\n"
      "  --sync                 the triangle's file is synced to the disk inside the timed job\n"
      "  --independent-io       each rank writes its triangle rows with MPI_File_write_at (default: _all)\n"
      "  --bench                the benchmark: 100,000 x 200,000, top-32 then the triangle (--sync), 3 "
      "repeats\n"
      "  -h, --help             this text\n\n"
      "example:\n"
      "  mpirun -np 2 spillway-gram-mpi --input A.npy --sink topk --k 32 --output nn.npy\n");
}

int g_rank = 0;

[[noreturn]] void usage(const char* why) {
  if (g_rank == 0) {
    std::fprintf(stderr, "spillway-gram-mpi: error: %s\n\n", why);
    print_usage(stderr);
  }
  MPI_Finalize();
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
    if (k == "--input")
      a.input = val();
    else if (k == "--raw")
      a.raw = val();
    else if (k == "--shape") {
      const std::string v = val();
      if (std::sscanf(v.c_str(), "%ldx%ld", &a.rows, &a.cols) != 2) usage("--shape must be RxC");
    } else if (k == "--output")
      a.output = val();
    else if (k == "--rows")
      a.rows = std::atoll(val().c_str());
    else if (k == "--cols")
      a.cols = std::atoll(val().c_str());
    else if (k == "--seed")
      a.seed = std::strtoull(val().c_str(), nullptr, 0);
    else if (k == "--sink")
      a.sink = val();
    else if (k == "--epilogue")
      a.epilogue = val();
    else if (k == "--layout")
      a.layout = val();
    else if (k == "--k")
      a.k = std::atoi(val().c_str());
    else if (k == "--threshold")
      a.threshold = std::atof(val().c_str());
    else if (k == "--diagonal")
      a.diagonal = true;
    else if (k == "--host")
      a.host = true;
    else if (k == "--check")
      a.check = true;
    else if (k == "--broadcast")
      a.broadcast = true;
    else if (k == "--sync")
      a.sync = true;
    else if (k == "--independent-io")
      a.independent_io = true;
    else if (k == "--budget") {
      try {
        a.budget = spillway::parse_byte_size(val());
      } catch (const spillway::logic_error& e) {
        usage(e.what());
      }
    } else if (k == "--strip-rows")
      a.strip_rows = std::atoll(val().c_str());
    else if (k == "--split")
      a.split = val();
    else if (k == "--alltoallv")
      a.alltoallv = a.host_exchange = true;
    else if (k == "--host-exchange")
      a.host_exchange = true;
    else if (k == "--model-rate")
      a.model.bit_macs_per_second = std::atof(val().c_str());
    else if (k == "--model-h2d")
      a.model.h2d_bytes_per_second = std::atof(val().c_str());
    else if (k == "--model-d2h")
      a.model.d2h_bytes_per_second = std::atof(val().c_str());
    else if (k == "--model-score")
      a.model.score_bytes_per_second = std::atof(val().c_str());
    else if (k == "--model-host-copy")
      a.model.host_copy_bytes_per_second = std::atof(val().c_str());
    else if (k == "--model-exchange")
      a.model.exchange_bytes_per_second = std::atof(val().c_str());
    else if (k == "--model-collect")
      a.model.collect_bytes_per_second = std::atof(val().c_str());
    else if (k == "--model-merge")
      a.model.merge_entries_per_second = std::atof(val().c_str());
    else if (k == "--repeat")
      a.repeat = std::max(1, std::atoi(val().c_str()));
    else if (k == "--bench") {
      a.bench = true;
      a.rows = 100000;
      a.cols = 200000;
      a.k = 32;
      a.repeat = 3;
      a.sync = true;
      a.sink = "bench";
    } else
      usage(("unknown argument " + k).c_str());
  }
  if (a.input.empty() && (a.rows < 1 || a.cols < 1)) usage("rows and cols must be >= 1");
  if (a.sink != "topk" && a.sink != "triangle" && a.sink != "threshold" && a.sink != "all" &&
      a.sink != "bench") {
    usage(("unknown --sink " + a.sink).c_str());
  }
  if (a.layout != "upper_packed" && a.layout != "condensed") usage(("unknown --layout " + a.layout).c_str());
  try {
    (void)sd::parse_split_policy(a.split);
  } catch (const spillway::logic_error& e) {
    usage(e.what());
  }
  return a;
}

// A random packed matrix, the same on every rank whatever its thread count: row r's words come
// from a generator seeded by (seed, r). Density 1/2, tail bits zero.
sg::bit_matrix random_bits(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
  // Pinned where there is a GPU (its copies then run at full rate), pageable where there is none.
  sg::bit_matrix m(rows, cols,
                   spillway::gpu_available() ? sg::host_memory::pinned : sg::host_memory::pageable);
  const std::int64_t full = cols / 32, tail = cols % 32;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
  for (std::int64_t r = 0; r < rows; ++r) {
    std::uint64_t x =
        seed * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(r) * 0xBF58476D1CE4E5B9ULL + 1;
    auto next = [&x] {  // splitmix64
      std::uint64_t z = (x += 0x9E3779B97F4A7C15ULL);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
      return z ^ (z >> 31);
    };
    std::uint32_t* w = m.row(r);
    for (std::int64_t q = 0; q < full; ++q) w[q] = static_cast<std::uint32_t>(next());
    if (tail) w[full] = static_cast<std::uint32_t>(next()) & ((1u << tail) - 1u);
  }
  return m;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void print_ranks(const sd::communicator& c, const sd::gram_report& r, const char* what) {
  if (c.rank() != 0) return;
  const auto& sp_ = r.split;
  std::printf("%s: %ld rows in %ld strips of %ld, %s, strips %s (each rank owns one block of rows)\n", what, sp_.n,
              sp_.strips, sp_.strip_rows, r.on_gpu ? "one GPU per rank" : "host implementation",
              sp_.deal == sd::strip_deal::contiguous ? "of its own rows (contiguous)"
              : sp_.deal == sd::strip_deal::cyclic   ? "dealt cyclic"
              : sp_.deal == sd::strip_deal::snake    ? "dealt snake"
                                                     : "dealt greedy (by the model)");
  double slowest = 0;
  for (int q = 0; q < c.size(); ++q) {
    const auto& s = r.run.ranks[static_cast<std::size_t>(q)];
    const auto& part = sp_.plan.parts[static_cast<std::size_t>(q)];
    std::printf("  rank %d: owns rows [%ld, %ld), computes %zu strips, %.1f%% of the pairs, %.3f GB host<->device, %.3f s\n",
                q, sp_.first_row(q), sp_.last_row(q), s.tasks,
                sp_.plan.total_cost > 0 ? 100.0 * part.cost / sp_.plan.total_cost : 0.0,
                static_cast<double>(s.bytes) / 1e9, s.seconds);
    slowest = std::max(slowest, s.seconds);
  }
  if (sp_.predicted.empty()) {
    std::printf("  split imbalance %.3f by pairs (slowest part / mean part); slowest rank %.3f s\n", sp_.plan.imbalance(),
                slowest);
  } else {
    std::printf("  split imbalance %.3f by pairs, %.3f by predicted seconds (slowest part / mean part); slowest rank "
                "%.3f s\n",
                sp_.plan.imbalance(), sp_.predicted_imbalance(), slowest);
  }
  // Each rank's share: what the split predicted, what it measured.
  if (!sp_.predicted.empty()) {
    for (int q = 0; q < c.size(); ++q) {
      const auto& p = sp_.predicted[static_cast<std::size_t>(q)];
      const double m = r.run.ranks[static_cast<std::size_t>(q)].seconds;
      std::printf("  rank %d share: predicted %.3f s, measured %.3f s (measured/predicted %.3f) -- predicted: "
                  "first upload %.3f s, uploads %.3f s (%.2f GB), products %.3f s, sink %.3f s, downloads %.3f s, "
                  "host copies %.3f s\n",
                  q, p.seconds, m, p.seconds > 0 ? m / p.seconds : 0.0, p.first_upload_seconds, p.upload_seconds,
                  static_cast<double>(p.upload_bytes) / 1e9, p.product_seconds, p.sink_seconds, p.download_seconds,
                  p.host_seconds);
      if (p.after_seconds() > 0 && q < static_cast<int>(r.ranks.size())) {
        const auto& ph = r.ranks[static_cast<std::size_t>(q)];
        std::printf("  rank %d lists: predicted collect %.4f + exchange %.4f (%.1f MB out, %.1f MB in) + merge %.4f s; "
                    "measured collect %.4f + exchange %.4f (%.1f MB out, %.1f MB in) + merge %.4f s\n",
                    q, p.collect_seconds, p.exchange_seconds, p.sent_bytes / 1e6, p.received_bytes / 1e6,
                    p.merge_seconds, ph.collect_seconds, ph.exchange_seconds, ph.sent_bytes / 1e6,
                    ph.received_bytes / 1e6, ph.merge_seconds);
      }
    }
    std::printf("  predicted job %.3f s (slowest share + slowest rank's lists)\n", sp_.predicted_job_seconds());
  }
  // Where each rank's time went (the last run).
  for (int q = 0; q < c.size() && q < static_cast<int>(r.ranks.size()); ++q) {
    const auto& ph = r.ranks[static_cast<std::size_t>(q)];
    std::printf("  rank %d phases: setup %.3f | compute %.3f (%.2f GB) | wait %.3f | collect %.3f (%.1f MB) | "
                "exchange %.3f (sent %.1f MB, received %.1f MB) | merge %.3f | write %.3f (%.2f GB) | other %.3f | "
                "total %.3f s\n",
                q, ph.setup_seconds, ph.compute_seconds, ph.transfer_bytes / 1e9, ph.wait_seconds, ph.collect_seconds,
                ph.collect_bytes / 1e6, ph.exchange_seconds, ph.sent_bytes / 1e6, ph.received_bytes / 1e6,
                ph.merge_seconds, ph.write_seconds, ph.written_bytes / 1e9, ph.other_seconds(), ph.total_seconds);
    if (ph.host_copy_seconds > 0) {
      std::printf("  rank %d: of its compute, %.3f s copied %.2f GB out of the pinned staging (%.2f GB/s; the model's "
                  "--model-host-copy)\n",
                  q, ph.host_copy_seconds, ph.written_bytes / 1e9, ph.written_bytes / ph.host_copy_seconds / 1e9);
    }
  }
}

// The largest of a per-rank figure (collective).
double max_over_ranks(const sd::communicator& c, double v) {
  double m = 0;
  MPI_Allreduce(&v, &m, 1, MPI_DOUBLE, MPI_MAX, c.get());
  return m;
}

std::string out_name(const args& a, const char* sink) {
  if (a.output.empty()) return "";
  return a.sink == "all" || a.sink == "bench" ? a.output + "." + sink + ".npy" : a.output;
}

template <class V>
bool run(const sd::communicator& c, const args& a, const sg::bit_matrix& m, sg::metric metric) {
  sd::gram_job_options o;
  o.epilogue = metric;
  o.host = a.host;
  o.strip_rows = a.strip_rows;
  o.sync_files = a.sync;
  o.collective_io = !a.independent_io;
  o.split = sd::parse_split_policy(a.split);
  o.shared_memory_exchange = !a.alltoallv;
  o.device_exchange = !a.host_exchange;
  o.model = a.model;
  if (a.budget > 0) o.budget = spillway::memory_budget(a.budget);
  const std::int64_t n = m.rows();
  const double mb = 1e6;
  const double bitmacs =
      static_cast<double>(n) * static_cast<double>(n + 1) / 2.0 * static_cast<double>(m.cols());
  bool ok = true;
  auto one_process_note = [&] {
    if (c.rank() == 0) std::printf("  --check: comparing with the one-process job on rank 0...\n");
  };
  const bool all = a.sink == "all" || a.sink == "bench";

  if (a.sink == "topk" || all) {
    // --bench with several ranks: top-k under each split, the default's first (one GPU call
    // measures them all); the lists are written and checked after the first.
    std::vector<std::string> splits{a.split};
    if (a.bench && c.size() > 1) {
      for (const char* x : {"model", "pairs", "cyclic", "snake", "greedy"})
        if (a.split != x) splits.emplace_back(x);
    }
    for (std::size_t si = 0; si < splits.size(); ++si) {
      o.split = sd::parse_split_policy(splits[si]);
      std::vector<double> times;
      sd::topk_block<V> b;
      sd::gram_report rep;
      std::vector<double> inside;
      for (int it = 0; it < a.repeat; ++it) {
        b = sd::topk_block<V>{};  // the last run's lists freed outside the timed call
        c.barrier();
        const auto t0 = std::chrono::steady_clock::now();
        b = sd::gram_topk<V>(c, m, {a.k, a.diagonal}, o, &rep);
        times.push_back(max_over_ranks(c, sd::detail::seconds_since(t0)));
        inside.push_back(max_over_ranks(c, rep.local.total_seconds));
      }
      print_ranks(c, rep, ("top-k, --split " + splits[si]).c_str());
      const double collect = max_over_ranks(c, rep.local.collect_seconds);
      const double exchange = max_over_ranks(c, rep.local.exchange_seconds);
      const double merge = max_over_ranks(c, rep.local.merge_seconds);
      const double sent = max_over_ranks(c, rep.local.sent_bytes);
      double wt = 0;
      const std::string f = si == 0 ? out_name(a, "topk") : std::string();
      if (!f.empty()) {
        const auto t0 = std::chrono::steady_clock::now();
        sd::write_topk_npy(c, f, b, n);
        wt = max_over_ranks(c, sd::detail::seconds_since(t0));
      }
      if (c.rank() == 0) {
        std::printf(
            "  top-%d total %.3f s --split %s (%s; predicted %.3f s) (median of %d; slowest rank's collect %.3f s, "
            "exchange %.3f s, merge %.3f s; %.1f MB sent by the busiest rank%s; inside the call %.3f s) = %.2f P "
            "bit-MAC/s of the triangle%s\n",
            a.k, median(times), splits[si].c_str(), sd::deal_name(rep.split.deal), rep.split.predicted_job_seconds(),
            a.repeat, collect, exchange, merge, sent / mb, rep.lists_on_device ? ", GPU to GPU" : "", median(inside),
            bitmacs / median(times) / 1e15,
            f.empty() ? "" : (", written to " + f + " in " + std::to_string(wt) + " s").c_str());
      }
      if (a.check) {
        one_process_note();
        const auto got = sd::gather_topk(c, b, n);
        int good = 1;
        if (c.rank() == 0) {
          const auto ref = sg::host_gram_topk<V>(m, {a.k, a.diagonal}, metric);
          good = got.values == ref.values && got.indices == ref.indices ? 1 : 0;
          std::printf("  top-k lists (--split %s) %s the one-process job's\n", splits[si].c_str(),
                      good ? "EQUAL" : "DIFFER FROM");
        }
        MPI_Bcast(&good, 1, MPI_INT, 0, c.get());
        ok = ok && good;
      }
    }
    o.split = sd::parse_split_policy(a.split);
  }

  if (a.sink == "triangle" || all) {
    const auto layout =
        a.layout == "condensed" ? sp::triangle_layout::condensed : sp::triangle_layout::upper_packed;
    std::string f = out_name(a, "triangle");
    const bool temp = f.empty();
    if (temp) f = "spillway_gram_mpi_triangle.npy";  // MPI-IO needs a file: a temporary one
    std::vector<double> times;
    sd::gram_report rep;
    for (int it = 0; it < a.repeat; ++it) {
      c.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      rep = sd::gram_triangle_npy<V>(c, m, f, layout, o);
      times.push_back(max_over_ranks(c, sd::detail::seconds_since(t0)));
    }
    print_ranks(c, rep, "triangle");
    const double wt = max_over_ranks(c, rep.local_write_seconds);
    const double bytes = static_cast<double>(sp::layout_size(layout, n)) * sizeof(V);
    if (c.rank() == 0) {
      std::printf(
          "  triangle total %.3f s (median of %d), of which the MPI-IO write %.3f s (%.2f GB at %.2f GB/s) "
          "-> %s\n",
          median(times), a.repeat, wt, bytes / 1e9, bytes / 1e9 / std::max(wt, 1e-9), f.c_str());
    }
    if (a.check) {
      one_process_note();
      int good = 1;
      if (c.rank() == 0) {
        std::vector<V> ref(static_cast<std::size_t>(sp::layout_size(layout, n)));
        sg::host_gram_dense(m.view(), ref.data(), layout, metric);
        const auto got = spillway::io::read_npy(f);
        good = got.header.shape == std::vector<std::int64_t>{static_cast<std::int64_t>(ref.size())} &&
                       std::memcmp(got.data<V>(), ref.data(), ref.size() * sizeof(V)) == 0
                   ? 1
                   : 0;
        std::printf("  triangle file %s the one-process job's\n", good ? "EQUALS" : "DIFFERS FROM");
      }
      MPI_Bcast(&good, 1, MPI_INT, 0, c.get());
      ok = ok && good;
    }
    if (temp && c.rank() == 0) std::remove(f.c_str());
  }

  if (a.sink == "threshold" || a.sink == "all") {
    sp::threshold_options t;
    t.threshold = a.threshold >= 0 ? a.threshold : static_cast<double>(m.cols()) / 4.0;
    t.include_diagonal = a.diagonal;
    sd::gram_report rep;
    const auto t0 = std::chrono::steady_clock::now();
    const auto b = sd::gram_threshold<V>(c, m, t, o, &rep);
    const double el = max_over_ranks(c, sd::detail::seconds_since(t0));
    print_ranks(c, rep, "threshold");
    if (c.rank() == 0) std::printf("  threshold %g: %ld pairs kept, %.3f s\n", t.threshold, b.total, el);
    const std::string f = out_name(a, "threshold");
    if (!f.empty()) sd::write_coo_npy(c, f, b);
    if (a.check) {
      one_process_note();
      const auto got = sd::gather_coo(c, b);
      int good = 1;
      if (c.rank() == 0) {
        const auto ref = sg::host_gram_threshold<V>(m, t, metric);
        good = got.row == ref.row && got.col == ref.col && got.value == ref.value ? 1 : 0;
        std::printf("  threshold COO %s the one-process job's\n", good ? "EQUALS" : "DIFFERS FROM");
      }
      MPI_Bcast(&good, 1, MPI_INT, 0, c.get());
      ok = ok && good;
    }
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      print_usage(stdout);  // before MPI: --help needs no mpirun
      return 0;
    }
  }
  sd::environment env(argc, argv);
  int rc = 0;
  try {
    sd::communicator c;
    g_rank = c.rank();
    const args a = parse(argc, argv);
    // This rank's GPU current from the start, so that its pinned allocations and first CUDA calls
    // make no context on another rank's GPU (the jobs pick local_rank % GPUs as well).
    if (!a.host && spillway::gpu_available()) {
      SPILLWAY_CUDA_TRY(cudaSetDevice(c.local_rank() % spillway::device_count()));
    }
    // The input: every rank reads it, or rank 0 reads it and broadcasts (timed apart from the job).
    c.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    sg::bit_matrix m;
    if (!a.raw.empty() && !a.broadcast) {
      m = sd::read_bits_raw(c, a.raw, a.rows, a.cols);
    } else if (!a.raw.empty()) {
      m = sd::agree(c, "reading the input", [&] {
        return c.rank() == 0 ? sd::read_bits_raw_local(a.raw, a.rows, a.cols) : sg::bit_matrix();
      });
      sd::broadcast_bits(c, m);
    } else if (!a.input.empty() && !a.broadcast) {
      m = sd::read_bits_npy(c, a.input);
    } else if (!a.input.empty()) {
      m = sd::agree(c, "reading the input",
                    [&] { return c.rank() == 0 ? sd::read_bits_npy_local(a.input) : sg::bit_matrix(); });
      sd::broadcast_bits(c, m);
    } else if (a.broadcast) {
      if (c.rank() == 0) m = random_bits(a.rows, a.cols, a.seed);
      sd::broadcast_bits(c, m);
    } else {
      m = random_bits(a.rows, a.cols, a.seed);
    }
    const double t_in = [&] {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      double mx = 0;
      MPI_Allreduce(&s, &mx, 1, MPI_DOUBLE, MPI_MAX, c.get());
      return mx;
    }();
    if (c.rank() == 0) {
      std::printf(
          "spillway-gram-mpi: %d rank(s), A %ld x %ld (%.2f GB packed), input %s in %.3f s (not in the job "
          "times)\n",
          c.size(), m.rows(), m.cols(), static_cast<double>(m.size_bytes()) / 1e9,
          a.input.empty() && a.raw.empty()
              ? (a.broadcast ? "made on rank 0 and broadcast" : "made on every rank")
              : (a.broadcast ? "read on rank 0 and broadcast" : "read on every rank"),
          t_in);
    }
    const sg::metric metric = a.epilogue == "jaccard"   ? sg::metric::jaccard
                              : a.epilogue == "cosine"  ? sg::metric::cosine
                              : a.epilogue == "hamming" ? sg::metric::hamming
                                                        : sg::metric::counts;
    if (a.epilogue != "counts" && metric == sg::metric::counts)
      usage(("unknown --epilogue " + a.epilogue).c_str());
    const bool ok = metric == sg::metric::jaccard || metric == sg::metric::cosine
                        ? run<float>(c, a, m, metric)
                        : run<std::int32_t>(c, a, m, metric);
    if (c.rank() == 0 && a.check) std::printf("%s\n", ok ? "check: ok" : "check: FAILED");
    rc = ok ? 0 : 1;
  } catch (const sd::rank_error& e) {
    if (e.here() || g_rank == 0) std::fprintf(stderr, "spillway-gram-mpi (rank %d): %s\n", g_rank, e.what());
    rc = 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spillway-gram-mpi (rank %d): %s\n", g_rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);  // this rank alone: the others may be inside a collective
  }
  return rc;
}
