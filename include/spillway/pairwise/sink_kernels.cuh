// spillway/pairwise/sink_kernels.cuh — the device half of the pairwise sinks, shared by
// every module whose all-pairs scores arrive strip by strip (bit Gram, float similarity):
//   writers    where a value (i, j) goes in a strip's output: packed/condensed triangle rows, full
//              rows plus the mirrored column strip, dense rectangle rows, a dense score strip. A
//              tile kernel's epilogue calls them directly (Gram); a GEMM that can write only a
//              dense block hands its block to scatter_strip_kernel instead (float similarity).
//   top-k      per-row sorted lists of up to 128 entries kept by a warp, merged strip by strip on
//              the device, one list per slot (concurrent strips never race).
//   threshold  count, scan and compact a strip's passing entries on the device.
//   checksum   every score reduced to a sum on the device: a job's bare compute, nothing kept.
#pragma once

#include <spillway/core/launch.hpp>
#include <spillway/pairwise/layout.hpp>
#include <spillway/pairwise/sinks.hpp>

#include <cuda_runtime_api.h>

#include <cfloat>
#include <climits>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace spillway::pairwise::detail {

// ---- writers --------------------------------------------------------------------------------
// Each takes GLOBAL indices (i, j). `wants(i, j)` says whether the writer stores that pair at all
// (the symmetric layouts keep i ≤ j and complete the rest by mirroring), so an epilogue computes a
// score only for the pairs stored. `dense` writers also name the address of a block (block(i, j),
// block_ld()), so a GEMM can write its panel straight into the sink's buffer.

/// A·Aᵀ into a strip of the packed upper triangle (with the diagonal) or SciPy's condensed layout
/// (without): the strip starts at element `base` of the whole layout.
template <class V>
struct packed_writer {
  static constexpr bool dense = false;
  V* out;
  std::int64_t n, base;
  bool with_diagonal;
  __device__ __forceinline__ bool wants(std::int64_t i, std::int64_t j) const { return with_diagonal ? i <= j : i < j; }
  __device__ __forceinline__ void put(std::int64_t i, std::int64_t j, V v) const {
    const std::int64_t idx = with_diagonal ? packed_row_offset(n, i) + (j - i) : condensed_row_offset(n, i) + (j - i - 1);
    out[idx - base] = v;
  }
};

/// A·Aᵀ into a full matrix, strip rows [i0, i1): `u` holds rows i0.. x columns i0..n-1 (ld w =
/// n − i0; the diagonal block complete, mirrored inside), `t` the mirrored column strip: rows
/// i1..n-1 x columns i0..i1-1 (ld p = i1 − i0).
template <class V>
struct full_writer {
  static constexpr bool dense = false;
  V* u;
  V* t;
  std::int64_t i0, i1, w, p;
  __device__ __forceinline__ bool wants(std::int64_t i, std::int64_t j) const { return i <= j; }
  __device__ __forceinline__ void put(std::int64_t i, std::int64_t j, V v) const {
    u[(i - i0) * w + (j - i0)] = v;
    if (j < i1) {
      if (j != i) u[(j - i0) * w + (i - i0)] = v;
    } else {
      t[(j - i1) * p + (i - i0)] = v;
    }
  }
};

/// A·Bᵀ rows [i0, ..) into a dense strip with `ld` between rows; columns are B's global rows.
template <class V>
struct rect_writer {
  static constexpr bool dense = true;
  V* u;
  std::int64_t i0, ld;
  __device__ __forceinline__ bool wants(std::int64_t, std::int64_t) const { return true; }
  SPILLWAY_HD V* block(std::int64_t i, std::int64_t j) const { return u + (i - i0) * ld + j; }
  SPILLWAY_HD std::int64_t block_ld() const { return ld; }
  __device__ __forceinline__ void put(std::int64_t i, std::int64_t j, V v) const { u[(i - i0) * ld + j] = v; }
};

/// Scores of a strip kept on the device for top-k / threshold / device strips:
/// s[(i − i0) * w + (j − col0)]. Symmetric: col0 = i0, the diagonal block is completed by
/// mirroring (columns ≥ i0 only).
template <class V>
struct score_writer {
  static constexpr bool dense = true;
  V* s;
  std::int64_t i0, i1, w, col0;
  bool symmetric;
  __device__ __forceinline__ bool wants(std::int64_t i, std::int64_t j) const { return !(symmetric && i > j); }
  SPILLWAY_HD V* block(std::int64_t i, std::int64_t j) const { return s + (i - i0) * w + (j - col0); }
  SPILLWAY_HD std::int64_t block_ld() const { return w; }
  __device__ __forceinline__ void put(std::int64_t i, std::int64_t j, V v) const {
    s[(i - i0) * w + (j - col0)] = v;
    if (symmetric && j < i1 && j != i) s[(j - i0) * w + (i - i0)] = v;
  }
};

/// The threshold decided where the score is made (the Gram tile kernels' epilogue): a pair the
/// writer wants whose score passes (detail::passes) is appended at the next free place of the
/// strip's lists (its strip-local row, its global column, its value) and `count` counts it. No
/// score is written for the others. The lists hold the strip's P x W entries, so they cannot
/// overflow; their order is the kernel's (the threshold sink sorts them on the host).
/// `diag_shift` as the threshold kernels': -1 every column (A·Bᵀ), 0 j ≥ i, 1 j > i (A·Aᵀ).
template <class V>
struct append_writer {
  static constexpr bool dense = false;
  std::int32_t* rows;
  std::int32_t* cols;
  V* vals;
  unsigned long long* count;
  std::int64_t i0;
  double threshold;
  bool larger;
  int diag_shift;
  __device__ __forceinline__ bool wants(std::int64_t i, std::int64_t j) const {
    return diag_shift < 0 || j >= i + diag_shift;
  }
  __device__ __forceinline__ void put(std::int64_t i, std::int64_t j, V v) const {
    if (!passes(larger, v, threshold)) return;
    const unsigned long long at = atomicAdd(count, 1ull);
    rows[at] = static_cast<std::int32_t>(i - i0);
    cols[at] = static_cast<std::int32_t>(j);
    vals[at] = v;
  }
};

