// GPU tests of spillway::streamed_job: a three-step per-chunk computation (the discount pricer:
// discount factors into scratch, discounted flows out, their per-date sum out) over many chunks
// under a small budget, bit-exact against the same arithmetic on the host; pageable and pinned
// arrays; a resident table; a failing computation reported as pipeline_error naming its chunk.
#include <spillway/core.hpp>
#include <spillway/pipeline.cuh>

#include "support/gpu_test.hpp"
#include "support/round_once.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// Every operation is one IEEE-rounded step on both sides (no contraction differences), so the
// device result equals the host one bit for bit.
__host__ __device__ inline double discount_factor(double rate, double t) {
#ifdef __CUDA_ARCH__
  return 1.0 / __fma_rn(rate, t, 1.0);
#else
  return 1.0 / std::fma(rate, t, 1.0);
#endif
}
using spillway::test::mul_rn;

__global__ void discount_kernel(const double* rate, const double* times, double* disc, std::size_t dates, std::size_t nt) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < dates * nt;
       i += std::size_t(gridDim.x) * blockDim.x) {
    disc[i] = discount_factor(rate[i / nt], times[i % nt]);
  }
}
__global__ void flows_kernel(const double* disc, const double* flow, double* out, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x) {
    out[i] = mul_rn(disc[i], flow[i]);
  }
}
__global__ void sum_kernel(const double* dflow, double* pv, std::size_t dates, std::size_t nt) {
  for (std::size_t d = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; d < dates; d += std::size_t(gridDim.x) * blockDim.x) {
    double s = 0.0;
    for (std::size_t j = 0; j < nt; ++j) s = __dadd_rn(s, dflow[d * nt + j]);
    pv[d] = s;
  }
}

struct pricer_data {
  std::size_t dates, nt;
  std::vector<double> rate, flow, times;
  std::vector<double> want_dflow, want_pv;
};

pricer_data make_pricer(std::size_t dates, std::size_t nt, const std::string& salt) {
  pricer_data p{dates, nt, std::vector<double>(dates), std::vector<double>(dates * nt), std::vector<double>(nt), {}, {}};
  std::mt19937_64 g(spillway::test::seed(salt));
  std::uniform_real_distribution<double> r(0.0, 0.12), f(-50.0, 150.0);
  for (auto& x : p.rate) x = r(g);
  for (auto& x : p.flow) x = f(g);
  for (std::size_t j = 0; j < nt; ++j) p.times[j] = 0.25 * static_cast<double>(j + 1);
  p.want_dflow.resize(dates * nt);
  p.want_pv.assign(dates, 0.0);
  for (std::size_t d = 0; d < dates; ++d) {
    for (std::size_t j = 0; j < nt; ++j) {
      const double v = mul_rn(discount_factor(p.rate[d], p.times[j]), p.flow[d * nt + j]);
      p.want_dflow[d * nt + j] = v;
      p.want_pv[d] += v;
    }
  }
  return p;
}

template <class In, class Out1, class Out2>
spillway::job_report run_pricer(const pricer_data& p, const In& rate, const In& flow, Out1& dflow, Out2& pv,
                                const spillway::streamed_job_options& o) {
  spillway::streamed_job job(p.dates);
  const auto r = job.input(rate);
  const auto t = job.resident(p.times);
  const auto f = job.input(flow, p.nt);
  const auto disc = job.scratch<double>(p.nt);
  const auto df = job.output(dflow, p.nt);
  const auto v = job.output(pv);
  return job.run(o, [&](const spillway::job_chunk& c) {
    EXPECT_EQ(c.size(t), p.nt);
    EXPECT_EQ(c.size(f), c.count() * p.nt);
    const unsigned grid = static_cast<unsigned>((c.size(disc) + 255) / 256);
    discount_kernel<<<grid, 256, 0, c.stream()>>>(c.data(r), c.data(t), c.data(disc), c.count(), p.nt);
    flows_kernel<<<grid, 256, 0, c.stream()>>>(c.data(disc), c.data(f), c.data(df), c.size(df));
    sum_kernel<<<static_cast<unsigned>((c.count() + 127) / 128), 128, 0, c.stream()>>>(c.data(df), c.data(v), c.count(), p.nt);
    SPILLWAY_CHECK_LAUNCH();
  });
}

