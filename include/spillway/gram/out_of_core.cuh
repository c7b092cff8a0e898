// spillway/gram/out_of_core.cuh — the out-of-core Gram driver: the pairwise layer's pair job
// (spillway/pairwise/pair_job.cuh: row strips as tasks of run_tasks, the column operand resident
// or streamed, the sinks) fed by the bit producer below, which copies bit rows, computes their
// popcounts and hands each panel pair to the b1 tile kernels with an epilogue that scores the
// counts straight into the strip's output layout.
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/device_buffer.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/memory_budget.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/gram/bit_matrix.hpp>
#include <spillway/gram/detail/kernels.cuh>
#include <spillway/gram/detail/sink_kernels.cuh>
#include <spillway/gram/device_bit_matrix.cuh>
#include <spillway/gram/epilogue.hpp>
#include <spillway/gram/host_gram.hpp>
#include <spillway/gram/kernel_path.hpp>
#include <spillway/pairwise/plan.hpp>
#include <spillway/pairwise/pair_job.cuh>
#include <spillway/pipeline/job.hpp>
#include <spillway/pipeline/task_pipeline.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

namespace spillway::gram {

/// The plan of a Gram job: the pair-job plan (spillway::pairwise::make_pair_plan with the bit
/// matrix's row bytes and one int32 popcount per row).
using gram_plan = ::spillway::pairwise::pair_plan;
using gram_report = ::spillway::pairwise::pair_report;

/// Options shared by every Gram entry point: the pair job's (budget, devices, max_panel_rows,
/// slots_per_device, progress, report, trace: pairwise::pair_job_options) and the Gram's own.
struct gram_options : ::spillway::pairwise::pair_job_options {
  metric epilogue = metric::counts;
  score_options scores{};
  /// Tile kernel (automatic = fastest the device and build can run).
  kernel_path path = kernel_path::automatic;
  /// With no GPU (and `devices` empty): true runs the host implementation (host_gram_dense /
  /// host_gram_topk / host_gram_threshold, multi-threaded with OpenMP; the report then lists no
  /// devices); false (the default) throws no_gpu_error naming this option.
  bool host_fallback = false;
};

/// One finished strip of the Gram matrix, handed to a gram_strips callback (host memory valid
/// during the callback; see pairwise::host_strip for which entries a strip holds).
template <class V>
using gram_strip = ::spillway::pairwise::host_strip<V>;

/// One finished strip handed to a gram_device_strips callback: device memory, on the strip's
/// stream, before any device→host copy (see pairwise::device_strip).
template <class V>
using gram_device_strip = ::spillway::pairwise::device_strip<V>;

namespace detail {

// The epilogue that scores a count into each pairwise writer. The triangle writers (A·Aᵀ only)
// score both rows from A's popcounts.
template <class Writer>
scored_epilogue<Writer> make_epilogue(const Writer& w, const std::int32_t* pa, const std::int32_t* pb,
                                      const scorer& sc) {
  using V = typename writer_value<Writer>::type;
  constexpr bool triangle = std::is_same_v<Writer, ::spillway::pairwise::detail::packed_writer<V>> ||
                            std::is_same_v<Writer, ::spillway::pairwise::detail::full_writer<V>>;
  return {w, pa, triangle ? pa : pb, sc};
}

template <class V>
checksum_epilogue<V> make_epilogue(const ::spillway::pairwise::detail::checksum_writer<V>& w, const std::int32_t* pa,
                                   const std::int32_t* pb, const scorer& sc) {
  return {{w, pa, pb, sc}};
}

/// The threshold sink's writer: decided in the epilogue. The screen's bound holds unless a zero
/// row's cosine (cosine_zero, at count 0) itself passes.
template <class V>
threshold_epilogue<V> make_epilogue(const ::spillway::pairwise::detail::append_writer<V>& w,
                                    const std::int32_t* pa, const std::int32_t* pb, const scorer& sc) {
  const bool zero_passes =
      sc.m == metric::cosine &&
      ::spillway::pairwise::detail::passes(w.larger, static_cast<V>(sc.cosine_zero), w.threshold);
  return {{w, pa, pb, sc}, !zero_passes};
}

/// The pair job's Producer for bit rows: rows are ld_words 32-bit words, their aux value the
/// popcount, and a panel pair is one bit_gemm_async (tiles i ≤ j for A·Aᵀ).
struct bit_producer {
  using aux_type = std::int32_t;
  /// A threshold is decided in the tile epilogue (pairwise::append_writer): no score strip.
  static constexpr bool decides_threshold = true;
  bit_matrix_view a, b;
  bool symmetric = true;
  metric m = metric::counts;
  scorer sc{};
  kernel_path path = kernel_path::automatic;