/// Hands every value of a dense block (rows row0.., columns col0.., `ld` apart) that `wr` wants
/// to it: the bridge from a GEMM's dense output to the triangle layouts.
template <class V, class Writer>
__global__ void scatter_strip_kernel(const V* __restrict__ s, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                                     std::int64_t row0, std::int64_t col0, Writer wr) {
  const std::int64_t total = rows * cols;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = e / cols, x = e - r * cols;
    const std::int64_t i = row0 + r, j = col0 + x;
    if (wr.wants(i, j)) wr.put(i, j, s[r * ld + x]);
  }
}

/// Makes the first `rows` x `rows` block of a dense strip (`ld` apart) exactly symmetric by copying
/// its upper part onto its lower part: a GEMM computes both halves of a strip's diagonal block,
/// and the two may differ in the last bit; the sinks read one value per pair, as Gram gives it.
template <class V>
__global__ void mirror_diagonal_block_kernel(V* __restrict__ s, std::int64_t rows, std::int64_t ld) {
  const std::int64_t total = rows * rows;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = e / rows, x = e - r * rows;
    if (x < r) s[r * ld + x] = s[x * ld + r];
  }
}

// ---- per-row top-k, merged on the device ------------------------------------------------------

/// One entry of a row's running top-k list on the device (column −1 on the host = empty).
template <class V>
struct topk_entry {
  V v;
  std::int32_t c;
};

template <class V, bool Larger>
__host__ __device__ inline V topk_worst_value() {
  if constexpr (std::is_floating_point_v<V>) return Larger ? -FLT_MAX : FLT_MAX;
  else return Larger ? static_cast<V>(INT_MIN) : static_cast<V>(INT_MAX);
}

template <class V, bool Larger>
__device__ __forceinline__ bool topk_better_dev(V av, std::int32_t ac, V bv, std::int32_t bc) {
  return (Larger ? av > bv : av < bv) || (av == bv && ac < bc);
}

/// A column's bar: a key no candidate below which can enter that row's final list. Scores map to
/// unsigned keys in the order of "better" (a larger key is a better score, −0.0 as +0.0), so one
/// atomicMax raises a bar for either direction. 0 (every score passes) until a list of the row
/// holds k entries; the k-th of any list of the row is a valid bar from then on (lists only
/// improve, and a row's lists together hold each (row, column) pair at most once).
template <class V>
using topk_key = std::conditional_t<sizeof(V) <= 4, unsigned, unsigned long long>;

template <class V, bool Larger>
__device__ __forceinline__ topk_key<V> topk_key_of(V v) {
  using K = topk_key<V>;
  K u;
  if constexpr (std::is_floating_point_v<V>) {
    const V z = v == V{} ? V{} : v;  // −0.0 ties +0.0 in the lists
    static_assert(sizeof(V) == sizeof(K), "float or double scores");
    std::memcpy(&u, &z, sizeof u);
    constexpr K sign = K{1} << (8 * sizeof(K) - 1);
    u = (u & sign) ? ~u : (u | sign);
  } else {
    static_assert(std::is_integral_v<V> && (std::is_signed_v<V> || sizeof(V) < sizeof(K)), "integer scores");
    u = static_cast<K>(static_cast<std::make_signed_t<K>>(v)) ^ (K{1} << (8 * sizeof(K) - 1));
  }
  return Larger ? u : ~u;
}

/// A warp's sorted list of up to 32·MaxBlocks entries: lane l holds places l, l + 32, … of which
/// the first `blocks` (k rounded up to 32, 64 or 128, over 32) are in use; places from k to
/// 32·blocks hold entries worse than the k-th (never stored). A candidate that beats the k-th place
/// is inserted by counting the places that beat it (a ballot per block) and shifting the rest down
/// one place with shuffles; the lists stay sorted best first, ties by the smaller column. Kernels
/// take MaxBlocks as a parameter (topk_blocks_for(k): 1 up to k = 32, 2 up to 64, 4 up to
/// max_top_k = 128), so a list never carries more places than its k needs (measured on the 10^6
/// job: four places cost the top-32's merges 70% more time, two with run-time block counts 13%,
/// and the top-64 10.7% on four).
template <class V, bool Larger, int MaxBlocks>
struct warp_topk {
  static_assert(MaxBlocks == 1 || MaxBlocks == 2 || MaxBlocks == 4, "lists of 32, 64 or 128 places");
  static constexpr int max_blocks = MaxBlocks;
  V v[max_blocks], wv;
  std::int32_t c[max_blocks], wc;
  int k;
  int blocks;
  int lane;

