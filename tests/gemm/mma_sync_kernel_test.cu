// The mma.sync tensor-core GEMM launcher (gemm/detail/mma_sync_kernel.cuh) called directly, for
// half, bf16, float-as-TF32 and int8, against a host double reference on random inputs (printed
// seeds). Operands are K-major with 16-byte-aligned rows (what the dispatcher guarantees); the
// bytes of each row past k are NaN (0x7f for int8) so a k-tail that read them would show. C is
// poisoned (NaN, 0x7f7f7f7f for int32) when β = 0, sits at an odd offset with an odd ldc, and its
// padding must come back untouched.
//
// Error bounds, with S = Σ_kk |A(i,kk)·B(j,kk)|:
//   half / bf16 inputs are exact in float, products exact, FP32 accumulation over k terms:
//     |err| ≤ 2·k·2^-24·|α|·S
//   float as TF32 (mantissas truncated to 10 bits, relative error < 2^-10 per operand):
//     |err| ≤ (2·2^-10 + 2^-20)·|α|·S + 2·k·2^-24·|α|·S
//   int8 → int32: exact.
// plus 4·2^-24·(|α|·S + |β·C|) for α·acc + β·C in float and, for a narrower output, its rounding
// (half 2^-11, bf16 2^-8, float 2^-24 relative to the value).
#include <spillway/gemm/detail/mma_sync_kernel.cuh>

#include <spillway/core/device_buffer.hpp>
#include <spillway/core/stream.hpp>

#include <support/gpu_test.hpp>
#include <support/narrow_values.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using namespace spillway;
using spillway::gemm::detail::launch_mma_sync;
using spillway::gemm::detail::problem;
using spillway::test::from_double;
using spillway::test::poison_value;

template <class T>
double to_double(T x) {
  return spillway::gemm::detail::widen<double>(x);
}

template <class T>
T random_value(std::mt19937_64& g) {
  if constexpr (std::is_same_v<T, std::int8_t>) {
    return static_cast<T>(std::uniform_int_distribution<int>(-128, 127)(g));
  } else {
    // Values in [-1, 1] rounded to T (so the host sees exactly what the device reads).
    return from_double<T>(std::uniform_real_distribution<double>(-1.0, 1.0)(g));
  }
}

template <class T>
bool same_bits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <class T>
constexpr double operand_eps() {
  return std::is_same_v<T, float> ? 0x1p-10 : 0.0;  // TF32 truncation
}
template <class TC>
constexpr double output_eps() {
  if constexpr (std::is_same_v<TC, __half>) return 0x1p-11;
  if constexpr (std::is_same_v<TC, __nv_bfloat16>) return 0x1p-8;
  if constexpr (std::is_same_v<TC, float>) return 0x1p-24;
  return 0.0;
}

struct layout {
  std::int64_t m, n, k;
  std::int64_t batch = 1;
  std::int64_t extra_ld = 0;      ///< extra 16-byte chunks per operand row (beyond the rounded k)
  std::int64_t c_offset = 1;      ///< C starts this many elements into its buffer (misaligned C)
  std::int64_t c_extra_ld = 3;    ///< ldc = n + this
  bool shared_a = false;          ///< stride_a = 0: every batch entry multiplies the same A
};

template <class T>
using acc_of = spillway::gemm::accumulator_t<T>;

