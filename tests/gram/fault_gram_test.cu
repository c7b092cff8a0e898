// Fault injection and memory pressure in the out-of-core Gram jobs (the pair job of
// spillway/pairwise/pair_job.cuh over run_tasks, fed by the bit producer): a strip's copy or
// kernel failing (when its work is checked, when it is enqueued, and each marked copy and launch
// of one strip in turn, resident and streamed operand, A·Aᵀ and A·Bᵀ), every device allocation in
// turn, the pinned staging of the strip callback, a strip callback throwing on the worker, the
// progress point cancelling or throwing, the top-k and threshold sinks, two GPUs; then a budget
// above the free memory, memory taken and the pool trimmed during a job. After each: the error
// names the strip's task and the device, the strips the report lists are exact against the host
// Gram (integer counts), strips never started are still poison, nothing leaked (pool, free
// memory, pinned bytes, threads), and the next job is right. See docs/reliability.md.
#include <spillway/gram.cuh>

#include "support/fault_harness.hpp"
#include "support/gpu_test.hpp"
#include "support/task_split.hpp"
#include "support/random_bits.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

namespace ft = spillway::test::faults;
namespace fault = spillway::fault;
using spillway::job_report;
using spillway::memory_budget;
using spillway::pipeline_error;
using namespace spillway::gram;

constexpr std::int32_t kPoison = 0x7f7f7f7f;  // no count of these shapes reaches it

bit_matrix random_matrix(std::int64_t rows, std::int64_t cols, double p, std::uint64_t seed) {
  const auto v = spillway::test::random_bit_bytes(rows, cols, p, seed);
  return pack_bits(v.data(), rows, cols);
}

// One dense Gram job with what every case checks: A·Aᵀ into the packed upper triangle or the full
// matrix, or A·Bᵀ into a matrix whose rows are padded (ldc > b.rows; the padding must stay poison).
struct dense_case {
  enum class kind { packed, full, rect };
  kind what;
  std::int64_t n, nb, cols, ldc;
  bit_matrix a, b;
  std::vector<std::int32_t> out, ref;
  gram_options o;
  gram_report rep;

