// spillway/gram.cuh — the binary Gram module: A·Aᵀ and A·Bᵀ of 0/1 matrices, bit-packed, on the
// b1 tensor cores, with epilogues (counts, Jaccard, cosine, Hamming) and sinks (dense host matrix,
// packed triangle, SciPy condensed, per-row top-k, threshold → COO), out of core under a memory
// budget on one or several GPUs. See docs/gram.md.
//
//   auto a = spillway::gram::pack_bits(bytes.data(), rows, cols);           // host, parallel
//   spillway::gram::gram_options o;
//   o.budget = spillway::memory_budget(8_GiB);
//   std::vector<std::int32_t> tri(spillway::gram::layout_size(triangle_layout::upper_packed, rows));
//   spillway::gram::gram_dense(a.view(), tri.data(), triangle_layout::upper_packed, o);
//   auto nn = spillway::gram::gram_topk<float>(a.view(), {.k = 10}, o_with_jaccard);
#pragma once

#include <spillway/gram/bit_matrix.hpp>
#include <spillway/gram/device_bit_matrix.cuh>
#include <spillway/gram/epilogue.hpp>
#include <spillway/gram/host_gram.hpp>
#include <spillway/gram/kernel_path.hpp>
#include <spillway/gram/out_of_core.cuh>
#include <spillway/pairwise/host_job.hpp>
#include <spillway/pairwise/sinks/neighbour_counts.cuh>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace spillway::gram {

