// spillway/similarity/detail/binary_topk.cuh — the binary-quantized approximate top-k (issue 34,
// part 4): each row's sign bits, each row's k' nearest rows by Hamming distance over them (the
// fused top-k's filter and merges on the 1-bit tensor cores, gemm::fragment_sink_bit_gemm_async),
// and those k' candidates rescored exactly against the rows themselves, the best k kept. A true
// neighbour outside its row's k' Hamming-nearest is missed (the recall it costs is measured in
// docs/similarity.md, "Binary-quantized candidates"); every score returned is exact.
//
// One device, every row resident (its values for the rescoring, its sign words for the candidates):
//   signs    word w of row i holds bit c = [x(i, 32 w + c) > 0] (words past d: zero), |signs_i| its
//            popcount;
//   seeds    blocks of S rows (fused_topk_shape's), each block's S x S candidate scores written by a
//            fragment sink and selected by topk_rows_kernel: every row starts with the k' best of its
//            own block, and its bar at their k'-th place;
//   strips   rows [r0, r0 + P) against the later blocks' rows in doubling chunks (for_each_fused_chunk):
//            the exact job's filter (fused_topk_filter) and merges with the metric fused_hamming;
//   rescore  one warp per row: its k' candidates' float dot products with the row (a warp per
//            candidate, coalesced), scored as the metric asks, into a list of k.
// The candidate score is 2·popc(a AND b) − |a| − |b| = −Hamming(a, b), exact in float: larger is
// better, ties to the smaller column, as in every list.
#pragma once

#include <spillway/core/device_buffer.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/event_timer.hpp>
#include <spillway/core/launch.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/gemm/fragment_sink.cuh>
#include <spillway/gemm/matrix_view.hpp>
#include <spillway/pairwise/sink_kernels.cuh>
#include <spillway/pairwise/sinks.hpp>
#include <spillway/similarity/detail/fused_topk_sink.cuh>
#include <spillway/similarity/detail/kernels.cuh>
#include <spillway/similarity/detail/topk_fused.cuh>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>

namespace spillway::similarity::detail {

/// Sign words and their popcounts: one warp per row, a ballot per 32 values; words [⌈d/32⌉, lw)
/// zero; pop[r] = the row's set bits (as float: the filter's per-row value).
template <class T>
__global__ void sign_words_kernel(const T* __restrict__ rows, std::int64_t n, std::int64_t d, std::int64_t ld,
                                  std::uint32_t* __restrict__ words, std::int64_t lw,
                                  float* __restrict__ pop) {
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const std::int64_t warp = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const std::int64_t nwarps = (static_cast<std::int64_t>(gridDim.x) * blockDim.x) >> 5;
  for (std::int64_t r = warp; r < n; r += nwarps) {
    int count = 0;
    for (std::int64_t w = 0; w < lw; ++w) {
      const std::int64_t c = 32 * w + lane;
      const bool bit = c < d && to_float(rows[r * ld + c]) > 0.0f;
      const unsigned word = __ballot_sync(0xFFFFFFFFu, bit);
      if (lane == 0) words[r * lw + w] = word;
      count += __popc(word);
    }
    if (lane == 0) pop[r] = static_cast<float>(count);
  }
}

/// A fragment sink writing the candidate scores of a seed block, 2·c − |a| − |b|, into `out`
/// (m x n, row pitch ld): column pairs as 8-byte stores where both lie inside and line up.
struct hamming_dense_sink {
  using fragment_sink_tag = void;
  float* out = nullptr;
  std::int64_t ld = 0;
  const float* pop = nullptr;  // the block's rows' popcounts (rows and columns alike)

  template <class Acc>
  __device__ void consume(const Acc (&d)[128], std::int64_t row0, std::int64_t col0, std::int64_t m,
                          std::int64_t n, std::uint32_t) const {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const std::int64_t r = row0 + 8 * h;
      if (r >= m) continue;
      const float pr = pop[r];
      float* const o = out + r * ld;
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const std::int64_t c = col0 + 8 * j;  // even
        if (c >= n) continue;
        const float s0 = 2.0f * static_cast<float>(d[4 * j + 2 * h]) - pr - pop[c];
        if (c + 1 < n) {
          const float s1 = 2.0f * static_cast<float>(d[4 * j + 2 * h + 1]) - pr - pop[c + 1];
          if (((r * ld + c) & 1) == 0) {
            *reinterpret_cast<float2*>(o + c) = make_float2(s0, s1);
          } else {
            o[c] = s0;
            o[c + 1] = s1;
          }
        } else {
          o[c] = s0;
        }
      }
    }
  }
};

