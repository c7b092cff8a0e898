// GPU tests of spillway::transform: many chunks under a tiny budget, bit-exact against the host,
// pinned / registered / pageable operands, functor kinds, bad arguments, cancel, 64-bit sizes,
// several devices.
#include <spillway/core.hpp>
#include <spillway/pipeline.cuh>

#include "support/gpu_test.hpp"
#include "support/round_once.cuh"

#include <cuda/functional>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

using spillway::test::mul_rn;

struct multiplies {
  __host__ __device__ double operator()(double a, double b) const { return a * b; }
};

struct mixed3 {
  __host__ __device__ double operator()(double a, float b, std::int32_t c) const { return mul_rn(a, b) - c; }
};

struct xor_bytes {
  __host__ __device__ std::uint8_t operator()(std::uint8_t a, std::uint8_t b) const {
    return static_cast<std::uint8_t>((a ^ b) + 1);
  }
};

std::size_t pool_used(int device) {
  std::uint64_t used = 0;
  EXPECT_EQ(cudaMemPoolGetAttribute(spillway::device_pool(device), cudaMemPoolAttrUsedMemCurrent, &used),
            cudaSuccess);
  return static_cast<std::size_t>(used);
}

template <class T>
void fill_random(T* p, std::size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(-1000.0, 1000.0);
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<T>(u(rng));
}

template <class T>
void poison(T* p, std::size_t n) {
  std::memset(static_cast<void*>(p), 0xFF, n * sizeof(T));
}

template <class T>
std::size_t first_mismatch(const T* got, const T* want, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (std::memcmp(got + i, want + i, sizeof(T)) != 0) return i;
  return n;
}

// A budget that forces many chunks: 4 slots of `chunk` elements of 24 bytes.
spillway::transform_options tiny_budget_options(std::size_t chunk_elems) {
  spillway::transform_options o;
  o.devices = {0};
  o.budget = spillway::memory_budget(4 * 3 * chunk_elems * 8);
  o.slots_per_device = 4;
  o.granularity = 1024;
  return o;
}

TEST(TransformGpu, TinyBudgetManyChunksBitExact) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  std::mt19937_64 rng(spillway::test::seed("TransformGpu.Tiny"));
  const std::size_t n = 1000003;  // prime: the last chunk is partial
  std::vector<double> a(n), b(n), c(n), want(n);
  fill_random(a.data(), n, rng);
  fill_random(b.data(), n, rng);
  poison(c.data(), n);
  spillway::transform_on_host(want, multiplies{}, a, b);
  const std::size_t before = pool_used(0);
  const auto r = spillway::transform(tiny_budget_options(16384), c, multiplies{}, a, b);
  EXPECT_TRUE(r.complete());
  EXPECT_GE(r.tasks_total, 16u);
  EXPECT_EQ(r.tasks_total, (n + 16383) / 16384);
  EXPECT_LE(r.device_bytes_per_device, 4u * 3 * 16384 * 8);
  EXPECT_EQ(r.bytes_moved, 3 * n * sizeof(double));
  EXPECT_EQ(first_mismatch(c.data(), want.data(), n), n);
  EXPECT_EQ(pool_used(0), before);
}

TEST(TransformGpu, MixedTypesThreeInputs) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  std::mt19937_64 rng(spillway::test::seed("TransformGpu.Mixed"));
  for (std::size_t n : {std::size_t{1}, std::size_t{31}, std::size_t{1023}, std::size_t{1025}, std::size_t{262147}}) {
    std::vector<double> a(n), out(n), want(n);
    std::vector<float> b(n);
    std::vector<std::int32_t> c(n);
    fill_random(a.data(), n, rng);
    fill_random(b.data(), n, rng);
    fill_random(c.data(), n, rng);
    poison(out.data(), n);
    spillway::transform_on_host(want, mixed3{}, a, b, c);
    spillway::transform_options o;
    o.devices = {0};
    o.budget = spillway::memory_budget(3 * (8 + 4 + 4 + 8) * 2048 + 3 * 4 * 256);
    o.slots_per_device = 3;
    const auto r = spillway::transform(o, out, mixed3{}, a, b, c);
    EXPECT_TRUE(r.complete()) << n;
    EXPECT_EQ(first_mismatch(out.data(), want.data(), n), n) << "n=" << n;
  }
}

