// GPU tests of the low-level task pipeline (run_tasks): results, slot reuse, failure, cancel,
// no leaks, several devices.
#include <spillway/core.hpp>
#include <spillway/pipeline.cuh>

#include "support/gpu_test.hpp"
#include "support/task_split.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

__global__ void mix_kernel(const std::uint32_t* in, std::uint32_t* out, std::size_t n, std::uint32_t salt) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * 2654435761u + salt;
}

std::uint32_t mix_host(std::uint32_t x, std::uint32_t salt) { return x * 2654435761u + salt; }

std::size_t pool_used(int device) {
  std::uint64_t used = 0;
  EXPECT_EQ(cudaMemPoolGetAttribute(spillway::device_pool(device), cudaMemPoolAttrUsedMemCurrent, &used),
            cudaSuccess);
  return static_cast<std::size_t>(used);
}

// A job of n_tasks tasks of `per_task` uint32 each (the last one shorter) from pinned `in` to
// pinned `out`: task t's chunk is mixed with salt t.
struct mix_job : spillway::test::task_split {
  spillway::pinned_buffer<std::uint32_t> in;
  spillway::pinned_buffer<std::uint32_t> out;

  mix_job(std::size_t n_, std::size_t per_task_, const char* seed_name)
      : task_split{n_, per_task_}, in(n_), out(n_) {
    std::mt19937 rng(static_cast<std::uint32_t>(spillway::test::seed(seed_name)));
    for (std::size_t i = 0; i < n; ++i) in[i] = rng();
    std::memset(out.data(), 0xFF, n * sizeof(std::uint32_t));  // poison
  }
  spillway::task_job_options options(std::size_t slots = 3) const {
    spillway::task_job_options o;
    o.slots_per_device = slots;
    o.device_buffer_bytes = {per_task * sizeof(std::uint32_t), per_task * sizeof(std::uint32_t)};
    return o;
  }
  // Enqueues task t on s with the slot's two buffers.
  void enqueue(std::size_t t, spillway::task_slot& slot, spillway::stream_view s) {
    auto* d_in = slot.device<std::uint32_t>(0);
    auto* d_out = slot.device<std::uint32_t>(1);
    const std::size_t c = count(t);
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(d_in, in.data() + begin(t), c * 4, cudaMemcpyHostToDevice, s.value()));
    mix_kernel<<<static_cast<unsigned>((c + 255) / 256), 256, 0, s.value()>>>(d_in, d_out, c,
                                                                                 static_cast<std::uint32_t>(t));
    SPILLWAY_CHECK_LAUNCH();
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(out.data() + begin(t), d_out, c * 4, cudaMemcpyDeviceToHost, s.value()));
    slot.add_bytes_moved(2 * c * 4);
  }
  // Task t's output is exactly right / exactly the poison.
  bool task_correct(std::size_t t) const {
    for (std::size_t i = begin(t); i < begin(t) + count(t); ++i)
      if (out[i] != mix_host(in[i], static_cast<std::uint32_t>(t))) return false;
    return true;
  }
  bool task_untouched(std::size_t t) const {
    for (std::size_t i = begin(t); i < begin(t) + count(t); ++i)
      if (out[i] != 0xFFFFFFFFu) return false;
    return true;
  }
};

