// spillway/similarity/detail/topk_fused.cuh — all-pairs top-k of bf16 / half / TF32 rows
// without writing the scores: the Hopper GEMM hands its accumulators to a filter that keeps only
// the pairs that can still enter a row's list.
//
// Why: a score costs the tensor cores d multiply-adds (768 for the usual embeddings) but 4 bytes
// to write and 4 to read back for the selection; a strip that is written and re-read (the strip
// path, pair_job's top-k sink) spends HBM time and selection instructions on every score, and the
// 10^6 x 768 job does 5·10^11 of them. Here a score is compared with two numbers in registers
// and dropped unless it beats one of them.
//
// The job (one device; all rows resident):
//   seed     rows fall into blocks of S (4 strips, 8192 rows by default); each block's S x S
//            scores go through a dense GEMM and topk_rows_kernel (the strip path's kernels), so
//            every row starts with the exact top-k of its own block: its k-th place ("bar") is a
//            true lower bound of its final k-th place.
//   strips   rows [r0, r0 + P) against every column of the LATER blocks, in chunks whose width
//            is the number of columns those rows have already seen (doubling: each chunk
//            offers a row about k candidates however far the job is), capped at W columns. Per
//            chunk one GEMM (gemm::fragment_sink_gemm_async with this file's fragment sink): a score (i, j)
//            goes to row i's bucket if it beats i's bar and to row j's bucket if it beats j's bar
//            (ties by the smaller column, as the lists sort); then one warp per row with
//            candidates merges its bucket into its list and raises its bar. Pairs inside a block
//            are the seed's, pairs across blocks the strips': each pair reaches each of its two
//            rows exactly once, so no list ever sees a duplicate.
//   overflow a bucket that fills (cap_a / cap_b candidates, far above the ~k a chunk offers on
//            data without structure) is dropped and that row's pairs of the chunk are recomputed
//            by its merge warp on the CUDA cores (SIMT float dot products, within the same error
//            bound), so the result never depends on the capacities; slow only when many rows
//            overflow, e.g. masses of rows at one identical score.
// The bars are read at each tile's start and are stale by at most one chunk: a lower bar only
// lets more candidates through, never fewer.
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/device_buffer.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/memory_budget.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/gemm/fragment_sink.cuh>
#include <spillway/gemm/gemm.cuh>
#include <spillway/gemm/matrix_view.hpp>
#include <spillway/gemm/options.hpp>
#include <spillway/pairwise/pair_job.cuh>
#include <spillway/pairwise/sink_kernels.cuh>
#include <spillway/pairwise/sinks.hpp>
#include <spillway/pipeline/job.hpp>
#include <spillway/pipeline/plan.hpp>
#include <spillway/similarity/detail/kernels.cuh>
#include <spillway/tile/arch.cuh>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <future>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace spillway::similarity::detail {

/// A row's k-th place as the filter sees it: key = score (similarities) or −score (distances), so
/// larger keys are better; col = that place's column (INT_MAX while the list is not full).
struct topk_bar {
  float key;
  std::int32_t col;
};
static_assert(sizeof(topk_bar) == 8, "two bars make one 16-byte load");

/// Sizes of the fused job; zero fields take the defaults. Tests shrink them to force many blocks,
/// chunks and bucket overflows.
struct fused_topk_sizes {
  std::int64_t strip_rows = 0;     ///< P (multiple of 128; default 2048, or max_panel_rows)
  std::int64_t seed_rows = 0;      ///< S (multiple of P; default 4 P)
  std::int64_t chunk_cols = 0;     ///< W, the widest chunk (default 262,144)
  std::int32_t row_capacity = 0;   ///< cap_a per strip row (default 32 k)
  std::int32_t col_capacity = 0;   ///< cap_b per chunk column (default 2 k)
};
/// Test hook (detail): sizes for the next fused jobs of this process, and what the last one did.
struct fused_topk_test_hook {
  fused_topk_sizes sizes{};
  // Written by every job (atomics: jobs may run on several threads at once; then "last" is any).
  std::atomic<std::uint64_t> last_recomputed_rows{0};  ///< overflowed buckets recomputed on the CUDA cores
  std::atomic<std::int64_t> last_chunks{0};
  std::atomic<bool> last_ran{false};                    ///< the last similarity_topk took the fused path
  /// With profile set, the next jobs time their phases with events (three per chunk, read after
  /// the job's one final synchronize): rows in + seeds, the chunks' GEMMs, their merges, the
  /// whole device part (milliseconds). `spillway-knn --profile` prints them.
  bool profile = false;
  float seed_ms = 0, gemm_ms = 0, merge_ms = 0, device_ms = 0;
};
inline fused_topk_test_hook& fused_topk_hook() {
  static fused_topk_test_hook h;
  return h;
}

template <similarity_metric M>
__device__ __forceinline__ float fused_score(float acc, float ia, float ib, float cosine_zero) {
  return similarity_score(M, acc, ia, ib, cosine_zero);  // M is a constant: the branches fold away
}

__device__ __forceinline__ void fused_append(unsigned* cnt, pairwise::detail::topk_entry<float>* buck, std::int32_t cap,
                                             std::int64_t slot, float v, std::int32_t col) {
  const unsigned pos = atomicAdd(cnt + slot, 1u);
  if (pos < static_cast<unsigned>(cap)) buck[slot * cap + pos] = pairwise::detail::topk_entry<float>{v, col};
}

