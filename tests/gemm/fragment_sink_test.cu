// gemm::fragment_sink_gemm_async, the Hopper GEMM's public fragment-level extension point (the
// similarity top-k's way to the wgmma kernel; the top-k itself is tested through the similarity
// suite's fused top-k): its argument refusals, which happen before any CUDA call and so run on
// every machine (the views point at host memory nothing may touch), and on the GPU every
// accumulator of odd shapes handed to the sink exactly once, against a host double-precision
// product of random inputs (printed seeds), for each input type.
//
// Bound per element, with S = sum_kk |A(i,kk) B(j,kk)| and u = 2^-24: half and bf16 products are
// exact in FP32, the accumulation is within 2 k u S; float runs as TF32 (each operand truncated to
// 10 mantissa bits): 2.01 * 2^-10 S more.
#include <spillway/core/device_buffer.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/gemm/fragment_sink.cuh>
#include <spillway/tile/arch.cuh>

#include "support/expect_throw.hpp"
#include "support/gpu_test.hpp"
#include "support/narrow_values.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace {

namespace g = spillway::gemm;
using bf16 = __nv_bfloat16;
using spillway::test::expect_throw_naming;

/// A sink that counts its calls (the contract of gemm/fragment_sink.cuh).
struct counting_sink {
  using fragment_sink_tag = void;
  unsigned long long* calls = nullptr;
  template <class Acc>
  __device__ void consume(const Acc (&)[128], std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                          std::uint32_t) const {
    atomicAdd(calls, 1ull);
  }
};
static_assert(g::is_fragment_sink_v<counting_sink>);

/// A sink that writes every accumulator inside the product to out (m x n, row-major) and counts
/// the writes per element (a second visit, or a padding element reported as real, shows).
struct writing_sink {
  using fragment_sink_tag = void;
  float* out = nullptr;
  unsigned* visits = nullptr;
  template <class Acc>
  __device__ void consume(const Acc (&d)[128], std::int64_t row0, std::int64_t col0, std::int64_t m,
                          std::int64_t n, std::uint32_t) const {
    for (int j = 0; j < 32; ++j)
      for (int h = 0; h < 2; ++h)
        for (int e = 0; e < 2; ++e) {
          const std::int64_t r = row0 + 8 * h, c = col0 + 8 * j + e;
          if (r < m && c < n) {
            out[r * n + c] = static_cast<float>(d[4 * j + 2 * h + e]);
            atomicAdd(visits + r * n + c, 1u);
          }
        }
  }
};
static_assert(!g::is_fragment_sink_v<int>);

alignas(16) bf16 rows[64 * 48];  // 16-byte aligned; never read or written by these calls

TEST(FragmentSinkGemm, RefusesBadViewsBeforeAnyCudaCall) {
  const spillway::stream_view s = spillway::stream_view::per_thread();
  const counting_sink sink;
  const g::matrix_view<const bf16> good = g::row_major<const bf16>(rows, 8, 32, 40);  // ld 80 bytes
  ASSERT_NO_FATAL_FAILURE(expect_throw_naming(
      [&] {
        g::fragment_sink_gemm_async(s, g::matrix_view<const bf16>(g::col_major<const bf16>(rows, 32, 8)),
                                    good, sink);
      },
      {"fragment_sink_gemm_async: a must be row-major", "32 x 8"}));
  ASSERT_NO_FATAL_FAILURE(expect_throw_naming(
      [&] { g::fragment_sink_gemm_async(s, good, g::row_major<const bf16>(rows, 8, 32, 16), sink); },
      {"fragment_sink_gemm_async: b has bad extents", "ld 16"}));
  ASSERT_NO_FATAL_FAILURE(expect_throw_naming(
      [&] { g::fragment_sink_gemm_async(s, g::row_major<const bf16>(rows + 1, 8, 32, 40), good, sink); },
      {"fragment_sink_gemm_async: a: the base and ld must be 16-byte aligned"}));
  ASSERT_NO_FATAL_FAILURE(expect_throw_naming(
      [&] { g::fragment_sink_gemm_async(s, good, g::row_major<const bf16>(rows, 8, 32, 36), sink); },
      {"fragment_sink_gemm_async: b: the base and ld must be 16-byte aligned", "ld 36"}));
  ASSERT_NO_FATAL_FAILURE(expect_throw_naming(
      [&] { g::fragment_sink_gemm_async(s, good, g::row_major<const bf16>(rows, 8, 16, 40), sink); },
      {"a has 32 columns but b has 16"}));
}

