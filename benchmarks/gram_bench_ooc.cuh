// Out-of-core Gram benchmarks (included at the end of gram_bench.cu): 100,000 x 200,000 bits under
// an 8 GiB budget into a pinned upper triangle, and with a top-k (k = 32) sink; host packing
// throughput.
//
// Timed region: from the call — packed A in pinned host memory, the output allocated and touched —
// to the return with all output on the host (the call is synchronous), stamped by CUDA events on
// a stream of its own. Baselines in the same binary:
//   - the same job with one slot per device: each strip's copy-out waits for its compute and the
//     next strip waits for the copy (row slices without overlap — what a hand-written loop does);
//   - the copy-engine floor: the triangle's bytes copied device→host into the same pinned output
//     with nothing else running (host clock around the copies and the wait), from one stream per
//     device in 1 GiB pieces and from three in 256 MiB pieces; the faster is the floor.
// Rates count only the required work: rows·(rows+1)/2·cols bit-MACs.
//
// Two GPUs (the argument `gpus` = 2; skipped with the reason where fewer are visible): the same
// jobs over devices {0, 1}, each device's D2H link carrying the strips it computed (the counters
// give each device's strips and bytes: the report's split), against the two-link floor — each
// device copies half the triangle's bytes into its half of the same pinned output at once, timed
// from the first copy's issue to the last device's completion.
#pragma once

#include <spillway/core.hpp>
#include <spillway/gram.cuh>

#include "bench_common.cuh"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace spillway::gram_ooc_bench {

inline constexpr std::int64_t ooc_rows = 100000;
inline constexpr std::int64_t ooc_cols = 200000;

/// Packed random A (density 1/2) in pinned memory, made once: random words, tail bits cleared.
inline const gram::bit_matrix& ooc_matrix() {
  static const gram::bit_matrix m = [] {
    gram::bit_matrix a(ooc_rows, ooc_cols, gram::host_memory::pinned);
    const std::int64_t full = ooc_cols / 32, rem = ooc_cols % 32;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (std::int64_t r = 0; r < ooc_rows; ++r) {
      std::uint64_t x = 0x9E3779B97F4A7C15ULL * static_cast<std::uint64_t>(r + 1) ^ 0xD1B54A32D192ED03ULL;
      std::uint32_t* w = a.row(r);
      for (std::int64_t k = 0; k < full + (rem ? 1 : 0); ++k) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w[k] = static_cast<std::uint32_t>(x >> 16);
      }
      if (rem) w[full] &= (1u << rem) - 1u;
    }
    return a;
  }();
  return m;
}

inline double ooc_required_macs() {
  return static_cast<double>(ooc_rows) * static_cast<double>(ooc_rows + 1) / 2.0 * static_cast<double>(ooc_cols);
}

/// The pinned upper-triangle output (20 GB of int32), allocated and touched once.
inline pinned_buffer<std::int32_t>& ooc_triangle() {
  static pinned_buffer<std::int32_t> out = [] {
    pinned_buffer<std::int32_t> p(static_cast<std::size_t>(gram::layout_size(gram::triangle_layout::upper_packed, ooc_rows)));
    const std::int64_t n = static_cast<std::int64_t>(p.size());
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (std::int64_t i = 0; i < n; i += 1024) p[static_cast<std::size_t>(i)] = -1;
    return p;
  }();
  return out;
}

template <class Call>
void ooc_time(benchmark::State& state, Call&& call) {
  stream timing;
  call();  // warm-up: first touch of the kernels, the pool and the pinned pages
  for (auto _ : state) {
    event_timer t(timing.view());
    call();
    state.SetIterationTime(static_cast<double>(t.stop()) * 1e-3);
  }
}

/// The NUMA node the kernel lists for the device's PCI function (−1: none or unknown).
inline int ooc_numa_node(int device) {
  char bus[32] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, device) != cudaSuccess) return -1;
  std::string id(bus);
  for (char& ch : id) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (id.size() > 12) id = id.substr(id.size() - 12);  // dddd:bb:dd.f
  std::ifstream f("/sys/bus/pci/devices/" + id + "/numa_node");
  int node = -1;
  if (!(f >> node)) return -1;
  return node;
}

