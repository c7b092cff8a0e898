// spillway/gram/detail/sink_kernels.cuh — device packing, row popcounts, and the epilogue functors
// handed to bit_gemm_async (a scorer feeding a pairwise writer). The sink kernels themselves (top-k,
// threshold) are the pairwise layer's: spillway/pairwise/sink_kernels.cuh.
#pragma once

#include <spillway/core/launch.hpp>
#include <spillway/gram/epilogue.hpp>
#include <spillway/pairwise/sink_kernels.cuh>

#include <cuda_runtime_api.h>

#include <cfloat>
#include <climits>
#include <cstdint>
#include <type_traits>

namespace spillway::gram::detail {

// ---- packing and popcounts ----------------------------------------------------------------------

/// One warp per 32-bit output word: lane l reads column 32w + l and __ballot_sync gathers the 32
/// bits, LSB = lowest column. Words past the last column are written as zero padding. A value
/// other than 0/1 (unless nonzero_as_one) records its linear index in *first_bad (atomicMin).
template <class T>
__global__ void pack_bits_kernel(const T* __restrict__ src, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                                 std::uint32_t* __restrict__ dst, std::int64_t ld_words, bool nonzero_as_one,
                                 unsigned long long* first_bad) {
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const std::int64_t warp = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const std::int64_t nwarps = (static_cast<std::int64_t>(gridDim.x) * blockDim.x) >> 5;
  const std::int64_t total = rows * ld_words;
  for (std::int64_t w = warp; w < total; w += nwarps) {
    const std::int64_t r = w / ld_words;
    const std::int64_t c = (w - r * ld_words) * 32 + lane;
    unsigned v = 0;
    if (c < cols) {
      if constexpr (std::is_same_v<T, bool>) {
        v = static_cast<unsigned>(reinterpret_cast<const unsigned char*>(src)[r * ld + c]);
      } else {
        v = static_cast<unsigned>(static_cast<int>(src[r * ld + c]) & 0xFF);
      }
      if (v > 1u) {
        if (!nonzero_as_one) atomicMin(first_bad, static_cast<unsigned long long>(r * cols + c));
        v = 1u;
      }
    }
    const unsigned word = __ballot_sync(0xFFFFFFFFu, v != 0u);
    if (lane == 0) dst[w] = word;
  }
}

/// One warp per row: the row's popcount into out[row0 + r].
SPILLWAY_KERNEL void row_popcount_kernel(const std::uint32_t* __restrict__ m, std::int64_t rows, std::int64_t ld_words,
                                           std::int32_t* __restrict__ out) {
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const std::int64_t warp = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const std::int64_t nwarps = (static_cast<std::int64_t>(gridDim.x) * blockDim.x) >> 5;
  for (std::int64_t r = warp; r < rows; r += nwarps) {
    int s = 0;
    for (std::int64_t w = lane; w < ld_words; w += 32) s += __popc(m[r * ld_words + w]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, o);
    if (lane == 0) out[r] = s;
  }
}

// ---- epilogues ---------------------------------------------------------------------------------
// Each is called by bit_gemm_async as epi(i, j, count) with GLOBAL indices, exactly once per
// element of every computed tile. With upper_only the kernel may also deliver (i > j) inside
// tiles that cross the diagonal; the symmetric writers do not want those. Each epilogue is a
// pairwise writer (where the value goes) fed by the scorer (what the count becomes), so the
// layouts are written once for bits and floats alike.

/// The value type V of a pairwise writer W<V>.
template <class W>
struct writer_value;
template <template <class> class W, class V>
struct writer_value<W<V>> {
  using type = V;
};

/// Every strip sink's epilogue: the count scored (scorer) into a pairwise writer (packed, full,
/// rect, score). `pop_a` / `pop_b` are the popcounts of A's and B's rows by global index (one
/// array for A·Aᵀ); pairs the writer does not want are skipped before scoring.
template <class Writer>
struct scored_epilogue {
  Writer w;
  const std::int32_t* pop_a;
  const std::int32_t* pop_b;
  scorer sc;
  __device__ void operator()(std::int64_t i, std::int64_t j, std::int32_t c) const {
    if (!w.wants(i, j)) return;
    w.put(i, j, sc.template operator()<typename writer_value<Writer>::type>(c, pop_a[i], pop_b[j]));
  }
};

/// Popcounts are read only by the metrics that use them (raw counts need none).
__device__ __forceinline__ bool needs_popcounts(const scorer& sc) { return sc.m != metric::counts; }

/// The checksum sink (pairwise::checksum_writer). Per element every lane calls it, so there is no
/// early return; `fragment` (the wgmma kernel's register epilogue) sums a thread's 128 counts in
/// registers and adds them with one atomic: nothing but the scores themselves is read.
template <class V>
struct checksum_epilogue : scored_epilogue<::spillway::pairwise::detail::checksum_writer<V>> {
  static constexpr bool wgmma_fragment = true;
  using base = scored_epilogue<::spillway::pairwise::detail::checksum_writer<V>>;
  using base::pop_a, base::pop_b, base::sc, base::w;
  __device__ void operator()(std::int64_t i, std::int64_t j, std::int32_t c) const {
    const bool np = needs_popcounts(sc);
    w.add(i, j, sc.template operator()<V>(c, np ? pop_a[i] : 0, np ? pop_b[j] : 0));
  }
  __device__ __forceinline__ void fragment(const std::int32_t (&d)[128], std::int64_t i_base, std::int64_t j_base,
                                           std::int64_t i_end, std::int64_t j_end, int lane) const {
    const int g = lane >> 2, tig = lane & 3;
    const bool np = needs_popcounts(sc);
    unsigned long long acc = 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const std::int64_t i = i_base + g + 8 * h;
      if (i >= i_end) continue;
      const std::int32_t na = np ? pop_a[i] : 0;
#pragma unroll
      for (int n = 0; n < 32; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const std::int64_t j = j_base + 8 * n + 2 * tig + e;
          if (j < j_end && w.wants(i, j)) {
            acc += ::spillway::pairwise::detail::checksum_bits(
                sc.template operator()<V>(d[4 * n + 2 * h + e], na, np ? pop_b[j] : 0));
          }
        }
      }
    }
    if (acc != 0u) atomicAdd(w.sums + (blockIdx.x & 1023u), acc);
  }
};

