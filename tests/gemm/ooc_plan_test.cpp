// The out-of-core GEMM planner (host only): the bytes it says it moves against formulas computed
// here from the plan's own shape, the block shapes it picks for the acceptance jobs, which operand
// it keeps resident, when it splits k, the visiting order (square start, serpentine bands, every
// block once, devices' shares), the raw buffers of MN-major operands (per device, not per slot),
// the refusal of a budget below one block, whose stated minimum must itself be enough, and the
// bytes the job hands run_tasks (reserved + slot buffers), which must be the plan's device bytes.
#include <spillway/gemm/detail/validate.hpp>
#include <spillway/gemm/ooc_plan.hpp>
#include <spillway/pipeline/plan.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using namespace spillway::gemm;
using spillway::index_t;

constexpr std::size_t GiB = std::size_t{1} << 30;

ooc_plan_request square(index_t n, std::size_t in_bytes, std::size_t budget) {
  ooc_plan_request r;
  r.m = r.n = r.k = n;
  r.in_bytes = in_bytes;
  r.out_bytes = 4;
  r.acc_bytes = 4;
  r.budget_bytes = budget;
  return r;
}

// Every (row panel, B panel) pair in exactly one block (blocks of one panel: every block once),
// devices' ranges cover the order.
void expect_permutation(const ooc_plan& p) {
  std::set<std::pair<index_t, index_t>> seen;
  for (const auto& b : p.order) {
    EXPECT_TRUE(b.i >= 0 && b.i < p.row_panels && b.w >= 1 && b.j >= 0 && b.j + b.w <= p.col_panels);
    for (index_t j = p.first_panel(b); j < p.last_panel(b); ++j)
      EXPECT_TRUE(seen.insert({b.i, j}).second) << "panel (" << b.i << "," << j << ") twice";
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(p.row_panels * p.col_panels));
  ASSERT_EQ(p.device_first.size(), p.devices + 1);
  EXPECT_EQ(p.device_first.front(), 0u);
  EXPECT_EQ(p.device_first.back(), p.order.size());
}

// The minimum in bytes that the refusal of r's budget states (0, with a test failure, when the
// budget is accepted or the message states none); msg receives the message.
std::size_t stated_minimum(const ooc_plan_request& r, std::string& msg) {
  try {
    (void)make_ooc_plan(r);
  } catch (const spillway::logic_error& e) {
    msg = e.what();
  }
  if (msg.empty()) {
    ADD_FAILURE() << "a budget of " << r.budget_bytes << " bytes was accepted";
    return 0;
  }
  const auto at = msg.find("minimum of ");
  if (at == std::string::npos) {
    ADD_FAILURE() << "no minimum stated: " << msg;
    return 0;
  }
  return std::stoull(msg.substr(at + 11));
}

// A from one plan: rows x k elements once; B once per band, less the panels cached at each turn.
std::size_t expected_h2d_single_device(const ooc_plan& p, std::size_t in_bytes) {
  const auto k = static_cast<std::size_t>(p.k);
  std::size_t h2d = static_cast<std::size_t>(p.m) * k * in_bytes;
  const index_t bands =
      (p.row_panels + static_cast<index_t>(p.a_slots) - 1) / static_cast<index_t>(p.a_slots);
  h2d += static_cast<std::size_t>(bands) * static_cast<std::size_t>(p.n) * k * in_bytes;
  const index_t keep = std::min<index_t>(static_cast<index_t>(p.b_slots), p.col_panels);
  for (index_t t = 1; t < bands; ++t) {
    // After an ascending band (the first, then every other) the last `keep` columns are cached.
    const bool after_ascending = (t % 2) == 1;
    for (index_t q = 0; q < keep; ++q) {
      const index_t j = after_ascending ? p.col_panels - 1 - q : q;
      h2d -= static_cast<std::size_t>(p.block_cols({0, j})) * k * in_bytes;
    }
  }
  return h2d;
}

TEST(OocPlan, AcceptanceFloat32768With8GiBMovesEachOperandOnce) {
  const ooc_plan p = make_ooc_plan(square(32768, 4, 8 * GiB));
  SCOPED_TRACE(p.describe());
  // A (4 GiB) stays whole on the device: A and B are each read once, C written once.
  EXPECT_EQ(p.h2d_bytes, 8 * GiB);
  EXPECT_EQ(p.d2h_bytes, 4 * GiB);
  EXPECT_EQ(p.min_h2d_bytes, 8 * GiB);
  EXPECT_EQ(p.min_d2h_bytes, 4 * GiB);
  EXPECT_EQ(p.k_chunks, 1);
  EXPECT_EQ(p.bm, 2048);
  EXPECT_EQ(p.bn, 2048);
  EXPECT_GE(p.a_slots * static_cast<std::size_t>(p.bm), 32768u);
  EXPECT_LE(p.device_bytes, 8 * GiB);
  // Floor: 8 GiB in at 55.4 GB/s = 155.05 ms dominates 4 GiB out and 12 GiB at 101 GB/s.
  EXPECT_NEAR(p.floor_seconds, 8.0 * GiB / 55.4e9, 1e-9);
  EXPECT_NEAR(p.copy_seconds, p.floor_seconds, 1e-9);
  expect_permutation(p);
}

TEST(OocPlan, AcceptanceBf16MovesEachOperandOnceAndTheFloorIsBothWays) {
  ooc_plan_request r = square(32768, 2, 8 * GiB);
  const ooc_plan p = make_ooc_plan(r);
  SCOPED_TRACE(p.describe());
  EXPECT_EQ(p.h2d_bytes, 4 * GiB);
  EXPECT_EQ(p.d2h_bytes, 4 * GiB);
  // 4 GiB each way: both directions at once (101 GB/s) is the bound, 85.05 ms.
  EXPECT_NEAR(p.floor_seconds, 8.0 * GiB / 101e9, 1e-9);
  EXPECT_LE(p.device_bytes, 8 * GiB);
}

// With 8 GiB, A and B (2 GiB each in bf16) both fit: B gets a slot per panel, so the square start
// spans the whole matrix (after s row and s column panels, the first s² blocks are exactly those).
TEST(OocPlan, Bf16AcceptanceSquareStartSpansTheWholeMatrix) {
  const ooc_plan p = make_ooc_plan(square(32768, 2, 8 * GiB));
  SCOPED_TRACE(p.describe());
  ASSERT_EQ(p.row_panels, 16);
  ASSERT_EQ(p.col_panels, 16);
  EXPECT_EQ(p.a_slots, 16u);
  EXPECT_EQ(p.b_slots, 16u);
  for (index_t s = 1; s <= 16; ++s) {
    for (std::size_t t = 0; t < static_cast<std::size_t>(s * s); ++t) {
      EXPECT_TRUE(p.order[t].i < s && p.order[t].j < s) << "task " << t << " outside the " << s << "-square";
    }
  }
  expect_permutation(p);
}

// Float: A (4 GiB) resident, and B takes what the budget leaves: 15 of its 16 panels of 256 MiB
// (8 GiB - 4 GiB - 4 C blocks of 16 MiB), never more bytes than the plan with fewer slots.
TEST(OocPlan, ResidentAGivesBTheRestOfTheBudget) {
  const ooc_plan p = make_ooc_plan(square(32768, 4, 8 * GiB));
  SCOPED_TRACE(p.describe());
  EXPECT_EQ(p.a_slots, 16u);
  EXPECT_EQ(p.b_slots, 15u);
  EXPECT_LE(p.device_bytes, 8 * GiB);
  EXPECT_EQ(p.h2d_bytes, 8 * GiB);
  for (std::size_t t = 0; t < 15u * 15u; ++t) EXPECT_TRUE(p.order[t].i < 15 && p.order[t].j < 15) << t;
}

