// spillway/similarity/similarity.cuh — all-pairs similarity of float, bf16 and half rows: A·Aᵀ (the
// symmetric half only) and A·Bᵀ with inner-product, cosine or Euclidean-distance scores, into the
// pairwise sinks that bit Gram uses too — dense (full, packed upper triangle, SciPy condensed;
// A·Bᵀ rectangles), per-row top-k (k ≤ 128, ties to the smaller column, the diagonal excluded by
// default), threshold → COO, and strip-by-strip callbacks on the host or the device. See
// docs/similarity.md.
//
//   namespace sim = spillway::similarity;
//   sim::similarity_options o;                       // cosine, GEMM defaults, 80% of free memory
//   o.budget = spillway::memory_budget(std::size_t{8} << 30);
//   auto nn = sim::similarity_topk(sim::row_major(emb.data(), n, 768), {32}, o);   // host rows, out of core
//
// Rows in host memory are streamed through the scheduler under the memory budget (one or several
// GPUs); rows already in device memory (in core) are used where they are, on their device. Each
// strip of the output is one GEMM (gemm_async: bf16/half on tensor cores with float accumulation;
// float in exact FP32 by default, TF32 with gemm_options::math = tf32) into a device score strip
// whose epilogue applies the metric with per-row values computed once per panel; the pairwise
// sink then consumes the strip (the same kernels as Gram's).
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/device_buffer.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/host_registration.hpp>
#include <spillway/core/memory_budget.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/gemm/gemm.cuh>
#include <spillway/gemm/matrix_view.hpp>
#include <spillway/gemm/options.hpp>
#include <spillway/pairwise/layout.hpp>
#include <spillway/pairwise/pair_job.cuh>
#include <spillway/pairwise/plan.hpp>
#include <spillway/pairwise/sink_kernels.cuh>
#include <spillway/pairwise/sinks.hpp>
#include <spillway/pairwise/sinks/neighbour_counts.cuh>
#include <spillway/pairwise/sinks/topk.cuh>
#include <spillway/pipeline/job.hpp>
#include <spillway/pipeline/task_pipeline.hpp>
#include <spillway/similarity/detail/binary_topk.cuh>
#include <spillway/similarity/detail/fused_topk_sink.cuh>
#include <spillway/similarity/detail/kernels.cuh>
#include <spillway/similarity/detail/topk_fused.cuh>
#include <spillway/similarity/host_similarity.hpp>
#include <spillway/tile/arch.cuh>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace spillway::similarity {

// The GEMM behind the scores is gemm's (similarity_options::gemm): its options named here too.
using ::spillway::gemm::gemm_options;
using ::spillway::gemm::gemm_path;
using ::spillway::gemm::math_mode;

using ::spillway::pairwise::coo_result;
using ::spillway::pairwise::layout_size;
using ::spillway::pairwise::pair_report;
using ::spillway::pairwise::threshold_options;
using ::spillway::pairwise::topk_options;
using ::spillway::pairwise::topk_result;
using ::spillway::pairwise::triangle_layout;

/// Options of every similarity entry point: the pair job's (budget, devices, max_panel_rows ≤ 2048,
/// slots_per_device, progress, report, trace: pairwise::pair_job_options) and the similarity's own.
struct similarity_options : ::spillway::pairwise::pair_job_options {
  similarity_metric metric = similarity_metric::cosine;
  /// Cosine when either row is all zero (0/0): this value, for every pair with a zero row (the
  /// row with itself included). Default 0: a zero vector is like nothing.
  float cosine_zero = 0.0f;
  /// The GEMM behind the scores. Float rows default to math_mode::exact (FP32 fused multiply-adds,
  /// what a BLAS SGEMM computes); math_mode::tf32 runs the TF32 tensor cores (each operand keeps 10
  /// mantissa bits: cosine error up to ~2·2^-10). bf16 and half rows always run on tensor cores
  /// with float accumulation (products exact, sums rounded to float).
  gemm_options gemm{};
  /// Scan the rows for NaN and infinities before anything is computed and refuse them
  /// (logic_error naming the first such row; the output untouched). false skips the scan (one read
  /// of the rows); scores of such rows are then whatever IEEE arithmetic gives.
  bool check_finite = true;
  /// Host rows in ordinary (pageable) memory are page-locked for the call (cudaHostRegister,
  /// undone before it returns; pair_report::a_registered / b_registered say so), so the job copies
  /// them by DMA: `automatic` and `always` both do (measured faster than copying from pageable
  /// memory: docs/similarity.md, "page-locking the rows");
  /// `never` copies them as they are. Where the driver refuses (already registered in part, the locked-memory limit),
  /// the rows are copied as they are.
  page_lock lock = page_lock::automatic;
  /// With no GPU (and `devices` empty): true runs the host implementation (host_similarity_*,
  /// in double); false (the default) throws no_gpu_error naming this option.
  bool host_fallback = false;
};

