// python/src/job_support.hpp — what the CUDA translation units of the binding share: results
// handed over without a copy, the scheduler's report and progress as Python sees them, page-locking
// the caller's memory for a job, and the host path of a pairwise job (bit Gram or float
// similarity): the library's host pair job (spillway/pairwise/host_job.hpp) over a module's `Ops`,
// in row blocks so that progress and Ctrl-C reach Python, its results handed over as a
// gram_result. Included by the CUDA translation units (jobs.cu, jobs_similarity.cu, jobs_gemm.cu).
#pragma once

#include "jobs.hpp"

#include <spillway/core/host_registration.hpp>
#include <spillway/core/pinned_buffer.hpp>
#include <spillway/pairwise/host_job.hpp>
#include <spillway/pairwise/layout.hpp>
#include <spillway/pairwise/sinks.hpp>
#include <spillway/pipeline/job.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace spillway::python::detail {

template <class T>
owned_buffer own_vector(std::vector<T>&& v) {
  auto h = std::make_shared<std::vector<T>>(std::move(v));
  owned_buffer b;
  b.data = h->data();
  b.count = h->size();
  b.holder = std::move(h);
  return b;
}

// Dense results: pinned when a GPU writes them (the device-to-host copies then overlap compute
// and run at full rate), ordinary heap memory for the host implementation.
template <class V>
owned_buffer dense_output(std::size_t n, bool pinned) {
  if (!pinned) return own_vector(std::vector<V>(n));
  auto h = std::make_shared<pinned_buffer<V>>(n);
  owned_buffer b;
  b.count = n;
  b.data = h->data();
  b.holder = std::move(h);
  return b;
}

/// Bytes from the first element of `lines` lines of `line` elements, `ld` elements apart, to the
/// last one: what a strided matrix spans in memory (0 when it has no elements).
inline std::size_t span_bytes(std::int64_t lines, std::int64_t line, std::int64_t ld, std::size_t elem) {
  if (lines <= 0 || line <= 0) return 0;
  return (static_cast<std::size_t>(lines - 1) * static_cast<std::size_t>(ld) + static_cast<std::size_t>(line)) * elem;
}

/// Page-locks a caller's host memory for one job where it is not page-locked already, so GPU
/// copies of it run by DMA at the link's rate (no staging copy by host threads); undone when the
/// job ends. Where the driver refuses (a read-only file mapping, the locked-memory limit, a range
/// overlapping one registered already) the memory stays pageable: slower copies, same results.
struct maybe_registered {
  host_registration reg;
  maybe_registered(void* p, std::size_t bytes, bool wanted)
      : reg(wanted ? try_register_host(p, bytes, false) : host_registration{}) {}
};

/// The scheduler's report as the binding hands it to Python.
inline void summarize(job_summary& s, const job_report& r) {
  s.cancelled = r.cancelled;
  s.tasks_total = r.tasks_total;
  s.tasks_completed = r.tasks_completed;
  s.completed = r.completed;
  s.devices = r.devices;
  s.tasks_per_device = r.tasks_per_device;
  s.bytes_per_device = r.bytes_per_device;
  s.elapsed_seconds = r.elapsed_seconds;
  s.bytes_moved = r.bytes_moved;
}

/// A job's progress callback that feeds `p` (read by the waiting thread) and stops the job once
/// the waiting thread asks to cancel.
inline progress_callback forward_progress(job_progress& p) {
  return [&p](const progress_info& i) {
    p.update(i.tasks_done, i.tasks_total);
    return !p.cancel.load();
  };
}

/// What a host job needs to know of the request, whichever kind of rows it runs on.
struct host_shape {
  sink kind = sink::full;
  int k = 8;
  double threshold = 0;
  bool include_diagonal = false;
  bool both_halves = false;
  std::int64_t block_rows = 0;  ///< 0: automatic
  bool csr = false;             ///< threshold: the entries as CSR (pairwise::to_csr)
};

inline pairwise::triangle_layout layout_of(sink k) {
  return k == sink::full ? pairwise::triangle_layout::full
                         : (k == sink::triangle ? pairwise::triangle_layout::upper_packed
                                                : pairwise::triangle_layout::condensed);
}

/// A threshold job's CSR handed over: `rows` holds the indptr (gram_result::indptr).
template <class V>
void hand_over(gram_result& out, pairwise::csr_result<V>&& c) {
  out.values = own_vector(std::move(c.value));
  out.rows = own_vector(std::move(c.indptr));
  out.cols = own_vector(std::move(c.col));
  out.indptr = true;
}
/// A threshold job's entries handed over as COO, or with `csr` as CSR over rows x cols
/// (pairwise::to_csr).
template <class V>
void hand_over(gram_result& out, pairwise::coo_result<V>&& c, bool csr, std::int64_t rows,
               std::int64_t cols) {
  if (csr) return hand_over(out, pairwise::to_csr(std::move(c), rows, cols));
  out.values = own_vector(std::move(c.value));
  out.rows = own_vector(std::move(c.row));
  out.cols = own_vector(std::move(c.col));
}

/// The host path of a pairwise job: the library's host pair job over `ops` (A·Aᵀ where b is
/// null, else A·Bᵀ) in blocks of r.block_rows (0: automatic), progress and cancellation through
/// `p`, its result and report as the binding hands them to Python (dense results in ordinary heap
/// memory). `who` names the entry point in the job's own errors.
template <class V, class Ops>
gram_result run_host_pair_job(Ops ops, const typename Ops::view& a, const typename Ops::view* b,
                              const host_shape& r, job_progress& p, const char* who) {
  pairwise::host_job_options o;
  o.block_rows = r.block_rows;
  o.progress = forward_progress(p);
  pairwise::host_pair_job<V, Ops> job(std::move(ops), a, b, std::move(o), who);
  gram_result out;
  job_report rep;
  switch (r.kind) {
    case sink::topk: {
      auto t = job.topk(pairwise::topk_options{r.k, r.include_diagonal}, &rep);
      out.values = own_vector(std::move(t.values));
      out.indices = own_vector(std::move(t.indices));
      break;
    }
    case sink::threshold: {
      auto c =
          job.threshold(pairwise::threshold_options{r.threshold, r.both_halves, r.include_diagonal}, &rep);
      hand_over(out, std::move(c), r.csr, a.rows, b != nullptr ? b->rows : a.rows);
      break;
    }
    default: {
      const std::int64_t n = a.rows;
      if (b != nullptr) {
        out.values = dense_output<V>(static_cast<std::size_t>(n * b->rows), false);
        rep = job.dense(static_cast<V*>(out.values.data), b->rows);
      } else {
        const pairwise::triangle_layout lay = layout_of(r.kind);
        out.values = dense_output<V>(static_cast<std::size_t>(pairwise::layout_size(lay, n)), false);
        rep = job.dense(static_cast<V*>(out.values.data), lay);
      }
      break;
    }
  }
  summarize(out.summary, rep);
  out.summary.on_host = true;
  return out;
}

}  // namespace spillway::python::detail