/// The Hopper GEMM's fragment sink (see gemm/fragment_sink.cuh): A's rows are a strip's, B's rows a
/// chunk's columns; every index here is local to them except the columns written to buckets.
struct fused_topk_sink {
  using fragment_sink_tag = void;
  similarity_metric metric = similarity_metric::cosine;
  float cosine_zero = 0.0f;
  const float* aux_a = nullptr;
  const float* aux_b = nullptr;
  const topk_bar* bar_a = nullptr;
  const topk_bar* bar_b = nullptr;
  std::int32_t a_row0 = 0, b_row0 = 0;  // global rows of local row / column 0
  unsigned* cnt_a = nullptr;
  pairwise::detail::topk_entry<float>* buck_a = nullptr;
  std::int32_t cap_a = 0;
  unsigned* cnt_b = nullptr;
  pairwise::detail::topk_entry<float>* buck_b = nullptr;
  std::int32_t cap_b = 0;

  /// The slow path of one staged candidate: the exact test (ties by the smaller column) and the
  /// bucket write. `code` = j << 2 | e << 1 | h (see gemm/fragment_sink.cuh), bit 8: row side, bit 9:
  /// column side.
  template <bool Larger>
  __device__ __forceinline__ void commit(float s, unsigned code, int row0, int col0, float bak0, int bac0, float bak1,
                                      int bac1) const {
    const int h = static_cast<int>(code & 1u);
    const int c = col0 + 8 * static_cast<int>((code >> 2) & 31u) + static_cast<int>((code >> 1) & 1u);
    const int r = row0 + 8 * h;
    const float key = Larger ? s : -s;
    const auto gr = static_cast<std::int32_t>(a_row0 + r);
    const auto gc = static_cast<std::int32_t>(b_row0 + c);
    const float bk = h == 0 ? bak0 : bak1;
    const int bc = h == 0 ? bac0 : bac1;
    if ((code & 0x100u) != 0u && (key > bk || gc < bc)) fused_append(cnt_a, buck_a, cap_a, r, s, gc);
    if ((code & 0x200u) != 0u) {
      const topk_bar b = bar_b[c];
      if (key > b.key || gr < b.col) fused_append(cnt_b, buck_b, cap_b, c, s, gr);
    }
  }

  /// Scores one accumulator. Cosine and inner product make a padding row or column (aux NaN)
  /// score NaN, which every comparison below rejects and fmaxf ignores; Euclidean distances clamp
  /// NaN to 0, so there the padding is masked explicitly (`ok`). CZ: cosine with a nonzero
  /// cosine_zero (a zero row's scores are that value, not the 0 that 0 · (1/|x| = 0) gives).
  template <similarity_metric M, bool CZ>
  __device__ __forceinline__ float score_of(float acc, float ia, float ib) const {
    if constexpr (M == similarity_metric::cosine) {
      if constexpr (CZ) return (ia == 0.0f || ib == 0.0f) ? cosine_zero : acc * ia * ib;
      else return acc * ia * ib;
    } else if constexpr (M == similarity_metric::inner_product) {
      return acc * ia * ib;  // ia, ib: 1, or NaN for padding
    } else {
      return fused_score<M>(acc, ia, ib, cosine_zero);
    }
  }

