// Binary Gram matrix A·Aᵀ of a bit-packed 0/1 matrix, in core (A and the output on the device):
// spillway's tile kernels (each path forced) against the routes a user would otherwise take —
// cuBLASLt's int8 GEMM on the same matrix unpacked to 0/1 bytes (CUDA_R_8I -> CUDA_R_32I, full
// product), and the naive kernel (one thread per output element, 32 x 32 shared-memory tiles of
// bytes, an int32 multiply-add per byte pair) — all in this one binary.
//
// Rates count only the work A·Aᵀ requires: rows·(rows+1)/2·cols bit-MACs (upper triangle with the
// diagonal). A full-product baseline gets no credit for its redundant half, spillway none for
// skipping it. Times are CUDA-event times of each iteration (manual time); the summary printed at
// the end uses the median iteration of each benchmark.
#include <spillway/core.hpp>
#include <spillway/gram/detail/kernels.cuh>
#include <spillway/gram/kernel_path.hpp>

#include <benchmark/benchmark.h>
#include <cublasLt.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using spillway::gram::kernel_path;
namespace gd = spillway::gram::detail;

#define GRAM_BENCH_CUBLAS(call)                                                               \
  do {                                                                                        \
    const cublasStatus_t st_ = (call);                                                        \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                         \
      throw std::runtime_error(std::string(#call) + " failed: " + std::to_string(int(st_)));  \
  } while (0)

// SplitMix64 of the word index: reproducible random bits without a host round trip.
__global__ void fill_random_words(std::uint32_t* p, std::int64_t rows, std::int64_t cols, std::int64_t ld_words,
                                  std::uint64_t seed) {
  const std::int64_t n = rows * ld_words;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::uint64_t x = static_cast<std::uint64_t>(i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 33;
    const std::int64_t w = i % ld_words;
    const std::int64_t first_col = w * 32;
    std::uint32_t v = static_cast<std::uint32_t>(x);
    if (first_col >= cols) v = 0;
    else if (cols - first_col < 32) v &= (1u << (cols - first_col)) - 1u;
    p[i] = v;
  }
}

// The baselines' input: the same matrix as 0/1 bytes, row-major rows x cols.
__global__ void unpack_to_bytes(const std::uint32_t* bits, std::int8_t* bytes, std::int64_t rows, std::int64_t cols,
                                std::int64_t ld_words) {
  const std::int64_t n = rows * cols;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / cols, c = i % cols;
    bytes[i] = static_cast<std::int8_t>((bits[r * ld_words + c / 32] >> (c % 32)) & 1u);
  }
}

// The naive route: one thread per output element, 32 x 32 tiles of bytes staged in shared memory.
__global__ void naive_gram_bytes(const std::int8_t* x, std::int32_t* c, std::int64_t rows, std::int64_t cols) {
  __shared__ std::int8_t ta[32][33];
  __shared__ std::int8_t tb[32][33];
  const std::int64_t i = blockIdx.y * 32 + threadIdx.y;
  const std::int64_t j = blockIdx.x * 32 + threadIdx.x;
  std::int32_t acc = 0;
  for (std::int64_t k0 = 0; k0 < cols; k0 += 32) {
    const std::int64_t ra = blockIdx.y * 32 + threadIdx.y, rb = blockIdx.x * 32 + threadIdx.y;
    const std::int64_t k = k0 + threadIdx.x;
    ta[threadIdx.y][threadIdx.x] = (ra < rows && k < cols) ? x[ra * cols + k] : 0;
    tb[threadIdx.y][threadIdx.x] = (rb < rows && k < cols) ? x[rb * cols + k] : 0;
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < 32; ++kk) {
      acc += static_cast<std::int32_t>(ta[threadIdx.y][kk]) * static_cast<std::int32_t>(tb[threadIdx.x][kk]);
    }
    __syncthreads();
  }
  if (i < rows && j < rows) c[i * rows + j] = acc;
}