// The order's bound, by hand for the bf16 job: panels of P = 2048 x 32768 x 2 bytes arrive back to
// back at 55 GB/s as A0, B0, A1, B1, … (the square order needs A_s for block (s, 0) and B_s for
// (0, s)); each of the 256 blocks takes G/256 once its panels are in; the last C block (16 MiB)
// leaves at 55 GB/s. That list schedule is 121.93 ms for G = 104.6 ms: above the continuous bound
// G + F²/(4G) = 119.17 ms (F = 32 P / 55 GB/s = 78.09 ms) by the discrete start and the last block.
TEST(OocPlan, RampBoundOfTheSquareOrder) {
  ooc_plan_request r = square(32768, 2, 8 * GiB);
  r.rates = copy_rates{55e9, 55e9, 97e9, 0};  // short lines of C at the full rate: single-panel blocks stay
  EXPECT_EQ(make_ooc_plan(r).ramp_seconds, 0.0) << "no compute estimate, no bound";
  r.compute_seconds = 0.1046;
  const ooc_plan p = make_ooc_plan(r);
  SCOPED_TRACE(p.describe());
  const double F = 32.0 * 2048.0 * 32768.0 * 2.0 / 55e9, G = 0.1046;
  EXPECT_GT(p.ramp_seconds, G + F * F / (4 * G));
  EXPECT_NEAR(p.ramp_seconds, 0.121931, 2e-5);
  EXPECT_GE(p.ramp_seconds, p.copy_seconds);
  EXPECT_NE(p.describe().find("ramp"), std::string::npos);
  // Compute far above the copies: the bound is the compute plus the first two panels and the last
  // block out. Far below: the blocks finish as their panels land, and the copies out fall behind
  // once a shell's blocks (2s + 1 of 0.305 ms each) take longer to leave than its two panels take
  // to arrive (4.88 ms, from s = 8 on): the last block leaves ~100 ms in, after the copy floor.
  r.compute_seconds = 10.0;
  const double P = 2048.0 * 32768.0 * 2.0 / 55e9, out = 2048.0 * 2048.0 * 4.0 / 55e9;
  EXPECT_NEAR(make_ooc_plan(r).ramp_seconds, 10.0 + 2 * P + out, 1e-9);
  r.compute_seconds = 1e-6;
  const ooc_plan q = make_ooc_plan(r);
  EXPECT_GE(q.ramp_seconds, q.copy_seconds);
  EXPECT_GE(q.ramp_seconds, 16 * P + 192 * out);
  EXPECT_LE(q.ramp_seconds, 16 * P + 192 * out + 2 * P);
}

TEST(OocPlan, BetaNonzeroReadsCOnce) {
  ooc_plan_request r = square(32768, 4, 8 * GiB);
  r.read_c = true;
  const ooc_plan p = make_ooc_plan(r);
  EXPECT_EQ(p.h2d_bytes, 12 * GiB);
  EXPECT_EQ(p.d2h_bytes, 4 * GiB);
  EXPECT_EQ(p.min_h2d_bytes, 12 * GiB);
}

TEST(OocPlan, BandsStreamBOncePerBandLessTheTurnReuse) {
  for (std::size_t budget : {2 * GiB, GiB, GiB / 2}) {
    const ooc_plan p = make_ooc_plan(square(32768, 4, budget));
    SCOPED_TRACE(p.describe());
    EXPECT_GT(static_cast<index_t>(p.a_slots), 0);
    EXPECT_LT(static_cast<index_t>(p.a_slots), p.row_panels) << "expected several bands";
    EXPECT_EQ(p.h2d_bytes, expected_h2d_single_device(p, 4));
    EXPECT_EQ(p.d2h_bytes, 4 * GiB);
    EXPECT_LE(p.device_bytes, budget);
    expect_permutation(p);
  }
}

TEST(OocPlan, SerpentineBandsTurnOnTheCachedColumn) {
  const ooc_plan p = make_ooc_plan(square(32768, 4, GiB));
  const auto band = [&](const ooc_block& b) { return b.i / static_cast<index_t>(p.a_slots); };
  int turns = 0;
  for (std::size_t t = 1; t < p.order.size(); ++t) {
    if (band(p.order[t]) != band(p.order[t - 1])) {
      ++turns;
      EXPECT_EQ(p.order[t].j, p.order[t - 1].j) << "band turn at task " << t;
    }
  }
  EXPECT_GT(turns, 0);
}

TEST(OocPlan, FirstBandStartsAsAGrowingSquare) {
  const ooc_plan p = make_ooc_plan(square(32768, 4, 8 * GiB));
  ASSERT_GE(p.b_slots, 2u);
  const std::vector<ooc_block> want = {{0, 0}, {1, 0}, {0, 1}, {1, 1}, {2, 0},
                                       {2, 1}, {0, 2}, {1, 2}, {2, 2}};
  for (std::size_t t = 0; t < want.size(); ++t) {
    EXPECT_EQ(p.order[t], want[t]) << "task " << t << " is (" << p.order[t].i << "," << p.order[t].j << ")";
  }
}

// C blocks of several B panels (c_min_line_bytes): the bf16 acceptance job with lines of at least
// 16 KiB gets 2048 x 4096 blocks made of two 2048-wide B panels; the panels, the caches and the
// bytes moved are those of the 2048 x 2048 plan, the slots hold twice the C, every block once.
TEST(OocPlan, CBlocksSpanSeveralBPanelsForLongerLines) {
  ooc_plan_request r = square(32768, 2, 8 * GiB);
  const ooc_plan base = make_ooc_plan(r);
  EXPECT_EQ(base.group, 1);
  EXPECT_EQ(base.col_blocks, base.col_panels);
  r.c_min_line_bytes = 16384;
  const ooc_plan p = make_ooc_plan(r);
  SCOPED_TRACE(p.describe());
  EXPECT_EQ(p.bm, 2048);
  EXPECT_EQ(p.bn, 2048);
  EXPECT_EQ(p.group, 2);
  EXPECT_EQ(p.col_blocks, 8);
  EXPECT_EQ(p.tasks(), 128u);
  EXPECT_EQ(p.c_block_bytes, 2048u * 4096u * 4u);
  EXPECT_EQ(p.block_cols(p.order.front()), 4096);
  EXPECT_EQ(p.a_slots, base.a_slots);
  EXPECT_EQ(p.b_slots, base.b_slots);
  EXPECT_EQ(p.h2d_bytes, 4 * GiB);
  EXPECT_EQ(p.d2h_bytes, 4 * GiB);
  EXPECT_EQ(p.floor_seconds, base.floor_seconds);
  EXPECT_LE(p.device_bytes, r.budget_bytes);
  EXPECT_NE(p.describe().find("2 B panels of 2048"), std::string::npos);
  expect_permutation(p);
  std::size_t h2d = 0, d2h = 0;
  spillway::gemm::detail::ooc_simulate(p, 0, p.order.size(), false, 2, 4, h2d, d2h);
  EXPECT_EQ(h2d, p.h2d_bytes);
  EXPECT_EQ(d2h, p.d2h_bytes);
  // The start keeps the loaded extents balanced: rows of 2048 against column blocks of 4096, so
  // two rows join per column block: (0,0) (1,0) (2,0), then column block 1 (panels 2, 3) down rows
  // 0..2, ... (blocks as {row panel, first B panel, panels}).
  const std::vector<ooc_block> want = {{0, 0, 2}, {1, 0, 2}, {2, 0, 2}, {0, 2, 2}, {1, 2, 2},
                                       {2, 2, 2}, {3, 0, 2}, {3, 2, 2}, {4, 0, 2}, {4, 2, 2}};
  for (std::size_t t = 0; t < want.size(); ++t)
    EXPECT_EQ(p.order[t], want[t]) << "task " << t << " is (" << p.order[t].i << "," << p.order[t].j << ")";
  // Whole rows of C (lines of 128 KiB): one block per row panel, all 16 B panels in each.
  r.c_min_line_bytes = 131072;
  const ooc_plan w = make_ooc_plan(r);
  EXPECT_EQ(w.group, 16);
  EXPECT_EQ(w.col_blocks, 1);
  EXPECT_EQ(w.tasks(), 16u);
  EXPECT_EQ(w.block_cols(w.order.front()), 32768);
  EXPECT_EQ(w.first_panel(w.order.front()), 0);
  EXPECT_EQ(w.last_panel(w.order.front()), 16);
  EXPECT_EQ(w.h2d_bytes, 4 * GiB);
  EXPECT_LE(w.device_bytes, r.budget_bytes);
  expect_permutation(w);
}