enum class kind { pinned, registered, pageable, pinned_forced_pageable };

const char* name(kind k) {
  switch (k) {
    case kind::pinned: return "pinned";
    case kind::registered: return "registered";
    case kind::pageable: return "pageable";
    case kind::pinned_forced_pageable: return "pinned (staged)";
  }
  return "?";
}

// Host storage of one kind, holding n doubles.
struct host_array {
  kind k;
  std::size_t n;
  spillway::pinned_buffer<double> pinned;
  std::vector<double> vec;
  spillway::host_registration reg;
  host_array(kind k_, std::size_t n_) : k(k_), n(n_) {
    if (k == kind::pinned || k == kind::pinned_forced_pageable) {
      pinned = spillway::pinned_buffer<double>(n);
    } else {
      vec.resize(n);
      if (k == kind::registered) reg = spillway::host_registration(vec.data(), n * sizeof(double));
    }
  }
  double* data() { return k == kind::pinned || k == kind::pinned_forced_pageable ? pinned.data() : vec.data(); }
  spillway::host_memory memory() const {
    return k == kind::pinned_forced_pageable ? spillway::host_memory::pageable : spillway::host_memory::detect;
  }
};

TEST(TransformGpu, PinnedRegisteredPageableAndMixedOperands) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  std::mt19937_64 rng(spillway::test::seed("TransformGpu.Kinds"));
  const std::size_t n = 300007;
  const kind kinds[] = {kind::pinned, kind::registered, kind::pageable, kind::pinned_forced_pageable};
  std::vector<double> a0(n), b0(n), want(n);
  fill_random(a0.data(), n, rng);
  fill_random(b0.data(), n, rng);
  spillway::transform_on_host(want, multiplies{}, a0, b0);
  // Every kind for all three operands, then mixed combinations.
  std::vector<std::array<kind, 3>> combos;
  for (kind k : kinds) combos.push_back({k, k, k});
  combos.push_back({kind::pinned, kind::pageable, kind::registered});
  combos.push_back({kind::pageable, kind::registered, kind::pinned});
  combos.push_back({kind::registered, kind::pinned, kind::pageable});
  for (const auto& cb : combos) {
    host_array a(cb[0], n), b(cb[1], n), c(cb[2], n);
    std::memcpy(a.data(), a0.data(), n * 8);
    std::memcpy(b.data(), b0.data(), n * 8);
    poison(c.data(), n);
    EXPECT_EQ(spillway::is_page_locked(a.data()), cb[0] != kind::pageable);
    const std::string label = std::string(name(cb[0])) + " * " + name(cb[1]) + " -> " + name(cb[2]);
    const auto r = spillway::transform(tiny_budget_options(8192), spillway::host_output(c.data(), n, c.memory()),
                                       multiplies{}, spillway::host_input(a.data(), n, a.memory()),
                                       spillway::host_input(b.data(), n, b.memory()));
    EXPECT_TRUE(r.complete()) << label;
    EXPECT_GE(r.tasks_total, 16u) << label;
    EXPECT_EQ(first_mismatch(c.data(), want.data(), n), n) << label;
    // Inputs are never written.
    EXPECT_EQ(first_mismatch(a.data(), a0.data(), n), n) << label;
    EXPECT_EQ(first_mismatch(b.data(), b0.data(), n), n) << label;
  }
}

// Extended lambdas must not live in a private member function (a TEST body), hence these helpers.
spillway::job_report run_with_host_device_lambda(std::vector<double>& out, const std::vector<double>& a,
                                                 const std::vector<double>& b) {
  spillway::transform_options o = tiny_budget_options(4096);
  return spillway::transform(o, out, [] __host__ __device__(double x, double y) { return mul_rn(x, y) + 1.0; }, a, b);
}
spillway::job_report run_with_device_lambda(std::vector<double>& out, const std::vector<double>& a) {
  spillway::transform_options o = tiny_budget_options(4096);
  return spillway::transform(o, out, cuda::proclaim_return_type<double>([] __device__(double x) { return -x; }), a);
}

