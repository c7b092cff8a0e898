// The Gram top-k's pass over one score strip (pairwise/sink_kernels.cuh: topk_rows_kernel and
// topk_append_kernel), against the rate of reading the strip alone, on a synthetic strip that
// behaves as the 100,000 x 200,000 job's do: 2,048 rows x W columns of scores drawn as A·Aᵀ of a
// random 0/1 matrix of 200,000 columns at density 1/2 (row weights 100,000 + 224 z; a score
// w_i w_j / 200,000 + 112 z, the diagonal w_i), the rows' lists empty (a strip's rows start
// their lists in its pass) and each column's bar where k of W values of the column pass it (a
// column's list has seen about W values when its strip runs). Heavy rows (high weight) reach the
// bars of many columns: they are what the mirrored side's appends cost.
//
//   BM_topk_rows/W        rows kernel + appends, k = 32, the diagonal skipped (what the job runs
//                         per strip before the columns kernel)
//   BM_topk_read_floor/W  the same strip read by one warp per row, 16 bytes per lane, eight loads
//                         in flight, nothing else: the HBM floor of the pass
//
// Each iteration: the lists, bars and counts reset, then CUDA events around the launches.
#include "bench_common.cuh"

#include <spillway/pairwise/plan.hpp>
#include <spillway/pairwise/sink_kernels.cuh>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace pd = spillway::pairwise::detail;

constexpr std::int64_t strip_rows = 2048;
constexpr std::int64_t n_rows = 100000;
constexpr int k = 32;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

__host__ __device__ inline unsigned long long mix64(unsigned long long x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}
// Approximately standard normal (Irwin-Hall of 12 uniforms).
__host__ __device__ inline float normal_of(unsigned long long key) {
  float z = -6.f;
  for (int t = 0; t < 12; ++t) z += static_cast<float>(mix64(key * 16 + t) >> 40) * (1.f / 16777216.f);
  return z;
}
__host__ __device__ inline float weight_of(std::int64_t g) {
  return 100000.f + 224.f * normal_of(0x9e3779b97f4a7c15ULL ^ static_cast<unsigned long long>(g));
}

__global__ void make_strip(int* s, std::int64_t rows, std::int64_t w, std::int64_t row0) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * w;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t gr = row0 + i / w, gc = row0 + i % w;  // a diagonal strip: columns from row0
    const std::int64_t a = gr < gc ? gr : gc, b = gr < gc ? gc : gr;
    const float wa = weight_of(a), wb = weight_of(b);
    s[i] = gr == gc ? __float2int_rn(wa)
                    : __float2int_rn(wa * wb / 200000.f +
                                     112.f * normal_of(static_cast<unsigned long long>(a) * 1000003ULL +
                                                       static_cast<unsigned long long>(b)));
  }
}

__global__ void read_floor(const int* s, std::int64_t rows, std::int64_t w, unsigned* out) {
  const std::int64_t warp = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = static_cast<int>(threadIdx.x & 31u);
  if (warp >= rows) return;
  const uint4* q = reinterpret_cast<const uint4*>(s + warp * w);
  unsigned acc = 0;
  for (std::int64_t x0 = 0; x0 + 1024 <= w; x0 += 1024, q += 256) {
    uint4 u[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) u[i] = q[32 * i + lane];
#pragma unroll
    for (int i = 0; i < 8; ++i) acc ^= u[i].x + u[i].y + u[i].z + u[i].w;
  }
  if (acc == 0x9e3779b9u) out[warp] = acc;  // keeps the loads
}

/// One strip of width w (rows [n − w, n − w + 2048) against columns from n − w) and its state.
struct strip_fixture {
  std::int64_t w, row0;
  int* s = nullptr;
  pd::topk_entry<int>* lists = nullptr;
  unsigned *bar = nullptr, *bar0 = nullptr, *hits = nullptr, *sink = nullptr;
  int* count = nullptr;
  pd::topk_entry<int>* cand = nullptr;
  pd::topk_mirror<int> m;
  spillway::stream st;