// Float in 8 GiB: the wider C blocks are paid for with B cache slots (never below the block's
// panels), the bytes stay the minimum; column-major C (lines along the executed rows) keeps
// single-panel blocks; a budget with no room for wider blocks keeps them too.
TEST(OocPlan, CBlockGroupsFitTheBudgetAndFollowCsLayout) {
  ooc_plan_request r = square(32768, 4, 8 * GiB);
  r.c_min_line_bytes = 32768;
  const ooc_plan p = make_ooc_plan(r);
  SCOPED_TRACE(p.describe());
  EXPECT_EQ(p.group, 4);
  EXPECT_GE(p.b_slots, 4u);
  EXPECT_LE(p.device_bytes, r.budget_bytes);
  EXPECT_EQ(p.h2d_bytes, 8 * GiB);
  expect_permutation(p);
  r.c_row_major = false;
  const ooc_plan q = make_ooc_plan(r);
  EXPECT_FALSE(q.transposed);
  EXPECT_EQ(q.group, 1) << q.describe();
  ooc_plan_request s;
  s.m = 1000;
  s.n = 900;
  s.k = 700;
  s.budget_bytes = 1343488;  // full-k 128-wide panels and 4 C blocks fit with no byte to spare
  s.c_min_line_bytes = 4096;
  const ooc_plan t = make_ooc_plan(s);
  EXPECT_EQ(t.group, 1) << t.describe();
  expect_permutation(t);
}

// The order's bound with groups (plans made without a compute time keep the groups asked for; the
// bound is then computed over their orders): each panel's GEMM waits only for its own panel, so the
// 2048 x 4096 plan stays within a few panel times of the 2048 x 2048 plan, above the compute and
// the copy floor; whole rows wait for every B panel before their first copy out.
TEST(OocPlan, RampBoundOfGroupedBlocks) {
  const copy_rates rates{55e9, 55e9, 97e9, 0};
  const double G = 0.087, P = 2048.0 * 32768.0 * 2.0 / 55e9;
  auto bound = [&](std::size_t line) {
    ooc_plan_request r = square(32768, 2, 8 * GiB);
    r.rates = rates;
    r.c_min_line_bytes = line;
    const ooc_plan p = make_ooc_plan(r);
    return std::make_pair(p, spillway::gemm::detail::ooc_ramp(p, 0, p.order.size(), false, 2, 4, rates, G));
  };
  const auto [base, b1] = bound(0);
  const auto [g2, b2] = bound(16384);
  const auto [rows, b16] = bound(131072);
  SCOPED_TRACE(base.describe() + "\n" + g2.describe() + "\n" + rows.describe());
  EXPECT_EQ(g2.group, 2);
  EXPECT_EQ(rows.group, 16);
  for (const double b : {b1, b2, b16}) {
    EXPECT_GE(b, G);
    EXPECT_GE(b, base.copy_seconds);
  }
  EXPECT_LE(b2, b1 + 2 * P);
  EXPECT_GT(b16, b2);
  // A whole row of C leaves only after the last B panel: 16 B panels and A_0 at least, then the
  // 15 other rows' compute and the last row's copy out (256 MiB).
  EXPECT_GE(b16, 17 * P + G * 15 / 16 + 2048.0 * 32768.0 * 4.0 / 55e9);
}

// With a compute time the plan weighs C blocks with 64 KiB lines against single-panel blocks by
// the order's bound, pricing short lines at rates.d2h_short: for the bf16 job at the H200's rates
// (31.4 GB/s for 8 KiB lines beside GEMMs) a square start of single-panel blocks, then blocks of 8
// B panels; the same bytes. TF32 (copies in twice the copies out) and a full short-line rate keep
// single-panel blocks, as does c_min_line_bytes = 1.
TEST(OocPlan, WeighsWideBlocksByTheOrdersBound) {
  ooc_plan_request r = square(32768, 2, 8 * GiB);
  r.rates = copy_rates{55.4e9, 55.3e9, 99.8e9, 31.4e9};
  r.compute_seconds = 0.0878;
  const ooc_plan p = make_ooc_plan(r);
  SCOPED_TRACE(p.describe());
  EXPECT_EQ(p.group, 8);
  EXPECT_GT(p.narrow_rows, 0);
  EXPECT_LT(p.narrow_rows, 16);
  const auto S = static_cast<std::size_t>(p.narrow_rows);
  EXPECT_EQ(p.tasks(), S * S + S * (16 - S) + (16 - S) * 2);
  for (std::size_t t = 0; t < S * S; ++t) {
    EXPECT_EQ(p.order[t].w, 1);
    EXPECT_TRUE(p.order[t].i < p.narrow_rows && p.order[t].j < p.narrow_rows) << t;
  }
  EXPECT_EQ(p.order.back().w, 8);
  EXPECT_EQ(p.h2d_bytes, 4 * GiB);
  EXPECT_EQ(p.d2h_bytes, 4 * GiB);
  EXPECT_NE(p.describe().find("square start of"), std::string::npos);
  expect_permutation(p);
  ooc_plan_request n = r;
  n.c_min_line_bytes = 1;
  const ooc_plan q = make_ooc_plan(n);
  EXPECT_EQ(q.group, 1);
  EXPECT_LT(p.ramp_seconds, q.ramp_seconds);
  n = r;
  n.rates.d2h_short = 0;
  EXPECT_EQ(make_ooc_plan(n).group, 1);
  ooc_plan_request f = square(32768, 4, 8 * GiB);
  f.rates = r.rates;
  f.compute_seconds = 0.2094;
  EXPECT_EQ(make_ooc_plan(f).group, 1);
}