TEST(TransformGpu, LambdasAndProclaimedReturnType) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  std::mt19937_64 rng(spillway::test::seed("TransformGpu.Lambdas"));
  const std::size_t n = 99991;
  std::vector<double> a(n), b(n), out(n);
  fill_random(a.data(), n, rng);
  fill_random(b.data(), n, rng);
  poison(out.data(), n);
  EXPECT_TRUE(run_with_host_device_lambda(out, a, b).complete());
  for (std::size_t i = 0; i < n; ++i) {
    const double want = a[i] * b[i] + 1.0;
    ASSERT_EQ(std::memcmp(&out[i], &want, 8), 0) << i;
  }
  poison(out.data(), n);
  EXPECT_TRUE(run_with_device_lambda(out, a).complete());
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], -a[i]) << i;
}

TEST(TransformGpu, BadArgumentsThrowAndLeaveOutputUntouched) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  std::vector<double> a(100, 1.0), b(99, 2.0), out(100, 7.0);
  auto expect_msg = [&](auto&& call, const char* needle) {
    try {
      call();
      ADD_FAILURE() << "expected logic_error mentioning " << needle;
    } catch (const spillway::logic_error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    for (double x : out) ASSERT_EQ(x, 7.0);
  };
  expect_msg([&] { (void)spillway::transform(out, multiplies{}, a, b); }, "input 1 has 99 elements");
  spillway::transform_options o;
  o.budget = spillway::memory_budget(1000);  // < 4 slots × 3 buffers of one 1024-element granule
  std::vector<double> b2(100, 2.0);
  expect_msg([&] { (void)spillway::transform(o, out, multiplies{}, a, b2); }, "minimum budget");
  o.budget.reset();
  o.devices = {spillway::device_count() + 3};
  expect_msg([&] { (void)spillway::transform(o, out, multiplies{}, a, b2); }, "device");
  o.devices = {};
  o.block_size = 100;
  expect_msg([&] { (void)spillway::transform(o, out, multiplies{}, a, b2); }, "block_size");
  // Empty arrays: nothing to do.
  std::vector<double> e0, e1, e2;
  EXPECT_TRUE(spillway::transform(e2, multiplies{}, e0, e1).complete());
}

TEST(TransformGpu, CancelReportsWhichChunksWereWritten) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  std::mt19937_64 rng(spillway::test::seed("TransformGpu.Cancel"));
  const std::size_t n = 4 << 20;
  for (bool pinned_out : {true, false}) {
    std::vector<double> a(n), b(n), want(n);
    fill_random(a.data(), n, rng);
    fill_random(b.data(), n, rng);
    spillway::transform_on_host(want, multiplies{}, a, b);
    spillway::pinned_buffer<double> pout(pinned_out ? n : 0);
    std::vector<double> vout(pinned_out ? 0 : n);
    double* out = pinned_out ? pout.data() : vout.data();
    poison(out, n);
    auto o = tiny_budget_options(8192);  // 512 chunks
    o.progress = [](const spillway::progress_info& p) { return p.tasks_done < 8; };
    const auto r = spillway::transform(o, spillway::host_output(out, n), multiplies{}, a, b);
    EXPECT_TRUE(r.cancelled);
    EXPECT_FALSE(r.complete());
    EXPECT_GE(r.tasks_completed, 8u);
    EXPECT_LT(r.tasks_completed, r.tasks_total);
    const std::size_t chunk = 8192;
    for (std::size_t t = 0; t < r.tasks_total; ++t) {
      const std::size_t b0 = t * chunk, cnt = std::min(chunk, n - b0);
      if (r.completed[t]) {
        ASSERT_EQ(first_mismatch(out + b0, want.data() + b0, cnt), cnt) << "chunk " << t;
      } else {
        for (std::size_t i = b0; i < b0 + cnt; ++i) {
          std::uint64_t bits;
          std::memcpy(&bits, out + i, 8);
          ASSERT_EQ(bits, ~std::uint64_t{0}) << "chunk " << t << " was not reported but written";
        }
      }
    }
  }
}