/// One finished strip of similarities handed to a similarity_strips callback (host memory, valid
/// during the callback; which entries a strip holds: pairwise::host_strip).
using similarity_strip = ::spillway::pairwise::host_strip<float>;
/// The same in device memory, on the strip's stream (pairwise::device_strip).
using similarity_device_strip = ::spillway::pairwise::device_strip<float>;

namespace detail {

/// The pair job's Producer for float / bf16 / half rows: rows copied with their stride padded to
/// 16 bytes (what the tensor-core GEMMs take without a staging copy), per-row values for the
/// metric, and one gemm_async per panel pair whose epilogue scores the inner products.
template <class T>
struct float_producer {
  using aux_type = float;
  matrix_view<const T> a, b;
  bool symmetric = true;
  bool on_dev = false;
  similarity_metric m = similarity_metric::cosine;
  float cosine_zero = 0.0f;
  gemm_options go{};
  index_t ldd = 0;  // elements between copied rows on the device

  [[nodiscard]] const matrix_view<const T>& op(bool is_b) const { return is_b && !symmetric ? b : a; }
  [[nodiscard]] std::int64_t rows(bool is_b) const { return op(is_b).rows; }
  [[nodiscard]] std::size_t row_bytes() const { return static_cast<std::size_t>(ldd) * sizeof(T); }
  [[nodiscard]] std::size_t device_row_bytes(bool is_b) const { return static_cast<std::size_t>(op(is_b).ld) * sizeof(T); }
  [[nodiscard]] bool larger() const { return is_similarity(m); }
  [[nodiscard]] bool score_scratch() const { return true; }
  [[nodiscard]] const std::byte* device_rows(bool is_b) const {
    return on_dev ? reinterpret_cast<const std::byte*>(op(is_b).data) : nullptr;
  }
  [[nodiscard]] index_t stride(bool is_b) const { return on_dev ? op(is_b).ld : ldd; }