namespace detail {
template <class V>
constexpr void static_check_sparse_value() {
  static_assert(std::is_same_v<V, std::int32_t> || std::is_same_v<V, float> || std::is_same_v<V, double>,
                "top-k and threshold values are int32 (counts, Hamming) or float/double (Jaccard, cosine)");
}
inline void check_host_inputs(const bit_matrix_view& a, const char* who, const char* name) {
  check_view(a, who, name);
  if (a.rows > 0x7FFFFFFELL) {
    throw logic_error(std::string(who) + ": " + name + " has " + std::to_string(a.rows) +
                      " rows; column indices on the device are int32, so at most 2^31 - 2");
  }
}
/// The checks of an entry point's host inputs: A alone (b null) or A and B with the same columns;
/// the output element type against the epilogue.
template <class V>
void check_job_inputs(const bit_matrix_view& a, const bit_matrix_view* b, const gram_options& opt, const char* who) {
  check_host_inputs(a, who, "a");
  if (b != nullptr) {
    check_host_inputs(*b, who, "b");
    check_same_cols(a, *b, who);
  }
  check_output_type<V>(opt.epilogue, a.cols, who);
}
/// A job over A·Aᵀ (b null: symmetric, tiles i ≤ j) or A·Bᵀ, delivering to `sink`.
template <class V, class Sink>
gram_job<V, Sink> make_job(const bit_matrix_view& a, const bit_matrix_view* b, const gram_options& opt,
                           Sink sink) {
  gram_job<V, Sink> job;
  job.prod.a = a;
  if (b != nullptr) job.prod.b = *b;
  job.prod.symmetric = b == nullptr;
  job.prod.m = opt.epilogue;
  job.prod.sc = scorer{opt.epilogue, opt.scores.jaccard_empty, opt.scores.cosine_zero};
  job.prod.path = opt.path;
  job.symmetric = b == nullptr;
  job.sink = std::move(sink);
  job.who = "gram";
  job.opt = opt;  // the pair job's part of the options
  return job;
}
/// The host fallback of gram_strips: the host pair job (pairwise/host_job.hpp) in strips of 1024
/// rows of A against all of B (A·Aᵀ, b null: all of A; first_col 0), handed to on_strip as they are
/// computed. Like the other host fallbacks it reports one task and calls no progress callback; an
/// exception from on_strip propagates unwrapped.
template <class V, class OnStrip>
job_report host_strips(const bit_matrix_view& a, const bit_matrix_view* b, OnStrip& on_strip,
                       const gram_options& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  ::spillway::pairwise::host_job_options ho;
  ho.block_rows = 1024;
  ::spillway::pairwise::host_pair_job<V, host_ops<V>> job(host_ops<V>{opt.epilogue, opt.scores}, a, b, ho,
                                                          "gram_strips");
  job.strips([&](std::int64_t first_row, std::int64_t rows, const V* values, std::int64_t cols) {
    gram_strip<V> st;
    st.first_row = first_row;
    st.rows = rows;
    st.first_col = 0;
    st.cols = cols;
    st.values = values;
    on_strip(st);
  });
  return ::spillway::detail::host_job_report(t0);
}
/// Whether entry point `who` runs its host implementation instead (`host_function`, named in the
/// no-GPU error): no GPU, and gram_options::host_fallback allows it (run_on_host_instead).
inline bool on_host(const gram_options& opt, const char* who, const char* host_function) {
  return ::spillway::detail::run_on_host_instead(opt.host_fallback, opt.devices, who,
                                                 "gram_options::host_fallback", host_function);
}
/// A job over A·Aᵀ (b null) or A·Bᵀ delivering to `sink`, run; its report.
template <class V, class Sink>
job_report run_for_report(const bit_matrix_view& a, const bit_matrix_view* b, const gram_options& opt,
                          Sink sink) {
  auto job = make_job<V>(a, b, opt, std::move(sink));
  run_gram_job(job);
  return job.report;
}
/// run_and_collect's default collect step: what the finished job's sink collects.
struct sink_collect {
  template <class Job>
  auto operator()(Job& job) const {
    return job.sink.collect(job);
  }
};
/// The course of a sparse entry point `who` once its inputs are checked and not empty: `host()`
/// (host_function) where on_host says so, else a job delivering to `sink` and `collect(job)` once
/// it has run (by default what the sink collects).
template <class V, class Sink, class Host, class Collect = sink_collect>
std::invoke_result_t<Host&> run_and_collect(const bit_matrix_view& a, const bit_matrix_view* b,
                                            const gram_options& opt, const char* who,
                                            const char* host_function, Sink sink, Host&& host,
                                            Collect collect = {}) {
  if (on_host(opt, who, host_function)) return host();
  auto job = make_job<V>(a, b, opt, std::move(sink));
  run_gram_job(job);
  return collect(job);
}
/// The checks of a top-k, threshold or neighbour-count entry point: V, then check_job_inputs.
template <class V>
void check_sparse_inputs(const bit_matrix_view& a, const bit_matrix_view* b, const gram_options& opt,
                         const char* who) {
  static_check_sparse_value<V>();
  check_job_inputs<V>(a, b, opt, who);
}
/// Whether a job over A·Aᵀ (b null) or A·Bᵀ has no entries.
inline bool no_pairs(const bit_matrix_view& a, const bit_matrix_view* b) {
  return a.rows == 0 || (b != nullptr && b->rows == 0);
}

/// gram_strips over A·Aᵀ (b null) or A·Bᵀ.
template <class V, class OnStrip>
job_report strips_job(const bit_matrix_view& a, const bit_matrix_view* b, OnStrip& on_strip,
                      const gram_options& opt) {
  check_job_inputs<V>(a, b, opt, "gram_strips");
  if (no_pairs(a, b)) return {};
  if (on_host(opt, "gram_strips", "host_gram_dense per strip")) return host_strips<V>(a, b, on_strip, opt);
  ::spillway::pairwise::detail::strips_sink<V> sink;
  sink.on_strip = [&on_strip](const gram_strip<V>& st) { on_strip(st); };
  return run_for_report<V>(a, b, opt, std::move(sink));
}
/// gram_device_strips over A·Aᵀ (b null) or A·Bᵀ. The device form hands out device memory, so it
/// has no host implementation to fall back on.
template <class V, class OnStrip>
job_report device_strips_job(const bit_matrix_view& a, const bit_matrix_view* b, OnStrip& on_strip,
                             const gram_options& opt) {
  static_assert(std::is_invocable_v<OnStrip&, const gram_device_strip<V>&>,
                "on_strip must be callable as on_strip(const gram_device_strip<V>&)");
  check_job_inputs<V>(a, b, opt, "gram_device_strips");
  if (no_pairs(a, b)) return {};
  if (opt.devices.empty() && device_count() == 0) {
    ::spillway::throw_no_gpu("gram_device_strips",
                             "its strips live in device memory; gram_strips (with gram_options::host_fallback) "
                             "runs on the host");
  }
  ::spillway::pairwise::detail::strips_sink<V> sink;
  sink.on_device_strip = [&on_strip](const gram_device_strip<V>& st) { on_strip(st); };
  return run_for_report<V>(a, b, opt, std::move(sink));
}
/// gram_topk over A·Aᵀ (b null) or A·Bᵀ.
template <class V>
topk_result<V> topk_job(const bit_matrix_view& a, const bit_matrix_view* b, const topk_options& k,
                        const gram_options& opt) {
  check_sparse_inputs<V>(a, b, opt, "gram_topk");
  check_topk(k, "gram_topk");
  if (no_pairs(a, b)) return ::spillway::pairwise::detail::empty_topk<V>(a.rows, k.k);
  return run_and_collect<V>(a, b, opt, "gram_topk", "host_gram_topk",
                            ::spillway::pairwise::detail::topk_sink<V>(k), [&] {
                              return b != nullptr ? host_gram_topk<V>(a, *b, k, opt.epilogue, opt.scores)
                                                  : host_gram_topk<V>(a, k, opt.epilogue, opt.scores);
                            });
}
/// gram_threshold over A·Aᵀ (b null) or A·Bᵀ.
template <class V>
coo_result<V> threshold_job(const bit_matrix_view& a, const bit_matrix_view* b, const threshold_options& t,
                            const gram_options& opt) {
  check_sparse_inputs<V>(a, b, opt, "gram_threshold");
  if (no_pairs(a, b)) return {};
  return run_and_collect<V>(a, b, opt, "gram_threshold", "host_gram_threshold",
                            ::spillway::pairwise::detail::threshold_sink<V>(t), [&] {
                              return b != nullptr ? host_gram_threshold<V>(a, *b, t, opt.epilogue, opt.scores)
                                                  : host_gram_threshold<V>(a, t, opt.epilogue, opt.scores);
                            });
}
/// gram_threshold_csr over A·Aᵀ (b null) or A·Bᵀ.
template <class V>
csr_result<V> threshold_csr_job(const bit_matrix_view& a, const bit_matrix_view* b,
                                const threshold_options& t, const gram_options& opt) {
  const char* who = "gram_threshold_csr";
  check_sparse_inputs<V>(a, b, opt, who);
  const std::int64_t cols = b != nullptr ? b->rows : a.rows;
  if (no_pairs(a, b)) {
    csr_result<V> c;
    c.rows = a.rows;
    c.cols = cols;
    c.indptr.assign(static_cast<std::size_t>(a.rows) + 1, 0);
    return c;
  }
  ::spillway::pairwise::detail::threshold_sink<V> sink(t);
  sink.csr = true;
  return run_and_collect<V>(
      a, b, opt, who, "host_gram_threshold", std::move(sink),
      [&] {
        return ::spillway::pairwise::to_csr(b != nullptr
                                                ? host_gram_threshold<V>(a, *b, t, opt.epilogue, opt.scores)
                                                : host_gram_threshold<V>(a, t, opt.epilogue, opt.scores),
                                            a.rows, cols);
      },
      [](auto& job) { return job.sink.collect_csr(job); });
}
/// gram_neighbour_counts over A·Aᵀ (b null) or A·Bᵀ: every count 0 where B has no rows.
template <class V>
std::vector<std::int64_t> neighbour_counts_job(const bit_matrix_view& a, const bit_matrix_view* b,
                                               const pairwise::neighbour_count_options& o,
                                               const gram_options& opt) {
  check_sparse_inputs<V>(a, b, opt, "gram_neighbour_counts");
  if (a.rows == 0) return {};
  if (b != nullptr && b->rows == 0) return std::vector<std::int64_t>(static_cast<std::size_t>(a.rows), 0);
  return run_and_collect<V>(a, b, opt, "gram_neighbour_counts", "host_gram_neighbour_counts",
                            ::spillway::pairwise::detail::neighbour_count_sink<V>(o), [&] {
                              return b != nullptr
                                         ? host_gram_neighbour_counts<V>(a, *b, o, opt.epilogue, opt.scores)
                                         : host_gram_neighbour_counts<V>(a, o, opt.epilogue, opt.scores);
                            });
}
}  // namespace detail

