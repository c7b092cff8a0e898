// spillway/dist/gram_split.hpp — which rows of A·Aᵀ each rank owns, and what its share should
// cost (pure host logic: no MPI, no CUDA; every rank computes it alike).
//
// A's rows are cut into strips of P rows; strip I computes its rows against the columns from its
// first row on. Ranks take runs of consecutive strips, so rank r owns the rows [bounds[r],
// bounds[r+1]). Two ways to cut:
//   * make_gram_split: balanced by pairs (the host implementation's cost: all compute);
//   * make_gram_split_timed: balanced by the predicted seconds of each rank's share on its GPU,
//     where pairs are not the whole story. A rank runs its strips last to first, as the pair job
//     does, and strip I reads the column panels I.. of A, uploaded once: the first strip it runs
//     waits for every panel from its own to the end of A (rank 0 of two, at 100,000 x 200,000 bits:
//     1.8 GB, ~34 ms at 55 GB/s, before its first product), while the last rank's first strip needs
//     one panel. The triangle's strips also leave the device (n·(n+1)/2 · 4 bytes in all), and the
//     host copies them out of the staging.
//
//   dist::gram_job_shape j{100000, 200000, 2048, 25088};   // n, bits, strip rows, row bytes
//   const auto s = dist::make_gram_split_timed(j, dist::gram_cost_model{}, 2);
//   s.bounds        // {0, 24576, 100000}: rank 0 owns fewer rows than the pairs alone would give it
//   s.predicted[r]  // rank r's share: seconds, and how much of it waits for uploads
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/pairwise/split_plan.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace spillway::dist {

/// The sinks a distributed Gram job writes.
enum class gram_sink { triangle, topk, threshold };

/// Rates of one rank's GPU, for the predicted seconds of a share. The defaults are the lent H200's
/// as measured in one process (benchmarks/RESULTS.md, results/gram_topk.md; 100,000 x 200,000
/// bits, 49 strips of 2,048 rows): the pair job's bare product (checksum sink) took 0.175 s for
/// 1.0·10¹⁵ bit-MACs of the upper triangle → 5.8 P bit-MAC/s (the wgmma kernel alone reaches
/// ~6.6 P; strips' edges and the chained launches take the rest); its top-32 took ~0.021 s more
/// over the 20.4 GB of score strips → 1.0 TB/s of scores; pinned copies 55 GB/s each way.
struct gram_cost_model {
  double bit_macs_per_second = 5.8e15;     ///< the pair job's b1 products, per upper-triangle pair · bit
  double h2d_bytes_per_second = 55e9;      ///< panel uploads (pinned A)
  double d2h_bytes_per_second = 55e9;      ///< triangle: strips to the pinned staging
  double score_bytes_per_second = 1.0e12;  ///< top-k / threshold: the sink's pass over a score strip
  /// Triangle: the GPU's worker thread copies each strip out of the pinned staging into the
  /// rank's rows (fresh pages: first touch included), on all cores. Not measured yet: a guess,
  /// to be replaced by gram_phases::host_copy_seconds's rate (spillway-gram-mpi prints it).
  double host_copy_bytes_per_second = 10e9;
  double strip_seconds = 20e-6;  ///< fixed per strip: launches, events, the worker's bookkeeping
};

/// What the model needs to know of a job: its shape and what its plan chose.
struct gram_job_shape {
  std::int64_t n = 0;           ///< rows of A
  std::int64_t cols = 0;        ///< bits per row
  std::int64_t strip_rows = 0;  ///< P
  std::size_t row_bytes = 0;    ///< bytes of one packed row (what an upload moves)
  std::size_t out_bytes = 4;    ///< bytes of one score
  gram_sink sink = gram_sink::topk;
  std::size_t slots = 3;  ///< strips in flight on the GPU
  bool resident = true;   ///< A stays on the GPU (else every strip streams its column panels)
};

/// A share's predicted seconds on one GPU and what they are made of.
struct share_prediction {
  double seconds = 0.0;               ///< first upload to the last strip's completion
  double first_upload_seconds = 0.0;  ///< before the first product can start (the panels it reads)
  double upload_seconds = 0.0;        ///< all uploads at the H2D rate
  double product_seconds = 0.0;       ///< b1 products
  double sink_seconds = 0.0;          ///< the sink's passes over the score strips on the device
  double download_seconds = 0.0;      ///< strips to the host (triangle)
  double host_seconds = 0.0;          ///< strips copied out of the staging (triangle)
  double pairs = 0.0;                 ///< upper-triangle pairs of the share
  std::size_t upload_bytes = 0, download_bytes = 0;
};

/// Which rows each rank owns: runs of whole strips of `strip_rows`.
struct gram_split {
  std::int64_t n = 0;
  std::int64_t strip_rows = 0;
  std::int64_t strips = 0;
  pairwise::split_plan plan;         ///< over strips (task I = strip I, rows [I·P, I·P + P)); cost = pairs
  std::vector<std::int64_t> bounds;  ///< size + 1: rank r owns rows [bounds[r], bounds[r+1])
  /// make_gram_split_timed: each rank's predicted share (empty for a split by pairs).
  std::vector<share_prediction> predicted;
  [[nodiscard]] std::int64_t first_row(int r) const { return bounds[static_cast<std::size_t>(r)]; }
  [[nodiscard]] std::int64_t last_row(int r) const { return bounds[static_cast<std::size_t>(r) + 1]; }
  [[nodiscard]] std::int64_t rows_of(int r) const { return last_row(r) - first_row(r); }
  [[nodiscard]] int owner(std::int64_t row) const {
    return static_cast<int>(std::upper_bound(bounds.begin(), bounds.end(), row) - bounds.begin()) - 1;
  }
  /// The slowest rank's predicted seconds over the mean (1.0 when not predicted).
  [[nodiscard]] double predicted_imbalance() const {
    if (predicted.empty()) return 1.0;
    double mx = 0.0, sum = 0.0;
    for (const auto& p : predicted) {
      mx = std::max(mx, p.seconds);
      sum += p.seconds;
    }
    return sum > 0.0 ? mx / (sum / static_cast<double>(predicted.size())) : 1.0;
  }
};

namespace detail {

inline void check_shape(const gram_job_shape& j, const char* who) {
  if (j.n < 0) throw logic_error(std::string(who) + ": n is " + std::to_string(j.n));
  if (j.strip_rows < 1)
    throw logic_error(std::string(who) + ": strip_rows must be >= 1, got " + std::to_string(j.strip_rows));
  if (j.cols < 0) throw logic_error(std::string(who) + ": cols is " + std::to_string(j.cols));
  if (j.slots < 1) throw logic_error(std::string(who) + ": slots must be >= 1");
}

inline void check_model(const gram_cost_model& m, const char* who) {
  for (double r : {m.bit_macs_per_second, m.h2d_bytes_per_second, m.d2h_bytes_per_second,
                   m.score_bytes_per_second, m.host_copy_bytes_per_second}) {
    if (!(r > 0.0)) throw logic_error(std::string(who) + ": every rate of the cost model must be > 0");
  }
  if (!(m.strip_seconds >= 0.0)) throw logic_error(std::string(who) + ": strip_seconds must be >= 0");
}

/// The split's plan and bounds from the strips each part starts at (cuts: parts + 1, ascending,
/// cuts[0] = 0, cuts.back() = strips).
inline gram_split split_at(std::int64_t n, std::int64_t strip_rows, const std::vector<std::size_t>& cuts,
                           std::size_t row_bytes) {
  gram_split s;
  s.n = n;
  s.strip_rows = strip_rows;
  const auto tasks = pairwise::strip_tasks(n, strip_rows, true, row_bytes);
  s.strips = static_cast<std::int64_t>(tasks.size());
  s.plan.owner.assign(tasks.size(), 0);
  for (std::size_t q = 0; q + 1 < cuts.size(); ++q) {
    pairwise::split_part p;
    p.first = cuts[q];
    p.last = cuts[q + 1];
    for (std::size_t t = p.first; t < p.last; ++t) {
      p.tasks.push_back(t);
      p.cost += tasks[t].cost;
      p.bytes += tasks[t].bytes;
      s.plan.owner[t] = q;
    }
    s.plan.parts.push_back(std::move(p));
  }
  for (const auto& t : tasks) {
    s.plan.total_cost += t.cost;
    s.plan.total_bytes += t.bytes;
  }
  for (const auto& p : s.plan.parts)
    s.bounds.push_back(std::min<std::int64_t>(n, static_cast<std::int64_t>(p.first) * strip_rows));
  s.bounds.push_back(n);
  return s;
}

}  // namespace detail

/// The split of an n-row A·Aᵀ into `parts` balanced by upper-triangle pairs (MPI-free,
/// deterministic: every rank computes it alike).
inline gram_split make_gram_split(std::int64_t n, std::int64_t strip_rows, std::size_t parts,
                                  std::size_t row_bytes = 0) {
  const auto tasks = pairwise::strip_tasks(n, strip_rows, true, row_bytes);
  const auto plan = pairwise::split_contiguous(tasks, parts);
  std::vector<std::size_t> cuts;
  for (const auto& p : plan.parts) cuts.push_back(p.first);
  cuts.push_back(tasks.size());
  return detail::split_at(n, strip_rows, cuts, row_bytes);
}

/// The predicted seconds of strips [first, last) of `j` on one GPU, run last to first as the pair
/// job runs them. A four-stage pipeline per strip t — upload (the panels it reads that are not on
/// the GPU yet: all of [I, strips) for the first strip, panel I after), product (chained: one
/// strip's products after the other's) and the sink's pass, download, host copy — each stage in
/// order on its engine, a strip's stage after its previous stage, and a strip's upload only once
/// its slot's previous strip (`slots` earlier) has left the host copy. The threshold sink waits
/// for each strip's kept count inside the strip's enqueue: its strips run one after the other.
inline share_prediction predict_share(const gram_job_shape& j, const gram_cost_model& m, std::int64_t first,
                                      std::int64_t last) {
  detail::check_shape(j, "predict_share");
  detail::check_model(m, "predict_share");
  share_prediction r;
  const std::int64_t P = j.strip_rows, n = j.n;
  const std::int64_t strips = (n + P - 1) / P;
  first = std::max<std::int64_t>(0, first);
  last = std::min(last, strips);
  if (last <= first) return r;
  const bool serial = j.sink == gram_sink::threshold;
  std::vector<double> slot_free(j.slots, 0.0);  // when the slot's last strip left the host copy
  double U = 0.0, C = 0.0, D = 0.0, H = 0.0;
  std::int64_t on_device_from = n;  // rows [on_device_from, n) uploaded
  std::size_t t = 0;
  for (std::int64_t I = last - 1; I >= first; --I, ++t) {
    const std::int64_t i0 = I * P, rows = std::min(P, n - i0), w = n - i0;
    const double pr = static_cast<double>(rows), pw = static_cast<double>(w);
    const double pairs = pr * pw - pr * (pr - 1.0) / 2.0;
    std::int64_t up_rows = 0;
    if (j.resident) {
      up_rows = std::max<std::int64_t>(0, on_device_from - i0);
      on_device_from = std::min(on_device_from, i0);
    } else {
      up_rows = w;  // its own panel and every panel after it, each time
    }
    const auto up_bytes = static_cast<std::size_t>(up_rows) * j.row_bytes;
    const double scores = pr * pw * static_cast<double>(j.out_bytes);  // the strip's score buffer
    const double u = static_cast<double>(up_bytes) / m.h2d_bytes_per_second;
    const double prod = pairs * static_cast<double>(j.cols) / m.bit_macs_per_second;
    const double sink = j.sink == gram_sink::triangle ? 0.0 : scores / m.score_bytes_per_second;
    const double d = j.sink == gram_sink::triangle ? scores / m.d2h_bytes_per_second : 0.0;
    const double h = j.sink == gram_sink::triangle
                         ? pairs * static_cast<double>(j.out_bytes) / m.host_copy_bytes_per_second
                         : 0.0;
    double& sf = slot_free[t % j.slots];
    const double start = serial ? std::max(U, H) : std::max(U, sf);
    U = start + u;
    if (t == 0) r.first_upload_seconds = u;
    C = std::max(C, U) + prod + sink + m.strip_seconds;
    D = std::max(D, C) + d;
    H = std::max(H, D) + h;
    sf = H;
    r.upload_seconds += u;
    r.product_seconds += prod;
    r.sink_seconds += sink;
    r.download_seconds += d;
    r.host_seconds += h;
    r.pairs += pairs;
    r.upload_bytes += up_bytes;
    r.download_bytes += j.sink == gram_sink::triangle ? static_cast<std::size_t>(scores) : 0u;
  }
  r.seconds = H;
  return r;
}

/// The split of `j` into `parts` runs of consecutive strips whose predicted seconds
/// (predict_share) have the smallest maximum: a bisection on that maximum, each part taking as
/// many strips as fit under it (a share's prediction only grows as it gains strips at either
/// end). Deterministic; parts may be empty (more parts than strips).
inline gram_split make_gram_split_timed(const gram_job_shape& j, const gram_cost_model& m,
                                        std::size_t parts) {
  detail::check_shape(j, "make_gram_split_timed");
  detail::check_model(m, "make_gram_split_timed");
  if (parts == 0) throw logic_error("make_gram_split_timed: parts must be >= 1, got 0");
  const std::int64_t S = (j.n + j.strip_rows - 1) / j.strip_rows;
  const auto cost = [&](std::int64_t f, std::int64_t l) { return predict_share(j, m, f, l).seconds; };
  // The largest l in [f, S] with cost(f, l) <= T: doubling, then halving.
  const auto reach = [&](std::int64_t f, double T) {
    std::int64_t good = f, step = 1;
    while (good < S) {
      const std::int64_t l = std::min(S, good + step);
      if (cost(f, l) > T) break;
      good = l;
      step *= 2;
    }
    for (std::int64_t hi = std::min(S, good + step); hi - good > 1;) {
      const std::int64_t mid = good + (hi - good) / 2;
      if (cost(f, mid) <= T)
        good = mid;
      else
        hi = mid;
    }
    return good;
  };
  const auto cuts_for = [&](double T, std::vector<std::size_t>& cuts) {
    cuts.assign(1, 0);
    std::int64_t f = 0;
    for (std::size_t q = 0; q + 1 < parts; ++q) {
      f = reach(f, T);
      cuts.push_back(static_cast<std::size_t>(f));
    }
    cuts.push_back(static_cast<std::size_t>(S));
    return cost(f, S) <= T;
  };
  std::vector<std::size_t> cuts;
  double lo = 0.0, hi = cost(0, S);
  for (int it = 0; it < 64 && hi - lo > 1e-12 * hi; ++it) {
    const double mid = 0.5 * (lo + hi);
    if (cuts_for(mid, cuts))
      hi = mid;
    else
      lo = mid;
  }
  cuts_for(hi, cuts);
  gram_split s = detail::split_at(j.n, j.strip_rows, cuts, j.row_bytes);
  for (std::size_t q = 0; q < parts; ++q)
    s.predicted.push_back(
        predict_share(j, m, static_cast<std::int64_t>(cuts[q]), static_cast<std::int64_t>(cuts[q + 1])));
  return s;
}

/// The same split from given cuts (another rank's, broadcast), with this model's predictions.
inline gram_split gram_split_from_cuts(const gram_job_shape& j, const gram_cost_model& m,
                                       const std::vector<std::size_t>& cuts) {
  gram_split s = detail::split_at(j.n, j.strip_rows, cuts, j.row_bytes);
  for (std::size_t q = 0; q + 1 < cuts.size(); ++q)
    s.predicted.push_back(
        predict_share(j, m, static_cast<std::int64_t>(cuts[q]), static_cast<std::int64_t>(cuts[q + 1])));
  return s;
}

}  // namespace spillway::dist
