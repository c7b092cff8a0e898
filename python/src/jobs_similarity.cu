// python/src/jobs_similarity.cu — spillway.similarity's C++ side: all-pairs similarity of float32,
// float16 and bf16 rows (spillway::similarity::similarity_*: host rows out of core through the
// scheduler, device rows in core on their device), or the host implementation in row blocks
// where no GPU is present.
#include "job_support.hpp"
#include "jobs.hpp"

#include <spillway/similarity/similarity.cuh>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace spillway::python {
namespace {

namespace sg = ::spillway::similarity;
namespace pw = ::spillway::pairwise;
using detail::dense_output;
using detail::own_vector;

constexpr const char* who = "spillway.similarity";

sg::similarity_metric metric_of(char c) {
  switch (c) {
    case 'i': return sg::similarity_metric::inner_product;
    case 'c': return sg::similarity_metric::cosine;
    case 'e': return sg::similarity_metric::euclidean;
    default: throw logic_error(std::string(who) + ": unknown metric code '" + c + "'");
  }
}

template <class T>
sg::matrix_view<const T> view_of(const rows_matrix& m) {
  return sg::row_major(reinterpret_cast<const T*>(m.data), m.rows, m.cols, m.ld);
}

/// The host similarity functions as the library's host pair job's Ops (pairwise/host_job.hpp).
template <class T>
struct similarity_host_ops {
  using view = sg::matrix_view<const T>;
  sg::similarity_metric mt;
  float cosine_zero;
  view rows(view m, std::int64_t first, std::int64_t count) const {
    m.data += first * m.ld;
    m.rows = count;
    return m;
  }
  void dense(const view& a, const view& b, float* out, std::int64_t ldc) const {
    sg::host_similarity_dense(a, b, out, ldc, mt, cosine_zero);
  }
  pw::topk_result<float> topk(const view& a, const pw::topk_options& k) const {
    return sg::host_similarity_topk(a, k, mt, cosine_zero);
  }
  pw::topk_result<float> topk(const view& a, const view& b, const pw::topk_options& k) const {
    return sg::host_similarity_topk(a, b, k, mt, cosine_zero);
  }
  pw::coo_result<float> threshold(const view& a, const view& b, const pw::threshold_options& t) const {
    return sg::host_similarity_threshold(a, b, t, mt, cosine_zero);
  }
};

template <class T>
gram_result on_gpu(const rows_matrix& ra, const rows_matrix* rb, const similarity_request& r, job_progress& p, int device,
                   std::uintptr_t stream) {
  const auto a = view_of<T>(ra);
  const sg::matrix_view<const T> b = rb ? view_of<T>(*rb) : sg::matrix_view<const T>{};
  sg::similarity_options o;
  o.metric = metric_of(r.metric);
  o.cosine_zero = r.cosine_zero;
  if (r.tf32) o.gemm.math = sg::math_mode::tf32;
  o.check_finite = r.check_finite;
  if (r.budget_bytes > 0) o.budget = memory_budget(r.budget_bytes);
  o.devices = r.devices;
  o.max_panel_rows = r.max_panel_rows;
  // The binding page-locks the rows itself below (register_host); the job adds nothing to that.
  o.lock = spillway::page_lock::never;
  o.progress = detail::forward_progress(p);
  pw::pair_report rep;
  o.report = &rep;
  // Device rows: the caller's pending writes to them come first (the job runs on its own streams).
  if (device >= 0) stream_synchronize(stream, device);
  const bool host_rows = device < 0;
  const auto extent = [](const rows_matrix& m) { return detail::span_bytes(m.rows, m.cols, m.ld, sizeof(T)); };
  const detail::maybe_registered pin_a(reinterpret_cast<void*>(ra.data), extent(ra), host_rows && r.register_host);
  const detail::maybe_registered pin_b(rb ? reinterpret_cast<void*>(rb->data) : nullptr, rb ? extent(*rb) : 0,
                                       host_rows && r.register_host);
  gram_result out;
  switch (r.kind) {
    case sink::topk: {
      const pw::topk_options k{r.k, r.include_diagonal};
      auto t = r.binary_candidates > 0 ? sg::similarity_topk_binary(a, k, o, r.binary_candidates)
               : rb                    ? sg::similarity_topk(a, b, k, o)
                                       : sg::similarity_topk(a, k, o);
      out.values = own_vector(std::move(t.values));
      out.indices = own_vector(std::move(t.indices));
      break;
    }
    case sink::threshold: {
      const pw::threshold_options t{r.threshold, r.both_halves, r.include_diagonal};
      auto c = rb ? sg::similarity_threshold(a, b, t, o) : sg::similarity_threshold(a, t, o);
      detail::hand_over(out, std::move(c), r.csr, a.rows, rb ? b.rows : a.rows);
      break;
    }
    default: {
      if (rb != nullptr) {
        out.values = dense_output<float>(static_cast<std::size_t>(a.rows * b.rows), true);
        sg::similarity_dense(a, b, static_cast<float*>(out.values.data), b.rows, o);
      } else {
        const auto lay = detail::layout_of(r.kind);
        out.values = dense_output<float>(static_cast<std::size_t>(pw::layout_size(lay, a.rows)), true);
        sg::similarity_dense(a, static_cast<float*>(out.values.data), lay, o);
      }
      break;
    }
  }
  detail::summarize(out.summary, rep.job);
  return out;
}

template <class T>
gram_result run_typed(const rows_matrix& ra, const rows_matrix* rb, const similarity_request& r, job_progress& p,
                      int device, std::uintptr_t stream) {
  if (device < 0 && ::spillway::detail::run_on_host_instead(r.host_fallback, r.devices, who, "host_fallback",
                                                            "the host similarity")) {
    const auto a = view_of<T>(ra);
    const sg::matrix_view<const T> b = rb ? view_of<T>(*rb) : sg::matrix_view<const T>{};
    if (r.check_finite) {
      sg::detail::refuse_nonfinite(sg::detail::first_nonfinite_row(a), who, "A");
      if (rb != nullptr) sg::detail::refuse_nonfinite(sg::detail::first_nonfinite_row(b), who, "B");
    }
    if (r.binary_candidates > 0) {  // the binary mode's host form, whole (no row blocks, no progress)
      auto t = sg::host_similarity_topk_binary(a, pw::topk_options{r.k, false}, r.binary_candidates,
                                               r.cosine_zero);
      gram_result out;
      out.values = own_vector(std::move(t.values));
      out.indices = own_vector(std::move(t.indices));
      return out;
    }
    const detail::host_shape shape{
        r.kind, r.k, r.threshold, r.include_diagonal, r.both_halves, r.host_block_rows, r.csr};
    const similarity_host_ops<T> ops{metric_of(r.metric), r.cosine_zero};
    return detail::run_host_pair_job<float>(ops, a, rb ? &b : nullptr, shape, p, who);
  }
  return on_gpu<T>(ra, rb, r, p, device, stream);
}

}  // namespace

