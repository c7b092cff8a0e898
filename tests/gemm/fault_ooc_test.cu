// Fault injection and memory pressure in the out-of-core GEMM (gemm_out_of_core over run_tasks):
// a block's copy or kernel failing (when its work is checked, when it is enqueued, and each marked
// copy and launch of one block in turn — panel loads on the loader stream, the C block in and
// out, the in-core GEMMs of its k chunks, the combine kernel), every device and pinned allocation
// in turn (the panel caches and their staging, the ring with the blocks' split-K workspaces), a
// host staging copy throwing on a pool thread, the progress point cancelling or throwing, two GPUs;
// then a budget above the free memory, memory taken and the pool trimmed during a job. After each:
// the error names the block's task and the device, the blocks the report lists are exact against
// host_gemm (integer-valued operands: every sum is exact in float), no element outside the blocks
// that started changed (C poisoned), nothing leaked (pool, free memory, pinned bytes, threads), and
// the next job is right. See docs/reliability.md.
#include <spillway/core/host_registration.hpp>
#include <spillway/gemm.cuh>
#include <spillway/pipeline/plan.hpp>

#include "support/fault_harness.hpp"
#include "support/gpu_test.hpp"

#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace {

namespace ft = spillway::test::faults;
namespace fault = spillway::fault;
using spillway::index_t;
using spillway::memory_budget;
using spillway::pipeline_error;
using namespace spillway::gemm;

template <class T>
bool same_bits(const T& x, const T& y) {
  return std::memcmp(&x, &y, sizeof(T)) == 0;
}

// One out-of-core GEMM C = α·A·B + β·C with A row-major (m x k), B column-major (k x n) and C
// row-major with padded rows (ldc = n + 5; the padding must never change), in host memory that is
// pageable (staged by spillway's host threads) or page-locked (copied by DMA). Operands are small
// integers, so the device and host_gemm agree exactly. β = 0 runs over NaN-poisoned C.
template <class TC>
struct gemm_case {
  index_t m, n, k, ldc;
  float alpha, beta;
  std::vector<float> a, b;
  std::vector<TC> c, c0, ref;
  gemm_options g;
  ooc_options o;
  ooc_report rep;  // also filled when the job fails (o.report_on_error)
  std::unique_ptr<spillway::host_registration> ra, rb, rc;