/// The least count c with which a pair of a row of `na` set bits can pass threshold t under `sc`:
/// a column's popcount nb is at least c, so Jaccard c/(na + nb − c) ≤ c/na, cosine
/// c/sqrt(na·nb) ≤ sqrt(c/na) and Hamming na + nb − 2c ≥ na − c. Lowered by a relative 10⁻⁶ and one
/// count for the score's rounding to its type; INT_MIN where it bounds nothing (t ≤ 0, a zero
/// row's cosine, or `screen` off: a zero row's cosine_zero that itself passes).
__device__ __forceinline__ int threshold_need(const scorer& sc, double t, int na, bool screen) {
  if (!screen) return INT_MIN;
  double b = t;
  switch (sc.m) {
    case metric::counts:
      break;
    case metric::jaccard:
      if (t <= 0.0) return INT_MIN;
      b = t * na;
      break;
    case metric::cosine:
      if (t <= 0.0 || na == 0) return INT_MIN;
      b = t * t * na;
      break;
    case metric::hamming:
      b = na - t;
      break;
  }
  b = b - 1e-6 * fabs(b) - 1.0;
  if (b <= static_cast<double>(INT_MIN)) return INT_MIN;
  if (b >= static_cast<double>(INT_MAX)) return INT_MAX;
  return static_cast<int>(floor(b));
}

