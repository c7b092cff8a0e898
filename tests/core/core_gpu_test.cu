// GPU tests of the core API. Each test skips with the reason where no GPU is present and fails
// instead under SPILLWAY_REQUIRE_GPU=1.
#include <spillway/core.hpp>
#include <support/expect_throw.hpp>
#include <support/gpu_test.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

std::vector<std::uint32_t> random_words(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint32_t> v(n);
  for (auto& x : v) x = static_cast<std::uint32_t>(rng());
  return v;
}

__global__ void add_one(std::uint32_t* p, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) p[i] += 1u;
}

// Spins for roughly `cycles` so that a missing dependency would show up as a wrong result.
__global__ void slow_scale(std::uint32_t* p, std::size_t n, long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) p[i] *= 3u;
}

TEST(DeviceBufferGpu, AllocateAndFreeOnSeveralStreams) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  spillway::stream_pool pool(4);
  std::vector<spillway::device_buffer<std::uint32_t>> bufs;
  for (std::size_t i = 0; i < 16; ++i) {
    bufs.emplace_back((i + 1) * 1000 + 7, pool.get(i));
    EXPECT_NE(bufs.back().data(), nullptr);
    EXPECT_EQ(bufs.back().size(), (i + 1) * 1000 + 7);
    EXPECT_EQ(bufs.back().stream(), pool.get(i));
  }
  for (std::size_t i = 0; i < bufs.size(); ++i) {
    for (std::size_t j = i + 1; j < bufs.size(); ++j) EXPECT_NE(bufs[i].data(), bufs[j].data());
  }
  bufs.clear();
  pool.synchronize_all();
  SPILLWAY_CUDA_TRY(cudaDeviceSynchronize());
}

TEST(DeviceBufferGpu, RoundTripPinnedIsBitExact) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const std::size_t n = 3'000'017;  // prime: not a multiple of anything convenient
  const auto src = random_words(n, spillway::test::seed("RoundTripPinned"));
  spillway::pinned_buffer<std::uint32_t> in(n), out(n);
  std::memcpy(in.data(), src.data(), n * 4);
  std::memset(out.data(), 0xFF, n * 4);  // poison
  spillway::stream s;
  spillway::device_buffer<std::uint32_t> d(n, s);
  d.fill_bytes_async(0xAB, s);
  d.copy_from_host_async(in.span(), s);
  d.copy_to_host_async(out.span(), s);
  s.synchronize();
  EXPECT_EQ(std::memcmp(out.data(), src.data(), n * 4), 0);
}

TEST(DeviceBufferGpu, RoundTripPageableWithOffsetsIsBitExact) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const std::size_t n = 1'000'003;
  const auto src = random_words(n, spillway::test::seed("RoundTripPageable"));
  std::vector<std::uint32_t> out(n, 0xFFFFFFFFu);
  spillway::stream s;
  spillway::device_buffer<std::uint32_t> d(n + 11, s);
  d.fill_bytes_async(0xCD, s);
  d.copy_from_host_async(cuda::std::span<const std::uint32_t>(src.data(), n), s, 11);
  d.copy_to_host_async(cuda::std::span<std::uint32_t>(out.data(), n), s, 11);
  std::vector<std::uint32_t> head(11, 0);
  d.copy_to_host_async(cuda::std::span<std::uint32_t>(head.data(), 11), s, 0);
  s.synchronize();
  EXPECT_EQ(out, src);
  for (auto h : head) EXPECT_EQ(h, 0xCDCDCDCDu);  // the fill, untouched by the offset copy
}

TEST(DeviceBufferGpu, ZeroSizedAndRangeChecks) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  spillway::stream s;
  spillway::device_buffer<float> empty(0, s);
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_TRUE(empty.empty());
  spillway::device_buffer<float> d(10, s);
  std::vector<float> host(8, 1.0f);
  ASSERT_NO_FATAL_FAILURE(spillway::test::expect_throw_naming(
      [&] { d.copy_from_host_async(cuda::std::span<const float>(host.data(), 8), s, 5); },
      {"10 elements", "5"}));
  EXPECT_THROW(d.copy_to_host_async(cuda::std::span<float>(host.data(), 8), s, 3), spillway::logic_error);
}