  __device__ void load(const topk_entry<V>* st, int k_) {
    k = k_;
    blocks = MaxBlocks == 1 || k <= 32 ? 1 : (MaxBlocks == 2 || k <= 64 ? 2 : 4);
    lane = static_cast<int>(threadIdx.x & 31u);
    const V worst = topk_worst_value<V, Larger>();
#pragma unroll
    for (int b = 0; b < max_blocks; ++b) {
      const int p = 32 * b + lane;
      v[b] = p < k ? st[p].v : worst;
      c[b] = p < k ? st[p].c : INT_MAX;
    }
    refresh();
  }
  __device__ void store(topk_entry<V>* st) const {
#pragma unroll
    for (int b = 0; b < max_blocks; ++b) {
      if (32 * b + lane < k) st[32 * b + lane] = topk_entry<V>{v[b], c[b]};
    }
  }
  __device__ void refresh() {
    const int s = k - 1;
    V a = v[0];
    std::int32_t x = c[0];
#pragma unroll
    for (int b = 1; b < max_blocks; ++b) {
      if ((s >> 5) == b) {
        a = v[b];
        x = c[b];
      }
    }
    wv = __shfl_sync(0xFFFFFFFFu, a, s & 31);
    wc = __shfl_sync(0xFFFFFFFFu, x, s & 31);
  }
  /// Every lane offers (v, c) when `valid`; all 32 lanes must call.
  __device__ void offer(bool valid, V ov, std::int32_t oc) {
    unsigned m = __ballot_sync(0xFFFFFFFFu, valid && topk_better_dev<V, Larger>(ov, oc, wv, wc));
    while (m != 0u) {
      const int src = __ffs(static_cast<int>(m)) - 1;
      m &= m - 1u;
      const V bv = __shfl_sync(0xFFFFFFFFu, ov, src);
      const std::int32_t bc = __shfl_sync(0xFFFFFFFFu, oc, src);
      if (!topk_better_dev<V, Larger>(bv, bc, wv, wc)) continue;  // the bar rose meanwhile
      int pos = 0;
#pragma unroll
      for (int b = 0; b < max_blocks; ++b) {
        if (b < blocks)
          pos += __popc(__ballot_sync(0xFFFFFFFFu, topk_better_dev<V, Larger>(v[b], c[b], bv, bc)));
      }
      // Blocks before pos's block keep their places; from it on each shifts down one place, its
      // lane 0 taking the previous block's lane 31 (read before that block moved).
      const int first = pos >> 5;
      V carry = bv;
      std::int32_t carry_c = bc;
#pragma unroll
      for (int b = 0; b < max_blocks; ++b) {
        if (b >= blocks) break;
        if (b < first) continue;
        V u = __shfl_up_sync(0xFFFFFFFFu, v[b], 1);
        std::int32_t uc = __shfl_up_sync(0xFFFFFFFFu, c[b], 1);
        if (b + 1 < blocks) {
          const V next = __shfl_sync(0xFFFFFFFFu, v[b], 31);
          const std::int32_t next_c = __shfl_sync(0xFFFFFFFFu, c[b], 31);
          if (lane == 0 && b > first) {
            u = carry;
            uc = carry_c;
          }
          carry = next;
          carry_c = next_c;
        } else if (lane == 0 && b > first) {
          u = carry;
          uc = carry_c;
        }
        const int p = 32 * b + lane;
        if (p > pos) {
          v[b] = u;
          c[b] = uc;
        } else if (p == pos) {
          v[b] = bv;
          c[b] = bc;
        }
      }
      refresh();
    }
  }
};

/// The list form (warp_topk's MaxBlocks) of k places: 1 up to 32, 2 up to 64, else 4.
inline constexpr int topk_blocks_for(int k) {
  return k <= 32 ? 1 : (k <= 64 ? 2 : 4);
}

/// Calls f(std::integral_constant<int, B>{}) with B = topk_blocks_for(k): a kernel launch per list form.
template <class F>
void with_topk_blocks(int k, F&& f) {
  switch (topk_blocks_for(k)) {
    case 1:
      f(std::integral_constant<int, 1>{});
      break;
    case 2:
      f(std::integral_constant<int, 2>{});
      break;
    default:
      f(std::integral_constant<int, 4>{});
      break;
  }
}

template <class V, bool Larger>
__global__ void topk_init_kernel(topk_entry<V>* st, std::int64_t n) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    st[i] = topk_entry<V>{topk_worst_value<V, Larger>(), INT_MAX};
  }
}

/// The mirrored side of a symmetric strip's top-k, for the rows kernel to fill: local column x ≥
/// `x_begin` of the strip (global row col0 + x) takes the values of its column whose key reaches
/// `bar[col0 + x]`; each column has `cap` places in `cand` (x − x_begin)·cap.. and a count in
/// `count` (zero before the strip; a count above cap means "read the column in full"). The rows
/// kernel marks those values in `hits` (`hit_words` 32-bit words per row: a word per lane of a
/// warp per 1,024 values), and topk_append_kernel appends them to their columns.
/// The other workers of a job whose bars a raise also reaches (more workers than this many + 1
/// keep their bars to themselves beyond it: still exact, the bars only filter less).
inline constexpr int topk_max_peer_bars = 7;

template <class V>
struct topk_mirror {
  topk_key<V>* bar = nullptr;  ///< per global row; nullptr: no mirrored side, no bars kept
  std::int64_t x_begin = 0;
  int* count = nullptr;
  topk_entry<V>* cand = nullptr;
  int cap = 0;
  unsigned* hits = nullptr;
  std::int64_t hit_words = 0;
  /// The bars of the job's other workers (other devices: peer memory, over NVLink), raised with
  /// this one. The k-th place of any list of a row bounds that row's final list wherever the list
  /// lives, so a bar raised on one device is valid on all; without this a column whose own row
  /// strip ran on another device finds its bar empty and is read in full.
  topk_key<V>* peers[topk_max_peer_bars] = {};
  int n_peers = 0;
};