  gemm_case(index_t m_, index_t n_, index_t k_, const std::string& salt, std::vector<int> devices, index_t max_block,
            std::size_t budget, bool beta_zero, bool page_locked, int magnitude = 8)
      : m(m_), n(n_), k(k_), ldc(n_ + 5), alpha(beta_zero ? 1.0f : 2.0f), beta(beta_zero ? 0.0f : -3.0f) {
    std::mt19937_64 rng(spillway::test::seed(salt));
    std::uniform_int_distribution<int> v(-magnitude, magnitude), w(-100, 100);
    a.resize(static_cast<std::size_t>(m * k));
    b.resize(static_cast<std::size_t>(k * n));
    for (auto& x : a) x = static_cast<float>(v(rng));
    for (auto& x : b) x = static_cast<float>(v(rng));
    c0.resize(static_cast<std::size_t>(m * ldc));
    for (auto& x : c0) x = beta_zero ? static_cast<TC>(std::nanf("")) : static_cast<TC>(static_cast<float>(w(rng)));
    ref = c0;
    host_gemm(alpha, av(), bv(), beta, row_major(ref.data(), m, n, ldc));
    c = c0;
    if (page_locked) {
      ra = std::make_unique<spillway::host_registration>(a.data(), a.size() * sizeof(float));
      rb = std::make_unique<spillway::host_registration>(b.data(), b.size() * sizeof(float));
      rc = std::make_unique<spillway::host_registration>(c.data(), c.size() * sizeof(TC));
    }
    o.devices = std::move(devices);
    o.max_block = max_block;
    o.lock = spillway::page_lock::never;  // pageable cases test the staged paths
    // The blocks these cases count on: single-panel, and page-locked C out by DMA straight into C
    // (what the automatic choices take at the device's compute estimate is the plan's business).
    o.c_min_line_bytes = 1;
    if (page_locked) o.c_out = spillway::gemm::ooc_copy_out::direct;
    o.budget = memory_budget(budget);
    o.report_on_error = &rep;
  }
  [[nodiscard]] matrix_view<const float> av() const { return row_major<const float>(a.data(), m, k); }
  [[nodiscard]] matrix_view<const float> bv() const { return col_major<const float>(b.data(), k, n); }
  void repoison() { std::memcpy(static_cast<void*>(c.data()), c0.data(), c.size() * sizeof(TC)); }
  ooc_report run() {
    rep = ooc_report{};
    rep = gemm_out_of_core(alpha, av(), bv(), beta, row_major(c.data(), m, n, ldc), g, o);
    return rep;
  }
  [[nodiscard]] std::size_t tasks() const { return rep.plan.tasks(); }
  [[nodiscard]] bool block_correct(const c_block& blk) const {
    for (index_t i = blk.row0; i < blk.row0 + blk.rows; ++i)
      for (index_t j = blk.col0; j < blk.col0 + blk.cols; ++j) {
        const auto e = static_cast<std::size_t>(i * ldc + j);
        if (!same_bits(c[e], ref[e])) return false;
      }
    return true;
  }
  /// The blocks the report lists are right; nothing outside the blocks that started (tasks with a
  /// block in block_of_task) changed, the padding of C included.
  void expect_report_matches_output(const ooc_report& r) const {
    ASSERT_EQ(r.job.tasks_total, r.plan.tasks());
    ASSERT_EQ(r.block_of_task.size(), r.plan.tasks());
    std::vector<char> started(c.size(), 0);
    for (std::size_t t = 0; t < r.plan.tasks(); ++t) {
      const c_block& blk = r.block_of_task[t];
      if (r.job.completed[t]) {
        EXPECT_GT(blk.rows * blk.cols, 0) << "task " << t << " is listed complete without a block";
        EXPECT_TRUE(block_correct(blk)) << "task " << t << " (block at " << blk.row0 << "," << blk.col0
                                        << ") is listed complete but is wrong";
      }
      for (index_t i = blk.row0; i < blk.row0 + blk.rows; ++i)
        for (index_t j = blk.col0; j < blk.col0 + blk.cols; ++j) started[static_cast<std::size_t>(i * ldc + j)] = 1;
    }
    std::size_t changed = 0, first = 0;
    for (std::size_t e = 0; e < c.size(); ++e)
      if (!started[e] && !same_bits(c[e], c0[e]) && changed++ == 0) first = e;
    EXPECT_EQ(changed, 0u) << "elements outside every started block changed, the first at row " << first / ldc
                           << " column " << first % ldc;
  }
  /// The form the shared drivers call: this case checks the ooc_report its job filled.
  void expect_report_matches_output(const spillway::job_report&, std::size_t) const {
    expect_report_matches_output(rep);
  }
  void expect_nothing_written() const {
    for (std::size_t e = 0; e < c.size(); ++e) ASSERT_TRUE(same_bits(c[e], c0[e])) << "element " << e << " changed";
  }
  /// The same process runs the job again, whole and right.
  void expect_next_job_right() {
    repoison();
    {
      ft::watchdog w(120, "the next out-of-core GEMM");
      (void)run();
    }
    EXPECT_TRUE(rep.job.complete());
    for (std::size_t e = 0; e < c.size(); ++e) ASSERT_TRUE(same_bits(c[e], ref[e])) << "next job, element " << e;
  }
};

// 2304 x 2304 x 256 in 768 x 768 blocks: 9 blocks, each C block 2.25 MiB (pageable C goes
// through the host worker pool in two parts).
gemm_case<float> nine_blocks(const std::string& salt, bool beta_zero, bool page_locked, std::vector<int> devices = {0}) {
  return gemm_case<float>(2304, 2304, 256, salt, std::move(devices), 768, std::size_t{256} << 20, beta_zero,
                          page_locked);
}

class FaultGemmOocGpu : public ft::one_gpu_test {};

TEST_F(FaultGemmOocGpu, BlockKernelErrorAtCompletion) {
  auto c = nine_blocks("FaultGemmOocGpu.Completion", true, false);
  c.expect_next_job_right();  // also loads every kernel before anything is counted
  ASSERT_EQ(c.rep.plan.tasks(), 9u);
  const fault::plan p = ft::task_fails(4);
  ft::fail_then_recover(c, {0}, p, "GEMM block error at completion", [&](const pipeline_error& e) {
    ft::expect_named_after_earlier(e, 4, 0);
    EXPECT_EQ(c.rep.job.tasks_completed, e.report().tasks_completed) << "report_on_error";
    c.expect_report_matches_output(c.rep);
  });
}