/// The threshold sink's epilogue: each pair decided where its count is, into a
/// pairwise::append_writer; nothing is written for the pairs that fail. The wgmma kernel hands it a
/// thread's 2 x 64 counts in registers (`fragment`): a row whose largest count is below what any
/// passing pair needs (threshold_need, from the row's popcount alone) is passed over with one
/// comparison per count, the others are scored and tested exactly, count by count. `screen`: the
/// host's word that the bound holds (see threshold_need).
template <class V>
struct threshold_epilogue : scored_epilogue<::spillway::pairwise::detail::append_writer<V>> {
  static constexpr bool wgmma_fragment = true;
  using base = scored_epilogue<::spillway::pairwise::detail::append_writer<V>>;
  using base::pop_a, base::pop_b, base::sc, base::w;
  bool screen;
  static constexpr bool wgmma_row_prefetch = true;
  /// A lane's two rows (i_base + lane / 4 and 8 further): popcount and the least passing count.
  struct rows_t {
    std::int32_t na[2];
    int need[2];
  };
  __device__ __forceinline__ rows_t rows(std::int64_t i_base, std::int64_t i_end, int lane) const {
    rows_t r{};
    const bool np = needs_popcounts(sc);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const std::int64_t i = i_base + (lane >> 2) + 8 * h;
      r.na[h] = np && i < i_end ? pop_a[i] : 0;
      r.need[h] = threshold_need(sc, w.threshold, r.na[h], screen);
    }
    return r;
  }
  // operator() (every kernel but wgmma's fragment hook): the scored epilogue's, element by element.
  // The wgmma kernel hands `fragment` what `rows` read before the tile's k-loop.
  __device__ __forceinline__ void fragment(const std::int32_t (&d)[128], std::int64_t i_base,
                                           std::int64_t j_base, std::int64_t i_end, std::int64_t j_end,
                                           int lane, const rows_t& r) const {
    const int g = lane >> 2, tig = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const std::int64_t i = i_base + g + 8 * h;
      if (i >= i_end) continue;
      const std::int32_t na = r.na[h];
      const int need = r.need[h];
      int top = INT_MIN;
#pragma unroll
      for (int n = 0; n < 32; ++n) top = max(top, max(d[4 * n + 2 * h], d[4 * n + 2 * h + 1]));
      if (top < need) continue;
#pragma unroll
      for (int n = 0; n < 32; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const std::int32_t c = d[4 * n + 2 * h + e];
          const std::int64_t j = j_base + 8 * n + 2 * tig + e;
          if (c >= need && j < j_end) decide(i, j, c, na);
        }
      }
    }
  }
  /// One pair past the screen, scored and tested exactly (out of line: the accumulators stay in
  /// registers and the unrolled screen stays small).
  __device__ __noinline__ void decide(std::int64_t i, std::int64_t j, std::int32_t c, std::int32_t na) const {
    if (!w.wants(i, j)) return;
    w.put(i, j, sc.template operator()<V>(c, na, needs_popcounts(sc) ? pop_b[j] : 0));
  }
};

/// Copies the strict upper part of the leading rows x rows block of a score strip (`ld` apart)
/// onto its lower part, 32 x 32 tiles through shared memory so that both the reads and the
/// transposed writes are coalesced. Block (32, 8); grid (tiles, tiles) for tiles = ceil(rows / 32),
/// blocks below the tile diagonal return at once. The top-k sink's raw-count strips are written
/// by the tile kernels' bulk-store epilogue (i <= j only); the row lists then read whole rows.
SPILLWAY_KERNEL void __launch_bounds__(256) mirror_upper_block_kernel(std::int32_t* __restrict__ s, std::int64_t rows,
                                                                 std::int64_t ld) {
  __shared__ std::int32_t tile[32][33];
  const std::int64_t ti = blockIdx.y, tj = blockIdx.x;  // source tile: rows 32 ti.., columns 32 tj..
  if (tj < ti) return;
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
#pragma unroll
  for (int y = ty; y < 32; y += 8) {
    const std::int64_t r = ti * 32 + y, c = tj * 32 + tx;
    if (r < rows && c < rows && r < c) tile[y][tx] = s[r * ld + c];
  }
  __syncthreads();
#pragma unroll
  for (int y = ty; y < 32; y += 8) {
    const std::int64_t r = tj * 32 + y, c = ti * 32 + tx;  // destination (r, c) = source (c, r)
    if (r < rows && c < rows && c < r) s[r * ld + c] = tile[tx][y];
  }
}

inline void mirror_upper_block_async(std::int32_t* s, std::int64_t rows, std::int64_t ld, cudaStream_t st) {
  if (rows < 2) return;
  const auto tiles = static_cast<unsigned>((rows + 31) / 32);
  mirror_upper_block_kernel<<<dim3(tiles, tiles), dim3(32, 8), 0, st>>>(s, rows, ld);
}

// The sink kernels moved to the pairwise layer; their old names stay valid here.
using ::spillway::pairwise::detail::topk_entry;
using ::spillway::pairwise::detail::topk_worst_value;
using ::spillway::pairwise::detail::warp_topk;

}  // namespace spillway::gram::detail
