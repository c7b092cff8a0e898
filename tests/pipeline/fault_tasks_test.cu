// Fault injection in run_tasks (the scheduler every out-of-core job runs on): the k-th device or
// pinned allocation failing, task t's copy or kernel reporting a CUDA error (when enqueued, and
// when its completion is checked), a host staging part throwing on a pool thread, the progress
// point cancelling or throwing — on one and two GPUs. After each: the error names the task and the
// device, the report lists exactly the tasks whose output is complete (checked against the host;
// tasks never started are still poison), nothing leaked (device pool, free memory, pinned bytes,
// threads), and the next job in the process is right. The faults are substituted results
// (core/fault_hook.hpp); the CUDA context stays healthy.
#include <spillway/core.hpp>
#include <spillway/pipeline.cuh>

#include "support/fault_harness.hpp"
#include "support/gpu_test.hpp"
#include "support/task_split.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace ft = spillway::test::faults;
namespace fault = spillway::fault;
using spillway::pipeline_error;

__global__ void mix_kernel(const std::uint32_t* in, std::uint32_t* out, std::size_t n, std::uint32_t salt) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * 2654435761u + salt;
}

constexpr std::uint32_t poison = 0x7f7f7f7fu;

// n uint32 in tasks of per_task (the last shorter); task t's output is its input mixed with salt
// t. `staged`: the host arrays are pageable and go through the slot's pinned staging with the
// pipeline's host workers (spillway::detail::parallel_copy), as the streamed jobs do; otherwise
// they are pinned and copied by DMA directly. Runs on `devices`.
struct mix_job : spillway::test::task_split {
  bool staged;
  std::vector<int> devices;
  spillway::pinned_buffer<std::uint32_t> pin_in, pin_out;
  std::vector<std::uint32_t> page_in, page_out;

  mix_job(std::size_t n_, std::size_t per_task_, bool staged_, const std::string& salt, std::vector<int> devices_ = {0})
      : task_split{n_, per_task_}, staged(staged_), devices(std::move(devices_)) {
    if (staged) {
      page_in.resize(n);
      page_out.resize(n);
    } else {
      pin_in = spillway::pinned_buffer<std::uint32_t>(n);
      pin_out = spillway::pinned_buffer<std::uint32_t>(n);
    }
    std::mt19937 rng(static_cast<std::uint32_t>(spillway::test::seed(salt)));
    for (std::size_t i = 0; i < n; ++i) in()[i] = rng();
    repoison();
  }
  std::uint32_t* in() { return staged ? page_in.data() : pin_in.data(); }
  std::uint32_t* out() { return staged ? page_out.data() : pin_out.data(); }
  const std::uint32_t* in() const { return staged ? page_in.data() : pin_in.data(); }
  const std::uint32_t* out() const { return staged ? page_out.data() : pin_out.data(); }
  void repoison() { std::fill_n(out(), n, poison); }