TEST(DeviceBufferGpu, ResizeKeepsThePrefix) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  spillway::stream s1, s2;
  const auto src = random_words(5000, spillway::test::seed("Resize"));
  spillway::device_buffer<std::uint32_t> d(5000, s1);
  d.copy_from_host_async(cuda::std::span<const std::uint32_t>(src.data(), src.size()), s1);
  d.resize(9000, s2);  // grow on another stream: ordered after the copy on s1
  EXPECT_EQ(d.size(), 9000u);
  EXPECT_EQ(d.stream(), s2.view());
  std::vector<std::uint32_t> back(5000, 0);
  d.copy_to_host_async(cuda::std::span<std::uint32_t>(back.data(), back.size()), s2);
  s2.synchronize();
  EXPECT_EQ(back, src);
  d.resize(100, s2);
  std::vector<std::uint32_t> small(100, 0);
  d.copy_to_host_async(cuda::std::span<std::uint32_t>(small.data(), small.size()), s2);
  s2.synchronize();
  EXPECT_TRUE(std::equal(small.begin(), small.end(), src.begin()));
  d.resize(0, s2);
  EXPECT_EQ(d.data(), nullptr);
  s2.synchronize();
}

TEST(DeviceBufferGpu, MoveLeavesNoDoubleFree) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  spillway::stream s;
  spillway::device_buffer<double> a(1000, s);
  double* const p = a.data();
  spillway::device_buffer<double> b(std::move(a));
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): checking the moved-from state
  EXPECT_EQ(a.size(), 0u);
  spillway::device_buffer<double> c(10, s);
  c = std::move(b);
  EXPECT_EQ(c.data(), p);
  EXPECT_EQ(b.data(), nullptr);  // NOLINT(bugprone-use-after-move)
  c = std::move(c);              // self-move is a no-op
  EXPECT_EQ(c.data(), p);
  spillway::pinned_buffer<int> h1(100);
  int* const hp = h1.data();
  spillway::pinned_buffer<int> h2(std::move(h1));
  EXPECT_EQ(h2.data(), hp);
  EXPECT_EQ(h1.data(), nullptr);  // NOLINT(bugprone-use-after-move)
  s.synchronize();
  SPILLWAY_CUDA_TRY(cudaDeviceSynchronize());  // any double free would surface as an error here
}

TEST(DeviceBufferGpu, ImpossibleAllocationThrowsOutOfMemoryWithSizes) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  spillway::stream s;
  const auto info = spillway::get_memory_info(spillway::current_device());
  const std::size_t ask = info.total_bytes * 4;  // more than the card has
  try {
    spillway::device_buffer<unsigned char> d(ask, s);
    FAIL() << "allocated " << ask << " bytes on a card of " << info.total_bytes;
  } catch (const spillway::out_of_memory& e) {
    EXPECT_EQ(e.requested_bytes(), ask);
    EXPECT_LE(e.available_bytes(), info.total_bytes);
    const std::string w = e.what();
    EXPECT_NE(w.find(std::to_string(ask)), std::string::npos) << w;
    EXPECT_NE(w.find("free"), std::string::npos) << w;
  }
  // The device is still usable afterwards.
  spillway::device_buffer<int> ok(1000, s);
  s.synchronize();
}

TEST(StreamEventGpu, CrossStreamOrderingWithEvents) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const std::size_t n = 1 << 20;
  const auto src = random_words(n, spillway::test::seed("CrossStream"));
  spillway::stream producer, consumer;
  spillway::device_buffer<std::uint32_t> d(n, producer);
  d.copy_from_host_async(cuda::std::span<const std::uint32_t>(src.data(), n), producer);
  // A slow kernel on the producer; the consumer's increment must wait for it via the event.
  slow_scale<<<static_cast<unsigned>((n + 255) / 256), 256, 0, producer.value()>>>(d.data(), n, 2'000'000);
  SPILLWAY_CHECK_LAUNCH();
  spillway::event done;
  done.record(producer);
  consumer.view().wait(done);
  add_one<<<static_cast<unsigned>((n + 255) / 256), 256, 0, consumer.value()>>>(d.data(), n);
  SPILLWAY_CHECK_LAUNCH();
  std::vector<std::uint32_t> out(n, 0);
  d.copy_to_host_async(cuda::std::span<std::uint32_t>(out.data(), n), consumer);
  consumer.synchronize();
  EXPECT_TRUE(done.is_complete());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) bad += out[i] != src[i] * 3u + 1u;
  EXPECT_EQ(bad, 0u) << "consumer ran before the producer's kernel finished";
  d.set_stream(consumer);
}