  dense_case(kind k, std::int64_t n_, std::int64_t nb_, std::int64_t cols_, const std::string& salt,
             std::vector<int> devices, std::size_t budget, std::int64_t max_panel_rows)
      : what(k), n(n_), nb(k == kind::rect ? nb_ : n_), cols(cols_), ldc(k == kind::rect ? nb_ + 3 : n_) {
    const auto seed = spillway::test::seed(salt);
    a = random_matrix(n, cols, 0.4, seed);
    if (what == kind::rect) b = random_matrix(nb, cols, 0.55, seed + 1);
    out.resize(out_size());
    ref.assign(out_size(), kPoison);
    if (what == kind::rect) {
      host_gram_dense(a.view(), b.view(), ref.data(), ldc);
    } else {
      host_gram_dense(a.view(), ref.data(), layout());
    }
    o.devices = std::move(devices);
    o.budget = memory_budget(budget);
    o.max_panel_rows = max_panel_rows;
    o.report = &rep;
    repoison();
  }
  [[nodiscard]] triangle_layout layout() const {
    return what == kind::full ? triangle_layout::full : triangle_layout::upper_packed;
  }
  [[nodiscard]] std::size_t out_size() const {
    return what == kind::rect ? static_cast<std::size_t>(n * ldc)
                              : static_cast<std::size_t>(layout_size(layout(), n));
  }
  void repoison() { std::fill(out.begin(), out.end(), kPoison); }
  job_report run() {
    return what == kind::rect ? gram_dense(a.view(), b.view(), out.data(), ldc, o)
                              : gram_dense(a.view(), out.data(), layout(), o);
  }
  // The runs of `out` that task t writes (offset, count): the strips partition the output.
  [[nodiscard]] std::vector<std::pair<std::size_t, std::size_t>> runs(std::size_t t) const {
    const auto [r0, rows] = rep.rows_of_task(t);
    const std::int64_t r1 = r0 + rows;
    std::vector<std::pair<std::size_t, std::size_t>> v;
    auto add = [&v](std::int64_t off, std::int64_t count) {
      if (count > 0) v.emplace_back(static_cast<std::size_t>(off), static_cast<std::size_t>(count));
    };
    switch (what) {
      case kind::packed:
        add(packed_row_offset(n, r0), packed_row_offset(n, r1) - packed_row_offset(n, r0));
        break;
      case kind::full:
        for (std::int64_t i = r0; i < r1; ++i) add(i * n + r0, n - r0);  // its rows from the diagonal block on
        for (std::int64_t i = r1; i < n; ++i) add(i * n + r0, rows);     // the mirrored columns below it
        break;
      case kind::rect:
        for (std::int64_t i = r0; i < r1; ++i) add(i * ldc, nb);
        break;
    }
    return v;
  }
  [[nodiscard]] bool task_correct(std::size_t t) const {
    for (const auto& [off, count] : runs(t))
      for (std::size_t e = off; e < off + count; ++e)
        if (out[e] != ref[e]) return false;
    return true;
  }
  [[nodiscard]] bool task_untouched(std::size_t t) const {
    for (const auto& [off, count] : runs(t))
      for (std::size_t e = off; e < off + count; ++e)
        if (out[e] != kPoison) return false;
    return true;
  }
  [[nodiscard]] bool padding_untouched() const {
    if (what != kind::rect) return true;
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = nb; j < ldc; ++j)
        if (out[static_cast<std::size_t>(i * ldc + j)] != kPoison) return false;
    return true;
  }
  [[nodiscard]] std::size_t tasks() const { return static_cast<std::size_t>(rep.plan.strips); }

  /// The strips the report lists are right; strips after `last_started` (fault::never: unknown)
  /// are still poison; so is the padding of A·Bᵀ.
  void expect_report_matches_output(const job_report& r, std::size_t last_started) const {
    ASSERT_EQ(r.tasks_total, tasks()) << "the report's plan is the job's";
    for (std::size_t t = 0; t < tasks(); ++t) {
      if (r.completed[t]) {
        EXPECT_TRUE(task_correct(t)) << "strip task " << t << " is listed complete but is wrong";
      } else if (last_started != fault::never && t > last_started) {
        EXPECT_TRUE(task_untouched(t)) << "strip task " << t << " was never started but changed";
      }
    }
    EXPECT_TRUE(padding_untouched()) << "A·Bᵀ wrote between its rows";
  }
  void expect_nothing_written() const {
    for (std::size_t e = 0; e < out.size(); ++e) ASSERT_EQ(out[e], kPoison) << "element " << e << " changed";
  }
  /// The same process runs the job again, whole and right.
  void expect_next_job_right() {
    repoison();
    job_report r;
    {
      ft::watchdog w(120, "the next Gram job");
      r = run();
    }
    EXPECT_TRUE(r.complete());
    ASSERT_EQ(r.tasks_total, tasks());
    for (std::size_t t = 0; t < tasks(); ++t) EXPECT_TRUE(task_correct(t)) << "next job, strip task " << t;
    EXPECT_TRUE(padding_untouched());
  }
};

class FaultGramGpu : public ft::one_gpu_test {};

TEST_F(FaultGramGpu, StripKernelErrorAtCompletion) {
  dense_case c(dense_case::kind::packed, 1000, 0, 300, "FaultGramGpu.Completion", {0}, std::size_t{64} << 20, 64);
  c.expect_next_job_right();  // also loads every kernel before anything is counted
  ASSERT_EQ(c.tasks(), 16u);
  ASSERT_TRUE(c.rep.plan.resident);
  const fault::plan p = ft::task_fails(5);
  ft::fail_then_recover(c, {0}, p, "Gram strip error at completion", [&](const pipeline_error& e) {
    ft::expect_named_after_earlier(e, 5, 0);
    EXPECT_EQ(c.rep.job.tasks_completed, e.report().tasks_completed) << "gram_options::report gets the failed job's report";
    c.expect_report_matches_output(e.report(), 5 + c.rep.plan.slots - 1);
  });
}

