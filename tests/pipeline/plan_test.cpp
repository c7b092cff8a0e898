// Host-only tests of the chunk planner, the operand descriptors and the host transform.
#include <spillway/pipeline/host_operand.hpp>
#include <spillway/pipeline/job.hpp>
#include <spillway/pipeline/plan.hpp>
#include <spillway/pipeline/transform_host.hpp>

#include "support/expect_throw.hpp"
#include "support/gpu_test.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

using spillway::chunk_plan;
using spillway::make_chunk_plan;
using spillway::plan_request;

plan_request req(std::size_t extent, std::vector<std::size_t> bpu, std::size_t budget, std::size_t slots = 3) {
  plan_request r;
  r.extent = extent;
  r.bytes_per_unit = std::move(bpu);
  r.budget_bytes = budget;
  r.slots = slots;
  return r;
}

// Every chunk list must tile [0, extent) exactly, in order, with full chunks except the last.
void expect_tiles(const chunk_plan& p, std::size_t extent) {
  const auto cs = p.chunks();
  ASSERT_EQ(cs.size(), p.chunk_count());
  std::size_t next = 0;
  for (std::size_t i = 0; i < cs.size(); ++i) {
    EXPECT_EQ(cs[i].index, i);
    EXPECT_EQ(cs[i].begin, next);
    EXPECT_GT(cs[i].count, 0u);
    if (i + 1 < cs.size()) {
      EXPECT_EQ(cs[i].count, p.chunk_units());
    }
    EXPECT_LE(cs[i].count, p.chunk_units());
    next = cs[i].end();
  }
  EXPECT_EQ(next, extent);
}

// The slot sizes the plan reports hold a full chunk of every buffer at an aligned offset.
void expect_layout(const chunk_plan& p, const plan_request& r) {
  ASSERT_EQ(p.buffer_offsets().size(), r.bytes_per_unit.size());
  ASSERT_EQ(p.buffer_bytes().size(), r.bytes_per_unit.size());
  for (std::size_t k = 0; k < r.bytes_per_unit.size(); ++k) {
    EXPECT_EQ(p.buffer_offsets()[k] % r.alignment, 0u);
    EXPECT_EQ(p.buffer_bytes()[k], p.chunk_units() * r.bytes_per_unit[k]);
    EXPECT_LE(p.buffer_offsets()[k] + p.buffer_bytes()[k], p.slot_bytes());
    if (k > 0) {
      EXPECT_GE(p.buffer_offsets()[k], p.buffer_offsets()[k - 1] + p.buffer_bytes()[k - 1]);
    }
  }
  EXPECT_LE(p.device_bytes(), r.budget_bytes);
}

TEST(PipelinePlan, ExtentZeroHasNoChunks) {
  const auto p = make_chunk_plan(req(0, {8, 8, 8}, 1024));
  EXPECT_EQ(p.chunk_count(), 0u);
  EXPECT_EQ(p.device_bytes(), 0u);
  EXPECT_TRUE(p.chunks().empty());
  EXPECT_THROW((void)p.at(0), spillway::logic_error);
}

TEST(PipelinePlan, ExtentOneIsOneChunkOneSlot) {
  const auto r = req(1, {8, 8, 8}, 1 << 20);
  const auto p = make_chunk_plan(r);
  EXPECT_EQ(p.chunk_count(), 1u);
  EXPECT_EQ(p.chunk_units(), 1u);
  EXPECT_EQ(p.slots(), 1u);  // never more slots than chunks
  EXPECT_EQ(p.at(0), (spillway::chunk{0, 0, 1}));
  expect_layout(p, r);
}

TEST(PipelinePlan, PrimeExtentWithRemainder) {
  // 3 buffers of 8 B per unit, 256-B alignment, 3 slots, 3 * 3 * 8 * 1000 = 72000 B of data room.
  auto r = req(10007, {8, 8, 8}, 3 * 3 * 8 * 1000 + 3 * 3 * 256);
  const auto p = make_chunk_plan(r);
  expect_tiles(p, 10007);
  expect_layout(p, r);
  EXPECT_EQ(p.slots(), 3u);
  // The chunk is the largest that fits: one more unit per buffer would exceed the budget.
  std::size_t padded_next = 0;
  for (std::size_t b : r.bytes_per_unit) padded_next += ((p.chunk_units() + 1) * b + 255) / 256 * 256;
  EXPECT_GT(3 * padded_next, r.budget_bytes);
  EXPECT_EQ(p.chunk_count(), (10007 + p.chunk_units() - 1) / p.chunk_units());
  EXPECT_NE(10007 % p.chunk_units(), 0u);  // a real remainder chunk
  EXPECT_EQ(p.at(p.chunk_count() - 1).count, 10007 % p.chunk_units());
}

