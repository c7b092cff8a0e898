// Support for the fault-injection and memory-pressure tests (tests/pipeline/fault_*_test.cu,
// tests/gram/fault_gram_test.cu, tests/gemm/fault_ooc_test.cu): leak probes (spillway's device
// pools, free device memory, pinned bytes, threads), a watchdog that turns a hang into a failure,
// memory taken behind spillway's back, and the checks every failed job must pass.
#pragma once

#include <spillway/core.hpp>
#include <spillway/core/fault_hook.hpp>
#include <spillway/pipeline/host_workers.hpp>
#include <spillway/pipeline/job.hpp>

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>
#include <dirent.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#ifndef SPILLWAY_FAULT_INJECTION
#error "the fault tests need SPILLWAY_FAULT_INJECTION (tests/CMakeLists.txt defines it for the pipeline, gram and gemm test binaries)"
#endif

namespace spillway::test::faults {

/// Threads of this process now (entries of /proc/self/task).
inline std::size_t thread_count() {
  std::size_t n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (const dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') ++n;
    }
    closedir(d);
  }
  return n;
}

/// What a job could leak, measured with every device idle and every cache emptied: bytes in use
/// and reserved in spillway's pool, free device memory, page-locked bytes spillway holds, threads.
struct snapshot {
  std::vector<int> devices;
  std::vector<std::uint64_t> pool_used, pool_reserved;
  std::vector<std::size_t> free_bytes;
  std::int64_t pinned_bytes = 0, pinned_blocks = 0;
  std::size_t threads = 0;
};

inline snapshot take(const std::vector<int>& devices) {
  snapshot s;
  s.devices = devices;
  for (int d : devices) {
    device_guard g(d);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // stream-ordered frees have happened
    trim_device_pool(d);                               // the pool's cache is not a leak
    std::uint64_t used = 0, reserved = 0;
    EXPECT_EQ(cudaMemPoolGetAttribute(device_pool(d), cudaMemPoolAttrUsedMemCurrent, &used), cudaSuccess);
    EXPECT_EQ(cudaMemPoolGetAttribute(device_pool(d), cudaMemPoolAttrReservedMemCurrent, &reserved), cudaSuccess);
    std::size_t free_b = 0, total_b = 0;
    EXPECT_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
    s.pool_used.push_back(used);
    s.pool_reserved.push_back(reserved);
    s.free_bytes.push_back(free_b);
  }
  trim_pinned_staging();  // cached staging blocks are freed: what stays pinned is held by someone
  s.pinned_bytes = fault::pinned_live_bytes();
  s.pinned_blocks = fault::pinned_live_blocks();
  s.threads = thread_count();
  return s;
}

/// Free device memory may move by the driver's own bookkeeping; a leaked slot or panel of the
/// tests (≥ 16 MiB where this check matters) would not fit in this.
inline constexpr std::size_t free_bytes_slack = std::size_t{8} << 20;

inline void expect_no_leaks(const snapshot& before, const snapshot& after, const std::string& what) {
  for (std::size_t i = 0; i < before.devices.size(); ++i) {
    const int d = before.devices[i];
    EXPECT_EQ(after.pool_used[i], before.pool_used[i]) << what << ": device " << d << ": pool bytes still in use";
    EXPECT_EQ(after.pool_reserved[i], before.pool_reserved[i]) << what << ": device " << d << ": pool bytes reserved";
    EXPECT_LE(before.free_bytes[i], after.free_bytes[i] + free_bytes_slack)
        << what << ": device " << d << ": free memory dropped from " << before.free_bytes[i] << " to "
        << after.free_bytes[i];
  }
  EXPECT_EQ(after.pinned_bytes, before.pinned_bytes) << what << ": page-locked bytes held by spillway";
  EXPECT_EQ(after.pinned_blocks, before.pinned_blocks) << what << ": page-locked blocks held by spillway";
  EXPECT_EQ(after.threads, before.threads) << what << ": threads of the process";
}

/// Creates what lives for the whole process before anything is counted: the CUDA contexts, the
/// runtime's threads, spillway's pools and the staging worker pool.
inline void warm_up(const std::vector<int>& devices) {
  for (int d : devices) {
    device_guard g(d);
    (void)cudaFree(nullptr);
    (void)device_pool(d);
  }
  (void)spillway::detail::staging_workers();
}

