// python/src/host_job.hpp — what the CUDA translation units of the binding share: results handed
// over without a copy, the scheduler's report and progress, and the host implementation of a pairwise job (bit Gram or float
// similarity) in row blocks, so that progress and Ctrl-C reach Python: each block of rows
// [i0, i1) is one A·Bᵀ call of the library's host functions, unchanged, on sub-views, against the
// columns it needs (from i0 on for the symmetric upper triangle). The block's lower-left corner
// (j < i inside the diagonal block) is computed and discarded: (block rows / n) of the work, a
// small price for interruptibility. Included by the CUDA translation units (jobs.cu,
// jobs_similarity.cu); `Ops` supplies the host functions of one kind of rows:
//
//   struct Ops {
//     using view = ...;                                            // a row matrix
//     view rows(const view& m, std::int64_t first, std::int64_t count) const;
//     void dense(const view& a, const view& b, V* out, std::int64_t ldc) const;
//     pairwise::topk_result<V> topk(const view& a, const pairwise::topk_options& k) const;   // A·Aᵀ
//     pairwise::topk_result<V> topk(const view& a, const view& b, const pairwise::topk_options& k) const;
//     pairwise::coo_result<V> threshold(const view& a, const view& b, const pairwise::threshold_options& t) const;
//   };
#pragma once

#include "jobs.hpp"

#include <spillway/core/host_registration.hpp>
#include <spillway/core/pinned_buffer.hpp>
#include <spillway/pairwise/layout.hpp>
#include <spillway/pairwise/sinks.hpp>
#include <spillway/pipeline/job.hpp>

#include <algorithm>
#include <chrono>
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
};

inline pairwise::triangle_layout layout_of(sink k) {
  return k == sink::full ? pairwise::triangle_layout::full
                         : (k == sink::triangle ? pairwise::triangle_layout::upper_packed
                                                : pairwise::triangle_layout::condensed);
}

template <class V, class Ops>
struct host_job {
  using view = typename Ops::view;
  Ops ops;
  const view& a;
  const view* b;
  host_shape r;
  job_progress& p;
  gram_result out;
  std::int64_t n = 0, m = 0, block = 0;

  host_job(Ops o, const view& a_, const view* b_, const host_shape& r_, job_progress& p_)
      : ops(std::move(o)), a(a_), b(b_), r(r_), p(p_) {
    n = a.rows;
    m = b ? b->rows : n;
    // About 64 blocks per job, at least 64 rows each: progress every ~1.5%, and the per-block
    // pass over the column operand (popcounts, norms) stays under 2% of the block's work.
    block = r.block_rows > 0 ? r.block_rows : std::max<std::int64_t>(64, (n + 63) / 64);
  }

  gram_result run() && {
    switch (r.kind) {
      case sink::topk: topk(); break;
      case sink::threshold: threshold(); break;
      default: dense(); break;
    }
    return std::move(out);
  }