TEST(PipelinePlan, MixedBytesPerUnitAndGranularity) {
  auto r = req(1000003, {1, 4, 8, 2}, 1 << 20, 4);
  r.granularity = 128;
  const auto p = make_chunk_plan(r);
  expect_tiles(p, 1000003);
  expect_layout(p, r);
  EXPECT_EQ(p.chunk_units() % 128, 0u);
  EXPECT_GE(p.chunk_count(), 16u);
}

TEST(PipelinePlan, GranularityLargerThanExtentIsOneChunk) {
  auto r = req(13, {4}, 4096);
  r.granularity = 1024;
  const auto p = make_chunk_plan(r);
  EXPECT_EQ(p.chunk_count(), 1u);
  EXPECT_EQ(p.at(0).count, 13u);
}

TEST(PipelinePlan, MaxSlotBytesCapsTheChunk) {
  auto r = req(1 << 20, {8, 8, 8}, std::size_t{1} << 30);
  r.max_slot_bytes = 24 * 4096;
  const auto p = make_chunk_plan(r);
  EXPECT_EQ(p.chunk_units(), 4096u);
  EXPECT_EQ(p.chunk_count(), 256u);
  expect_tiles(p, 1 << 20);
  // A cap below one granule never fails a budget that holds a granule.
  r.max_slot_bytes = 1;
  const auto q = make_chunk_plan(r);
  EXPECT_EQ(q.chunk_units(), 1u);
}

TEST(PipelinePlan, BudgetTooSmallStatesTheMinimum) {
  // One unit of three 8-byte buffers, each padded to 256 B, in 3 slots: 2304 bytes minimum.
  const auto r = req(100, {8, 8, 8}, 2303);
  ASSERT_NO_FATAL_FAILURE(spillway::test::expect_throw_naming(
      [&] { (void)make_chunk_plan(r); }, {"2303", "2304", "minimum budget"}));
  // Exactly the minimum works; the alignment padding holds 32 units of 8 B, so 4 chunks.
  const auto p = make_chunk_plan(req(100, {8, 8, 8}, 2304));
  EXPECT_EQ(p.chunk_units(), 32u);
  EXPECT_EQ(p.chunk_count(), 4u);
  EXPECT_EQ(p.device_bytes(), 2304u);
}

TEST(PipelinePlan, MinimumCountsGranulesAndFixedScratch) {
  auto r = req(10000, {4}, 1);
  r.granularity = 1000;  // 4000 B per granule
  r.fixed_slot_bytes = 100;  // padded to 256
  r.slots = 2;
  const std::size_t min = 2 * (4096 + 256);
  r.budget_bytes = min - 1;
  EXPECT_THROW((void)make_chunk_plan(r), spillway::logic_error);
  r.budget_bytes = min;
  const auto p = make_chunk_plan(r);
  EXPECT_EQ(p.chunk_units(), 1000u);
  EXPECT_EQ(p.slot_bytes(), 4096u + 256u);
}