struct problem {
  std::int64_t rows, cols, ld_words;
  spillway::stream s;
  spillway::device_buffer<std::uint32_t> bits;
  spillway::device_buffer<std::int32_t> out;
  std::unique_ptr<spillway::device_buffer<std::int8_t>> bytes;  // only for the baselines
  problem(std::int64_t r, std::int64_t c)
      : rows(r), cols(c), ld_words((c + 1023) / 1024 * 32), bits(static_cast<std::size_t>(r * ld_words), s),
        out(static_cast<std::size_t>(r * r), s) {
    fill_random_words<<<2048, 256, 0, s.value()>>>(bits.data(), rows, cols, ld_words, 0x5eedull + r);
    SPILLWAY_CHECK_LAUNCH();
    out.fill_bytes_async(0xFF, s);  // poisoned, and touched before any timing
    s.synchronize();
  }
  std::int8_t* unpacked() {
    if (!bytes) {
      bytes = std::make_unique<spillway::device_buffer<std::int8_t>>(static_cast<std::size_t>(rows * cols), s);
      unpack_to_bytes<<<4096, 256, 0, s.value()>>>(bits.data(), bytes->data(), rows, cols, ld_words);
      SPILLWAY_CHECK_LAUNCH();
      s.synchronize();
    }
    return bytes->data();
  }
  [[nodiscard]] double required_bit_macs() const {
    return static_cast<double>(rows) * static_cast<double>(rows + 1) / 2.0 * static_cast<double>(cols);
  }
};

problem& get_problem(std::int64_t rows, std::int64_t cols) {
  static std::map<std::pair<std::int64_t, std::int64_t>, std::unique_ptr<problem>> cache;
  auto& p = cache[{rows, cols}];
  if (!p) {
    cache.clear();  // one shape resident at a time
    auto& q = cache[{rows, cols}];
    q = std::make_unique<problem>(rows, cols);
    return *q;
  }
  return *p;
}

// Median iteration time (ms) of each benchmark, for the summary.
std::map<std::string, double>& medians() {
  static std::map<std::string, double> m;
  return m;
}

std::string shape_key(std::int64_t rows, std::int64_t cols) {
  return std::to_string(rows) + "x" + std::to_string(cols);
}

template <class Work>
void timed_loop(benchmark::State& state, problem& p, const std::string& name, double bytes_per_iter, Work&& work) {
  work();  // warm-up (module load, cuBLASLt heuristics, pool growth)
  p.s.synchronize();
  std::vector<double> ms;
  for (auto _ : state) {
    spillway::event_timer t(p.s);
    work();
    const double e = t.stop();
    state.SetIterationTime(e / 1e3);
    ms.push_back(e);
  }
  const double med = spillway::median(ms);
  medians()[name + " " + shape_key(p.rows, p.cols)] = med;
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes_per_iter * static_cast<double>(state.iterations())));
  state.counters["bit_MAC_per_s"] =
      benchmark::Counter(p.required_bit_macs() * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["median_ms"] = med;
  state.counters["median_P_bitMAC_s"] = p.required_bit_macs() / (med / 1e3) / 1e15;
}

// Cross-checks a few upper-triangle entries of spillway's output against a host popcount.
bool spot_check(problem& p) {
  std::vector<std::uint32_t> ri(static_cast<std::size_t>(p.ld_words)), rj(ri.size());
  for (std::int64_t i : {std::int64_t{0}, p.rows / 3, p.rows - 129, p.rows - 1}) {
    for (std::int64_t j : {p.rows - 1, p.rows / 2 + 77, i}) {
      if (i > j) continue;
      std::int32_t got = 0;
      SPILLWAY_CUDA_TRY(cudaMemcpy(ri.data(), p.bits.data() + i * p.ld_words, ri.size() * 4, cudaMemcpyDeviceToHost));
      SPILLWAY_CUDA_TRY(cudaMemcpy(rj.data(), p.bits.data() + j * p.ld_words, rj.size() * 4, cudaMemcpyDeviceToHost));
      SPILLWAY_CUDA_TRY(cudaMemcpy(&got, p.out.data() + i * p.rows + j, 4, cudaMemcpyDeviceToHost));
      std::int32_t want = 0;
      for (std::size_t k = 0; k < ri.size(); ++k) want += __builtin_popcount(ri[k] & rj[k]);
      if (got != want) {
        std::fprintf(stderr, "mismatch C(%lld, %lld) = %d, expected %d\n", static_cast<long long>(i),
                     static_cast<long long>(j), got, want);
        return false;
      }
    }
  }
  return true;
}