inline void BM_gram_ooc_triangle(benchmark::State& state) {
  const int gpus = static_cast<int>(state.range(1));
  if (bench::skip_without_gpus(state, gpus)) return;
  const auto& a = ooc_matrix();
  auto& out = ooc_triangle();
  gram::gram_options o;
  o.budget = memory_budget(8_GiB);
  o.devices = bench::first_devices(gpus);
  o.slots_per_device = static_cast<std::size_t>(state.range(0));
  gram::gram_report rep;
  o.report = &rep;
  ooc_time(state, [&] { gram::gram_dense(a.view(), out.data(), gram::triangle_layout::upper_packed, o); });
  const double iters = static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(out.size_bytes()) * state.iterations());
  state.counters["bitMAC/s"] = benchmark::Counter(ooc_required_macs() * iters, benchmark::Counter::kIsRate);
  state.counters["strips"] = static_cast<double>(rep.plan.strips);
  state.counters["strip_rows"] = static_cast<double>(rep.plan.panel_rows);
  state.counters["resident"] = rep.plan.resident ? 1 : 0;
  bench::split_counters(state, rep.job, "strips");
  state.SetLabel(o.slots_per_device == 1 ? std::string("baseline: row slices without overlap (1 slot)")
                 : gpus > 1             ? "spillway, " + std::to_string(gpus) + " GPUs"
                                        : std::string("spillway (overlapped)"));
}

inline void BM_gram_ooc_d2h_floor(benchmark::State& state) {
  const int gpus = static_cast<int>(state.range(0));
  const int per_device = static_cast<int>(state.range(1));
  if (bench::skip_without_gpus(state, gpus)) return;
  auto& out = ooc_triangle();
  // One stream per device copies 1 GiB pieces; several streams per device take 256 MiB pieces in
  // turn (as the job's slots do). Device d copies bytes [d·total/gpus, (d+1)·total/gpus) of the
  // output, from a source of its own; all devices at once.
  const std::size_t chunk = per_device == 1 ? std::size_t{1} << 30 : std::size_t{256} << 20;
  auto* dst = reinterpret_cast<std::byte*>(out.data());
  const std::size_t total = out.size_bytes();
  std::vector<std::unique_ptr<stream>> streams;  // device d's are [d·per_device, (d+1)·per_device)
  std::vector<device_buffer<std::byte>> src;
  for (int d = 0; d < gpus; ++d) {
    device_guard g(d);
    for (int q = 0; q < per_device; ++q) streams.push_back(std::make_unique<stream>(d));
    src.emplace_back(chunk, streams.back()->view());
    src.back().fill_bytes_async(0x5A, streams.back()->view());
    streams.back()->synchronize();
  }
  auto copy_all = [&] {
    for (int d = 0; d < gpus; ++d) {
      device_guard g(d);
      const auto ud = static_cast<std::size_t>(d), ug = static_cast<std::size_t>(gpus);
      const std::size_t b0 = total / ug * ud, b1 = d + 1 == gpus ? total : total / ug * (ud + 1);
      std::size_t q = 0;
      for (std::size_t off = b0; off < b1; off += chunk, ++q) {
        const std::size_t b = std::min(chunk, b1 - off);
        SPILLWAY_CUDA_TRY(cudaMemcpyAsync(dst + off, src[ud].data(), b, cudaMemcpyDeviceToHost,
                                          streams[ud * static_cast<std::size_t>(per_device) + q % static_cast<std::size_t>(per_device)]->value()));
      }
    }
    for (auto& st : streams) st->synchronize();
  };
  copy_all();
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    copy_all();
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  if (gpus > 1)
    for (int d = 0; d < gpus; ++d) state.counters["numa_node_dev" + std::to_string(d)] = ooc_numa_node(d);
  state.SetBytesProcessed(static_cast<std::int64_t>(total) * state.iterations());
  state.SetLabel(std::string(gpus == 1 ? "floor: the triangle's bytes device->pinned host, nothing else"
                                       : "floor: 1/" + std::to_string(gpus) + " of the triangle's bytes from each of " + std::to_string(gpus) + " devices at once, nothing else") +
                 (per_device > 1 ? " (" + std::to_string(per_device) + " streams per device)" : ""));
}

