// Memory pressure on the out-of-core jobs: a budget larger than the free memory, memory taken by
// someone else during a job (a plain cudaMalloc from the progress callback, as another process or
// library would), spillway's pool trimmed during a job. Each either adapts — the documented cases
// in docs/reliability.md, "Memory pressure" — or fails with out_of_memory naming the request and the
// free bytes; never a hang (watchdog) or a wrong result (outputs checked on the host).
#include <spillway/core.hpp>
#include <spillway/pipeline.cuh>

#include "support/fault_harness.hpp"
#include "support/gpu_test.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

namespace ft = spillway::test::faults;
using spillway::pipeline_error;

struct axpy3 {
  __host__ __device__ double operator()(double x, double y) const { return x * 3.0 + y; }
};

// out = 3a + b over n doubles, integer-valued (exact on both sides); out starts as poison.
struct axpy_arrays {
  std::vector<double> a, b, out;
  axpy_arrays(std::size_t n, const std::string& salt) : a(n), b(n), out(n) {
    std::mt19937_64 g(spillway::test::seed(salt));
    std::uniform_int_distribution<int> v(-1000, 1000);
    for (std::size_t i = 0; i < n; ++i) {
      a[i] = v(g);
      b[i] = v(g);
    }
    std::memset(out.data(), 0x7f, n * 8);
  }
};

class FaultPressureGpu : public ft::one_gpu_test {};

TEST_F(FaultPressureGpu, RingLargerThanFreeMemoryFailsWithOutOfMemory) {
  const auto before = ft::take({0});
  const std::size_t free_b = ft::free_bytes_now();
  std::size_t total_b = 0, f2 = 0;
  ASSERT_EQ(cudaMemGetInfo(&f2, &total_b), cudaSuccess);
  spillway::task_job_options o;
  o.devices = {0};
  o.slots_per_device = 3;
  const std::size_t buf = free_b / 2 / 256 * 256;  // three slots: 1.5x the free memory
  o.device_buffer_bytes = {buf};
  o.budget = spillway::memory_budget(2 * total_b);  // the budget allows it; the device does not
  int enqueued = 0;
  try {
    ft::watchdog w(60, "RingLargerThanFreeMemoryFailsWithOutOfMemory");
    (void)spillway::run_tasks(8, o, [&](std::size_t, spillway::task_slot&, spillway::stream_view) { ++enqueued; });
    ADD_FAILURE() << "expected pipeline_error";
  } catch (const pipeline_error& e) {
    std::exception_ptr keep;
    const auto* oom = ft::setup_oom(e, keep);
    ASSERT_NE(oom, nullptr) << e.what();
    EXPECT_EQ(oom->requested_bytes(), 3 * buf);
    EXPECT_LE(oom->available_bytes(), free_b + ft::free_bytes_slack);
    EXPECT_GT(oom->available_bytes(), free_b / 2) << "the free bytes at the failure, not 0";
    const std::string what = oom->what();
    EXPECT_NE(what.find("cannot allocate " + std::to_string(3 * buf) + " bytes"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(oom->available_bytes()) + " bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("free of"), std::string::npos) << what;
  }
  EXPECT_EQ(enqueued, 0);
  ft::expect_no_leaks(before, ft::take({0}), "ring larger than free memory");
}

// A map over 768 MiB of host arrays with 256 MiB left free on the card: an explicit budget above
// the free memory fails with out_of_memory at the start (nothing written); the default budget
// (80% of what is free when the job starts) adapts and the job completes.
TEST_F(FaultPressureGpu, MapBudgetAboveFreeMemoryFailsTheDefaultBudgetAdapts) {
  const std::size_t n = std::size_t{32} << 20;  // 256 MiB per array
  axpy_arrays arrays(n, "FaultPressureGpu.MapBudget");
  auto& [a, b, out] = arrays;
  const auto before = ft::take({0});
  {
    ft::card_hog h;
    h.take_all_but(std::size_t{256} << 20);
    spillway::transform_options o;
    o.devices = {0};
    o.budget = spillway::memory_budget(std::size_t{4} << 30);
    o.max_chunk_bytes = 0;  // only the budget limits the chunks: the ring wants ≥ 768 MiB
    try {
      ft::watchdog w(120, "MapBudgetAboveFreeMemory (explicit)");
      (void)spillway::streamed_map(o, out, axpy3{}, a, b);
      ADD_FAILURE() << "expected pipeline_error";
    } catch (const pipeline_error& e) {
      std::exception_ptr keep;
      const auto* oom = ft::setup_oom(e, keep);
      ASSERT_NE(oom, nullptr) << e.what();
      EXPECT_GT(oom->requested_bytes(), std::size_t{256} << 20);
      EXPECT_LT(oom->available_bytes(), oom->requested_bytes());
      EXPECT_NE(std::string(oom->what()).find("free of"), std::string::npos) << oom->what();
      EXPECT_EQ(e.report().tasks_completed, 0u);
    }
    for (std::size_t i = 0; i < n; i += 4099) {
      std::uint64_t bits;
      std::memcpy(&bits, &out[i], 8);
      ASSERT_EQ(bits, 0x7f7f7f7f7f7f7f7fULL) << "the failed job wrote element " << i;
    }
    o.budget.reset();  // default: 80% of the free memory now
    spillway::job_report r;
    {
      ft::watchdog w(120, "MapBudgetAboveFreeMemory (default budget)");
      r = spillway::streamed_map(o, out, axpy3{}, a, b);
    }
    EXPECT_TRUE(r.complete());
    EXPECT_LE(r.device_bytes_per_device, std::size_t{256} << 20);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] * 3.0 + b[i]) << i;
  }
  ft::expect_no_leaks(before, ft::take({0}), "map under a hog");
}

