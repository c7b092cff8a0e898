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
//
// Top-k may also deal the strips apart from who owns the rows (strip_deal: cyclic, snake, greedy;
// make_gram_split_dealt): rank r still owns one block of rows, but computes strips across the
// matrix, each rank starting on a narrow strip; its lists of other ranks' rows then go to their
// owners. predict_split adds those lists' costs (collect, exchange, merge), and
// make_gram_split_best picks the split with the smallest predicted job:
//
//   const auto b = dist::make_gram_split_best(j, dist::gram_cost_model{}, 2);
//   b.deal                      // strip_deal::cyclic on this job (0.116 s vs 0.130 s contiguous)
//   b.plan.parts[r].tasks       // the strips rank r computes; b.bounds: the rows it owns
#pragma once

#include <spillway/core/enum_name.hpp>
#include <spillway/core/error.hpp>
#include <spillway/pairwise/plan.hpp>
#include <spillway/pairwise/split_plan.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace spillway::dist {

/// The sinks a distributed Gram job writes.
enum class gram_sink { triangle, topk, threshold };

/// Rates of one rank's GPU, for the predicted seconds of a share. The defaults are the lent H200's
/// as measured in one process (the derivation: docs/distributed.md, "gram_cost_model").
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
  /// Top-k: the columns' pass over a column group whose bar this GPU has not raised yet (read in
  /// full rather than through its mirrored candidates). A guess: the rows' pass's rate.
  double full_column_bytes_per_second = 1.0e12;
  // ---- after the strips (top-k): not measured yet, guesses to be replaced by the phases that
  // spillway-gram-mpi prints (collect, exchange, merge) ----
  /// The GPU's lists merged over its slots and copied to the host (sizeof(V) + 8 bytes an entry).
  double collect_bytes_per_second = 20e9;
  /// MPI_Alltoallv of the lists of other ranks' rows (one host: shared memory), bytes sent plus
  /// received by a rank.
  double exchange_bytes_per_second = 8e9;
  /// An owner's k-way merge (all cores): list entries read per second.
  double merge_entries_per_second = 1e9;
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
  int k = 32;             ///< top-k: places per row (the lists' bytes after the strips)
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
  double full_column_bytes = 0.0;     ///< top-k: scores of columns read in full (no bar yet)
  std::size_t strips = 0;             ///< strips of the share
  // After the strips (top-k; predict_split): the rank's lists to the owners.
  double collect_seconds = 0.0;   ///< its GPU's lists to the host
  double exchange_seconds = 0.0;  ///< lists of other ranks' rows out, its rows' lists in
  double merge_seconds = 0.0;     ///< its rows' lists merged
  double sent_bytes = 0.0, received_bytes = 0.0;
  [[nodiscard]] double after_seconds() const { return collect_seconds + exchange_seconds + merge_seconds; }
};

/// Who computes which strips. The rows a rank OWNS (its results, its rows of a file) are one
/// contiguous block in every case; only top-k deals its strips apart from that.
///   * contiguous: each rank computes the strips of its own rows (runs of consecutive strips);
///   * cyclic: in the order one process runs them (last to first) the strips go to ranks 0, 1, ..
///     R−1, 0, 1, ..: every rank starts on a narrow strip and needs few panels before its first
///     product (the contiguous split's first rank waits for almost all of A);
///   * snake: 0, 1, .., R−1, R−1, .., 1, 0, 0, 1, ..: the same, the widest strips evened out;
///   * greedy: longest first — the strips in the order of their predicted seconds (the widest
///     first), each to the rank whose share is predicted shortest so far; every rank still runs
///     its strips last to first. The shares end within about the narrowest strip's time of one
///     another, where the patterns above leave up to a widest strip between them
///     (docs/distributed.md, "strip_deal").
enum class strip_deal { contiguous, cyclic, snake, greedy };

inline const char* deal_name(strip_deal d) {
  return ::spillway::detail::enum_name(d, {"contiguous", "cyclic", "snake", "greedy"});
}