template <class V>
std::size_t mismatches(const V& got, const std::vector<double>& want, const char* what) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i] && bad++ < 3) ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", want " << want[i];
  }
  return bad;
}

TEST(StreamedJobGpu, MultiStepPricerPageableMatchesHostBitForBit) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const pricer_data p = make_pricer(20011, 37, "StreamedJobGpu.Pageable");
  std::vector<double> dflow(p.dates * p.nt, std::numeric_limits<double>::quiet_NaN());
  std::vector<double> pv(p.dates, std::numeric_limits<double>::quiet_NaN());
  spillway::streamed_job_options o;
  o.budget = spillway::memory_budget(std::size_t{4} << 20);  // ~1.3 MB of arrays per date-chunk slot: many chunks
  o.slots_per_device = 3;
  const auto rep = run_pricer(p, p.rate, p.flow, dflow, pv, o);
  EXPECT_TRUE(rep.complete());
  EXPECT_GE(rep.tasks_total, 10u) << "the budget should force many chunks";
  EXPECT_EQ(mismatches(dflow, p.want_dflow, "dflow"), 0u);
  EXPECT_EQ(mismatches(pv, p.want_pv, "pv"), 0u);
}

TEST(StreamedJobGpu, MultiStepPricerPinnedWithGranularity) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const pricer_data p = make_pricer(5003, 120, "StreamedJobGpu.Pinned");
  spillway::pinned_buffer<double> rate(p.dates), flow(p.dates * p.nt), dflow(p.dates * p.nt), pv(p.dates);
  std::copy(p.rate.begin(), p.rate.end(), rate.data());
  std::copy(p.flow.begin(), p.flow.end(), flow.data());
  std::fill(dflow.data(), dflow.data() + dflow.size(), std::numeric_limits<double>::quiet_NaN());
  std::fill(pv.data(), pv.data() + pv.size(), std::numeric_limits<double>::quiet_NaN());
  spillway::streamed_job_options o;
  o.budget = spillway::memory_budget(std::size_t{64} << 20);
  o.max_chunk_bytes = std::size_t{1} << 20;  // ~1 MiB slots: about 13 chunks of a multiple of 64 dates
  o.granularity = 64;
  const auto rep = run_pricer(p, rate, flow, dflow, pv, o);
  EXPECT_TRUE(rep.complete());
  EXPECT_GE(rep.tasks_total, 10u);
  EXPECT_EQ(mismatches(dflow.data(), p.want_dflow, "dflow"), 0u);
  EXPECT_EQ(mismatches(pv.data(), p.want_pv, "pv"), 0u);
}

TEST(StreamedJobGpu, FailingComputationNamesItsChunk) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  std::vector<float> in(1 << 16, 1.0f), out(in.size(), -1.0f);
  spillway::streamed_job job(in.size());
  const auto a = job.input(in);
  const auto b = job.output(out);
  spillway::streamed_job_options o;
  o.devices = {0};
  o.max_chunk_bytes = std::size_t{1} << 16;  // 8192 floats per chunk: 8 chunks
  try {
    (void)job.run(o, [&](const spillway::job_chunk& c) {
      if (c.index() == 5) throw std::runtime_error("step 2 of chunk 5 refused");
      SPILLWAY_CUDA_TRY(cudaMemcpyAsync(c.data(b), c.data(a), c.size(a) * sizeof(float), cudaMemcpyDeviceToDevice,
                                        c.stream().value()));
    });
    FAIL() << "no pipeline_error";
  } catch (const spillway::pipeline_error& e) {
    EXPECT_EQ(e.failed_task(), 5u) << e.what();
    EXPECT_NE(std::string(e.what()).find("step 2 of chunk 5 refused"), std::string::npos) << e.what();
    EXPECT_FALSE(e.report().completed[5]);
    // Completed chunks were copied back whole.
    const std::size_t per = job.plan(o, std::size_t{1} << 30).chunk_units();
    for (std::size_t t : e.report().completed_tasks()) {
      for (std::size_t i = t * per; i < (t + 1) * per && i < out.size(); ++i) ASSERT_EQ(out[i], 1.0f) << "chunk " << t;
    }
  }
}

}  // namespace