// `forced`: one tile kernel instead of the path's automatic choice (gram/detail/kernels.cuh).
void bm_spillway(benchmark::State& state, kernel_path path, std::optional<gd::tile_kernel> forced = std::nullopt) {
  problem& p = get_problem(state.range(0), state.range(1));
  try {
    (void)gd::resolve_path(path, spillway::current_device());
    if (forced) {
      const std::string refusal = gd::kernel_refusal(*forced, spillway::current_device());
      if (!refusal.empty()) throw spillway::logic_error(refusal);
    }
  } catch (const spillway::logic_error& e) {
    state.SkipWithError(e.what());
    return;
  }
  gd::bit_gemm_args g;
  g.a = g.b = p.bits.data();
  g.a_rows = g.b_rows = p.rows;
  g.ld_words = p.ld_words;
  g.upper_only = true;
  p.out.fill_bytes_async(0xFF, p.s);
  const double bytes = static_cast<double>(p.bits.size_bytes()) + p.required_bit_macs() / static_cast<double>(p.cols) * 4.0;
  const gd::store_counts<std::int32_t> epi{p.out.data(), p.rows, 0, 0, true};
  const std::string name = forced ? gd::to_string(*forced) : spillway::gram::to_string(path);
  timed_loop(state, p, std::string("spillway ") + name, bytes, [&] {
    if (forced) {
      gd::bit_gemm_forced_async(g, epi, *forced, p.s);
    } else {
      gd::bit_gemm_async(g, epi, path, p.s);
    }
  });
  if (!spot_check(p)) state.SkipWithError("spillway result mismatch");
}

struct cublaslt_gemm {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo{};
  spillway::device_buffer<unsigned char> workspace;
  std::size_t ws_bytes = 64ull << 20;

  cublaslt_gemm(std::int64_t rows, std::int64_t cols, spillway::stream_view s) : workspace(64ull << 20, s) {
    GRAM_BENCH_CUBLAS(cublasLtCreate(&handle));
    GRAM_BENCH_CUBLAS(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32I, CUDA_R_32I));
    // Row-major X (rows x cols bytes) is column-major Xᵀ (cols x rows, ld = cols); C = X·Xᵀ is
    // then op(A)=T, op(B)=N on that same layout: the "TN" form cuBLASLt's int8 kernels need.
    const cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
    GRAM_BENCH_CUBLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
    GRAM_BENCH_CUBLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof n));
    GRAM_BENCH_CUBLAS(cublasLtMatrixLayoutCreate(&la, CUDA_R_8I, static_cast<std::uint64_t>(cols),
                                                 static_cast<std::uint64_t>(rows), cols));
    GRAM_BENCH_CUBLAS(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32I, static_cast<std::uint64_t>(rows),
                                                 static_cast<std::uint64_t>(rows), rows));
    cublasLtMatmulPreference_t pref = nullptr;
    GRAM_BENCH_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
    GRAM_BENCH_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                           sizeof ws_bytes));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    GRAM_BENCH_CUBLAS(cublasLtMatmulAlgoGetHeuristic(handle, op, la, la, lc, lc, pref, 1, &result, &found));
    cublasLtMatmulPreferenceDestroy(pref);
    if (found == 0) throw std::runtime_error("cuBLASLt offers no int8 algorithm for this shape");
    algo = result.algo;
  }
  ~cublaslt_gemm() {
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (op) cublasLtMatmulDescDestroy(op);
    if (handle) cublasLtDestroy(handle);
  }
  cublaslt_gemm(const cublaslt_gemm&) = delete;
  cublaslt_gemm& operator=(const cublaslt_gemm&) = delete;

  void run(const std::int8_t* x, std::int32_t* c, spillway::stream_view s) {
    const std::int32_t alpha = 1, beta = 0;
    GRAM_BENCH_CUBLAS(cublasLtMatmul(handle, op, &alpha, x, la, x, la, &beta, c, lc, c, lc, &algo, workspace.data(),
                                     ws_bytes, s.value()));
  }
};