/// Which rows each rank owns (one contiguous block each: bounds) and which strips it computes
/// (plan: the strips of its own rows, or dealt across the matrix: strip_deal).
struct gram_split {
  std::int64_t n = 0;
  std::int64_t strip_rows = 0;
  std::int64_t strips = 0;
  strip_deal deal = strip_deal::contiguous;
  /// Over strips (task I = strip I, rows [I·P, I·P + P)); cost = pairs. parts[r].tasks: the
  /// strips rank r computes, ascending (first/last: their range when contiguous, else 0, 0).
  pairwise::split_plan plan;
  std::vector<std::int64_t> bounds;  ///< size + 1: rank r owns rows [bounds[r], bounds[r+1])
  /// Each rank's predicted share (empty where not predicted: the host implementation).
  std::vector<share_prediction> predicted;
  [[nodiscard]] std::int64_t first_row(int r) const { return bounds[static_cast<std::size_t>(r)]; }
  [[nodiscard]] std::int64_t last_row(int r) const { return bounds[static_cast<std::size_t>(r) + 1]; }
  [[nodiscard]] std::int64_t rows_of(int r) const { return last_row(r) - first_row(r); }
  [[nodiscard]] int owner(std::int64_t row) const {
    return static_cast<int>(std::upper_bound(bounds.begin(), bounds.end(), row) - bounds.begin()) - 1;
  }
  [[nodiscard]] bool computes(int r) const { return !plan.parts[static_cast<std::size_t>(r)].tasks.empty(); }
  /// The first row rank r's strips touch (as rows, or as columns: every row from its lowest
  /// strip's first row on); n where it computes none.
  [[nodiscard]] std::int64_t touched_from(int r) const {
    const auto& t = plan.parts[static_cast<std::size_t>(r)].tasks;
    return t.empty() ? n : std::min(n, static_cast<std::int64_t>(t.front()) * strip_rows);
  }
  /// Rank `sender`'s top-k lists hold candidates of rows rank `owner` owns (other than its own).
  [[nodiscard]] bool lists_meet(int sender, int owner_rank) const {
    return sender != owner_rank && computes(sender) && rows_of(owner_rank) > 0 &&
           touched_from(sender) < last_row(owner_rank);
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
  /// The whole job as predicted: the slowest share, then the slowest rank's lists to the owners
  /// (0 when not predicted).
  [[nodiscard]] double predicted_job_seconds() const {
    double c = 0.0, after = 0.0;
    for (const auto& p : predicted) {
      c = std::max(c, p.seconds);
      after = std::max(after, p.after_seconds());
    }
    return c + after;
  }
};

namespace detail {

/// A split from the rank that computes each strip (`dealer`, one per strip) and the owners'
/// bounds (parts + 1 rows, ascending, bounds[0] = 0, bounds.back() = n).
inline gram_split split_from(std::int64_t n, std::int64_t strip_rows, const std::vector<std::size_t>& dealer,
                             std::size_t parts, std::vector<std::int64_t> bounds, std::size_t row_bytes,
                             strip_deal deal) {
  gram_split s;
  s.n = n;
  s.strip_rows = strip_rows;
  s.deal = deal;
  const auto tasks = pairwise::strip_tasks(n, strip_rows, true, row_bytes);
  s.strips = static_cast<std::int64_t>(tasks.size());
  if (dealer.size() != tasks.size())
    throw logic_error("gram_split: " + std::to_string(dealer.size()) + " dealt strips of " +
                      std::to_string(tasks.size()));
  if (bounds.size() != parts + 1 || bounds.front() != 0 || bounds.back() != n ||
      !std::is_sorted(bounds.begin(), bounds.end()))
    throw logic_error("gram_split: the owners' bounds are not " + std::to_string(parts + 1) +
                      " ascending rows from 0 to n");
  s.plan.parts.assign(parts, pairwise::split_part{});
  s.plan.owner.assign(tasks.size(), 0);
  for (std::size_t t = 0; t < tasks.size(); ++t) {
    const std::size_t q = dealer[t];
    if (q >= parts)
      throw logic_error("gram_split: strip " + std::to_string(t) + " dealt to part " + std::to_string(q) + " of " +
                        std::to_string(parts));
    auto& p = s.plan.parts[q];
    p.tasks.push_back(t);
    p.cost += tasks[t].cost;
    p.bytes += tasks[t].bytes;
    s.plan.owner[t] = q;
    s.plan.total_cost += tasks[t].cost;
    s.plan.total_bytes += tasks[t].bytes;
  }
  if (deal == strip_deal::contiguous) {
    for (auto& p : s.plan.parts) {
      if (!p.tasks.empty() && p.tasks.back() + 1 - p.tasks.front() != p.tasks.size())
        throw logic_error("gram_split: a contiguous split whose part is not a run of strips");
      p.first = p.tasks.empty() ? 0 : p.tasks.front();
      p.last = p.tasks.empty() ? 0 : p.tasks.back() + 1;
    }
  }
  s.bounds = std::move(bounds);
  return s;
}

/// The split's plan and bounds from the strips each part starts at (cuts: parts + 1, ascending,
/// cuts[0] = 0, cuts.back() = strips): each rank computes the strips of its own rows.
inline gram_split split_at(std::int64_t n, std::int64_t strip_rows, const std::vector<std::size_t>& cuts,
                           std::size_t row_bytes) {
  const std::int64_t S = (n + strip_rows - 1) / strip_rows;
  std::vector<std::size_t> dealer(static_cast<std::size_t>(S), 0);
  std::vector<std::int64_t> bounds;
  for (std::size_t q = 0; q + 1 < cuts.size(); ++q) {
    for (std::size_t t = cuts[q]; t < cuts[q + 1]; ++t) dealer[t] = q;
    bounds.push_back(std::min<std::int64_t>(n, static_cast<std::int64_t>(cuts[q]) * strip_rows));
  }
  bounds.push_back(n);
  gram_split s = split_from(n, strip_rows, dealer, cuts.size() - 1, std::move(bounds), row_bytes,
                            strip_deal::contiguous);
  for (std::size_t q = 0; q + 1 < cuts.size(); ++q) {  // empty parts keep their place in the cuts
    s.plan.parts[q].first = cuts[q];
    s.plan.parts[q].last = cuts[q + 1];
  }
  return s;
}

}  // namespace detail

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
                   m.score_bytes_per_second, m.host_copy_bytes_per_second,
                   m.full_column_bytes_per_second, m.collect_bytes_per_second,
                   m.exchange_bytes_per_second, m.merge_entries_per_second}) {
    if (!(r > 0.0)) throw logic_error(std::string(who) + ": every rate of the cost model must be > 0");
  }
  if (!(m.strip_seconds >= 0.0)) throw logic_error(std::string(who) + ": strip_seconds must be >= 0");
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