// Staged copies out (whole blocks out at the full rate, then into C by host threads): short lines
// cost nothing on the link, so the automatic choice keeps single-panel blocks (the square order,
// the bound of direct copies with no short-line penalty); the host copy, priced at rates.scatter,
// is one more stage of the bound (each block's after the previous block's): slower than the blocks,
// it bounds the job at C's bytes over its rate. An explicit c_min_line_bytes with no compute time
// still groups.
TEST(OocPlan, StagedCopiesOutKeepSinglePanelBlocksAndPriceTheHostCopy) {
  ooc_plan_request r = square(32768, 2, 8 * GiB);
  r.rates = copy_rates{55.4e9, 55.3e9, 99.8e9, 31.4e9};
  r.compute_seconds = 0.0878;
  r.c_staged = true;
  const ooc_plan p = make_ooc_plan(r);
  SCOPED_TRACE(p.describe());
  EXPECT_TRUE(p.c_staged);
  EXPECT_EQ(p.group, 1);
  EXPECT_EQ(p.h2d_bytes, 4 * GiB);
  EXPECT_EQ(p.d2h_bytes, 4 * GiB);
  ooc_plan_request d = r;
  d.c_staged = false;
  d.rates.d2h_short = 0;
  EXPECT_DOUBLE_EQ(p.ramp_seconds, make_ooc_plan(d).ramp_seconds);
  r.rates.scatter = 10e9;
  const ooc_plan q = make_ooc_plan(r);
  EXPECT_GE(q.ramp_seconds, 4.0 * static_cast<double>(GiB) / 10e9);
  EXPECT_GT(q.ramp_seconds, p.ramp_seconds);
  r.rates.scatter = 1e12;  // a host copy far faster than the link: one block's copy after the last out
  const double block = 2048.0 * 2048.0 * 4.0;
  EXPECT_NEAR(make_ooc_plan(r).ramp_seconds, p.ramp_seconds, block / 1e12 + 1e-9);
  r.c_min_line_bytes = std::size_t{64} << 10;
  r.compute_seconds = 0;  // no bound to weigh the wide blocks by: the length asked for is taken
  EXPECT_EQ(make_ooc_plan(r).group, 8);
}

TEST(OocPlan, KeepsTheOperandResidentThatMovesFewerBytes) {
  // A 2 GiB, B 1 GiB, budget 1.5 GiB, blocks at most 1024 wide: B (16 panels of 64 MiB) fits whole
  // beside two streamed A panels, so keeping B resident reads each operand once (3 GiB); keeping A
  // resident needs two bands of A and reads B twice, less the panels cached at the turn.
  ooc_plan_request r;
  r.m = 32768;
  r.n = 16384;
  r.k = 16384;
  r.max_block = 1024;
  r.budget_bytes = GiB + GiB / 2;
  const ooc_plan p = make_ooc_plan(r);
  r.allow_transpose = false;
  const ooc_plan q = make_ooc_plan(r);
  SCOPED_TRACE(p.describe() + "\n" + q.describe());
  EXPECT_TRUE(p.transposed);
  EXPECT_FALSE(q.transposed);
  EXPECT_EQ(p.h2d_bytes, 3 * GiB);
  EXPECT_LT(p.h2d_bytes, q.h2d_bytes);
  EXPECT_EQ(p.m, 16384);  // executed frame: Cᵀ = Bᵀ·Aᵀ
  EXPECT_EQ(p.n, 32768);
  EXPECT_LE(p.device_bytes, r.budget_bytes);
}

TEST(OocPlan, SplitsKOnlyWhenAFullKPanelCannotFit) {
  ooc_plan_request r;
  r.m = 1000;
  r.n = 900;
  r.k = 700;
  // Full-k 128-wide panels: A 128 x 704 x 4 = 360,448 B; two B slots 720,896 B; 4 C blocks of
  // 128 x 128 x 4 = 262,144 B: 1,343,488 B in all.
  r.budget_bytes = 1343488;
  const ooc_plan full = make_ooc_plan(r);
  EXPECT_EQ(full.k_chunks, 1) << full.describe();
  r.budget_bytes = 1343488 - 1;
  const ooc_plan split = make_ooc_plan(r);
  EXPECT_GT(split.k_chunks, 1) << split.describe();
  EXPECT_LE(split.device_bytes, r.budget_bytes);
  expect_permutation(split);
}

TEST(OocPlan, SmallBudgetForcesAtLeastNineBlocks) {
  ooc_plan_request r;
  r.m = 700;
  r.n = 650;
  r.k = 300;
  r.budget_bytes = 1 << 20;
  const ooc_plan p = make_ooc_plan(r);
  SCOPED_TRACE(p.describe());
  EXPECT_GE(p.tasks(), 9u);
  EXPECT_LE(p.device_bytes, r.budget_bytes);
  expect_permutation(p);
  std::size_t h2d = 0, d2h = 0;
  spillway::gemm::detail::ooc_simulate(p, 0, p.order.size(), false, 4, 4, h2d, d2h);
  EXPECT_EQ(h2d, p.h2d_bytes);
  EXPECT_EQ(d2h, 700u * 650u * 4u);
}

TEST(OocPlan, MaxBlockCapsTheSides) {
  ooc_plan_request r = square(1000, 4, GiB);
  r.max_block = 300;
  const ooc_plan p = make_ooc_plan(r);
  EXPECT_LE(p.bm, 300);
  EXPECT_LE(p.bn, 300);
  EXPECT_GE(p.tasks(), 16u);
  expect_permutation(p);
}

TEST(OocPlan, TwoDevicesShareRowsAndEachReadsAllOfB) {
  ooc_plan_request r = square(32768, 4, 8 * GiB);
  r.devices = 2;
  const ooc_plan p = make_ooc_plan(r);
  SCOPED_TRACE(p.describe());
  expect_permutation(p);
  // Each device: half of A (2 GiB) and all of B (4 GiB) in, half of C out.
  EXPECT_EQ(p.h2d_bytes, 12 * GiB);
  EXPECT_EQ(p.d2h_bytes, 4 * GiB);
  std::set<index_t> rows0, rows1;
  for (std::size_t t = p.device_first[0]; t < p.device_first[1]; ++t) rows0.insert(p.order[t].i);
  for (std::size_t t = p.device_first[1]; t < p.device_first[2]; ++t) rows1.insert(p.order[t].i);
  EXPECT_FALSE(rows0.empty());
  EXPECT_FALSE(rows1.empty());
  for (index_t i : rows0) EXPECT_EQ(rows1.count(i), 0u);
  EXPECT_NEAR(p.copy_seconds, 6.0 * GiB / 55.4e9, 1e-9);
}

TEST(OocPlan, QueueHandsEveryBlockOutOnceAndStealsFromTheBack) {
  // Device 0 owns blocks [0, 10), device 1 [10, 30).
  spillway::gemm::detail::ooc_queue q({0, 10, 30});
  for (std::size_t t = 0; t < 10; ++t) EXPECT_EQ(q.pop(0), t);
  EXPECT_EQ(q.pop(0), 29u);  // device 0 is done: the end of device 1's range
  EXPECT_EQ(q.pop(1), 10u);  // device 1 still takes its own from the front
  EXPECT_EQ(q.pop(0), 28u);
  // Threads popping concurrently, one per device, as many pops as blocks: each block exactly once.
  spillway::gemm::detail::ooc_queue r({0, 500, 700, 1000});
  std::vector<std::vector<std::size_t>> got(3);
  std::vector<std::thread> th;
  const std::size_t share[3] = {300, 400, 300};  // not the ranges' sizes: forces steals both ways
  for (std::size_t d = 0; d < 3; ++d)
    th.emplace_back([&, d] {
      for (std::size_t i = 0; i < share[d]; ++i) got[d].push_back(r.pop(d));
    });
  for (auto& x : th) x.join();
  std::set<std::size_t> all;
  for (const auto& v : got)
    for (std::size_t b : v) EXPECT_TRUE(all.insert(b).second) << "block " << b << " twice";
  EXPECT_EQ(all.size(), 1000u);
  EXPECT_THROW((void)r.pop(0), spillway::logic_error);
}

