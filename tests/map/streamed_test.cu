// Broadcasting through the scheduler's streamed transform: host arrays, budgets small enough to
// force many chunks, checked against the host target.
#include <spillway/core/pinned_buffer.hpp>
#include <spillway/map.cuh>
#include <spillway/map/streamed.cuh>

#include "support/gpu_test_fn.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

using spillway::index_t;

namespace {

struct multiply {
  __host__ __device__ double operator()(double m, double d) const { return m * d; }
};
struct affine {
  __host__ __device__ float operator()(float x, float s, double y) const { return static_cast<float>(x * s + y); }
};

std::vector<double> random_doubles(std::size_t n, std::mt19937_64& g) {
  std::uniform_real_distribution<double> u(0.5, 1.5);
  std::vector<double> v(n);
  for (auto& x : v) x = u(g);
  return v;
}

SPILLWAY_GPU_TEST_FN(StreamedGpu, BroadcastMatchesHostAcrossManyChunks) {
  std::mt19937_64 g(spillway::test::seed("StreamedGpu.Broadcast"));
  const index_t dates = 100;
  const auto mult_by = random_doubles(4000 * 5, g);
  const auto discount = random_doubles(static_cast<std::size_t>(dates) * 20000, g);
  std::vector<double> cv(discount.size(), -1.0);
  const auto ref = spillway::map_host(multiply{}, spillway::make_view(mult_by.data(), {4000, 5}),
                                      spillway::make_view(discount.data(), {dates, 4000, 5}));
  spillway::transform_options o;
  o.budget = spillway::memory_budget(4u << 20);  // 4 MiB: about 2 outer rows per chunk, 3 slots
  o.slots_per_device = 3;
  const auto r = spillway::transform(o, spillway::make_view(cv.data(), {dates, 4000, 5}), multiply{},
                                     spillway::make_view(mult_by.data(), {4000, 5}),
                                     spillway::make_view(discount.data(), {dates, 4000, 5}));
  EXPECT_TRUE(r.complete());
  EXPECT_GE(r.tasks_total, 10u) << "the budget should force many chunks";
  EXPECT_EQ(cv, ref.data);
}

SPILLWAY_GPU_TEST_FN(StreamedGpu, PinnedInputScalarAndNoBroadcast) {
  std::mt19937_64 g(spillway::test::seed("StreamedGpu.Pinned"));
  const index_t rows = 3001, cols = 7;  // primes-ish, nothing resident: element-sized units
  spillway::pinned_buffer<float> x(static_cast<std::size_t>(rows * cols));
  std::uniform_int_distribution<int> d(-100, 100);
  for (auto& v : x) v = static_cast<float>(d(g));
  std::vector<double> y(static_cast<std::size_t>(rows * cols));
  for (auto& v : y) v = d(g);
  std::vector<float> out(y.size(), -1.0f);
  const auto ref = spillway::map_host(affine{}, spillway::ndview<const float>(x.data(), {rows, cols}), 0.5f,
                                      spillway::make_view(y.data(), {rows, cols}));
  spillway::transform_options o;
  o.budget = spillway::memory_budget(64u << 10);
  o.granularity = 100;
  const auto r = spillway::transform(o, spillway::make_view(out.data(), {rows, cols}), affine{},
                                     spillway::ndview<const float>(x.data(), {rows, cols}), 0.5f,
                                     spillway::make_view(y.data(), {rows, cols}));
  EXPECT_TRUE(r.complete());
  EXPECT_GT(r.tasks_total, 3u);
  EXPECT_EQ(out, ref.data);
}

SPILLWAY_GPU_TEST_FN(StreamedGpu, ResidentOperandAlongTheLeadingDimension) {
  std::mt19937_64 g(spillway::test::seed("StreamedGpu.Leading"));
  // (7,1,1) varies along the output's first dimension: a single chunk holds everything.
  const auto a = random_doubles(7, g);
  const auto b = random_doubles(300 * 5, g);
  std::vector<double> out(7 * 300 * 5, -1.0);
  const auto ref = spillway::map_host(multiply{}, spillway::make_view(a.data(), {7, 1, 1}),
                                      spillway::make_view(b.data(), {300, 5}));
  const auto r = spillway::transform(spillway::make_view(out.data(), {7, 300, 5}), multiply{},
                                     spillway::make_view(a.data(), {7, 1, 1}), spillway::make_view(b.data(), {300, 5}));
  EXPECT_TRUE(r.complete());
  EXPECT_EQ(out, ref.data);
}

SPILLWAY_GPU_TEST_FN(StreamedGpu, BadArgumentsThrowBeforeTouchingData) {
  std::vector<double> a(4000 * 5, 1.0), b(10 * 4000 * 5, 2.0), out(b.size(), -1.0);
  const auto before = out;
  try {
    spillway::transform(spillway::make_view(out.data(), {10, 4000, 5}), multiply{},
                        spillway::make_view(a.data(), {4000, 4}), spillway::make_view(b.data(), {10, 4000, 5}));
    FAIL() << "no exception";
  } catch (const spillway::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("argument 0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(spillway::transform(spillway::make_view(out.data(), {10, 4000, 5}), multiply{},
                                   spillway::make_view(a.data(), {4000, 5}).transposed().transposed(),
                                   spillway::make_view(b.data(), {10, 5, 4000}).permuted({0, 2, 1})),
               spillway::logic_error);
  spillway::transform_options tiny;
  tiny.budget = spillway::memory_budget(1024);
  EXPECT_THROW(spillway::transform(tiny, spillway::make_view(out.data(), {10, 4000, 5}), multiply{},
                                   spillway::make_view(a.data(), {4000, 5}), spillway::make_view(b.data(), {10, 4000, 5})),
               spillway::logic_error);
  EXPECT_EQ(out, before);
}

}  // namespace