/// The rescoring: one warp per row i, its kc candidate places (cand, kc per row; column INT_MAX
/// for an empty place) each scored exactly — a float dot product over the rows, the warp's lanes
/// splitting d (8 values per 16-byte load where the rows allow, else one at a time), four
/// candidates at once — as `metric` scores it with the rows' values aux, then the best k into out
/// (n x k, best first, ties to the smaller column).
template <class T, int B>
__global__ void __launch_bounds__(256)
    binary_rescore_kernel(const T* __restrict__ rows, std::int64_t n, std::int64_t d, std::int64_t ld,
                          bool vec16, const float* __restrict__ aux, float cosine_zero,
                          const pairwise::detail::topk_entry<float>* __restrict__ cand, int kc, int k,
                          pairwise::detail::topk_entry<float>* __restrict__ out) {
  using entry = pairwise::detail::topk_entry<float>;
  constexpr int per16 = 16 / static_cast<int>(sizeof(T));
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const std::int64_t warp = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const std::int64_t nwarps = (static_cast<std::int64_t>(gridDim.x) * blockDim.x) >> 5;
  const auto dot16 = [](const uint4& a, const uint4& b) {
    const T* x = reinterpret_cast<const T*>(&a);
    const T* y = reinterpret_cast<const T*>(&b);
    float s = 0.0f;
#pragma unroll
    for (int e = 0; e < per16; ++e) s = fmaf(to_float(x[e]), to_float(y[e]), s);
    return s;
  };
  for (std::int64_t i = warp; i < n; i += nwarps) {
    const T* xi = rows + i * ld;
    const float ai = aux[i];
    pairwise::detail::warp_topk<float, true, B> t;
    t.load(out + i * k, k);  // the places as initialized: all empty
    for (int q0 = 0; q0 < kc; q0 += 32) {
      // Lane l ends with candidate q0 + l's score.
      const bool mine = q0 + lane < kc;
      const entry me = mine ? cand[i * kc + q0 + lane] : entry{0.0f, INT_MAX};
      float score = 0.0f;
      const int batch = kc - q0 < 32 ? kc - q0 : 32;
      for (int u0 = 0; u0 < batch; u0 += 4) {
        std::int32_t cj[4];
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const std::int32_t c = __shfl_sync(0xFFFFFFFFu, me.c, (u0 + u) & 31);
          cj[u] = u0 + u < batch ? c : INT_MAX;
        }
        if (vec16) {
          const uint4* x4 = reinterpret_cast<const uint4*>(xi);
          for (std::int64_t p = lane; p < d / per16; p += 32) {
            const uint4 xv = x4[p];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
              if (cj[u] != INT_MAX) acc[u] += dot16(xv, reinterpret_cast<const uint4*>(rows + cj[u] * ld)[p]);
            }
          }
        } else {
          for (std::int64_t p = lane; p < d; p += 32) {
            const float xv = to_float(xi[p]);
#pragma unroll
            for (int u = 0; u < 4; ++u) {
              if (cj[u] != INT_MAX) acc[u] = fmaf(xv, to_float(rows[cj[u] * ld + p]), acc[u]);
            }
          }
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) {
#pragma unroll
          for (int o = 16; o > 0; o >>= 1) acc[u] += __shfl_xor_sync(0xFFFFFFFFu, acc[u], o);
          if (lane == ((u0 + u) & 31) && cj[u] != INT_MAX)
            score = similarity_score(similarity_metric::cosine, acc[u], ai, aux[cj[u]], cosine_zero);
        }
      }
      const bool ok = mine && me.c != INT_MAX;
      pairwise::detail::topk_merge32(t, ok ? score : pairwise::detail::topk_worst_value<float, true>(),
                                     ok ? me.c : INT_MAX);
    }
    t.store(out + i * k);
  }
}

/// What one binary job did (for reports, benchmarks and tests).
struct binary_topk_stats {
  std::int64_t chunks = 0;
  std::uint64_t recomputed_rows = 0;  ///< overflowed buckets recomputed on the CUDA cores
  std::int64_t chunk_cols = 0;        ///< W, the widest chunk the memory allowed
  std::size_t device_bytes = 0;       ///< the job's own device memory (the rows not counted)
};

/// Device bytes of the binary job's buffers for n rows of lw sign words, k' candidates, k results
/// and layout L (the rows themselves not counted).
inline std::size_t binary_topk_bytes(std::int64_t n, std::int64_t lw, int kc, int k,
                                     const fused_topk_layout& L) {
  using entry = pairwise::detail::topk_entry<float>;
  const auto N = static_cast<std::size_t>(n);
  return N * static_cast<std::size_t>(lw) * 4 + 2 * (N + 1) * sizeof(float) +
         N * static_cast<std::size_t>(kc) * sizeof(entry) + (N + 1) * sizeof(topk_bar) +
         N * static_cast<std::size_t>(k) * sizeof(entry) +
         static_cast<std::size_t>(L.P) * (4 + static_cast<std::size_t>(L.cap_a) * sizeof(entry)) +
         static_cast<std::size_t>(L.W) * (4 + static_cast<std::size_t>(L.cap_b) * sizeof(entry)) +
         static_cast<std::size_t>(L.widest * L.widest) * sizeof(float) + 16;
}