TEST(OocPlan, RefusesABudgetBelowOneBlockStatingTheMinimum) {
  ooc_plan_request r;
  r.m = 1000;
  r.n = 900;
  r.k = 700;
  r.budget_bytes = 1000;
  std::string msg;
  const std::size_t minimum = stated_minimum(r, msg);
  ASSERT_GT(minimum, 0u) << msg;
  EXPECT_NE(msg.find("below the minimum of"), std::string::npos) << msg;
  // 128 x 128 block, 128-wide k chunks: A 2 x 64 KiB, B 2 x 64 KiB, 4 C blocks of 64 KiB.
  EXPECT_EQ(minimum, 8u * 65536u) << msg;
  r.budget_bytes = minimum;
  EXPECT_NO_THROW((void)make_ooc_plan(r));
  r.budget_bytes = minimum - 1;
  EXPECT_THROW((void)make_ooc_plan(r), spillway::logic_error);
}

// An MN-major operand on a tensor-core path (stage_b: B row-major) lands in two raw buffers per
// device and is transposed once into its cache slot: 2 x its panel of fixed memory, nothing per
// slot, and the same bytes moved and floor as the K-major plan (the 32768^3 bf16 job in 8 GiB).
// What gemm_out_of_core hands run_tasks for its one budget check: reserved_bytes() (exactly what
// ooc_job::setup allocates: A's cache, B's cache, the raw buffers) and slot_buffer_bytes() (the C
// block, the accumulator block, the split-K workspace). Both add up to device_bytes, within the
// budget; the split-K workspace holds every block GEMM's split (plan_split_k: at most split_k
// slices of rows x panel columns), so none of them allocates inside a task.
void expect_budget_parts(const ooc_plan& p, const ooc_plan_request& r, const std::string& what) {
  SCOPED_TRACE(what + ": " + p.describe());
  EXPECT_EQ(p.reserved_bytes(), p.a_slots * p.a_panel_bytes + p.b_slots * p.b_panel_bytes + p.stage_bytes);
  const std::vector<std::size_t> slot = p.slot_buffer_bytes();
  ASSERT_GE(slot.size(), 1u);
  EXPECT_EQ(slot[0], p.c_block_bytes);
  EXPECT_EQ(p.acc_block_bytes + p.split_k_bytes, p.slot_extra_bytes);
  if (p.acc_block_bytes > 0) {
    EXPECT_EQ(slot.at(p.acc_buffer()), p.acc_block_bytes);
  }
  if (p.split_k_bytes > 0) {
    EXPECT_EQ(slot.at(p.split_k_buffer()), p.split_k_bytes);
  }
  EXPECT_EQ(slot.size(), 1u + (p.acc_block_bytes > 0) + (p.split_k_bytes > 0));
  for (std::size_t b : slot) EXPECT_EQ(b % spillway::detail::slot_buffer_alignment, 0u);
  const std::size_t per_slot = spillway::detail::slot_device_bytes(slot);
  EXPECT_EQ(per_slot, p.c_block_bytes + p.slot_extra_bytes);
  EXPECT_EQ(p.reserved_bytes() + p.slots * per_slot, p.device_bytes);
  EXPECT_LE(p.device_bytes, r.budget_bytes);
  EXPECT_EQ(p.acc_block_bytes > 0, p.k_chunks > 1 && !r.c_is_acc);
  EXPECT_EQ(p.split_k_bytes > 0, r.split_k > 1);
  for (const ooc_block& b : p.order) {
    const auto rows = static_cast<std::size_t>(p.block_rows(b)),
               cols = static_cast<std::size_t>(p.block_cols(b));
    ASSERT_LE(rows * cols * r.out_bytes, p.c_block_bytes);
    if (p.acc_block_bytes > 0) {
      ASSERT_LE(rows * cols * r.acc_bytes, p.acc_block_bytes);
    }
    for (index_t q = 0; q < (p.k == 0 ? 0 : p.k_chunks); ++q)
      for (index_t j = p.first_panel(b); j < p.last_panel(b); ++j) {
        const index_t w = p.panel_cols(j);
        const auto split = spillway::gemm::detail::plan_split_k(p.block_rows(b), w, p.chunk_k(q), 1,
                                                                static_cast<int>(r.split_k), 132);
        const auto need = static_cast<std::size_t>(
                              spillway::gemm::detail::split_workspace_elements(p.block_rows(b), w, split)) *
                          r.acc_bytes;
        ASSERT_LE(need, p.split_k_bytes) << "block (" << b.i << ", " << b.j << ") chunk " << q;
      }
  }
}

TEST(OocPlan, RunTasksGetsTheDeviceBytesAsReservedPlusSlots) {
  const auto base = [] {
    ooc_plan_request r;
    r.m = 1000;
    r.n = 900;
    r.k = 700;
    r.budget_bytes = 3u << 20;
    return r;
  };
  ooc_plan_request r = base();
  expect_budget_parts(make_ooc_plan(r), r, "float, 3 MiB");
  // k in chunks into a half C: an accumulator block per slot.
  r.out_bytes = 2;
  r.c_is_acc = false;
  r.budget_bytes = 1u << 20;
  const ooc_plan chunked = make_ooc_plan(r);
  EXPECT_GT(chunked.k_chunks, 1);
  EXPECT_GT(chunked.acc_block_bytes, 0u);
  expect_budget_parts(chunked, r, "k chunks, half C");
  // A forced split-K as well, then with MN-major operands, two devices, C blocks of several panels.
  r.split_k = 3;
  r.budget_bytes = 3u << 19;
  const ooc_plan both = make_ooc_plan(r);
  EXPECT_GT(both.k_chunks, 1);
  EXPECT_EQ(both.split_k_buffer(), 2u);
  expect_budget_parts(both, r, "k chunks, half C, split 3");
  r = base();
  r.split_k = 4;
  r.stage_a = r.stage_b = true;
  r.devices = 2;
  expect_budget_parts(make_ooc_plan(r), r, "split 4, both MN-major, two devices");
  r = base();
  r.split_k = 2;
  r.budget_bytes = 64u << 20;
  r.c_min_line_bytes = 2048;
  r.max_block = 256;
  const ooc_plan grouped = make_ooc_plan(r);
  EXPECT_GT(grouped.group, 1);
  expect_budget_parts(grouped, r, "split 2, C blocks of several B panels");
  // k = 17 with split 7: slices of 16, and k = 0.
  r = base();
  r.k = 17;
  r.split_k = 7;
  expect_budget_parts(make_ooc_plan(r), r, "k 17, split 7");
  r.k = 0;
  expect_budget_parts(make_ooc_plan(r), r, "k 0");
}

// gemm_out_of_core plans with refuse_over_budget false: below every plan it gets the smallest plan,
// whose device bytes (reserved + slots) are the minimum make_ooc_plan states, and run_tasks's one
// check refuses it; at that minimum a plan fits.
TEST(OocPlan, BelowEveryPlanTheSmallestPlanIsLeftToRunTasks) {
  for (int variant = 0; variant < 3; ++variant) {
    ooc_plan_request r;
    r.m = 1000;
    r.n = 900;
    r.k = 700;
    r.budget_bytes = 1000;
    if (variant >= 1) r.split_k = 3;
    if (variant >= 1) r.stage_a = true;
    if (variant == 2) {
      r.out_bytes = 2;
      r.c_is_acc = false;
      r.slots = 8;
    }
    SCOPED_TRACE("variant " + std::to_string(variant));
    std::string msg;
    const std::size_t minimum = stated_minimum(r, msg);
    ASSERT_GT(minimum, 0u) << msg;
    r.refuse_over_budget = false;
    for (std::size_t budget : {std::size_t{1000}, minimum - 1}) {
      r.budget_bytes = budget;
      const ooc_plan p = make_ooc_plan(r);
      EXPECT_EQ(p.device_bytes, minimum);
      EXPECT_GT(p.device_bytes, budget);
      EXPECT_EQ(p.reserved_bytes() + p.slots * spillway::detail::slot_device_bytes(p.slot_buffer_bytes()),
                minimum);
      expect_permutation(p);
    }
    r.budget_bytes = minimum;
    expect_budget_parts(make_ooc_plan(r), r, "at the minimum");
  }
}