namespace detail {

/// The four-stage pipeline of one GPU's share, strip by strip in the order the GPU runs them
/// (predict_share's model): fed one strip at a time, so a deal can ask what a strip would add.
struct share_clock {
  const gram_job_shape* j = nullptr;
  const gram_cost_model* m = nullptr;
  std::vector<double> slot_free;  // when the slot's last strip left the host copy
  double U = 0.0, C = 0.0, D = 0.0, H = 0.0;
  std::int64_t on_device_from = 0;  // rows [on_device_from, n) uploaded (resident)
  std::int64_t seen_from = 0;       // columns [seen_from, n) offered on this GPU: their bars are up
  std::size_t t = 0;
  share_prediction r;

  share_clock(const gram_job_shape& js, const gram_cost_model& ms)
      : j(&js), m(&ms), slot_free(js.slots, 0.0), on_device_from(js.n), seen_from(js.n) {}

  /// Strip I next (strips run in decreasing order, as the pair job runs them).
  void add(std::int64_t I) {
    const std::int64_t P = j->strip_rows, n = j->n;
    const bool serial = j->sink == gram_sink::threshold;
    const std::int64_t i0 = I * P, rows = std::min(P, n - i0), w = n - i0;
    const double pr = static_cast<double>(rows), pw = static_cast<double>(w);
    const double pairs = pr * pw - pr * (pr - 1.0) / 2.0;
    std::int64_t up_rows = 0;
    if (j->resident) {
      up_rows = std::max<std::int64_t>(0, on_device_from - i0);
      on_device_from = std::min(on_device_from, i0);
    } else {
      up_rows = w;  // its own panel and every panel after it, each time
    }
    const auto up_bytes = static_cast<std::size_t>(up_rows) * j->row_bytes;
    const double scores = pr * pw * static_cast<double>(j->out_bytes);  // the strip's score buffer
    // Top-k: the columns whose bars this GPU has not raised yet (no strip of it has had them as
    // rows or columns) are read in full by the columns' pass (the others only through their
    // mirrored candidates).
    const std::int64_t fresh = std::max<std::int64_t>(0, seen_from - (i0 + rows));
    seen_from = std::min(seen_from, i0);
    const double full = j->sink == gram_sink::topk
                            ? pr * static_cast<double>(fresh) * static_cast<double>(j->out_bytes)
                            : 0.0;
    const double u = static_cast<double>(up_bytes) / m->h2d_bytes_per_second;
    const double prod = pairs * static_cast<double>(j->cols) / m->bit_macs_per_second;
    const double sink = j->sink == gram_sink::triangle
                            ? 0.0
                            : scores / m->score_bytes_per_second + full / m->full_column_bytes_per_second;
    const double d = j->sink == gram_sink::triangle ? scores / m->d2h_bytes_per_second : 0.0;
    const double h = j->sink == gram_sink::triangle
                         ? pairs * static_cast<double>(j->out_bytes) / m->host_copy_bytes_per_second
                         : 0.0;
    double& sf = slot_free[t % j->slots];
    const double start = serial ? std::max(U, H) : std::max(U, sf);
    U = start + u;
    if (t == 0) r.first_upload_seconds = u;
    C = std::max(C, U) + prod + sink + m->strip_seconds;
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
    r.download_bytes += j->sink == gram_sink::triangle ? static_cast<std::size_t>(scores) : 0u;
    r.full_column_bytes += full;
    r.seconds = H;
    ++r.strips;
    ++t;
  }
};

}  // namespace detail