/// Per worker of a traced job: its first product's start, its last product's end and the time
/// its products ran (ms after its origin; each strip's products start once its panels are in and
/// the device's previous product is done). last − busy is the device's idle time.
inline void trace_counters(benchmark::State& state, const pairwise::pair_trace& tr, std::size_t workers) {
  if (workers < 2) return;
  for (std::size_t w = 0; w < workers; ++w) {
    double first = 1e30, last = 0, busy = 0;
    for (std::size_t t = 0; t < tr.task_worker.size(); ++t) {
      if (tr.task_worker[t] != static_cast<int>(w)) continue;
      first = std::min(first, static_cast<double>(tr.start_ms[t]));
      last = std::max(last, static_cast<double>(tr.end_ms[t]));
      busy += tr.end_ms[t] - tr.start_ms[t];
    }
    const std::string k = "w" + std::to_string(w);
    state.counters[k + "_first_ms"] = first < 1e29 ? first : -1;
    state.counters[k + "_last_ms"] = last;
    state.counters[k + "_busy_ms"] = busy;
  }
  state.counters["setup_ms"] = tr.setup_seconds * 1e3;
  // SPILLWAY_BENCH_TRACE=1: every strip's worker and times (stderr), to see where a device waited.
  if (const char* v = std::getenv("SPILLWAY_BENCH_TRACE"); v != nullptr && v[0] == '1') {
    for (std::size_t t = 0; t < tr.task_worker.size(); ++t)
      std::fprintf(stderr, "trace task %zu worker %d start %.3f end %.3f ms\n", t, tr.task_worker[t],
                   static_cast<double>(tr.start_ms[t]), static_cast<double>(tr.end_ms[t]));
  }
}

/// Rows of a top-32 counts result checked against the host: the row's counts against every other
/// row, the 32 best by (count descending, column ascending). Returns the rows that differ.
inline int ooc_topk_mismatches(const gram::topk_result<std::int32_t>& r, int k) {
  const auto a = ooc_matrix().view();
  const std::int64_t rows[] = {0, 1, 2047, 2048, 49999, 77777, ooc_rows - 2049, ooc_rows - 1};
  int bad = 0;
#ifdef _OPENMP
#pragma omp parallel for reduction(+ : bad) schedule(dynamic)
#endif
  for (int q = 0; q < 8; ++q) {
    const std::int64_t i = rows[q];
    std::vector<std::pair<std::int32_t, std::int64_t>> c;  // (−count, column): best first when sorted
    c.reserve(static_cast<std::size_t>(ooc_rows));
    for (std::int64_t j = 0; j < ooc_rows; ++j) {
      if (j == i) continue;
      c.emplace_back(-gram::host_count(a, a, i, j), j);
    }
    std::partial_sort(c.begin(), c.begin() + k, c.end());
    for (int p = 0; p < k; ++p) {
      const auto at = static_cast<std::size_t>(i * k + p);
      if (r.indices[at] != c[static_cast<std::size_t>(p)].second || r.values[at] != -c[static_cast<std::size_t>(p)].first) {
        ++bad;
        break;
      }
    }
  }
  return bad;
}