/// Aborts the test program, naming the test, if the scope lasts more than `seconds`: a hang must
/// fail, and a hung job cannot be abandoned safely (it runs on the test's stack).
class watchdog {
 public:
  watchdog(int seconds, std::string what) : what_(std::move(what)) {
    thread_ = std::thread([this, seconds] {
      std::unique_lock<std::mutex> l(m_);
      if (!cv_.wait_for(l, std::chrono::seconds(seconds), [this] { return done_; })) {
        std::fprintf(stderr, "\n[ WATCHDOG ] %s did not return within %d s: a hang. Aborting.\n", what_.c_str(), seconds);
        std::fflush(stderr);
        std::abort();
      }
    });
  }
  ~watchdog() {
    {
      std::lock_guard<std::mutex> l(m_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  watchdog(const watchdog&) = delete;
  watchdog& operator=(const watchdog&) = delete;

 private:
  std::string what_;
  std::mutex m_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

/// The promise of docs/reliability.md for a failed job: the error names the task (or no_task for
/// setup and the progress point) and the device, the message says both, the report is consistent.
inline void expect_named(const pipeline_error& e, std::size_t task, int device) {
  const std::string what = e.what();
  EXPECT_EQ(e.failed_task(), task) << what;
  EXPECT_EQ(e.device(), device) << what;
  if (task != pipeline_error::no_task) {
    EXPECT_NE(what.find("task " + std::to_string(task) + " "), std::string::npos) << what;
  } else {
    EXPECT_NE(what.find("the job"), std::string::npos) << what;
  }
  if (device >= 0) EXPECT_NE(what.find("on device " + std::to_string(device)), std::string::npos) << what;
  const job_report& r = e.report();
  EXPECT_EQ(r.completed.size(), r.tasks_total);
  EXPECT_EQ(r.completed_tasks().size(), r.tasks_completed);
  // A progress callback (no task, no device) may throw when it hears of the last completion:
  // then every task is complete and the message says "after the last task" (docs/reliability.md).
  if (task == pipeline_error::no_task && device < 0 && r.complete()) {
    EXPECT_NE(what.find("progress callback after the last task of the job"), std::string::npos) << what;
  } else {
    EXPECT_FALSE(r.complete()) << what;
  }
  EXPECT_FALSE(r.cancelled);
  if (task != pipeline_error::no_task && task < r.completed.size()) {
    EXPECT_FALSE(r.completed[task]) << "the failed task is listed as complete";
  }
  EXPECT_TRUE(static_cast<bool>(e.cause())) << "the original exception is nested";
}

/// Device memory taken from the driver directly (not from spillway's pool), as another process or
/// library would hold it; given back when the object ends.
class card_hog {
 public:
  card_hog() = default;
  /// Takes all but `leave` bytes of what the current device has free now.
  void take_all_but(std::size_t leave) {
    std::size_t free_b = 0, total_b = 0;
    ASSERT_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
    ASSERT_GT(free_b, leave);
    bytes_ = free_b - leave;
    ASSERT_EQ(cudaMalloc(&p_, bytes_), cudaSuccess) << "could not take " << bytes_ << " bytes";
  }
  ~card_hog() {
    if (p_ != nullptr) (void)cudaFree(p_);
  }
  card_hog(const card_hog&) = delete;
  card_hog& operator=(const card_hog&) = delete;
  [[nodiscard]] std::size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
};

/// Free bytes on the current device now.
inline std::size_t free_bytes_now() {
  std::size_t f = 0, t = 0;
  EXPECT_EQ(cudaMemGetInfo(&f, &t), cudaSuccess);
  return f;
}

/// The checks of an out_of_memory that names the request and the free bytes.
inline void expect_oom_named(const out_of_memory& oom) {
  const std::string what = oom.what();
  EXPECT_GT(oom.requested_bytes(), 0u) << what;
  EXPECT_LT(oom.available_bytes(), oom.requested_bytes()) << what;
  EXPECT_NE(what.find("cannot allocate"), std::string::npos) << what;
  EXPECT_NE(what.find("free of"), std::string::npos) << what;
}

/// The nested cause as its type (nullptr if it is another type).
template <class E>
const E* cause_as(const pipeline_error& e, std::exception_ptr& keep) {
  keep = e.cause();
  try {
    std::rethrow_exception(keep);
  } catch (const E& x) {
    return &x;
  } catch (...) {
    return nullptr;
  }
}

}  // namespace spillway::test::faults