  std::size_t upload(bool is_b, std::int64_t r0, std::int64_t count, std::byte* dst, stream_view s) const {
    const matrix_view<const T>& o = op(is_b);
    if (count <= 0 || o.cols == 0) return 0;
    SPILLWAY_CUDA_TRY(cudaMemcpy2DAsync(dst, row_bytes(), o.data + r0 * o.ld, static_cast<std::size_t>(o.ld) * sizeof(T),
                                        static_cast<std::size_t>(o.cols) * sizeof(T), static_cast<std::size_t>(count),
                                        cudaMemcpyHostToDevice, s.value()));
    return static_cast<std::size_t>(count * o.cols) * sizeof(T);
  }
  void aux_async(bool is_b, const std::byte* rows_dev, std::int64_t count, float* out, stream_view s) const {
    row_aux_async(reinterpret_cast<const T*>(rows_dev), count, a.cols, stride(is_b), m, out, s);
  }
  [[nodiscard]] std::vector<float> host_aux(bool is_b) const {
    const std::vector<double> sq = host_sq_norms(op(is_b));
    std::vector<float> out(sq.size());
    for (std::size_t i = 0; i < sq.size(); ++i) {
      out[i] = m == similarity_metric::cosine ? (sq[i] > 0.0 ? static_cast<float>(1.0 / std::sqrt(sq[i])) : 0.0f)
                                              : static_cast<float>(sq[i]);
    }
    return out;
  }
  template <class Writer, class V>
  void compute(const ::spillway::pairwise::panel_pair<float>& pp, const Writer& w, V* scratch, stream_view s) const {
    static_assert(std::is_same_v<V, float>, "similarity scores are float");
    namespace pd = ::spillway::pairwise::detail;
    const auto A = row_major(reinterpret_cast<const T*>(pp.a), pp.a_rows, a.cols, stride(false));
    const auto B = row_major(reinterpret_cast<const T*>(pp.b), pp.b_rows, a.cols, stride(!symmetric)).t();
    const similarity_epilogue epi{m, pp.aux_a + pp.a_row0, pp.aux_b + pp.b_row0, cosine_zero};
    if constexpr (Writer::dense) {
      // The GEMM writes the sink's own dense block: no second pass.
      float* c = w.block(pp.a_row0, pp.b_row0);
      ::spillway::gemm::gemm_async(s, 1.0f, A, B, 0.0f, row_major(c, pp.a_rows, pp.b_rows, w.block_ld()), go,
                                   epi);
      if (pp.upper_only && pp.a_row0 == pp.b_row0) {
        const std::int64_t r = std::min(pp.a_rows, pp.b_rows);
        pd::mirror_diagonal_block_kernel<float>
            <<<grid_blocks(r * r, 256), 256, 0, s.value()>>>(c, r, w.block_ld());
        SPILLWAY_CHECK_LAUNCH();
      }
    } else {
      // Triangle layouts: a dense block first, then the pairwise writer scatters the pairs it keeps.
      ::spillway::gemm::gemm_async(s, 1.0f, A, B, 0.0f, row_major(scratch, pp.a_rows, pp.b_rows), go, epi);
      pd::scatter_strip_kernel<float, Writer><<<grid_blocks(pp.a_rows * pp.b_rows, 256), 256, 0, s.value()>>>(
          scratch, pp.a_rows, pp.b_rows, pp.b_rows, pp.a_row0, pp.b_row0, w);
      SPILLWAY_CHECK_LAUNCH();
    }
  }
};

template <class T, class Sink>
using similarity_job = ::spillway::pairwise::detail::pair_job<float, float_producer<T>, Sink>;

/// The device holding `p`, or -1 for host (pageable, pinned or managed) memory.
inline int device_of(const void* p) {
  if (p == nullptr || device_count() == 0) return -1;
  cudaPointerAttributes at{};
  const cudaError_t e = cudaPointerGetAttributes(&at, p);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return at.type == cudaMemoryTypeDevice ? at.device : -1;
}

/// The first row of device rows `a` (the current device's) holding a NaN or an infinity, or -1:
/// scanned on `s`, after the work already queued there (a copy of the rows, say).
template <class T>
std::int64_t first_nonfinite_row_device(const matrix_view<const T>& a, stream_view s) {
  if (a.rows == 0 || a.cols == 0) return -1;
  device_buffer<unsigned long long> flag(1, s);
  flag.fill_bytes_async(0xFF, s);
  const std::int64_t total = a.rows * a.cols;
  first_nonfinite_row_kernel<T>
      <<<grid_blocks(total, 256), 256, 0, s.value()>>>(a.data, a.rows, a.cols, a.ld, flag.data());
  SPILLWAY_CHECK_LAUNCH();
  const std::vector<unsigned long long> h = flag.to_host(s);
  return h[0] == ~0ULL ? -1 : static_cast<std::int64_t>(h[0]);
}

/// The same on a stream of its own on `device`.
template <class T>
std::int64_t first_nonfinite_row_device(const matrix_view<const T>& a, int device) {
  device_guard g(device);
  stream st(device);
  return first_nonfinite_row_device(a, st.view());
}

/// A job over A·Aᵀ (b null) or A·Bᵀ into `sink`: rows in host memory stream through the scheduler;
/// rows in device memory (both operands on one device) are used in place on that device.
/// `a_device`: device_of(a.data) when the caller has already looked it up (a pointer query each).
/// `scan_rows`: refuse non-finite rows here (with check_finite) — false for a sink that scans them
/// on the device itself (the fused top-k).
template <class T, class Sink>
similarity_job<T, Sink> make_job(const matrix_view<const T>& a, const matrix_view<const T>* b,
                                 const similarity_options& opt, Sink sink, const char* who,
                                 std::optional<int> a_device = std::nullopt, bool scan_rows = true) {
  similarity_job<T, Sink> job;
  auto& p = job.prod;
  p.a = a;
  if (b != nullptr) p.b = *b;
  p.symmetric = b == nullptr;
  p.m = opt.metric;
  p.cosine_zero = opt.cosine_zero;
  p.go = opt.gemm;
  constexpr index_t align = static_cast<index_t>(16 / sizeof(T));
  p.ldd = (std::max<index_t>(a.cols, 1) + align - 1) / align * align;
  const int dev_a = a_device ? *a_device : device_of(a.data);
  const int dev_b = b != nullptr ? device_of(b->data) : dev_a;
  if (dev_a != dev_b) {
    throw logic_error(std::string(who) + ": A is in " + (dev_a < 0 ? "host memory" : "device " + std::to_string(dev_a) + "'s memory") +
                      " but B in " + (dev_b < 0 ? "host memory" : "device " + std::to_string(dev_b) + "'s memory") +
                      "; pass both from the host (streamed) or both from one device (in core)");
  }
  p.on_dev = dev_a >= 0;
  job.symmetric = b == nullptr;
  job.sink = std::move(sink);
  job.who = who;
  job.opt = opt;  // the pair job's part of the options (devices: rows in device memory run on theirs)
  if (p.on_dev) {
    if (!opt.devices.empty() && (opt.devices.size() != 1 || opt.devices[0] != dev_a)) {
      throw logic_error(std::string(who) + ": the rows are in device " + std::to_string(dev_a) +
                        "'s memory, so the job runs there; similarity_options::devices names other devices");
    }
    job.opt.devices = {dev_a};
  }
  if (opt.check_finite && scan_rows) {
    const std::int64_t ra = p.on_dev ? first_nonfinite_row_device(a, dev_a) : first_nonfinite_row(a);
    refuse_nonfinite(ra, who, "A");
    if (b != nullptr) refuse_nonfinite(p.on_dev ? first_nonfinite_row_device(*b, dev_a) : first_nonfinite_row(*b), who, "B");
  }
  return job;
}

/// The fused top-k (detail/fused_topk_sink.cuh) when it takes these rows and fits the budget with
/// the rows resident at its strip height; nullopt sends the caller to the strip path. The widest
/// chunk halves from fused_widest_chunk (down to 16,384 columns) until the plan fits.
template <class T>
std::optional<topk_result<float>> fused_similarity_topk(const matrix_view<const T>& a, const topk_options& tk,
                                                        const similarity_options& opt, int rows_device,
                                                        const char* who) {
  fused_topk_hook().last_ran = false;
  const std::vector<int> devices = fused_topk_devices(a, opt, rows_device);
  if (devices.empty()) return std::nullopt;
  const job_devices jd = resolve_job_devices(devices, opt.budget, who);
  auto job = make_job(a, static_cast<const matrix_view<const T>*>(nullptr), opt, fused_topk_sink<T>{}, who,
                      rows_device, false);
  job.opt.devices = jd.devices;
  job.opt.budget = jd.budget;
  if (!fit_fused_layout(job, tk, opt.max_panel_rows, opt.check_finite, who, jd.devices.size(), jd.budget))
    return std::nullopt;
  ::spillway::pairwise::detail::run_pair_job(job);
  return job.sink.collect(job);
}

template <class T>
void check_host_finite(const matrix_view<const T>& a, const matrix_view<const T>* b, const similarity_options& opt,
                       const char* who) {
  if (!opt.check_finite) return;
  refuse_nonfinite(first_nonfinite_row(a), who, "A");
  if (b != nullptr) refuse_nonfinite(first_nonfinite_row(*b), who, "B");
}

template <class T>
using const_rows = matrix_view<const std::remove_cv_t<T>>;

/// The caller's host rows page-locked for one call (similarity_options::lock).
struct rows_lock {
  host_registration a, b;
  template <class T>
  rows_lock(const matrix_view<const T>& ra, const matrix_view<const T>* rb, const similarity_options& opt) {
    if (opt.lock == page_lock::never) return;
    // The bytes the rows span (row-major, checked by the entry point).
    const auto bytes = [](const matrix_view<const T>& v) {
      return v.rows == 0 || v.cols == 0 ? std::size_t{0}
                                        : static_cast<std::size_t>((v.rows - 1) * v.ld + v.cols) * sizeof(T);
    };
    a = try_register_host(ra.data, bytes(ra), true);
    if (rb != nullptr) b = try_register_host(rb->data, bytes(*rb), true);
  }
  void note(::spillway::pairwise::pair_report* r) const {
    if (r == nullptr) return;
    r->a_registered = a.active();
    r->b_registered = b.active();
  }
};

/// Runs `run()` with the rows page-locked for its length; the report (if any) says which were,
/// also when `run` throws.
template <class T, class F>
auto with_rows_locked(const matrix_view<const T>& a, const matrix_view<const T>* b, const similarity_options& opt,
                      F&& run) {
  const rows_lock lk(a, b, opt);
  try {
    auto r = run();
    lk.note(opt.report);
    return r;
  } catch (...) {
    lk.note(opt.report);
    throw;
  }
}

}  // namespace detail