TEST_F(FaultGemmOocGpu, BlockCopyErrorWhenEnqueuedPageLocked) {
  auto c = nine_blocks("FaultGemmOocGpu.Enqueue", false, true);
  c.expect_next_job_right();
  const fault::plan p = ft::task_fails_at(3, fault::task_point::enqueue, cudaErrorInvalidValue);
  ft::fail_then_recover(c, {0}, p, "GEMM block error when enqueued", [&](const pipeline_error& e) {
    ft::expect_named(e, 3, 0);
    EXPECT_EQ(e.report().tasks_completed, 3u);
    c.expect_report_matches_output(c.rep);
  });
}

// Each marked copy and launch of block task T fails in turn (its panel loads — its own and those it
// prefetches for later blocks —, the C block in, the GEMM of each k chunk, the combine kernel, the
// C block out), until a run passes all of them and completes.
template <class TC>
void every_call_of_a_block(gemm_case<TC>& c, std::size_t T, const char* what) {
  ft::every_call_of_a_task(
      c, T, what,
      [&](const ooc_report& r) {
        EXPECT_TRUE(r.job.complete());
        for (std::size_t e = 0; e < c.c.size(); ++e) ASSERT_TRUE(same_bits(c.c[e], c.ref[e])) << what << ": " << e;
      },
      [&](const pipeline_error&) { c.expect_report_matches_output(c.rep); });
}

TEST_F(FaultGemmOocGpu, EveryCopyAndLaunchOfABlockPageable) {
  auto c = nine_blocks("FaultGemmOocGpu.CallsPageable", false, false);
  every_call_of_a_block(c, 4, "pageable, beta != 0");
}

TEST_F(FaultGemmOocGpu, EveryCopyAndLaunchOfABlockPageLocked) {
  auto c = nine_blocks("FaultGemmOocGpu.CallsPinned", true, true);
  every_call_of_a_block(c, 5, "page-locked, beta = 0");
}

// k in two chunks of 1024 accumulating in a float workspace, combined into half C: two GEMMs and
// the combine kernel per block. Operands in {-1, 0, 1}: every sum (|s| <= 2048) is exact in half.
TEST_F(FaultGemmOocGpu, EveryCopyAndLaunchOfABlockKChunksHalfC) {
  gemm_case<__half> c(1024, 896, 2048, "FaultGemmOocGpu.CallsKChunks", {0}, 0, std::size_t{3} << 20, true, false, 1);
  every_call_of_a_block(c, 5, "k chunks, half C");
  EXPECT_EQ(c.rep.plan.k_chunks, 2);
}

// Every device allocation in turn, with a forced split-K whose workspace each block's GEMM gets
// from its task slot (allocated with the ring, counted in the budget): the panel caches fail before
// the scheduler starts its workers (out_of_memory), the ring as pipeline_error naming no task, and
// nothing is allocated while the blocks run.
TEST_F(FaultGemmOocGpu, EveryDeviceAllocationInTurn) {
  auto c = nine_blocks("FaultGemmOocGpu.Allocations", false, false);
  c.g.split_k = 2;
  c.expect_next_job_right();
  ft::call_counts n;
  ASSERT_NO_FATAL_FAILURE(ft::count_calls([&] { return c.run().job.complete(); }, n));
  const std::size_t allocations = n.device_allocations;
  ASSERT_EQ(allocations, 2u) << "the caches, the ring (no workspace per block)";
  const ooc_plan plan = c.rep.plan;
  ASSERT_GT(plan.split_k_bytes, 0u);
  const std::size_t ring = plan.slots * spillway::detail::slot_device_bytes(plan.slot_buffer_bytes());
  ft::each_allocation_in_turn(
      c, allocations, "allocation", "GEMM allocation ", false,
      [](std::size_t k) { return ft::allocation_fails(k); },
      [&](std::size_t k, const pipeline_error& e) {
        std::exception_ptr keep;
        const auto* oom = ft::cause_as<spillway::out_of_memory>(e, keep);
        ASSERT_NE(oom, nullptr) << e.what();
        EXPECT_EQ(k, 1u) << e.what();
        ft::expect_named(e, pipeline_error::no_task, 0);
        EXPECT_EQ(e.report().tasks_completed, 0u);
        EXPECT_EQ(oom->requested_bytes(), ring) << oom->what();
        c.expect_report_matches_output(c.rep);
      },
      [&](std::size_t k, const spillway::out_of_memory& oom) {
        EXPECT_EQ(k, 0u) << oom.what();
        EXPECT_NE(std::string(oom.what()).find("on device 0"), std::string::npos) << oom.what();
        c.expect_nothing_written();
      });
}