  template <similarity_metric M, bool CZ, class Acc>
  __device__ __forceinline__ void run(const Acc (&d)[128], int row0, int col0, int m, int n, std::uint32_t stage) const {
    constexpr bool larger = M != similarity_metric::euclidean;
    constexpr bool euclid = M == similarity_metric::euclidean;
    const float pad = euclid ? 0.0f : __int_as_float(0x7fc00000);
    float ia[2], bak[2];
    int bac[2];
    bool okr[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row0 + 8 * h;
      okr[h] = r < m;
      const topk_bar b = okr[h] ? bar_a[r] : topk_bar{INFINITY, 0};
      ia[h] = okr[h] ? (M == similarity_metric::inner_product ? 1.0f : aux_a[r]) : pad;
      bak[h] = b.key;
      bac[h] = b.col;
    }
    // Columns in groups of 4 x 8 (16 scores per thread), their values and bars loaded first: one
    // 8-byte aux and one 16-byte bar load per column pair (col0 is even, a chunk starts at a
    // multiple of 256, both arrays hold one padding entry past the last row). The fast test has no
    // branch per score: the group's largest key per row against that row's bar, the larger key of
    // each column's two rows against the column's bar (about 4.5 instructions per score). Only
    // when the warp has a hit does it run the exact test per score, which stages (score,
    // position) in the thread's shared-memory slots by predicated stores (a branch per score ends
    // a basic block per score and serializes the latencies: measured slower, docs/similarity.md,
    // "the exact test"), then commits the staged candidates.
    const float* const aux_p = aux_b + col0;
    const topk_bar* const bar_p = bar_b + col0;
    const int lim = n - col0;  // column 8 j + e exists iff 8 j + e < lim
    constexpr int group = 4;
#pragma unroll
    for (int j0 = 0; j0 < 32; j0 += group) {
      float2 ib[group];
      int4 bb[group];
#pragma unroll
      for (int jj = 0; jj < group; ++jj) {
        const bool ok = 8 * (j0 + jj) < lim;
        const bool ok1 = 8 * (j0 + jj) + 1 < lim;
        ib[jj] = ok ? __ldg(reinterpret_cast<const float2*>(aux_p + 8 * (j0 + jj))) : make_float2(pad, pad);
        if constexpr (M == similarity_metric::inner_product) ib[jj] = make_float2(ok ? 1.0f : pad, ok1 ? 1.0f : pad);
        else if (!ok1) ib[jj].y = pad;
        bb[jj] = ok ? __ldg(reinterpret_cast<const int4*>(bar_p + 8 * (j0 + jj))) : make_int4(0, 0, 0, 0);
      }
      float rmax0 = -INFINITY, rmax1 = -INFINITY;
      bool hit = false;
#pragma unroll
      for (int jj = 0; jj < group; ++jj) {
        const int j = j0 + jj;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float ibe = e == 0 ? ib[jj].x : ib[jj].y;
          float k0 = score_of<M, CZ>(static_cast<float>(d[4 * j + e]), ia[0], ibe);
          float k1 = score_of<M, CZ>(static_cast<float>(d[4 * j + 2 + e]), ia[1], ibe);
          if constexpr (!larger) {
            const bool okc = 8 * j + e < lim;
            k0 = okc && okr[0] ? -k0 : -INFINITY;
            k1 = okc && okr[1] ? -k1 : -INFINITY;
          }
          rmax0 = fmaxf(rmax0, k0);
          rmax1 = fmaxf(rmax1, k1);
          hit = hit || fmaxf(k0, k1) >= __int_as_float(e == 0 ? bb[jj].x : bb[jj].z);
        }
      }
      hit = hit || rmax0 >= bak[0] || rmax1 >= bak[1];
      if (!__any_sync(0xFFFFFFFFu, hit)) continue;
      std::uint32_t at = stage;
#pragma unroll
      for (int jj = 0; jj < group; ++jj) {
        const int j = j0 + jj;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const bool okc = 8 * j + e < lim;
          const float ibe = e == 0 ? ib[jj].x : ib[jj].y;
          const float bkey = __int_as_float(e == 0 ? bb[jj].x : bb[jj].z);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const float sc = score_of<M, CZ>(static_cast<float>(d[4 * j + 2 * h + e]), ia[h], ibe);
            const float key = larger ? sc : -sc;
            const bool pa = okc && key >= bak[h];
            const bool pb = okc && okr[h] && key >= bkey;
            const unsigned code = static_cast<unsigned>(j << 2 | e << 1 | h) | (pa ? 0x100u : 0u) | (pb ? 0x200u : 0u);
            asm volatile(
                "{\n .reg .pred q;\n setp.ne.b32 q, %0, 0;\n @q st.shared.v2.b32 [%1], {%2, %3};\n}\n" ::"r"(
                    static_cast<int>(pa || pb)),
                "r"(at), "r"(__float_as_uint(sc)), "r"(code)
                : "memory");
            at += (pa || pb) ? 1024u : 0u;
          }
        }
      }
      for (std::uint32_t q = stage; q != at; q += 1024u) {
        unsigned sv, code;
        asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(sv), "=r"(code) : "r"(q) : "memory");
        commit<larger>(__uint_as_float(sv), code, row0, col0, bak[0], bac[0], bak[1], bac[1]);
      }
    }
  }

  template <class Acc>
  __device__ void consume(const Acc (&d)[128], std::int64_t row0, std::int64_t col0, std::int64_t m, std::int64_t n,
                          std::uint32_t stage) const {
    // Strips and chunks are far below 2^31 rows and columns: 32-bit positions from here.
    const auto r = static_cast<int>(row0), c = static_cast<int>(col0), mm = static_cast<int>(m), nn = static_cast<int>(n);
    switch (metric) {
      case similarity_metric::cosine:
        if (cosine_zero == 0.0f) run<similarity_metric::cosine, false>(d, r, c, mm, nn, stage);
        else run<similarity_metric::cosine, true>(d, r, c, mm, nn, stage);
        break;
      case similarity_metric::inner_product: run<similarity_metric::inner_product, false>(d, r, c, mm, nn, stage); break;
      default: run<similarity_metric::euclidean, false>(d, r, c, mm, nn, stage); break;
    }
  }
};

/// One merge: local rows [0, rows) are global rows row0 + r; their candidates are in `buck`
/// (cap per row, count in cnt, which the merge zeroes); a row whose count passed cap has its pairs
/// with the global rows [other0, other1) recomputed instead.
template <class T>
struct fused_merge_args {
  pairwise::detail::topk_entry<float>* state = nullptr;
  topk_bar* bars = nullptr;
  int k = 0;
  std::int64_t rows = 0, row0 = 0;
  unsigned* cnt = nullptr;
  const pairwise::detail::topk_entry<float>* buck = nullptr;
  std::int32_t cap = 0;
  const T* data = nullptr;
  std::int64_t ld = 0, d = 0;
  const float* aux = nullptr;  // global
  std::int64_t other0 = 0, other1 = 0;
  float cosine_zero = 0.0f;
  unsigned long long* recomputed = nullptr;
  int rows_per_warp = 1;  // 1..32: a warp serves this many consecutive rows in turn
};