/// A·Aᵀ similarities of the rows of `a` (n x d row-major, host or device memory) into host memory
/// `out` (layout_size(layout, n) floats; pinned memory lets the copies overlap compute). Only
/// pairs i ≤ j are computed; `full` is mirrored. Returns when all output is on the host.
template <class T>
job_report similarity_dense(matrix_view<T> a_, float* out, triangle_layout layout, const similarity_options& opt = {}) {
  const detail::const_rows<T> a = a_;
  constexpr const char* who = "similarity_dense";
  detail::check_rows(a, who, "a");
  if (layout_size(layout, a.rows) == 0) return {};
  if (out == nullptr) throw logic_error("similarity_dense: out is null");
  if (::spillway::detail::run_on_host_instead(opt.host_fallback, opt.devices, who, "similarity_options::host_fallback",
                                              "host_similarity_dense")) {
    const auto t0 = std::chrono::steady_clock::now();
    detail::check_host_finite(a, static_cast<const detail::const_rows<T>*>(nullptr), opt, who);
    host_similarity_dense(a, out, layout, opt.metric, opt.cosine_zero);
    return ::spillway::detail::host_job_report(t0);
  }
  return detail::with_rows_locked(a, static_cast<const detail::const_rows<T>*>(nullptr), opt, [&] {
    const auto* none = static_cast<const detail::const_rows<T>*>(nullptr);
    if (layout == triangle_layout::full) {
      auto job = detail::make_job(a, none, opt, ::spillway::pairwise::detail::full_sink<float>(out), who);
      ::spillway::pairwise::detail::run_pair_job(job);
      return job.report;
    }
    auto job = detail::make_job(
        a, none, opt,
        ::spillway::pairwise::detail::packed_sink<float>(out, layout != triangle_layout::condensed), who);
    ::spillway::pairwise::detail::run_pair_job(job);
    return job.report;
  });
}