TEST(OocPlan, MnMajorOperandAddsTwoRawPanelsPerDeviceNotPerSlot) {
  ooc_plan_request r = square(32768, 2, 8 * GiB);
  const ooc_plan base = make_ooc_plan(r);
  r.stage_b = true;
  const ooc_plan p = make_ooc_plan(r);
  SCOPED_TRACE(p.describe());
  // In the executed frame the caller's B is "A" when the plan is transposed.
  EXPECT_EQ(p.stage_a, p.transposed);
  EXPECT_EQ(p.stage_b, !p.transposed);
  const std::size_t panel = p.transposed ? p.a_panel_bytes : p.b_panel_bytes;
  // Its panels are copied in as host lines of its MN side: at least ooc_mn_line_bytes (16 KiB,
  // 8192 bf16) where the budget allows — here 8192 x 32768 x 2 bytes = 512 MiB.
  const index_t mn_side = p.transposed ? p.bm : p.bn;
  EXPECT_GE(static_cast<std::size_t>(mn_side) * 2, detail::ooc_mn_line_bytes);
  EXPECT_EQ(panel, static_cast<std::size_t>(mn_side) * 32768 * 2);
  // It lands in pieces of at most ooc_raw_piece_bytes (whole lines), in two raw buffers.
  const std::size_t raw = p.transposed ? p.raw_a_bytes : p.raw_b_bytes;
  EXPECT_EQ(raw, std::min(panel, detail::ooc_raw_piece_bytes));
  EXPECT_EQ(p.stage_bytes, 2 * raw);
  EXPECT_EQ(p.slot_extra_bytes, 0u);
  EXPECT_EQ(p.device_bytes, p.a_slots * p.a_panel_bytes + p.b_slots * p.b_panel_bytes +
                                p.slots * (p.c_block_bytes + p.slot_extra_bytes) + p.stage_bytes);
  EXPECT_LE(p.device_bytes, 8 * GiB);
  EXPECT_EQ(p.h2d_bytes, base.h2d_bytes);
  EXPECT_EQ(p.d2h_bytes, base.d2h_bytes);
  EXPECT_EQ(p.min_h2d_bytes, base.min_h2d_bytes);
  EXPECT_DOUBLE_EQ(p.floor_seconds, base.floor_seconds);
  EXPECT_NE(p.describe().find("transposed on load"), std::string::npos);
  EXPECT_EQ(base.describe().find("transposed on load"), std::string::npos);
  // More slots: the same raw buffers (they are per device).
  r.slots = 8;
  const ooc_plan p8 = make_ooc_plan(r);
  ASSERT_EQ(p8.transposed ? p8.a_panel_bytes : p8.b_panel_bytes, panel);
  EXPECT_EQ(p8.stage_bytes, 2 * raw);
  EXPECT_EQ(p8.slot_extra_bytes, 0u);
  // Both operands MN-major: 2 panels of each.
  r.stage_a = true;
  const ooc_plan both = make_ooc_plan(r);
  EXPECT_TRUE(both.stage_a && both.stage_b);
  EXPECT_EQ(both.stage_bytes, 2 * both.raw_a_bytes + 2 * both.raw_b_bytes);
  EXPECT_LE(both.raw_a_bytes, std::min(both.a_panel_bytes, detail::ooc_raw_piece_bytes));
  EXPECT_LE(both.raw_b_bytes, std::min(both.b_panel_bytes, detail::ooc_raw_piece_bytes));
  EXPECT_EQ(both.h2d_bytes, base.h2d_bytes);
  EXPECT_LE(both.device_bytes, 8 * GiB);
}

// The budget arithmetic with raw buffers on a budget that is tight: every plan the search returns
// fits, and the raw buffers are counted once per device, so a budget too small for one slot's
// staging under the old per-slot rule (slots x panel) still plans.
// The MN side of an MN-major operand's panels keeps host lines of at least ooc_mn_line_bytes
// while a plan with full-k panels fits; below that budget the lines get shorter before k is split
// (chunks of k would move more bytes).
TEST(OocPlan, MnMajorPanelsKeepLongHostLinesBeforeFullK) {
  ooc_plan_request r = square(32768, 2, 8 * GiB);
  r.stage_b = true;
  r.allow_transpose = false;
  const ooc_plan p = make_ooc_plan(r);
  SCOPED_TRACE(p.describe());
  EXPECT_GE(p.bn * 2, static_cast<index_t>(detail::ooc_mn_line_bytes));
  EXPECT_EQ(p.k_chunks, 1);
  r.stage_b = false;
  EXPECT_EQ(make_ooc_plan(r).bn, 2048);  // K-major B: lines of k, the panel width is free
  // A budget too small for two 16 KiB-line panels of full k (2 x 512 MiB) and the raw buffers.
  r.stage_b = true;
  r.budget_bytes = 1200ull << 20;
  const ooc_plan q = make_ooc_plan(r);
  SCOPED_TRACE(q.describe());
  EXPECT_EQ(q.k_chunks, 1);
  EXPECT_LT(q.bn * 2, static_cast<index_t>(detail::ooc_mn_line_bytes));
  EXPECT_LE(q.device_bytes, r.budget_bytes);
}

// A row-major bf16 (or int8) B that fits the budget whole is one panel (C blocks of whole rows when C is
// row-major), landing in raw pieces of whole rows: 512 MiB (8192 rows of 32768 bf16) by default,
// 16 rows at least; the bytes moved stay the minimum.
TEST(OocPlan, RowMajorBHeldWholeLandsInPieces) {
  ooc_plan_request r = square(32768, 2, 8 * GiB);
  r.stage_b = true;
  const ooc_plan p = make_ooc_plan(r);
  SCOPED_TRACE(p.describe());
  ASSERT_FALSE(p.transposed);
  EXPECT_EQ(p.bn, 32768);
  EXPECT_EQ(p.col_panels, 1);
  EXPECT_EQ(p.b_slots, 1u);
  EXPECT_EQ(p.bm, 2048);  // the smallest streamed A panel of the first side floor
  EXPECT_EQ(p.b_panel_bytes, std::size_t{32768} * 32768 * 2);
  EXPECT_EQ(p.raw_b_lines, 8192);
  EXPECT_EQ(p.raw_b_bytes, detail::ooc_raw_piece_bytes);
  EXPECT_EQ(p.stage_bytes, 2 * detail::ooc_raw_piece_bytes);
  EXPECT_EQ(p.h2d_bytes, p.min_h2d_bytes);
  EXPECT_EQ(p.d2h_bytes, p.min_d2h_bytes);
  EXPECT_LE(p.device_bytes, 8 * GiB);
  expect_permutation(p);
  r.raw_piece_bytes = 1 << 20;  // 16 rows of 64 KiB
  const ooc_plan q = make_ooc_plan(r);
  EXPECT_EQ(q.raw_b_lines, 16);
  EXPECT_EQ(q.raw_b_bytes, std::size_t{1} << 20);
  r.raw_piece_bytes = 1000;  // below one line: still 16 lines
  EXPECT_EQ(make_ooc_plan(r).raw_b_lines, 16);
  // int8: held whole as well (1 GiB).
  ooc_plan_request i8 = square(32768, 1, 8 * GiB);
  i8.stage_b = true;
  const ooc_plan p8 = make_ooc_plan(i8);
  SCOPED_TRACE(p8.describe());
  EXPECT_TRUE(!p8.transposed && p8.bn == 32768 && p8.col_panels == 1);
  // 4-byte elements (TF32): not preferred (measured slower there).
  ooc_plan_request f = square(32768, 4, 8 * GiB);
  f.stage_b = true;
  const ooc_plan pf = make_ooc_plan(f);
  SCOPED_TRACE(pf.describe());
  EXPECT_FALSE(!pf.transposed && pf.bn == 32768 && pf.col_panels == 1);
  // Column-major C: whole-width blocks would have short lines; not preferred.
  r.raw_piece_bytes = 0;
  r.c_row_major = false;
  const ooc_plan cm = make_ooc_plan(r);
  SCOPED_TRACE(cm.describe());
  EXPECT_FALSE(!cm.transposed && cm.bn == 32768 && cm.col_panels == 1);
}

