// spillway/pairwise/host_job.hpp — the host pair job: an all-pairs job (A·Aᵀ or A·Bᵀ) of any kind
// of rows run on the host in blocks of rows, each block one call of a module's host functions on
// sub-views, with a GPU job's progress and cancellation between the blocks. Each block of rows
// [i0, i1) is scored against the columns it needs (A·Aᵀ: from i0 on for the upper triangle, all of
// them for top-k and both halves); the block's lower-left corner (j < i inside the diagonal
// block) is computed and discarded: (block rows / n) of the work, the price of progress and
// cancellation. Plain C++; the threads are the `Ops`' (OpenMP in the modules' host functions).
//
// It serves gram_strips' host fallback (gram.cuh), the Python binding's host path for bit Gram and
// float similarity (python/src), and — through its pieces — the distributed Gram (dist/): the host
// top-k's strips (host_block_scores) and the GPU triangle's strips into the rank's rows
// (strip_to_triangle).
//
// `Ops` supplies the host functions of one kind of rows; a job needs only the members it calls
// (dense and strips: rows and dense; top-k also topk; threshold also threshold):
//
//   struct Ops {
//     using view = ...;  // a row matrix with a `rows` member (std::int64_t)
//     view rows(const view& m, std::int64_t first, std::int64_t count) const;
//     void dense(const view& a, const view& b, V* out, std::int64_t ldc) const;   // A·Bᵀ, row-major
//     topk_result<V> topk(const view& a, const topk_options& k) const;                 // A·Aᵀ
//     topk_result<V> topk(const view& a, const view& b, const topk_options& k) const;  // A·Bᵀ
//     coo_result<V> threshold(const view& a, const view& b, const threshold_options& t) const;
//   };
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/pairwise/layout.hpp>
#include <spillway/pairwise/sinks.hpp>
#include <spillway/pipeline/job.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace spillway::pairwise {

/// How a host pair job runs.
struct host_job_options {
  /// Rows per block (one task of the report). 0: automatic, about 64 blocks of at least 64 rows
  /// (progress every ~1.5%; the per-block pass over the column operand — popcounts, norms — stays
  /// under 2% of the block's work). Negative: logic_error.
  std::int64_t block_rows = 0;
  /// As a GPU job's (pipeline/job.hpp): called on the calling thread once at the start (0 done)
  /// and after every block; returning false stops the job before its next block
  /// (job_report::cancelled, the blocks done so far complete). Empty: no progress, no cancelling.
  progress_callback progress;
};

namespace detail {

/// The rows per block of a job over `n` rows (host_job_options::block_rows).
inline std::int64_t host_block_rows(std::int64_t requested, std::int64_t n, const char* who) {
  if (requested < 0) {
    throw logic_error(std::string(who) + ": block_rows must be >= 0 (0: automatic), got " +
                      std::to_string(requested));
  }
  return requested > 0 ? requested : std::max<std::int64_t>(64, (n + 63) / 64);
}

/// body(i0, i1) for the blocks [i0, i1) of `block` rows of [0, n), in order, on the calling thread,
/// with `progress` at the start and after each block (false: no further block; cancelled unless
/// every block is done). The report of a host job: one task per block, no devices.
template <class Body>
job_report host_blocks(std::int64_t n, std::int64_t block, const progress_callback& progress, Body&& body) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto elapsed = [&t0] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  job_report r;
  r.tasks_total = n > 0 ? static_cast<std::size_t>((n + block - 1) / block) : 0;
  r.completed.assign(r.tasks_total, false);
  bool go = !progress || progress(progress_info{0, r.tasks_total, 0, elapsed()});
  for (std::size_t t = 0; t < r.tasks_total; ++t) {
    if (!go) {
      r.cancelled = true;
      break;
    }
    const std::int64_t i0 = static_cast<std::int64_t>(t) * block;
    body(i0, std::min(n, i0 + block));
    r.completed[t] = true;
    r.tasks_completed = t + 1;
    if (progress) go = progress(progress_info{t + 1, r.tasks_total, 0, elapsed()});
  }
  r.elapsed_seconds = elapsed();
  return r;
}