template <class T, similarity_metric M>
__global__ void fused_merge_kernel(const fused_merge_args<T> a) {
  constexpr bool larger = M != similarity_metric::euclidean;
  using entry = pairwise::detail::topk_entry<float>;
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const std::int64_t warp = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const std::int64_t nwarps = (static_cast<std::int64_t>(gridDim.x) * blockDim.x) >> 5;
  // rows_per_warp rows per step: one read of their counts, then the warp serves each row that has
  // candidates in turn.
  const int G = a.rows_per_warp;
  for (std::int64_t g0 = warp * G; g0 < a.rows; g0 += nwarps * G) {
    const std::int64_t mine = g0 + lane;
    const unsigned my_count = lane < G && mine < a.rows ? a.cnt[mine] : 0u;
    unsigned todo = __ballot_sync(0xFFFFFFFFu, my_count != 0u);
    while (todo != 0u) {
      const int src = __ffs(static_cast<int>(todo)) - 1;
      todo &= todo - 1u;
      const std::int64_t lr = g0 + src;
      const unsigned count = __shfl_sync(0xFFFFFFFFu, my_count, src);
      const std::int64_t gr = a.row0 + lr;
      pairwise::detail::warp_topk<float, larger> t;
      t.load(a.state + gr * a.k, a.k);
      if (count <= static_cast<unsigned>(a.cap)) {
        const entry* b = a.buck + lr * a.cap;
        for (unsigned q = 0; q < count; q += 32) {
          const bool in = q + static_cast<unsigned>(lane) < count;
          const entry e = in ? b[q + static_cast<unsigned>(lane)] : entry{0.0f, INT_MAX};
          t.offer(in, e.v, e.c);
        }
      } else {
        // The bucket overflowed: none of it is used; the row's pairs of this chunk are computed
        // again, one column per lane.
        const T* x = a.data + gr * a.ld;
        const float ia = a.aux[gr];
        for (std::int64_t o0 = a.other0; o0 < a.other1; o0 += 32) {
          const std::int64_t o = o0 + lane;
          const bool in = o < a.other1;
          float acc = 0.0f;
          if (in) {
            const T* y = a.data + o * a.ld;
            for (std::int64_t q = 0; q < a.d; ++q) acc = fmaf(to_float(x[q]), to_float(y[q]), acc);
          }
          const float s = fused_score<M>(acc, ia, in ? a.aux[o] : 0.0f, a.cosine_zero);
          t.offer(in, s, static_cast<std::int32_t>(o));
        }
        if (lane == 0) atomicAdd(a.recomputed, 1ull);
      }
      t.store(a.state + gr * a.k);
      if (lane == 0) {
        a.bars[gr] = topk_bar{larger ? t.wv : -t.wv, t.wc};
        a.cnt[lr] = 0u;
      }
    }
  }
}

template <bool Larger>
__global__ void fused_bars_kernel(const pairwise::detail::topk_entry<float>* __restrict__ state, std::int64_t n, int k,
                                  topk_bar* __restrict__ bars) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const pairwise::detail::topk_entry<float> e = state[i * k + k - 1];
    bars[i] = topk_bar{Larger ? e.v : -e.v, e.c};
  }
}

template <class T>
inline constexpr bool fused_topk_type = std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half> ||
                                        std::is_same_v<T, float>;

/// Whether the fused job takes A·Aᵀ top-k of these rows: bf16 / half rows, or float rows with
/// math_mode::tf32; the automatic or wgmma GEMM path; at most one device named; that device runs
/// sm_90a code of this build. Returns the device, or -1.
template <class T, class Options>
int fused_topk_device(const matrix_view<const T>& a, const Options& opt, int rows_device) {
  if constexpr (!fused_topk_type<T>) {
    (void)a, (void)opt, (void)rows_device;
    return -1;
  } else {
    if (std::is_same_v<T, float> && opt.gemm.math != ::spillway::gemm::math_mode::tf32) return -1;
    using ::spillway::gemm::gemm_path;
    if (opt.gemm.path != gemm_path::automatic && opt.gemm.path != gemm_path::wgmma) return -1;
    if (opt.devices.size() > 1) return -1;
    // Rows in one device's memory run there; naming another device is the strip path's error.
    if (rows_device >= 0 && !opt.devices.empty() && opt.devices[0] != rows_device) return -1;
    int dev = rows_device;
    if (dev < 0) dev = opt.devices.empty() ? current_device() : opt.devices[0];
    if ((tile::build_features(dev) & tile::feature_wgmma) == 0) return -1;
    if (a.rows < 2 || a.cols < 1) return -1;
    return dev;
  }
}

/// The fused job's buffers on `dev` (bytes) for n rows: see fused_topk_run.
struct fused_topk_layout {
  std::int64_t P = 0, S = 0, W = 0;
  std::int64_t blocks = 0;      // seed blocks: S rows each, the last up to 1.5 S
  std::int64_t widest = 0;      // rows of the largest seed block
  std::int32_t cap_a = 0, cap_b = 0;
  std::int64_t ldd = 0;
  bool copy_rows = true;
  std::size_t bytes = 0;
};

inline std::size_t fused_round(std::size_t b) {
  return ::spillway::detail::align_up(b, ::spillway::detail::slot_buffer_alignment, "similarity top-k plan");
}