TEST(StreamEventGpu, StreamPoolIsRoundRobinAndStreamsAreDistinct) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  spillway::stream_pool pool(3);
  EXPECT_EQ(pool.size(), 3u);
  const auto a = pool.next(), b = pool.next(), c = pool.next(), d = pool.next();
  EXPECT_NE(a, b);
  EXPECT_NE(b, c);
  EXPECT_NE(a, c);
  EXPECT_EQ(a, d);
  EXPECT_EQ(pool.get(4), pool.get(1));
  EXPECT_THROW(spillway::stream_pool(0), spillway::logic_error);
  spillway::stream moved_from;
  spillway::stream taken(std::move(moved_from));
  EXPECT_THROW((void)moved_from.view(), spillway::logic_error);  // NOLINT(bugprone-use-after-move)
  taken.synchronize();
  EXPECT_TRUE(taken.view().is_idle());
}

TEST(StreamEventGpu, EventTimerMeasuresGpuTime) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  spillway::stream s;
  spillway::device_buffer<std::uint32_t> d(256, s);
  d.fill_bytes_async(1, s);
  int rate_khz = 0;
  SPILLWAY_CUDA_TRY(cudaDeviceGetAttribute(&rate_khz, cudaDevAttrClockRate, spillway::current_device()));
  spillway::event_timer t(s);
  slow_scale<<<1, 256, 0, s.value()>>>(d.data(), 256, 20'000'000);  // >= ~10 ms at <= 2 GHz
  SPILLWAY_CHECK_LAUNCH();
  const float ms = t.stop();
  EXPECT_GT(ms, 5.0f);
  EXPECT_LT(ms, 10'000.0f);
  const auto samples = spillway::time_on_stream(
      s, [&](spillway::stream_view st) { d.fill_bytes_async(2, st); }, 1, 5);
  EXPECT_EQ(samples.size(), 5u);
  for (double x : samples) EXPECT_GE(x, 0.0);
}

TEST(DeviceGuardGpu, RestoresTheCurrentDevice) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const int n = spillway::device_count();
  SPILLWAY_CUDA_TRY(cudaSetDevice(0));
  {
    spillway::device_guard g(n - 1);
    EXPECT_EQ(spillway::current_device(), n - 1);
    {
      spillway::device_guard inner(0);
      EXPECT_EQ(spillway::current_device(), 0);
    }
    EXPECT_EQ(spillway::current_device(), n - 1);
  }
  EXPECT_EQ(spillway::current_device(), 0);
  try {
    spillway::device_guard bad(n + 5);
    FAIL() << "no throw";
  } catch (const spillway::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(n + 5)), std::string::npos);
  }
  EXPECT_EQ(spillway::current_device(), 0);  // a failed guard leaves the device unchanged
}

TEST(HostMemoryGpu, RegistrationPinsCallerMemoryAndReleasesIt) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const std::size_t n = 1 << 20;
  auto src = random_words(n, spillway::test::seed("Registration"));
  EXPECT_FALSE(spillway::is_page_locked(src.data()));
  {
    spillway::host_registration reg(src.data(), n * 4);
    EXPECT_TRUE(reg.active());
    EXPECT_TRUE(spillway::is_page_locked(src.data()));
    EXPECT_THROW(spillway::host_registration(src.data(), n * 4), spillway::logic_error);
    spillway::stream s;
    spillway::device_buffer<std::uint32_t> d(n, s);
    std::vector<std::uint32_t> out(n, 0xFFFFFFFFu);
    d.copy_from_host_async(cuda::std::span<const std::uint32_t>(src.data(), n), s);
    d.copy_to_host_async(cuda::std::span<std::uint32_t>(out.data(), n), s);
    s.synchronize();
    EXPECT_EQ(out, src);
  }
  EXPECT_FALSE(spillway::is_page_locked(src.data()));
  spillway::pinned_buffer<char> p(4096);
  EXPECT_TRUE(spillway::is_page_locked(p.data()));
}