/// A·Bᵀ similarities (a.rows x b.rows, row-major with `ldc` ≥ b.rows) into host memory `out`.
template <class T>
job_report similarity_dense(matrix_view<T> a_, matrix_view<T> b_, float* out, std::int64_t ldc,
                            const similarity_options& opt = {}) {
  const detail::const_rows<T> a = a_, b = b_;
  constexpr const char* who = "similarity_dense";
  detail::check_rows(a, who, "a");
  detail::check_rows(b, who, "b");
  detail::check_same_dims(a, b, who);
  if (ldc < b.rows) throw logic_error("similarity_dense: ldc (" + std::to_string(ldc) + ") is smaller than b.rows (" + std::to_string(b.rows) + ")");
  if (a.rows == 0 || b.rows == 0) return {};
  if (out == nullptr) throw logic_error("similarity_dense: out is null");
  if (::spillway::detail::run_on_host_instead(opt.host_fallback, opt.devices, who, "similarity_options::host_fallback",
                                              "host_similarity_dense")) {
    const auto t0 = std::chrono::steady_clock::now();
    detail::check_host_finite(a, &b, opt, who);
    host_similarity_dense(a, b, out, ldc, opt.metric, opt.cosine_zero);
    return ::spillway::detail::host_job_report(t0);
  }
  return detail::with_rows_locked(a, &b, opt, [&] {
    auto job = detail::make_job(a, &b, opt, ::spillway::pairwise::detail::rect_sink<float>(out, ldc), who);
    ::spillway::pairwise::detail::run_pair_job(job);
    return job.report;
  });
}

/// Per-row top-k of A·Aᵀ (k ≤ 128; the k largest similarities or smallest distances, ties to the
/// smaller column; the diagonal excluded unless topk_options::include_diagonal), merged across
/// strips on the device; only the lists reach the host.
template <class T>
topk_result<float> similarity_topk(matrix_view<T> a_, const topk_options& k, const similarity_options& opt = {}) {
  const detail::const_rows<T> a = a_;
  constexpr const char* who = "similarity_topk";
  detail::check_rows(a, who, "a");
  ::spillway::pairwise::detail::check_topk(k, who);
  if (a.rows == 0) return ::spillway::pairwise::detail::empty_topk<float>(0, k.k);
  if (::spillway::detail::run_on_host_instead(opt.host_fallback, opt.devices, who, "similarity_options::host_fallback",
                                              "host_similarity_topk")) {
    detail::check_host_finite(a, static_cast<const detail::const_rows<T>*>(nullptr), opt, who);
    return host_similarity_topk(a, k, opt.metric, opt.cosine_zero);
  }
  // bf16 / half / TF32 rows on a Hopper GPU: the fused job, which never writes the scores.
  const int rows_device = detail::device_of(a.data);
  return detail::with_rows_locked(a, static_cast<const detail::const_rows<T>*>(nullptr), opt, [&] {
    if (auto fused = detail::fused_similarity_topk(a, k, opt, rows_device, who)) return std::move(*fused);
    auto job = detail::make_job(a, static_cast<const detail::const_rows<T>*>(nullptr), opt,
                                ::spillway::pairwise::detail::topk_sink<float>(k), who, rows_device);
    ::spillway::pairwise::detail::run_pair_job(job);
    return job.sink.collect(job);
  });
}

