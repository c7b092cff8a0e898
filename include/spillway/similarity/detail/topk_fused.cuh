// spillway/similarity/detail/topk_fused.cuh — all-pairs top-k of bf16 / half / TF32 rows
// without writing the scores: the Hopper GEMM hands its accumulators to a filter that keeps only
// the pairs that can still enter a row's list. This file: the job's device code (the filter, the
// merge, the bars) and its test hook; the job itself is a sink of the pair job,
// fused_topk_sink.cuh.
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
//            chunk one GEMM (gemm::fragment_sink_gemm_async with fused_topk_filter): a score (i, j)
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
#include <spillway/core/stream.hpp>
#include <spillway/gemm/fragment_sink.cuh>
#include <spillway/gemm/gemm.cuh>
#include <spillway/gemm/matrix_view.hpp>
#include <spillway/gemm/options.hpp>
#include <spillway/pairwise/sink_kernels.cuh>
#include <spillway/pairwise/sinks.hpp>
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
  std::int64_t chunk_cols = 0;     ///< W, the widest chunk (default fused_widest_chunk)
  std::int32_t row_capacity = 0;   ///< cap_a per strip row (default 32 k)
  std::int32_t col_capacity = 0;   ///< cap_b per chunk column (default 2 k)
  /// Several workers: a worker sends its lists to the next one every this many of its strips
  /// (default: at its strips 2, 4, 8, … and every max(16, strips / (16 · workers)); see
  /// fused_topk_sink's bar exchange).
  std::int64_t exchange_every = 0;
};
/// Test hook (detail): sizes for the next fused jobs of this process, and what the last one did.
struct fused_topk_test_hook {
  fused_topk_sizes sizes{};
  // Written by every job (atomics: jobs may run on several threads at once; then "last" is any).
  std::atomic<std::uint64_t> last_recomputed_rows{0};  ///< overflowed buckets recomputed on the CUDA cores
  std::atomic<std::int64_t> last_chunks{0};
  /// Bucket entries the filter passed to the merges (seeds not counted); counted with `profile` only.
  std::atomic<std::uint64_t> last_candidates{0};
  /// Bar exchanges between the workers of one process (a worker's bars raised from another's lists).
  std::atomic<std::int64_t> last_exchanges{0};
  std::atomic<bool> last_ran{false};                    ///< the last similarity_topk took the fused path
  /// With profile set, the next jobs time their phases with events (three per chunk, read after
  /// the job's one final synchronize): rows in + seeds, the chunks' GEMMs, their merges, the
  /// whole device part (milliseconds). `spillway-knn --profile` prints them.
  bool profile = false;
  float seed_ms = 0, gemm_ms = 0, merge_ms = 0, device_ms = 0;
  /// The binary mode (binary_topk.cuh) with profile: its sign words and per-row values, and its
  /// rescoring (its seeds, GEMMs, merges and whole device part in the fields above).
  float signs_ms = 0, rescore_ms = 0;
  /// With profile: each worker's device time (its setup to its last strip) and the collect after
  /// them (the workers' lists merged and brought to the host), milliseconds.
  std::vector<float> worker_ms;
  float collect_ms = 0;
};
inline fused_topk_test_hook& fused_topk_hook() {
  static fused_topk_test_hook h;
  return h;
}

/// The filter's and merges' own metric for rows of bits (binary_topk.cuh: sign bits): acc =
/// popc(a AND b), the rows' values their popcounts, the score 2·acc − |a| − |b| = −Hamming(a, b),
/// exact in float; larger is better. Not a similarity_metric of the API (no job takes it).
inline constexpr auto fused_hamming = static_cast<similarity_metric>(0x48);

template <similarity_metric M>
__device__ __forceinline__ float fused_score(float acc, float ia, float ib, float cosine_zero) {
  if constexpr (M == fused_hamming)
    return 2.0f * acc - ia - ib;
  else
    return similarity_score(M, acc, ia, ib, cosine_zero);  // M is a constant: the branches fold away
}