/// A·Aᵀ of a host bit matrix into host memory `out` (layout_size(layout, a.rows) elements of
/// OutT: int32/uint16 for counts and Hamming, float/double for Jaccard and cosine). Only tiles
/// i ≤ j are computed; `full` is mirrored on the device. `out` should be pinned (pinned_buffer,
/// or registered with host_registration) for the copies to overlap compute. Returns when all
/// output is on the host.
template <class OutT>
job_report gram_dense(const bit_matrix_view& a, OutT* out, triangle_layout layout, const gram_options& opt = {}) {
  detail::check_job_inputs<OutT>(a, nullptr, opt, "gram_dense");
  if (layout_size(layout, a.rows) > 0 && out == nullptr) throw logic_error("gram_dense: out is null");
  if (layout_size(layout, a.rows) == 0) return {};
  if (detail::on_host(opt, "gram_dense", "host_gram_dense")) {
    const auto t0 = std::chrono::steady_clock::now();
    host_gram_dense(a, out, layout, opt.epilogue, opt.scores);
    return ::spillway::detail::host_job_report(t0);
  }
  if (layout == triangle_layout::full)
    return detail::run_for_report<OutT>(a, nullptr, opt, ::spillway::pairwise::detail::full_sink<OutT>(out));
  return detail::run_for_report<OutT>(
      a, nullptr, opt,
      ::spillway::pairwise::detail::packed_sink<OutT>(out, layout != triangle_layout::condensed));
}