template <class T>
fused_topk_layout fused_topk_plan(std::int64_t n, int k, std::int64_t max_panel_rows, bool copy_rows,
                                  std::int64_t ldd, std::size_t budget) {
  const fused_topk_sizes& z = fused_topk_hook().sizes;
  fused_topk_layout L;
  L.ldd = ldd;
  L.copy_rows = copy_rows;
  std::int64_t P = z.strip_rows > 0 ? z.strip_rows : 2048;
  if (max_panel_rows > 0) P = std::min(P, max_panel_rows);
  P = std::max<std::int64_t>(128, P / 128 * 128);
  L.P = P;
  L.S = z.seed_rows > 0 ? std::max(P, z.seed_rows / P * P) : 4 * P;
  L.blocks = std::max<std::int64_t>(1, n / L.S);
  if (n - L.blocks * L.S >= L.S / 2) ++L.blocks;
  L.widest = std::max(std::min(L.S, n), n - (L.blocks - 1) * L.S);
  L.cap_a = z.row_capacity > 0 ? z.row_capacity : 32 * k;
  L.cap_b = z.col_capacity > 0 ? z.col_capacity : 2 * k;
  std::int64_t W = z.chunk_cols > 0 ? z.chunk_cols : std::int64_t{262144};
  W = std::max<std::int64_t>(256, std::min(W, n));
  const auto fixed = [&](std::int64_t w) {
    const auto N = static_cast<std::size_t>(n);
    const std::int64_t s = L.widest;
    std::size_t b = 0;
    if (copy_rows) b += fused_round(N * static_cast<std::size_t>(ldd) * sizeof(T));
    b += fused_round((N + 1) * 4);                               // aux
    b += fused_round(N * static_cast<std::size_t>(k) * 8);       // lists
    b += fused_round((N + 1) * sizeof(topk_bar));                // bars
    b += fused_round(static_cast<std::size_t>(P) * 4) + fused_round(static_cast<std::size_t>(P) * L.cap_a * 8);
    b += fused_round(static_cast<std::size_t>(w) * 4) + fused_round(static_cast<std::size_t>(w) * L.cap_b * 8);
    b += fused_round(static_cast<std::size_t>(s * s) * 4);       // seed scores
    b += 3 * fused_round(N * 12);                                // export: values, indices (+ slack)
    return b;
  };
  while (W > 16384 && fixed(W) > budget) W /= 2;
  L.W = W;
  L.bytes = fixed(W);
  return L;
}

/// The report of a fused job before it runs: one strip per task, all on `dev`, nothing completed.
inline pairwise::pair_report fused_topk_report(const fused_topk_layout& L, std::int64_t n, int k, int dev,
                                               std::size_t budget_bytes, std::size_t elem_bytes) {
  const std::int64_t strips = (n + L.P - 1) / L.P;
  pairwise::pair_report rep;
  rep.plan.panel_rows = L.P;
  rep.plan.strips = strips;
  rep.plan.b_panels = 0;
  rep.plan.resident = true;
  rep.plan.slots = 1;
  rep.plan.shared_bytes = L.bytes;
  rep.plan.resident_bytes = L.copy_rows ? static_cast<std::size_t>(n * L.ldd) * elem_bytes : 0;
  rep.plan.topk_state_bytes = static_cast<std::size_t>(n) * static_cast<std::size_t>(k) * 8;
  rep.budget_bytes = budget_bytes;
  rep.symmetric = true;
  rep.rows = n;
  job_report& jr = rep.job;
  jr.tasks_total = static_cast<std::size_t>(strips);
  jr.completed.assign(static_cast<std::size_t>(strips), false);
  jr.devices = {dev};
  jr.tasks_per_device = {0};
  jr.bytes_per_device = {0};
  jr.slots_per_device = 1;
  jr.device_bytes_per_device = L.bytes;
  return rep;
}

/// The device state of one fused job on the current device: the rows (a copy when they cannot be
/// read in place), per-row values, lists and bars, the buckets of a strip's rows (a) and of a
/// chunk's columns (b), the seeds' scratch scores, two counters; a compute and an upload stream.
/// The last member drains both streams first on destruction, so an exception leaves no copy or
/// kernel running on memory being freed.
template <class T>
struct fused_topk_buffers {
  using entry = pairwise::detail::topk_entry<float>;
  stream cs, us;  // compute; upload
  device_buffer<T> own_rows;
  device_buffer<float> aux;  // + 1: the sink's paired loads
  device_buffer<entry> state;
  device_buffer<topk_bar> bars;
  device_buffer<unsigned> cnt_a, cnt_b;
  device_buffer<entry> buck_a, buck_b;
  device_buffer<float> scratch;
  device_buffer<unsigned long long> recomputed, bad_row;
  struct drain {
    const stream& a;
    const stream& b;
    ~drain() {
      (void)cudaStreamSynchronize(a.view().value());
      (void)cudaStreamSynchronize(b.view().value());
    }
  } drain_on_exit{us, cs};

  fused_topk_buffers(int dev, const fused_topk_layout& L, std::int64_t n, int k)
      : cs(dev),
        us(dev),
        own_rows(L.copy_rows ? static_cast<std::size_t>(n * L.ldd) : 0, cs.view()),
        aux(static_cast<std::size_t>(n) + 1, cs.view()),
        state(static_cast<std::size_t>(n) * static_cast<std::size_t>(k), cs.view()),
        bars(static_cast<std::size_t>(n) + 1, cs.view()),
        cnt_a(static_cast<std::size_t>(L.P), cs.view()),
        cnt_b(static_cast<std::size_t>(L.W), cs.view()),
        buck_a(static_cast<std::size_t>(L.P) * static_cast<std::size_t>(L.cap_a), cs.view()),
        buck_b(static_cast<std::size_t>(L.W) * static_cast<std::size_t>(L.cap_b), cs.view()),
        scratch(static_cast<std::size_t>(L.widest * L.widest), cs.view()),
        recomputed(1, cs.view()),
        bad_row(1, cs.view()) {}
};