TEST_F(FaultGramGpu, StripCopyErrorWhenEnqueuedFullLayout) {
  dense_case c(dense_case::kind::full, 777, 0, 500, "FaultGramGpu.Enqueue", {0}, std::size_t{64} << 20, 64);
  c.expect_next_job_right();
  ASSERT_EQ(c.tasks(), 13u);
  const fault::plan p = ft::task_fails_at(4, fault::task_point::enqueue, cudaErrorInvalidValue);
  ft::fail_then_recover(c, {0}, p, "Gram strip error when enqueued", [&](const pipeline_error& e) {
    ft::expect_named(e, 4, 0);
    EXPECT_EQ(e.report().tasks_completed, 4u);
    c.expect_report_matches_output(e.report(), 4);
  });
}

// Each marked copy and launch of strip task T fails in turn (the resident panels it uploads, the
// tile kernels, the device→host copies), until a run passes all of them and completes.
void every_call_of_a_strip(dense_case& c, std::size_t T, const char* what) {
  ft::every_call_of_a_task(
      c, T, what,
      [&](const job_report& r) {
        EXPECT_TRUE(r.complete());
        for (std::size_t t = 0; t < c.tasks(); ++t) EXPECT_TRUE(c.task_correct(t)) << what << ": strip task " << t;
      },
      [&](const pipeline_error& e) { c.expect_report_matches_output(e.report(), T); });
}

TEST_F(FaultGramGpu, EveryCopyAndLaunchOfAStripResident) {
  dense_case c(dense_case::kind::packed, 900, 0, 700, "FaultGramGpu.CallsResident", {0}, std::size_t{64} << 20, 64);
  every_call_of_a_strip(c, 6, "A·Aᵀ packed, resident A");
  EXPECT_TRUE(c.rep.plan.resident);
}

TEST_F(FaultGramGpu, EveryCopyAndLaunchOfAStripStreamed) {
  // 600 rows x 40,000 columns: A is 3 MB; a 1.5 MB budget streams it panel by panel.
  dense_case c(dense_case::kind::full, 600, 0, 40000, "FaultGramGpu.CallsStreamed", {0}, 1500000, 0);
  every_call_of_a_strip(c, 3, "A·Aᵀ full, streamed A");
  EXPECT_FALSE(c.rep.plan.resident);
}

TEST_F(FaultGramGpu, EveryCopyAndLaunchOfAStripABt) {
  dense_case c(dense_case::kind::rect, 700, 450, 1000, "FaultGramGpu.CallsABt", {0}, std::size_t{64} << 20, 64);
  every_call_of_a_strip(c, 2, "A·Bᵀ, resident B");
}

// Every device allocation of the job fails in turn: the job's own set-up (popcounts, the resident
// operand) throws out_of_memory before the scheduler starts; the scheduler's ring fails as
// pipeline_error naming no task. Nothing is written either way.
TEST_F(FaultGramGpu, EveryDeviceAllocationInTurn) {
  dense_case c(dense_case::kind::packed, 1000, 0, 300, "FaultGramGpu.Allocations", {0}, std::size_t{64} << 20, 64);
  c.expect_next_job_right();
  ft::call_counts n;
  ASSERT_NO_FATAL_FAILURE(ft::count_calls([&] { return c.run().complete(); }, n));
  ASSERT_GE(n.device_allocations, 3u) << "popcounts, resident A, the ring";
  ft::each_allocation_in_turn(
      c, n.device_allocations, "allocation", "Gram allocation ", true,
      [](std::size_t k) { return ft::allocation_fails(k); },
      [&](std::size_t k, const pipeline_error& e) {
        EXPECT_EQ(k, n.device_allocations - 1) << "only the ring is allocated by the scheduler: " << e.what();
        std::exception_ptr keep;
        const auto* oom = ft::setup_oom(e, keep);
        ASSERT_NE(oom, nullptr) << e.what();
        EXPECT_EQ(oom->requested_bytes(), c.rep.plan.slots * c.rep.plan.slot_bytes()) << "the ring: " << oom->what();
        EXPECT_EQ(e.report().tasks_completed, 0u);
      },
      [&](std::size_t k, const spillway::out_of_memory& oom) {
        EXPECT_LT(k, n.device_allocations - 1) << oom.what();
        EXPECT_NE(std::string(oom.what()).find("on device 0"), std::string::npos) << oom.what();
      });
}