gram_result run_similarity(const rows_matrix& a, const rows_matrix* b, const similarity_request& r, job_progress& p,
                           int device, std::uintptr_t stream) {
  switch (r.dtype) {
    case 'f': return run_typed<float>(a, b, r, p, device, stream);
    case 'h': return run_typed<__half>(a, b, r, p, device, stream);
    case 'b': return run_typed<__nv_bfloat16>(a, b, r, p, device, stream);
    default: throw logic_error(std::string(who) + ": unknown element type code '" + r.dtype + "'");
  }
}

std::vector<double> bench_cpp_similarity_topk(const rows_matrix& a, char dtype, int k, std::size_t budget, int device,
                                              int reps) {
  const auto timed = [&](auto typed_view) {
    sg::similarity_options o;  // cosine, the defaults
    o.budget = memory_budget(budget);
    o.devices = {device};
    std::vector<double> secs;
    for (int i = -1; i < reps; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      const auto res = sg::similarity_topk(typed_view, pw::topk_options{k, false}, o);
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (i >= 0) secs.push_back(dt);  // i = -1: the warm-up
    }
    return secs;
  };
  switch (dtype) {
    case 'f': return timed(view_of<float>(a));
    case 'h': return timed(view_of<__half>(a));
    case 'b': return timed(view_of<__nv_bfloat16>(a));
    default: throw logic_error(std::string(who) + ": unknown element type code '" + dtype + "'");
  }
}

}  // namespace spillway::python
