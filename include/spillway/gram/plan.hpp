// spillway/gram/plan.hpp — how an out-of-core Gram job is cut to fit a device memory budget
// (pure host logic, testable without a GPU).
//
// The job is a list of row strips of the output: strip I holds rows [I·P, I·P + P) of A against
// every column it needs (for A·Aᵀ the columns ≥ I·P only — the upper triangle). Each strip is one
// task of the scheduler (spillway::run_tasks); a slot holds one strip's device output (and, when
// A does not fit, the two panels it multiplies). Where the operand that every strip reads (A for
// A·Aᵀ, B for A·Bᵀ) fits beside the slots it stays resident on each device and is copied once;
// otherwise it is streamed panel by panel inside each task.
#pragma once

#include <spillway/core/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace spillway::gram {

/// What a job leaves on the device per strip.
enum class sink_kind {
  dense_full,       ///< A·Aᵀ n x n: strip rows plus the mirrored column strip
  dense_packed,     ///< A·Aᵀ packed upper triangle (with or without the diagonal)
  dense_rect,       ///< A·Bᵀ rows_a x rows_b
  topk,             ///< per-row top-k (state on the device)
  threshold         ///< threshold → sparse (compacted on the device)
};

struct gram_plan_request {
  std::int64_t rows_a = 0, rows_b = 0;  ///< rows_b == rows_a for A·Aᵀ
  std::int64_t ld_words = 32;
  bool symmetric = true;
  sink_kind sink = sink_kind::dense_packed;
  std::size_t out_bytes = 4;  ///< bytes per output (or score) element
  int k = 0;                  ///< top-k only
  std::size_t budget_bytes = 0;
  std::size_t slots = 3;
  std::int64_t max_panel_rows = 0;  ///< 0: automatic (2048)
};

struct gram_plan {
  std::int64_t panel_rows = 0;  ///< P: rows per strip and per streamed panel
  std::int64_t strips = 0;      ///< tasks
  std::int64_t b_panels = 0;    ///< panels of the column operand (streamed mode)
  bool resident = true;         ///< the column operand stays on each device
  std::size_t slots = 0;
  /// Per slot, in order: output/score buffer, [mirror buffer (dense_full)], [compaction (threshold)],
  /// [A panel (A·Bᵀ, or streamed)], [B panel (streamed)].
  std::vector<std::size_t> slot_buffers;
  std::size_t shared_bytes = 0;  ///< per device, outside the slots (resident operand, popcounts, top-k state)
  std::size_t resident_bytes = 0;
  std::size_t topk_state_bytes = 0;  ///< per slot's state (inside shared_bytes, times slots)

  [[nodiscard]] std::size_t slot_bytes() const {
    std::size_t s = 0;
    for (auto b : slot_buffers) s += (b + 255) / 256 * 256;
    return s;
  }
  [[nodiscard]] std::size_t total_bytes() const { return shared_bytes + slots * slot_bytes(); }
};

namespace detail {

inline gram_plan plan_for(const gram_plan_request& r, std::int64_t p, bool resident) {
  gram_plan g;
  g.panel_rows = p;
  g.resident = resident;
  g.strips = (r.rows_a + p - 1) / p;
  g.b_panels = (r.rows_b + p - 1) / p;
  g.slots = std::min<std::size_t>(r.slots, static_cast<std::size_t>(std::max<std::int64_t>(g.strips, 1)));
  const auto P = static_cast<std::size_t>(p);
  const auto W = static_cast<std::size_t>(r.rows_b);  // widest strip
  const std::size_t row_bytes = static_cast<std::size_t>(r.ld_words) * 4u;
  switch (r.sink) {
    case sink_kind::dense_full:
      g.slot_buffers = {P * W * r.out_bytes, W * P * r.out_bytes};
      break;
    case sink_kind::dense_packed:
    case sink_kind::dense_rect:
      g.slot_buffers = {P * W * r.out_bytes};
      break;
    case sink_kind::topk:
      g.slot_buffers = {P * W * 4u};
      break;
    case sink_kind::threshold:
      // scores, then per-row counts/offsets (P + 1, int64) and the compacted (col int32, value).
      g.slot_buffers = {P * W * 4u, (P + 1) * 8u + P * W * (4u + r.out_bytes)};
      break;
  }
  if (!r.symmetric) g.slot_buffers.push_back(P * row_bytes);  // this strip's A panel
  if (!resident) {
    if (r.symmetric) g.slot_buffers.push_back(P * row_bytes);  // the strip's own panel
    g.slot_buffers.push_back(P * row_bytes);                    // the streamed panel
  }
  g.resident_bytes = resident ? static_cast<std::size_t>(r.rows_b) * row_bytes : 0;
  g.topk_state_bytes = r.sink == sink_kind::topk ? static_cast<std::size_t>(r.rows_a) * static_cast<std::size_t>(r.k) * 8u : 0;
  g.shared_bytes = g.resident_bytes + static_cast<std::size_t>(r.rows_a + r.rows_b) * 4u + 512u +
                   g.slots * g.topk_state_bytes;
  return g;
}

}  // namespace detail

/// The largest strip height (≤ 2048 or max_panel_rows, halving from there) that fits the budget,
/// with the column operand resident when that fits and streamed otherwise. Throws logic_error
/// naming the minimum budget when even 32-row strips do not fit.
inline gram_plan make_gram_plan(const gram_plan_request& r) {
  if (r.rows_a < 0 || r.rows_b < 0) throw logic_error("make_gram_plan: negative row count");
  if (r.budget_bytes == 0) throw logic_error("make_gram_plan: budget_bytes must be > 0");
  if (r.max_panel_rows < 0) throw logic_error("make_gram_plan: max_panel_rows must be >= 0, got " + std::to_string(r.max_panel_rows));
  if (r.slots == 0) throw logic_error("make_gram_plan: slots must be >= 1");
  const std::int64_t cap0 = r.max_panel_rows > 0 ? r.max_panel_rows : 2048;
  const std::int64_t cap = std::max<std::int64_t>(1, std::min<std::int64_t>(cap0, std::max<std::int64_t>(r.rows_a, 1)));
  const std::int64_t floor_rows = std::min<std::int64_t>(cap, 32);
  for (bool resident : {true, false}) {
    for (std::int64_t p = cap; p >= floor_rows; p = (p == floor_rows ? 0 : std::max(floor_rows, p / 2))) {
      gram_plan g = detail::plan_for(r, p, resident);
      if (g.total_bytes() <= r.budget_bytes) return g;
      if (p == floor_rows) break;
    }
  }
  const gram_plan smallest = detail::plan_for(r, floor_rows, false);
  throw logic_error("gram: memory budget of " + std::to_string(r.budget_bytes) + " bytes is too small for this job; the minimum is " +
                    std::to_string(smallest.total_bytes()) + " bytes (" + std::to_string(floor_rows) + "-row strips, operand streamed)");
}

}  // namespace spillway::gram