TEST_F(FaultGramGpu, RingAllocationRetriedAfterTrimCompletes) {
  dense_case c(dense_case::kind::full, 500, 0, 300, "FaultGramGpu.Retry", {0}, std::size_t{64} << 20, 64);
  c.expect_next_job_right();
  ft::call_counts n;
  ASSERT_NO_FATAL_FAILURE(ft::count_calls([&] { return c.run().complete(); }, n));
  c.repoison();
  fault::plan p = ft::allocation_fails(n.device_allocations - 1);  // the ring
  p.allocation_retry_succeeds = true;
  fault::scope armed(p);
  job_report r;
  {
    ft::watchdog w(120, "RingAllocationRetriedAfterTrimCompletes");
    r = c.run();
  }
  EXPECT_EQ(fault::fired(), 1u);
  EXPECT_TRUE(r.complete());
  for (std::size_t t = 0; t < c.tasks(); ++t) EXPECT_TRUE(c.task_correct(t)) << t;
}

// The Gram jobs copy with the CUDA runtime (no staging threads of spillway's); what runs on the
// host during a job is the strip callback of gram_strips, on the device's worker thread. Throwing
// there stops the job like a failed copy: named, the strips delivered before are whole.
TEST_F(FaultGramGpu, StripCallbackThrowsOnTheWorker) {
  const std::int64_t n = 800, cols = 400;
  const bit_matrix a = random_matrix(n, cols, 0.5, spillway::test::seed("FaultGramGpu.Callback"));
  std::vector<std::int32_t> ref(static_cast<std::size_t>(n * n));
  host_gram_dense(a.view(), ref.data(), triangle_layout::full);
  gram_options o;
  o.devices = {0};
  o.max_panel_rows = 64;
  o.budget = memory_budget(std::size_t{64} << 20);
  gram_report rep;
  o.report = &rep;
  std::vector<std::int64_t> delivered;  // first rows of the strips the callback saw, all right
  int calls = -1000;                    // throws at the 4th strip once set to 0
  auto on_strip = [&](const gram_strip<std::int32_t>& st) {
    if (++calls == 4) throw std::runtime_error("strip callback refuses rows " + std::to_string(st.first_row));
    for (std::int64_t i = st.first_row; i < st.first_row + st.rows; ++i)
      for (std::int64_t j = st.first_col; j < st.first_col + st.cols; ++j)
        ASSERT_EQ(st.at(i, j), ref[static_cast<std::size_t>(i * n + j)]) << i << "," << j;
    delivered.push_back(st.first_row);
  };
  ASSERT_TRUE((gram_strips<std::int32_t>(a.view(), on_strip, o).complete()));  // warm
  calls = -1000;
  delivered.clear();
  const auto before = ft::take({0});
  calls = 0;
  try {
    ft::watchdog w(120, "StripCallbackThrowsOnTheWorker");
    (void)gram_strips<std::int32_t>(a.view(), on_strip, o);
    ADD_FAILURE() << "the callback's exception did not stop the job";
  } catch (const pipeline_error& e) {
    ASSERT_NE(e.failed_task(), pipeline_error::no_task) << e.what();
    ft::expect_named(e, e.failed_task(), 0);
    EXPECT_NE(std::string(e.what()).find("strip callback refuses rows"), std::string::npos) << e.what();
    // The strips in flight when the callback threw still finish, and are delivered.
    EXPECT_GE(e.report().tasks_completed, 3u);
    std::vector<std::int64_t> listed;
    for (std::size_t t : e.report().completed_tasks()) listed.push_back(rep.rows_of_task(t).first);
    std::sort(listed.begin(), listed.end());
    std::sort(delivered.begin(), delivered.end());
    EXPECT_EQ(listed, delivered) << "the report lists exactly the strips delivered";
  }
  ft::expect_no_leaks(before, ft::take({0}), "Gram strip callback throwing");
  calls = -1000;
  EXPECT_TRUE((gram_strips<std::int32_t>(a.view(), on_strip, o).complete()));
}