  template <class Body>
  void blocks(Body&& body) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::size_t total = static_cast<std::size_t>((n + block - 1) / block);
    std::size_t done = 0;
    p.update(0, total);
    out.summary.completed.assign(total, false);
    for (std::int64_t i0 = 0; i0 < n; i0 += block) {
      if (p.cancel.load()) {
        out.summary.cancelled = true;
        break;
      }
      body(i0, std::min(n, i0 + block));
      out.summary.completed[done] = true;
      p.update(++done, total);
    }
    out.summary.on_host = true;
    out.summary.tasks_total = total;
    out.summary.tasks_completed = done;
    out.summary.elapsed_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  void dense() {
    if (b != nullptr) {
      out.values = dense_output<V>(static_cast<std::size_t>(n * m), false);
      V* o = static_cast<V*>(out.values.data);
      blocks([&](std::int64_t i0, std::int64_t i1) { ops.dense(ops.rows(a, i0, i1 - i0), *b, o + i0 * m, m); });
      return;
    }
    const pairwise::triangle_layout lay = layout_of(r.kind);
    out.values = dense_output<V>(static_cast<std::size_t>(pairwise::layout_size(lay, n)), false);
    V* o = static_cast<V*>(out.values.data);
    std::vector<V> strip;
    blocks([&](std::int64_t i0, std::int64_t i1) {
      const std::int64_t w = n - i0;
      const view cols = ops.rows(a, i0, w);
      if (lay == pairwise::triangle_layout::full) {
        ops.dense(ops.rows(a, i0, i1 - i0), cols, o + i0 * n + i0, n);
        for (std::int64_t i = i0; i < i1; ++i)  // mirror below the diagonal block
          for (std::int64_t j = i1; j < n; ++j) o[j * n + i] = o[i * n + j];
        return;
      }
      strip.resize(static_cast<std::size_t>((i1 - i0) * w));
      ops.dense(ops.rows(a, i0, i1 - i0), cols, strip.data(), w);
      const bool wd = lay == pairwise::triangle_layout::upper_packed;
      for (std::int64_t i = i0; i < i1; ++i) {
        const std::int64_t j0 = wd ? i : i + 1;
        V* dst = o + (wd ? pairwise::packed_row_offset(n, i) : pairwise::condensed_row_offset(n, i));
        const V* src = strip.data() + (i - i0) * w + (j0 - i0);
        std::copy(src, src + (n - j0), dst);
      }
    });
  }

  void topk() {
    const view& cols = b ? *b : a;
    const int k = r.k;
    std::vector<V> vals(static_cast<std::size_t>(n * k), V{});
    std::vector<std::int64_t> idx(static_cast<std::size_t>(n * k), -1);
    // Symmetric without the diagonal: the block's top-(k+1) against all rows holds the top-k of
    // the others (removing one candidate keeps the order of the rest).
    const bool drop_self = b == nullptr && !r.include_diagonal;
    const int kk = std::min(drop_self ? k + 1 : k, pairwise::max_top_k);
    if (drop_self && kk == k) {  // k == max_top_k: one call of the symmetric form, no blocks
      auto t = ops.topk(a, pairwise::topk_options{k, false});
      blocks([](std::int64_t, std::int64_t) {});
      out.values = own_vector(std::move(t.values));
      out.indices = own_vector(std::move(t.indices));
      return;
    }
    blocks([&](std::int64_t i0, std::int64_t i1) {
      auto t = ops.topk(ops.rows(a, i0, i1 - i0), cols, pairwise::topk_options{kk, false});
      for (std::int64_t i = i0; i < i1; ++i) {
        int put = 0;
        for (int s = 0; s < kk && put < k; ++s) {
          const std::int64_t j = t.index(i - i0, s);
          if (j < 0) break;
          if (drop_self && j == i) continue;
          vals[static_cast<std::size_t>(i * k + put)] = t.value(i - i0, s);
          idx[static_cast<std::size_t>(i * k + put)] = j;
          ++put;
        }
      }
    });
    out.values = own_vector(std::move(vals));
    out.indices = own_vector(std::move(idx));
  }

  void threshold() {
    std::vector<std::int64_t> ro, co;
    std::vector<V> va;
    const bool sym = b == nullptr;
    blocks([&](std::int64_t i0, std::int64_t i1) {
      // Symmetric, upper half only: columns from i0 on suffice; both halves need them all.
      const std::int64_t c0 = sym && !r.both_halves ? i0 : 0;
      const view cols = sym ? ops.rows(a, c0, n - c0) : *b;
      auto c = ops.threshold(ops.rows(a, i0, i1 - i0), cols, pairwise::threshold_options{r.threshold, false, false});
      for (std::size_t e = 0; e < c.size(); ++e) {
        const std::int64_t i = c.row[e] + i0, j = c.col[e] + c0;
        if (sym) {
          if (j == i && !r.include_diagonal) continue;
          if (j < i && !r.both_halves) continue;
        }
        ro.push_back(i);
        co.push_back(j);
        va.push_back(c.value[e]);
      }
    });
    out.values = own_vector(std::move(va));
    out.rows = own_vector(std::move(ro));
    out.cols = own_vector(std::move(co));
  }
};

}  // namespace spillway::python::detail