TEST(PipelinePlan, MalformedRequestsNameTheField) {
  auto expect_msg = [](const plan_request& r, const char* needle) {
    try {
      (void)make_chunk_plan(r);
      ADD_FAILURE() << "expected logic_error mentioning " << needle;
    } catch (const spillway::logic_error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_msg(req(10, {}, 100), "bytes_per_unit");
  expect_msg(req(10, {8, 0}, 100), "bytes_per_unit[1]");
  expect_msg(req(10, {8}, 100, 0), "slots");
  auto g = req(10, {8}, 100);
  g.granularity = 0;
  expect_msg(g, "granularity");
  auto a = req(10, {8}, 100);
  a.alignment = 48;
  expect_msg(a, "alignment");
  expect_msg(req(10, {8}, 0), "budget_bytes");
}

TEST(PipelinePlan, SixtyFourBitExtent) {
  // 6e9 units (past 2^32) of 1 byte with a 1 GiB budget: offsets need 64 bits.
  const std::size_t extent = 6'000'000'000ULL;
  const auto r = req(extent, {1, 1}, std::size_t{1} << 30, 4);
  const auto p = make_chunk_plan(r);
  expect_layout(p, r);
  const auto last = p.at(p.chunk_count() - 1);
  EXPECT_EQ(last.end(), extent);
  EXPECT_GT(last.begin, std::size_t{1} << 32);
}

TEST(PipelinePlan, RandomRequestsAlwaysTileAndFit) {
  std::mt19937_64 rng(spillway::test::seed("PipelinePlan.Random"));
  for (int it = 0; it < 2000; ++it) {
    plan_request r;
    r.extent = rng() % 100000;
    const std::size_t nb = 1 + rng() % 4;
    for (std::size_t k = 0; k < nb; ++k) r.bytes_per_unit.push_back(1 + rng() % 16);
    r.slots = 1 + rng() % 6;
    r.granularity = 1 + rng() % 300;
    r.alignment = std::size_t{1} << (rng() % 10);
    r.fixed_slot_bytes = rng() % 3 == 0 ? rng() % 5000 : 0;
    r.max_slot_bytes = rng() % 3 == 0 ? rng() % 200000 : 0;
    r.budget_bytes = 1 + rng() % 2000000;
    try {
      const auto p = make_chunk_plan(r);
      expect_tiles(p, r.extent);
      if (r.extent > 0) {
        expect_layout(p, r);
        const std::size_t min_units = r.extent < r.granularity ? r.extent : r.granularity;
        EXPECT_GE(p.chunk_units(), min_units);
        if (p.chunk_count() > 1) {
          EXPECT_EQ(p.chunk_units() % r.granularity, 0u);
        }
      }
    } catch (const spillway::logic_error& e) {
      // Only a too-small budget may fail here; its message states the minimum.
      EXPECT_NE(std::string(e.what()).find("minimum budget"), std::string::npos) << e.what();
    }
    if (HasFailure()) {
      ADD_FAILURE() << "iteration " << it;
      return;
    }
  }
}

TEST(PipelineOperand, DescriptorsFromContainers) {
  std::vector<double> v(17, 1.0);
  const auto in = spillway::host_input(v);
  EXPECT_EQ(in.data, v.data());
  EXPECT_EQ(in.size, 17u);
  EXPECT_EQ(in.memory, spillway::host_memory::detect);
  auto out = spillway::host_output(v, spillway::host_memory::pageable);
  EXPECT_EQ(out.data, v.data());
  EXPECT_EQ(out.memory, spillway::host_memory::pageable);
  // Ordinary heap memory is never page-locked.
  EXPECT_EQ(spillway::detail::resolve_memory(spillway::host_memory::detect, v.data(), 17 * sizeof(double)),
            spillway::host_memory::pageable);
}

struct fma3 {
  double operator()(double a, float b, std::int32_t c) const { return a * b + c; }
};

TEST(PipelineTransformHost, MatchesAPlainLoop) {
  std::mt19937_64 rng(spillway::test::seed("PipelineTransformHost"));
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{31}, std::size_t{65537}, std::size_t{300007}}) {
    std::vector<double> a(n);
    std::vector<float> b(n);
    std::vector<std::int32_t> c(n);
    std::uniform_real_distribution<double> u(-10, 10);
    for (std::size_t i = 0; i < n; ++i) {
      a[i] = u(rng);
      b[i] = static_cast<float>(u(rng));
      c[i] = static_cast<std::int32_t>(rng() % 1000) - 500;
    }
    std::vector<double> out(n);
    if (n > 0) std::memset(out.data(), 0xFF, n * sizeof(double));  // NaN poison (memset of null is UB)
    spillway::transform_on_host(out, fma3{}, a, b, c);
    for (std::size_t i = 0; i < n; ++i) {
      const double want = a[i] * b[i] + c[i];
      ASSERT_EQ(std::memcmp(&out[i], &want, sizeof want), 0) << "n=" << n << " i=" << i;
    }
  }
}

TEST(PipelineTransformHost, SizeMismatchThrowsAndLeavesOutputAlone) {
  std::vector<double> a(10, 1.0), b(9, 2.0), out(10, 7.0);
  try {
    spillway::transform_on_host(out, fma3{}, a, b, std::vector<std::int32_t>(10));
    FAIL() << "expected logic_error";
  } catch (const spillway::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("input 1 has 9 elements"), std::string::npos) << e.what();
  }
  for (double x : out) EXPECT_EQ(x, 7.0);
}

TEST(PipelineReport, CompletedTasksAndPipelineErrorNesting) {
  spillway::job_report r;
  r.tasks_total = 4;
  r.completed = {true, false, true, false};
  r.tasks_completed = 2;
  EXPECT_FALSE(r.complete());
  EXPECT_EQ(r.completed_tasks(), (std::vector<std::size_t>{0, 2}));
  try {
    try {
      throw std::runtime_error("boom");
    } catch (...) {
      throw spillway::pipeline_error("job failed", 1, 0, r);
    }
  } catch (const spillway::pipeline_error& e) {
    EXPECT_EQ(e.failed_task(), 1u);
    EXPECT_EQ(e.report().completed_tasks(), (std::vector<std::size_t>{0, 2}));
    try {
      std::rethrow_exception(e.cause());
    } catch (const std::runtime_error& inner) {
      EXPECT_STREQ(inner.what(), "boom");
    }
  }
}

}  // namespace