TEST(TaskPipelineGpu, EveryTaskOnceResultsAtTheirOffsets) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  mix_job job(100003, 2711, "TaskPipelineGpu.Every");  // 37 tasks, last one short
  ASSERT_EQ(job.tasks(), 37u);
  std::vector<int> completions(job.tasks(), 0);
  std::mutex m;
  auto o = job.options(3);
  o.devices = {0};
  const auto r = spillway::run_tasks(
      job.tasks(), o, [&](std::size_t t, spillway::task_slot& slot, spillway::stream_view s) { job.enqueue(t, slot, s); },
      [&](std::size_t t) {
        std::lock_guard<std::mutex> l(m);
        ++completions[t];
      });
  EXPECT_TRUE(r.complete());
  EXPECT_FALSE(r.cancelled);
  EXPECT_EQ(r.tasks_completed, 37u);
  EXPECT_EQ(r.completed_tasks().size(), 37u);
  EXPECT_EQ(r.bytes_moved, 2 * job.n * 4);
  ASSERT_EQ(r.tasks_per_device.size(), 1u);
  EXPECT_EQ(r.tasks_per_device[0], 37u);
  ASSERT_EQ(r.bytes_per_device.size(), 1u);
  EXPECT_EQ(r.bytes_per_device[0], r.bytes_moved);
  EXPECT_EQ(r.slots_per_device, 3u);
  for (std::size_t t = 0; t < job.tasks(); ++t) {
    EXPECT_EQ(completions[t], 1) << "task " << t;
    EXPECT_TRUE(job.task_correct(t)) << "task " << t;
  }
}

TEST(TaskPipelineGpu, SlotsAreReusedAndFreeWhenHandedOut) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  mix_job job(64 * 1000, 1000, "TaskPipelineGpu.Reuse");
  std::set<const void*> buffers;
  std::set<cudaStream_t> streams;
  std::vector<std::atomic<int>> done(job.tasks());
  std::vector<std::size_t> previous_of_slot(4, static_cast<std::size_t>(-1));
  bool reuse_before_completion = false;
  auto o = job.options(4);
  o.devices = {0};
  const auto r = spillway::run_tasks(
      job.tasks(), o,
      [&](std::size_t t, spillway::task_slot& slot, spillway::stream_view s) {
        buffers.insert(slot.device(0));
        buffers.insert(slot.device(1));
        streams.insert(s.value());
        EXPECT_EQ(slot.task(), t);
        EXPECT_EQ(slot.stream(), s);
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(slot.device(1)) % 256, 0u);
        // The slot's previous task has completed (on_complete returned) before the slot is reused.
        const std::size_t prev = previous_of_slot.at(slot.index());
        if (prev != static_cast<std::size_t>(-1) && done[prev].load() != 1) reuse_before_completion = true;
        previous_of_slot[slot.index()] = t;
        job.enqueue(t, slot, s);
      },
      [&](std::size_t t, spillway::task_slot&) { done[t].fetch_add(1); });
  EXPECT_TRUE(r.complete());
  EXPECT_FALSE(reuse_before_completion);
  EXPECT_EQ(buffers.size(), 8u);  // 4 slots × 2 buffers, allocated once
  EXPECT_EQ(streams.size(), 4u);  // one stream per slot
  for (std::size_t t = 0; t < job.tasks(); ++t) EXPECT_TRUE(job.task_correct(t)) << t;
}