  explicit strip_fixture(std::int64_t w_) : w(w_), row0(n_rows - w_) {
    check(cudaMalloc(&s, static_cast<std::size_t>(strip_rows * w) * 4), "scores");
    check(cudaMalloc(&lists, sizeof(pd::topk_entry<int>) * static_cast<std::size_t>(strip_rows) * k), "lists");
    check(cudaMalloc(&bar, 4 * static_cast<std::size_t>(n_rows)), "bars");
    check(cudaMalloc(&bar0, 4 * static_cast<std::size_t>(n_rows)), "bars");
    check(cudaMalloc(&count, 4 * static_cast<std::size_t>(w)), "counts");
    check(cudaMalloc(&cand, sizeof(pd::topk_entry<int>) * static_cast<std::size_t>(w) * pd::topk_mirror_cap), "cand");
    check(cudaMalloc(&hits, 4 * static_cast<std::size_t>(strip_rows) * pd::topk_mirror_hit_words(static_cast<std::size_t>(w))),
          "hits");
    check(cudaMalloc(&sink, 4 * static_cast<std::size_t>(strip_rows)), "sink");
    make_strip<<<4096, 256, 0, st.value()>>>(s, strip_rows, w, row0);
    check(cudaGetLastError(), "make_strip");
    // Column g's scores over the rows: w_g / 2 + 158 z; its bar where k of w pass.
    double lo = 0, hi = 8;
    const double p = static_cast<double>(k) / static_cast<double>(w);
    for (int it = 0; it < 60; ++it) {
      const double mid = 0.5 * (lo + hi);
      (0.5 * std::erfc(mid / std::sqrt(2.0)) > p ? lo : hi) = mid;
    }
    std::vector<unsigned> hb(static_cast<std::size_t>(n_rows));
    for (std::int64_t g = 0; g < n_rows; ++g)
      hb[static_cast<std::size_t>(g)] = static_cast<unsigned>(static_cast<int>(weight_of(g) / 2.0 + 158.0 * lo)) ^ 0x80000000u;
    check(cudaMemcpyAsync(bar0, hb.data(), hb.size() * 4, cudaMemcpyHostToDevice, st.value()), "bars");
    st.synchronize();
    m.bar = bar;
    m.x_begin = strip_rows;
    m.count = count;
    m.cand = cand;
    m.cap = pd::topk_mirror_cap;
    m.hits = hits;
    m.hit_words = static_cast<std::int64_t>(pd::topk_mirror_hit_words(static_cast<std::size_t>(w)));
  }
  ~strip_fixture() {
    for (void* p : {static_cast<void*>(s), static_cast<void*>(lists), static_cast<void*>(bar), static_cast<void*>(bar0),
                    static_cast<void*>(count), static_cast<void*>(cand), static_cast<void*>(hits), static_cast<void*>(sink)})
      cudaFree(p);
  }
  void reset() {
    pd::topk_init_kernel<int, true><<<1024, 256, 0, st.value()>>>(lists, strip_rows * k);
    check(cudaMemcpyAsync(bar, bar0, 4 * static_cast<std::size_t>(n_rows), cudaMemcpyDeviceToDevice, st.value()), "bars");
    check(cudaMemsetAsync(count, 0, 4 * static_cast<std::size_t>(w), st.value()), "counts");
  }
  void pass() {
    // The lists of rows row0.. start at `lists` (state indexed by global row).
    pd::with_topk_blocks(k, [&](auto B) {
      pd::topk_rows_kernel<int, true, decltype(B)::value>
          <<<spillway::grid_blocks(strip_rows, 8), 256, 0, st.value()>>>(s, strip_rows, w, row0, row0, true,
                                                                         lists - row0 * k, k, m);
    });
    pd::topk_append_kernel<int><<<spillway::grid_blocks(strip_rows * m.hit_words, 256), 256, 0, st.value()>>>(
        s, strip_rows, w, row0, m);
  }
};

template <class Launch>
void time_it(benchmark::State& state, strip_fixture& f, Launch&& launch) {
  for (auto _ : state) {
    f.reset();
    spillway::event_timer t(f.st);
    launch();
    state.SetIterationTime(static_cast<double>(t.stop()) * 1e-3);
    check(cudaGetLastError(), "launch");
  }
  const double bytes = 4.0 * static_cast<double>(strip_rows) * static_cast<double>(f.w);
  state.counters["GB/s"] = benchmark::Counter(bytes * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
  state.counters["columns"] = static_cast<double>(f.w);
}

void BM_topk_rows(benchmark::State& state) {
  if (spillway::bench::skip_without_gpu(state)) return;
  strip_fixture f(state.range(0));
  f.reset();
  f.pass();  // warm-up
  f.st.synchronize();
  time_it(state, f, [&] { f.pass(); });
}

void BM_topk_read_floor(benchmark::State& state) {
  if (spillway::bench::skip_without_gpu(state)) return;
  strip_fixture f(state.range(0));
  const auto launch = [&] {
    read_floor<<<spillway::grid_blocks(strip_rows, 8), 256, 0, f.st.value()>>>(f.s, strip_rows, f.w, f.sink);
  };
  launch();  // warm-up
  f.st.synchronize();
  time_it(state, f, launch);
}

}  // namespace

BENCHMARK(BM_topk_rows)->Arg(4000)->Arg(10000)->Arg(50000)->Arg(100000)->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(20);
BENCHMARK(BM_topk_read_floor)->Arg(4000)->Arg(10000)->Arg(50000)->Arg(100000)->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(20);
BENCHMARK_MAIN();