/// Approximate per-row top-k of A·Aᵀ under cosine from binary-quantized candidates (issue 34's
/// approximate mode; similarity/detail/binary_topk.cuh): each row's `candidates` nearest rows by
/// the Hamming distance of the rows' sign bits (x > 0), rescored exactly, the best k kept (ties to
/// the smaller column; the diagonal excluded). Every score returned is an exact cosine in float,
/// but a true neighbour outside its row's candidates is missed: recall@32 of clustered embeddings
/// against similarity_topk is in docs/similarity.md. Rows of bf16, half or float in host or device
/// memory; one GPU with sm_90a code (Hopper: opt.devices empty, the current device, or one entry),
/// every row resident on it (opt.budget bounds the job's memory beside the rows). 1 ≤ k ≤
/// candidates ≤ max_top_k (128). Throws logic_error for another metric, include_diagonal,
/// non-finite rows (with check_finite: the first such row named) and a k or candidate count out of
/// range; without a GPU runs host_similarity_topk_binary with opt.host_fallback, else throws
/// no_gpu_error.
template <class T>
topk_result<float> similarity_topk_binary(matrix_view<T> a_, const topk_options& k,
                                          const similarity_options& opt = {}, int candidates = 128) {
  const detail::const_rows<T> a = a_;
  constexpr const char* who = "similarity_topk_binary";
  detail::check_rows(a, who, "a");
  ::spillway::pairwise::detail::check_topk(k, who);
  detail::check_binary(k, candidates, who);
  if (opt.metric != similarity_metric::cosine) {
    throw logic_error(std::string(who) + ": sign bits rank by angle: the metric must be cosine, got " +
                      std::string(to_string(opt.metric)));
  }
  if (opt.devices.size() > 1) {
    throw logic_error(std::string(who) + ": runs on one GPU, got " + std::to_string(opt.devices.size()) +
                      " devices");
  }
  if (::spillway::detail::run_on_host_instead(opt.host_fallback, opt.devices, who,
                                              "similarity_options::host_fallback",
                                              "host_similarity_topk_binary")) {
    detail::check_host_finite(a, static_cast<const detail::const_rows<T>*>(nullptr), opt, who);
    return host_similarity_topk_binary(a, k, candidates, opt.cosine_zero);
  }
  const int dev = opt.devices.empty() ? current_device() : opt.devices[0];
  if (dev < 0 || dev >= device_count())
    throw logic_error(std::string(who) + ": no device " + std::to_string(dev));
  if ((tile::build_features(dev) & tile::feature_wgmma) == 0) {
    throw logic_error(std::string(who) +
                      ": needs sm_90a code for the device (Hopper); this build has none for " +
                      tile::describe_device(dev));
  }
  if (a.rows == 0) return ::spillway::pairwise::detail::empty_topk<float>(0, k.k);
  device_guard g(dev);
  stream st(dev);
  const stream_view s = st.view();
  const std::int64_t n = a.rows, d = a.cols;
  // The rows on the device: in place where they are already there, else one copy (pitch padded to
  // 16 bytes for the rescoring's loads).
  const int rows_device = detail::device_of(a.data);
  if (rows_device >= 0 && rows_device != dev) {
    throw logic_error(std::string(who) + ": the rows are in device " + std::to_string(rows_device) +
                      "'s memory, the job runs on device " + std::to_string(dev));
  }
  using V = std::remove_const_t<T>;
  device_buffer<V> copy;
  const V* x = a.data;
  std::int64_t ld = a.ld;
  if (rows_device < 0) {
    ld = (d * static_cast<std::int64_t>(sizeof(V)) + 15) / 16 * 16 / static_cast<std::int64_t>(sizeof(V));
    copy = device_buffer<V>(static_cast<std::size_t>(n * ld), s);
    SPILLWAY_CUDA_TRY(cudaMemcpy2DAsync(copy.data(), static_cast<std::size_t>(ld) * sizeof(V), a.data,
                                        static_cast<std::size_t>(a.ld) * sizeof(V),
                                        static_cast<std::size_t>(d) * sizeof(V), static_cast<std::size_t>(n),
                                        cudaMemcpyDefault, s.value()));
    x = copy.data();
  }
  if (opt.check_finite) {  // on s: after the copy
    detail::refuse_nonfinite(
        detail::first_nonfinite_row_device(matrix_view<const V>(row_major(x, n, d, ld)), s), who, "A");
  }
  // Every job's budget rule (memory_budget::or_default) on the job's one device.
  std::size_t budget = memory_budget::or_default(opt.budget, std::vector<int>{dev}).bytes();
  namespace pd = ::spillway::pairwise::detail;
  using entry = pd::topk_entry<float>;
  // The result's vectors and a pinned block for their copy, made on a host thread meanwhile; the
  // lists come back as the exact job's do (values and int32 columns, widened on the host).
  auto host = pd::start_topk_host<float>(n, k.k);
  const auto cnt = static_cast<std::size_t>(n) * static_cast<std::size_t>(k.k);
  device_buffer<entry> lists(cnt, s);
  // (the lists and their export, which follows the job)
  const std::size_t lists_bytes = cnt * (sizeof(entry) + sizeof(float) + sizeof(std::int32_t));
  budget = budget > lists_bytes ? budget - lists_bytes : 0;
  (void)detail::binary_topk_device(s, x, n, d, ld, k.k, candidates, opt.cosine_zero, budget, lists.data(),
                                   who);
  pd::topk_host_side<float> h = host.get();
  pd::export_lists_to_host(lists.data(), cnt, h.result.values.data(), h.result.indices.data(),
                           static_cast<std::byte*>(h.stage.data()), s);
  return std::move(h.result);
}