TEST(TaskPipelineGpu, ThrowOnTaskKStopsCleanlyAndReportsWhatCompleted) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  mix_job job(40 * 4099, 4099, "TaskPipelineGpu.Throw");
  const std::size_t k = 11;
  const std::size_t before = pool_used(0);
  std::atomic<int> enqueued_after_failure{0};
  std::atomic<bool> failed{false};
  auto o = job.options(3);
  o.devices = {0};
  try {
    (void)spillway::run_tasks(job.tasks(), o, [&](std::size_t t, spillway::task_slot& slot, spillway::stream_view s) {
      if (failed.load()) enqueued_after_failure.fetch_add(1);
      if (t == k) {
        // Half-enqueued work before the throw must be drained, not left running.
        SPILLWAY_CUDA_TRY(cudaMemcpyAsync(slot.device(0), job.in.data(), 4 * job.per_task, cudaMemcpyHostToDevice,
                                          s.value()));
        failed.store(true);
        throw std::runtime_error("compute step refused chunk 11");
      }
      job.enqueue(t, slot, s);
    });
    FAIL() << "expected pipeline_error";
  } catch (const spillway::pipeline_error& e) {
    EXPECT_EQ(e.failed_task(), k);
    EXPECT_EQ(e.device(), 0);
    const std::string what = e.what();
    EXPECT_NE(what.find("task 11"), std::string::npos) << what;
    EXPECT_NE(what.find("compute step refused chunk 11"), std::string::npos) << what;
    try {
      std::rethrow_exception(e.cause());
    } catch (const std::runtime_error& inner) {
      EXPECT_STREQ(inner.what(), "compute step refused chunk 11");
    }
    const auto& rep = e.report();
    EXPECT_EQ(rep.tasks_total, job.tasks());
    EXPECT_FALSE(rep.complete());
    EXPECT_FALSE(rep.completed[k]);
    // Everything before k completed (the ring drained them); nothing after k was started.
    for (std::size_t t = 0; t < k; ++t) {
      EXPECT_TRUE(rep.completed[t]) << t;
      EXPECT_TRUE(job.task_correct(t)) << t;
    }
    for (std::size_t t = k; t < job.tasks(); ++t) {
      EXPECT_FALSE(rep.completed[t]) << t;
      EXPECT_TRUE(job.task_untouched(t)) << t;
    }
    EXPECT_EQ(rep.tasks_completed, k);
  }
  EXPECT_EQ(enqueued_after_failure.load(), 0);
  EXPECT_EQ(pool_used(0), before) << "the ring's device memory went back to the pool";
}

TEST(TaskPipelineGpu, ThrowInOnCompleteIsReportedWithItsTask) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  mix_job job(20 * 1000, 1000, "TaskPipelineGpu.OnComplete");
  const std::size_t before = pool_used(0);
  auto o = job.options(3);
  o.devices = {0};
  try {
    (void)spillway::run_tasks(
        job.tasks(), o, [&](std::size_t t, spillway::task_slot& slot, spillway::stream_view s) { job.enqueue(t, slot, s); },
        [&](std::size_t t) {
          if (t == 5) throw spillway::logic_error("sink rejected block 5");
        });
    FAIL() << "expected pipeline_error";
  } catch (const spillway::pipeline_error& e) {
    EXPECT_EQ(e.failed_task(), 5u);
    EXPECT_FALSE(e.report().completed[5]);
    for (std::size_t t = 0; t < 5; ++t) EXPECT_TRUE(e.report().completed[t]) << t;
    for (std::size_t t : e.report().completed_tasks()) EXPECT_TRUE(job.task_correct(t)) << t;
    EXPECT_LT(e.report().tasks_completed, job.tasks());
    try {
      std::rethrow_exception(e.cause());
    } catch (const spillway::logic_error& inner) {
      EXPECT_STREQ(inner.what(), "sink rejected block 5");
    }
  }
  EXPECT_EQ(pool_used(0), before);
}

TEST(TaskPipelineGpu, ProgressCanCancel) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  mix_job job(200 * 1024, 1024, "TaskPipelineGpu.Cancel");
  std::vector<spillway::progress_info> seen;
  auto o = job.options(3);
  o.devices = {0};
  o.progress = [&](const spillway::progress_info& p) {
    seen.push_back(p);
    return p.tasks_done < 4;
  };
  std::atomic<std::size_t> started{0};
  const auto r = spillway::run_tasks(job.tasks(), o, [&](std::size_t t, spillway::task_slot& slot, spillway::stream_view s) {
    started.fetch_add(1);
    // Slow each task down a little so the cancel lands well before the end.
    std::this_thread::sleep_for(std::chrono::microseconds(300));
    job.enqueue(t, slot, s);
  });
  EXPECT_TRUE(r.cancelled);
  EXPECT_FALSE(r.complete());
  EXPECT_GE(r.tasks_completed, 4u);
  EXPECT_LT(r.tasks_completed, job.tasks());
  EXPECT_EQ(r.tasks_completed, started.load()) << "every started task was drained to completion";
  spillway::test::expect_complete_or_untouched(job, r);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.front().tasks_done, 0u);
  for (std::size_t i = 1; i < seen.size(); ++i) {
    EXPECT_GT(seen[i].tasks_done, seen[i - 1].tasks_done);
    EXPECT_GE(seen[i].bytes_moved, seen[i - 1].bytes_moved);
    EXPECT_GE(seen[i].elapsed_seconds, seen[i - 1].elapsed_seconds);
    EXPECT_EQ(seen[i].tasks_total, job.tasks());
  }
}

