// Fault injection in the streamed jobs (streamed_map / transform and streamed_job, both on the
// streamed-job core over run_tasks): a chunk's kernel error, a staging part throwing, the slot
// allocation failing, a cancel. After each: the error names the chunk and the device, the chunks
// the report lists are right on the host (exact: integer-valued doubles), chunks never started are
// still poison, nothing leaked, and the next job is right. One and two GPUs.
#include <spillway/core.hpp>
#include <spillway/pipeline.cuh>

#include "support/fault_harness.hpp"
#include "support/gpu_test.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

namespace ft = spillway::test::faults;
namespace fault = spillway::fault;
using spillway::pipeline_error;

// Integer-valued operands: every result is exact on both sides, contraction or not.
struct axpy3 {
  __host__ __device__ double operator()(double x, double y) const { return x * 3.0 + y; }
};

bool is_poison(double v) {
  std::uint64_t b;
  std::memcpy(&b, &v, 8);
  return b == 0x7f7f7f7f7f7f7f7fULL;
}

// The checks every case runs after a job (Case provides plan(), run(), repoison(),
// chunk_correct(chunk) and chunk_untouched(chunk)).
template <class Case>
struct chunk_checks {
  /// Every chunk the report lists complete is right; every chunk after the last started one is
  /// still poison.
  void expect_report_matches_output(const spillway::job_report& r, std::size_t last_started) {
    Case& c = static_cast<Case&>(*this);
    const auto p = c.plan();
    ASSERT_EQ(r.tasks_total, p.chunk_count()) << "the test's plan is the job's";
    for (std::size_t t = 0; t < p.chunk_count(); ++t) {
      if (r.completed[t]) {
        EXPECT_TRUE(c.chunk_correct(p.at(t))) << "chunk " << t << " is listed complete but is wrong";
      } else if (last_started != fault::never && t > last_started) {
        EXPECT_TRUE(c.chunk_untouched(p.at(t))) << "chunk " << t << " was never started but changed";
      }
    }
  }
  /// The same process runs the job again, whole and right.
  void expect_next_job_right() {
    Case& c = static_cast<Case&>(*this);
    c.repoison();
    const auto r = c.run();
    EXPECT_TRUE(r.complete());
    const auto p = c.plan();
    for (std::size_t t = 0; t < p.chunk_count(); ++t) EXPECT_TRUE(c.chunk_correct(p.at(t))) << "next job, chunk " << t;
  }
};

// out = 3a + b over n doubles: a pageable (staged by the host workers), b pinned, out pageable.
struct map_case : chunk_checks<map_case> {
  std::size_t n;
  std::vector<double> a, out;
  spillway::pinned_buffer<double> b;
  spillway::transform_options o;

  map_case(std::size_t n_, const std::string& salt, std::vector<int> devices) : n(n_), a(n_), out(n_), b(n_) {
    std::mt19937_64 g(spillway::test::seed(salt));
    std::uniform_int_distribution<int> v(-1000, 1000);
    for (std::size_t i = 0; i < n; ++i) {
      a[i] = v(g);
      b[i] = v(g);
    }
    o.devices = std::move(devices);
    o.budget = spillway::memory_budget(std::size_t{64} << 20);
    o.slots_per_device = 4;
    o.granularity = 1024;
    o.max_chunk_bytes = 3 * 8 * 65536;  // 64 Ki elements per chunk
    repoison();
  }
  void repoison() { std::memset(out.data(), 0x7f, n * 8); }
  // The chunks the job cuts (the plan streamed_map makes from these options).
  spillway::chunk_plan plan() const {
    spillway::plan_request pr;
    pr.extent = n;
    pr.bytes_per_unit = {8, 8, 8};
    pr.budget_bytes = o.budget->bytes();
    pr.slots = o.slots_per_device;
    pr.granularity = o.granularity;
    pr.max_slot_bytes = o.max_chunk_bytes;
    return spillway::make_chunk_plan(pr);
  }
  spillway::job_report run() { return spillway::streamed_map(o, out, axpy3{}, a, b); }
  bool chunk_correct(const spillway::chunk& c) const {
    for (std::size_t i = c.begin; i < c.end(); ++i)
      if (out[i] != a[i] * 3.0 + b[i]) return false;
    return true;
  }
  bool chunk_untouched(const spillway::chunk& c) const {
    for (std::size_t i = c.begin; i < c.end(); ++i)
      if (!is_poison(out[i])) return false;
    return true;
  }
};

class FaultStreamedGpu : public ft::one_gpu_test {};

