// Test support: what the fault-injection suites share (tests/pipeline/fault_*_test.cu,
// tests/gram/fault_gram_test.cu, tests/gemm/fault_ooc_test.cu) over the probes of
// pipeline/fault_support.hpp: their GPU fixtures, one-fault plans, and the drivers of their common
// cases. A job case `c` provides run(), repoison() (its output back to poison) and
// expect_next_job_right(); some drivers also use tasks(), expect_nothing_written() or
// expect_report_matches_output(report, last_started_task).
#pragma once

#include "pipeline/fault_support.hpp"
#include "support/gpu_test.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

namespace spillway::test::faults {

/// Base of the one-GPU fault suites: skips without a GPU, then makes what lives for the whole
/// process (contexts, pools, workers) before anything is counted.
class one_gpu_test : public ::testing::Test {
 protected:
  void SetUp() override {
    SPILLWAY_GPU_TEST_OR_SKIP();
    warm_up({0});
  }
};

/// The same on two GPUs (skips on smaller machines).
class two_gpu_test : public ::testing::Test {
 protected:
  void SetUp() override {
    SPILLWAY_GPUS_TEST_OR_SKIP(2);
    warm_up({0, 1});
  }
};

// ---- plans: one fault each (a device of -1: any device) ------------------------------------------

/// Task `task`'s check when it completes reports cudaErrorLaunchFailure (any_task: the first task
/// checked).
inline fault::plan task_fails(std::size_t task, int device = -1) {
  fault::plan p;
  p.task = task;
  p.task_device = device;
  return p;
}

/// Task `task`'s check at `at` reports `error`.
inline fault::plan task_fails_at(std::size_t task, fault::task_point at, cudaError_t error, int device = -1) {
  fault::plan p = task_fails(task, device);
  p.task_at = at;
  p.task_error = error;
  return p;
}

/// The `call`-th marked copy or launch of task `task` reports cudaErrorLaunchFailure.
inline fault::plan call_fails(std::size_t call, std::size_t task, int device = -1) {
  fault::plan p;
  p.call = call;
  p.call_task = task;
  p.call_device = device;
  return p;
}

/// The k-th device allocation from spillway's pools fails.
inline fault::plan allocation_fails(std::size_t k, int device = -1) {
  fault::plan p;
  p.device_allocation = k;
  p.allocation_device = device;
  return p;
}

/// The k-th page-locked allocation fails.
inline fault::plan pinned_allocation_fails(std::size_t k) {
  fault::plan p;
  p.pinned_allocation = k;
  return p;
}

/// The k-th call of the host worker pool throws.
inline fault::plan staging_call_throws(std::size_t k) {
  fault::plan p;
  p.staging_call = k;
  return p;
}

/// The progress point throws once `tasks` tasks are done.
inline fault::plan progress_throws_after(std::size_t tasks) {
  fault::plan p;
  p.cancel_after = tasks;
  p.progress_throws = true;
  return p;
}

/// The error names task T on `device`, and every task before T is complete (each was enqueued
/// whole before T started).
inline void expect_named_after_earlier(const pipeline_error& e, std::size_t T, int device) {
  expect_named(e, T, device);
  for (std::size_t t = 0; t < T; ++t) EXPECT_TRUE(e.report().completed[t]) << t;
}

// ---- memory pressure ----------------------------------------------------------------------------

/// A progress callback that, once `tasks` tasks are done, trims spillway's pool on device 0 and has
/// `h` take all but `leave` bytes of the card, as another process would; `taken` says it did.
inline progress_callback take_card_after(std::size_t tasks, std::size_t leave, card_hog& h, bool& taken) {
  return [tasks, leave, &h, &taken](const progress_info& pi) {
    if (!taken && pi.tasks_done >= tasks) {
      taken = true;
      trim_device_pool(0);
      h.take_all_but(leave);
    }
    return true;
  };
}

/// The out_of_memory nested in `e`, a failed set-up (no task, on `device`); nullptr if the cause
/// is another exception (`keep` holds it).
inline const out_of_memory* setup_oom(const pipeline_error& e, std::exception_ptr& keep, int device = 0) {
  expect_named(e, pipeline_error::no_task, device);
  return cause_as<out_of_memory>(e, keep);
}

/// What a job's clean run counts at the hook's marks (run under an empty plan, which fails nothing).
struct call_counts {
  std::size_t device_allocations = 0, pinned_allocations = 0, staging_calls = 0;
};

/// Runs `run` (which returns whether the job completed) once under an empty plan into `n`; a job
/// that does not complete is a fatal failure (ASSERT_NO_FATAL_FAILURE around this stops the test).
template <class Run>
void count_calls(Run&& run, call_counts& n) {
  fault::scope counting(fault::plan{});
  ASSERT_TRUE(run());
  n.device_allocations = fault::device_allocations();
  n.pinned_allocations = fault::pinned_allocations();
  n.staging_calls = fault::staging_calls();
}

// ---- drivers ------------------------------------------------------------------------------------

/// The running test's name, for a watchdog's message.
inline const char* current_test_name() { return ::testing::UnitTest::GetInstance()->current_test_info()->name(); }

/// The start of a counted run: `c`'s output back to poison, then the leak probes of `devices`.
template <class Case>
snapshot poisoned_start(Case& c, const std::vector<int>& devices) {
  c.repoison();
  return take(devices);
}

/// Runs a job armed with `p` and expects pipeline_error after exactly one fault; `check` gets it.
template <class Run, class Check>
void run_failing(Run&& run, const fault::plan& p, Check&& check) {
  watchdog w(120, current_test_name());
  fault::scope armed(p);
  try {
    (void)run();
    ADD_FAILURE() << "expected pipeline_error (faults fired: " << fault::fired() << ")";
  } catch (const pipeline_error& e) {
    EXPECT_EQ(fault::fired(), 1u) << e.what();
    check(e);
  }
}

/// The sequence most fault cases share, after a clean run of `c` has loaded every kernel: from
/// poison, `c` fails under `p` (`check` on the error), nothing on `devices` leaked (`what` names the
/// case), and the next job is right.
template <class Case, class Check>
void fail_then_recover(Case& c, const std::vector<int>& devices, const fault::plan& p, const std::string& what,
                       Check&& check) {
  const auto before = poisoned_start(c, devices);
  run_failing([&] { return c.run(); }, p, check);
  expect_no_leaks(before, take(devices), what);
  c.expect_next_job_right();
}

/// fail_then_recover on devices {0, 1} for a fault on whichever task meets it first on `device`
/// (an any_task plan): the error names that task and the device, the report matches the output
/// (`c.expect_report_matches_output(report, fault::never)`); `also(e)` checks more.
template <class Case, class Also>
void any_task_fails_then_recover(Case& c, const fault::plan& p, int device, const std::string& what, Also&& also) {
  fail_then_recover(c, {0, 1}, p, what, [&](const pipeline_error& e) {
    expect_named(e, fault::fired_task(), device);
    also(e);
    c.expect_report_matches_output(e.report(), fault::never);
  });
}
template <class Case>
void any_task_fails_then_recover(Case& c, const fault::plan& p, int device, const std::string& what) {
  any_task_fails_then_recover(c, p, device, what, [](const pipeline_error&) {});
}

/// The same for a fault that fails the job's set-up with out_of_memory naming `device` (thrown as
/// it is, before the scheduler starts): nothing is written.
template <class Case>
void setup_oom_then_recover(Case& c, const std::vector<int>& devices, const fault::plan& p, int device,
                            const std::string& what) {
  const auto before = poisoned_start(c, devices);
  {
    watchdog w(120, current_test_name());
    fault::scope armed(p);
    try {
      (void)c.run();
      ADD_FAILURE() << "expected out_of_memory";
    } catch (const out_of_memory& oom) {
      EXPECT_NE(std::string(oom.what()).find("on device " + std::to_string(device)), std::string::npos) << oom.what();
    }
    EXPECT_EQ(fault::fired(), 1u);
  }
  c.expect_nothing_written();
  expect_no_leaks(before, take(devices), what);
  c.expect_next_job_right();
}

/// Runs a job under memory pressure (the card taken by `h` part way), which either adapts and
/// completes (`adapted(r)` checks the output; r: what run() returns) or fails a task by name with
/// the out_of_memory of its allocation on device 0 (`failed(e, oom)` checks more). Prints which.
template <class Run, class Adapted, class Failed>
void adapts_or_fails_by_name(Run&& run, const card_hog& h, Adapted&& adapted, Failed&& failed) {
  try {
    watchdog w(120, current_test_name());
    const auto r = run();
    std::printf("[ outcome  ] adapted: the job completed with the card taken (%zu bytes)\n", h.bytes());
    adapted(r);
  } catch (const pipeline_error& e) {
    std::printf("[ outcome  ] failed by name: %s\n", e.what());
    ASSERT_NE(e.failed_task(), pipeline_error::no_task) << e.what();
    expect_named(e, e.failed_task(), 0);
    std::exception_ptr keep;
    const auto* oom = cause_as<out_of_memory>(e, keep);
    ASSERT_NE(oom, nullptr) << e.what();
    failed(e, *oom);
  }
}

/// Each of `count` allocations of a job on device 0 fails in turn (under `plan_for(k)`): `c` fails
/// after exactly one fault with pipeline_error (`on_error(k, e)`) or, from its set-up, with
/// out_of_memory (`on_oom(k, oom)`); with `nothing_written` its output is still poison; nothing
/// leaked (`label` and k name the case). Then the next job is right.
template <class Case, class Plan, class OnError, class OnOom>
void each_allocation_in_turn(Case& c, std::size_t count, const std::string& what, const std::string& label,
                             bool nothing_written, Plan&& plan_for, OnError&& on_error, OnOom&& on_oom) {
  for (std::size_t k = 0; k < count; ++k) {
    SCOPED_TRACE(what + " " + std::to_string(k) + " of " + std::to_string(count));
    const auto before = poisoned_start(c, {0});
    {
      watchdog w(120, current_test_name());
      fault::scope armed(plan_for(k));
      try {
        (void)c.run();
        ADD_FAILURE() << "the job completed with " << what << " " << k << " failing";
      } catch (const pipeline_error& e) {
        on_error(k, e);
      } catch (const out_of_memory& oom) {
        on_oom(k, oom);
      }
      if (::testing::Test::HasFatalFailure()) return;
      EXPECT_EQ(fault::fired(), 1u);
    }
    if (nothing_written) c.expect_nothing_written();
    expect_no_leaks(before, take({0}), label + std::to_string(k));
  }
  c.expect_next_job_right();
}

/// Each marked copy and launch of task T on device 0 fails in turn (call k of T, the error
/// alternating), until a run passes all of them and completes: `complete(r)` checks that run's
/// output (r: what run() returns), `partial(e)` a failed run's report against its output. The
/// error names T, the device and the call; every task before T was enqueued whole before T
/// started, so all are complete.
template <class Case, class Complete, class Partial>
void every_call_of_a_task(Case& c, std::size_t T, const char* what, Complete&& complete, Partial&& partial) {
  c.expect_next_job_right();
  ASSERT_GT(c.tasks(), T + 2);
  std::size_t k = 0;
  for (;; ++k) {
    ASSERT_LT(k, 64u) << "task " << T << " made more than 64 marked calls";
    const auto before = poisoned_start(c, {0});
    fault::plan p;
    p.call = k;
    p.call_task = T;
    p.call_error = k % 2 == 0 ? cudaErrorLaunchFailure : cudaErrorInvalidValue;
    bool failed = false;
    {
      watchdog w(120, std::string(what) + ", call " + std::to_string(k));
      fault::scope armed(p);
      try {
        const auto r = c.run();
        EXPECT_EQ(fault::fired(), 0u);
        complete(r);
        if (::testing::Test::HasFatalFailure()) return;
      } catch (const pipeline_error& e) {
        failed = true;
        EXPECT_EQ(fault::fired(), 1u);
        SCOPED_TRACE(std::string(what) + ": call " + std::to_string(k) + " of task " + std::to_string(T));
        expect_named_after_earlier(e, T, 0);
        const std::string msg = e.what();
        EXPECT_NE(msg.find(cudaGetErrorName(p.call_error)), std::string::npos) << msg;
        EXPECT_TRUE(msg.find("injected fault") != std::string::npos || msg.find("SPILLWAY_FAULT_CALL") != std::string::npos)
            << "the message names the call that failed: " << msg;
        EXPECT_EQ(e.report().tasks_completed, T) << e.what();
        partial(e);
      }
    }
    expect_no_leaks(before, take({0}), std::string(what) + ", call " + std::to_string(k));
    if (!failed) break;
  }
  std::printf("[ calls    ] %s: task %zu makes %zu marked copies and launches, each failed in turn\n", what, T, k);
  EXPECT_GE(k, 2u);
  c.expect_next_job_right();
}

}  // namespace spillway::test::faults