// Slot memory is allocated when the job starts, so memory taken afterwards cannot fail a streamed
// job: it completes, right.
TEST_F(FaultPressureGpu, MemoryTakenDuringAStreamedMapDoesNotAffectIt) {
  const std::size_t n = std::size_t{24} << 20;
  axpy_arrays arrays(n, "FaultPressureGpu.MapHog");
  auto& [a, b, out] = arrays;
  ft::card_hog h;
  bool taken = false;
  spillway::transform_options o;
  o.devices = {0};
  o.max_chunk_bytes = std::size_t{12} << 20;  // ~48 chunks
  o.progress = ft::take_card_after(2, std::size_t{64} << 20, h, taken);
  spillway::job_report r;
  {
    ft::watchdog w(120, "MemoryTakenDuringAStreamedMap");
    r = spillway::streamed_map(o, out, axpy3{}, a, b);
  }
  EXPECT_TRUE(taken);
  EXPECT_GT(h.bytes(), 0u);
  EXPECT_TRUE(r.complete());
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] * 3.0 + b[i]) << i;
}

__global__ void twice_kernel(const std::uint32_t* in, std::uint32_t* tmp, std::uint32_t* out, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x) {
    tmp[i] = in[i] * 3u;
    out[i] = tmp[i] + 1u;
  }
}