/// Raises row `row`'s bar to the list's k-th place, here and in the peers' bars. Every raise goes
/// to every bar, so where this bar already stood at least as high the peers' do (or will) too.
template <class V, bool Larger, int B>
__device__ __forceinline__ void topk_raise_bar(const topk_mirror<V>& m, std::int64_t row,
                                               const warp_topk<V, Larger, B>& t) {
  if (m.bar == nullptr || t.lane != 0 || t.wc == INT_MAX) return;
  const topk_key<V> key = topk_key_of<V, Larger>(t.wv);
  if (atomicMax(m.bar + row, key) >= key) return;
  for (int p = 0; p < m.n_peers; ++p) atomicMax(m.peers[p] + row, key);
}

/// One compare-exchange step of a bitonic network across the warp: the lane keeps the better of
/// its entry and lane (lane ^ mask)'s when `keep_better`, else the worse.
template <class V, bool Larger>
__device__ __forceinline__ void topk_exchange(V& v, std::int32_t& c, int mask, bool keep_better) {
  const V ov = __shfl_xor_sync(0xFFFFFFFFu, v, mask);
  const std::int32_t oc = __shfl_xor_sync(0xFFFFFFFFu, c, mask);
  if (topk_better_dev<V, Larger>(ov, oc, v, c) == keep_better) {
    v = ov;
    c = oc;
  }
}

/// Sorts one entry per lane across the warp: best first by lane when `best_first`, else worst first.
template <class V, bool Larger>
__device__ __forceinline__ void topk_sort32(V& v, std::int32_t& c, int lane, bool best_first) {
#pragma unroll
  for (int size = 2; size <= 32; size <<= 1) {
#pragma unroll
    for (int j = size >> 1; j > 0; j >>= 1) {
      // A block of `size` lanes runs in the final direction when its bit `size` is clear (the
      // whole warp at size 32) and against it otherwise; the lower lane of a pair keeps the entry
      // that comes first in its block's direction.
      const bool block_best_first = ((lane & size) == 0) == best_first;
      topk_exchange<V, Larger>(v, c, j, ((lane & j) == 0) == block_best_first);
    }
  }
}

/// Merges 32 entries (one per lane, any order; (worst, INT_MAX) fills empty lanes) into a warp's
/// list: the candidates are sorted worst first, and the better of the list's last block's place p
/// and candidate p, after the blocks before it (sorted best first), forms a bitonic sequence of the
/// list's 32·blocks places holding the best of both, which a bitonic merge sorts: the steps
/// across blocks compare registers of one lane, those inside a block shuffle. ~25 shuffle steps
/// for 32 candidates into 32 places (30 into 64, 40 into 128), where offering them one by one costs
/// ~12 shuffles per insert.
template <class V, bool Larger, int B>
__device__ __forceinline__ void topk_merge32(warp_topk<V, Larger, B>& t, V qv, std::int32_t qc) {
  constexpr int mb = B;
  topk_sort32<V, Larger>(qv, qc, t.lane, false);
  const auto keep_better = [](V& av, std::int32_t& ac, V& bv, std::int32_t& bc) {  // a gets the better
    if (topk_better_dev<V, Larger>(bv, bc, av, ac)) {
      const V sv = av;
      const std::int32_t sc = ac;
      av = bv;
      ac = bc;
      bv = sv;
      bc = sc;
    }
  };
#pragma unroll
  for (int b = 0; b < mb; ++b) {
    if (b == t.blocks - 1) keep_better(t.v[b], t.c[b], qv, qc);
  }
  // Half-cleaners across blocks (distance 2 blocks, then 1), then inside each block.
  if constexpr (B == 4) {
    if (t.blocks == 4) {
      keep_better(t.v[0], t.c[0], t.v[2], t.c[2]);
      keep_better(t.v[1], t.c[1], t.v[3], t.c[3]);
      keep_better(t.v[2], t.c[2], t.v[3], t.c[3]);
    }
  }
  if constexpr (B >= 2) {
    if (t.blocks >= 2) keep_better(t.v[0], t.c[0], t.v[1], t.c[1]);
  }
#pragma unroll
  for (int j = 16; j > 0; j >>= 1) {
#pragma unroll
    for (int b = 0; b < mb; ++b) {
      if (b < t.blocks) topk_exchange<V, Larger>(t.v[b], t.c[b], j, (t.lane & j) == 0);
    }
  }
  t.refresh();
}