  spillway::task_job_options options(std::size_t slots = 3) const {
    spillway::task_job_options o;
    o.devices = devices;
    o.slots_per_device = slots;
    o.device_buffer_bytes = {per_task * 4, per_task * 4};
    if (staged) o.pinned_buffer_bytes = {per_task * 4, per_task * 4};
    return o;
  }
  void enqueue(std::size_t t, spillway::task_slot& slot, spillway::stream_view s) {
    auto* d_in = slot.device<std::uint32_t>(0);
    auto* d_out = slot.device<std::uint32_t>(1);
    const std::size_t c = count(t);
    const std::uint32_t* src = in() + begin(t);
    if (staged) {
      spillway::detail::parallel_copy(slot.pinned(0), src, c * 4, 4);
      src = slot.pinned<std::uint32_t>(0);
    }
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(d_in, src, c * 4, cudaMemcpyHostToDevice, s.value()));
    mix_kernel<<<static_cast<unsigned>((c + 255) / 256), 256, 0, s.value()>>>(d_in, d_out, c, static_cast<std::uint32_t>(t));
    SPILLWAY_CHECK_LAUNCH();
    std::uint32_t* dst = staged ? slot.pinned<std::uint32_t>(1) : out() + begin(t);
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(dst, d_out, c * 4, cudaMemcpyDeviceToHost, s.value()));
    slot.add_bytes_moved(2 * c * 4);
  }
  void complete(std::size_t t, spillway::task_slot& slot) {
    if (staged) spillway::detail::parallel_copy(out() + begin(t), slot.pinned(1), count(t) * 4, 4);
  }
  spillway::job_report run(const spillway::task_job_options& o) {
    return spillway::run_tasks(
        tasks(), o, [this](std::size_t t, spillway::task_slot& slot, spillway::stream_view s) { enqueue(t, slot, s); },
        [this](std::size_t t, spillway::task_slot& slot) { complete(t, slot); });
  }
  spillway::job_report run() { return run(options()); }
  bool task_correct(std::size_t t) const {
    for (std::size_t i = begin(t); i < begin(t) + count(t); ++i)
      if (out()[i] != in()[i] * 2654435761u + static_cast<std::uint32_t>(t)) return false;
    return true;
  }
  bool task_untouched(std::size_t t) const {
    for (std::size_t i = begin(t); i < begin(t) + count(t); ++i)
      if (out()[i] != poison) return false;
    return true;
  }
  // Completed tasks are right; tasks past `last_started` were never enqueued and are poison.
  // Others (the failed task, tasks drained unfinished) may hold anything: the report says so.
  void expect_report_matches_output(const spillway::job_report& r, std::size_t last_started) const {
    ASSERT_EQ(r.completed.size(), tasks());
    for (std::size_t t = 0; t < tasks(); ++t) {
      if (r.completed[t]) {
        EXPECT_TRUE(task_correct(t)) << "task " << t << " is listed complete but its output is wrong";
      } else if (last_started != fault::never && t > last_started) {
        EXPECT_TRUE(task_untouched(t)) << "task " << t << " was never started but its output changed";
      }
    }
  }
  // The job again with nothing injected: every task right.
  void expect_next_job_right() {
    repoison();
    const auto r = run();
    EXPECT_TRUE(r.complete());
    for (std::size_t t = 0; t < tasks(); ++t) EXPECT_TRUE(task_correct(t)) << "next job, task " << t;
  }
};

// ---- host worker pool: a part that throws on a pool thread reaches the caller -------------------

TEST(FaultHostWorkers, APartThrowingOnAPoolThreadIsRethrownOnTheCaller) {
  auto& pool = spillway::detail::staging_workers();
  std::atomic<int> ran{0};
  {
    fault::scope armed([] {
      fault::plan p;
      p.staging_call = 0;
      return p;
    }());
    EXPECT_THROW(pool.run_parts(4, [&](std::size_t) { ran.fetch_add(1); }), fault::injected_fault);
    EXPECT_EQ(fault::fired(), 1u);
  }
  EXPECT_EQ(ran.load(), 3) << "the other parts all ran before the exception was rethrown";
  // A part of the caller's own that throws, on whichever thread it runs: same.
  ran = 0;
  EXPECT_THROW(pool.run_parts(4,
                              [&](std::size_t i) {
                                ran.fetch_add(1);
                                if (i == 2) throw std::runtime_error("part 2");
                              }),
               std::runtime_error);
  EXPECT_EQ(ran.load(), 4);
  // The pool still works.
  std::vector<int> hit(8, 0);
  pool.run_parts(8, [&](std::size_t i) { hit[i] = 1; });
  EXPECT_EQ(std::count(hit.begin(), hit.end(), 1), 8);
}

// ---- one GPU ------------------------------------------------------------------------------------

class FaultTasksGpu : public ft::one_gpu_test {};