/// Runs one problem through launch_mma_sync and compares every element of C with the host.
template <class T, class TC, class Epi, class HostEpi>
void check(const std::string& label, const layout& L, acc_of<T> alpha, acc_of<T> beta, Epi epi, HostEpi host_epi,
           int stages = 0) {
  using S = acc_of<T>;
  SCOPED_TRACE(label + " m=" + std::to_string(L.m) + " n=" + std::to_string(L.n) + " k=" + std::to_string(L.k) +
               " batch=" + std::to_string(L.batch));
  std::mt19937_64 g(test::seed("gemm-mma-sync-" + label));
  constexpr std::int64_t per_chunk = 16 / static_cast<std::int64_t>(sizeof(T));
  const std::int64_t ld = (L.k + per_chunk - 1) / per_chunk * per_chunk + L.extra_ld * per_chunk;
  const std::int64_t stride_a = L.shared_a ? 0 : L.m * ld + per_chunk;  // one spare chunk between entries
  const std::int64_t stride_b = L.n * ld + 2 * per_chunk;
  const std::int64_t ldc = L.n + L.c_extra_ld;
  const std::int64_t stride_c = L.m * ldc + 5;
  const std::int64_t a_entries = L.shared_a ? 1 : L.batch;

  std::vector<T> a(static_cast<std::size_t>((a_entries - 1) * stride_a + L.m * ld), poison_value<T>());
  std::vector<T> b(static_cast<std::size_t>((L.batch - 1) * stride_b + L.n * ld), poison_value<T>());
  for (std::int64_t q = 0; q < a_entries; ++q)
    for (std::int64_t i = 0; i < L.m; ++i)
      for (std::int64_t kk = 0; kk < L.k; ++kk) a[static_cast<std::size_t>(q * stride_a + i * ld + kk)] = random_value<T>(g);
  for (std::int64_t q = 0; q < L.batch; ++q)
    for (std::int64_t j = 0; j < L.n; ++j)
      for (std::int64_t kk = 0; kk < L.k; ++kk) b[static_cast<std::size_t>(q * stride_b + j * ld + kk)] = random_value<T>(g);

  const bool beta_zero = beta == S(0);
  std::vector<TC> c(static_cast<std::size_t>(L.c_offset + (L.batch - 1) * stride_c + L.m * ldc), poison_value<TC>());
  if (!beta_zero) {
    for (std::int64_t q = 0; q < L.batch; ++q)
      for (std::int64_t i = 0; i < L.m; ++i)
        for (std::int64_t j = 0; j < L.n; ++j) {
          const double v = std::is_same_v<TC, std::int32_t>
                               ? static_cast<double>(std::uniform_int_distribution<int>(-1000, 1000)(g))
                               : std::uniform_real_distribution<double>(-2.0, 2.0)(g);
          c[static_cast<std::size_t>(L.c_offset + q * stride_c + i * ldc + j)] = from_double<TC>(v);
        }
  }
  const std::vector<TC> c_before = c;

  spillway::stream s;
  device_buffer<T> da(a.size(), s), db(b.size(), s);
  device_buffer<TC> dc(c.size(), s);
  da.copy_from_host_async(cuda::std::span<const T>(a.data(), a.size()), s);
  db.copy_from_host_async(cuda::std::span<const T>(b.data(), b.size()), s);
  dc.copy_from_host_async(cuda::std::span<const TC>(c.data(), c.size()), s);

  problem<T, T, TC, S, Epi> p;
  p.m = L.m, p.n = L.n, p.k = L.k;
  p.a = da.data(), p.lda = ld, p.a_kmajor = true;
  p.b = db.data(), p.ldb = ld, p.b_kmajor = true;
  p.c = dc.data() + L.c_offset, p.ldc = ldc;
  p.alpha = alpha, p.beta = beta;
  p.batch = L.batch, p.stride_a = stride_a, p.stride_b = stride_b, p.stride_c = stride_c;
  p.epi = epi;
  if (stages == 0) {
    launch_mma_sync(p, s);
  } else {
    spillway::gemm::detail::launch_mma_sync_stages(p, s, stages);
  }
  std::vector<TC> out(c.size());
  dc.copy_to_host_async(cuda::std::span<TC>(out.data(), out.size()), s);
  s.synchronize();

  // Everything outside the m x n entries is untouched.
  std::vector<char> inside(c.size(), 0);
  for (std::int64_t q = 0; q < L.batch; ++q)
    for (std::int64_t i = 0; i < L.m; ++i)
      for (std::int64_t j = 0; j < L.n; ++j) inside[static_cast<std::size_t>(L.c_offset + q * stride_c + i * ldc + j)] = 1;
  std::int64_t touched = 0;
  for (std::size_t e = 0; e < c.size(); ++e) touched += !inside[e] && !same_bits(out[e], c_before[e]);
  EXPECT_EQ(touched, 0) << "entries of C outside the m x n results were written";

  const double e_op = operand_eps<T>();
  const double e_acc = std::is_same_v<S, float> ? 0x1p-24 : 0.0;
  std::int64_t bad = 0;
  for (std::int64_t q = 0; q < L.batch && bad < 10; ++q) {
    const T* aq = a.data() + (L.shared_a ? 0 : q * stride_a);
    const T* bq = b.data() + q * stride_b;
    for (std::int64_t i = 0; i < L.m && bad < 10; ++i)
      for (std::int64_t j = 0; j < L.n && bad < 10; ++j) {
        double sum = 0, sabs = 0;
        for (std::int64_t kk = 0; kk < L.k; ++kk) {
          const double pr = to_double(aq[i * ld + kk]) * to_double(bq[j * ld + kk]);
          sum += pr;
          sabs += std::fabs(pr);
        }
        const std::size_t at = static_cast<std::size_t>(L.c_offset + q * stride_c + i * ldc + j);
        const double cin = beta_zero ? 0.0 : to_double(c_before[at]);
        const double ref = host_epi(static_cast<double>(alpha) * sum + static_cast<double>(beta) * cin, i, j);
        const double got = to_double(out[at]);
        const double aa = std::fabs(static_cast<double>(alpha)) * sabs;
        const double bound = (2 * e_op + e_op * e_op) * aa + 2.0 * static_cast<double>(L.k) * e_acc * aa +
                             4 * e_acc * (aa + std::fabs(static_cast<double>(beta) * cin)) +
                             output_eps<TC>() * std::fabs(ref) * 1.0001;
        const bool ok = std::is_integral_v<S> && std::is_integral_v<TC> ? got == ref
                                                                         : std::fabs(got - ref) <= bound && got == got;
        if (!ok) {
          ++bad;
          ADD_FAILURE() << "C(" << i << ", " << j << ") of batch entry " << q << ": got " << got << ", expected " << ref
                        << " (bound " << bound << ")";
        }
      }
  }
}