// The strip callback's pinned staging (one strip per slot) cannot be pinned: the job fails before
// any strip runs, naming no task; nothing is delivered.
TEST_F(FaultGramGpu, StripStagingCannotBePinned) {
  const bit_matrix a = random_matrix(500, 300, 0.5, spillway::test::seed("FaultGramGpu.Pinned"));
  const bit_matrix b = random_matrix(300, 300, 0.5, spillway::test::seed("FaultGramGpu.PinnedB"));
  gram_options o;
  o.devices = {0};
  o.max_panel_rows = 64;
  o.budget = memory_budget(std::size_t{64} << 20);
  std::atomic<int> calls{0};
  auto on_strip = [&](const gram_strip<std::int32_t>&) { ++calls; };
  ASSERT_TRUE((gram_strips<std::int32_t>(a.view(), b.view(), on_strip, o).complete()));
  calls = 0;
  const auto before = ft::take({0});  // empties the staging cache: the job pins its blocks anew
  const fault::plan p = ft::pinned_allocation_fails(1);  // the second slot's staging
  ft::run_failing([&] { return gram_strips<std::int32_t>(a.view(), b.view(), on_strip, o); }, p,
                  [&](const pipeline_error& e) {
                    ft::expect_named(e, pipeline_error::no_task, 0);
                    std::exception_ptr keep;
                    EXPECT_NE(ft::cause_as<spillway::out_of_memory>(e, keep), nullptr) << e.what();
                    EXPECT_EQ(e.report().tasks_completed, 0u);
                  });
  EXPECT_EQ(calls.load(), 0);
  ft::expect_no_leaks(before, ft::take({0}), "Gram strip staging not pinned");
  EXPECT_TRUE((gram_strips<std::int32_t>(a.view(), b.view(), on_strip, o).complete()));
}

TEST_F(FaultGramGpu, ProgressPointCancels) {
  dense_case c(dense_case::kind::full, 1000, 0, 300, "FaultGramGpu.Cancel", {0}, std::size_t{64} << 20, 32);
  c.expect_next_job_right();
  const auto before = ft::poisoned_start(c, {0});
  fault::plan p;
  p.cancel_after = 3;
  job_report r;
  {
    ft::watchdog w(120, "ProgressPointCancels");
    fault::scope armed(p);
    r = c.run();
    EXPECT_EQ(fault::fired(), 1u);
  }
  EXPECT_TRUE(r.cancelled);
  EXPECT_GE(r.tasks_completed, 3u);
  EXPECT_LT(r.tasks_completed, c.tasks());
  spillway::test::expect_complete_or_untouched(c, r);
  ft::expect_no_leaks(before, ft::take({0}), "Gram cancel");
  c.expect_next_job_right();
}

TEST_F(FaultGramGpu, ProgressPointThrows) {
  dense_case c(dense_case::kind::rect, 1000, 333, 300, "FaultGramGpu.ProgressThrows", {0}, std::size_t{64} << 20, 32);
  c.expect_next_job_right();
  const fault::plan p = ft::progress_throws_after(2);
  ft::fail_then_recover(c, {0}, p, "Gram progress throwing", [&](const pipeline_error& e) {
    ft::expect_named(e, pipeline_error::no_task, -1);
    std::exception_ptr keep;
    EXPECT_NE(ft::cause_as<fault::injected_fault>(e, keep), nullptr) << e.what();
    c.expect_report_matches_output(e.report(), fault::never);
  });
}

