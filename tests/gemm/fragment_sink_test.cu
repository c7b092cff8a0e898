// The argument refusals of gemm::fragment_sink_gemm_async, the Hopper GEMM's public fragment-level
// extension point (the similarity top-k's way to the wgmma kernel; its results are tested through
// the similarity suite's fused top-k). Every refusal happens before any CUDA call, so these tests
// run on every machine, with or without a GPU: the views point at host memory nothing may touch.
#include <spillway/gemm/fragment_sink.cuh>

#include "support/expect_throw.hpp"

#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cstdint>

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

}  // namespace