TEST_F(FaultGemmOocGpu, RingAllocationRetriedAfterTrimCompletes) {
  auto c = nine_blocks("FaultGemmOocGpu.Retry", true, false);
  c.g.split_k = 2;
  c.expect_next_job_right();
  c.repoison();
  fault::plan p;
  p.device_allocation = 1;  // the ring, the slots' split-K workspaces in it
  p.allocation_retry_succeeds = true;
  fault::scope armed(p);
  {
    ft::watchdog w(120, "RingAllocationRetriedAfterTrimCompletes");
    (void)c.run();
  }
  EXPECT_EQ(fault::fired(), 1u);
  EXPECT_TRUE(c.rep.job.complete());
  for (std::size_t e = 0; e < c.c.size(); ++e) ASSERT_TRUE(same_bits(c.c[e], c.ref[e])) << e;
}

// Every page-locked allocation in turn (pageable A, B and C): the double-buffered panel staging
// (set up before the scheduler: out_of_memory), then each slot's C staging (pipeline_error naming
// no task). Nothing is written either way.
TEST_F(FaultGemmOocGpu, EveryPinnedAllocationInTurn) {
  auto c = nine_blocks("FaultGemmOocGpu.Pinned", false, false);
  c.expect_next_job_right();
  (void)ft::take({0});  // empties the staging cache: the job pins every block anew
  ft::call_counts n;
  ASSERT_NO_FATAL_FAILURE(ft::count_calls([&] { return c.run().job.complete(); }, n));
  const std::size_t pins = n.pinned_allocations;
  ASSERT_EQ(pins, 4u + c.rep.plan.slots) << "two staging blocks per operand, one C block per slot";
  ft::each_allocation_in_turn(
      c, pins, "pinned allocation", "GEMM pinned allocation ", true, ft::pinned_allocation_fails,
      [&](std::size_t k, const pipeline_error& e) {
        EXPECT_GE(k, 4u) << e.what();
        ft::expect_named(e, pipeline_error::no_task, 0);
        std::exception_ptr keep;
        EXPECT_NE(ft::cause_as<spillway::out_of_memory>(e, keep), nullptr) << e.what();
      },
      [&](std::size_t k, const spillway::out_of_memory& oom) { EXPECT_LT(k, 4u) << oom.what(); });
}

// A staging copy of pageable C (a block in while it is enqueued, a block out when it completes)
// throws from a pool thread: every part of the copy finishes, the exception reaches the block's
// task, the job names it.
TEST_F(FaultGemmOocGpu, StagingCopyThrowsOnAPoolThread) {
  auto c = nine_blocks("FaultGemmOocGpu.Staging", false, false);
  c.expect_next_job_right();
  ft::call_counts n;
  ASSERT_NO_FATAL_FAILURE(ft::count_calls([&] { return c.run().job.complete(); }, n));
  const std::size_t calls = n.staging_calls;
  ASSERT_EQ(calls, 2 * c.rep.plan.tasks()) << "each 2.25 MiB block in and out through the pool";
  for (std::size_t k : {std::size_t{0}, std::size_t{5}, calls - 1}) {
    SCOPED_TRACE("staging call " + std::to_string(k));
    const auto before = ft::poisoned_start(c, {0});
    const fault::plan p = ft::staging_call_throws(k);
    ft::run_failing([&] { return c.run(); }, p, [&](const pipeline_error& e) {
      ASSERT_NE(e.failed_task(), pipeline_error::no_task) << e.what();
      ft::expect_named(e, e.failed_task(), 0);
      std::exception_ptr keep;
      EXPECT_NE(ft::cause_as<fault::injected_fault>(e, keep), nullptr) << e.what();
      c.expect_report_matches_output(c.rep);
    });
    ft::expect_no_leaks(before, ft::take({0}), "GEMM staging call " + std::to_string(k));
  }
  c.expect_next_job_right();
}