void bm_cublaslt_int8(benchmark::State& state) {
  problem& p = get_problem(state.range(0), state.range(1));
  std::int8_t* x = p.unpacked();
  spillway::device_buffer<std::int32_t> full(static_cast<std::size_t>(p.rows * p.rows), p.s);
  full.fill_bytes_async(0xFF, p.s);
  try {
    cublaslt_gemm g(p.rows, p.cols, p.s);
    const double bytes = static_cast<double>(p.rows * p.cols) + static_cast<double>(p.rows * p.rows) * 4.0;
    timed_loop(state, p, "cuBLASLt int8", bytes, [&] { g.run(x, full.data(), p.s); });
    // Same matrix, same answer: compare a diagonal-crossing block with spillway's kernel.
    std::vector<std::int32_t> c(64 * 64), d(64 * 64);
    for (int r = 0; r < 64; ++r) {
      const std::int64_t i = p.rows - 64 + r;
      SPILLWAY_CUDA_TRY(cudaMemcpy(c.data() + r * 64, full.data() + i * p.rows + (p.rows - 64), 256, cudaMemcpyDeviceToHost));
    }
    // cuBLASLt's C is column-major: C(i, j) sits at j * rows + i; the block is symmetric in
    // value, so compare entry (i, j) against a host popcount.
    std::vector<std::uint32_t> ri(static_cast<std::size_t>(p.ld_words)), rj(ri.size());
    for (int r = 0; r < 64; r += 21) {
      for (int q = 0; q < 64; q += 13) {
        const std::int64_t i = p.rows - 64 + q, j = p.rows - 64 + r;  // column-major element (i, j)
        SPILLWAY_CUDA_TRY(cudaMemcpy(ri.data(), p.bits.data() + i * p.ld_words, ri.size() * 4, cudaMemcpyDeviceToHost));
        SPILLWAY_CUDA_TRY(cudaMemcpy(rj.data(), p.bits.data() + j * p.ld_words, rj.size() * 4, cudaMemcpyDeviceToHost));
        std::int32_t want = 0;
        for (std::size_t k = 0; k < ri.size(); ++k) want += __builtin_popcount(ri[k] & rj[k]);
        if (c[static_cast<std::size_t>(r * 64 + q)] != want) {
          state.SkipWithError("cuBLASLt result mismatch");
          return;
        }
      }
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void bm_naive(benchmark::State& state) {
  problem& p = get_problem(state.range(0), state.range(1));
  std::int8_t* x = p.unpacked();
  spillway::device_buffer<std::int32_t> full(static_cast<std::size_t>(p.rows * p.rows), p.s);
  full.fill_bytes_async(0xFF, p.s);
  const dim3 block(32, 32);
  const dim3 grid(static_cast<unsigned>((p.rows + 31) / 32), static_cast<unsigned>((p.rows + 31) / 32));
  const double bytes = static_cast<double>(p.rows * p.cols) + static_cast<double>(p.rows * p.rows) * 4.0;
  timed_loop(state, p, "naive bytes", bytes, [&] {
    naive_gram_bytes<<<grid, block, 0, p.s.value()>>>(x, full.data(), p.rows, p.cols);
    SPILLWAY_CHECK_LAUNCH();
  });
  std::int32_t got = 0;
  SPILLWAY_CUDA_TRY(cudaMemcpy(&got, full.data() + (p.rows - 1) * p.rows + (p.rows - 1), 4, cudaMemcpyDeviceToHost));
  std::vector<std::uint32_t> r(static_cast<std::size_t>(p.ld_words));
  SPILLWAY_CUDA_TRY(cudaMemcpy(r.data(), p.bits.data() + (p.rows - 1) * p.ld_words, r.size() * 4, cudaMemcpyDeviceToHost));
  std::int32_t want = 0;
  for (auto w : r) want += __builtin_popcount(w);
  if (got != want) state.SkipWithError("naive result mismatch");
}

void shapes_small(benchmark::internal::Benchmark* b) { b->Args({8192, 32768}); }
void shapes_large(benchmark::internal::Benchmark* b) { b->Args({32768, 65536}); }

}  // namespace

// In-core A·Aᵀ, upper triangle of int32 counts written to device memory. Iteration counts are
// fixed so the whole binary fits one short GPU session; each iteration is a full product. Order:
// per shape the tensor-core paths, then cuBLASLt, then the CUDA-core path; the naive kernel (a
// minute of full power at the large shape) last, so its heat does not carry into the others.
BENCHMARK_CAPTURE(bm_spillway, wgmma, kernel_path::wgmma)->Apply(shapes_small)->UseManualTime()->Iterations(20)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_spillway, mma_sync, kernel_path::mma_sync)->Apply(shapes_small)->UseManualTime()->Iterations(20)->Unit(benchmark::kMillisecond);
// The cp.async-fed BMMA kernel (what sm_80 to sm_89 run) forced beside the path's own choice.
BENCHMARK_CAPTURE(bm_spillway, mma_sync_cp_async, kernel_path::mma_sync, gd::tile_kernel::mma_sync_cp_async)->Apply(shapes_small)->UseManualTime()->Iterations(20)->Unit(benchmark::kMillisecond);
BENCHMARK(bm_cublaslt_int8)->Apply(shapes_small)->UseManualTime()->Iterations(10)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_spillway, popc, kernel_path::popc)->Apply(shapes_small)->UseManualTime()->Iterations(5)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_spillway, wgmma, kernel_path::wgmma)->Apply(shapes_large)->UseManualTime()->Iterations(10)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_spillway, mma_sync, kernel_path::mma_sync)->Apply(shapes_large)->UseManualTime()->Iterations(10)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_spillway, mma_sync_cp_async, kernel_path::mma_sync, gd::tile_kernel::mma_sync_cp_async)->Apply(shapes_large)->UseManualTime()->Iterations(10)->Unit(benchmark::kMillisecond);
BENCHMARK(bm_cublaslt_int8)->Apply(shapes_large)->UseManualTime()->Iterations(5)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_spillway, popc, kernel_path::popc)->Apply(shapes_large)->UseManualTime()->Iterations(2)->Unit(benchmark::kMillisecond);
BENCHMARK(bm_naive)->Apply(shapes_small)->UseManualTime()->Iterations(3)->Unit(benchmark::kMillisecond);
BENCHMARK(bm_naive)->Apply(shapes_large)->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);

