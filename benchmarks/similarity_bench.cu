// The fused all-pairs top-k against its bare product (issue 34, part 1): the same n x d bf16
// rows, the same tile schedule, in one process.
//
//   BM_fused_topk/pinned   similarity_topk, top-32 cosine, 8 GiB budget, rows in page-locked host
//                          memory (the acceptance form: host to host, rows uploaded by the job)
//   BM_fused_topk/device   the same from rows already in device memory (no upload)
//   BM_fused_bare          the product the fused job computes, with nothing kept: each seed block's
//                          S x S GEMM (as the job's seeds run it, into a scratch matrix), then every
//                          strip's chunks (fused_topk_shape / for_each_fused_chunk: the job's
//                          strips, chunks and widths) through fragment_sink_gemm_async with a
//                          checksum sink (per warp and tile one shuffle reduction and two
//                          reductions to L2) instead of the top-k filter, and no merges. Checked:
//                          the scores it saw equal the schedule's pair count exactly, and its sum of
//                          scores equals the host's (from block sums of the rows, in double)
//   BM_fused_bare_again    the bare product once more after the top-k rows (a drift check)
//   BM_shape_bf16/spillway:S/m:M/n:N/k:K  C = X[0, M)·X[0, N)ᵀ over K <= 768 columns, bf16 in and
//                          out, compute 32F, by cublasGemmEx (S = 0) or gemm_async (S = 1): the rate
//                          each library reaches
//                          on the job's dimension and the schedule's shapes (a square of 16,384 —
//                          until 2026-12-01 the row BM_cublas_bf16_16384x768 —, a 2,048-row strip
//                          against a 262,144- or 524,288-column chunk; the 262,144 strip at k = 256,
//                          512 and 768)
//
// Rows: 10^6 x 768 (SIMILARITY_BENCH_ROWS to change) standard normal, drawn on the host per
// 8,192-row block from its own seed (seed 20261130). Times: CUDA events around each synchronous
// call after a warm-up call (bench_common.cuh run_timed); counters give the median's TFLOP/s of
// the symmetric half (n^2·d flop) and, for the top-k, the ratio to the bare product measured
// before it in the same process.
#include "bench_common.cuh"

#include <spillway/core.hpp>
#include <spillway/gemm/fragment_sink.cuh>
#include <spillway/similarity/similarity.cuh>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace sim = spillway::similarity;
using bf16 = __nv_bfloat16;

constexpr std::int64_t dim = 768;
constexpr int top_k = 32;
constexpr std::int64_t gen_block = 8192;
constexpr std::uint64_t seed = 20261130;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