// A run_tasks job whose tasks also allocate a temporary from spillway's pool in their enqueue (as
// the in-core GEMM does for split-K workspaces and staging copies inside the out-of-core GEMM).
struct temp_job {
  std::size_t per, tasks;
  std::size_t temp_elems;
  spillway::pinned_buffer<std::uint32_t> in, out;
  explicit temp_job(std::size_t per_, std::size_t tasks_, std::size_t temp_bytes, const std::string& salt)
      : per(per_), tasks(tasks_), temp_elems(temp_bytes / 4), in(per_ * tasks_), out(per_ * tasks_) {
    std::mt19937 rng(static_cast<std::uint32_t>(spillway::test::seed(salt)));
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = rng();
    std::memset(out.data(), 0x7f, out.size_bytes());
  }
  spillway::job_report run(const spillway::progress_callback& progress) {
    spillway::task_job_options o;
    o.devices = {0};
    o.device_buffer_bytes = {per * 4, per * 4};
    o.progress = progress;
    return spillway::run_tasks(tasks, o, [&](std::size_t t, spillway::task_slot& slot, spillway::stream_view s) {
      spillway::device_buffer<std::uint32_t> tmp(temp_elems, s);  // freed on s when the enqueue returns
      auto* d_in = slot.device<std::uint32_t>(0);
      auto* d_out = slot.device<std::uint32_t>(1);
      SPILLWAY_CUDA_TRY(cudaMemcpyAsync(d_in, in.data() + t * per, per * 4, cudaMemcpyHostToDevice, s.value()));
      twice_kernel<<<64, 256, 0, s.value()>>>(d_in, tmp.data(), d_out, per);
      SPILLWAY_CHECK_LAUNCH();
      SPILLWAY_CUDA_TRY(cudaMemcpyAsync(out.data() + t * per, d_out, per * 4, cudaMemcpyDeviceToHost, s.value()));
    });
  }
  bool task_correct(std::size_t t) const {
    for (std::size_t i = t * per; i < (t + 1) * per; ++i)
      if (out[i] != in[i] * 3u + 1u) return false;
    return true;
  }
};

// Trimming spillway's pool while a job runs releases only memory nobody holds: the job adapts
// (later temporaries come from the driver again) and completes, right.
TEST_F(FaultPressureGpu, PoolTrimmedDuringAJobAdapts) {
  temp_job job(1 << 20, 40, std::size_t{32} << 20, "FaultPressureGpu.Trim");
  int trims = 0;
  spillway::job_report r;
  {
    ft::watchdog w(120, "PoolTrimmedDuringAJob");
    r = job.run([&](const spillway::progress_info&) {
      EXPECT_EQ(cudaMemPoolTrimTo(spillway::device_pool(0), 0), cudaSuccess);
      ++trims;
      return true;
    });
  }
  EXPECT_GE(trims, 2);
  EXPECT_TRUE(r.complete());
  for (std::size_t t = 0; t < job.tasks; ++t) EXPECT_TRUE(job.task_correct(t)) << t;
}

// The pool trimmed and nearly all the card taken mid-job, while tasks still allocate 32 MiB
// temporaries: a task's allocation may still be served (the pool keeps what is freed after the
// trim), else it fails and the job stops with out_of_memory naming the 32 MiB and the free bytes.
// Either way: no hang, completed tasks right, nothing leaked.
TEST_F(FaultPressureGpu, MemoryTakenDuringAJobThatAllocatesPerTask) {
  temp_job job(1 << 20, 40, std::size_t{32} << 20, "FaultPressureGpu.HogPerTask");
  {
    spillway::job_report warm = job.run(nullptr);  // every kernel loaded before anything is counted
    ASSERT_TRUE(warm.complete());
    std::memset(job.out.data(), 0x7f, job.out.size_bytes());
  }
  const auto before = ft::take({0});
  {
    ft::card_hog h;
    bool taken = false;
    auto progress = ft::take_card_after(2, std::size_t{16} << 20, h, taken);
    ft::adapts_or_fails_by_name(
        [&] { return job.run(progress); }, h,
        [&](const spillway::job_report& r) {
          EXPECT_TRUE(r.complete());
          for (std::size_t t = 0; t < job.tasks; ++t) EXPECT_TRUE(job.task_correct(t)) << t;
        },
        [&](const pipeline_error& e, const spillway::out_of_memory& oom) {
          EXPECT_EQ(oom.requested_bytes(), std::size_t{32} << 20);
          EXPECT_LT(oom.available_bytes(), oom.requested_bytes());
          EXPECT_NE(std::string(oom.what()).find("free of"), std::string::npos) << oom.what();
          for (std::size_t t : e.report().completed_tasks()) EXPECT_TRUE(job.task_correct(t)) << t;
        });
    EXPECT_TRUE(taken);
  }
  ft::expect_no_leaks(before, ft::take({0}), "memory taken mid-job");
}

}  // namespace