/// Scores of rows [i0, i1) of `a` against rows [c0, cols.rows) of `cols` into `out`, resized to
/// (i1 − i0) x (cols.rows − c0), row-major: one ops.dense on the sub-views.
template <class V, class Ops>
void host_block_scores(const Ops& ops, const typename Ops::view& a, std::int64_t i0, std::int64_t i1,
                       const typename Ops::view& cols, std::int64_t c0, std::vector<V>& out) {
  const std::int64_t w = cols.rows - c0;
  out.resize(static_cast<std::size_t>((i1 - i0) * w));
  ops.dense(ops.rows(a, i0, i1 - i0), ops.rows(cols, c0, w), out.data(), w);
}

/// Rows [i0, i1) of a symmetric block's scores (`strip`: columns [i0, n), n − i0 per row) into a
/// triangle layout: row i's entries from column i (with_diagonal: upper_packed) or i + 1
/// (condensed) to n, copied to dst(i). `parallel`: the rows on OpenMP threads (where it is on).
template <class V, class Dst>
void strip_to_triangle(const V* strip, std::int64_t i0, std::int64_t i1, std::int64_t n, bool with_diagonal,
                       Dst&& dst, bool parallel) {
  const std::int64_t w = n - i0;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (parallel)
#endif
  for (std::int64_t i = i0; i < i1; ++i) {
    const std::int64_t j0 = with_diagonal ? i : i + 1;
    const V* src = strip + (i - i0) * w + (j0 - i0);
    std::copy(src, src + (n - j0), dst(i));
  }
  (void)parallel;
}

}  // namespace detail

/// The host pair job of A·Aᵀ (`b` null) or A·Bᵀ over `Ops` (above): each result form runs the
/// blocks of A's rows under `host_job_options` and reports them (one task per block). `a`, `*b`
/// and the outputs must outlive the calls.
template <class V, class Ops>
class host_pair_job {
 public:
  using view = typename Ops::view;

  /// `who` names the caller in the job's own errors (the Ops' functions name themselves).
  host_pair_job(Ops ops, const view& a, const view* b, host_job_options o, const char* who = "host_pair_job")
      : ops_(std::move(ops)), a_(a), b_(b), o_(std::move(o)), who_(who) {
    n_ = a_.rows;
    m_ = b_ != nullptr ? b_->rows : n_;
    block_ = detail::host_block_rows(o_.block_rows, n_, who_);
  }

  [[nodiscard]] std::int64_t block_rows() const noexcept { return block_; }

  /// A·Aᵀ into `out` (layout_size(layout, n) elements): each block against the columns from its
  /// first row on; `full` mirrors the block's rows below the diagonal block.
  job_report dense(V* out, triangle_layout layout) {
    if (b_ != nullptr) throw logic_error(std::string(who_) + ": a triangle layout is for A·Aᵀ (no B)");
    if (layout_size(layout, n_) > 0 && out == nullptr) throw logic_error(std::string(who_) + ": out is null");
    const std::int64_t n = n_;
    if (layout == triangle_layout::full) {
      return blocks([&](std::int64_t i0, std::int64_t i1) {
        ops_.dense(ops_.rows(a_, i0, i1 - i0), ops_.rows(a_, i0, n - i0), out + i0 * n + i0, n);
        for (std::int64_t i = i0; i < i1; ++i)  // mirror below the diagonal block
          for (std::int64_t j = i1; j < n; ++j) out[j * n + i] = out[i * n + j];
      });
    }
    const bool wd = layout == triangle_layout::upper_packed;
    std::vector<V> strip;
    return blocks([&](std::int64_t i0, std::int64_t i1) {
      detail::host_block_scores(ops_, a_, i0, i1, a_, i0, strip);
      detail::strip_to_triangle(
          strip.data(), i0, i1, n, wd,
          [&](std::int64_t i) { return out + (wd ? packed_row_offset(n, i) : condensed_row_offset(n, i)); },
          false);
    });
  }

  /// A·Bᵀ into `out`, row-major a.rows x b.rows with `ldc` (≥ b.rows) between rows.
  job_report dense(V* out, std::int64_t ldc) {
    if (b_ == nullptr) throw logic_error(std::string(who_) + ": the A·Bᵀ form needs B");
    if (ldc < m_) {
      throw logic_error(std::string(who_) + ": ldc (" + std::to_string(ldc) + ") is smaller than b.rows (" +
                        std::to_string(m_) + ")");
    }
    if (n_ > 0 && m_ > 0 && out == nullptr) throw logic_error(std::string(who_) + ": out is null");
    return blocks([&](std::int64_t i0, std::int64_t i1) {
      ops_.dense(ops_.rows(a_, i0, i1 - i0), *b_, out + i0 * ldc, ldc);
    });
  }