/// Rows of a score strip: row r (global row0 + r) takes candidates s[r * w + x] with global column
/// col0 + x, x ≥ x_begin; the diagonal is skipped unless asked for. One warp per row.
///
/// 4-byte scores are read 16 bytes per lane, eight loads in flight (4 KiB per warp, 1,024 values:
/// a chunk). Each lane compares its 32 values of a chunk with the row list's k-th place (ties
/// pass: the exact order decides later) into a mask; the values the masks hold go to a queue of
/// the warp in shared memory, and every 32 queued values are merged into the list at once
/// (topk_merge32) instead of inserted one by one. While the list is not full (its first chunk),
/// the k-th best of the lanes' maxima (k ≤ 32) bounds the row's k-th place from below: k values of
/// the chunk reach it, so only ~k of its 1,024 values are queued.
///
/// With `m.bar` set (a symmetric strip) the same pass also serves the mirrored side: each value
/// of a column x ≥ m.x_begin that reaches that column's bar is marked in the row's hit masks (one
/// 32-bit store per lane per chunk), topk_append_kernel then appends the marked values to their
/// columns' candidates and topk_cols_kernel offers them; each row's bar is raised to its list's
/// k-th place at the end. The bars are read 16 bytes per lane where they line up with the
/// scores. Heavy rows (rows of many ones) reach the bars of thousands of columns of a wide strip
/// where the average row reaches ~k: appended by the row's own warp (an atomic count each, then
/// the store), they set the kernel's time, which is its slowest warp's; marked, they cost their
/// bits, and the appends spread over every thread of the next kernel (measured against appends
/// one by one by the row's warp: docs/gram.md, "topk_rows_kernel").
template <class V, bool Larger, int B>
__global__ void __launch_bounds__(256)
    topk_rows_kernel(const V* __restrict__ s, std::int64_t rows, std::int64_t w, std::int64_t row0,
                     std::int64_t col0, bool skip_diagonal, topk_entry<V>* __restrict__ state, int k,
                     topk_mirror<V> m = {}) {
  using K = topk_key<V>;
  constexpr int warps_per_block = 8;  // launched with 256 threads
  __shared__ topk_entry<V> row_queue_all[warps_per_block][64];
  const std::int64_t warp = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const std::int64_t nwarps = (static_cast<std::int64_t>(gridDim.x) * blockDim.x) >> 5;
  const int lane = static_cast<int>(threadIdx.x & 31u);
  topk_entry<V>* const row_queue = row_queue_all[threadIdx.x >> 5];
  const bool mirror = m.bar != nullptr && m.count != nullptr && m.hits != nullptr && m.x_begin < w;
  const std::int64_t xm = mirror ? m.x_begin : w;
  const K* bar = mirror ? m.bar + col0 : nullptr;  // bar[x]: local column x's
  const V worst = topk_worst_value<V, Larger>();
  const unsigned below = (1u << lane) - 1u;
  // The first values of a row, before its first 16-byte boundary: a value of local column x ≥ xm
  // that reaches the column's bar is appended to its candidates here (a count past the cap: the
  // column is read in full, and the count only grows).
  const auto propose = [&](std::int64_t x, V v, K b, std::int64_t r) {
    if (x >= xm && topk_key_of<V, Larger>(v) >= b) {
      const std::int64_t q = x - xm;
      const int at = atomicAdd(m.count + q, 1);
      if (at < m.cap) m.cand[q * m.cap + at] = topk_entry<V>{v, static_cast<std::int32_t>(row0 + r)};
    }
  };
  for (std::int64_t r = warp; r < rows; r += nwarps) {
    warp_topk<V, Larger, B> t;
    topk_entry<V>* st = state + (row0 + r) * k;
    t.load(st, k);
    int row_n = 0;  // queued entries (warp-uniform)
    // Queues the `put` lanes' entries; merges 32 into the list whenever 32 are queued.
    const auto queue_row = [&](bool put, V v, std::int32_t c) {
      const unsigned b = __ballot_sync(0xFFFFFFFFu, put);
      if (put) row_queue[row_n + __popc(b & below)] = topk_entry<V>{v, c};
      row_n += __popc(b);
      if (row_n >= 32) {
        __syncwarp();
        const topk_entry<V> e = row_queue[row_n - 32 + lane];
        __syncwarp();
        topk_merge32(t, e.v, e.c);
        row_n -= 32;
      }
    };
    const auto flush_rows = [&]() {
      if (row_n == 0) return;
      __syncwarp();
      const bool in = lane < row_n;
      const topk_entry<V> e = in ? row_queue[lane] : topk_entry<V>{worst, INT_MAX};
      __syncwarp();
      topk_merge32(t, e.v, in ? e.c : INT_MAX);
      row_n = 0;
    };
    unsigned* const hits = mirror ? m.hits + r * m.hit_words : nullptr;  // this row's hit masks
    std::int64_t chunk = 0;                                              // the next mask's chunk
    const V* row = s + r * w;
    // The local column of the diagonal, or -1 (never matched) when it is kept.
    const std::int64_t diag = skip_diagonal ? row0 + r - col0 : -1;
    std::int64_t x_vec = 0;
    if constexpr (sizeof(V) == 4) {
      // Up to three values before the first 16-byte boundary of the row, then 1,024 per chunk.
      const auto mis = static_cast<std::int64_t>((reinterpret_cast<std::uintptr_t>(row) / 4u) % 4u);
      const std::int64_t head = (4 - mis) % 4 < w ? (4 - mis) % 4 : w;
      {
        const bool in = lane < head;
        const V v = in ? row[lane] : V{};
        t.offer(in && lane != diag, v, static_cast<std::int32_t>(col0 + lane));
        if (mirror && in) propose(lane, v, bar[lane], r);
      }
      const uint4* q = reinterpret_cast<const uint4*>(row + head);
      // The bars line up with the scores when column `head` starts a 16-byte group of bars.
      const bool bar_vec = mirror && ((reinterpret_cast<std::uintptr_t>(bar + head) & 15u) == 0);
      std::int64_t x0 = head;
      for (; x0 + 1024 <= w; x0 += 1024, q += 256) {
        uint4 u[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) u[i] = q[32 * i + lane];
        const bool any_m = mirror && x0 + 1024 > xm;
        uint4 b[8] = {};
        if (any_m && bar_vec) {
          const uint4* bq = reinterpret_cast<const uint4*>(bar + x0);
#pragma unroll
          for (int i = 0; i < 8; ++i) b[i] = bq[32 * i + lane];
        }
        const auto x_of = [&](int h) { return x0 + 128 * (h >> 2) + 4 * lane + (h & 3); };
        V floor = t.wv;  // what a value must reach to be queued
        if (t.wc == INT_MAX && k <= 32) {
          // The list is not full: the k-th best of the lanes' maxima (the diagonal left out).
          V mx = worst;
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            const unsigned e[4] = {u[i].x, u[i].y, u[i].z, u[i].w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              V v;
              std::memcpy(&v, &e[j], sizeof v);
              if (x_of(4 * i + j) != diag && (Larger ? v > mx : v < mx)) mx = v;
            }
          }
          std::int32_t id = lane;
          topk_sort32<V, Larger>(mx, id, lane, true);
          const V f = __shfl_sync(0xFFFFFFFFu, mx, k - 1);
          if (Larger ? f > floor : f < floor) floor = f;
        }
        // The screen: a compare per value into this lane's masks of the 32 values it holds, those
        // not worse than the floor and those reaching their column's bar; then one masked value
        // per lane per round (a round per value the busiest lane holds), re-read from L1.
        unsigned row_hits = 0, col_hits = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const unsigned e[4] = {u[i].x, u[i].y, u[i].z, u[i].w};
          const unsigned be[4] = {b[i].x, b[i].y, b[i].z, b[i].w};
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            V v;
            std::memcpy(&v, &e[j], sizeof v);
            if (Larger ? !(v < floor) : !(v > floor)) row_hits |= 1u << (4 * i + j);
            if (any_m) {
              const K bk = bar_vec ? static_cast<K>(be[j]) : bar[x0 + 128 * i + 4 * lane + j];
              if (topk_key_of<V, Larger>(v) >= bk) col_hits |= 1u << (4 * i + j);
            }
          }
        }
        while (__any_sync(0xFFFFFFFFu, row_hits != 0u)) {
          const bool has = row_hits != 0u;
          const int h = has ? __ffs(static_cast<int>(row_hits)) - 1 : 0;
          row_hits &= row_hits - 1u;
          const std::int64_t x = x_of(h);
          const V v = has ? row[x] : V{};
          // The list's k-th place may have risen since the screen.
          queue_row(has && x != diag && (Larger ? !(v < t.wv) : !(v > t.wv)), v, static_cast<std::int32_t>(col0 + x));
        }
        if (mirror) hits[chunk * 32 + lane] = col_hits;
        ++chunk;
      }
      x_vec = x0;
    }
    flush_rows();
    // The rest (every value of 8-byte scores): four loads in flight per lane, offered one by one;
    // the column hits of each 1,024 values (eight steps) in one mask per lane, bit 4·step + u.
    unsigned tail_hits = 0;
    int step = 0;
    for (std::int64_t x0 = x_vec; x0 < w; x0 += 128, ++step) {
      V v[4];
      bool in[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const std::int64_t x = x0 + 32 * u + lane;
        in[u] = x < w;
        v[u] = in[u] ? row[x] : V{};
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const std::int64_t x = x0 + 32 * u + lane;
        t.offer(in[u] && x != diag, v[u], static_cast<std::int32_t>(col0 + x));
        if (mirror && in[u] && x >= xm && topk_key_of<V, Larger>(v[u]) >= bar[x]) tail_hits |= 1u << (4 * (step & 7) + u);
      }
      if (mirror && ((step & 7) == 7 || x0 + 128 >= w)) {
        hits[chunk * 32 + lane] = tail_hits;
        ++chunk;
        tail_hits = 0;
      }
    }
    t.store(st);
    topk_raise_bar(m, row0 + r, t);
  }
}