/// A recomputed pair's inner product over d elements of two rows: float fused multiply-adds, or
/// for words of bits the count of common bits.
template <class T>
__device__ __forceinline__ float fused_dot(const T* x, const T* y, std::int64_t d) {
  if constexpr (std::is_same_v<T, std::uint32_t>) {
    int c = 0;
    for (std::int64_t q = 0; q < d; ++q) c += __popc(x[q] & y[q]);
    return static_cast<float>(c);
  } else {
    float acc = 0.0f;
    for (std::int64_t q = 0; q < d; ++q) acc = fmaf(to_float(x[q]), to_float(y[q]), acc);
    return acc;
  }
}

__device__ __forceinline__ void fused_append(unsigned* cnt, pairwise::detail::topk_entry<float>* buck, std::int32_t cap,
                                             std::int64_t slot, float v, std::int32_t col) {
  const unsigned pos = atomicAdd(cnt + slot, 1u);
  if (pos < static_cast<unsigned>(cap)) buck[slot * cap + pos] = pairwise::detail::topk_entry<float>{v, col};
}

/// The Hopper GEMM's fragment sink (see gemm/fragment_sink.cuh): A's rows are a strip's, B's rows a
/// chunk's columns; every index here is local to them except the columns written to buckets.
/// Float accumulators are scored by `metric`; int32 ones (rows of bits) by fused_hamming.
struct fused_topk_filter {
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
    } else {                 // Euclidean; fused_hamming (ia, ib popcounts, or NaN for padding)
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
      // Rows of bits (fused_hamming, one worker): a strip's columns all follow every column its rows'
      // lists hold (their blocks, earlier chunks, earlier strips' rows), so a score that only ties a
      // row's bar loses to it, and integer scores tie often: the row side's test is strict.
      if constexpr (M == fused_hamming)
        hit = hit || rmax0 > bak[0] || rmax1 > bak[1];
      else
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
            const bool pa = okc && (M == fused_hamming ? key > bak[h] : key >= bak[h]);
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
    if constexpr (std::is_same_v<Acc, std::int32_t>) {
      run<fused_hamming, false>(d, r, c, mm, nn, stage);  // counts of bits: the one metric they take
    } else {
      switch (metric) {
        case similarity_metric::cosine:
          if (cosine_zero == 0.0f)
            run<similarity_metric::cosine, false>(d, r, c, mm, nn, stage);
          else
            run<similarity_metric::cosine, true>(d, r, c, mm, nn, stage);
          break;
        case similarity_metric::inner_product:
          run<similarity_metric::inner_product, false>(d, r, c, mm, nn, stage);
          break;
        default:
          run<similarity_metric::euclidean, false>(d, r, c, mm, nn, stage);
          break;
      }
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
  unsigned long long* candidates = nullptr;  // + every count merged (one atomic per warp)
  int rows_per_warp = 1;  // 1..32: a warp serves this many consecutive rows in turn
};

/// A list place (value v, column c) as a bar: key v for similarities, −v for distances.
template <bool Larger>
__device__ __forceinline__ topk_bar fused_bar_of(float v, std::int32_t c) {
  return topk_bar{Larger ? v : -v, c};
}
/// Bars only rise: b becomes nb where nb is the better place (a larger key; at equal keys the
/// smaller column, as the lists sort).
__device__ __forceinline__ void fused_raise_bar(topk_bar& b, topk_bar nb) {
  const topk_bar ob = b;
  if (nb.key > ob.key || (nb.key == ob.key && nb.col < ob.col)) b = nb;
}

/// Metric: a similarity_metric, or fused_hamming (not an enumerator, so the kernel takes it as an
/// int: a template argument of a kernel must be one for the host stub's sake).
template <class T, int Metric, int B>
__global__ void fused_merge_kernel(const fused_merge_args<T> a) {
  constexpr auto M = static_cast<similarity_metric>(Metric);
  constexpr bool larger = M != similarity_metric::euclidean;
  using entry = pairwise::detail::topk_entry<float>;
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const std::int64_t warp = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const std::int64_t nwarps = (static_cast<std::int64_t>(gridDim.x) * blockDim.x) >> 5;
  // rows_per_warp rows per step: one read of their counts, then the warp serves each row that has
  // candidates in turn.
  const int G = a.rows_per_warp;
  unsigned long long offered = 0;  // lane 0: the counts this warp merged
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
      pairwise::detail::warp_topk<float, larger, B> t;
      t.load(a.state + gr * a.k, a.k);
      if (count <= static_cast<unsigned>(a.cap)) {
        const entry* b = a.buck + lr * a.cap;
        for (unsigned q = 0; q < count; q += 32) {
          const bool in = q + static_cast<unsigned>(lane) < count;
          const entry e = in ? b[q + static_cast<unsigned>(lane)] : entry{0.0f, INT_MAX};
          if constexpr (B == 4) {
            // 128-place lists: an insert shifts four blocks, so many passing candidates merge at
            // once (topk_merge32: ~40 shuffle steps for the 32, against ~14 per insert).
            const bool pass = in && pairwise::detail::topk_better_dev<float, larger>(e.v, e.c, t.wv, t.wc);
            if (__popc(__ballot_sync(0xFFFFFFFFu, pass)) > 4) {
              pairwise::detail::topk_merge32(
                  t, pass ? e.v : pairwise::detail::topk_worst_value<float, larger>(), pass ? e.c : INT_MAX);
              continue;
            }
          }
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
          const float acc = in ? fused_dot(x, a.data + o * a.ld, a.d) : 0.0f;
          const float s = fused_score<M>(acc, ia, in ? a.aux[o] : 0.0f, a.cosine_zero);
          t.offer(in, s, static_cast<std::int32_t>(o));
        }
        if (lane == 0) atomicAdd(a.recomputed, 1ull);
      }
      t.store(a.state + gr * a.k);
      if (lane == 0) {
        // The bar only rises. On one device the list's k-th place never falls, so this is the
        // list's bar; a device that shares a job starts with empty lists under the seeds' bars
        // (fused_topk_sink.cuh) and keeps them until its own list passes them.
        fused_raise_bar(a.bars[gr], fused_bar_of<larger>(t.wv, t.wc));
        a.cnt[lr] = 0u;
        offered += count;
      }
    }
  }
  if (lane == 0 && offered != 0 && a.candidates != nullptr) atomicAdd(a.candidates, offered);
}