// The sinks that return a result (top-k lists, threshold COO) have nothing partial to show: a
// failed strip throws, named, and the next job's result equals the host's.
TEST_F(FaultGramGpu, TopkAndThresholdSinks) {
  const std::int64_t n = 700, cols = 500;
  const bit_matrix a = random_matrix(n, cols, 0.3, spillway::test::seed("FaultGramGpu.Sinks"));
  gram_options o;
  o.devices = {0};
  o.max_panel_rows = 64;
  o.budget = memory_budget(std::size_t{64} << 20);
  o.epilogue = metric::jaccard;
  topk_options k;
  k.k = 9;
  threshold_options th;
  th.threshold = 0.2;
  const auto want_k = host_gram_topk<float>(a.view(), k, metric::jaccard);
  const auto want_t = host_gram_threshold<float>(a.view(), th, metric::jaccard);
  auto check_topk = [&] {
    const auto got = gram_topk<float>(a.view(), k, o);
    EXPECT_EQ(got.indices, want_k.indices);
    EXPECT_EQ(got.values, want_k.values);
  };
  auto check_threshold = [&] {
    const auto got = gram_threshold<float>(a.view(), th, o);
    EXPECT_EQ(got.row, want_t.row);
    EXPECT_EQ(got.col, want_t.col);
    EXPECT_EQ(got.value, want_t.value);
  };
  check_topk();
  check_threshold();
  {
    const auto before = ft::take({0});
    const fault::plan p = ft::task_fails(2);
    ft::run_failing([&] { return gram_topk<float>(a.view(), k, o); }, p,
                    [&](const pipeline_error& e) { ft::expect_named(e, 2, 0); });
    ft::expect_no_leaks(before, ft::take({0}), "Gram top-k strip error");
    check_topk();
  }
  // Strip task 4 clears its count, uploads its panel of A and its popcounts, runs the tile kernel
  // that decides the threshold in its epilogue and copies the count back (calls 0-4): a fault in
  // any of them fails the task.
  for (std::size_t call : {0, 1, 2, 3, 4}) {
    const auto before = ft::take({0});
    const fault::plan p = ft::call_fails(call, 4);
    ft::run_failing([&] { return gram_threshold<float>(a.view(), th, o); }, p,
                    [&](const pipeline_error& e) { ft::expect_named(e, 4, 0); });
    ft::expect_no_leaks(before, ft::take({0}), "Gram threshold call " + std::to_string(call));
    check_threshold();
  }
}

// ---- two GPUs -----------------------------------------------------------------------------------

class FaultGramTwoGpu : public ft::two_gpu_test {};

TEST_F(FaultGramTwoGpu, StripErrorOnTheSecondDevice) {
  dense_case c(dense_case::kind::packed, 2000, 0, 600, "FaultGramTwoGpu.Completion", {0, 1}, std::size_t{64} << 20, 64);
  c.expect_next_job_right();
  ft::any_task_fails_then_recover(c, ft::task_fails(fault::any_task, 1), 1, "Gram strip error on device 1");
}

TEST_F(FaultGramTwoGpu, CopyOrLaunchFailsOnTheFirstDevice) {
  dense_case c(dense_case::kind::full, 1500, 0, 600, "FaultGramTwoGpu.Call", {0, 1}, std::size_t{64} << 20, 64);
  c.expect_next_job_right();
  ft::any_task_fails_then_recover(c, ft::call_fails(7, fault::any_task, 0), 0, "Gram copy error on device 0");
}

TEST_F(FaultGramTwoGpu, SetupAllocationFailsOnTheSecondDevice) {
  dense_case c(dense_case::kind::packed, 1200, 0, 600, "FaultGramTwoGpu.Alloc", {0, 1}, std::size_t{64} << 20, 64);
  c.expect_next_job_right();
  const fault::plan p = ft::allocation_fails(0, 1);  // device 1's popcounts: device 0 is set up by then
  ft::setup_oom_then_recover(c, {0, 1}, p, 1, "Gram set-up allocation on device 1");
}