/// The mirrored side's appends of a strip marked by topk_rows_kernel (m.hits): each marked value
/// of local column x ≥ m.x_begin goes to the column's candidates (an atomic count; past m.cap the
/// column is read in full). One thread per mask word, all rows at once, so a heavy row's many
/// appends spread over the grid instead of one warp. A mask word holds lane l's 32 values of a
/// chunk of 1,024: bit 4i + j is local column head + 1,024 c + 128 i + 4 l + j in the chunks read
/// 16 bytes per lane (4-byte scores: `head` values up to the row's first 16-byte boundary, then
/// whole chunks), and head + 1,024 c + 128 i + 32 j + l in the rest (read 4 bytes per lane).
template <class V>
__global__ void topk_append_kernel(const V* __restrict__ s, std::int64_t rows, std::int64_t w, std::int64_t row0,
                                   topk_mirror<V> m) {
  const std::int64_t total = rows * m.hit_words;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    unsigned bits = m.hits[i];
    if (bits == 0u) continue;
    const std::int64_t r = i / m.hit_words, c = (i % m.hit_words) / 32;
    const int lane = static_cast<int>(i & 31);
    const V* row = s + r * w;
    std::int64_t head = 0, full = 0;  // as topk_rows_kernel cut the row
    if constexpr (sizeof(V) == 4) {
      const auto mis = static_cast<std::int64_t>((reinterpret_cast<std::uintptr_t>(row) / 4u) % 4u);
      head = (4 - mis) % 4 < w ? (4 - mis) % 4 : w;
      full = (w - head) / 1024;
    }
    const std::int64_t chunks = full + (w - head - full * 1024 + 1023) / 1024;
    if (c >= chunks) continue;  // a word past the row's chunks: never written
    while (bits != 0u) {
      const int b = __ffs(static_cast<int>(bits)) - 1;
      bits &= bits - 1u;
      const std::int64_t x = c < full ? head + 1024 * c + 128 * (b >> 2) + 4 * lane + (b & 3)
                                      : head + 1024 * c + 128 * (b >> 2) + 32 * (b & 3) + lane;
      if (x < m.x_begin || x >= w) continue;
      const std::int64_t q = x - m.x_begin;
      const int at = atomicAdd(m.count + q, 1);
      if (at < m.cap) m.cand[q * m.cap + at] = topk_entry<V>{row[x], static_cast<std::int32_t>(row0 + r)};
    }
  }
}