TEST(OocPlan, RawBuffersFitTheBudgetAtEveryBudget) {
  for (std::size_t budget = std::size_t{64} << 20; budget >= (std::size_t{2} << 20);
       budget = budget * 3 / 4) {
    ooc_plan_request r;
    r.m = 3000;
    r.n = 2500;
    r.k = 1700;
    r.in_bytes = 2;
    r.out_bytes = 2;
    r.acc_bytes = 4;
    r.c_is_acc = false;
    r.stage_a = true;
    r.stage_b = true;
    r.slots = 8;
    r.budget_bytes = budget;
    const ooc_plan p = make_ooc_plan(r);
    SCOPED_TRACE(p.describe());
    EXPECT_EQ(p.stage_bytes, 2 * p.raw_a_bytes + 2 * p.raw_b_bytes);
    EXPECT_EQ(p.device_bytes, p.a_slots * p.a_panel_bytes + p.b_slots * p.b_panel_bytes +
                                  p.slots * (p.c_block_bytes + p.slot_extra_bytes) + p.stage_bytes);
    EXPECT_LE(p.device_bytes, budget);
    expect_permutation(p);
  }
}

// The stated minimum counts the raw buffers: 128 x 128 x 128 panels of 64 KiB (float), A 2 and B 2
// cached, 4 C blocks, and 2 raw buffers of each MN-major operand: 12 x 64 KiB.
TEST(OocPlan, MinimumBudgetCountsTheRawBuffers) {
  ooc_plan_request r;
  r.m = 1000;
  r.n = 900;
  r.k = 700;
  r.stage_a = true;
  r.stage_b = true;
  r.budget_bytes = 1000;
  std::string msg;
  const std::size_t minimum = stated_minimum(r, msg);
  ASSERT_GT(minimum, 0u) << msg;
  EXPECT_NE(msg.find("two raw panel buffers per MN-major operand"), std::string::npos) << msg;
  EXPECT_EQ(minimum, 12u * 65536u) << msg;
  r.budget_bytes = minimum;
  const ooc_plan p = make_ooc_plan(r);
  EXPECT_EQ(p.stage_bytes, 4u * 65536u);
  EXPECT_EQ(p.device_bytes, minimum);
  r.budget_bytes = minimum - 1;
  EXPECT_THROW((void)make_ooc_plan(r), spillway::logic_error);
  // One MN-major operand: 10 x 64 KiB.
  r.stage_a = false;
  r.budget_bytes = 10u * 65536u;
  EXPECT_NO_THROW((void)make_ooc_plan(r));
  r.budget_bytes = 10u * 65536u - 1;
  EXPECT_THROW((void)make_ooc_plan(r), spillway::logic_error);
}

TEST(OocPlan, EmptyAndDegenerateShapes) {
  ooc_plan_request r;
  r.m = 0;
  r.n = 5;
  r.k = 5;
  r.budget_bytes = 1 << 20;
  EXPECT_EQ(make_ooc_plan(r).tasks(), 0u);
  r.m = 300;
  r.k = 0;  // C = β·C only: no panels
  const ooc_plan p = make_ooc_plan(r);
  EXPECT_GE(p.tasks(), 1u);
  EXPECT_EQ(p.a_panel_bytes, 0u);
  r.k = 5;
  r.m = -1;
  EXPECT_THROW((void)make_ooc_plan(r), spillway::logic_error);
}

}  // namespace

// The compute estimate against the in-core times measured on the lent H200 (132 SMs, 1980 MHz;
// benchmarks/RESULTS.md, 2026-11-23/24): 32768³ bf16 99.3–107.3 ms, TF32 206–219 ms, exact float
// 1.458–1.530 s, int8 into int32 55.4 ms; 8192³ double (DMMA) 47.0 TFLOP/s, complex<float> 49.0
// (8 flops a complex multiply-add). Each within 6% of the measured figure.
TEST(OocPlan, ComputeEstimateMatchesTheH200) {
  const ooc_device_shape h200{90, 132, 1.98e9};
  const index_t n = 32768, s = 8192;
  auto near = [](double got, double lo, double hi) {
    return got >= lo * 0.94 && got <= hi * 1.06;
  };
  EXPECT_PRED3(near, ooc_compute_estimate(n, n, n, ooc_arith::fp16, ooc_unit::wgmma, h200), 0.0993, 0.1073);
  EXPECT_PRED3(near, ooc_compute_estimate(n, n, n, ooc_arith::tf32, ooc_unit::wgmma, h200), 0.206, 0.219);
  EXPECT_PRED3(near, ooc_compute_estimate(n, n, n, ooc_arith::fp32, ooc_unit::simt, h200), 1.458, 1.530);
  EXPECT_PRED3(near, ooc_compute_estimate(n, n, n, ooc_arith::int8, ooc_unit::wgmma, h200), 0.0554, 0.0554);
  const double s3 = static_cast<double>(s) * s * s;
  EXPECT_PRED3(near, ooc_compute_estimate(s, s, s, ooc_arith::fp64, ooc_unit::mma_sync, h200), 2 * s3 / 47.0e12,
               2 * s3 / 47.0e12);
  EXPECT_PRED3(near, ooc_compute_estimate(s, s, s, ooc_arith::complex_fp32, ooc_unit::simt, h200),
               8 * s3 / 49.0e12, 8 * s3 / 49.0e12);
  // The forced mma_sync path: 0.61–0.68 of cuBLAS there (bf16 409, TF32 212, int8 839 T/s).
  EXPECT_PRED3(near, ooc_compute_estimate(s, s, s, ooc_arith::fp16, ooc_unit::mma_sync, h200), 2 * s3 / 409e12,
               2 * s3 / 409e12);
  EXPECT_PRED3(near, ooc_compute_estimate(s, s, s, ooc_arith::int8, ooc_unit::mma_sync, h200), 2 * s3 / 839e12,
               2 * s3 / 839e12);
  // Scales with the SMs and the clock.
  EXPECT_DOUBLE_EQ(ooc_compute_estimate(n, n, n, ooc_arith::fp16, ooc_unit::wgmma, {90, 66, 1.98e9}),
                   2 * ooc_compute_estimate(n, n, n, ooc_arith::fp16, ooc_unit::wgmma, h200));
}