TEST(TaskPipelineGpu, ProgressSeesEveryTaskWhenNotCancelled) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  mix_job job(50 * 512, 512, "TaskPipelineGpu.Progress");
  spillway::progress_info last{};
  auto o = job.options(3);
  o.progress = [&](const spillway::progress_info& p) {
    last = p;
    return true;
  };
  const auto r = spillway::run_tasks(job.tasks(), o, [&](std::size_t t, spillway::task_slot& slot, spillway::stream_view s) {
    job.enqueue(t, slot, s);
  });
  EXPECT_TRUE(r.complete());
  EXPECT_EQ(last.tasks_done, job.tasks());
  EXPECT_EQ(last.bytes_moved, 2 * job.n * 4);
}

TEST(TaskPipelineGpu, BadOptionsThrowBeforeAnyWork) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  int calls = 0;
  auto enq = [&](std::size_t, spillway::task_slot&, spillway::stream_view) { ++calls; };
  spillway::task_job_options o;
  o.device_buffer_bytes = {1000, 1000};  // 1024 + 1024 per slot
  o.slots_per_device = 3;
  o.budget = spillway::memory_budget(3 * 2048 - 1);
  try {
    (void)spillway::run_tasks(10, o, enq);
    FAIL() << "expected logic_error";
  } catch (const spillway::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("minimum budget is 6144"), std::string::npos) << e.what();
  }
  // What the job allocated outside the slots counts with them: one byte more than the budget.
  o.budget = spillway::memory_budget(3 * 2048);
  o.reserved_bytes = 1;
  try {
    (void)spillway::run_tasks(10, o, enq);
    FAIL() << "expected logic_error";
  } catch (const spillway::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("and 1 reserved bytes; the minimum budget is 6145"), std::string::npos)
        << e.what();
  }
  o.reserved_bytes = 0;
  o.budget = spillway::memory_budget(3 * 2048);
  o.devices = {spillway::device_count()};
  EXPECT_THROW((void)spillway::run_tasks(10, o, enq), spillway::logic_error);
  o.devices = {0, -1};
  EXPECT_THROW((void)spillway::run_tasks(10, o, enq), spillway::logic_error);
  o.devices = {0};
  o.slots_per_device = 0;
  EXPECT_THROW((void)spillway::run_tasks(10, o, enq), spillway::logic_error);
  EXPECT_EQ(calls, 0);
  o.slots_per_device = 3;
  const auto r = spillway::run_tasks(0, o, enq);  // no tasks: nothing to do, nothing allocated
  EXPECT_TRUE(r.complete());
  EXPECT_EQ(r.tasks_total, 0u);
  EXPECT_EQ(calls, 0);
}

TEST(TaskPipelineGpu, SetupFailureIsAPipelineErrorWithNoTask) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  spillway::task_job_options o;
  o.devices = {0};
  o.device_buffer_bytes = {std::size_t{1} << 50};  // a petabyte: the allocation must fail
  const std::size_t before = pool_used(0);
  try {
    (void)spillway::run_tasks(4, o, [](std::size_t, spillway::task_slot&, spillway::stream_view) {});
    FAIL() << "expected pipeline_error";
  } catch (const spillway::pipeline_error& e) {
    EXPECT_EQ(e.failed_task(), spillway::pipeline_error::no_task);
    EXPECT_EQ(e.report().tasks_completed, 0u);
    EXPECT_THROW(std::rethrow_exception(e.cause()), spillway::out_of_memory);
  }
  EXPECT_EQ(pool_used(0), before);
}