/// Columns of a symmetric score strip, mirrored: global row j = i0 + x for x in [x_begin, w)
/// takes candidates s[r * w + x] (global column i0 + r) for r < rows.
///
/// A column offers the candidates the rows kernel appended for it (topk_mirror), and raises its
/// bar. A group of 32 columns of which one has more than `cap` candidates (its bar too low to
/// filter: its list not yet full on this device, or masses of ties) is read in full instead, and
/// so is every group where the plan left no candidate area (`m.count` null): a block of 32 warps
/// stages 128 x 32 tiles through shared memory so the column reads stay coalesced. The groups
/// read in full are counted in `full_groups`.
template <class V, bool Larger, int B>
__global__ void __launch_bounds__(1024)
    topk_cols_kernel(const V* __restrict__ s, std::int64_t rows, std::int64_t w, std::int64_t i0,
                     std::int64_t x_begin, topk_entry<V>* __restrict__ state, int k, topk_mirror<V> m,
                     unsigned long long* __restrict__ full_groups) {
  __shared__ V tile[128][33];
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int wid = static_cast<int>(threadIdx.x >> 5);
  const std::int64_t groups = (w - x_begin + 31) / 32;
  for (std::int64_t g = blockIdx.x; g < groups; g += gridDim.x) {
    const std::int64_t xb = x_begin + g * 32;
    const std::int64_t my_x = xb + wid;
    const bool col_ok = my_x < w;
    const int nc = col_ok && m.count != nullptr ? m.count[my_x - x_begin] : 0;
    // No candidate area (m.count null, the same for the whole grid): every group in full.
    const bool full = m.count == nullptr || __syncthreads_or(nc > m.cap) != 0;
    if (!full && nc == 0) continue;  // nothing for this column (the whole warp)
    warp_topk<V, Larger, B> t;
    topk_entry<V>* st = state + (i0 + (col_ok ? my_x : 0)) * k;
    if (col_ok) t.load(st, k);
    else t.load(state, k);  // a valid list to keep the warp uniform; never stored
    if (full) {
      for (std::int64_t r0 = 0; r0 < rows; r0 += 128) {
        const std::int64_t lx = xb + lane;
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const std::int64_t lr = r0 + wid + 32 * u;
          tile[wid + 32 * u][lane] = (lr < rows && lx < w) ? s[lr * w + lx] : V{};
        }
        __syncthreads();
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const V v = tile[lane + 32 * u][wid];
          const bool in = col_ok && (r0 + 32 * u + lane) < rows;
          t.offer(in, v, static_cast<std::int32_t>(i0 + r0 + 32 * u + lane));
        }
        __syncthreads();
      }
      if (threadIdx.x == 0) atomicAdd(full_groups, 1ull);
    } else {
      const topk_entry<V>* c = m.cand + (my_x - x_begin) * m.cap;
      for (int b0 = 0; b0 < nc; b0 += 32) {
        const bool in = b0 + lane < nc;
        const topk_entry<V> e = in ? c[b0 + lane] : topk_entry<V>{V{}, INT_MAX};
        t.offer(in, e.v, e.c);
      }
    }
    if (col_ok) {
      t.store(st);
      topk_raise_bar(m, i0 + my_x, t);
    }
  }
}

/// Merges the per-slot lists of each row (slots lists of n x k, `stride` entries apart) into the
/// first one. One warp per row.
template <class V, bool Larger, int B>
__global__ void topk_merge_kernel(topk_entry<V>* __restrict__ state, std::int64_t n, int k, int slots,
                                  std::int64_t stride) {
  const std::int64_t warp = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const std::int64_t nwarps = (static_cast<std::int64_t>(gridDim.x) * blockDim.x) >> 5;
  const int lane = static_cast<int>(threadIdx.x & 31u);
  for (std::int64_t r = warp; r < n; r += nwarps) {
    warp_topk<V, Larger, B> t;
    t.load(state + r * k, k);
    for (int q = 1; q < slots; ++q) {
      const topk_entry<V>* o = state + q * stride + r * k;
      for (int b = 0; b < k; b += 32) {
        const bool in = b + lane < k;
        const topk_entry<V> e = in ? o[b + lane] : topk_entry<V>{V{}, INT_MAX};
        t.offer(in && e.c != INT_MAX, e.v, e.c);
      }
    }
    t.store(state + r * k);
  }
}

/// Writes merged lists as the host result: values, and the column or −1 for an empty place (as
/// int64, or as int32 for the host to widen: a third fewer bytes over the link).
template <class V, class I = std::int64_t>
__global__ void topk_export_kernel(const topk_entry<V>* __restrict__ state, std::int64_t n, V* __restrict__ values,
                                   I* __restrict__ indices) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const topk_entry<V> e = state[i];
    const bool empty = e.c == INT_MAX;
    values[i] = empty ? V{} : e.v;
    indices[i] = empty ? I{-1} : static_cast<I>(e.c);
  }
}

// ---- threshold → sparse -------------------------------------------------------------------------