TEST(OocPlan, ComputeEstimateIsZeroWhereThereIsNoRate) {
  const ooc_device_shape a100{80, 108, 1.41e9};
  EXPECT_EQ(ooc_compute_estimate(4096, 4096, 4096, ooc_arith::fp16, ooc_unit::wgmma, a100), 0.0) << "no wgmma on 8.0";
  EXPECT_EQ(ooc_compute_estimate(4096, 4096, 4096, ooc_arith::fp16, ooc_unit::mma_sync, {75, 40, 1.5e9}), 0.0);
  EXPECT_EQ(ooc_compute_estimate(4096, 4096, 4096, ooc_arith::fp32, ooc_unit::mma_sync, a100), 0.0)
      << "exact FP32 has no tensor-core form";
  EXPECT_EQ(ooc_compute_estimate(0, 4096, 4096, ooc_arith::fp16, ooc_unit::mma_sync, a100), 0.0);
  EXPECT_EQ(ooc_compute_estimate(4096, 4096, 4096, ooc_arith::fp16, ooc_unit::mma_sync, {80, 0, 1.41e9}), 0.0);
  // Where there is one: the A100's mma_sync and its half-width FP32 lanes.
  EXPECT_GT(ooc_compute_estimate(4096, 4096, 4096, ooc_arith::fp16, ooc_unit::mma_sync, a100), 0.0);
  EXPECT_DOUBLE_EQ(ooc_compute_estimate(4096, 4096, 4096, ooc_arith::fp32, ooc_unit::simt, a100),
                   2 * ooc_compute_estimate(4096, 4096, 4096, ooc_arith::fp32, ooc_unit::simt, {90, 108, 1.41e9}));
}

// At the estimate the 32768² jobs of the acceptance rows (8 GiB, C row-major, pinned) plan as they
// do at the in-core times measured with them: the same blocks, order and slots, and the same way
// out (ooc_copy_out::automatic: staged for bf16 and int8, direct for TF32 and exact float) — the
// measured figures are what a caller gets without stating a time.
TEST(OocPlan, TheEstimatePlansTheAcceptanceJobsAsTheMeasuredTime) {
  const ooc_device_shape h200{90, 132, 1.98e9};
  struct job {
    std::size_t in;
    ooc_arith a;
    ooc_unit u;
    double measured;
    bool staged;
  };
  for (const job& j : {job{2, ooc_arith::fp16, ooc_unit::wgmma, 0.1046, true},
                       job{4, ooc_arith::tf32, ooc_unit::wgmma, 0.2135, false},
                       job{4, ooc_arith::fp32, ooc_unit::simt, 1.46, false},
                       job{1, ooc_arith::int8, ooc_unit::wgmma, 0.0554, true}}) {
    ooc_plan_request r = square(32768, j.in, 8 * GiB);
    auto choose = [&](double compute) {
      r.compute_seconds = compute;
      return choose_ooc_plan(r, ooc_copy_out::automatic, true, 0);
    };
    const ooc_plan est = choose(ooc_compute_estimate(32768, 32768, 32768, j.a, j.u, h200));
    const ooc_plan meas = choose(j.measured);
    SCOPED_TRACE(est.describe() + " | " + meas.describe());
    EXPECT_EQ(est.c_staged, j.staged);
    EXPECT_EQ(meas.c_staged, j.staged);
    EXPECT_EQ(est.order, meas.order);
    EXPECT_EQ(est.group, meas.group);
    EXPECT_EQ(est.narrow_rows, meas.narrow_rows);
    EXPECT_EQ(est.slots, meas.slots);
    EXPECT_EQ(est.bm, meas.bm);
    EXPECT_EQ(est.bn, meas.bn);
  }
}

// The square-start length S of the hybrid order is searched on a grid and refined around its best
// (not every S: each candidate simulates the whole order). Against every S by hand, for bf16 jobs
// whose operands stay resident (20 and 40 panels a side) at compute times around their copy times:
// the plan's bound is the lowest of them all.
TEST(OocPlan, SquareStartSearchFindsTheLowestBound) {
  int hybrids = 0;
  for (const index_t k : {16384, 32768}) {
    for (const index_t panels : {20, 40}) {
      for (const double compute : {0.05, 0.2, 0.6}) {
        ooc_plan_request r;
        r.m = r.n = panels * 2048;
        r.k = k;
        r.in_bytes = 2;
        r.out_bytes = 4;
        r.acc_bytes = 4;
        r.c_is_acc = false;
        r.budget_bytes = 40 * GiB;
        r.compute_seconds = compute;
        const ooc_plan p = make_ooc_plan(r);
        SCOPED_TRACE(p.describe());
        if (p.group == 1) continue;  // no hybrid weighed
        hybrids += p.narrow_rows > 0;
        for (index_t S = 0; S < std::min(p.row_panels, p.col_panels); ++S) {
          ooc_plan q = p;
          q.order.clear();
          detail::ooc_hybrid_order(0, q.row_panels, q.col_panels, q.group, S, q.order);
          q.narrow_rows = S;
          std::size_t h = 0, o = 0;
          detail::ooc_simulate(q, 0, q.order.size(), false, 2, 4, h, o);
          const double ramp = std::max(detail::ooc_ramp(q, 0, q.order.size(), false, 2, 4, r.rates, compute),
                                       r.rates.seconds(static_cast<double>(h), static_cast<double>(o)));
          EXPECT_LE(p.ramp_seconds, ramp * (1 + 1e-12)) << "S = " << S << " of " << p.row_panels;
        }
      }
    }
  }
  EXPECT_GE(hybrids, 3) << "too few cases chose a square start to test the search";
}

// How C blocks leave, as gemm_out_of_core chooses it: pageable C and `staged` stage, `direct`
// does not, `automatic` stages where its bound is lower by the margin (the bf16 job's is) but not
// when panels are transposed on load, and never without a compute time; slots 8 staged, 4 direct,
// unless stated.
TEST(OocPlan, ChooseCopyOut) {
  ooc_plan_request r = square(32768, 2, 8 * GiB);
  r.compute_seconds = 0.1046;
  EXPECT_TRUE(choose_ooc_plan(r, ooc_copy_out::direct, false, 0).c_staged) << "pageable C is staged";
  EXPECT_TRUE(choose_ooc_plan(r, ooc_copy_out::staged, true, 0).c_staged);
  const ooc_plan d = choose_ooc_plan(r, ooc_copy_out::direct, true, 0);
  EXPECT_FALSE(d.c_staged);
  EXPECT_EQ(d.slots, 4u);
  const ooc_plan a = choose_ooc_plan(r, ooc_copy_out::automatic, true, 0);
  EXPECT_TRUE(a.c_staged) << a.describe();
  EXPECT_EQ(a.slots, 8u);
  EXPECT_LT(a.ramp_seconds, d.ramp_seconds * (1 - detail::ooc_staged_margin));
  EXPECT_EQ(choose_ooc_plan(r, ooc_copy_out::automatic, true, 6).slots, 6u);
  r.stage_b = true;  // a row-major B transposed on load
  EXPECT_FALSE(choose_ooc_plan(r, ooc_copy_out::automatic, true, 0).c_staged);
  r.stage_b = false;
  r.compute_seconds = 0;
  EXPECT_FALSE(choose_ooc_plan(r, ooc_copy_out::automatic, true, 0).c_staged) << "no bound to weigh";
}

// k ≤ 16 (an outer product, k = 1): every k chunk rounds up to 16 ≥ k, so the chunk search ends
// at k itself (it used to double its divisor until the signed integer overflowed).
TEST(OocPlan, SmallInnerDimensionPlansOneChunk) {
  for (const index_t k : {1, 2, 15, 16, 17}) {
    ooc_plan_request r = square(20000, 4, GiB / 4);
    r.n = 100000;
    r.k = k;
    const ooc_plan p = make_ooc_plan(r);
    SCOPED_TRACE(p.describe());
    EXPECT_EQ(p.k_chunks, 1) << "k " << k;
    EXPECT_LE(p.device_bytes, r.budget_bytes);
    expect_permutation(p);
  }
}