/// Per-row top-k of A·Bᵀ: for each row of A, the k closest rows of B.
template <class T>
topk_result<float> similarity_topk(matrix_view<T> a_, matrix_view<T> b_, const topk_options& k,
                                   const similarity_options& opt = {}) {
  const detail::const_rows<T> a = a_, b = b_;
  constexpr const char* who = "similarity_topk";
  detail::check_rows(a, who, "a");
  detail::check_rows(b, who, "b");
  detail::check_same_dims(a, b, who);
  ::spillway::pairwise::detail::check_topk(k, who);
  if (a.rows == 0 || b.rows == 0) return ::spillway::pairwise::detail::empty_topk<float>(a.rows, k.k);
  if (::spillway::detail::run_on_host_instead(opt.host_fallback, opt.devices, who, "similarity_options::host_fallback",
                                              "host_similarity_topk")) {
    detail::check_host_finite(a, &b, opt, who);
    return host_similarity_topk(a, b, k, opt.metric, opt.cosine_zero);
  }
  return detail::with_rows_locked(a, &b, opt, [&] {
    auto job = detail::make_job(a, &b, opt, ::spillway::pairwise::detail::topk_sink<float>(k), who);
    ::spillway::pairwise::detail::run_pair_job(job);
    return job.sink.collect(job);
  });
}

/// Pairs of A·Aᵀ passing a threshold (≥ for similarities, ≤ for Euclidean distance) as COO sorted
/// by row then column: the upper triangle, or both halves; compacted on the device.
template <class T>
coo_result<float> similarity_threshold(matrix_view<T> a_, const threshold_options& t, const similarity_options& opt = {}) {
  const detail::const_rows<T> a = a_;
  constexpr const char* who = "similarity_threshold";
  detail::check_rows(a, who, "a");
  if (a.rows == 0) return {};
  if (::spillway::detail::run_on_host_instead(opt.host_fallback, opt.devices, who, "similarity_options::host_fallback",
                                              "host_similarity_threshold")) {
    detail::check_host_finite(a, static_cast<const detail::const_rows<T>*>(nullptr), opt, who);
    return host_similarity_threshold(a, t, opt.metric, opt.cosine_zero);
  }
  return detail::with_rows_locked(a, static_cast<const detail::const_rows<T>*>(nullptr), opt, [&] {
    auto job = detail::make_job(a, static_cast<const detail::const_rows<T>*>(nullptr), opt,
                                ::spillway::pairwise::detail::threshold_sink<float>(t), who);
    ::spillway::pairwise::detail::run_pair_job(job);
    return job.sink.collect(job);
  });
}