/// Profile events of a fused job (fused_topk_hook().profile): start, seeds done, then per chunk
/// GEMM start, GEMM end, merges end, then the end.
struct fused_topk_marks {
  bool on = false;
  std::vector<event> marks;
  void mark(stream_view s) {
    if (!on) return;
    marks.emplace_back(event::timing::enabled);
    marks.back().record(s);
  }
  /// The hook's seed, GEMM, merge and device times from the events (after the stream finished).
  void publish() const {
    if (!on) return;
    const auto ms = [&](std::size_t x, std::size_t y) {
      float v = 0;
      SPILLWAY_CUDA_TRY(cudaEventElapsedTime(&v, marks[x].value(), marks[y].value()));
      return v;
    };
    auto& hk = fused_topk_hook();
    hk.seed_ms = ms(0, 1);
    hk.gemm_ms = hk.merge_ms = 0;
    for (std::size_t c = 2; c + 3 <= marks.size() - 1; c += 3) {
      hk.gemm_ms += ms(c, c + 1);
      hk.merge_ms += ms(c + 1, c + 2);
    }
    hk.device_ms = ms(0, marks.size() - 1);
  }
};

/// The seed blocks: blocks of S rows; a remainder under S/2 joins the last block (a small block's
/// rows would start with poor bars and flood their buckets in the first strip). End of block b.
inline std::int64_t fused_block_end(const fused_topk_layout& L, std::int64_t n, std::int64_t b) {
  return b == L.blocks - 1 ? n : (b + 1) * L.S;
}

/// Rows in, block by block on the upload stream; each block's finiteness scan, norms and seed (the
/// block's own pairs, dense, through the strip path's GEMM and selection) on the compute stream as
/// soon as its rows are there; then the bars from the seeded lists. Refuses non-finite rows (with
/// check_finite) before any strip runs. Returns the bytes copied from the host.
template <class T, class Options>
std::size_t fused_topk_seed(fused_topk_buffers<T>& B, const T* rows, const matrix_view<const T>& a,
                            int rows_device, const fused_topk_layout& L, const pairwise::topk_options& tk,
                            const Options& opt, const char* who, fused_topk_marks& marks) {
  namespace pd = ::spillway::pairwise::detail;
  const stream_view s = B.cs.view();
  const std::int64_t n = a.rows, d = a.cols, ldd = L.ldd;
  const int k = tk.k;
  const bool larger = is_similarity(opt.metric);
  B.aux.fill_bytes_async(0, s);
  B.bars.fill_bytes_async(0, s);
  B.cnt_a.fill_bytes_async(0, s);
  B.cnt_b.fill_bytes_async(0, s);
  B.recomputed.fill_bytes_async(0, s);
  B.bad_row.fill_bytes_async(0xFF, s);
  pd::with_larger(larger, [&](auto Lg) {
    pd::topk_init_kernel<float, decltype(Lg)::value>
        <<<grid_blocks(n * k, 256), 256, 0, s.value()>>>(B.state.data(), n * k);
  });
  SPILLWAY_CHECK_LAUNCH();
  marks.mark(s);
  event allocated;
  allocated.record(s);
  B.us.view().wait(allocated);
  std::vector<event> arrived;
  arrived.reserve(static_cast<std::size_t>(L.blocks));
  std::size_t bytes_in = 0;
  for (std::int64_t b = 0; b < L.blocks; ++b) {
    const std::int64_t b0 = b * L.S, bn = fused_block_end(L, n, b) - b0;
    if (L.copy_rows) {
      SPILLWAY_CUDA_TRY(cudaMemcpy2DAsync(
          B.own_rows.data() + b0 * ldd, static_cast<std::size_t>(ldd) * sizeof(T), a.data + b0 * a.ld,
          static_cast<std::size_t>(a.ld) * sizeof(T), static_cast<std::size_t>(d) * sizeof(T),
          static_cast<std::size_t>(bn), rows_device >= 0 ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice,
          B.us.view().value()));
      if (rows_device < 0) bytes_in += static_cast<std::size_t>(bn * d) * sizeof(T);
    }
    arrived.emplace_back();
    arrived.back().record(B.us.view());
  }
  for (std::int64_t b = 0; b < L.blocks; ++b) {
    const std::int64_t b0 = b * L.S, bn = fused_block_end(L, n, b) - b0;
    s.wait(arrived[static_cast<std::size_t>(b)]);
    const T* br = rows + b0 * ldd;
    if (opt.check_finite) {
      first_nonfinite_row_kernel<T>
          <<<grid_blocks(bn * d, 256), 256, 0, s.value()>>>(br, bn, d, ldd, B.bad_row.data(), b0);
      SPILLWAY_CHECK_LAUNCH();
    }
    row_aux_async(br, bn, d, ldd, opt.metric, B.aux.data() + b0, s);
    const auto A = row_major(br, bn, d, ldd);
    const similarity_epilogue epi{opt.metric, B.aux.data() + b0, B.aux.data() + b0, opt.cosine_zero};
    ::spillway::gemm::gemm_async(s, 1.0f, A, A.t(), 0.0f, row_major(B.scratch.data(), bn, bn, bn), opt.gemm,
                                 epi);
    pd::with_larger(larger, [&](auto Lg) {
      pd::topk_rows_kernel<float, decltype(Lg)::value><<<grid_blocks(bn, 8), 256, 0, s.value()>>>(
          B.scratch.data(), bn, bn, b0, b0, !tk.include_diagonal, B.state.data(), k);
    });
    SPILLWAY_CHECK_LAUNCH();
  }
  pd::with_larger(larger, [&](auto Lg) {
    fused_bars_kernel<decltype(Lg)::value>
        <<<grid_blocks(n, 256), 256, 0, s.value()>>>(B.state.data(), n, k, B.bars.data());
  });
  SPILLWAY_CHECK_LAUNCH();
  marks.mark(s);
  if (opt.check_finite) {
    // Refused before any strip runs: the seeds' scores are thrown away with the buffers.
    const std::vector<unsigned long long> h = B.bad_row.to_host(s);
    if (h[0] != ~0ULL) refuse_nonfinite(static_cast<std::int64_t>(h[0]), who, "A");
  }
  return bytes_in;
}

