// Host-only tests of the core API: everything here runs (and must pass) on a machine with no GPU,
// and under ASan/UBSan.
#include <spillway/core.hpp>
#include <spillway/core/large_vector.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace {

TEST(CoreErrors, CudaTryReportsCallFileLineNameAndText) {
  try {
    SPILLWAY_CUDA_TRY(cudaErrorInvalidValue);
    FAIL() << "SPILLWAY_CUDA_TRY did not throw";
  } catch (const spillway::cuda_error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.code(), cudaErrorInvalidValue);
    EXPECT_NE(what.find("cudaErrorInvalidValue"), std::string::npos) << what;
    EXPECT_NE(what.find("core_host_test.cpp"), std::string::npos) << what;
    EXPECT_NE(what.find("invalid argument"), std::string::npos) << what;
  }
}

TEST(CoreErrors, CudaTryPassesOnSuccessAndEvaluatesOnce) {
  int calls = 0;
  auto f = [&] {
    ++calls;
    return cudaSuccess;
  };
  EXPECT_NO_THROW(SPILLWAY_CUDA_TRY(f()));
  EXPECT_EQ(calls, 1);
}

TEST(CoreErrors, OutOfMemoryCarriesSizes) {
  const spillway::out_of_memory e("nope", 123, 45);
  EXPECT_EQ(e.requested_bytes(), 123u);
  EXPECT_EQ(e.available_bytes(), 45u);
}

TEST(CoreErrors, ExpectsThrowsLogicErrorWithMessage) {
  EXPECT_THROW(SPILLWAY_EXPECTS(1 + 1 == 3, "arithmetic is off"), spillway::logic_error);
  EXPECT_NO_THROW(SPILLWAY_EXPECTS(1 + 1 == 2, "fine"));
}

TEST(CoreErrors, FormatBytes) {
  EXPECT_EQ(spillway::detail::format_bytes(12), "12 bytes");
  EXPECT_EQ(spillway::detail::format_bytes(3u << 20), "3145728 bytes (3.00 MiB)");
  EXPECT_EQ(spillway::detail::format_bytes(std::size_t{5} << 30), "5368709120 bytes (5.00 GiB)");
}

TEST(CoreDevice, NoGpuCodesAreRecognised) {
  EXPECT_TRUE(spillway::detail::is_no_gpu_error(cudaErrorNoDevice));
  EXPECT_TRUE(spillway::detail::is_no_gpu_error(cudaErrorInsufficientDriver));
  EXPECT_FALSE(spillway::detail::is_no_gpu_error(cudaErrorInvalidValue));
  EXPECT_FALSE(spillway::detail::is_no_gpu_error(cudaSuccess));
}

TEST(CoreDevice, CountAndReasonAgree) {
  const int n = spillway::device_count();
  EXPECT_GE(n, 0);
  EXPECT_EQ(spillway::gpu_available(), n > 0);
  EXPECT_EQ(spillway::no_gpu_reason().empty(), n > 0);
  EXPECT_EQ(spillway::all_devices().size(), static_cast<std::size_t>(n));
}

TEST(CoreDevice, NonexistentDeviceIsALogicErrorNamingIt) {
  const int bad = spillway::device_count() + 3;
  try {
    (void)spillway::get_device_properties(bad);
    FAIL() << "no throw";
  } catch (const spillway::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("device " + std::to_string(bad)), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)spillway::get_device_properties(-1), spillway::logic_error);
}

TEST(CoreStreamView, RejectsTheNullStreamAtRunTime) {
  cudaStream_t null_stream = nullptr;
  try {
    spillway::stream_view v(null_stream);
    (void)v;
    FAIL() << "no throw";
  } catch (const spillway::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("null"), std::string::npos);
  }
  static_assert(!std::is_constructible_v<spillway::stream_view, int>, "0 must not build a stream_view");
  static_assert(!std::is_constructible_v<spillway::stream_view, std::nullptr_t>,
                "nullptr must not build a stream_view");
  static_assert(!std::is_default_constructible_v<spillway::stream_view>, "no implicit default stream");
  EXPECT_EQ(spillway::stream_view::per_thread().value(), cudaStreamPerThread);
}