template <bool Larger>
__global__ void fused_bars_kernel(const pairwise::detail::topk_entry<float>* __restrict__ state, std::int64_t n, int k,
                                  topk_bar* __restrict__ bars) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const pairwise::detail::topk_entry<float> e = state[i * k + k - 1];
    bars[i] = fused_bar_of<Larger>(e.v, e.c);
  }
}

/// Raises each row's bar to the k-th place of the union of two of its lists that hold disjoint
/// pairs — a worker's own and another worker's copy (fused_topk_sink's bar exchange: each pair
/// reaches the lists of one worker only) — both sorted best first, ties by the smaller column. k
/// distinct pairs reach that place, so it is a true lower bound of the row's final k-th place. One
/// thread per row finds how many of the k best come from `own` by bisection (⌈log2(k + 1)⌉ steps).
template <bool Larger>
__global__ void fused_union_bars_kernel(const pairwise::detail::topk_entry<float>* __restrict__ own,
                                        const pairwise::detail::topk_entry<float>* __restrict__ other,
                                        std::int64_t n, int k, topk_bar* __restrict__ bars) {
  using entry = pairwise::detail::topk_entry<float>;
  const auto better = [](const entry& x, const entry& y) {
    return pairwise::detail::topk_better_dev<float, Larger>(x.v, x.c, y.v, y.c);
  };
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const entry* a = own + i * k;
    const entry* b = other + i * k;
    // The k best take t from a and k − t from b: the least t whose a[t] does not beat b[k − t − 1].
    int lo = 0, hi = k;
    while (lo < hi) {
      const int t = (lo + hi) / 2;
      if (better(a[t], b[k - t - 1]))
        lo = t + 1;
      else
        hi = t;
    }
    entry kth;
    if (lo == 0)
      kth = b[k - 1];
    else if (lo == k)
      kth = a[k - 1];
    else {
      const entry x = a[lo - 1], y = b[k - lo - 1];
      kth = better(x, y) ? y : x;
    }
    fused_raise_bar(bars[i], fused_bar_of<Larger>(kth.v, kth.c));
  }
}

}  // namespace spillway::similarity::detail