/// Merges the buckets of local rows [0, rows) = global row0 + r into their lists (recomputing the
/// pairs with global rows [other0, other1) of an overflowed bucket).
template <class T>
void fused_topk_merge(fused_merge_args<T> m, similarity_metric metric, std::int64_t rows, std::int64_t row0,
                      unsigned* cnt, const pairwise::detail::topk_entry<float>* buck, std::int32_t cap,
                      std::int64_t other0, std::int64_t other1, stream_view s) {
  m.rows = rows;
  m.row0 = row0;
  m.cnt = cnt;
  m.buck = buck;
  m.cap = cap;
  m.other0 = other0;
  m.other1 = other1;
  const unsigned grid = grid_blocks((m.rows + m.rows_per_warp - 1) / m.rows_per_warp, 8);
  switch (metric) {
    case similarity_metric::cosine:
      fused_merge_kernel<T, similarity_metric::cosine><<<grid, 256, 0, s.value()>>>(m);
      break;
    case similarity_metric::inner_product:
      fused_merge_kernel<T, similarity_metric::inner_product><<<grid, 256, 0, s.value()>>>(m);
      break;
    default:
      fused_merge_kernel<T, similarity_metric::euclidean><<<grid, 256, 0, s.value()>>>(m);
      break;
  }
  SPILLWAY_CHECK_LAUNCH();
}

/// Strip t's chunks: each chunk of columns after the strip's seed block is one GEMM whose fragment
/// sink fills the buckets, then the strip's rows and the chunk's columns merge theirs. Returns the
/// chunks run.
template <class T>
std::int64_t fused_topk_strip(fused_topk_buffers<T>& B, const fused_merge_args<T>& ma, const T* rows,
                              const fused_topk_layout& L, std::int64_t n, std::int64_t d, std::int64_t t,
                              similarity_metric metric, float cz, fused_topk_marks& marks) {
  const stream_view s = B.cs.view();
  const std::int64_t ldd = L.ldd, P = L.P;
  const std::int64_t r0 = t * P, rn = std::min(P, n - r0);
  std::int64_t c0 = fused_block_end(L, n, std::min(r0 / L.S, L.blocks - 1));  // the later blocks' columns
  std::int64_t seen = c0, chunks = 0;
  while (c0 < n) {
    const std::int64_t w = std::min({seen, L.W, n - c0});
    fused_topk_sink sink;
    sink.metric = metric;
    sink.cosine_zero = cz;
    sink.aux_a = B.aux.data() + r0;
    sink.aux_b = B.aux.data() + c0;
    sink.bar_a = B.bars.data() + r0;
    sink.bar_b = B.bars.data() + c0;
    sink.a_row0 = static_cast<std::int32_t>(r0);
    sink.b_row0 = static_cast<std::int32_t>(c0);
    sink.cnt_a = B.cnt_a.data();
    sink.buck_a = B.buck_a.data();
    sink.cap_a = L.cap_a;
    sink.cnt_b = B.cnt_b.data();
    sink.buck_b = B.buck_b.data();
    sink.cap_b = L.cap_b;
    marks.mark(s);
    ::spillway::gemm::fragment_sink_gemm_async(s, row_major(rows + r0 * ldd, rn, d, ldd),
                                               row_major(rows + c0 * ldd, w, d, ldd), sink);
    marks.mark(s);
    // The strip's rows, then the chunk's columns as rows.
    fused_topk_merge(ma, metric, rn, r0, B.cnt_a.data(), B.buck_a.data(), L.cap_a, c0, c0 + w, s);
    fused_topk_merge(ma, metric, w, c0, B.cnt_b.data(), B.buck_b.data(), L.cap_b, r0, r0 + rn, s);
    marks.mark(s);
    seen += w;
    c0 += w;
    ++chunks;
  }
  return chunks;
}

/// The lists out: values and indices straight into the host result `r`; the hook's count of
/// recomputed rows.
template <class T>
void fused_topk_export(fused_topk_buffers<T>& B, std::int64_t n, int k, pairwise::topk_result<float>& r) {
  const stream_view s = B.cs.view();
  const std::size_t per = static_cast<std::size_t>(n) * static_cast<std::size_t>(k);
  device_buffer<float> dv(per, s);
  device_buffer<std::int64_t> di(per, s);
  pairwise::detail::topk_export_kernel<float>
      <<<grid_blocks(static_cast<std::int64_t>(per), 256), 256, 0, s.value()>>>(
          B.state.data(), static_cast<std::int64_t>(per), dv.data(), di.data());
  SPILLWAY_CHECK_LAUNCH();
  SPILLWAY_CUDA_TRY(
      cudaMemcpyAsync(r.values.data(), dv.data(), per * sizeof(float), cudaMemcpyDeviceToHost, s.value()));
  SPILLWAY_CUDA_TRY(cudaMemcpyAsync(r.indices.data(), di.data(), per * sizeof(std::int64_t),
                                    cudaMemcpyDeviceToHost, s.value()));
  const std::vector<unsigned long long> rc = B.recomputed.to_host(s);
  fused_topk_hook().last_recomputed_rows = rc[0];
  s.synchronize();
}