  [[nodiscard]] const bit_matrix_view& op(bool is_b) const { return is_b && !symmetric ? b : a; }
  [[nodiscard]] std::int64_t rows(bool is_b) const { return op(is_b).rows; }
  [[nodiscard]] std::size_t row_bytes() const { return static_cast<std::size_t>(a.ld_words) * 4u; }
  [[nodiscard]] std::size_t device_row_bytes(bool) const { return row_bytes(); }
  [[nodiscard]] bool larger() const { return is_similarity(m); }
  [[nodiscard]] const std::byte* device_rows(bool) const { return nullptr; }
  [[nodiscard]] bool score_scratch() const { return false; }
  std::size_t upload(bool is_b, std::int64_t r0, std::int64_t count, std::byte* dst, stream_view s) const {
    const bit_matrix_view& o = op(is_b);
    const std::size_t bytes = static_cast<std::size_t>(count) * row_bytes();
    if (bytes > 0) {
      SPILLWAY_CUDA_TRY(cudaMemcpyAsync(dst, o.words + r0 * o.ld_words, bytes, cudaMemcpyHostToDevice, s.value()));
    }
    return bytes;
  }
  void aux_async(bool, const std::byte* rows_dev, std::int64_t count, std::int32_t* out, stream_view s) const {
    row_popcounts_async(bit_matrix_view{reinterpret_cast<const std::uint32_t*>(rows_dev), count, a.cols, a.ld_words}, out, s);
  }
  [[nodiscard]] std::vector<std::int32_t> host_aux(bool is_b) const { return row_popcounts(op(is_b)); }
  template <class Writer, class V>
  void compute(const ::spillway::pairwise::panel_pair<std::int32_t>& pp, const Writer& w, V*, stream_view s) const {
    bit_gemm_args g;
    g.a = reinterpret_cast<const std::uint32_t*>(pp.a);
    g.a_rows = pp.a_rows;
    g.b = reinterpret_cast<const std::uint32_t*>(pp.b);
    g.b_rows = pp.b_rows;
    g.ld_words = a.ld_words;
    g.a_row0 = pp.a_row0;
    g.b_row0 = pp.b_row0;
    g.upper_only = pp.upper_only;
    if constexpr (std::is_same_v<Writer, ::spillway::pairwise::detail::score_writer<std::int32_t>>) {
      if (sc.m == metric::counts) {
        // Raw counts are the scores: the strip is a store_counts target, which the tensor-core
        // kernels write by bulk tensor stores where the strip's pitch allows (~80 instead of
        // ~1,800 epilogue instructions per thread and tile). That epilogue writes i <= j only, so
        // the lower part of the diagonal block is mirrored afterwards (the row lists read it).
        bit_gemm_async(g, store_counts<std::int32_t>{w.s, w.w, w.i0, w.col0, pp.upper_only}, path, s);
        if (pp.upper_only && w.symmetric && pp.a_row0 == pp.b_row0) {
          mirror_upper_block_async(w.block(pp.a_row0, pp.b_row0), std::min(pp.a_rows, pp.b_rows), w.w, s.value());
          SPILLWAY_CHECK_LAUNCH();
        }
        return;
      }
    }
    bit_gemm_async(g, make_epilogue(w, pp.aux_a, pp.aux_b, sc), path, s);
  }
};

/// A Gram job: the pair job over the bit producer, delivering to `Sink` (pairwise/sinks/).
template <class V, class Sink>
using gram_job = ::spillway::pairwise::detail::pair_job<V, bit_producer, Sink>;

/// Plans and runs a Gram job through the pair job's scheduler.
template <class V, class Sink>
void run_gram_job(gram_job<V, Sink>& job) {
  ::spillway::pairwise::detail::run_pair_job(job);
}

}  // namespace detail
}  // namespace spillway::gram