/// Pairs of A·Bᵀ passing a threshold, as COO sorted by row then column.
template <class T>
coo_result<float> similarity_threshold(matrix_view<T> a_, matrix_view<T> b_, const threshold_options& t,
                                       const similarity_options& opt = {}) {
  const detail::const_rows<T> a = a_, b = b_;
  constexpr const char* who = "similarity_threshold";
  detail::check_rows(a, who, "a");
  detail::check_rows(b, who, "b");
  detail::check_same_dims(a, b, who);
  if (a.rows == 0 || b.rows == 0) return {};
  if (::spillway::detail::run_on_host_instead(opt.host_fallback, opt.devices, who, "similarity_options::host_fallback",
                                              "host_similarity_threshold")) {
    detail::check_host_finite(a, &b, opt, who);
    return host_similarity_threshold(a, b, t, opt.metric, opt.cosine_zero);
  }
  return detail::with_rows_locked(a, &b, opt, [&] {
    auto job = detail::make_job(a, &b, opt, ::spillway::pairwise::detail::threshold_sink<float>(t), who);
    ::spillway::pairwise::detail::run_pair_job(job);
    return job.sink.collect(job);
  });
}

/// Per-row neighbour counts of A·Aᵀ: for each row i, how many rows j (j ≠ i unless
/// include_diagonal) score ≥ threshold (≤ for Euclidean distance). Counted on the device; only the
/// n counts reach the host (pairwise/sinks/neighbour_counts.cuh).
template <class T>
std::vector<std::int64_t> similarity_neighbour_counts(matrix_view<T> a_,
                                                      const ::spillway::pairwise::neighbour_count_options& o,
                                                      const similarity_options& opt = {}) {
  const detail::const_rows<T> a = a_;
  constexpr const char* who = "similarity_neighbour_counts";
  detail::check_rows(a, who, "a");
  if (a.rows == 0) return {};
  if (::spillway::detail::run_on_host_instead(opt.host_fallback, opt.devices, who,
                                              "similarity_options::host_fallback",
                                              "host_similarity_neighbour_counts")) {
    detail::check_host_finite(a, static_cast<const detail::const_rows<T>*>(nullptr), opt, who);
    return host_similarity_neighbour_counts(a, o, opt.metric, opt.cosine_zero);
  }
  return detail::with_rows_locked(a, static_cast<const detail::const_rows<T>*>(nullptr), opt, [&] {
    auto job = detail::make_job(a, static_cast<const detail::const_rows<T>*>(nullptr), opt,
                                ::spillway::pairwise::detail::neighbour_count_sink<float>(o), who);
    ::spillway::pairwise::detail::run_pair_job(job);
    return job.sink.collect(job);
  });
}

/// A·Aᵀ similarities strip by strip on the host: `on_strip(const similarity_strip&)` runs on the
/// device's worker thread as each strip finishes (values in pinned staging valid during the call;
/// columns from the strip's first row on). No host fallback.
template <class T, class OnStrip>
job_report similarity_strips(matrix_view<T> a_, OnStrip&& on_strip, const similarity_options& opt = {}) {
  const detail::const_rows<T> a = a_;
  detail::check_rows(a, "similarity_strips", "a");
  if (a.rows == 0) return {};
  return detail::with_rows_locked(a, static_cast<const detail::const_rows<T>*>(nullptr), opt, [&] {
    ::spillway::pairwise::detail::strips_sink<float> sink;
    sink.on_strip = [&on_strip](const similarity_strip& st) { on_strip(st); };
    auto job = detail::make_job(a, static_cast<const detail::const_rows<T>*>(nullptr), opt, std::move(sink),
                                "similarity_strips");
    ::spillway::pairwise::detail::run_pair_job(job);
    return job.report;
  });
}

/// A·Aᵀ similarities strip by strip ON THE DEVICE: `on_strip(const similarity_device_strip&)`
/// runs as each strip's GEMM is enqueued, with the strip in device memory and its stream; enqueue
/// your reduction or copy there (see pairwise::device_strip for the ordering guarantee).
template <class T, class OnStrip>
job_report similarity_device_strips(matrix_view<T> a_, OnStrip&& on_strip, const similarity_options& opt = {}) {
  const detail::const_rows<T> a = a_;
  detail::check_rows(a, "similarity_device_strips", "a");
  if (a.rows == 0) return {};
  return detail::with_rows_locked(a, static_cast<const detail::const_rows<T>*>(nullptr), opt, [&] {
    ::spillway::pairwise::detail::strips_sink<float> sink;
    sink.on_device_strip = [&on_strip](const similarity_device_strip& st) { on_strip(st); };
    auto job = detail::make_job(a, static_cast<const detail::const_rows<T>*>(nullptr), opt, std::move(sink),
                                "similarity_device_strips");
    ::spillway::pairwise::detail::run_pair_job(job);
    return job.report;
  });
}

}  // namespace spillway::similarity