template <class T, class TC = acc_of<T>>
void check_plain(const std::string& label, const layout& L, acc_of<T> alpha, acc_of<T> beta, int stages = 0) {
  check<T, TC>(label, L, alpha, beta, gemm::identity{}, [](double v, std::int64_t, std::int64_t) { return v; },
               stages);
}

/// The edge shapes every type runs: 1 x 1 x 1, k = 1, primes, k not a multiple of 8/16/32/64
/// elements, sizes that are not multiples of the 128 x 256 tile, more than 8 tile rows (the
/// raster group), a long k (many trips around the stage ring).
const std::vector<layout> kEdgeShapes = {
    {1, 1, 1},        {1, 1, 7},       {7, 5, 1},       {2, 3, 9},         {13, 17, 19},      {31, 37, 67},
    {61, 3, 130},     {129, 257, 33},  {128, 256, 128}, {127, 255, 255},   {200, 300, 100},   {5, 600, 40},
    {1100, 260, 24},  {64, 300, 4099}, {3, 9, 1000, 1, 1}};

template <class T>
void edge_suite(const std::string& name, acc_of<T> alpha) {
  for (std::size_t i = 0; i < kEdgeShapes.size(); ++i) {
    check_plain<T>(name + "-edge-" + std::to_string(i), kEdgeShapes[i], alpha, acc_of<T>(0));
  }
}

template <class T>
void beta_batch_suite(const std::string& name, acc_of<T> alpha, acc_of<T> beta) {
  check_plain<T>(name + "-beta", layout{150, 270, 77}, alpha, beta);
  check_plain<T>(name + "-batched", layout{70, 90, 150, 3}, alpha, beta);
  check_plain<T>(name + "-batched-beta0", layout{33, 260, 70, 4}, alpha, acc_of<T>(0));
  layout shared{40, 50, 45, 3};
  shared.shared_a = true;
  check_plain<T>(name + "-batched-shared-a", shared, alpha, beta);
}

