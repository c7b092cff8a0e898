// spillway/pairwise/plan.hpp — how an out-of-core all-pairs job is cut to fit a device memory
// budget (pure host logic, testable without a GPU). One planner for every pair job: bit Gram and
// float similarity differ only in the bytes of an operand row, of a score and of a row's
// auxiliary value (a popcount, a norm).
//
// The job is a list of row strips of the output: strip I holds rows [I·P, I·P + P) of A against
// every column it needs (for A·Aᵀ the columns ≥ I·P only — the upper triangle). Each strip is one
// task of the scheduler (spillway::run_tasks); a slot holds one strip's device output (and, when
// the column operand does not fit, the two panels it multiplies). Where the operand that every
// strip reads (A for A·Aᵀ, B for A·Bᵀ) fits beside the slots it stays resident on each device and
// is copied once; otherwise it is streamed panel by panel inside each task.
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/pipeline/plan.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace spillway::pairwise {

/// What a sink keeps on the device, as the planner reserves it. Each sink (pairwise/sinks/) gives
/// its own through footprint(); the planner reads only this.
struct sink_footprint {
  /// Per slot, first: the strip's output, P x W values (a token 256 bytes where nothing is kept
  /// per strip: the checksum).
  bool strip_output = true;
  /// The output is a layout other than a dense P x W strip (packed triangle, full rows): a producer
  /// that computes dense strips (score_scratch) needs one more strip to scatter from.
  bool scattered_layout = false;
  /// Per slot: the mirrored column strip of a full A·Aᵀ matrix (W x P values).
  bool mirror_strip = false;
  /// Per slot: a compaction area (P + 1 int64 offsets, then P x W int32 columns and P x W values).
  bool compaction = false;
  /// Per slot, A·Aᵀ only: top-k's mirrored candidates (topk_mirror_bytes) and per device a bar
  /// per row, kept where they fit and dropped before the strips shrink.
  bool mirror_candidates = false;
  /// Per device, outside the slots: bytes per row of A for each slot (top-k's lists), per row of A
  /// once (per-row counters), and fixed (partial sums).
  std::size_t bytes_per_row_per_slot = 0, bytes_per_row = 0, bytes_fixed = 0;
  /// A·Aᵀ strips from the first (widest) to the last, none held back: for a sink whose state each
  /// strip improves for the next (similarity's fused top-k: a strip's rows have seen every earlier
  /// strip's columns, so their bars filter the rest).
  bool forward_order = false;
};

struct pair_plan_request {
  std::int64_t rows_a = 0, rows_b = 0;  ///< rows_b == rows_a for A·Aᵀ
  std::size_t row_bytes = 128;          ///< bytes of one operand row on the device
  bool symmetric = true;
  sink_footprint sink;        ///< what the job's sink keeps (its footprint())
  std::size_t out_bytes = 4;  ///< bytes per output (or score) element
  std::size_t budget_bytes = 0;
  std::size_t slots = 3;
  std::int64_t max_panel_rows = 0;  ///< 0: automatic (2048)
  std::size_t aux_bytes = 4;        ///< per operand row: its popcount, its norm
  /// The scores are produced as a dense P x W strip that a kernel then scatters into the sink's
  /// layout (a GEMM cannot write a packed triangle): one more strip buffer per slot for the dense
  /// sinks whose footprint has scattered_layout (packed, full).
  bool score_scratch = false;
  /// The operands are already in device memory (in core): nothing resident to copy, no A panel.
  bool operands_on_device = false;
};

struct pair_plan {
  static constexpr std::size_t none = static_cast<std::size_t>(-1);
  std::int64_t panel_rows = 0;  ///< P: rows per strip and per streamed panel
  std::int64_t strips = 0;      ///< tasks
  std::int64_t b_panels = 0;    ///< panels of the column operand
  bool resident = true;         ///< the column operand stays on each device
  std::size_t slots = 0;
  /// Per slot, in order: output/score buffer, [mirror buffer (full)], [compaction (threshold)],
  /// [A panel (A·Bᵀ, or streamed)], [B panel (streamed)], [score scratch], [mirrored top-k
  /// candidates (A·Aᵀ top-k)]. The buf_* members give each one's index (none when absent).
  std::vector<std::size_t> slot_buffers;
  std::size_t buf_mirror = none, buf_compact = none, buf_a = none, buf_own = none, buf_stream = none,
              buf_scratch = none, buf_cand = none;
  std::size_t shared_bytes =
      0;  ///< per device, outside the slots (resident operand, aux values, the sink's state)
  std::size_t resident_bytes = 0;
  /// The sink's state per slot (top-k's lists; inside shared_bytes, times slots).
  std::size_t topk_state_bytes = 0;
  /// A·Aᵀ top-k: per row, the bar its mirrored candidates must reach (inside shared_bytes).
  std::size_t topk_bar_bytes = 0;

  /// A·Aᵀ run by several workers: strips held out of the descending run to end the job with. The
  /// strips run from the last (narrowest) to the first (widest), so that each needs only the
  /// panels the earlier ones brought (the uploads pace the start) and, for top-k, a column's own
  /// row strip runs before the strips that mirror it. Taken from one counter, the last tasks
  /// were then the widest and the workers ended up to one of them apart (docs/gram.md, "held
  /// strips"). The held strips — `held_strips` of them from strip
  /// `held_last` down, the lowest a quarter of the way up from the last strip (each at most about
  /// a quarter of the widest one's work) — run after strip 0 instead, 2 per worker. 0: the plain
  /// descending order (one worker, A·Bᵀ, dist).
  std::int64_t held_strips = 0;
  std::int64_t held_last = 0;
  /// A·Aᵀ in the sink's forward order (sink_footprint::forward_order): task t is strip t.
  bool forward = false;

  /// The strip task t computes. A·Bᵀ, or A·Aᵀ in forward order: strip t. A·Aᵀ: strips − 1 down to 0, then the
  /// held strips (held_last down to held_last − held_strips + 1).
  [[nodiscard]] std::int64_t strip_of_task(std::size_t t_, bool symmetric) const noexcept {
    const auto t = static_cast<std::int64_t>(t_);
    if (!symmetric || forward) return t;
    const std::int64_t h = held_strips, d = strips - 1 - t;
    if (h <= 0 || d > held_last) return d;
    if (t < strips - h) return d - h;
    return held_last - (t - (strips - h));
  }

  /// Holds strips out for `workers` workers (none for one worker or too few strips).
  void hold_strips_for(std::size_t workers, bool symmetric) {
    held_strips = 0;
    held_last = 0;
    if (!symmetric || forward || workers < 2) return;
    const auto h = static_cast<std::int64_t>(2 * workers);
    if (strips < 8 * h) return;
    held_last = (3 * (strips - 1) + 3) / 4 + h - 1;  // the lowest held strip a quarter of the way up
    held_strips = h;
  }

  /// What run_tasks allocates for one slot of these buffers (its rule, not a copy of it).
  [[nodiscard]] std::size_t slot_bytes() const { return ::spillway::detail::slot_device_bytes(slot_buffers); }
  [[nodiscard]] std::size_t total_bytes() const { return shared_bytes + slots * slot_bytes(); }
};

namespace detail {

/// Bytes of one device top-k entry {V value; int32 column} (8 for 4-byte scores, 16 for double).
inline std::size_t topk_entry_size(std::size_t out_bytes) {
  return out_bytes <= 4 ? 8u : (out_bytes + 4 + out_bytes - 1) / out_bytes * out_bytes;
}

/// Bytes of a row's top-k bar key (detail::topk_key on the device): 4 for values of up to 4 bytes, else 8.
constexpr std::size_t topk_key_size(std::size_t out_bytes) { return out_bytes <= 4 ? 4u : 8u; }

/// A·Aᵀ top-k: places per column of a strip for the mirrored candidates that reach the column's
/// bar (a column with more is read in full from the score strip). Steady state on random data
/// (100,000 rows, k = 32): a column takes ~2048·k / (values its lists have seen) ≈ 1–3 per strip.
inline constexpr int topk_mirror_cap = 16;

/// The candidate area of a slot for strips of `p` rows and up to `w` columns: a count per column
/// (int32), `topk_mirror_cap` entries per column, then the rows' hit masks (a bit per score: which
/// values reached their column's bar; a 32-bit word per lane of a warp per 1,024 values of a row,
/// one chunk more for a row that starts off a 16-byte boundary). The three parts are laid out as a
/// slot's buffers are: slot_device_bytes rounds each to slot_buffer_alignment and gives `offsets`.
inline std::size_t topk_mirror_hit_words(std::size_t w) { return ((w + 1023u) / 1024u + 1u) * 32u; }
inline std::size_t topk_mirror_bytes(std::size_t p, std::size_t w, std::size_t out_bytes,
                                     std::vector<std::size_t>* offsets = nullptr) {
  return ::spillway::detail::slot_device_bytes(
      {w * 4u, w * static_cast<std::size_t>(topk_mirror_cap) * topk_entry_size(out_bytes), p * topk_mirror_hit_words(w) * 4u},
      offsets);
}

/// `candidates`: an A·Aᵀ top-k plan keeps the mirrored side's candidate area per slot and the bars
/// (see topk_mirror_bytes); without it every column group of a strip is read in full.
inline pair_plan plan_for(const pair_plan_request& r, std::int64_t p, bool resident, bool candidates = true) {
  pair_plan g;
  g.panel_rows = p;
  g.resident = resident;
  g.forward = r.sink.forward_order && r.symmetric;
  g.strips = (r.rows_a + p - 1) / p;
  g.b_panels = (r.rows_b + p - 1) / p;
  g.slots = std::min<std::size_t>(r.slots, static_cast<std::size_t>(std::max<std::int64_t>(g.strips, 1)));
  const auto P = static_cast<std::size_t>(p);
  const auto W = static_cast<std::size_t>(r.rows_b);  // widest strip
  auto add = [&g](std::size_t bytes) {
    g.slot_buffers.push_back(bytes);
    return g.slot_buffers.size() - 1;
  };
  const sink_footprint& f = r.sink;
  add(f.strip_output ? P * W * r.out_bytes : 256u);
  if (f.mirror_strip) g.buf_mirror = add(W * P * r.out_bytes);
  // compaction: per-row counts/offsets (P + 1, int64) and the compacted (col int32, value).
  if (f.compaction) g.buf_compact = add((P + 1) * 8u + P * W * (4u + r.out_bytes) + 16u);
  if (!r.symmetric && !r.operands_on_device) g.buf_a = add(P * r.row_bytes);  // this strip's A panel
  if (!resident) {
    if (r.symmetric) g.buf_own = add(P * r.row_bytes);  // the strip's own panel
    g.buf_stream = add(P * r.row_bytes);                // the streamed panel
  }
  if (r.score_scratch && f.scattered_layout) g.buf_scratch = add(P * W * r.out_bytes);
  const bool mirror = candidates && f.mirror_candidates && r.symmetric;
  if (mirror) g.buf_cand = add(topk_mirror_bytes(P, W, r.out_bytes));
  g.resident_bytes = resident && !r.operands_on_device ? static_cast<std::size_t>(r.rows_b) * r.row_bytes : 0;
  const auto rows_a = static_cast<std::size_t>(r.rows_a);
  g.topk_state_bytes = rows_a * f.bytes_per_row_per_slot;
  g.topk_bar_bytes = mirror ? rows_a * topk_key_size(r.out_bytes) : 0;
  g.shared_bytes = g.resident_bytes + static_cast<std::size_t>(r.rows_a + r.rows_b) * r.aux_bytes + 512u +
                   g.slots * g.topk_state_bytes + g.topk_bar_bytes + rows_a * f.bytes_per_row + f.bytes_fixed;
  return g;
}

}  // namespace detail

/// The largest strip height (≤ 2048 or max_panel_rows, halving from there) that fits the budget,
/// with the column operand resident when that fits and streamed otherwise. Throws logic_error
/// (starting with `who`) naming the minimum budget when even 32-row strips do not fit.
inline pair_plan make_pair_plan(const pair_plan_request& r, const char* who = "pairwise") {
  const std::string w(who);
  if (r.rows_a < 0 || r.rows_b < 0) throw logic_error(w + ": make_pair_plan: negative row count");
  if (r.budget_bytes == 0) throw logic_error(w + ": make_pair_plan: budget_bytes must be > 0");
  if (r.max_panel_rows < 0) {
    throw logic_error(w + ": make_pair_plan: max_panel_rows must be >= 0, got " + std::to_string(r.max_panel_rows));
  }
  if (r.slots == 0) throw logic_error(w + ": make_pair_plan: slots must be >= 1");
  const std::int64_t cap0 = r.max_panel_rows > 0 ? r.max_panel_rows : 2048;
  const std::int64_t cap = std::max<std::int64_t>(1, std::min<std::int64_t>(cap0, std::max<std::int64_t>(r.rows_a, 1)));
  const std::int64_t floor_rows = std::min<std::int64_t>(cap, 32);
  for (bool resident : {true, false}) {
    if (!resident && r.operands_on_device) break;  // they are resident where they are
    for (std::int64_t p = cap; p >= floor_rows; p = (p == floor_rows ? 0 : std::max(floor_rows, p / 2))) {
      // A·Aᵀ top-k: with the mirrored side's candidate area where it fits at this strip height,
      // else without it (the columns then read in full) before the strips shrink.
      for (bool candidates : {true, false}) {
        pair_plan g = detail::plan_for(r, p, resident, candidates);
        if (g.total_bytes() <= r.budget_bytes) return g;
      }
      if (p == floor_rows) break;
    }
  }
  const pair_plan smallest = detail::plan_for(r, floor_rows, r.operands_on_device, false);
  throw logic_error(w + ": memory budget of " + std::to_string(r.budget_bytes) +
                    " bytes is too small for this job; the minimum is " + std::to_string(smallest.total_bytes()) +
                    " bytes (" + std::to_string(floor_rows) + "-row strips" +
                    (r.operands_on_device ? ", operands in device memory" : ", operand streamed") + ")");
}

}  // namespace spillway::pairwise