TEST(FragmentSinkGemm, AnEmptyProductEnqueuesNothing) {
  // m, n or k = 0 returns before the launch (and before asking for a device: this passes on a
  // machine with none too).
  const spillway::stream_view s = spillway::stream_view::per_thread();
  const counting_sink sink;
  const g::matrix_view<const bf16> good = g::row_major<const bf16>(rows, 8, 32, 40);
  EXPECT_NO_THROW(g::fragment_sink_gemm_async(s, g::row_major<const bf16>(rows, 0, 32, 40), good, sink));
  EXPECT_NO_THROW(g::fragment_sink_gemm_async(s, good, g::row_major<const bf16>(rows, 0, 32, 40), sink));
  EXPECT_NO_THROW(g::fragment_sink_gemm_async(s, g::row_major<const bf16>(rows, 8, 0, 8),
                                              g::row_major<const bf16>(rows, 8, 0, 8), sink));
}

/// m x k rows of A and n x k rows of B (ld padded by `pad` elements), random in [-1, 1): every
/// accumulator against the host, every element visited once.
template <class T>
void check_every_accumulator(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t pad,
                             const char* name) {
  const std::string what =
      std::string(name) + " " + std::to_string(m) + " x " + std::to_string(n) + " x " + std::to_string(k);
  SCOPED_TRACE(what);
  std::mt19937_64 rng(spillway::test::seed("fragment sink " + what));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const std::int64_t ld = k + pad;
  std::vector<T> a(static_cast<std::size_t>(m * ld)), b(static_cast<std::size_t>(n * ld));
  for (auto& x : a) x = spillway::test::from_double<T>(u(rng));
  for (auto& x : b) x = spillway::test::from_double<T>(u(rng));
  const auto s = spillway::stream_view::per_thread();
  const auto da = spillway::device_buffer<T>::from_host(a, s);
  const auto db = spillway::device_buffer<T>::from_host(b, s);
  spillway::device_buffer<float> out(static_cast<std::size_t>(m * n), s);
  spillway::device_buffer<unsigned> visits(static_cast<std::size_t>(m * n), s);
  out.fill_bytes_async(0xFF, s);  // NaN poison: an element never written shows
  visits.fill_bytes_async(0, s);
  writing_sink sink{out.data(), visits.data()};
  g::fragment_sink_gemm_async(s, g::row_major<const T>(da.data(), m, k, ld),
                              g::row_major<const T>(db.data(), n, k, ld), sink);
  const std::vector<float> got = out.to_host(s);
  const std::vector<unsigned> seen = visits.to_host(s);
  constexpr double uu = 1.0 / 16777216.0;
  const double rel = std::is_same_v<T, float> ? 2.01 / 1024.0 : 0.0;
  std::int64_t bad = 0;
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double ref = 0, mag = 0;
      for (std::int64_t q = 0; q < k; ++q) {
        const double p = g::detail::widen<double>(a[static_cast<std::size_t>(i * ld + q)]) *
                         g::detail::widen<double>(b[static_cast<std::size_t>(j * ld + q)]);
        ref += p;
        mag += std::fabs(p);
      }
      const std::size_t at = static_cast<std::size_t>(i * n + j);
      const double bound = (rel + 2.0 * static_cast<double>(k) * uu) * mag + 1e-30;
      if (seen[at] != 1u || !(std::fabs(static_cast<double>(got[at]) - ref) <= bound)) {
        if (++bad <= 5) {
          ADD_FAILURE() << "(" << i << ", " << j << "): visited " << seen[at] << " times, got " << got[at]
                        << ", host " << ref << ", bound " << bound;
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << "elements wrong or not visited exactly once";
}

/// m x n counts of rows of `words` 32-bit words (random bits, the last word's bits past `bits`
/// zero, as the contract asks; pitch padded by `pad` words): every count exact, visited once.
void check_every_bit_count(std::int64_t m, std::int64_t n, std::int64_t bits, std::int64_t pad) {
  const std::string what =
      "bits " + std::to_string(m) + " x " + std::to_string(n) + " x " + std::to_string(bits);
  SCOPED_TRACE(what);
  std::mt19937_64 rng(spillway::test::seed("fragment sink " + what));
  const std::int64_t words = (bits + 31) / 32, ld = words + pad;
  const auto fill = [&](std::int64_t rows) {
    std::vector<std::uint32_t> v(static_cast<std::size_t>(rows * ld), 0xDEADBEEFu);  // padding: never read
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t w = 0; w < words; ++w) {
        std::uint32_t x = static_cast<std::uint32_t>(rng());
        if (32 * w + 32 > bits) x &= (1u << (bits - 32 * w)) - 1u;
        v[static_cast<std::size_t>(r * ld + w)] = x;
      }
    return v;
  };
  const auto a = fill(m), b = fill(n);
  const auto s = spillway::stream_view::per_thread();
  const auto da = spillway::device_buffer<std::uint32_t>::from_host(a, s);
  const auto db = spillway::device_buffer<std::uint32_t>::from_host(b, s);
  spillway::device_buffer<float> out(static_cast<std::size_t>(m * n), s);
  spillway::device_buffer<unsigned> visits(static_cast<std::size_t>(m * n), s);
  out.fill_bytes_async(0xFF, s);
  visits.fill_bytes_async(0, s);
  writing_sink sink{out.data(), visits.data()};
  g::fragment_sink_bit_gemm_async(s, g::row_major<const std::uint32_t>(da.data(), m, words, ld),
                                  g::row_major<const std::uint32_t>(db.data(), n, words, ld), sink);
  const std::vector<float> got = out.to_host(s);
  const std::vector<unsigned> seen = visits.to_host(s);
  std::int64_t bad = 0;
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      int ref = 0;
      for (std::int64_t w = 0; w < words; ++w)
        ref += __builtin_popcount(a[static_cast<std::size_t>(i * ld + w)] &
                                  b[static_cast<std::size_t>(j * ld + w)]);
      const std::size_t at = static_cast<std::size_t>(i * n + j);
      if (seen[at] != 1u || got[at] != static_cast<float>(ref)) {
        if (++bad <= 5) {
          ADD_FAILURE() << "(" << i << ", " << j << "): visited " << seen[at] << " times, got " << got[at]
                        << ", host " << ref;
        }
      }
    }
  EXPECT_EQ(bad, 0) << "counts wrong or not visited exactly once";
}