/// The predicted seconds of `strips` (strip indices, any order: they run from the last to the
/// first, as the pair job runs them) of `j` on one GPU. A four-stage pipeline per strip — upload
/// (the panels it reads that are not on the GPU yet: every panel from its own to the end of A
/// that no earlier strip of the share uploaded), product (chained: one strip's products after the
/// other's) and the sink's pass, download, host copy — each stage in order on its engine, a
/// strip's stage after its previous stage, and a strip's upload only once its slot's previous
/// strip (`slots` earlier) has left the host copy. The threshold sink waits for each strip's kept
/// count inside the strip's enqueue: its strips run one after the other. Top-k: a strip's columns
/// that no earlier strip of the share offered have no bar yet and are read in full.
inline share_prediction predict_strips(const gram_job_shape& j, const gram_cost_model& m,
                                       std::vector<std::int64_t> strips) {
  detail::check_shape(j, "predict_strips");
  detail::check_model(m, "predict_strips");
  const std::int64_t S = (j.n + j.strip_rows - 1) / j.strip_rows;
  for (const std::int64_t I : strips) {
    if (I < 0 || I >= S)
      throw logic_error("predict_strips: strip " + std::to_string(I) + " of " + std::to_string(S));
  }
  std::sort(strips.begin(), strips.end(), std::greater<>());
  detail::share_clock clk(j, m);
  for (const std::int64_t I : strips) clk.add(I);
  return clk.r;
}

/// The predicted seconds of strips [first, last) of `j` on one GPU, run last to first as the pair
/// job runs them (predict_strips).
inline share_prediction predict_share(const gram_job_shape& j, const gram_cost_model& m, std::int64_t first,
                                      std::int64_t last) {
  detail::check_shape(j, "predict_share");
  detail::check_model(m, "predict_share");
  const std::int64_t strips = (j.n + j.strip_rows - 1) / j.strip_rows;
  first = std::max<std::int64_t>(0, first);
  last = std::min(last, strips);
  detail::share_clock clk(j, m);
  for (std::int64_t I = last - 1; I >= first; --I) clk.add(I);
  return clk.r;
}

