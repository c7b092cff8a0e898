// Out-of-core GEMM benchmarks: C = A·B with A, B, C in pinned host memory (n x n, default 32768:
// 4 GiB each in float) within a device memory budget (default 8 GiB), against the baselines a user
// has, all in this one process on the same matrices:
//
//   gemm_ooc/copy_rates            pinned H2D, D2H and both at once (1 GiB each way), measured here:
//                                  the copy floor of every row below is stated at these rates
//   gemm_ooc/float/cublasXt        cublasXtSgemm, block 8192, the same pinned matrices, GPU 0
//   gemm_ooc/float/in_core         spillway's in-core gemm of the same product (operands on the GPU)
//   gemm_ooc/float/out_of_core     gemm_out_of_core, exact FP32 (the SIMT kernel), GPU 0
//   gemm_ooc/float/out_of_core_2gpu  the same on GPUs 0 and 1 (skipped with one GPU)
//   gemm_ooc/tf32/in_core, /out_of_core      float on the TF32 tensor cores
//   gemm_ooc/bf16/in_core, /out_of_core      bf16 inputs, float C
//   gemm_ooc/e4m3/in_core, /out_of_core      FP8 e4m3 inputs (promoted accumulation), float C; the
//                                        acceptance job is --ooc_n=65536 --ooc_budget=8GiB
//                                        --benchmark_filter='gemm_ooc/(copy_rates|e4m3)'
//
// The out_of_core rows run as a caller would: default options but the budget (the plan weighs its
// choices at its own estimate of the compute time and the default copy rates).
//   gemm_ooc/{tf32,bf16}/out_of_core_given_time  the same job told the in-core time of this run
//                                        (ooc_options::compute_seconds) and the rates measured
//                                        here (the way these rows ran before 2026-11-24, sixth session)
//   gemm_ooc/{tf32,bf16}/out_of_core_narrow  the same job with single-panel C blocks always
//                                        (ooc_options::c_min_line_bytes = 1) copied out by 2-D DMA,
//                                        the plan before the wide and the staged blocks; the default
//                                        rows let the plan weigh C blocks with 64 KiB lines and
//                                        staged copies out (see docs/gemm.md, "Out of core")
//   gemm_ooc/{float,bf16}/out_of_core_pageable  the same matrices copied into ordinary (pageable)
//                                        memory for the row, default options: the job page-locks
//                                        them for each call by ooc_options::lock's rule (counter
//                                        registered_abc: 111 = A, B and C; K-major B: none);
//                                        ..._pageable_staged the same with page_lock::never (staged
//                                        through pinned buffers);
//                                        bf16/out_of_core_b_row_major_pageable[_staged] the same with NumPy's
//                                        row-major B (the rule: all three)
//   gemm_ooc/copy_lines                  device->host copies of C-block shapes (2048 rows of 2048 to
//                                        16384 floats, 2-D; and 1-D 16 MiB), 1 GiB on 4 streams,
//                                        alone and beside bf16 GEMMs: GB/s per shape (w2048_gemm
//                                        becomes the short-line rate the later rows' plans use),
//                                        and the GEMMs' time alone and beside each shape
//   gemm_ooc/scatter                     host threads (1, 2, 4, 8, 15; memcpy or non-temporal
//                                        stores) copying whole 2048² float blocks into a 32768-float
//                                        pitch, alone and beside 1-D DMA both ways; and the job's
//                                        pattern (out 1-D, then into C): GB/s (reported only; the
//                                        rows' plans leave copy_rates::scatter unpriced, see below)
//   gemm_ooc/{bf16,tf32}/out_of_core_direct  C blocks out by 2-D DMA straight into C (the default
//                                        rows choose by the plan's bound: ooc_copy_out::automatic)
//   gemm_ooc/{bf16,tf32}/out_of_core_staged_slotsS[_tN]
//                                        C blocks copied out in pieces into pinned buffers, each
//                                        written into C by one of N host threads of the job's own
//                                        (ooc_copy_out::staged; default 12 threads, non-temporal
//                                        stores), S blocks in flight
//
// Counters: seconds (median), TFLOP/s, for out-of-core rows vs_cublasXt (its time / ours),
// vs_in_core (ours / in-core time), floor_ms (the independent copy floor: A and B in, C out, at the
// measured rates), vs_bound (ours / max(floor, in-core)), compute_ms (the in-core time the plan
// weighed: its estimate from the device, or the one measured in this run where given) and
// compute_vs_in_core, ramp_ms (the bound the plan's order puts on the job at that compute time and
// its copy rates: ooc_plan::ramp_seconds) and vs_ramp,
// plan_h2d_GB / plan_d2h_GB (what the plan moves). One more run after the timed ones is traced
// (ooc_options::trace): tr_* counters are its device times in ms after the caches were ready —
// tr_in (last panel in), tr_gemm (last GEMM done), tr_out (last C block out), tr_busy (time some
// GEMM was ready or running), tr_idle_in / tr_idle_after (GPU idle before / after the last panel
// arrived), tr_lag_max (longest wait from a GEMM's end to its block being out), tr_setup (host ms
// before the scheduler starts). --ooc_trace_dir=DIR writes each traced run as CSV there.
// copy_rates also measures C-block-shaped copies (2048 x 2048 floats out of a 32768-float pitch,
// 2-D, round-robin on 4 streams, as the job copies C out): d2h_2d_GB/s alone and both_2d_GB/s
// against a 1-D host-to-device copy. Every timed product first runs on a NaN-poisoned C and 64
// sampled entries are checked against a double-precision host sum (bound as in docs/gemm.md)
// before timing.
//
// --ooc_line=BYTES sets ooc_options::c_min_line_bytes of the plain out_of_core rows.
// Smaller runs: --ooc_n=8192 --ooc_budget=512MiB (or SPILLWAY_OOC_N / SPILLWAY_OOC_BUDGET), e.g.
//   spillway_gemm_ooc_bench --ooc_n=8192 --ooc_budget=512MiB --benchmark_filter='gemm_ooc/(copy|tf32)'
// Layout: A row-major, B column-major (both K-major), C row-major; cublasXt computes the same
// product as the column-major Cᵀ = Bᵀ·Aᵀ (op T on B's buffer, op N on A's).
#include <spillway/core.hpp>
#include <spillway/core/memory_budget.hpp>
#include <spillway/core/pinned_buffer.hpp>
#include <spillway/gemm.cuh>