TEST(GemmMmaSyncKernelGpu, HalfEdgeShapes) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  edge_suite<__half>("half", 1.0f);
}
TEST(GemmMmaSyncKernelGpu, HalfBetaBatchedAndHalfOutput) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  beta_batch_suite<__half>("half", 0.75f, -1.5f);
  check_plain<__half, __half>("half-out-half", layout{77, 300, 129}, 1.0f, 0.5f);
}
TEST(GemmMmaSyncKernelGpu, Bf16EdgeShapes) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  edge_suite<__nv_bfloat16>("bf16", 1.0f);
}
TEST(GemmMmaSyncKernelGpu, Bf16BetaBatchedAndBf16Output) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  beta_batch_suite<__nv_bfloat16>("bf16", -1.25f, 2.0f);
  check_plain<__nv_bfloat16, __nv_bfloat16>("bf16-out-bf16", layout{130, 257, 200}, 1.0f, 0.0f);
  check_plain<__nv_bfloat16, __nv_bfloat16>("bf16-out-bf16-beta", layout{19, 513, 64, 2}, 0.5f, 1.0f);
}
TEST(GemmMmaSyncKernelGpu, Tf32EdgeShapes) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  edge_suite<float>("tf32", 1.0f);
}
TEST(GemmMmaSyncKernelGpu, Tf32BetaBatchedAndBf16Output) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  beta_batch_suite<float>("tf32", 1.5f, -0.5f);
  check_plain<float, __nv_bfloat16>("tf32-out-bf16", layout{100, 100, 333}, 1.0f, 0.0f);
}
TEST(GemmMmaSyncKernelGpu, Int8EdgeShapesExact) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  edge_suite<std::int8_t>("int8", 1);
}
TEST(GemmMmaSyncKernelGpu, Int8BetaBatchedAndFloatOutput) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  beta_batch_suite<std::int8_t>("int8", 3, -2);
  check_plain<std::int8_t, float>("int8-out-float", layout{65, 129, 300}, 1, 0);
}

// The 2- and 3-stage rings (what sm_86/89 and A100 run) on this device, including a k shorter than
// the ring and a k-tail tile.
TEST(GemmMmaSyncKernelGpu, TwoAndThreeStageRings) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  for (int stages : {2, 3}) {
    const std::string tag = "-stages" + std::to_string(stages);
    check_plain<__nv_bfloat16>("bf16" + tag, layout{150, 270, 1000, 2}, 1.0f, 0.5f, stages);
    check_plain<__nv_bfloat16>("bf16-short" + tag, layout{1, 1, 1}, 1.0f, 0.0f, stages);
    check_plain<std::int8_t>("int8" + tag, layout{37, 300, 555}, 1, 0, stages);
    check_plain<float>("tf32" + tag, layout{129, 257, 97}, 1.0f, 0.0f, stages);
  }
}

TEST(GemmMmaSyncKernelGpu, EpiloguesSeeRowAndColumn) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  // relu after a per-column bias (device bias; the host oracle keeps its own copy).
  const std::int64_t n = 300;
  std::vector<float> bias(static_cast<std::size_t>(n));
  for (std::int64_t j = 0; j < n; ++j) bias[static_cast<std::size_t>(j)] = 0.01f * static_cast<float>(j % 97) - 0.4f;
  spillway::stream s;
  device_buffer<float> dbias(bias.size(), s);
  dbias.copy_from_host_async(cuda::std::span<const float>(bias.data(), bias.size()), s);
  s.synchronize();
  auto epi = gemm::chain(gemm::bias_per_col<float>{dbias.data()}, gemm::relu{});
  auto host = [&bias](double v, std::int64_t, std::int64_t j) {
    const double x = v + static_cast<double>(bias[static_cast<std::size_t>(j)]);
    return x > 0 ? x : 0.0;
  };
  check<__nv_bfloat16, float>("bf16-bias-relu", layout{141, n, 90, 2}, 1.0f, 0.0f, epi, host);
}

}  // namespace