/// A·Bᵀ (a.rows x b.rows, row-major with `ldc` ≥ b.rows between rows) into host memory `out`.
template <class OutT>
job_report gram_dense(const bit_matrix_view& a, const bit_matrix_view& b, OutT* out, std::int64_t ldc,
                const gram_options& opt = {}) {
  detail::check_job_inputs<OutT>(a, &b, opt, "gram_dense");
  if (ldc < b.rows) throw logic_error("gram_dense: ldc (" + std::to_string(ldc) + ") is smaller than b.rows (" + std::to_string(b.rows) + ")");
  if (a.rows == 0 || b.rows == 0) return {};
  if (out == nullptr) throw logic_error("gram_dense: out is null");
  if (detail::on_host(opt, "gram_dense", "host_gram_dense")) {
    const auto t0 = std::chrono::steady_clock::now();
    host_gram_dense(a, b, out, ldc, opt.epilogue, opt.scores);
    return ::spillway::detail::host_job_report(t0);
  }
  return detail::run_for_report<OutT>(a, &b, opt, ::spillway::pairwise::detail::rect_sink<OutT>(out, ldc));
}

/// A·Aᵀ delivered strip by strip, for results too large to hold: `on_strip(const gram_strip<V>&)`
/// runs on the host as each strip of rows is finished (while later strips compute), with the
/// strip's values in pinned staging that is reused after it returns — write them to disk, reduce
/// them, or copy what you keep. V as for gram_dense (int32/uint16 counts and Hamming, float/double
/// Jaccard and cosine). Strips arrive in any order; with several devices the callback runs on each
/// device's worker thread, possibly concurrently (guard shared state). Each strip holds its rows'
/// columns from the strip's first row on (see gram_strip). Throwing from the callback stops the job
/// (pipeline_error, the exception nested).
template <class V, class OnStrip>
job_report gram_strips(const bit_matrix_view& a, OnStrip&& on_strip, const gram_options& opt = {}) {
  return detail::strips_job<V>(a, nullptr, on_strip, opt);
}

/// A·Bᵀ delivered strip by strip (rows of A; all b.rows columns in each strip).
template <class V, class OnStrip>
job_report gram_strips(const bit_matrix_view& a, const bit_matrix_view& b, OnStrip&& on_strip,
                       const gram_options& opt = {}) {
  return detail::strips_job<V>(a, &b, on_strip, opt);
}