#include "bench_common.cuh"

#include <benchmark/benchmark.h>
#include <cublasXt.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

namespace g = spillway::gemm;
using spillway::index_t;

index_t g_n = 32768;
/// ooc_options::c_min_line_bytes of the out_of_core rows (--ooc_line=BYTES); the line* rows set their own.
std::size_t g_line = g::ooc_options{}.c_min_line_bytes;
std::size_t g_budget = std::size_t{8} << 30;
std::string g_trace_dir;
constexpr std::uint64_t kSeed = 20261123;

#define OOC_BENCH_CUBLAS(call)                                                                 \
  do {                                                                                         \
    const cublasStatus_t st_ = (call);                                                         \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                          \
      throw std::runtime_error(std::string(#call) + " failed: status " + std::to_string(st_)); \
  } while (0)

// Deterministic uniform values in [-1, 1] from the element index (parallel fill, no RNG state).
inline float value_at(std::uint64_t i, std::uint64_t salt) {
  std::uint64_t z = (i + salt * 0x9E3779B97F4A7C15ULL) + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return static_cast<float>(static_cast<double>(z >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

template <class T, class F>
void fill(T* p, std::size_t count, F f) {
#if defined(_OPENMP)
#pragma omp parallel for schedule(static)
#endif
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(count); ++i) p[i] = f(static_cast<std::uint64_t>(i));
}

/// The shared pinned host matrices (allocated on first use, kept for every row).
struct host_set {
  index_t n;
  std::size_t count;
  spillway::pinned_buffer<float> c;
  spillway::pinned_buffer<float> a32, b32;
  spillway::pinned_buffer<__nv_bfloat16> a16, b16;
  spillway::pinned_buffer<__nv_fp8_e4m3> a8, b8;
  explicit host_set(index_t n_) : n(n_), count(static_cast<std::size_t>(n_) * static_cast<std::size_t>(n_)) {
    std::printf(
        "gemm_ooc: n = %ld, budget %s, seed %llu; %zu MiB of pinned host memory for C, the operands of "
        "each type on first use\n",
        static_cast<long>(n), spillway::detail::format_bytes(g_budget).c_str(),
        static_cast<unsigned long long>(kSeed), count * 4 >> 20);
    c = spillway::pinned_buffer<float>(count);
  }
  /// A and B of element type T (the same values rounded to T), filled on first use.
  template <class T>
  std::pair<const T*, const T*> operands() {
    auto make = [&](auto& pa, auto& pb, auto convert) {
      if (pa.size() == 0) {
        pa = std::remove_reference_t<decltype(pa)>(count);
        pb = std::remove_reference_t<decltype(pb)>(count);
        fill(pa.data(), count, [&](std::uint64_t i) { return convert(value_at(i, kSeed)); });
        fill(pb.data(), count, [&](std::uint64_t i) { return convert(value_at(i, kSeed + 1)); });
      }
      return std::pair<const T*, const T*>(pa.data(), pb.data());
    };
    if constexpr (std::is_same_v<T, float>) {
      return make(a32, b32, [](float v) { return v; });
    } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      return make(a16, b16, [](float v) { return __float2bfloat16_rn(v); });
    } else {
      static_assert(std::is_same_v<T, __nv_fp8_e4m3>);
      return make(a8, b8, [](float v) { return __nv_fp8_e4m3(v); });
    }
  }
};

std::unique_ptr<host_set>& host_slot() {
  static std::unique_ptr<host_set> h;
  return h;
}
host_set& host() {
  auto& h = host_slot();
  if (!h) h = std::make_unique<host_set>(g_n);
  return *h;
}

/// Results shared between rows (ratios): medians in seconds, the measured rates.
std::map<std::string, double>& results() {
  static std::map<std::string, double> r;
  return r;
}
g::copy_rates& measured_rates() {
  static g::copy_rates r;  // the H200 defaults until copy_rates has run
  return r;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

void poison(float* c, std::size_t count) {
  fill(c, count, [](std::uint64_t) { return std::nanf(""); });
}

/// 64 sampled entries of C = A·B (A row-major n x n, B column-major) against double sums; the
/// bound 1.25((k + 2)ε + 2u_op)S + 16εS with ε = 2^-23, u_op = 2^-10 for TF32, S = Σ|a·b|.
template <class T>
std::string check_sample(const T* a, const T* b, const float* c, index_t n, bool tf32, double& worst,
                         bool b_row_major = false) {
  const double eps = std::ldexp(1.0, -23), uop = tf32 ? std::ldexp(1.0, -10) : 0.0;
  // FP8 on the tensor cores, promoted every 128 products: 128-long runs at 2^-12 per addition, FP32
  // beyond (docs/gemm.md, "Accuracy").
  constexpr bool fp8 = std::is_same_v<T, __nv_fp8_e4m3>;
  const double runs = fp8 ? 130 * std::ldexp(1.0, -12) + (static_cast<double>(n) / 128 + 2) * eps
                          : (static_cast<double>(n) + 2) * eps;
  worst = 0;
  for (int t = 0; t < 64; ++t) {
    const auto i = static_cast<index_t>((static_cast<std::uint64_t>(t) * 2654435761u + 17) %
                                        static_cast<std::uint64_t>(n));
    const auto j = t == 0 ? n - 1
                          : static_cast<index_t>((static_cast<std::uint64_t>(t) * 40503u + 5) %
                                                 static_cast<std::uint64_t>(n));
    double s = 0, sabs = 0;
    for (index_t x = 0; x < n; ++x) {
      const double p = static_cast<double>(g::detail::load_output<float>(a[i * n + x])) *
                       static_cast<double>(g::detail::load_output<float>(b_row_major ? b[x * n + j] : b[j * n + x]));
      s += p;
      sabs += std::fabs(p);
    }
    const double got = c[i * n + j];
    const double err = std::fabs(got - s);
    const double bound = 1.25 * (runs + 2 * uop) * sabs + 16 * eps * sabs;
    worst = std::max(worst, err / bound);
    if (!(err <= bound)) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "C(%ld,%ld) = %.9g, want %.9g (|err| %.3g > bound %.3g)",
                    static_cast<long>(i), static_cast<long>(j), got, s, err, bound);
      return buf;
    }
  }
  return {};
}

double flops() {
  return 2.0 * static_cast<double>(g_n) * static_cast<double>(g_n) * static_cast<double>(g_n);
}

// ---- copy rates ------------------------------------------------------------------------------

void bm_copy_rates(benchmark::State& state) {
  if (spillway::bench::skip_without_gpu(state)) return;
  try {
    const std::size_t bytes = std::size_t{1} << 30;
    spillway::pinned_buffer<unsigned char> h1(bytes), h2(bytes);
    std::memset(h1.data(), 1, bytes);
    spillway::stream s1, s2;
    spillway::device_buffer<unsigned char> d1(bytes, s1.view()), d2(bytes, s1.view());
    s1.synchronize();
    std::vector<double> up, down, both;
    auto timed = [](auto&& f) {
      const auto t0 = std::chrono::steady_clock::now();
      f();
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    // C blocks as the job copies them out: 2048 x 2048 floats from a device block into a host
    // matrix of pitch 32768 floats (h2 seen as 8192 x 32768 floats: 64 blocks), 4 streams.
    const std::size_t side = 2048, pitch = 32768 * sizeof(float), line = side * sizeof(float);
    spillway::stream s3, s4, s5;
    const cudaStream_t ring[4] = {s2.value(), s3.value(), s4.value(), s5.value()};
    auto blocks_out = [&] {
      for (std::size_t bi = 0; bi < 64; ++bi) {
        unsigned char* dst = h2.data() + (bi / 16) * side * pitch + (bi % 16) * line;
        SPILLWAY_CUDA_TRY(cudaMemcpy2DAsync(dst, pitch, d2.data() + (bi % 16) * side * line, line, line, side,
                                            cudaMemcpyDeviceToHost, ring[bi % 4]));
      }
    };
    auto sync_all = [&] {
      s1.synchronize();
      s2.synchronize();
      s3.synchronize();
      s4.synchronize();
      s5.synchronize();
    };
    std::vector<double> down2d, both2d;
    for (auto _ : state) {
      down2d.push_back(timed([&] {
        blocks_out();
        sync_all();
      }));
      both2d.push_back(timed([&] {
        SPILLWAY_CUDA_TRY(cudaMemcpyAsync(d1.data(), h1.data(), bytes, cudaMemcpyHostToDevice, s1.value()));
        blocks_out();
        sync_all();
      }));
      up.push_back(timed([&] {
        SPILLWAY_CUDA_TRY(cudaMemcpyAsync(d1.data(), h1.data(), bytes, cudaMemcpyHostToDevice, s1.value()));
        s1.synchronize();
      }));
      down.push_back(timed([&] {
        SPILLWAY_CUDA_TRY(cudaMemcpyAsync(h2.data(), d2.data(), bytes, cudaMemcpyDeviceToHost, s2.value()));
        s2.synchronize();
      }));
      both.push_back(timed([&] {
        SPILLWAY_CUDA_TRY(cudaMemcpyAsync(d1.data(), h1.data(), bytes, cudaMemcpyHostToDevice, s1.value()));
        SPILLWAY_CUDA_TRY(cudaMemcpyAsync(h2.data(), d2.data(), bytes, cudaMemcpyDeviceToHost, s2.value()));
        s1.synchronize();
        s2.synchronize();
      }));
      state.SetIterationTime(up.back() + down.back() + both.back());
    }
    g::copy_rates& r = measured_rates();
    r.h2d = static_cast<double>(bytes) / median(up);
    r.d2h = static_cast<double>(bytes) / median(down);
    r.both = 2.0 * static_cast<double>(bytes) / median(both);
    state.counters["h2d_GB/s"] = r.h2d / 1e9;
    state.counters["d2h_GB/s"] = r.d2h / 1e9;
    state.counters["both_GB/s"] = r.both / 1e9;
    const double out2d = 64.0 * static_cast<double>(side * line);
    state.counters["d2h_2d_GB/s"] = out2d / median(down2d) / 1e9;
    state.counters["both_2d_GB/s"] = (out2d + static_cast<double>(bytes)) / median(both2d) / 1e9;
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// ---- C-block copies out by line length, alone and beside a GEMM --------------------------------

/// Device→host copies shaped as the job's C blocks (2048 rows of W floats, 2-D into a host matrix of
/// 32768-float pitch; or 1-D, 16 MiB whole), 1 GiB in all, round-robin on 4 streams; alone, and
/// while bf16 GEMMs (8192³, in core) run on another stream, as in the out-of-core job. Counters:
/// GB/s of each shape alone (`w2048`, `w4096`, `w8192`, `w16384`, `flat`) and `*_gemm` beside the GEMMs.
void bm_copy_lines(benchmark::State& state) {
  if (spillway::bench::skip_without_gpu(state)) return;
  try {
    const std::size_t bytes = std::size_t{1} << 30;
    spillway::pinned_buffer<unsigned char> h(bytes);
    std::memset(h.data(), 0, bytes);
    spillway::stream s0, s1, s2, s3, sg;
    const cudaStream_t ring[4] = {s0.value(), s1.value(), s2.value(), s3.value()};
    spillway::device_buffer<unsigned char> d(bytes, s0.view());
    const index_t gn = 8192;
    const auto gc = static_cast<std::size_t>(gn) * static_cast<std::size_t>(gn);
    spillway::device_buffer<__nv_bfloat16> ga(gc, sg.view()), gb(gc, sg.view());
    spillway::device_buffer<float> gcm(gc, sg.view());
    ga.fill_bytes_async(0x3c, sg.view());
    gb.fill_bytes_async(0x3c, sg.view());
    s0.synchronize();
    sg.synchronize();
    const std::size_t pitch = 32768 * sizeof(float), rows = 2048;
    auto copies = [&](std::size_t width) {  // width 0: 1-D blocks of 16 MiB
      const std::size_t line = width * sizeof(float);
      const std::size_t per = width == 0 ? (std::size_t{16} << 20) : rows * line;
      const std::size_t count = bytes / per, across = width == 0 ? 1 : 32768 / width;
      for (std::size_t bi = 0; bi < count; ++bi) {
        if (width == 0) {
          SPILLWAY_CUDA_TRY(cudaMemcpyAsync(h.data() + bi * per, d.data() + bi * per, per,
                                            cudaMemcpyDeviceToHost, ring[bi % 4]));
        } else {
          unsigned char* dst = h.data() + (bi / across) * rows * pitch + (bi % across) * line;
          SPILLWAY_CUDA_TRY(cudaMemcpy2DAsync(dst, pitch, d.data() + bi * per, line, line, rows,
                                              cudaMemcpyDeviceToHost, ring[bi % 4]));
        }
      }
    };
    auto sync_ring = [&] {
      s0.synchronize();
      s1.synchronize();
      s2.synchronize();
      s3.synchronize();
    };
    auto gemms = [&](int count) {
      for (int x = 0; x < count; ++x)
        g::gemm_async(sg.view(), 1.0f, g::row_major<const __nv_bfloat16>(ga.data(), gn, gn),
                      g::col_major<const __nv_bfloat16>(gb.data(), gn, gn), 0.0f,
                      g::row_major(gcm.data(), gn, gn));
    };
    const std::size_t widths[] = {2048, 4096, 8192, 16384, 0};
    std::map<std::string, std::vector<double>> rate;
    const int n_gemm = 40;  // ~50 ms of GEMMs: the copies run while they do
    auto gemm_ms = [&](const std::function<void()>& beside) {
      spillway::event e0(spillway::event::timing::enabled), e1(spillway::event::timing::enabled);
      e0.record(sg.view());
      gemms(n_gemm);
      e1.record(sg.view());
      beside();
      sg.synchronize();
      float ms = 0;
      SPILLWAY_CUDA_TRY(cudaEventElapsedTime(&ms, e0.value(), e1.value()));
      return static_cast<double>(ms);
    };
    for (auto _ : state) {
      double total = 0;
      // The GEMMs' own time alone, and below with each shape of copies beside them (does a copy
      // out slow or stall the GEMMs, as the job's trace suggested?).
      rate["gemm_ms"].push_back(gemm_ms([] {}));
      for (const std::size_t w : widths) {
        const std::string name = w == 0 ? "flat" : "w" + std::to_string(w);
        for (const bool beside : {false, true}) {
          double sec = 0;
          auto run_copies = [&] {
            if (beside) std::this_thread::sleep_for(std::chrono::milliseconds(2));
            const auto t0 = std::chrono::steady_clock::now();
            copies(w);
            sync_ring();
            sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          };
          if (beside) {
            rate[name + "_gemm_ms"].push_back(gemm_ms(run_copies));
          } else {
            run_copies();
          }
          total += sec;
          rate[name + (beside ? "_gemm" : "")].push_back(static_cast<double>(bytes) / sec / 1e9);
        }
      }
      state.SetIterationTime(total);
    }
    for (const auto& [k, v] : rate) state.counters[k] = median(v);
    // The plans of the rows below price C blocks' short-line copies out at this rate.
    measured_rates().d2h_short = median(rate["w2048_gemm"]) * 1e9;
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// ---- staged C blocks: host threads copying them into C, alone and beside the DMA --------------

/// What ooc_copy_out::staged asks of the host: 2048 x 2048-float blocks, whole in a pinned buffer,
/// copied into a pinned host matrix of 32768-float pitch (8 KiB lines) by N threads of the
/// pipeline's pool, with plain memcpy or non-temporal stores; 512 MiB (32 blocks) per measurement,
/// alone and while 3 GiB go host→device and 3 GiB device→host (1-D) on two streams, as in the job.
/// Counters: `tN` / `tN_nt` GB/s alone, `tN_dma` / `tN_nt_dma` beside the DMA, and `dma_tN_nt`
/// the two copies' combined GB/s while the host copied (does the host copy slow the link?),
/// `dma_alone` without it. `staged_tN_h2d`: the job's pattern before 3a2187a (each block 1-D out
/// into one of 8 pinned buffers, then into C split over N pool threads with non-temporal stores,
/// beside a host→device stream; `h2d_staged_tN` that stream's GB/s), GB/s of C. The job now writes
/// each block in pieces on threads of its own (detail::ooc_scatter_pieces; measured in
/// results/gemm_ooc.md, "scatter threads").
void bm_scatter(benchmark::State& state) {
  if (spillway::bench::skip_without_gpu(state)) return;
  try {
    const std::size_t side = 2048, line = side * sizeof(float), pitch = 32768 * sizeof(float);
    const std::size_t block = side * line, nblocks = 32, span = std::size_t{512} << 20;
    spillway::pinned_buffer<unsigned char> src(nblocks * block), dst(side * pitch * 2);
    std::memset(src.data(), 1, src.size());
    std::memset(dst.data(), 0, dst.size());
    const std::size_t dma = std::size_t{1} << 30;
    spillway::pinned_buffer<unsigned char> h1(dma), h2(dma);
    std::memset(h1.data(), 1, dma);
    std::memset(h2.data(), 0, dma);
    spillway::stream su, sd;
    spillway::device_buffer<unsigned char> d1(dma, su.view()), d2(dma, su.view());
    su.synchronize();
    auto scatter = [&](std::size_t threads, bool nt) {
      for (std::size_t bi = 0; bi < nblocks; ++bi) {
        // 16 blocks side by side make a 2048-row band of the destination (256 MiB); two bands.
        unsigned char* d = dst.data() + ((bi / 16) % 2) * side * pitch + (bi % 16) * line;
        g::detail::ooc_copy_lines(d, pitch, src.data() + bi * block, line, line, side, threads, nt,
                                  std::size_t{512} << 10);
      }
    };
    const int reps = 3;
    auto start_dma = [&](spillway::event& e0, spillway::event& e1, spillway::event& e2, bool out = true) {
      e0.record(su.view());
      sd.view().wait(e0);
      for (int r = 0; r < reps; ++r) {
        SPILLWAY_CUDA_TRY(cudaMemcpyAsync(d1.data(), h1.data(), dma, cudaMemcpyHostToDevice, su.value()));
        if (out)
          SPILLWAY_CUDA_TRY(cudaMemcpyAsync(h2.data(), d2.data(), dma, cudaMemcpyDeviceToHost, sd.value()));
      }
      e1.record(su.view());
      e2.record(sd.view());
    };
    auto dma_gbs = [&](spillway::event& e0, spillway::event& e1, spillway::event& e2, bool out = true) {
      su.synchronize();
      sd.synchronize();
      float a = 0, b = 0;
      SPILLWAY_CUDA_TRY(cudaEventElapsedTime(&a, e0.value(), e1.value()));
      SPILLWAY_CUDA_TRY(cudaEventElapsedTime(&b, e0.value(), e2.value()));
      return (out ? 2.0 : 1.0) * reps * static_cast<double>(dma) / (std::max(a, b) * 1e-3) / 1e9;
    };
    const std::size_t threads[] = {1, 2, 4, 8, 15};
    std::map<std::string, std::vector<double>> rate;
    for (auto _ : state) {
      double total = 0;
      {
        spillway::event e0(spillway::event::timing::enabled), e1(spillway::event::timing::enabled),
            e2(spillway::event::timing::enabled);
        start_dma(e0, e1, e2);
        rate["dma_alone"].push_back(dma_gbs(e0, e1, e2));
      }
      for (const std::size_t t : threads) {
        for (const bool nt : {false, true}) {
          for (const bool beside : {false, true}) {
            spillway::event e0(spillway::event::timing::enabled), e1(spillway::event::timing::enabled),
                e2(spillway::event::timing::enabled);
            if (beside) {
              start_dma(e0, e1, e2);
              std::this_thread::sleep_for(std::chrono::milliseconds(1));
            }
            const auto t0 = std::chrono::steady_clock::now();
            scatter(t, nt);
            const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            total += sec;
            const std::string name = "t" + std::to_string(t) + (nt ? "_nt" : "");
            rate[name + (beside ? "_dma" : "")].push_back(static_cast<double>(span) / sec / 1e9);
            if (beside) rate["dma_" + name].push_back(dma_gbs(e0, e1, e2));
          }
        }
      }
      // The job's pattern before 3a2187a: each block 1-D out of the device into one of 8 pinned
      // buffers, then into C by the threads as soon as it has landed (while the DMA writes the next
      // ones), beside a host→device stream only (a second device→host stream would take the copies
      // out's engine): the rate at which staged C blocks reached C that way.
      for (const std::size_t t : {std::size_t{8}, std::size_t{12}, std::size_t{15}}) {
        spillway::event e0(spillway::event::timing::enabled), e1(spillway::event::timing::enabled),
            e2(spillway::event::timing::enabled);
        start_dma(e0, e1, e2, false);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        const std::size_t ring = 8, count = 64;  // 1 GiB out of d2, 16 MiB a block
        spillway::stream so;
        std::vector<spillway::event> landed(ring);
        auto out = [&](std::size_t bi) {
          SPILLWAY_CUDA_TRY(cudaMemcpyAsync(src.data() + (bi % ring) * block, d2.data() + bi * block, block,
                                            cudaMemcpyDeviceToHost, so.value()));
          landed[bi % ring].record(so.view());
        };
        const auto t0 = std::chrono::steady_clock::now();
        for (std::size_t bi = 0; bi < ring; ++bi) out(bi);
        for (std::size_t bi = 0; bi < count; ++bi) {
          landed[bi % ring].synchronize();
          unsigned char* d = dst.data() + ((bi / 16) % 2) * side * pitch + (bi % 16) * line;
          g::detail::ooc_copy_lines(d, pitch, src.data() + (bi % ring) * block, line, line, side, t, true,
                                    std::size_t{512} << 10);
          if (bi + ring < count) out(bi + ring);
        }
        const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        total += sec;
        rate["staged_t" + std::to_string(t) + "_h2d"].push_back(static_cast<double>(count * block) / sec /
                                                                1e9);
        rate["h2d_staged_t" + std::to_string(t)].push_back(dma_gbs(e0, e1, e2, false));
      }
      state.SetIterationTime(total);
    }
    for (const auto& [k, v] : rate) state.counters[k] = median(v);
    // Not passed to the plans (copy_rates::scatter stays 0): the job's host copies keep up with a
    // block every 0.4 ms (>= 42 GB/s; their source is fresh from the DMA), above this measurement
    // (34-43 GB/s with 12 threads, from run to run); priced at it, the staged plan's bound came out
    // 5-10% above the measured job and the automatic choice fell back to direct copies that
    // measured 8-10% slower (benchmarks/results/gemm_ooc.md, ooc2).
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// ---- cublasXt ----------------------------------------------------------------------------------

void bm_cublasxt(benchmark::State& state) {
  if (spillway::bench::skip_without_gpu(state)) return;
  cublasXtHandle_t xt = nullptr;
  try {
    host_set& h = host();
    const int n = static_cast<int>(g_n);
    OOC_BENCH_CUBLAS(cublasXtCreate(&xt));
    int dev[1] = {0};
    OOC_BENCH_CUBLAS(cublasXtDeviceSelect(xt, 1, dev));
    OOC_BENCH_CUBLAS(cublasXtSetBlockDim(xt, 8192));
    const float one = 1.0f, zero = 0.0f;
    // Column-major Cᵀ (n x n, ld n) = op_T(B's buffer: k x n, ld k) · op_N(A's buffer: k x m, ld k).
    const auto [ha, hb] = h.operands<float>();
    auto run = [&, ha = ha, hb = hb] {
      OOC_BENCH_CUBLAS(
          cublasXtSgemm(xt, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, hb, n, ha, n, &zero, h.c.data(), n));
    };
    poison(h.c.data(), h.c.size());
    run();
    double worst = 0;
    const std::string bad = check_sample(ha, hb, h.c.data(), g_n, false, worst);
    if (!bad.empty()) throw std::runtime_error("cublasXt check: " + bad);
    std::vector<double> secs;
    for (auto _ : state) {
      const auto t0 = std::chrono::steady_clock::now();
      run();
      secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      state.SetIterationTime(secs.back());
    }
    const double med = median(secs);
    results()["float/cublasXt"] = med;
    state.counters["seconds"] = med;
    state.counters["TFLOP/s"] = flops() / med / 1e12;
    char lab[96];
    std::snprintf(lab, sizeof lab, "block 8192, pinned; check: 64 entries, worst err/bound %.2g", worst);
    state.SetLabel(lab);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  if (xt != nullptr) cublasXtDestroy(xt);
}

// ---- spillway in core and out of core -----------------------------------------------------------

enum class kind { f32, tf32, bf16, e4m3 };
const char* kind_name(kind k) {
  return k == kind::f32 ? "float" : k == kind::tf32 ? "tf32" : k == kind::bf16 ? "bf16" : "e4m3";
}

g::gemm_options options_for(kind k) {
  g::gemm_options o;
  if (k == kind::tf32) o.math = g::math_mode::tf32;
  return o;
}

template <class T>
void in_core(benchmark::State& state, kind kd, const T* ha, const T* hb) {
  host_set& h = host();
  const index_t n = g_n;
  const auto count = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
  spillway::stream s;
  spillway::device_buffer<T> da(count, s.view()), db(count, s.view());
  spillway::device_buffer<float> dc(count, s.view());
  da.copy_from_host_async(cuda::std::span<const T>(ha, count), s.view());
  db.copy_from_host_async(cuda::std::span<const T>(hb, count), s.view());
  dc.fill_bytes_async(0xFF, s.view());
  const g::gemm_options o = options_for(kd);
  auto work = [&](spillway::stream_view st) {
    g::gemm_async(st, 1.0f, g::row_major<const T>(da.data(), n, n), g::col_major<const T>(db.data(), n, n),
                  0.0f, g::row_major(dc.data(), n, n), o);
  };
  work(s.view());
  dc.copy_to_host_async(cuda::std::span<float>(h.c.data(), count), s.view());
  s.synchronize();
  double worst = 0;
  const std::string bad = check_sample(ha, hb, h.c.data(), n, kd == kind::tf32, worst);
  if (!bad.empty()) throw std::runtime_error(std::string(kind_name(kd)) + " in-core check: " + bad);
  const std::vector<double> ms = spillway::bench::run_timed(state, s.view(), work);
  const double med = median(ms) * 1e-3;
  results()[std::string(kind_name(kd)) + "/in_core"] = med;
  state.counters["seconds"] = med;
  state.counters["TFLOP/s"] = flops() / med / 1e12;
  char lab[96];
  std::snprintf(lab, sizeof lab, "path %s; check: 64 entries, worst err/bound %.2g",
                g::to_string(g::resolve_path<T>(o, 0)), worst);
  state.SetLabel(lab);
}

/// Summary counters of a traced run (see the file comment) and, with --ooc_trace_dir, its CSV.
void report_trace(benchmark::State& state, const g::ooc_trace& tr, const g::ooc_plan& plan,
                  const std::string& name) {
  const std::size_t nb = tr.ready_ms.size();
  if (nb == 0) return;
  double in = 0;
  for (float v : tr.load_end_ms) in = std::max(in, static_cast<double>(v));
  // GEMM intervals [ready, end] in order of readiness; their union is the time the GPU had a GEMM.
  std::vector<std::pair<double, double>> iv;
  double last_gemm = 0, last_out = 0, lag = 0;
  for (std::size_t x = 0; x < nb; ++x) {
    if (!(tr.ready_ms[x] == tr.ready_ms[x])) continue;
    iv.emplace_back(tr.ready_ms[x], tr.gemm_end_ms[x]);
    last_gemm = std::max(last_gemm, static_cast<double>(tr.gemm_end_ms[x]));
    last_out = std::max(last_out, static_cast<double>(tr.out_end_ms[x]));
    lag = std::max(lag, static_cast<double>(tr.out_end_ms[x] - tr.gemm_end_ms[x]));
  }
  std::sort(iv.begin(), iv.end());
  double busy = 0, idle_in = 0, idle_after = 0, reach = 0;
  for (const auto& [a, b] : iv) {
    if (a > reach) {
      // The gap [reach, a]: split at the moment the last panel arrived.
      idle_in += std::max(0.0, std::min(a, in) - reach);
      idle_after += std::max(0.0, a - std::max(reach, in));
    }
    if (b > reach) {
      busy += b - std::max(a, reach);
      reach = b;
    }
  }
  state.counters["tr_setup"] = tr.setup_seconds * 1e3;
  state.counters["tr_first_ready"] = iv.empty() ? 0.0 : iv.front().first;
  state.counters["tr_in"] = in;
  state.counters["tr_gemm"] = last_gemm;
  state.counters["tr_out"] = last_out;
  state.counters["tr_busy"] = busy;
  state.counters["tr_idle_in"] = idle_in;
  state.counters["tr_idle_after"] = idle_after;
  state.counters["tr_lag_max"] = lag;
  if (g_trace_dir.empty()) return;
  const std::string path = g_trace_dir + "/" + name + ".csv";
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return;
  std::fprintf(f, "kind,index,i,j,device,bytes,ready_ms,gemm_end_ms,out_end_ms\n");
  for (std::size_t x = 0; x < tr.load_end_ms.size(); ++x)
    std::fprintf(f, "load,%zu,,,%d,%zu,,%.4f,\n", x, tr.load_device[x], tr.load_bytes[x],
                 static_cast<double>(tr.load_end_ms[x]));
  for (std::size_t x = 0; x < nb; ++x)
    std::fprintf(f, "block,%zu,%ld,%ld,%d,,%.4f,%.4f,%.4f\n", x, static_cast<long>(plan.order[x].i),
                 static_cast<long>(plan.order[x].j), tr.block_device[x], static_cast<double>(tr.ready_ms[x]),
                 static_cast<double>(tr.gemm_end_ms[x]), static_cast<double>(tr.out_end_ms[x]));
  std::fclose(f);
}

/// One out-of-core row's options beyond the defaults (0 / false: the default) and its name.
struct variant {
  std::string name = "out_of_core";
  std::size_t slots = 0;
  bool staged = false;
  std::size_t line = g_line;
  std::size_t threads = 0;  // ooc_options::scatter_threads
  bool plain_copy = false;  // scatter_streaming = false
  bool direct = false;      // c_out = direct (2-D DMA straight into C)
  bool b_row_major = false;  // B's buffer read as row-major (NumPy's layout; a different product, same cost)
  // The plan told the in-core time measured in this run (ooc_options::compute_seconds) and the
  // copy rates measured by gemm_ooc/copy_rates, instead of what a caller gets without them: its
  // estimate of the compute time from the device and the H200's default rates.
  bool given = false;
  // A, B and C copied into ordinary (pageable) memory for the row, with ooc_options::lock = `lock`:
  // what a caller with std::vector matrices gets (page-locked for the call by the job's rule, or
  // staged through pinned buffers with page_lock::never).
  bool pageable = false;
  spillway::page_lock lock = spillway::page_lock::automatic;
};

/// A pageable copy of `count` elements (page-faulted in by the copy, as a caller's vectors are).
template <class T>
std::unique_ptr<T[]> pageable_copy(const T* src, std::size_t count) {
  std::unique_ptr<T[]> p(new T[count]);
  std::memcpy(static_cast<void*>(p.get()), src, count * sizeof(T));
  return p;
}

template <class T>
void out_of_core(benchmark::State& state, kind kd, const T* ha, const T* hb, std::vector<int> devices,
                 const variant& v) {
  host_set& h = host();
  const index_t n = g_n;
  const auto count = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
  g::ooc_options oo;
  oo.budget = spillway::memory_budget(g_budget);
  oo.devices = devices;
  if (v.given) oo.rates = measured_rates();
  if (v.slots > 0) oo.slots_per_device = v.slots;
  if (v.staged) oo.c_out = g::ooc_copy_out::staged;
  if (v.direct) oo.c_out = g::ooc_copy_out::direct;
  oo.c_min_line_bytes = v.line;
  if (v.threads > 0) oo.scatter_threads = v.threads;
  if (v.plain_copy) oo.scatter_streaming = false;
  const auto ic0 = results().find(std::string(kind_name(kd)) + "/in_core");
  if (v.given && ic0 != results().end()) oo.compute_seconds = ic0->second;
  oo.lock = v.lock;
  const g::gemm_options o = options_for(kd);
  g::ooc_report rep;
  std::unique_ptr<T[]> pa, pb;
  std::unique_ptr<float[]> pc;
  float* hc = h.c.data();
  if (v.pageable) {
    pa = pageable_copy(ha, count);
    pb = pageable_copy(hb, count);
    pc.reset(new float[count]);  // poisoned below
    ha = pa.get();
    hb = pb.get();
    hc = pc.get();
  }
  const g::matrix_view<const T> bv =
      v.b_row_major ? g::row_major<const T>(hb, n, n) : g::col_major<const T>(hb, n, n);
  auto job = [&](const g::ooc_options& opts) {
    return g::gemm_out_of_core(1.0f, g::row_major<const T>(ha, n, n), bv, 0.0f, g::row_major(hc, n, n), o, opts);
  };
  auto run = [&] { rep = job(oo); };
  poison(hc, count);
  run();
  if (!v.pageable && (!rep.a_page_locked || !rep.c_page_locked))
    throw std::runtime_error("host matrices not detected as pinned");
  if (v.pageable && spillway::is_page_locked(hb))
    throw std::runtime_error("the pageable B is still page-locked after the call");
  state.counters["registered_abc"] =
      (rep.a_registered ? 100 : 0) + (rep.b_registered ? 10 : 0) + (rep.c_registered ? 1 : 0);
  double worst = 0;
  const std::string bad = check_sample(ha, hb, hc, n, kd == kind::tf32, worst, v.b_row_major);
  if (!bad.empty()) throw std::runtime_error(std::string(kind_name(kd)) + " out-of-core check: " + bad);
  std::vector<double> secs;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();  // a synchronous job: host to host
    run();
    secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    state.SetIterationTime(secs.back());
  }
  const double med = median(secs);
  const std::string key = std::string(kind_name(kd)) + "/" + v.name;
  results()[key] = med;
  {
    g::ooc_trace tr;
    g::ooc_options traced = oo;
    traced.trace = &tr;
    const g::ooc_report tr_rep = job(traced);
    std::string file = key;
    std::replace(file.begin(), file.end(), '/', '_');
    report_trace(state, tr, tr_rep.plan, file);
  }
  // The independent floor at the rates measured in this run (the plan's own is at its rates).
  const double floor = measured_rates().seconds(static_cast<double>(rep.plan.min_h2d_bytes),
                                                static_cast<double>(rep.plan.min_d2h_bytes));
  state.counters["seconds"] = med;
  state.counters["compute_ms"] = rep.compute_seconds * 1e3;
  state.counters["TFLOP/s"] = flops() / med / 1e12;
  state.counters["floor_ms"] = floor * 1e3;
  state.counters["plan_h2d_GB"] = static_cast<double>(rep.plan.h2d_bytes) / 1e9;
  state.counters["plan_d2h_GB"] = static_cast<double>(rep.plan.d2h_bytes) / 1e9;
  state.counters["moved_GB"] = static_cast<double>(rep.job.bytes_moved) / 1e9;
  if (rep.plan.ramp_seconds > 0) {
    state.counters["ramp_ms"] = rep.plan.ramp_seconds * 1e3;
    state.counters["vs_ramp"] = med / rep.plan.ramp_seconds;
  }
  const auto ic = results().find(std::string(kind_name(kd)) + "/in_core");
  if (ic != results().end()) {
    state.counters["vs_in_core"] = med / ic->second;
    state.counters["compute_vs_in_core"] = rep.compute_seconds / ic->second;
    state.counters["vs_bound"] = med / std::max(floor, ic->second);
  }
  if (kd == kind::f32) {
    const auto xt = results().find("float/cublasXt");
    if (xt != results().end()) state.counters["vs_cublasXt"] = xt->second / med;
    const auto one = results().find("float/out_of_core");
    if (devices.size() > 1 && one != results().end()) state.counters["speedup_vs_1gpu"] = one->second / med;
  }
  spillway::bench::split_counters(state, rep.job, "blocks");
  state.SetLabel(rep.plan.describe() + "; check: 64 entries, worst err/bound " + std::to_string(worst));
}

void bm_in_core(benchmark::State& state, kind kd) {
  if (spillway::bench::skip_without_gpu(state)) return;
  try {
    host_set& h = host();
    if (kd == kind::bf16) {
      const auto [a, b] = h.operands<__nv_bfloat16>();
      in_core<__nv_bfloat16>(state, kd, a, b);
    } else if (kd == kind::e4m3) {
      const auto [a, b] = h.operands<__nv_fp8_e4m3>();
      in_core<__nv_fp8_e4m3>(state, kd, a, b);
    } else {
      const auto [a, b] = h.operands<float>();
      in_core<float>(state, kd, a, b);
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void bm_out_of_core(benchmark::State& state, kind kd, int gpus, const variant& v = {}) {
  if (spillway::bench::skip_without_gpus(state, gpus)) return;
  try {
    host_set& h = host();
    const std::vector<int> devices = spillway::bench::first_devices(gpus);
    if (kd == kind::bf16) {
      const auto [a, b] = h.operands<__nv_bfloat16>();
      out_of_core<__nv_bfloat16>(state, kd, a, b, devices, v);
    } else if (kd == kind::e4m3) {
      const auto [a, b] = h.operands<__nv_fp8_e4m3>();
      out_of_core<__nv_fp8_e4m3>(state, kd, a, b, devices, v);
    } else {
      const auto [a, b] = h.operands<float>();
      out_of_core<float>(state, kd, a, b, devices, v);
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void register_rows() {
  benchmark::RegisterBenchmark("gemm_ooc/copy_rates", bm_copy_rates)
      ->UseManualTime()
      ->Iterations(5)
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("gemm_ooc/copy_lines", bm_copy_lines)
      ->UseManualTime()
      ->Iterations(3)
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("gemm_ooc/scatter", bm_scatter)
      ->UseManualTime()
      ->Iterations(3)
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("gemm_ooc/float/cublasXt", bm_cublasxt)
      ->UseManualTime()
      ->Iterations(3)
      ->Unit(benchmark::kMillisecond);
  const int reps_float = 3, reps_fast = 5;
  for (kind kd : {kind::f32, kind::tf32, kind::bf16, kind::e4m3}) {
    const std::string base = std::string("gemm_ooc/") + kind_name(kd);
    const int reps = kd == kind::f32 ? reps_float : reps_fast;
    benchmark::RegisterBenchmark((base + "/in_core").c_str(),
                                 [kd](benchmark::State& st) { bm_in_core(st, kd); })
        ->UseManualTime()
        ->Iterations(reps)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((base + "/out_of_core").c_str(),
                                 [kd](benchmark::State& st) { bm_out_of_core(st, kd, 1); })
        ->UseManualTime()
        ->Iterations(reps)
        ->Unit(benchmark::kMillisecond);
    if (kd == kind::e4m3) continue;  // FP8: the default rows (the acceptance job: --ooc_n=65536)
    std::vector<variant> vs;
    auto staged = [](std::string name, std::size_t slots, std::size_t threads = 0, bool plain = false) {
      variant v;
      v.name = std::move(name);
      v.slots = slots;
      v.staged = true;
      v.threads = threads;
      v.plain_copy = plain;
      return v;
    };
    variant direct;
    direct.name = "out_of_core_direct";
    direct.direct = true;
    variant given;
    given.name = "out_of_core_given_time";
    given.given = true;
    if (kd != kind::f32) vs.push_back(given);
    if (kd != kind::tf32) {
      // Matrices in ordinary memory: page-locked for the call by the default rule, and staged.
      variant pg;
      pg.name = "out_of_core_pageable";
      pg.pageable = true;
      vs.push_back(pg);
      pg.name = "out_of_core_pageable_staged";
      pg.lock = spillway::page_lock::never;
      vs.push_back(pg);
      if (kd == kind::bf16) {  // NumPy's layout for B: the rule page-locks A, B and C
        pg.b_row_major = true;
        pg.name = "out_of_core_b_row_major_pageable";
        pg.lock = spillway::page_lock::automatic;
        vs.push_back(pg);
        pg.name = "out_of_core_b_row_major_pageable_staged";
        pg.lock = spillway::page_lock::never;
        vs.push_back(pg);
      }
    }
    if (kd == kind::bf16) {
      // NumPy's layout for B (row-major): the plan holds B whole, in pieces of whole rows.
      variant rm;
      rm.name = "out_of_core_b_row_major";
      rm.b_row_major = true;
      vs.push_back(rm);
      vs.push_back(direct);
      vs.push_back(staged("out_of_core_staged_slots8", 8));
      vs.push_back(staged("out_of_core_staged_slots8_t8", 8, 8));
      vs.push_back(staged("out_of_core_staged_slots6", 6));
    } else if (kd == kind::tf32) {
      vs.push_back(direct);
      vs.push_back(staged("out_of_core_staged_slots8", 8));
    }
    // Single-panel C blocks copied out by 2-D DMA (the plan of the sessions before), beside the
    // default row (automatic: staged or direct copies out, wider C blocks, by the order's bound).
    if (kd != kind::f32 && g_line != 1) {
      variant nw;
      nw.name = "out_of_core_narrow";
      nw.line = 1;
      nw.direct = true;
      vs.push_back(nw);
    }
    for (const variant& v : vs) {
      benchmark::RegisterBenchmark((base + "/" + v.name).c_str(),
                                   [kd, v](benchmark::State& st) { bm_out_of_core(st, kd, 1, v); })
          ->UseManualTime()
          ->Iterations(reps)
          ->Unit(benchmark::kMillisecond);
    }
    if (kd == kind::f32) {
      benchmark::RegisterBenchmark((base + "/out_of_core_2gpu").c_str(),
                                   [kd](benchmark::State& st) {
                                     variant v;
                                     v.name = "out_of_core_2gpu";
                                     bm_out_of_core(st, kd, 2, v);
                                   })
          ->UseManualTime()
          ->Iterations(reps)
          ->Unit(benchmark::kMillisecond);
    }
  }
}

/// Takes --ooc_n=N and --ooc_budget=SIZE out of argv (Google Benchmark refuses flags it does not
/// know); SPILLWAY_OOC_N / SPILLWAY_OOC_BUDGET are read first.
void parse_own_flags(int& argc, char** argv) {
  if (const char* v = std::getenv("SPILLWAY_OOC_N")) g_n = std::atoll(v);
  if (const char* v = std::getenv("SPILLWAY_OOC_BUDGET")) g_budget = spillway::parse_byte_size(v);
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--ooc_n=", 0) == 0)
      g_n = std::atoll(a.c_str() + 8);
    else if (a.rfind("--ooc_budget=", 0) == 0)
      g_budget = spillway::parse_byte_size(a.substr(13));
    else if (a.rfind("--ooc_trace_dir=", 0) == 0)
      g_trace_dir = a.substr(16);
    else if (a.rfind("--ooc_line=", 0) == 0)
      g_line = spillway::parse_byte_size(a.substr(11));
    else
      argv[out++] = argv[i];
  }
  argc = out;
  if (g_n < 1) throw spillway::logic_error("--ooc_n must be >= 1");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    parse_own_flags(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  register_rows();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  host_slot().reset();  // pinned memory goes while the runtime still exists
  return 0;
}