  /// Block by block into reused host memory: on_block(first_row, rows, values, cols) with the
  /// block's rows against every column (all of B, or all of A's rows: first column 0), `cols`
  /// values per row, valid during the call. An exception from on_block propagates, unwrapped.
  template <class OnBlock>
  job_report strips(OnBlock&& on_block) {
    const view& cols = b_ != nullptr ? *b_ : a_;
    std::vector<V> buf;
    return blocks([&](std::int64_t i0, std::int64_t i1) {
      detail::host_block_scores(ops_, a_, i0, i1, cols, 0, buf);
      on_block(i0, i1 - i0, static_cast<const V*>(buf.data()), m_);
    });
  }

  /// Per-row top-k (n x k; the report in `*report` where not null). A·Aᵀ without the diagonal:
  /// each block's top-(k+1) against all rows, the row itself dropped (removing one candidate keeps
  /// the order of the rest); at k = max_top_k one call of the symmetric form, in no block.
  topk_result<V> topk(const topk_options& k, job_report* report = nullptr) {
    detail::check_topk(k, who_);
    const view& cols = b_ != nullptr ? *b_ : a_;
    const int kk_out = k.k;
    topk_result<V> r = detail::empty_topk<V>(n_, kk_out);
    const bool drop_self = b_ == nullptr && !k.include_diagonal;
    const int kk = std::min(drop_self ? kk_out + 1 : kk_out, max_top_k);
    job_report rep;
    if (drop_self && kk == kk_out) {
      r = ops_.topk(a_, topk_options{kk_out, false});
      rep = blocks([](std::int64_t, std::int64_t) {});
    } else {
      rep = blocks([&](std::int64_t i0, std::int64_t i1) {
        const auto t = ops_.topk(ops_.rows(a_, i0, i1 - i0), cols, topk_options{kk, false});
        for (std::int64_t i = i0; i < i1; ++i) {
          int put = 0;
          for (int s = 0; s < kk && put < kk_out; ++s) {
            const std::int64_t j = t.index(i - i0, s);
            if (j < 0) break;
            if (drop_self && j == i) continue;
            r.values[static_cast<std::size_t>(i * kk_out + put)] = t.value(i - i0, s);
            r.indices[static_cast<std::size_t>(i * kk_out + put)] = j;
            ++put;
          }
        }
      });
    }
    if (report != nullptr) *report = std::move(rep);
    return r;
  }

  /// Entries passing a threshold as COO, sorted by row then column (the report in `*report` where
  /// not null). A·Aᵀ: the upper triangle, or both halves; the diagonal as asked.
  coo_result<V> threshold(const threshold_options& t, job_report* report = nullptr) {
    coo_result<V> out;
    const bool sym = b_ == nullptr;
    const std::int64_t n = n_;
    job_report rep = blocks([&](std::int64_t i0, std::int64_t i1) {
      // Symmetric, upper half only: columns from i0 on suffice; both halves need them all.
      const std::int64_t c0 = sym && !t.both_halves ? i0 : 0;
      const view cols = sym ? ops_.rows(a_, c0, n - c0) : *b_;
      const auto c =
          ops_.threshold(ops_.rows(a_, i0, i1 - i0), cols, threshold_options{t.threshold, false, false});
      for (std::size_t e = 0; e < c.size(); ++e) {
        const std::int64_t i = c.row[e] + i0, j = c.col[e] + c0;
        if (sym) {
          if (j == i && !t.include_diagonal) continue;
          if (j < i && !t.both_halves) continue;
        }
        out.row.push_back(i);
        out.col.push_back(j);
        out.value.push_back(c.value[e]);
      }
    });
    if (report != nullptr) *report = std::move(rep);
    return out;
  }

 private:
  template <class Body>
  job_report blocks(Body&& body) {
    return detail::host_blocks(n_, block_, o_.progress, std::forward<Body>(body));
  }

  Ops ops_;
  view a_;
  const view* b_;
  host_job_options o_;
  const char* who_;
  std::int64_t n_ = 0, m_ = 0, block_ = 0;
};

}  // namespace spillway::pairwise