TEST_F(FaultTasksGpu, KernelErrorReportedAtCompletionOfTaskK) {
  mix_job job(40 * 4099, 4099, false, "FaultTasksGpu.Completion");
  job.expect_next_job_right();  // warms every kernel and cache the job uses
  const fault::plan p = ft::task_fails_at(7, fault::task_point::complete, cudaErrorLaunchFailure);
  ft::fail_then_recover(job, {0}, p, "completion error", [&](const pipeline_error& e) {
    ft::expect_named(e, 7, 0);
    EXPECT_NE(std::string(e.what()).find("cudaErrorLaunchFailure"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("completing task 7"), std::string::npos) << e.what();
    std::exception_ptr keep;
    const auto* ce = ft::cause_as<spillway::cuda_error>(e, keep);
    ASSERT_NE(ce, nullptr);
    EXPECT_EQ(ce->code(), cudaErrorLaunchFailure);
    const auto& r = e.report();
    // Tasks before 7 completed in order; 8 and 9 were in flight in the other two slots and drained.
    for (std::size_t t = 0; t < 7; ++t) EXPECT_TRUE(r.completed[t]) << t;
    job.expect_report_matches_output(r, 9);
  });
}

TEST_F(FaultTasksGpu, CopyErrorReportedWhenTaskKIsEnqueued) {
  mix_job job(40 * 4099, 4099, false, "FaultTasksGpu.Enqueue");
  job.expect_next_job_right();
  const fault::plan p = ft::task_fails_at(5, fault::task_point::enqueue, cudaErrorInvalidValue);
  ft::fail_then_recover(job, {0}, p, "enqueue error", [&](const pipeline_error& e) {
    ft::expect_named(e, 5, 0);
    EXPECT_NE(std::string(e.what()).find("enqueueing task 5"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cudaErrorInvalidValue"), std::string::npos) << e.what();
    const auto& r = e.report();
    for (std::size_t t = 0; t < 5; ++t) EXPECT_TRUE(r.completed[t]) << t;  // drained
    for (std::size_t t = 5; t < job.tasks(); ++t) EXPECT_FALSE(r.completed[t]) << t;
    EXPECT_EQ(r.tasks_completed, 5u);
    job.expect_report_matches_output(r, 5);
  });
}

TEST_F(FaultTasksGpu, SlotAllocationFailsAtSetup) {
  mix_job job(20 * 8192, 8192, false, "FaultTasksGpu.Allocation");
  job.expect_next_job_right();
  const fault::plan p = ft::allocation_fails(0);  // the ring's one allocation
  ft::fail_then_recover(job, {0}, p, "allocation failure", [&](const pipeline_error& e) {
    ft::expect_named(e, pipeline_error::no_task, 0);
    EXPECT_NE(std::string(e.what()).find("setting up the job on device 0"), std::string::npos) << e.what();
    std::exception_ptr keep;
    const auto* oom = ft::cause_as<spillway::out_of_memory>(e, keep);
    ASSERT_NE(oom, nullptr);
    EXPECT_EQ(oom->requested_bytes(), 3 * 2 * 8192 * 4u) << "3 slots of two 32 KiB buffers";
    EXPECT_GT(oom->available_bytes(), 0u) << "the free bytes are stated";
    EXPECT_NE(std::string(oom->what()).find("free of"), std::string::npos) << oom->what();
    EXPECT_EQ(e.report().tasks_completed, 0u);
    job.expect_report_matches_output(e.report(), 0);
    EXPECT_TRUE(job.task_untouched(0));
  });
}

TEST_F(FaultTasksGpu, AllocationRetriedAfterTrimmingThePoolSucceeds) {
  mix_job job(20 * 8192, 8192, false, "FaultTasksGpu.Retry");
  fault::plan p;
  p.device_allocation = 0;
  p.allocation_retry_succeeds = true;  // the first try fails, the pool is trimmed, the retry works
  fault::scope armed(p);
  const auto r = job.run();
  EXPECT_EQ(fault::fired(), 1u);
  EXPECT_TRUE(r.complete());
  for (std::size_t t = 0; t < job.tasks(); ++t) EXPECT_TRUE(job.task_correct(t)) << t;
}

TEST_F(FaultTasksGpu, PinnedStagingAllocationFailsAtSetup) {
  mix_job job(24 * 8192, 8192, true, "FaultTasksGpu.Pinned");
  job.expect_next_job_right();
  // fail_then_recover counts leaks first, which also empties the staging cache: the job pins anew.
  // Slot 1's second staging block: three blocks are pinned when it fails.
  const fault::plan p = ft::pinned_allocation_fails(3);
  ft::fail_then_recover(job, {0}, p, "pinned allocation failure", [&](const pipeline_error& e) {
    std::exception_ptr keep;
    const auto* oom = ft::setup_oom(e, keep);
    ASSERT_NE(oom, nullptr);
    EXPECT_EQ(oom->requested_bytes(), 8192 * 4u);
    EXPECT_NE(std::string(oom->what()).find("cannot pin"), std::string::npos) << oom->what();
    job.expect_report_matches_output(e.report(), 0);
  });
}

TEST_F(FaultTasksGpu, StagingWorkerThrows) {
  // 8 MiB per task: parallel_copy splits each staging copy in two (pieces ≥ 4 MiB), so the part
  // that throws runs on a pool thread.
  const std::size_t per = std::size_t{2} << 20;
  mix_job job(9 * per + 1000, per, true, "FaultTasksGpu.Staging");
  ASSERT_GE(spillway::detail::staging_workers().size(), 1u) << "needs a host worker thread";
  job.expect_next_job_right();
  // Calls in order on the one device's worker: inputs of tasks 0, 1, 2 (calls 0-2), task 0's
  // output when slot 0 is reused (3), task 3's input (4), task 1's output (5), task 4's input (6).
  const fault::plan p = ft::staging_call_throws(6);
  ft::fail_then_recover(job, {0}, p, "staging throw", [&](const pipeline_error& e) {
    ft::expect_named(e, 4, 0);
    EXPECT_NE(std::string(e.what()).find("enqueueing task 4"), std::string::npos) << e.what();
    std::exception_ptr keep;
    EXPECT_NE(ft::cause_as<fault::injected_fault>(e, keep), nullptr) << e.what();
    const auto& r = e.report();
    for (std::size_t t = 0; t < 4; ++t) EXPECT_TRUE(r.completed[t]) << t;
    job.expect_report_matches_output(r, 4);
  });
}

TEST_F(FaultTasksGpu, StagingThrowWhileCopyingAnOutputOut) {
  const std::size_t per = std::size_t{2} << 20;
  mix_job job(9 * per, per, true, "FaultTasksGpu.StagingOut");
  job.expect_next_job_right();
  const fault::plan p = ft::staging_call_throws(5);  // task 1's output (see StagingWorkerThrows)
  ft::fail_then_recover(job, {0}, p, "staging throw on output", [&](const pipeline_error& e) {
    ft::expect_named(e, 1, 0);
    EXPECT_NE(std::string(e.what()).find("on_complete of task 1"), std::string::npos) << e.what();
    const auto& r = e.report();
    EXPECT_TRUE(r.completed[0]);
    EXPECT_FALSE(r.completed[1]);
    job.expect_report_matches_output(r, 3);
  });
}

TEST_F(FaultTasksGpu, ProgressPointCancels) {
  mix_job job(120 * 2048, 2048, false, "FaultTasksGpu.Cancel");
  job.expect_next_job_right();
  const auto before = ft::poisoned_start(job, {0});
  std::atomic<std::size_t> started{0};
  fault::plan p;
  p.cancel_after = 4;  // no progress callback of the caller's: the hook alone watches
  spillway::job_report r;
  {
    ft::watchdog w(120, "ProgressPointCancels");
    fault::scope armed(p);
    auto o = job.options();
    r = spillway::run_tasks(
        job.tasks(), o,
        [&](std::size_t t, spillway::task_slot& slot, spillway::stream_view s) {
          started.fetch_add(1);
          std::this_thread::sleep_for(std::chrono::microseconds(300));  // the cancel lands mid-job
          job.enqueue(t, slot, s);
        },
        [&](std::size_t t, spillway::task_slot& slot) { job.complete(t, slot); });
    EXPECT_EQ(fault::fired(), 1u);
  }
  EXPECT_TRUE(r.cancelled);
  EXPECT_FALSE(r.complete());
  EXPECT_GE(r.tasks_completed, 4u);
  EXPECT_EQ(r.tasks_completed, started.load()) << "every started task was drained to completion";
  spillway::test::expect_complete_or_untouched(job, r);
  ft::expect_no_leaks(before, ft::take({0}), "cancel");
  job.expect_next_job_right();
}

TEST_F(FaultTasksGpu, ProgressPointThrows) {
  mix_job job(120 * 2048, 2048, false, "FaultTasksGpu.ProgressThrows");
  job.expect_next_job_right();
  const fault::plan p = ft::progress_throws_after(3);
  ft::fail_then_recover(job, {0}, p, "progress throw", [&](const pipeline_error& e) {
    ft::expect_named(e, pipeline_error::no_task, -1);
    EXPECT_TRUE(std::string(e.what()).find("progress callback during the job") != std::string::npos ||
                std::string(e.what()).find("progress callback after the last task of the job") != std::string::npos)
        << e.what();
    std::exception_ptr keep;
    EXPECT_NE(ft::cause_as<fault::injected_fault>(e, keep), nullptr);
    EXPECT_GE(e.report().tasks_completed, 3u);
    job.expect_report_matches_output(e.report(), fault::never);
  });
}

// ---- two GPUs -----------------------------------------------------------------------------------

class FaultTasksTwoGpu : public ft::two_gpu_test {};

TEST_F(FaultTasksTwoGpu, KernelErrorOnTheSecondDevice) {
  mix_job job(300 * 8192, 8192, false, "FaultTasksTwoGpu.Completion", {0, 1});
  job.expect_next_job_right();
  // Fails the first task device 1 finishes.
  const auto p = ft::task_fails_at(fault::any_task, fault::task_point::complete, cudaErrorLaunchFailure, 1);
  ft::any_task_fails_then_recover(job, p, 1, "completion error on device 1",
                                  [](const pipeline_error&) { EXPECT_EQ(fault::fired_device(), 1); });
}

TEST_F(FaultTasksTwoGpu, StagedCopyErrorOnTheFirstDevice) {
  mix_job job(200 * 8192, 8192, true, "FaultTasksTwoGpu.Enqueue", {0, 1});
  job.expect_next_job_right();
  const auto p = ft::task_fails_at(fault::any_task, fault::task_point::enqueue, cudaErrorInvalidValue, 0);
  ft::any_task_fails_then_recover(job, p, 0, "enqueue error on device 0");
}

TEST_F(FaultTasksTwoGpu, AllocationFailsOnTheSecondDevice) {
  mix_job job(200 * 8192, 8192, false, "FaultTasksTwoGpu.Allocation", {0, 1});
  job.expect_next_job_right();
  const fault::plan p = ft::allocation_fails(0, 1);
  ft::fail_then_recover(job, {0, 1}, p, "allocation failure on device 1", [&](const pipeline_error& e) {
    ft::expect_named(e, pipeline_error::no_task, 1);
    std::exception_ptr keep;
    EXPECT_NE(ft::cause_as<spillway::out_of_memory>(e, keep), nullptr);
    // Device 0 may have completed tasks before the stop reached it: they must be right.
    job.expect_report_matches_output(e.report(), fault::never);
  });
}

}  // namespace