/// A·Aᵀ delivered strip by strip ON THE DEVICE: `on_strip(const gram_device_strip<V>&)` runs on
/// the device's worker thread as each strip's product has been enqueued, with the strip in device
/// memory and the strip's stream; it enqueues its own work on that stream (a reduction, a
/// device→host copy of what it keeps, a write through GPUDirect) while later strips compute on the
/// other slots. Nothing is copied to the host by the job. The strip holds the same entries as in
/// gram_strips (columns from its first row on). With several devices the callback runs on each
/// device's worker, possibly concurrently. There is no host fallback (no GPU: no_gpu_error).
/// Throwing from the callback stops the job (pipeline_error, the exception nested).
template <class V, class OnStrip>
job_report gram_device_strips(const bit_matrix_view& a, OnStrip&& on_strip, const gram_options& opt = {}) {
  return detail::device_strips_job<V>(a, nullptr, on_strip, opt);
}

/// A·Bᵀ delivered strip by strip on the device (rows of A; all b.rows columns in each strip).
template <class V, class OnStrip>
job_report gram_device_strips(const bit_matrix_view& a, const bit_matrix_view& b, OnStrip&& on_strip,
                              const gram_options& opt = {}) {
  return detail::device_strips_job<V>(a, &b, on_strip, opt);
}

/// Per-row top-k of A·Aᵀ, merged across strips on the device; only the lists reach the host.
template <class V>
topk_result<V> gram_topk(const bit_matrix_view& a, const topk_options& k, const gram_options& opt = {}) {
  return detail::topk_job<V>(a, nullptr, k, opt);
}

/// Per-row top-k of A·Bᵀ: for each row of A, the k best rows of B.
template <class V>
topk_result<V> gram_topk(const bit_matrix_view& a, const bit_matrix_view& b, const topk_options& k,
                         const gram_options& opt = {}) {
  return detail::topk_job<V>(a, &b, k, opt);
}

/// Entries of A·Aᵀ passing a threshold, as COO sorted by row then column (compacted on the device).
template <class V>
coo_result<V> gram_threshold(const bit_matrix_view& a, const threshold_options& t, const gram_options& opt = {}) {
  return detail::threshold_job<V>(a, nullptr, t, opt);
}

/// Entries of A·Bᵀ passing a threshold, as COO sorted by row then column.
template <class V>
coo_result<V> gram_threshold(const bit_matrix_view& a, const bit_matrix_view& b, const threshold_options& t,
                             const gram_options& opt = {}) {
  return detail::threshold_job<V>(a, &b, t, opt);
}

/// gram_threshold's entries as CSR (SciPy's csr layout: indptr, then each row's columns ascending
/// and their values), assembled directly: no row vector is made.
template <class V>
csr_result<V> gram_threshold_csr(const bit_matrix_view& a, const threshold_options& t,
                                 const gram_options& opt = {}) {
  return detail::threshold_csr_job<V>(a, nullptr, t, opt);
}

/// gram_threshold's entries of A·Bᵀ as CSR over rows(A) x rows(B).
template <class V>
csr_result<V> gram_threshold_csr(const bit_matrix_view& a, const bit_matrix_view& b,
                                 const threshold_options& t, const gram_options& opt = {}) {
  return detail::threshold_csr_job<V>(a, &b, t, opt);
}

/// Per-row neighbour counts of A·Aᵀ: for each row i, how many rows j (j ≠ i unless
/// include_diagonal) score ≥ threshold (similarities; ≤ for Hamming). Counted on the device; only
/// the n counts reach the host (pairwise/sinks/neighbour_counts.cuh). V as for gram_threshold.
template <class V>
std::vector<std::int64_t> gram_neighbour_counts(const bit_matrix_view& a,
                                                const pairwise::neighbour_count_options& o,
                                                const gram_options& opt = {}) {
  return detail::neighbour_counts_job<V>(a, nullptr, o, opt);
}

/// Per-row neighbour counts of A·Bᵀ: for each row of A, how many rows of B pass the threshold.
template <class V>
std::vector<std::int64_t> gram_neighbour_counts(const bit_matrix_view& a, const bit_matrix_view& b,
                                                const pairwise::neighbour_count_options& o,
                                                const gram_options& opt = {}) {
  return detail::neighbour_counts_job<V>(a, &b, o, opt);
}