std::int64_t bench_rows() {
  const char* v = std::getenv("SIMILARITY_BENCH_ROWS");
  return v != nullptr ? std::max<std::int64_t>(2 * gen_block, std::atoll(v)) : 1000000;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

/// The rows (page-locked host and device copies) and their block sums, made once.
struct rows_set {
  std::int64_t n = 0;
  spillway::pinned_buffer<bf16> host;
  spillway::device_buffer<bf16> dev;
  std::vector<double> block_sums;  // per gen_block-row block: the sum of its rows (dim doubles)
  double bare_ms = 0;              // the bare product's median, once measured

  rows_set() : n(bench_rows()), host(static_cast<std::size_t>(n * dim)) {
    const std::int64_t blocks = (n + gen_block - 1) / gen_block;
    block_sums.assign(static_cast<std::size_t>(blocks * dim), 0.0);
#pragma omp parallel for schedule(dynamic)
    for (std::int64_t b = 0; b < blocks; ++b) {
      std::mt19937_64 g(seed + static_cast<std::uint64_t>(b));
      std::normal_distribution<float> nd;
      double* s = block_sums.data() + b * dim;
      for (std::int64_t r = b * gen_block; r < std::min(n, (b + 1) * gen_block); ++r) {
        for (std::int64_t q = 0; q < dim; ++q) {
          const bf16 x = __float2bfloat16(nd(g));
          host.data()[r * dim + q] = x;
          s[q] += static_cast<double>(__bfloat162float(x));
        }
      }
    }
    dev =
        spillway::device_buffer<bf16>(static_cast<std::size_t>(n * dim), spillway::stream_view::per_thread());
    check(cudaMemcpy(dev.data(), host.data(), static_cast<std::size_t>(n * dim) * sizeof(bf16),
                     cudaMemcpyHostToDevice),
          "rows to the device");
  }
  /// Sum of rows [r0, r1) in double; r0 and r1 multiples of gen_block or n.
  std::vector<double> sum_of(std::int64_t r0, std::int64_t r1) const {
    if (r0 % gen_block != 0 || (r1 % gen_block != 0 && r1 != n))
      throw std::logic_error("sum_of: rows " + std::to_string(r0) + ".." + std::to_string(r1) +
                             " are not on block bounds");
    std::vector<double> s(static_cast<std::size_t>(dim), 0.0);
    for (std::int64_t b = r0 / gen_block; b * gen_block < r1; ++b)
      for (std::int64_t q = 0; q < dim; ++q) s[static_cast<std::size_t>(q)] += block_sums[b * dim + q];
    return s;
  }
};

rows_set& rows() {
  static rows_set r;
  return r;
}

double symmetric_tflops(std::int64_t n, double ms) {
  return static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(dim) / (ms * 1e-3) * 1e-12;
}

/// A fragment sink that keeps nothing: per warp and tile, the sum of its scores and the count of
/// its in-range scores, added to one of `slots` slots (the warp's: uncontended).
struct checksum_sink {
  using fragment_sink_tag = void;
  double* sums = nullptr;
  unsigned long long* counts = nullptr;
  unsigned slots = 1;

  template <class Acc>
  __device__ void consume(const Acc (&d)[128], std::int64_t row0, std::int64_t col0, std::int64_t m,
                          std::int64_t n, std::uint32_t) const {
    float s = 0.0f;
    unsigned c = 0;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          s += static_cast<float>(d[4 * j + 2 * h + e]);
          c += (row0 + 8 * h < m && col0 + 8 * j + e < n) ? 1u : 0u;
        }
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      s += __shfl_xor_sync(0xFFFFFFFFu, s, o);
      c += __shfl_xor_sync(0xFFFFFFFFu, c, o);
    }
    if ((threadIdx.x & 31u) == 0) {
      const unsigned slot = (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) % slots;
      atomicAdd(sums + slot, static_cast<double>(s));
      atomicAdd(counts + slot, static_cast<unsigned long long>(c));
    }
  }
};

__global__ void fold_slots(const double* sums, const unsigned long long* counts, unsigned slots, double* sum,
                           unsigned long long* count) {
  double s = 0;
  unsigned long long c = 0;
  for (unsigned i = threadIdx.x; i < slots; i += blockDim.x) {
    s += sums[i];
    c += counts[i];
  }
  atomicAdd(sum, s);
  atomicAdd(count, c);
}