TEST(FragmentSinkGemm, EveryAccumulatorReachesTheSinkOnce) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const int dev = spillway::current_device();
  if (!g::has_fragment_sink_gemm(dev)) {
    if (spillway::test::gpu_required() && spillway::tile::compute_capability(dev) == 90)
      FAIL() << "SPILLWAY_REQUIRE_GPU=1 on an sm_90 device, but no sm_90a code in this build";
    GTEST_SKIP() << "no sm_90a code for " << spillway::tile::describe_device(dev);
  }
  // Shapes: one partial tile; fewer k-slices than the ring's stages; many tiles per block (each
  // consumer warpgroup several in turn) with edges in m, n and k.
  check_every_accumulator<__nv_bfloat16>(37, 200, 72, 8, "bf16");
  check_every_accumulator<__nv_bfloat16>(1000, 777, 200, 0, "bf16");
  check_every_accumulator<__nv_bfloat16>(4133, 2148, 136, 8, "bf16");
  check_every_accumulator<__half>(4133, 2148, 136, 8, "half");
  check_every_accumulator<float>(1000, 1300, 100, 4, "float");
  // Rows of bits: 768 bits (one stage holds 1,024), 100 bits (a partial word), 3,000 bits (three
  // stages, a partial last one), many tiles with edges.
  check_every_bit_count(37, 200, 768, 4);
  check_every_bit_count(1000, 777, 100, 0);
  check_every_bit_count(4133, 2148, 3000, 2);
}

TEST(FragmentSinkGemm, BitRowsRefuseBadViews) {
  const spillway::stream_view s = spillway::stream_view::per_thread();
  const counting_sink sink;
  alignas(16) static std::uint32_t w[64 * 8];
  ASSERT_NO_FATAL_FAILURE(expect_throw_naming(
      [&] {
        g::fragment_sink_bit_gemm_async(s, g::row_major<const std::uint32_t>(w, 8, 24, 26),
                                        g::row_major<const std::uint32_t>(w, 8, 24, 24), sink);
      },
      {"fragment_sink_bit_gemm_async: a: the base and ld must be 16-byte aligned", "ld 26"}));
  ASSERT_NO_FATAL_FAILURE(expect_throw_naming(
      [&] {
        g::fragment_sink_bit_gemm_async(s, g::row_major<const std::uint32_t>(w, 8, 24, 24),
                                        g::row_major<const std::uint32_t>(w, 8, 20, 24), sink);
      },
      {"fragment_sink_bit_gemm_async: a has 24 columns but b has 20"}));
}

}  // namespace