TEST_F(FaultStreamedGpu, MapChunkKernelError) {
  map_case m(40 * 65536 + 123, "FaultStreamedGpu.MapKernel", {0});
  ASSERT_EQ(m.plan().chunk_count(), 41u);
  m.expect_next_job_right();
  const fault::plan p = ft::task_fails_at(9, fault::task_point::complete, cudaErrorLaunchFailure);
  ft::fail_then_recover(m, {0}, p, "map kernel error", [&](const pipeline_error& e) {
    ft::expect_named_after_earlier(e, 9, 0);
    m.expect_report_matches_output(e.report(), 9 + 3);  // at most 3 more chunks in flight in the other slots
  });
}

TEST_F(FaultStreamedGpu, MapStagingThrows) {
  map_case m(40 * 65536, "FaultStreamedGpu.MapStaging", {0});
  m.expect_next_job_right();
  // Staging calls in order: inputs of chunks 0-3, chunk 0's output, chunk 4's input, chunk 1's output, …
  const fault::plan p = ft::staging_call_throws(7);
  ft::fail_then_recover(m, {0}, p, "map staging throw", [&](const pipeline_error& e) {
    ASSERT_NE(e.failed_task(), pipeline_error::no_task) << e.what();
    ft::expect_named(e, e.failed_task(), 0);
    std::exception_ptr keep;
    EXPECT_NE(ft::cause_as<fault::injected_fault>(e, keep), nullptr) << e.what();
    m.expect_report_matches_output(e.report(), e.failed_task() + 4);
  });
}

TEST_F(FaultStreamedGpu, MapSlotAllocationFails) {
  map_case m(10 * 65536, "FaultStreamedGpu.MapAlloc", {0});
  m.expect_next_job_right();
  const fault::plan p = ft::allocation_fails(0);
  ft::fail_then_recover(m, {0}, p, "map allocation failure", [&](const pipeline_error& e) {
    std::exception_ptr keep;
    const auto* oom = ft::setup_oom(e, keep);
    ASSERT_NE(oom, nullptr);
    EXPECT_EQ(oom->requested_bytes(), 4u * 3 * 8 * 65536) << "4 slots of three 512 KiB buffers";
    m.expect_report_matches_output(e.report(), 0);
    EXPECT_TRUE(m.chunk_untouched(m.plan().at(0)));
  });
}

TEST_F(FaultStreamedGpu, MapCancelledByItsProgressCallback) {
  map_case m(80 * 65536, "FaultStreamedGpu.MapCancel", {0});
  m.expect_next_job_right();
  const auto before = ft::poisoned_start(m, {0});
  m.o.progress = [](const spillway::progress_info& pi) { return pi.tasks_done < 5; };
  spillway::job_report r;
  {
    ft::watchdog w(120, "MapCancelledByItsProgressCallback");
    r = m.run();
  }
  m.o.progress = nullptr;
  EXPECT_TRUE(r.cancelled);
  EXPECT_GE(r.tasks_completed, 5u);
  const auto pl = m.plan();
  for (std::size_t t = 0; t < pl.chunk_count(); ++t) {
    if (r.completed[t]) {
      EXPECT_TRUE(m.chunk_correct(pl.at(t))) << t;
    } else {
      EXPECT_TRUE(m.chunk_untouched(pl.at(t))) << t << ": a cancelled job drains what it started, so the rest is poison";
    }
  }
  ft::expect_no_leaks(before, ft::take({0}), "map cancel");
  m.expect_next_job_right();
}

// ---- streamed_job: two kernels per chunk, a scratch array, a resident table ----------------------

__global__ void scale_kernel(const double* x, const double* table, double* scratch, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x)
    scratch[i] = x[i] * table[i % 4];
}
__global__ void offset_kernel(const double* scratch, double* y, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x)
    y[i] = scratch[i] + 7.0;
}

struct job_case : chunk_checks<job_case> {
  std::size_t n;
  std::vector<double> x, y;  // pageable: both staged
  std::vector<double> table{1.0, -2.0, 4.0, 0.5};
  spillway::streamed_job_options o;