/// Runs the fused job; nullopt when it does not apply (the caller then takes the strip path).
/// `Options` is similarity_options. Steps: plan (fused_topk_plan), report, buffers, seed
/// (fused_topk_seed), strips with progress and cancel (fused_topk_strip), export.
template <class T, class Options>
std::optional<pairwise::topk_result<float>> fused_similarity_topk(const matrix_view<const T>& a,
                                                                  const pairwise::topk_options& tk,
                                                                  const Options& opt, int rows_device,
                                                                  const char* who) {
  fused_topk_hook().last_ran = false;
  const int dev = fused_topk_device(a, opt, rows_device);
  if (dev < 0) return std::nullopt;
  const auto t_start = std::chrono::steady_clock::now();
  device_guard guard(dev);
  const std::int64_t n = a.rows, d = a.cols;
  const int k = tk.k;
  constexpr auto align = static_cast<std::int64_t>(16 / sizeof(T));
  const bool in_place =
      rows_device >= 0 && reinterpret_cast<std::uintptr_t>(a.data) % 16 == 0 && a.ld % align == 0;
  const std::int64_t ldd = in_place ? a.ld : (d + align - 1) / align * align;
  const memory_budget budget = memory_budget::or_default(opt.budget, std::vector<int>{dev});
  const fused_topk_layout L = fused_topk_plan<T>(n, k, opt.max_panel_rows, !in_place, ldd, budget.bytes());
  if (L.bytes > budget.bytes()) return std::nullopt;
  pairwise::pair_report rep = fused_topk_report(L, n, k, dev, budget.bytes(), sizeof(T));
  const std::int64_t strips = rep.plan.strips;
  job_report& jr = rep.job;
  if (opt.report != nullptr) *opt.report = rep;

  // The host result is allocated on another thread while the device works.
  auto host_result =
      std::async(std::launch::async, [n, k] { return pairwise::detail::empty_topk<float>(n, k); });
  fused_topk_buffers<T> B(dev, L, n, k);
  const stream_view s = B.cs.view();
  const T* rows = L.copy_rows ? B.own_rows.data() : a.data;
  fused_topk_marks marks;
  marks.on = fused_topk_hook().profile;
  const std::size_t bytes_in = fused_topk_seed(B, rows, a, rows_device, L, tk, opt, who, marks);
  jr.bytes_moved = bytes_in;
  jr.bytes_per_device[0] = bytes_in;

  // The merge arguments that stay the same; per merge the rest is set.
  fused_merge_args<T> ma;
  ma.state = B.state.data();
  ma.bars = B.bars.data();
  ma.k = k;
  ma.data = rows;
  ma.ld = ldd;
  ma.d = d;
  ma.aux = B.aux.data();
  ma.cosine_zero = opt.cosine_zero;
  ma.recomputed = B.recomputed.data();
  std::int64_t chunks = 0;
  std::vector<event> strip_done(3);
  std::size_t done = 0;
  const auto report_progress = [&](std::size_t upto) -> bool {
    // Strips [0, upto) have completed on the device.
    for (; done < upto; ++done) jr.completed[done] = true;
    jr.tasks_completed = done;
    jr.tasks_per_device[0] = done;
    if (!opt.progress) return true;
    progress_info pi;
    pi.tasks_done = done;
    pi.tasks_total = jr.tasks_total;
    pi.bytes_moved = jr.bytes_moved;
    pi.elapsed_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    return opt.progress(pi);
  };
  std::int64_t current = -1;
  try {
    if (!report_progress(0)) jr.cancelled = true;
    for (std::int64_t t = 0; t < strips && !jr.cancelled; ++t) {
      current = t;
      chunks += fused_topk_strip(B, ma, rows, L, n, d, t, opt.metric, opt.cosine_zero, marks);
      strip_done[static_cast<std::size_t>(t % 3)].record(s);
      if (opt.progress && t >= 2) {
        // Two strips of lookahead keep the device busy while the host reports.
        strip_done[static_cast<std::size_t>((t - 2) % 3)].synchronize();
        if (!report_progress(static_cast<std::size_t>(t - 1))) jr.cancelled = true;
      }
    }
    current = -1;
    marks.mark(s);
    s.synchronize();
    marks.publish();
    if (!jr.cancelled) report_progress(static_cast<std::size_t>(strips));
  } catch (const std::exception& e) {
    (void)cudaStreamSynchronize(s.value());
    if (opt.report != nullptr) *opt.report = rep;
    throw pipeline_error(std::string(who) + ": " +
                             (current >= 0 ? "strip " + std::to_string(current) : std::string("the job")) +
                             " failed: " + e.what(),
                         current >= 0 ? static_cast<std::size_t>(current) : pipeline_error::no_task, dev, jr);
  }

  pairwise::topk_result<float> r = host_result.get();
  fused_topk_export(B, n, k, r);
  jr.elapsed_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  fused_topk_hook().last_chunks = chunks;
  fused_topk_hook().last_ran = true;
  if (opt.report != nullptr) *opt.report = rep;
  return r;
}

}  // namespace spillway::similarity::detail