#if __has_include("gram_bench_ooc.cuh")
#include "gram_bench_ooc.cuh"
#endif

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (spillway::device_count() == 0) {
    std::printf("gram_bench: no CUDA GPU here (%s); nothing to measure\n", spillway::no_gpu_reason().c_str());
    return 0;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  // Summary: rate of required work from the median iteration, and the ratio to cuBLASLt int8 on
  // the same shape in this run.
  std::printf("\n%-22s %-13s %12s %16s %12s\n", "route", "shape", "median ms", "P bit-MAC/s", "x cuBLASLt");
  for (const auto& [key, ms] : medians()) {
    const auto sp = key.rfind(' ');
    const std::string route = key.substr(0, sp), shape = key.substr(sp + 1);
    const auto x = shape.find('x');
    const double rows = std::stod(shape.substr(0, x)), cols = std::stod(shape.substr(x + 1));
    const double rate = rows * (rows + 1) / 2 * cols / (ms / 1e3) / 1e15;
    const auto base = medians().find("cuBLASLt int8 " + shape);
    const double ratio = base != medians().end() ? base->second / ms : 0.0;
    std::printf("%-22s %-13s %12.3f %16.3f %12.2f\n", route.c_str(), shape.c_str(), ms, rate, ratio);
  }
  return 0;
}