// ---- memory pressure ------------------------------------------------------------------------------

class FaultGramPressureGpu : public ft::one_gpu_test {};

// 8192 rows into the packed triangle with 96 MiB left free on the card: a 4 GiB budget plans
// 2048-row strips (a 192 MiB ring) and fails at the start with out_of_memory naming the ring and
// the free bytes, nothing written; the default budget (80% of what is free) plans smaller strips
// and completes.
TEST_F(FaultGramPressureGpu, BudgetAboveFreeMemoryFailsTheDefaultBudgetAdapts) {
  dense_case c(dense_case::kind::packed, 8192, 0, 256, "FaultGramPressureGpu.Budget", {0}, std::size_t{4} << 30, 0);
  c.expect_next_job_right();  // with the whole card free
  const auto before = ft::poisoned_start(c, {0});
  {
    ft::card_hog h;
    h.take_all_but(std::size_t{96} << 20);
    try {
      ft::watchdog w(120, "BudgetAboveFreeMemory (explicit)");
      (void)c.run();
      ADD_FAILURE() << "expected pipeline_error";
    } catch (const pipeline_error& e) {
      std::exception_ptr keep;
      const auto* oom = ft::setup_oom(e, keep);
      ASSERT_NE(oom, nullptr) << e.what();
      ft::expect_oom_named(*oom);
      EXPECT_EQ(oom->requested_bytes(), c.rep.plan.slots * c.rep.plan.slot_bytes()) << oom->what();
      EXPECT_EQ(c.rep.plan.panel_rows, 2048);
      EXPECT_LE(oom->available_bytes(), (std::size_t{96} << 20) + ft::free_bytes_slack) << oom->what();
    }
    c.expect_nothing_written();
    c.o.budget.reset();  // 80% of the free memory now
    job_report r;
    {
      ft::watchdog w(120, "BudgetAboveFreeMemory (default budget)");
      r = c.run();
    }
    EXPECT_TRUE(r.complete());
    EXPECT_LT(c.rep.plan.panel_rows, 2048);
    EXPECT_LE(c.rep.plan.total_bytes(), std::size_t{96} << 20);
    for (std::size_t t = 0; t < c.tasks(); ++t) EXPECT_TRUE(c.task_correct(t)) << t;
    c.o.budget = memory_budget(std::size_t{4} << 30);
  }
  ft::expect_no_leaks(before, ft::take({0}), "Gram under a hog");
}

// Everything a Gram job holds on the device is allocated when it starts, so memory taken during
// the job (all but 64 MiB of the card, after spillway's pool was trimmed) cannot fail it, and
// neither can the pool trimmed at every progress call: it completes, right.
TEST_F(FaultGramPressureGpu, MemoryTakenAndPoolTrimmedDuringAJob) {
  dense_case c(dense_case::kind::full, 3000, 0, 800, "FaultGramPressureGpu.Hog", {0}, std::size_t{256} << 20, 64);
  c.expect_next_job_right();
  const auto before = ft::poisoned_start(c, {0});
  {
    ft::card_hog h;
    bool taken = false;
    int trims = 0;
    c.o.progress = [&](const spillway::progress_info& pi) {
      spillway::trim_device_pool(0);
      ++trims;
      if (!taken && pi.tasks_done >= 2) {
        taken = true;
        h.take_all_but(std::size_t{64} << 20);
      }
      return true;
    };
    job_report r;
    {
      ft::watchdog w(120, "MemoryTakenAndPoolTrimmedDuringAJob");
      r = c.run();
    }
    c.o.progress = nullptr;
    EXPECT_TRUE(taken);
    EXPECT_GE(trims, 3);
    EXPECT_GT(h.bytes(), 0u);
    EXPECT_TRUE(r.complete());
    for (std::size_t t = 0; t < c.tasks(); ++t) EXPECT_TRUE(c.task_correct(t)) << t;
  }
  ft::expect_no_leaks(before, ft::take({0}), "Gram with memory taken mid-job");
  c.expect_next_job_right();
}

}  // namespace