inline void BM_gram_ooc_topk(benchmark::State& state) {
  const int gpus = static_cast<int>(state.range(0));
  if (bench::skip_without_gpus(state, gpus)) return;
  const auto& a = ooc_matrix();
  gram::gram_options o;
  o.budget = memory_budget(8_GiB);
  o.devices = bench::first_devices(gpus);
  gram::gram_report rep;
  o.report = &rep;
  pairwise::pair_trace tr;
  o.trace = &tr;
  gram::topk_options k;
  k.k = 32;
  gram::topk_result<std::int32_t> r;
  ooc_time(state, [&] { r = gram::gram_topk<std::int32_t>(a.view(), k, o); });
  state.SetBytesProcessed(static_cast<std::int64_t>(r.values.size() * 4 + r.indices.size() * 8) * state.iterations());
  state.counters["bitMAC/s"] =
      benchmark::Counter(ooc_required_macs() * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["strips"] = static_cast<double>(rep.plan.strips);
  // Column groups whose mirrored side was read in full (the rest took the rows pass's proposals).
  state.counters["full_col_groups"] = static_cast<double>(rep.topk_full_column_groups);
  bench::split_counters(state, rep.job, "strips");
  state.counters["peer_GB"] = static_cast<double>(rep.peer_bytes) / 1e9;  // panels taken from the other GPU
  trace_counters(state, tr, o.devices.size());
  const int bad = ooc_topk_mismatches(r, k.k);
  if (bad != 0) state.SkipWithError(("top-k differs from the host in " + std::to_string(bad) + " of 8 sampled rows").c_str());
  state.SetLabel(gpus > 1 ? "top-k k=32, counts, diagonal excluded, " + std::to_string(gpus) + " GPUs" : std::string("top-k k=32, counts, diagonal excluded"));
}

/// Sum over the upper triangle with the diagonal of A·Aᵀ counts, from A's column popcounts:
/// column c with m ones adds m (m + 1) / 2. What the checksum sink must return for counts.
inline unsigned long long ooc_count_checksum() {
  static const unsigned long long want = [] {
    const auto& a = ooc_matrix();
    std::vector<std::uint64_t> ones(static_cast<std::size_t>(ooc_cols), 0);
#ifdef _OPENMP
#pragma omp parallel
#endif
    {
      std::vector<std::uint64_t> mine(static_cast<std::size_t>(ooc_cols), 0);
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
      for (std::int64_t r = 0; r < ooc_rows; ++r) {
        const std::uint32_t* w = a.row(r);
        for (std::int64_t c = 0; c < ooc_cols; ++c) mine[static_cast<std::size_t>(c)] += (w[c / 32] >> (c % 32)) & 1u;
      }
#ifdef _OPENMP
#pragma omp critical
#endif
      for (std::size_t c = 0; c < ones.size(); ++c) ones[c] += mine[c];
    }
    unsigned long long s = 0;
    for (std::uint64_t m : ones) s += m * (m + 1) / 2;
    return s;
  }();
  return want;
}

/// The bare compute of the job: the same strips, tile schedule and per-element epilogue, with a
/// null sink that reduces every count to a checksum on the device (pairwise/sinks/checksum.cuh).
/// The row that top-k is measured against; the checksum is checked against the host.
inline void BM_gram_ooc_bare(benchmark::State& state) {
  const int gpus = static_cast<int>(state.range(0));
  if (bench::skip_without_gpus(state, gpus)) return;
  const auto& a = ooc_matrix();
  gram::gram_options o;
  o.budget = memory_budget(8_GiB);
  o.devices = bench::first_devices(gpus);
  gram::gram_report rep;
  o.report = &rep;
  pairwise::pair_trace tr;
  o.trace = &tr;
  unsigned long long sum = 0;
  ooc_time(state, [&] {
    auto job = gram::detail::make_job<std::int32_t>(a.view(), nullptr, o,
                                                    pairwise::detail::checksum_sink<std::int32_t>{});
    gram::detail::run_gram_job(job);
    sum = job.sink.collect(job);
  });
  if (sum != ooc_count_checksum()) {
    state.SkipWithError(("checksum " + std::to_string(sum) + " != host " + std::to_string(ooc_count_checksum())).c_str());
    return;
  }
  state.counters["bitMAC/s"] =
      benchmark::Counter(ooc_required_macs() * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["strips"] = static_cast<double>(rep.plan.strips);
  bench::split_counters(state, rep.job, "strips");
  state.counters["peer_GB"] = static_cast<double>(rep.peer_bytes) / 1e9;  // panels taken from the other GPU
  trace_counters(state, tr, o.devices.size());
  state.SetLabel("bare compute: checksum sink (the same strips and tile schedule, nothing kept)");
}

/// Host packing: 0/1 bytes → bits, GB/s of input (timed by the host clock: pure host work).
inline void BM_gram_pack_host(benchmark::State& state) {
  const std::int64_t rows = 10000, cols = ooc_cols;
  static const std::vector<std::uint8_t> bytes = [] {
    std::vector<std::uint8_t> v(static_cast<std::size_t>(10000) * static_cast<std::size_t>(ooc_cols));
    std::mt19937_64 g(7);
    for (std::size_t i = 0; i < v.size(); i += 8) {
      const std::uint64_t x = g() & 0x0101010101010101ULL;
      std::memcpy(v.data() + i, &x, std::min<std::size_t>(8, v.size() - i));
    }
    return v;
  }();
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    gram::bit_matrix m = gram::pack_bits(bytes.data(), rows, cols);
    benchmark::DoNotOptimize(m.data());
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes.size()) * state.iterations());
  state.SetLabel("pack_bits uint8 -> bits (includes the output allocation)");
}

// Args: triangle {slots, gpus}; the floor {gpus, streams per device}; the others {gpus}.
// (The four-GPU rows skip with the reason on fewer GPUs.)
BENCHMARK(BM_gram_ooc_triangle)->Args({3, 1})->Args({1, 1})->Args({3, 2})->Args({3, 4})->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_gram_ooc_d2h_floor)->Args({1, 1})->Args({1, 3})->Args({2, 1})->Args({2, 3})->Args({4, 1})->Args({4, 3})->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_gram_ooc_bare)->Arg(1)->Arg(2)->Arg(4)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_gram_ooc_topk)->Arg(1)->Arg(2)->Arg(4)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_gram_pack_host)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5);

}  // namespace spillway::gram_ooc_bench