TEST(CoreMemoryBudget, ValidatesArguments) {
  EXPECT_THROW(spillway::memory_budget(0), spillway::logic_error);
  EXPECT_EQ(spillway::memory_budget(1234).bytes(), 1234u);
  try {
    (void)spillway::memory_budget::fraction_of_free(1.5, 0);
    FAIL() << "no throw";
  } catch (const spillway::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("1.5"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)spillway::memory_budget::fraction_of_free(0.0, 0), spillway::logic_error);
  EXPECT_THROW((void)spillway::memory_budget::default_for_all(std::vector<int>{}), spillway::logic_error);
  using namespace spillway;
  EXPECT_EQ(3_GiB, std::size_t{3} << 30);
  EXPECT_EQ(5_MiB, std::size_t{5} << 20);
  EXPECT_EQ(7_KiB, std::size_t{7} << 10);
}

TEST(CoreTiming, MedianOfOddEvenAndEmpty) {
  EXPECT_DOUBLE_EQ(spillway::median({}), 0.0);
  EXPECT_DOUBLE_EQ(spillway::median({5.0}), 5.0);
  EXPECT_DOUBLE_EQ(spillway::median({3.0, 1.0, 2.0}), 2.0);
  EXPECT_DOUBLE_EQ(spillway::median({4.0, 1.0, 3.0, 2.0}), 2.5);
  EXPECT_DOUBLE_EQ(spillway::median({9.0, 1.0, 1.0, 1.0, 100.0}), 1.0);
}

TEST(CoreBuffers, SizeOverflowIsALogicErrorBeforeAnyCudaCall) {
  // Overflow is checked before touching the device, so this holds with or without a GPU.
  EXPECT_THROW(spillway::pinned_buffer<double>(~std::size_t{0} / 4), spillway::logic_error);
}

TEST(CoreBuffers, EmptyBuffersNeedNoGpu) {
  spillway::pinned_buffer<int> p(0);
  EXPECT_TRUE(p.empty());
  EXPECT_EQ(p.data(), nullptr);
  spillway::device_buffer<int> d;
  EXPECT_TRUE(d.empty());
  spillway::host_registration r(nullptr, 0);
  EXPECT_FALSE(r.active());
  EXPECT_THROW(spillway::host_registration(nullptr, 16), spillway::logic_error);
}

}  // namespace

// detail::size_large sizes a vector for a large result: n value-initialized elements whatever it
// held before (more or fewer, within its capacity or past it), its storage advised as huge pages
// where that is offered (only how fast it faults in changes).
TEST(CoreLargeVector, SizesToZerosWhateverItHeld) {
  std::vector<std::int64_t> v(10, 7);
  spillway::detail::size_large(v, 3);
  EXPECT_EQ(v, std::vector<std::int64_t>(3, 0));
  v.assign(5, 9);
  spillway::detail::size_large(v, 5);  // within the capacity: overwritten
  EXPECT_EQ(v, std::vector<std::int64_t>(5, 0));
  const std::size_t big = (std::size_t{8} << 20) + 3;  // 64 MiB + 24 bytes: past 2 MiB pages, unaligned end
  std::vector<float> f(4, 1.5f);
  spillway::detail::size_large(f, big);
  ASSERT_EQ(f.size(), big);
  EXPECT_EQ(std::count(f.begin(), f.end(), 0.0f), static_cast<std::ptrdiff_t>(big));
  f[big - 1] = 2.0f;  // every element writable
  spillway::detail::size_large(f, 0);
  EXPECT_TRUE(f.empty());
  spillway::detail::advise_huge_pages(nullptr, big);  // nothing to advise: no effect
#if defined(__linux__)
  EXPECT_GT(spillway::detail::host_memory_bytes(), 1e8);  // what the sizing ahead compares with
#endif
}

// detail::release_unused gives back the pages past a vector's size: what it holds stays, and the
// vector can still grow into its capacity (the released elements come back as zeros).
TEST(CoreLargeVector, ReleaseUnusedKeepsTheElementsAndTheCapacity) {
  const std::size_t cap = std::size_t{4} << 20;  // 32 MiB of int64
  std::vector<std::int64_t> v;
  spillway::detail::size_large(v, cap);
  for (std::size_t x = 0; x < cap; ++x) v[x] = static_cast<std::int64_t>(x) * 3 + 1;
  const std::size_t keep = 1000003;
  v.resize(keep);
  spillway::detail::release_unused(v);
  ASSERT_EQ(v.size(), keep);
  EXPECT_EQ(v.capacity(), cap);
  for (std::size_t x = 0; x < keep; ++x) ASSERT_EQ(v[x], static_cast<std::int64_t>(x) * 3 + 1) << x;
  v.resize(cap);  // value-initialized past the old size
  for (std::size_t x = keep; x < cap; ++x) ASSERT_EQ(v[x], 0) << x;
  std::vector<std::int64_t> empty;
  spillway::detail::release_unused(empty);  // nothing to give back
  EXPECT_TRUE(empty.empty());
}