/// Fills s.predicted: each rank's share on its GPU (predict_strips over the strips it computes)
/// and, for top-k, what follows it: its GPU's lists to the host (n rows), the lists of rows other
/// ranks own sent to them and its own rows' lists received (MPI_Alltoallv, nothing at all where
/// no lists meet), the k-way merge of its rows' lists.
inline void predict_split(const gram_job_shape& j, const gram_cost_model& m, gram_split& s) {
  detail::check_shape(j, "predict_split");
  detail::check_model(m, "predict_split");
  const int parts = static_cast<int>(s.plan.parts.size());
  s.predicted.clear();
  bool any_meet = false;
  for (int q = 0; q < parts; ++q)
    for (int o = 0; o < parts; ++o) any_meet = any_meet || s.lists_meet(q, o);
  // A row's list on the host (value + int64 column), and as it travels (dist::topk_wire: the
  // device's {value, int32 column} entry).
  const double eb = static_cast<double>(j.k) * static_cast<double>(j.out_bytes + 8);
  const double wb = static_cast<double>(j.k) * static_cast<double>(pairwise::detail::topk_entry_size(j.out_bytes));
  for (int q = 0; q < parts; ++q) {
    const auto& t = s.plan.parts[static_cast<std::size_t>(q)].tasks;
    share_prediction p = predict_strips(j, m, std::vector<std::int64_t>(t.begin(), t.end()));
    if (j.sink == gram_sink::topk && s.computes(q)) {
      p.collect_seconds = static_cast<double>(j.n) * eb / m.collect_bytes_per_second;
    }
    if (j.sink == gram_sink::topk && any_meet) {
      std::size_t arrived = 0;
      for (int o = 0; o < parts; ++o) {
        if (s.lists_meet(q, o)) p.sent_bytes += static_cast<double>(s.rows_of(o)) * wb;
        if (s.lists_meet(o, q)) {
          p.received_bytes += static_cast<double>(s.rows_of(q)) * wb;
          ++arrived;
        }
      }
      p.exchange_seconds = (p.sent_bytes + p.received_bytes) / m.exchange_bytes_per_second;
      if (arrived > 0) {
        const bool self = s.computes(q) && s.touched_from(q) < s.last_row(q);
        p.merge_seconds = static_cast<double>(s.rows_of(q)) * static_cast<double>(j.k) *
                          static_cast<double>(arrived + (self ? 1 : 0)) / m.merge_entries_per_second;
      }
    }
    s.predicted.push_back(p);
  }
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
  predict_split(j, m, s);
  return s;
}

/// The same split from given cuts (another rank's, broadcast), with this model's predictions.
inline gram_split gram_split_from_cuts(const gram_job_shape& j, const gram_cost_model& m,
                                       const std::vector<std::size_t>& cuts) {
  gram_split s = detail::split_at(j.n, j.strip_rows, cuts, j.row_bytes);
  predict_split(j, m, s);
  return s;
}

/// Rows [0, n) in `parts` blocks of (nearly) equal rows: the owners of a dealt split (each rank
/// merges and writes as many rows as any other).
inline std::vector<std::int64_t> equal_row_bounds(std::int64_t n, std::size_t parts) {
  std::vector<std::int64_t> b;
  const auto R = static_cast<std::int64_t>(parts);
  for (std::int64_t q = 0; q <= R; ++q) b.push_back(n / R * q + std::min(q, n % R));
  return b;
}

/// Which rank computes each of `strips` strips under `deal` (contiguous and greedy need the pairs
/// or the model: make_gram_split / make_gram_split_dealt). Strip S−1 is dealt first, as the pair
/// job runs them.
inline std::vector<std::size_t> deal_strips(std::int64_t strips, std::size_t parts, strip_deal deal) {
  if (parts == 0) throw logic_error("deal_strips: parts must be >= 1, got 0");
  if (deal != strip_deal::cyclic && deal != strip_deal::snake)
    throw logic_error(std::string("deal_strips: the ") + deal_name(deal) + " deal is not a fixed pattern");
  std::vector<std::size_t> d(static_cast<std::size_t>(std::max<std::int64_t>(0, strips)), 0);
  for (std::int64_t I = 0; I < strips; ++I) {
    const auto pos = static_cast<std::size_t>(strips - 1 - I);  // its place in the run order
    const std::size_t round = pos / parts, within = pos % parts;
    d[static_cast<std::size_t>(I)] =
        deal == strip_deal::snake && round % 2 == 1 ? parts - 1 - within : within;
  }
  return d;
}