TEST(TransformGpu, SixtyFourBitSizesLarge) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  // 2^31 + 4099 one-byte elements: indices and byte offsets pass 2^31.
  const std::size_t n = (std::size_t{1} << 31) + 4099;
  std::vector<std::uint8_t> a(n), b(n), out(n, 0x5A);
  const std::uint64_t s = spillway::test::seed("TransformGpu.64bit");
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = static_cast<std::uint8_t>((i * 0x9E3779B97F4A7C15ULL + s) >> 56);
    b[i] = static_cast<std::uint8_t>(i ^ (i >> 13) ^ s);
  }
  spillway::transform_options o;
  o.devices = {0};
  o.budget = spillway::memory_budget(std::size_t{256} << 20);
  o.max_chunk_bytes = 0;
  const auto r = spillway::transform(o, out, xor_bytes{}, a, b);
  EXPECT_TRUE(r.complete());
  EXPECT_GE(r.tasks_total, 16u);
  std::size_t bad = 0, first_bad = n;
  for (std::size_t i = 0; i < n; ++i) {
    if (out[i] != static_cast<std::uint8_t>((a[i] ^ b[i]) + 1)) {
      if (bad++ == 0) first_bad = i;
    }
  }
  EXPECT_EQ(bad, 0u) << "first at " << first_bad;
}

TEST(TransformGpu, TwoDevicesBitExact) {
  SPILLWAY_GPUS_TEST_OR_SKIP(2);
  std::mt19937_64 rng(spillway::test::seed("TransformGpu.TwoDevices"));
  const std::size_t n = 3000017;
  std::vector<double> a(n), b(n), c(n), want(n);
  fill_random(a.data(), n, rng);
  fill_random(b.data(), n, rng);
  poison(c.data(), n);
  spillway::transform_on_host(want, multiplies{}, a, b);
  spillway::transform_options o;
  o.budget = spillway::memory_budget(4 * 3 * 16384 * 8);
  o.devices = {0, 1};
  const auto r = spillway::transform(o, c, multiplies{}, a, b);
  EXPECT_TRUE(r.complete());
  ASSERT_EQ(r.tasks_per_device.size(), 2u);
  EXPECT_GT(r.tasks_per_device[0], 0u);
  EXPECT_GT(r.tasks_per_device[1], 0u);
  EXPECT_EQ(first_mismatch(c.data(), want.data(), n), n);
}

}  // namespace

// ---- no GPU (issue 16 item 7): a clear error by default, the host implementation on request ----
// Runs where there is no GPU (CI); skips on a GPU machine, which cannot hide its devices.
TEST(TransformNoGpu, ErrorSaysNoGpuAndNamesTheOptionElseHostRuns) {
  if (spillway::device_count() > 0) GTEST_SKIP() << "this machine has a GPU; the no-GPU behaviour is tested in CI";
  std::mt19937_64 g(spillway::test::seed("TransformNoGpu"));
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  std::vector<double> a(10007), b(a.size()), c(a.size(), -1.0);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = u(g), b[i] = u(g);
  spillway::transform_options o;
  try {
    spillway::transform(o, c, multiplies{}, a, b);
    FAIL() << "no throw";
  } catch (const spillway::no_gpu_error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("transform needs a GPU"), std::string::npos) << w;
    EXPECT_NE(w.find("transform_options::host_fallback"), std::string::npos) << w;
  }
  EXPECT_EQ(c, std::vector<double>(c.size(), -1.0)) << "the output must be untouched";
  o.host_fallback = true;
  const auto r = spillway::transform(o, c, multiplies{}, a, b);
  EXPECT_TRUE(r.complete());
  EXPECT_TRUE(r.devices.empty());
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_EQ(c[i], a[i] * b[i]) << i;
  // The stream a GPU job would need says plainly what was attempted and why it failed.
  try {
    spillway::stream s;
    FAIL() << "a stream was created with no GPU";
  } catch (const spillway::no_gpu_error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("needs a GPU"), std::string::npos) << w;
    EXPECT_TRUE(w.find("no CUDA GPU") != std::string::npos || w.find("no usable NVIDIA driver") != std::string::npos)
        << w;
    EXPECT_EQ(w.find("insufficient for CUDA runtime"), std::string::npos) << "the runtime's misleading text: " << w;
  }
}