/// In core: A·Aᵀ of a bit matrix already on the current device into device memory `out`
/// (layout_size(layout, rows) elements), enqueued on `s`. Tiles i ≤ j only. `a` is a view of
/// device memory: a device_bit_matrix's view(), rows of one (row_range), or your own words laid
/// out as bit_matrix_view documents (128-byte aligned, ld_words a multiple of 32, padding zero).
template <class OutT>
void gram_async(const bit_matrix_view& a, OutT* out, triangle_layout layout, stream_view s, metric m = metric::counts,
                score_options so = {}, kernel_path path = kernel_path::automatic) {
  detail::check_view(a, "gram_async", "a");
  detail::check_output_type<OutT>(m, a.cols, "gram_async");
  const std::int64_t n = a.rows;
  if (layout_size(layout, n) == 0) return;
  if (out == nullptr) throw logic_error("gram_async: out is null");
  device_buffer<std::int32_t> pop(static_cast<std::size_t>(n), s);
  row_popcounts_async(a, pop.data(), s);
  const detail::scorer sc{m, so.jaccard_empty, so.cosine_zero};
  detail::bit_gemm_args g;
  g.a = a.words;
  g.a_rows = n;
  g.b = a.words;
  g.b_rows = n;
  g.ld_words = a.ld_words;
  g.upper_only = true;
  if (layout == triangle_layout::full) {
    detail::bit_gemm_async(g, detail::scored_epilogue<::spillway::pairwise::detail::full_writer<OutT>>{{out, nullptr, 0, n, n, n}, pop.data(), pop.data(), sc}, path, s);
  } else {
    const bool wd = layout == triangle_layout::upper_packed;
    detail::bit_gemm_async(g, detail::scored_epilogue<::spillway::pairwise::detail::packed_writer<OutT>>{{out, n, 0, wd}, pop.data(), pop.data(), sc}, path, s);
  }
}

/// In core: A·Bᵀ of two bit matrices in device memory into device memory `out` (a.rows x b.rows,
/// `ldc`). Views as for the A·Aᵀ form: e.g. a strip of A's rows against all of B.
template <class OutT>
void gram_async(const bit_matrix_view& a, const bit_matrix_view& b, OutT* out, std::int64_t ldc, stream_view s,
                metric m = metric::counts, score_options so = {}, kernel_path path = kernel_path::automatic) {
  detail::check_view(a, "gram_async", "a");
  detail::check_view(b, "gram_async", "b");
  detail::check_same_cols(a, b, "gram_async");
  detail::check_output_type<OutT>(m, a.cols, "gram_async");
  if (ldc < b.rows) throw logic_error("gram_async: ldc (" + std::to_string(ldc) + ") < b.rows (" + std::to_string(b.rows) + ")");
  if (a.ld_words != b.ld_words) {
    throw logic_error("gram_async: a.ld_words (" + std::to_string(a.ld_words) + ") and b.ld_words (" +
                      std::to_string(b.ld_words) + ") differ");
  }
  if (a.rows == 0 || b.rows == 0) return;
  if (out == nullptr) throw logic_error("gram_async: out is null");
  device_buffer<std::int32_t> pa(static_cast<std::size_t>(a.rows), s), pb(static_cast<std::size_t>(b.rows), s);
  row_popcounts_async(a, pa.data(), s);
  row_popcounts_async(b, pb.data(), s);
  const detail::scorer sc{m, so.jaccard_empty, so.cosine_zero};
  detail::bit_gemm_args g;
  g.a = a.words;
  g.a_rows = a.rows;
  g.b = b.words;
  g.b_rows = b.rows;
  g.ld_words = a.ld_words;
  detail::bit_gemm_async(g, detail::scored_epilogue<::spillway::pairwise::detail::rect_writer<OutT>>{{out, 0, ldc}, pa.data(), pb.data(), sc}, path, s);
}

/// The same for device_bit_matrix operands (their view()).
template <class OutT>
void gram_async(const device_bit_matrix& a, OutT* out, triangle_layout layout, stream_view s, metric m = metric::counts,
                score_options so = {}, kernel_path path = kernel_path::automatic) {
  gram_async(a.view(), out, layout, s, m, so, path);
}
template <class OutT>
void gram_async(const device_bit_matrix& a, const device_bit_matrix& b, OutT* out, std::int64_t ldc, stream_view s,
                metric m = metric::counts, score_options so = {}, kernel_path path = kernel_path::automatic) {
  gram_async(a.view(), b.view(), out, ldc, s, m, so, path);
}

}  // namespace spillway::gram