TEST_F(FaultGemmOocGpu, ProgressPointCancels) {
  gemm_case<float> c(1536, 1280, 256, "FaultGemmOocGpu.Cancel", {0}, 256, std::size_t{64} << 20, true, false);
  c.expect_next_job_right();
  ASSERT_EQ(c.rep.plan.tasks(), 30u);
  const auto before = ft::poisoned_start(c, {0});
  fault::plan p;
  p.cancel_after = 3;
  {
    ft::watchdog w(120, "ProgressPointCancels");
    fault::scope armed(p);
    (void)c.run();
    EXPECT_EQ(fault::fired(), 1u);
  }
  EXPECT_TRUE(c.rep.job.cancelled);
  EXPECT_GE(c.rep.job.tasks_completed, 3u);
  EXPECT_LT(c.rep.job.tasks_completed, c.rep.plan.tasks());
  // A cancelled job drains what it started: every block that started is complete, the rest poison.
  for (std::size_t t = 0; t < c.rep.plan.tasks(); ++t) {
    const bool started = c.rep.block_of_task[t].rows > 0;
    EXPECT_EQ(started, static_cast<bool>(c.rep.job.completed[t])) << t;
  }
  c.expect_report_matches_output(c.rep);
  ft::expect_no_leaks(before, ft::take({0}), "GEMM cancel");
  c.expect_next_job_right();
}

TEST_F(FaultGemmOocGpu, ProgressPointThrows) {
  gemm_case<float> c(1536, 1280, 256, "FaultGemmOocGpu.ProgressThrows", {0}, 256, std::size_t{64} << 20, false,
                     true);
  c.expect_next_job_right();
  const fault::plan p = ft::progress_throws_after(2);
  ft::fail_then_recover(c, {0}, p, "GEMM progress throwing", [&](const pipeline_error& e) {
    ft::expect_named(e, pipeline_error::no_task, -1);
    std::exception_ptr keep;
    EXPECT_NE(ft::cause_as<fault::injected_fault>(e, keep), nullptr) << e.what();
    c.expect_report_matches_output(c.rep);
  });
}

// ---- two GPUs -----------------------------------------------------------------------------------

class FaultGemmOocTwoGpu : public ft::two_gpu_test {};

TEST_F(FaultGemmOocTwoGpu, BlockErrorOnTheSecondDevice) {
  auto c = nine_blocks("FaultGemmOocTwoGpu.Completion", false, false, {0, 1});
  c.expect_next_job_right();
  ft::any_task_fails_then_recover(c, ft::task_fails(fault::any_task, 1), 1, "GEMM block error on device 1");
}

TEST_F(FaultGemmOocTwoGpu, CopyOrLaunchFailsOnTheFirstDevice) {
  auto c = nine_blocks("FaultGemmOocTwoGpu.Call", true, true, {0, 1});
  c.expect_next_job_right();
  ft::any_task_fails_then_recover(c, ft::call_fails(6, fault::any_task, 0), 0, "GEMM copy error on device 0");
}

TEST_F(FaultGemmOocTwoGpu, CacheAllocationFailsOnTheSecondDevice) {
  auto c = nine_blocks("FaultGemmOocTwoGpu.Alloc", false, false, {0, 1});
  c.expect_next_job_right();
  // Device 1's panel caches fail: device 0's are allocated by then.
  const fault::plan p = ft::allocation_fails(0, 1);
  ft::setup_oom_then_recover(c, {0, 1}, p, 1, "GEMM cache allocation on device 1");
}

// ---- memory pressure ------------------------------------------------------------------------------

class FaultGemmOocPressureGpu : public ft::one_gpu_test {};