/// The binary job on the current device over resident rows x (n x d, row pitch ld elements; 16-byte
/// loads when the base and pitch allow): each row's k best of its kc Hamming-nearest rows' exact
/// cosines into out (device, n x k entries, best first; column INT_MAX for an empty place). The
/// widest chunk halves from fused_widest_chunk until the buffers fit `budget_bytes` (logic_error
/// naming the bytes where none does). Enqueued on s; returns once enqueued.
template <class T>
binary_topk_stats binary_topk_device(stream_view s, const T* x, std::int64_t n, std::int64_t d,
                                     std::int64_t ld, int k, int kc, float cosine_zero,
                                     std::size_t budget_bytes, pairwise::detail::topk_entry<float>* out,
                                     const char* who) {
  namespace pd = ::spillway::pairwise::detail;
  using entry = pd::topk_entry<float>;
  binary_topk_stats st;
  const std::int64_t lw = ((d + 31) / 32 + 3) / 4 * 4;  // words per row, 16-byte rows for the TMA
  fused_topk_layout L;
  for (std::int64_t w = fused_widest_chunk;; w /= 2) {
    L = fused_topk_shape(n, kc, 0, w);
    st.device_bytes = binary_topk_bytes(n, lw, kc, k, L);
    if (st.device_bytes <= budget_bytes) break;
    if (w <= 16384) {
      throw logic_error(std::string(who) + ": the binary job over " + std::to_string(n) + " rows needs " +
                        std::to_string(st.device_bytes) +
                        " bytes of device memory beside the rows, over the budget of " +
                        std::to_string(budget_bytes));
    }
  }
  st.chunk_cols = L.W;
  // With the hook's profile: events at the phases' ends and around each chunk's GEMM and merges.
  auto& hook = fused_topk_hook();
  fused_topk_marks marks;
  marks.on = hook.profile;
  marks.mark(s);
  device_buffer<std::uint32_t> words(static_cast<std::size_t>(n * lw), s);
  device_buffer<float> pop(static_cast<std::size_t>(n + 1), s), aux(static_cast<std::size_t>(n + 1), s);
  device_buffer<entry> state(static_cast<std::size_t>(n * kc), s);
  device_buffer<topk_bar> bars(static_cast<std::size_t>(n + 1), s);
  device_buffer<unsigned> cnt_a(static_cast<std::size_t>(L.P), s), cnt_b(static_cast<std::size_t>(L.W), s);
  device_buffer<entry> buck_a(static_cast<std::size_t>(L.P * L.cap_a), s),
      buck_b(static_cast<std::size_t>(L.W * L.cap_b), s);
  device_buffer<float> scratch(static_cast<std::size_t>(L.widest * L.widest), s);
  device_buffer<unsigned long long> counters(2, s);

  // Signs, popcounts (the entry past the last row read in pairs, never used), inverse norms.
  sign_words_kernel<T><<<grid_blocks(n, 8), 256, 0, s.value()>>>(x, n, d, ld, words.data(), lw, pop.data());
  SPILLWAY_CHECK_LAUNCH();
  SPILLWAY_CUDA_TRY(cudaMemsetAsync(pop.data() + n, 0, sizeof(float), s.value()));
  row_aux_async(x, n, d, ld, similarity_metric::cosine, aux.data(), s);
  SPILLWAY_CUDA_TRY(cudaMemsetAsync(aux.data() + n, 0, sizeof(float), s.value()));
  bars.fill_bytes_async(0, s);
  cnt_a.fill_bytes_async(0, s);
  cnt_b.fill_bytes_async(0, s);
  counters.fill_bytes_async(0, s);
  pd::topk_init_kernel<float, true><<<grid_blocks(n * kc, 256), 256, 0, s.value()>>>(state.data(), n * kc);
  SPILLWAY_CHECK_LAUNCH();
  event signs_done(marks.on ? event::timing::enabled : event::timing::disabled);
  if (marks.on) signs_done.record(s);
  const auto bits = [&](std::int64_t r0, std::int64_t rn) {
    return ::spillway::gemm::row_major<const std::uint32_t>(words.data() + r0 * lw, rn, lw, lw);
  };

  // Seeds: each block's own pairs, dense; then the bars from the lists' k'-th places.
  for (std::int64_t b = 0; b < L.blocks; ++b) {
    const std::int64_t b0 = b * L.S, b1 = fused_block_end(L, n, b), bn = b1 - b0;
    ::spillway::gemm::fragment_sink_bit_gemm_async(s, bits(b0, bn), bits(b0, bn),
                                                   hamming_dense_sink{scratch.data(), bn, pop.data() + b0});
    pd::with_topk_blocks(kc, [&](auto B) {
      pd::topk_rows_kernel<float, true, decltype(B)::value>
          <<<grid_blocks(bn, 8), 256, 0, s.value()>>>(scratch.data(), bn, bn, b0, b0, true, state.data(), kc);
    });
    SPILLWAY_CHECK_LAUNCH();
  }
  fused_bars_kernel<true><<<grid_blocks(n, 256), 256, 0, s.value()>>>(state.data(), n, kc, bars.data());
  SPILLWAY_CHECK_LAUNCH();
  marks.mark(s);

  // Strips: the filter over the 1-bit products, then the merges (an overflowed bucket's row
  // recomputed over its words).
  fused_merge_args<std::uint32_t> ma;
  ma.state = state.data();
  ma.bars = bars.data();
  ma.k = kc;
  ma.data = words.data();
  ma.ld = lw;
  ma.d = lw;
  ma.aux = pop.data();
  ma.recomputed = counters.data();
  ma.candidates = marks.on ? counters.data() + 1 : nullptr;
  for (std::int64_t r0 = 0; r0 < n; r0 += L.P) {
    const std::int64_t rn = std::min(L.P, n - r0);
    for_each_fused_chunk(L, n, r0, [&](std::int64_t c0, std::int64_t w) {
      fused_topk_filter f;
      f.metric = fused_hamming;
      f.aux_a = pop.data() + r0;
      f.aux_b = pop.data() + c0;
      f.bar_a = bars.data() + r0;
      f.bar_b = bars.data() + c0;
      f.a_row0 = static_cast<std::int32_t>(r0);
      f.b_row0 = static_cast<std::int32_t>(c0);
      f.cnt_a = cnt_a.data();
      f.buck_a = buck_a.data();
      f.cap_a = L.cap_a;
      f.cnt_b = cnt_b.data();
      f.buck_b = buck_b.data();
      f.cap_b = L.cap_b;
      marks.mark(s);
      ::spillway::gemm::fragment_sink_bit_gemm_async(s, bits(r0, rn), bits(c0, w), f);
      marks.mark(s);
      fused_topk_merge(ma, fused_hamming, rn, r0, cnt_a.data(), buck_a.data(), L.cap_a, c0, c0 + w, s);
      fused_merge_args<std::uint32_t> mb = ma;
      mb.rows_per_warp = 8;  // the column side: many rows, few candidates each
      fused_topk_merge(mb, fused_hamming, w, c0, cnt_b.data(), buck_b.data(), L.cap_b, r0, r0 + rn, s);
      marks.mark(s);
      ++st.chunks;
    });
  }

  // Rescoring into out.
  event strips_done(marks.on ? event::timing::enabled : event::timing::disabled);
  if (marks.on) strips_done.record(s);
  pd::topk_init_kernel<float, true><<<grid_blocks(n * k, 256), 256, 0, s.value()>>>(out, n * k);
  SPILLWAY_CHECK_LAUNCH();
  const bool vec16 = reinterpret_cast<std::uintptr_t>(x) % 16 == 0 &&
                     (ld * static_cast<std::int64_t>(sizeof(T))) % 16 == 0 &&
                     (d * static_cast<std::int64_t>(sizeof(T))) % 16 == 0;
  pd::with_topk_blocks(k, [&](auto B) {
    binary_rescore_kernel<T, decltype(B)::value><<<grid_blocks(n, 8), 256, 0, s.value()>>>(
        x, n, d, ld, vec16, aux.data(), cosine_zero, state.data(), kc, k, out);
  });
  SPILLWAY_CHECK_LAUNCH();
  marks.mark(s);
  unsigned long long cnt[2] = {0, 0};
  SPILLWAY_CUDA_TRY(cudaMemcpyAsync(cnt, counters.data(), sizeof cnt, cudaMemcpyDeviceToHost, s.value()));
  s.synchronize();  // the buffers are freed on return
  st.recomputed_rows = cnt[0];
  hook.last_recomputed_rows = cnt[0];
  hook.last_candidates = cnt[1];
  hook.last_chunks = st.chunks;
  if (marks.on) {
    marks.publish();  // seeds (with the signs), GEMMs, merges, the whole device part
    const auto ms = [](const event& a, const event& b) {
      float v = 0;
      SPILLWAY_CUDA_TRY(cudaEventElapsedTime(&v, a.value(), b.value()));
      return v;
    };
    hook.signs_ms = ms(marks.marks.front(), signs_done);
    hook.rescore_ms = ms(strips_done, marks.marks.back());
  }
  return st;
}

}  // namespace spillway::similarity::detail
