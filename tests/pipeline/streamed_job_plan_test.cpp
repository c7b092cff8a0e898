// Host-only tests of spillway::streamed_job: how its arrays become the chunk plan, and the checks
// that refuse bad arrays and options before any data or device is touched.
#include <spillway/pipeline/streamed_job.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace {

using spillway::job_array_kind;
using spillway::streamed_job;
using spillway::streamed_job_options;

template <class F>
std::string logic_error_text(F f) {
  try {
    f();
  } catch (const spillway::logic_error& e) {
    return e.what();
  }
  return "(no logic_error)";
}

TEST(StreamedJobPlan, ArraysBecomeThePlansBuffersInOrder) {
  const std::size_t units = 1000;
  std::vector<double> rates(units), flows(units * 12), pv(units);
  std::vector<float> table(300);
  streamed_job job(units);
  const auto r = job.input(rates);
  const auto tab = job.resident(table);
  const auto f = job.input(flows, 12);
  const auto d = job.scratch<double>(12);
  const auto out = job.output(pv);
  EXPECT_EQ(r.kind(), job_array_kind::input);
  EXPECT_EQ(tab.kind(), job_array_kind::resident);
  EXPECT_EQ(tab.per_unit(), 300u);
  EXPECT_EQ(f.per_unit(), 12u);
  EXPECT_EQ(d.kind(), job_array_kind::scratch);
  EXPECT_EQ(out.kind(), job_array_kind::output);

  streamed_job_options o;
  o.slots_per_device = 3;
  o.granularity = 8;
  o.max_chunk_bytes = 0;
  const spillway::plan_request pr = job.plan_request_for(o, std::size_t{1} << 20);
  // Streamed arrays in the order described (inputs, scratch and outputs alike), resident ones as
  // fixed bytes per slot, rounded to the 256-byte buffer alignment.
  EXPECT_EQ(pr.bytes_per_unit, (std::vector<std::size_t>{8, 96, 96, 8}));
  EXPECT_EQ(pr.fixed_slot_bytes, 1280u);  // 300 floats = 1200 bytes -> 1280
  EXPECT_EQ(pr.extent, units);
  EXPECT_EQ(pr.slots, 3u);
  EXPECT_EQ(pr.granularity, 8u);

  const spillway::chunk_plan p = job.plan(o, std::size_t{1} << 20);
  // Per unit 208 bytes; each slot has (1 MiB / 3) bytes, less the resident 1280 and padding.
  EXPECT_GT(p.chunk_units(), 0u);
  EXPECT_EQ(p.chunk_units() % 8, 0u);
  EXPECT_LE(p.device_bytes(), std::size_t{1} << 20);
  std::size_t covered = 0;
  for (const auto& c : p.chunks()) {
    EXPECT_EQ(c.begin, covered);
    covered += c.count;
  }
  EXPECT_EQ(covered, units);
}

TEST(StreamedJobPlan, ChunkCapAndBudgetMinimum) {
  std::vector<double> in(1 << 20), out(1 << 20);
  streamed_job job(in.size());
  (void)job.input(in);
  (void)job.output(out);
  streamed_job_options o;
  o.max_chunk_bytes = std::size_t{1} << 20;  // 1 MiB per slot: 64Ki units of 16 bytes
  const auto p = job.plan(o, std::size_t{1} << 30);
  EXPECT_EQ(p.chunk_units(), std::size_t{1} << 16);
  EXPECT_EQ(p.chunk_count(), 16u);
  // 4 slots of one unit (two 256-byte-aligned buffers) need 2048 bytes: less is refused, saying so.
  const std::string m = logic_error_text([&] { (void)job.plan(o, 1000); });
  EXPECT_NE(m.find("minimum budget"), std::string::npos) << m;
  EXPECT_NE(m.find("2048"), std::string::npos) << m;
}

TEST(StreamedJobPlan, BadArraysAreRefusedNamingThem) {
  std::vector<double> a(100), b(99);
  streamed_job job(100);
  (void)job.input(a);
  std::string m = logic_error_text([&] { (void)job.input(b); });
  EXPECT_NE(m.find("array 1"), std::string::npos) << m;
  EXPECT_NE(m.find("99 elements"), std::string::npos) << m;
  EXPECT_NE(m.find("100 * 1 = 100"), std::string::npos) << m;
  m = logic_error_text([&] { (void)job.input(a, 0); });
  EXPECT_NE(m.find("per_unit must be at least 1"), std::string::npos) << m;
  m = logic_error_text([&] { (void)job.output(static_cast<double*>(nullptr), 1); });
  EXPECT_NE(m.find("null"), std::string::npos) << m;
  m = logic_error_text([&] { (void)job.resident(b.data(), 0); });
  EXPECT_NE(m.find("empty"), std::string::npos) << m;
  m = logic_error_text([&] { (void)streamed_job(std::size_t{1} << 62).scratch<double>(8); });
  EXPECT_NE(m.find("overflow"), std::string::npos) << m;
}

TEST(StreamedJobPlan, BadOptionsAndEmptyJobsAreRefusedBeforeAnyDevice) {
  std::vector<int> a(10), out(10);
  streamed_job empty(10);
  std::string m = logic_error_text([&] { (void)empty.run(streamed_job_options{}, [](const spillway::job_chunk&) {}); });
  EXPECT_NE(m.find("no input, output or scratch"), std::string::npos) << m;
  streamed_job job(10);
  (void)job.input(a);
  (void)job.output(out);
  streamed_job_options o;
  o.slots_per_device = 0;
  m = logic_error_text([&] { (void)job.run(o, [](const spillway::job_chunk&) {}); });
  EXPECT_NE(m.find("slots_per_device"), std::string::npos) << m;
  o = streamed_job_options{};
  o.granularity = 0;
  m = logic_error_text([&] { (void)job.plan(o, 1 << 20); });
  EXPECT_NE(m.find("granularity"), std::string::npos) << m;
}

TEST(StreamedJobPlan, ZeroUnitsIsAnEmptyReport) {
  std::vector<double> none;
  streamed_job job(0);
  (void)job.input(none);
  (void)job.output(none);
  const auto r = job.run(streamed_job_options{}, [](const spillway::job_chunk&) {});
  EXPECT_EQ(r.tasks_total, 0u);
  EXPECT_TRUE(r.complete());
}

}  // namespace