/// The strips of an n-row A·Aᵀ dealt to `parts` ranks by a fixed pattern (cyclic or snake), the
/// rows owned in equal blocks. No model: the host implementation's dealt split.
inline gram_split make_gram_split_dealt(std::int64_t n, std::int64_t strip_rows, std::size_t parts,
                                        strip_deal deal, std::size_t row_bytes = 0) {
  if (strip_rows < 1)
    throw logic_error("make_gram_split_dealt: strip_rows must be >= 1, got " + std::to_string(strip_rows));
  if (n < 0) throw logic_error("make_gram_split_dealt: n is " + std::to_string(n));
  const std::int64_t S = (n + strip_rows - 1) / strip_rows;
  return detail::split_from(n, strip_rows, deal_strips(S, parts, deal), parts, equal_row_bounds(n, parts),
                            row_bytes, deal);
}

/// The strips of `j` dealt to `parts` GPUs (cyclic, snake, or greedy: longest first, each strip
/// to the rank with the least predicted seconds so far), the rows owned in equal blocks, with
/// each rank's prediction (predict_split).
inline gram_split make_gram_split_dealt(const gram_job_shape& j, const gram_cost_model& m, std::size_t parts,
                                        strip_deal deal) {
  detail::check_shape(j, "make_gram_split_dealt");
  detail::check_model(m, "make_gram_split_dealt");
  if (parts == 0) throw logic_error("make_gram_split_dealt: parts must be >= 1, got 0");
  if (deal == strip_deal::contiguous) throw logic_error("make_gram_split_dealt: contiguous is make_gram_split_timed");
  const std::int64_t S = (j.n + j.strip_rows - 1) / j.strip_rows;
  std::vector<std::size_t> dealer;
  if (deal == strip_deal::greedy) {
    // A strip's own seconds: its products, the sink's pass, its copies out (not the wait for its
    // panels, which depends on what the rank ran before).
    std::vector<std::pair<double, std::int64_t>> cost;
    for (std::int64_t I = 0; I < S; ++I) {
      const share_prediction p = predict_strips(j, m, {I});
      cost.emplace_back(p.product_seconds + p.sink_seconds + p.download_seconds + p.host_seconds + m.strip_seconds, I);
    }
    std::stable_sort(cost.begin(), cost.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    dealer.assign(static_cast<std::size_t>(S), 0);
    std::vector<double> load(parts, 0.0);
    for (const auto& [sec, I] : cost) {
      const auto q = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
      load[q] += sec;
      dealer[static_cast<std::size_t>(I)] = q;
    }
  } else {
    dealer = deal_strips(S, parts, deal);
  }
  gram_split s = detail::split_from(j.n, j.strip_rows, dealer, parts, equal_row_bounds(j.n, parts), j.row_bytes, deal);
  predict_split(j, m, s);
  return s;
}

/// The same split from the dealer of every strip and the owners' bounds (another rank's,
/// broadcast), with this model's predictions.
inline gram_split gram_split_from_deal(const gram_job_shape& j, const gram_cost_model& m,
                                       const std::vector<std::size_t>& dealer, std::vector<std::int64_t> bounds,
                                       strip_deal deal) {
  detail::check_shape(j, "gram_split_from_deal");
  const std::size_t parts = bounds.empty() ? 0 : bounds.size() - 1;
  gram_split s = detail::split_from(j.n, j.strip_rows, dealer, parts, std::move(bounds), j.row_bytes, deal);
  predict_split(j, m, s);
  return s;
}

/// The GPU split of `j` with the smallest predicted job (gram_split::predicted_job_seconds): the
/// contiguous split by predicted seconds, and for top-k with several ranks also the dealt ones
/// (cyclic, snake, greedy); the triangle and the threshold keep their rows' strips (their
/// outputs are rows in order: MPI-IO ranges, the COO's runs). Ties keep the earlier candidate.
inline gram_split make_gram_split_best(const gram_job_shape& j, const gram_cost_model& m, std::size_t parts) {
  gram_split best = make_gram_split_timed(j, m, parts);
  if (j.sink != gram_sink::topk || parts < 2) return best;
  for (const auto d : {strip_deal::cyclic, strip_deal::snake, strip_deal::greedy}) {
    gram_split s = make_gram_split_dealt(j, m, parts, d);
    if (s.predicted_job_seconds() < best.predicted_job_seconds()) best = std::move(s);
  }
  return best;
}

}  // namespace spillway::dist