/// Per row r of a score strip: how many x in [x_begin(r), w) pass. x_begin(r) = r + diag_shift for
/// the symmetric upper triangle (−1 for rectangles: from 0).
template <class V>
__global__ void threshold_count_kernel(const V* __restrict__ s, std::int64_t rows, std::int64_t w, int diag_shift,
                                       bool larger, double threshold, std::int64_t* __restrict__ counts) {
  const std::int64_t warp = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const std::int64_t nwarps = (static_cast<std::int64_t>(gridDim.x) * blockDim.x) >> 5;
  const int lane = static_cast<int>(threadIdx.x & 31u);
  for (std::int64_t r = warp; r < rows; r += nwarps) {
    const std::int64_t xb = diag_shift < 0 ? 0 : r + diag_shift;
    std::int64_t n = 0;
    for (std::int64_t x0 = xb; x0 < w; x0 += 32) {
      const std::int64_t x = x0 + lane;
      const bool p = x < w && passes(larger, s[r * w + x], threshold);
      n += __popc(__ballot_sync(0xFFFFFFFFu, p));
    }
    if (lane == 0) counts[r] = n;
  }
}

/// Exclusive scan of counts[0..n) in place into offsets[0..n], offsets[n] = total. One block.
SPILLWAY_KERNEL void exclusive_scan_kernel(std::int64_t* __restrict__ v, std::int64_t n) {
  __shared__ std::int64_t part[1024];
  const std::int64_t per = (n + blockDim.x - 1) / blockDim.x;
  const std::int64_t b = threadIdx.x * per, e = b + per < n ? b + per : n;
  std::int64_t s = 0;
  for (std::int64_t i = b; i < e; ++i) s += v[i];
  part[threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    std::int64_t run = 0;
    for (unsigned t = 0; t < blockDim.x; ++t) {
      const std::int64_t x = part[t];
      part[t] = run;
      run += x;
    }
    v[n] = run;
  }
  __syncthreads();
  std::int64_t run = part[threadIdx.x];
  for (std::int64_t i = b; i < e; ++i) {
    const std::int64_t x = v[i];
    v[i] = run;
    run += x;
  }
}

/// Writes the passing entries of each row at its offset, in column order: global column
/// col0 + x and the value.
template <class V>
__global__ void threshold_write_kernel(const V* __restrict__ s, std::int64_t rows, std::int64_t w, int diag_shift,
                                       bool larger, double threshold, std::int64_t col0,
                                       const std::int64_t* __restrict__ offsets, std::int32_t* __restrict__ cols,
                                       V* __restrict__ vals) {
  const std::int64_t warp = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const std::int64_t nwarps = (static_cast<std::int64_t>(gridDim.x) * blockDim.x) >> 5;
  const int lane = static_cast<int>(threadIdx.x & 31u);
  for (std::int64_t r = warp; r < rows; r += nwarps) {
    const std::int64_t xb = diag_shift < 0 ? 0 : r + diag_shift;
    std::int64_t at = offsets[r];
    for (std::int64_t x0 = xb; x0 < w; x0 += 32) {
      const std::int64_t x = x0 + lane;
      const V v = x < w ? s[r * w + x] : V{};
      const bool p = x < w && passes(larger, v, threshold);
      const unsigned m = __ballot_sync(0xFFFFFFFFu, p);
      if (p) {
        const std::int64_t o = at + __popc(m & ((1u << lane) - 1u));
        cols[o] = static_cast<std::int32_t>(col0 + x);
        vals[o] = v;
      }
      at += __popc(m);
    }
  }
}

// ---- checksum sink: the bare compute of a job ------------------------------------------------

/// Image of a score in a checksum: its bits as an unsigned integer (double: both halves folded).
template <class V>
__device__ __forceinline__ unsigned checksum_bits(V v) {
  if constexpr (sizeof(V) == 8) {
    unsigned long long b = 0;
    std::memcpy(&b, &v, sizeof b);
    return static_cast<unsigned>(b) ^ static_cast<unsigned>(b >> 32);
  } else {
    unsigned b = 0;
    std::memcpy(&b, &v, sizeof b);
    return b;
  }
}

/// A writer that reduces every score it is handed to the sum (mod 2^64) of their bit images (a
/// 32-bit unsigned each; for counts, the counts): the null sink that keeps a producer's work
/// alive, so a benchmark can time the bare compute of a job. Unlike the other writers, `add` is
/// called for every element by every lane the epilogue runs, since it reduces across the warp
/// (two REDUX and one atomic per call); pairs it does not want count as 0. `sums` has 1024
/// counters, spread over L2 slices. (Gram's wgmma kernel sums a thread's accumulators in
/// registers instead: gram::detail::checksum_epilogue.)
template <class V>
struct checksum_writer {
  static constexpr bool dense = false;
  unsigned long long* sums;
  bool symmetric;
  __device__ __forceinline__ bool wants(std::int64_t i, std::int64_t j) const { return !(symmetric && i > j); }
  __device__ __forceinline__ void add(std::int64_t i, std::int64_t j, V v) const {
    const unsigned x = wants(i, j) ? checksum_bits(v) : 0u;
    const unsigned m = __activemask();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    // 16-bit halves: each warp sum is exact, so the total does not depend on how lanes group.
    const unsigned long long s = static_cast<unsigned long long>(__reduce_add_sync(m, x & 0xFFFFu)) +
                                 (static_cast<unsigned long long>(__reduce_add_sync(m, x >> 16)) << 16);
#else
    unsigned long long s = 0;  // sm_75: no REDUX; the lanes of m add their values one by one
    for (unsigned r = m; r != 0u; r &= r - 1u) s += __shfl_sync(m, x, __ffs(static_cast<int>(r)) - 1);
#endif
    if (static_cast<int>(threadIdx.x & 31u) == __ffs(static_cast<int>(m)) - 1) {
      atomicAdd(sums + (blockIdx.x & 1023u), s);
    }
  }
  __device__ __forceinline__ void put(std::int64_t i, std::int64_t j, V v) const { add(i, j, v); }
};

}  // namespace spillway::pairwise::detail