void bm_fused_bare(benchmark::State& state) {
  if (spillway::bench::skip_without_gpu(state)) return;
  if (!spillway::gemm::has_fragment_sink_gemm(spillway::current_device())) {
    state.SkipWithError("the fused top-k needs a Hopper GPU and an sm_90a build");
    return;
  }
  rows_set& R = rows();
  const std::int64_t n = R.n;
  const auto L = sim::detail::fused_topk_shape(n, top_k, 0, sim::detail::fused_widest_chunk);
  spillway::stream s;
  constexpr unsigned slots = 4096;
  spillway::device_buffer<double> sums(slots + 1, s.view());
  spillway::device_buffer<unsigned long long> counts(slots + 1, s.view());
  spillway::device_buffer<float> scratch(static_cast<std::size_t>(L.widest * L.widest), s.view());
  checksum_sink sink{sums.data(), counts.data(), slots};
  const bf16* x = R.dev.data();
  std::int64_t chunks = 0, pairs = 0;
  const auto work = [&](spillway::stream_view sv) {
    chunks = pairs = 0;
    sums.fill_bytes_async(0, sv);
    counts.fill_bytes_async(0, sv);
    for (std::int64_t b = 0; b < L.blocks; ++b) {  // the seeds' products, as the job runs them
      const std::int64_t b0 = b * L.S, bn = sim::detail::fused_block_end(L, n, b) - b0;
      const auto A = sim::row_major(x + b0 * dim, bn, dim, dim);
      spillway::gemm::gemm_async(sv, 1.0f, A, A.t(), 0.0f, sim::row_major(scratch.data(), bn, bn, bn));
    }
    for (std::int64_t r0 = 0; r0 < n; r0 += L.P) {
      const std::int64_t rn = std::min(L.P, n - r0);
      sim::detail::for_each_fused_chunk(L, n, r0, [&](std::int64_t c0, std::int64_t w) {
        spillway::gemm::fragment_sink_gemm_async(sv, sim::row_major(x + r0 * dim, rn, dim, dim),
                                                 sim::row_major(x + c0 * dim, w, dim, dim), sink);
        ++chunks;
        pairs += rn * w;
      });
    }
  };
  const std::vector<double> ms = spillway::bench::run_timed(state, s.view(), work);
  // The last call's checksum against the host: every scheduled score seen once, the sum right.
  fold_slots<<<1, 256, 0, s.view().value()>>>(sums.data(), counts.data(), slots, sums.data() + slots,
                                              counts.data() + slots);
  check(cudaGetLastError(), "fold_slots");
  const std::vector<double> sum = sums.to_host(s.view());
  const std::vector<unsigned long long> cnt = counts.to_host(s.view());
  double ref = 0, mag = 0;
  for (std::int64_t r0 = 0; r0 < n; r0 += L.P) {
    // Strips of P rows lie inside gen_block blocks only when P divides gen_block (it does: 2,048).
    const std::int64_t rn = std::min(L.P, n - r0);
    std::vector<double> sa(static_cast<std::size_t>(dim), 0.0);
    for (std::int64_t r = r0; r < r0 + rn; ++r)
      for (std::int64_t q = 0; q < dim; ++q)
        sa[static_cast<std::size_t>(q)] += static_cast<double>(__bfloat162float(R.host.data()[r * dim + q]));
    sim::detail::for_each_fused_chunk(L, n, r0, [&](std::int64_t c0, std::int64_t w) {
      const std::vector<double> sb = R.sum_of(c0, c0 + w);
      for (std::int64_t q = 0; q < dim; ++q) {
        ref += sa[static_cast<std::size_t>(q)] * sb[static_cast<std::size_t>(q)];
        mag += std::fabs(sa[static_cast<std::size_t>(q)] * sb[static_cast<std::size_t>(q)]);
      }
    });
  }
  const double got = sum[slots];
  // (float sums of 128 scores per thread, then double: far inside 1e-7 of the magnitude)
  if (cnt[slots] != static_cast<unsigned long long>(pairs) || std::fabs(got - ref) > 1e-7 * mag + 1.0) {
    state.SkipWithError(("checksum: " + std::to_string(cnt[slots]) + " scores for " + std::to_string(pairs) +
                         " pairs; sum " + std::to_string(got) + " against the host's " + std::to_string(ref))
                            .c_str());
    return;
  }
  R.bare_ms = median(ms);
  state.counters["median_ms"] = R.bare_ms;
  state.counters["TFLOPs_symmetric"] = symmetric_tflops(n, R.bare_ms);
  state.counters["chunks"] = static_cast<double>(chunks);
  state.counters["strip_pairs"] = static_cast<double>(pairs);
  state.counters["checksum_rel_err"] = std::fabs(got - ref) / std::max(1.0, mag);
}