TEST(DevicePropertiesGpu, QueriesAreSane) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto p = spillway::get_device_properties(0);
  EXPECT_FALSE(p.name.empty());
  EXPECT_GE(p.compute_capability(), 75);
  EXPECT_GT(p.multiprocessors, 0);
  EXPECT_GT(p.total_memory, std::size_t{1} << 30);
  EXPECT_TRUE(p.memory_pools);
  const auto m = spillway::get_memory_info(0);
  EXPECT_GT(m.free_bytes, 0u);
  EXPECT_LE(m.free_bytes, m.total_bytes);
  const auto b = spillway::memory_budget::default_for(0);
  EXPECT_GT(b.bytes(), 0u);
  EXPECT_LE(b.bytes(), m.total_bytes);
}

TEST(MemoryPoolGpu, PoolIsSpillwaysOwnAndTrimmable) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const int dev = spillway::current_device();
  cudaMemPool_t ours = spillway::device_pool(dev);
  cudaMemPool_t dflt = nullptr;
  SPILLWAY_CUDA_TRY(cudaDeviceGetDefaultMemPool(&dflt, dev));
  EXPECT_NE(ours, dflt);
  EXPECT_EQ(spillway::device_pool(dev), ours);  // one per device
  std::uint64_t threshold = 0;
  SPILLWAY_CUDA_TRY(cudaMemPoolGetAttribute(ours, cudaMemPoolAttrReleaseThreshold, &threshold));
  EXPECT_EQ(threshold, spillway::pool_release_threshold);
  spillway::stream s;
  {
    spillway::device_buffer<char> d(64 << 20, s);
    cudaPointerAttributes a{};
    SPILLWAY_CUDA_TRY(cudaPointerGetAttributes(&a, d.data()));
    EXPECT_EQ(a.type, cudaMemoryTypeDevice);
  }
  s.synchronize();
  std::uint64_t reserved = 0;
  SPILLWAY_CUDA_TRY(cudaMemPoolGetAttribute(ours, cudaMemPoolAttrReservedMemCurrent, &reserved));
  EXPECT_GE(reserved, std::uint64_t{64} << 20);  // cached, not released
  spillway::trim_device_pool(dev);
  SPILLWAY_CUDA_TRY(cudaMemPoolGetAttribute(ours, cudaMemPoolAttrReservedMemCurrent, &reserved));
  EXPECT_EQ(reserved, 0u);
}

// The default budget counts what spillway's pool holds idle as free: a job's buffers, freed back
// to the pool, leave the next call's default budget where the first call's was.
TEST(MemoryPoolGpu, DefaultBudgetCountsIdlePoolMemoryAsFree) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const int dev = spillway::current_device();
  spillway::trim_device_pool(dev);
  const std::size_t held = std::size_t{2} << 30;
  if (spillway::get_memory_info(dev).free_bytes < 2 * held)
    GTEST_SKIP() << "needs 4 GiB free on device " << dev;
  const std::size_t before = spillway::memory_budget::default_for(dev).bytes();
  EXPECT_EQ(spillway::pool_idle_bytes(dev), 0u);
  spillway::stream s;
  { spillway::device_buffer<char> d(held, s); }
  s.synchronize();
  EXPECT_GE(spillway::pool_idle_bytes(dev), held);
  const std::size_t after = spillway::memory_budget::default_for(dev).bytes();
  // Without the idle bytes the budget would drop by 0.8 x 2 GiB; other processes may move it a little.
  const auto diff = static_cast<double>(after) - static_cast<double>(before);
  EXPECT_LT(std::abs(diff), 256.0 * (1 << 20)) << "before " << before << ", after " << after;
  spillway::trim_device_pool(dev);
  EXPECT_EQ(spillway::pool_idle_bytes(dev), 0u);
}

}  // namespace