// 3072 x 3072 x 512 with 48 MiB left free on the card: a 4 GiB budget plans 2048-wide blocks
// (16 MiB panel caches, a 64 MiB ring) and fails at the start with out_of_memory naming the request
// and the free bytes (thrown as it is when the caches fail, nested in pipeline_error naming no task
// when the ring does), nothing written; the default budget (80% of what is free) plans smaller
// blocks and completes.
TEST_F(FaultGemmOocPressureGpu, BudgetAboveFreeMemoryFailsTheDefaultBudgetAdapts) {
  gemm_case<float> c(3072, 3072, 512, "FaultGemmOocPressureGpu.Budget", {0}, 0, std::size_t{4} << 30, true, false);
  c.expect_next_job_right();
  const auto before = ft::poisoned_start(c, {0});
  {
    ft::card_hog h;
    h.take_all_but(std::size_t{48} << 20);
    {
      ft::watchdog w(120, "BudgetAboveFreeMemory (explicit)");
      try {
        (void)c.run();
        ADD_FAILURE() << "expected out_of_memory";
      } catch (const pipeline_error& e) {
        std::printf("[ outcome  ] the ring failed: %s\n", e.what());
        std::exception_ptr keep;
        const auto* oom = ft::setup_oom(e, keep);
        ASSERT_NE(oom, nullptr) << e.what();
        ft::expect_oom_named(*oom);
        EXPECT_EQ(e.report().tasks_completed, 0u);
      } catch (const spillway::out_of_memory& oom) {
        std::printf("[ outcome  ] the panel caches failed: %s\n", oom.what());
        ft::expect_oom_named(oom);
      }
    }
    c.expect_nothing_written();
    c.o.budget.reset();  // 80% of the free memory now
    {
      ft::watchdog w(120, "BudgetAboveFreeMemory (default budget)");
      (void)c.run();
    }
    EXPECT_TRUE(c.rep.job.complete());
    EXPECT_LE(c.rep.plan.device_bytes, std::size_t{48} << 20);
    for (std::size_t e = 0; e < c.c.size(); ++e) ASSERT_TRUE(same_bits(c.c[e], c.ref[e])) << e;
    c.o.budget = memory_budget(std::size_t{4} << 30);
  }
  ft::expect_no_leaks(before, ft::take({0}), "GEMM under a hog");
}

// Panel caches and the ring are allocated when the job starts, the forced split-K's 18 MiB
// workspaces in the ring's slots; nothing while it runs. The pool trimmed at every progress call:
// the job completes, right.
TEST_F(FaultGemmOocPressureGpu, PoolTrimmedDuringAJobAdapts) {
  gemm_case<float> c(6144, 3072, 256, "FaultGemmOocPressureGpu.Trim", {0}, 1536, std::size_t{1} << 30, false, false);
  c.g.split_k = 2;
  c.expect_next_job_right();
  ASSERT_GE(c.rep.plan.tasks(), 4u);
  c.repoison();
  int trims = 0;
  c.o.progress = [&](const spillway::progress_info&) {
    spillway::trim_device_pool(0);
    ++trims;
    return true;
  };
  {
    ft::watchdog w(120, "PoolTrimmedDuringAJobAdapts");
    (void)c.run();
  }
  c.o.progress = nullptr;
  EXPECT_GE(trims, 2);
  EXPECT_TRUE(c.rep.job.complete());
  for (std::size_t e = 0; e < c.c.size(); ++e) ASSERT_TRUE(same_bits(c.c[e], c.ref[e])) << e;
}

// The same with the pool trimmed and all but 16 MiB of the card taken after the first block: the
// blocks' split-K workspaces are in the slots the job already holds, so it completes, right (a
// block failing on an allocation would be a regression: the budget would not have counted it).
// No hang, nothing leaked.
TEST_F(FaultGemmOocPressureGpu, MemoryTakenDuringAJobWithSplitKDoesNotAffectIt) {
  gemm_case<float> c(6144, 3072, 256, "FaultGemmOocPressureGpu.Hog", {0}, 1536, std::size_t{1} << 30, true, false);
  c.g.split_k = 2;
  c.expect_next_job_right();
  c.repoison();
  const auto before = ft::take({0});
  {
    ft::card_hog h;
    bool taken = false;
    c.o.progress = ft::take_card_after(1, std::size_t{16} << 20, h, taken);
    ft::adapts_or_fails_by_name([&] { return c.run(); }, h,
                                [&](const ooc_report& r) {
                                  EXPECT_TRUE(r.job.complete());
                                  for (std::size_t e = 0; e < c.c.size(); ++e)
                                    ASSERT_TRUE(same_bits(c.c[e], c.ref[e])) << e;
                                },
                                [&](const pipeline_error& e, const spillway::out_of_memory&) {
                                  ADD_FAILURE() << "a block allocated while the job ran: " << e.what();
                                });
    c.o.progress = nullptr;
    EXPECT_TRUE(taken);
  }
  ft::expect_no_leaks(before, ft::take({0}), "GEMM with memory taken mid-job");
  c.expect_next_job_right();
}

}  // namespace