// Progress calls are coalesced, but the last one sees the final count: a callback that throws
// only then fails a job whose every task completed, and the error says so.
TEST(TaskPipelineGpu, ProgressThrowingAfterTheLastTaskReportsTheCompleteJob) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  mix_job job(60 * 4096, 4096, "TaskPipelineGpu.ProgressAfterLast");
  auto o = job.options(3);
  o.devices = {0};
  o.progress = [](const spillway::progress_info& p) {
    if (p.tasks_done == p.tasks_total) throw std::runtime_error("the caller's callback failed at the end");
    return true;
  };
  try {
    (void)spillway::run_tasks(job.tasks(), o, [&](std::size_t t, spillway::task_slot& slot, spillway::stream_view s) {
      job.enqueue(t, slot, s);
    });
    FAIL() << "expected pipeline_error";
  } catch (const spillway::pipeline_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("progress callback after the last task of the job"), std::string::npos) << what;
    EXPECT_EQ(e.failed_task(), spillway::pipeline_error::no_task);
    EXPECT_EQ(e.device(), -1);
    EXPECT_TRUE(e.report().complete()) << what;
    EXPECT_FALSE(e.report().cancelled);
    EXPECT_THROW(std::rethrow_exception(e.cause()), std::runtime_error);
  }
  for (std::size_t t = 0; t < job.tasks(); ++t) EXPECT_TRUE(job.task_correct(t)) << t;
}

TEST(TaskPipelineGpu, TwoDevicesShareTheTasks) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  for (const auto& devices : spillway::test::two_worker_lists()) {
  SCOPED_TRACE(spillway::test::list_name(devices));
  mix_job job(400 * 8192, 8192, "TaskPipelineGpu.TwoDevices");
  auto o = job.options(3);
  o.devices = devices;
  std::mutex m;
  std::vector<int> device_of(job.tasks(), -1);
  const auto r = spillway::run_tasks(job.tasks(), o, [&](std::size_t t, spillway::task_slot& slot, spillway::stream_view s) {
    int cur = -1;
    SPILLWAY_CUDA_TRY(cudaGetDevice(&cur));
    EXPECT_EQ(cur, slot.device()) << "the slot's device is current in its callbacks";
    EXPECT_EQ(devices[slot.worker()], slot.device()) << "a slot's worker is its entry of the device list";
    {
      std::lock_guard<std::mutex> l(m);
      device_of[t] = static_cast<int>(slot.worker());
    }
    job.enqueue(t, slot, s);
  });
  EXPECT_TRUE(r.complete());
  ASSERT_EQ(r.tasks_per_device.size(), 2u);
  EXPECT_GT(r.tasks_per_device[0], 0u);
  EXPECT_GT(r.tasks_per_device[1], 0u);
  EXPECT_EQ(r.tasks_per_device[0] + r.tasks_per_device[1], job.tasks());
  ASSERT_EQ(r.bytes_per_device.size(), 2u);
  EXPECT_GT(r.bytes_per_device[0], 0u);
  EXPECT_GT(r.bytes_per_device[1], 0u);
  EXPECT_EQ(r.bytes_per_device[0] + r.bytes_per_device[1], r.bytes_moved);
  for (std::size_t t = 0; t < job.tasks(); ++t) {
    EXPECT_NE(device_of[t], -1);
    EXPECT_TRUE(job.task_correct(t)) << t;
  }
  EXPECT_EQ(device_of[0], 0) << "worker w's first task is task w";
  EXPECT_EQ(device_of[1], 1) << "worker w's first task is task w";
  std::size_t per_worker[2] = {0, 0};
  for (int w : device_of) per_worker[w] += 1;
  EXPECT_EQ(per_worker[0], r.tasks_per_device[0]);
  EXPECT_EQ(per_worker[1], r.tasks_per_device[1]);
  }
}

}  // namespace
