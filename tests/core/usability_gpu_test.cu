// GPU tests of the conveniences a new user reaches for first (issue 16): device_buffer from and to
// host containers, an owned stream passed straight to a kernel launch.
#include <spillway/core.hpp>
#include <support/gpu_test.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace {

__global__ void triple(std::int64_t* p, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) p[i] *= 3;
}

std::vector<std::int64_t> random_values(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> v(n);
  for (auto& x : v) x = static_cast<std::int64_t>(rng() >> 8);
  return v;
}

}  // namespace

TEST(DeviceBufferUsabilityGpu, FromHostThenKernelOnOwnedStreamThenToHost) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  // 1,000,003 elements: not a multiple of the block; the launch takes the owned stream itself.
  const auto in = random_values(1000003, spillway::test::seed("DeviceBufferUsabilityGpu.FromHost"));
  spillway::stream s;
  auto d = spillway::device_buffer<std::int64_t>::from_host(in, s);
  ASSERT_EQ(d.size(), in.size());
  triple<<<static_cast<unsigned>((in.size() + 255) / 256), 256, 0, s>>>(d.data(), d.size());
  SPILLWAY_CUDA_TRY(cudaGetLastError());
  const std::vector<std::int64_t> out = d.to_host(s);
  ASSERT_EQ(out.size(), in.size());
  for (std::size_t i = 0; i < in.size(); ++i) ASSERT_EQ(out[i], 3 * in[i]) << "element " << i;
}

TEST(DeviceBufferUsabilityGpu, FromHostSpanAndEmpty) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto in = random_values(77, spillway::test::seed("DeviceBufferUsabilityGpu.Span"));
  spillway::stream s;
  // A sub-span: elements 5..69 only.
  auto d = spillway::device_buffer<std::int64_t>::from_host(cuda::std::span<const std::int64_t>(in.data() + 5, 65), s);
  const auto out = d.to_host(s);
  EXPECT_EQ(out, std::vector<std::int64_t>(in.begin() + 5, in.begin() + 70));
  auto e = spillway::device_buffer<std::int64_t>::from_host(std::vector<std::int64_t>{}, s);
  EXPECT_TRUE(e.empty());
  EXPECT_TRUE(e.to_host(s).empty());
}
