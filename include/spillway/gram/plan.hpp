// spillway/gram/plan.hpp — how an out-of-core Gram job is cut to fit a device memory budget: the
// shared pair-job planner (spillway/pairwise/plan.hpp) with a bit matrix's row bytes (ld_words
// 32-bit words) and one int32 popcount per row. Pure host logic, testable without a GPU.
#pragma once

#include <spillway/pairwise/plan.hpp>

#include <cstddef>
#include <cstdint>

namespace spillway::gram {

using ::spillway::pairwise::sink_kind;
/// The plan of a Gram job (the pair-job plan; see spillway::pairwise::pair_plan).
using gram_plan = ::spillway::pairwise::pair_plan;

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

/// The largest strip height (≤ 2048 or max_panel_rows, halving from there) that fits the budget,
/// with the column operand resident when that fits and streamed otherwise. Throws logic_error
/// naming the minimum budget when even 32-row strips do not fit.
inline gram_plan make_gram_plan(const gram_plan_request& r) {
  ::spillway::pairwise::pair_plan_request p;
  p.rows_a = r.rows_a;
  p.rows_b = r.rows_b;
  p.row_bytes = static_cast<std::size_t>(r.ld_words < 0 ? 0 : r.ld_words) * 4u;
  p.symmetric = r.symmetric;
  p.sink = r.sink;
  p.out_bytes = r.out_bytes;
  p.k = r.k;
  p.budget_bytes = r.budget_bytes;
  p.slots = r.slots;
  p.max_panel_rows = r.max_panel_rows;
  p.aux_bytes = 4;  // the popcount of each row
  return ::spillway::pairwise::make_pair_plan(p, "gram");
}

}  // namespace spillway::gram