void bm_fused_topk(benchmark::State& state) {
  if (spillway::bench::skip_without_gpu(state)) return;
  rows_set& R = rows();
  const bool pinned = state.range(0) == 0;
  const bf16* x = pinned ? R.host.data() : R.dev.data();
  sim::similarity_options o;
  o.budget = spillway::memory_budget(std::size_t{8} << 30);
  sim::pair_report rep;
  o.report = &rep;
  spillway::stream s;
  const std::vector<double> ms = spillway::bench::run_timed(state, s.view(), [&](spillway::stream_view) {
    const auto nn = sim::similarity_topk(sim::row_major(x, R.n, dim), {top_k}, o);
    benchmark::DoNotOptimize(nn.values.data());
  });
  auto& hk = sim::detail::fused_topk_hook();
  if (!hk.last_ran) {
    state.SkipWithError("the fused top-k did not run (the strip path took the job)");
    return;
  }
  const double m = median(ms);
  state.counters["median_ms"] = m;
  state.counters["TFLOPs_symmetric"] = symmetric_tflops(R.n, m);
  state.counters["chunks"] = static_cast<double>(hk.last_chunks.load());
  if (R.bare_ms > 0) state.counters["x_bare"] = m / R.bare_ms;
}

/// One product C = X[0, m)·X[0, n)ᵀ over the rows' first k columns (k <= 768), bf16 in and out,
/// float accumulation, by cuBLAS (range 0 = 0) or spillway's gemm_async (1): the rate each reaches
/// on the fused schedule's shapes — a square like the seeds' blocks, a strip of 2,048 rows against
/// a wide chunk — and, from the strip at three k, the cost of a tile apart from its k-slices.
void bm_shape_bf16(benchmark::State& state) {
  if (spillway::bench::skip_without_gpu(state)) return;
  const bool ours = state.range(0) == 1;
  const std::int64_t m = state.range(1), n = state.range(2), k = state.range(3);
  rows_set& R = rows();
  if (m > R.n || n > R.n) {
    state.SkipWithError("fewer rows than the shape needs");
    return;
  }
  spillway::stream s;
  spillway::device_buffer<bf16> c(static_cast<std::size_t>(m * n), s.view());
  cublasHandle_t h = nullptr;
  if (!ours && cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
    state.SkipWithError("cublasCreate failed");
    return;
  }
  if (h != nullptr) cublasSetStream(h, s.view().value());
  const float alpha = 1.0f, beta = 0.0f;
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  const bf16* x = R.dev.data();
  const std::vector<double> ms = spillway::bench::run_timed(state, s.view(), [&](spillway::stream_view sv) {
    if (ours) {
      spillway::gemm::gemm_async(sv, 1.0f, sim::row_major(x, m, k, dim), sim::row_major(x, n, k, dim).t(), 0.0f,
                                 sim::row_major(c.data(), m, n, n));
    } else {
      // Row-major C (m x n) is column-major Cᵀ (n x m) = X_nᵀ·X_m over column-major views.
      const cublasStatus_t e =
          cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, x,
                       CUDA_R_16BF, dim, x, CUDA_R_16BF, dim, &beta, c.data(), CUDA_R_16BF, static_cast<int>(n),
                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      if (e != CUBLAS_STATUS_SUCCESS) st = e;
    }
  });
  if (h != nullptr) cublasDestroy(h);
  if (st != CUBLAS_STATUS_SUCCESS) {
    state.SkipWithError(("cublasGemmEx failed: status " + std::to_string(static_cast<int>(st))).c_str());
    return;
  }
  const double med = median(ms);
  state.counters["median_ms"] = med;
  state.counters["TFLOPs"] = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) /
                            (med * 1e-3) * 1e-12;
}

}  // namespace

BENCHMARK(bm_fused_bare)
    ->Name("BM_fused_bare")
    ->UseManualTime()
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(bm_fused_topk)
    ->Name("BM_fused_topk")
    ->ArgName("device")
    ->Arg(0)
    ->Arg(1)
    ->UseManualTime()
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(bm_fused_bare)
    ->Name("BM_fused_bare_again")
    ->UseManualTime()
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);

BENCHMARK(bm_shape_bf16)
    ->Name("BM_shape_bf16")
    ->ArgNames({"spillway", "m", "n", "k"})
    ->ArgsProduct({{0, 1}, {16384}, {16384}, {768}})
    ->ArgsProduct({{0, 1}, {2048}, {262144}, {256, 512, 768}})
    ->ArgsProduct({{0, 1}, {2048}, {524288}, {768}})
    ->UseManualTime()
    ->Iterations(10)
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