  job_case(std::size_t n_, const std::string& salt, std::vector<int> devices) : n(n_), x(n_), y(n_) {
    std::mt19937_64 g(spillway::test::seed(salt));
    std::uniform_int_distribution<int> v(-1000, 1000);
    for (auto& e : x) e = v(g);
    o.devices = std::move(devices);
    o.budget = spillway::memory_budget(std::size_t{64} << 20);
    o.slots_per_device = 3;
    o.max_chunk_bytes = 3 * 8 * 32768 + 256;  // 32 Ki units per chunk (x, scratch, y) plus the table
    repoison();
  }
  void repoison() { std::memset(y.data(), 0x7f, n * 8); }
  spillway::streamed_job make(spillway::job_array<const double>* xa, spillway::job_array<const double>* ta,
                              spillway::job_array<double>* sa, spillway::job_array<double>* ya) {
    spillway::streamed_job j(n);
    *xa = j.input(x);
    *ta = j.resident(table);
    *sa = j.scratch<double>(1);
    *ya = j.output(y);
    return j;
  }
  spillway::chunk_plan plan() {
    spillway::job_array<const double> xa, ta;
    spillway::job_array<double> sa, ya;
    return make(&xa, &ta, &sa, &ya).plan(o, o.budget->bytes());
  }
  spillway::job_report run() {
    spillway::job_array<const double> xa, ta;
    spillway::job_array<double> sa, ya;
    const spillway::streamed_job j = make(&xa, &ta, &sa, &ya);
    return j.run(o, [&](const spillway::job_chunk& c) {
      scale_kernel<<<64, 256, 0, c.stream().value()>>>(c.data(xa), c.data(ta), c.data(sa), c.count());
      SPILLWAY_CHECK_LAUNCH();
      offset_kernel<<<64, 256, 0, c.stream().value()>>>(c.data(sa), c.data(ya), c.count());
      SPILLWAY_CHECK_LAUNCH();
    });
  }
  bool chunk_correct(const spillway::chunk& c) const {
    for (std::size_t i = c.begin; i < c.end(); ++i)
      if (y[i] != x[i] * table[i % 4] + 7.0) return false;
    return true;
  }
  bool chunk_untouched(const spillway::chunk& c) const {
    for (std::size_t i = c.begin; i < c.end(); ++i)
      if (!is_poison(y[i])) return false;
    return true;
  }
};

TEST_F(FaultStreamedGpu, JobChunkCopyErrorWhenEnqueued) {
  job_case j(30 * 32768 + 77, "FaultStreamedGpu.JobEnqueue", {0});
  ASSERT_EQ(j.plan().chunk_count(), 31u);
  j.expect_next_job_right();
  const fault::plan p = ft::task_fails_at(6, fault::task_point::enqueue, cudaErrorInvalidValue);
  ft::fail_then_recover(j, {0}, p, "streamed_job enqueue error", [&](const pipeline_error& e) {
    ft::expect_named_after_earlier(e, 6, 0);
    EXPECT_EQ(e.report().tasks_completed, 6u);
    j.expect_report_matches_output(e.report(), 6);
  });
}

TEST_F(FaultStreamedGpu, JobChunkKernelErrorAtCompletion) {
  job_case j(30 * 32768, "FaultStreamedGpu.JobComplete", {0});
  j.expect_next_job_right();
  const fault::plan p = ft::task_fails(0);  // the very first chunk
  ft::fail_then_recover(j, {0}, p, "streamed_job completion error", [&](const pipeline_error& e) {
    ft::expect_named(e, 0, 0);
    j.expect_report_matches_output(e.report(), 2);
  });
}

TEST_F(FaultStreamedGpu, JobStagingAllocationFails) {
  job_case j(30 * 32768, "FaultStreamedGpu.JobPinned", {0});
  j.expect_next_job_right();
  // fail_then_recover counts leaks first, which empties the staging cache: the job pins its blocks anew.
  const fault::plan p = ft::pinned_allocation_fails(4);  // slot 2's first block (two staged arrays per slot)
  ft::fail_then_recover(j, {0}, p, "streamed_job pinned failure", [&](const pipeline_error& e) {
    ft::expect_named(e, pipeline_error::no_task, 0);
    std::exception_ptr keep;
    EXPECT_NE(ft::cause_as<spillway::out_of_memory>(e, keep), nullptr);
    j.expect_report_matches_output(e.report(), 0);
    EXPECT_TRUE(j.chunk_untouched(j.plan().at(0)));
  });
}

// ---- two GPUs -----------------------------------------------------------------------------------

class FaultStreamedTwoGpu : public ft::two_gpu_test {};

TEST_F(FaultStreamedTwoGpu, MapKernelErrorOnTheSecondDevice) {
  map_case m(120 * 65536, "FaultStreamedTwoGpu.Map", {0, 1});
  m.expect_next_job_right();
  ft::any_task_fails_then_recover(m, ft::task_fails(fault::any_task, 1), 1, "map error on device 1");
}

TEST_F(FaultStreamedTwoGpu, JobStagingThrowsOnEitherDevice) {
  job_case j(120 * 32768, "FaultStreamedTwoGpu.Job", {0, 1});
  j.expect_next_job_right();
  const fault::plan p = ft::staging_call_throws(20);
  ft::fail_then_recover(j, {0, 1}, p, "streamed_job staging throw, two devices", [&](const pipeline_error& e) {
    ASSERT_NE(e.failed_task(), pipeline_error::no_task) << e.what();
    ASSERT_TRUE(e.device() == 0 || e.device() == 1) << e.what();
    ft::expect_named(e, e.failed_task(), e.device());
    j.expect_report_matches_output(e.report(), fault::never);
  });
}

}  // namespace