// ---- no GPU (issue 16 item 7): the broadcasting transform falls back to map_host_into on request ----
TEST(StreamedNoGpu, ErrorByDefaultHostOnRequest) {
  if (spillway::device_count() > 0) GTEST_SKIP() << "this machine has a GPU; the no-GPU behaviour is tested in CI";
  std::mt19937_64 g(spillway::test::seed("StreamedNoGpu"));
  const auto mult_by = random_doubles(40 * 5, g);
  const auto discount = random_doubles(7 * 40 * 5, g);
  std::vector<double> cv(discount.size(), -1.0);
  spillway::transform_options o;
  EXPECT_THROW(spillway::transform(o, spillway::make_view(cv.data(), {7, 40, 5}), multiply{},
                                   spillway::make_view(mult_by.data(), {40, 5}),
                                   spillway::make_view(discount.data(), {7, 40, 5})),
               spillway::no_gpu_error);
  EXPECT_EQ(cv, std::vector<double>(cv.size(), -1.0));
  o.host_fallback = true;
  const auto r = spillway::transform(o, spillway::make_view(cv.data(), {7, 40, 5}), multiply{},
                                     spillway::make_view(mult_by.data(), {40, 5}),
                                     spillway::make_view(discount.data(), {7, 40, 5}));
  EXPECT_TRUE(r.complete());
  const auto ref = spillway::map_host(multiply{}, spillway::make_view(mult_by.data(), {40, 5}),
                                      spillway::make_view(discount.data(), {7, 40, 5}));
  EXPECT_EQ(cv, ref.data);
}

// streamed_map is transform under a name that says which map it is (host arrays, streamed).
TEST(StreamedNames, StreamedMapIsTransform) {
  std::vector<double> a(1000), b(1000), c1(1000, -1.0), c2(1000, -2.0);
  for (int i = 0; i < 1000; ++i) a[static_cast<std::size_t>(i)] = i * 0.5, b[static_cast<std::size_t>(i)] = 3.0 - i;
  spillway::transform_options o;
  o.host_fallback = true;  // runs on the GPU where there is one, on the host otherwise
  spillway::transform(o, spillway::make_view(c1.data(), {10, 100}), multiply{}, spillway::make_view(a.data(), {10, 100}),
                      spillway::make_view(b.data(), {10, 100}));
  spillway::streamed_map(o, spillway::make_view(c2.data(), {10, 100}), multiply{}, spillway::make_view(a.data(), {10, 100}),
                         spillway::make_view(b.data(), {10, 100}));
  EXPECT_EQ(c1, c2);
  EXPECT_EQ(c1[7], a[7] * b[7]);
}
