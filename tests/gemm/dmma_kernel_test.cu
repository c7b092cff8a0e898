// The FP64 tensor-core GEMM launcher (gemm::detail::launch_dmma) called directly, against a host
// reference in long double on random inputs (printed seeds): edge shapes, odd k, batches, β = 0
// with NaN-poisoned C, β ≠ 0, unaligned C, epilogues, offsets past 2^31, and a rate check at 8192³.
//
// Error bound (stated once, used everywhere): each output is fl(α·fl(Σ a·b) + β·c). Recursive
// summation of k products in double (the tensor core's order is unspecified) errs by at most
// γ_k·Σ|a||b| with γ_k = k·u/(1 - k·u), u = 2^-53; α·, β·c and the add cost a few more roundings.
// The test allows  |got - ref| <= 2·(k + 4)·u·(|α|·Σ|a_i·b_i| + |β·c|)  (+ |bias| terms for the
// bias epilogue), twice the worst-case bound, never a tolerance taken from the observed error.
#include <spillway/core/device_buffer.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/gemm/detail/dmma_kernel.cuh>
#include <spillway/gemm/epilogue.hpp>
#include <spillway/tile/arch.cuh>

#include "support/gpu_test.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <type_traits>
#include <random>
#include <string>
#include <vector>

namespace {

namespace gd = spillway::gemm::detail;
using spillway::index_t;

constexpr double unit_roundoff = 0x1p-53;

// A poison bit pattern for C: a quiet NaN with a payload, so "untouched" can be checked bit for
// bit and any read of it under β = 0 would show up as NaN in the result.
constexpr std::uint64_t poison_bits = 0x7ff8dead7f7f7f7fULL;
double poison() {
  double d;
  std::memcpy(&d, &poison_bits, sizeof d);
  return d;
}
bool is_poison(double d) {
  std::uint64_t b;
  std::memcpy(&b, &d, sizeof b);
  return b == poison_bits;
}

struct shape {
  index_t m, n, k;
  index_t lda = 0, ldb = 0, ldc = 0;  // 0: tight (lda, ldb rounded up to even)
  index_t batch = 1;
  index_t stride_a = 0, stride_b = 0, stride_c = 0;  // 0: tight (B may be shared with share_b)
  bool share_b = false;                              // stride_b = 0: one B for every batch entry
  double alpha = 1.0, beta = 0.0;
};

std::string describe(const shape& s) {
  return std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) + " batch " +
         std::to_string(s.batch) + " lda " + std::to_string(s.lda) + " ldb " + std::to_string(s.ldb) + " ldc " +
         std::to_string(s.ldc) + " alpha " + std::to_string(s.alpha) + " beta " + std::to_string(s.beta);
}

void complete(shape& s) {
  if (s.lda == 0) s.lda = (s.k + 1) / 2 * 2;
  if (s.ldb == 0) s.ldb = (s.k + 1) / 2 * 2;
  if (s.ldc == 0) s.ldc = s.n;
  if (s.stride_a == 0) s.stride_a = s.m * s.lda;
  if (s.stride_b == 0 && !s.share_b) s.stride_b = s.n * s.ldb;
  if (s.stride_c == 0) s.stride_c = s.m * s.ldc;
}

index_t extent(index_t batch, index_t stride, index_t rows, index_t ld) {
  return (batch - 1) * stride + rows * ld;
}

// Uniform(-1, 1) everywhere a kernel may look (padding included: the kernel must not use it).
std::vector<double> random_vec(std::size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  std::vector<double> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

struct host_ref {
  long double value;
  double bound;
};

// ref = α·Σ a·b + β·c in long double, and the bound of the header comment.
host_ref reference(const shape& s, const std::vector<double>& a, const std::vector<double>& b, double c, index_t q,
                   index_t i, index_t j) {
  const double* ar = a.data() + q * s.stride_a + i * s.lda;
  const double* br = b.data() + q * s.stride_b + j * s.ldb;
  long double dot = 0.0L, mag = 0.0L;
  for (index_t kk = 0; kk < s.k; ++kk) {
    const long double p = static_cast<long double>(ar[kk]) * static_cast<long double>(br[kk]);
    dot += p;
    mag += std::fabs(p);
  }
  long double v = static_cast<long double>(s.alpha) * dot;
  double cmag = 0.0;
  if (s.beta != 0.0) {
    v += static_cast<long double>(s.beta) * static_cast<long double>(c);
    cmag = std::fabs(s.beta * c);
  }
  const double bound =
      2.0 * static_cast<double>(s.k + 4) * unit_roundoff * (std::fabs(s.alpha) * static_cast<double>(mag) + cmag);
  return {v, bound};
}

struct device_problem {
  spillway::device_buffer<double> a, b, c;
  std::vector<double> ha, hb, hc;  // hc: C before the call
};

device_problem upload(const shape& s, std::uint64_t seed, spillway::stream_view st) {
  std::mt19937_64 rng(seed);
  device_problem d;
  d.ha = random_vec(static_cast<std::size_t>(extent(s.batch, s.stride_a, s.m, s.lda)), rng);
  d.hb = random_vec(static_cast<std::size_t>(extent(s.share_b ? 1 : s.batch, s.stride_b, s.n, s.ldb)), rng);
  const auto c_size = static_cast<std::size_t>(extent(s.batch, s.stride_c, s.m, s.ldc));
  d.hc.assign(c_size, poison());
  if (s.beta != 0.0) {
    // C inside the matrices random, the gaps (ldc padding, between batch entries) poisoned.
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    for (index_t q = 0; q < s.batch; ++q)
      for (index_t i = 0; i < s.m; ++i)
        for (index_t j = 0; j < s.n; ++j) d.hc[static_cast<std::size_t>(q * s.stride_c + i * s.ldc + j)] = u(rng);
  }
  d.a = spillway::device_buffer<double>(d.ha.size(), st);
  d.b = spillway::device_buffer<double>(d.hb.size(), st);
  d.c = spillway::device_buffer<double>(c_size, st);
  d.a.copy_from_host_async(cuda::std::span<const double>(d.ha.data(), d.ha.size()), st);
  d.b.copy_from_host_async(cuda::std::span<const double>(d.hb.data(), d.hb.size()), st);
  d.c.copy_from_host_async(cuda::std::span<const double>(d.hc.data(), d.hc.size()), st);
  return d;
}

template <class Epi>
gd::problem<double, double, double, double, Epi> make_problem(const shape& s, device_problem& d, Epi epi = {}) {
  gd::problem<double, double, double, double, Epi> p;
  p.m = s.m, p.n = s.n, p.k = s.k;
  p.a = d.a.data(), p.lda = s.lda, p.a_kmajor = true;
  p.b = d.b.data(), p.ldb = s.ldb, p.b_kmajor = true;
  p.c = d.c.data(), p.ldc = s.ldc;
  p.alpha = s.alpha, p.beta = s.beta;
  p.batch = s.batch, p.stride_a = s.stride_a, p.stride_b = s.stride_b, p.stride_c = s.stride_c;
  p.epi = epi;
  return p;
}

// Runs one shape through the identity epilogue (or `post`, a host mirror of the epilogue with its
// extra bound) and checks every output and every gap of C.
// The default is Hopper's k-tile-32 ring; the A100 and two-stage rings are what other devices run.
using cfg_a100 = gd::dmma_a100_config;

template <class Cfg = void, class Epi = spillway::gemm::identity, class Post = std::nullptr_t>
void run_case(shape s, const std::string& label, Epi epi = {}, Post post = nullptr) {
  complete(s);
  SCOPED_TRACE(label + ": " + describe(s));
  spillway::stream st;
  auto d = upload(s, spillway::test::seed("dmma/" + label), st);
  if constexpr (std::is_void_v<Cfg>) {
    gd::launch_dmma(make_problem(s, d, epi), st);
  } else {
    gd::launch_dmma_with<Cfg>(make_problem(s, d, epi), st);
  }
  std::vector<double> got(d.hc.size());
  d.c.copy_to_host_async(cuda::std::span<double>(got.data(), got.size()), st);
  st.synchronize();

  std::vector<char> inside(got.size(), 0);
  index_t bad = 0;
  for (index_t q = 0; q < s.batch; ++q) {
    for (index_t i = 0; i < s.m; ++i) {
      for (index_t j = 0; j < s.n; ++j) {
        const auto at = static_cast<std::size_t>(q * s.stride_c + i * s.ldc + j);
        inside[at] = 1;
        host_ref r = reference(s, d.ha, d.hb, d.hc[at], q, i, j);
        if constexpr (!std::is_same_v<Post, std::nullptr_t>) r = post(r, i, j);
        const double err = std::fabs(static_cast<double>(static_cast<long double>(got[at]) - r.value));
        if (!(err <= r.bound)) {  // also catches NaN
          if (++bad <= 5) {
            ADD_FAILURE() << "C[" << q << "](" << i << ", " << j << ") = " << got[at] << ", reference "
                          << static_cast<double>(r.value) << ", |error| " << err << " > bound " << r.bound;
          }
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << "outputs outside the bound";
  index_t touched = 0;
  for (std::size_t x = 0; x < got.size(); ++x) touched += (!inside[x] && !is_poison(got[x])) ? 1 : 0;
  EXPECT_EQ(touched, 0) << "elements of C outside the m x n matrices were written";
}

TEST(DmmaKernelGpu, EdgeShapes) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  run_case({1, 1, 1}, "1x1x1");
  run_case({1, 1, 2}, "1x1x2");
  run_case({7, 5, 3}, "7x5x3");
  run_case({131, 257, 1}, "k1");
  run_case({127, 129, 17}, "odd_k17");
  run_case({128, 128, 16}, "one_tile");
  run_case({129, 127, 33}, "tile_plus_minus_one");
  run_case({300, 200, 50}, "non_multiples");
  run_case({61, 67, 4099}, "large_odd_k");
  run_case({4099, 67, 35}, "tall_4099");
  run_case({67, 4099, 31}, "wide_4099");
  run_case({2, 3, 15}, "k_below_one_tile");
}

TEST(DmmaKernelGpu, LeadingDimensionsAndUnalignedC) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  // lda / ldb padded (even), ldc odd so that every other row of C starts 8 bytes off 16.
  shape s{100, 90, 37};
  s.lda = 40, s.ldb = 64, s.ldc = 97;
  run_case(s, "padded_ld");
  shape t{33, 257, 20};
  t.ldc = 259, t.beta = 0.5;
  run_case(t, "odd_ldc_beta");
}

TEST(DmmaKernelGpu, BetaZeroNeverReadsNaNPoisonedC) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  // upload() leaves C all poison (a NaN) when beta == 0: any read of C would leak into the result.
  shape s{150, 140, 70};
  s.alpha = -2.5;
  run_case(s, "beta0_nan_c");
}

TEST(DmmaKernelGpu, AlphaBeta) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  shape s{190, 170, 45};
  s.alpha = -1.5, s.beta = 0.75;
  run_case(s, "alpha_beta");
  shape t{64, 64, 1};
  t.alpha = 0.0, t.beta = -3.0;  // α = 0: C = β·C
  run_case(t, "alpha0");
}

TEST(DmmaKernelGpu, Batched) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  shape s{70, 130, 29};
  s.batch = 3;
  s.stride_a = 70 * 30 + 6;    // gaps between entries (even: 16-byte steps)
  s.stride_c = 70 * 130 + 5;   // odd: every other entry of C starts unaligned
  s.beta = 1.25;
  run_case(s, "batch3");
  shape t{33, 45, 18};
  t.batch = 5, t.share_b = true;  // stride_b = 0: one B for all
  run_case(t, "batch5_shared_b");
}

TEST(DmmaKernelGpu, BatchBeyondGridZ) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  // More entries than gridDim.z may hold (65,535): the kernel loops over the rest.
  shape s{3, 5, 2};
  s.batch = 70001;
  s.beta = 0.5;
  run_case(s, "batch70001");
}

TEST(DmmaKernelGpu, Epilogue) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  shape s{77, 150, 40};
  s.alpha = 0.5, s.beta = -1.0;
  complete(s);
  std::vector<double> bias(static_cast<std::size_t>(s.n));
  std::mt19937_64 rng(spillway::test::seed("dmma/epilogue_bias"));
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  for (auto& x : bias) x = u(rng);
  spillway::stream st;
  auto d_bias = spillway::device_buffer<double>::from_host(cuda::std::span<const double>(bias.data(), bias.size()), st);
  st.synchronize();
  const auto epi = spillway::gemm::chain(spillway::gemm::bias_per_col<double>{d_bias.data()}, spillway::gemm::relu{});
  // relu is 1-Lipschitz; the bias add is one more rounding of a value of size |v| + |bias|.
  auto post = [&](host_ref r, index_t, index_t j) {
    const long double v = r.value + bias[static_cast<std::size_t>(j)];
    const double extra = 2.0 * unit_roundoff * (std::fabs(static_cast<double>(v)) + std::fabs(bias[static_cast<std::size_t>(j)]));
    return host_ref{v > 0 ? v : 0.0L, r.bound + extra};
  };
  run_case<void>(s, "bias_relu", epi, post);
}

TEST(DmmaKernelGpu, AlternateConfigs) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  // k-tiles of 32 (two MMA steps, A copied in two k halves): odd k inside either half.
  run_case<cfg_a100>({1, 1, 1}, "a100_1x1x1");
  run_case<cfg_a100>({129, 131, 17}, "a100_k17");
  run_case<cfg_a100>({200, 70, 45}, "a100_k45");
  run_case<cfg_a100>({61, 67, 4099}, "a100_large_odd_k");
  shape s{70, 130, 29};
  s.batch = 3, s.beta = 0.5, s.stride_c = 70 * 130 + 3;
  run_case<cfg_a100>(s, "a100_batch3");
  run_case<cfg_a100>({300, 200, 50}, "a100_non_multiples");
  run_case<cfg_a100>({1000, 700, 20}, "a100_many_tiles");
  // Two stages (the configuration for devices with 101,376 bytes of shared memory per block).
  run_case<gd::dmma_small_smem_config>({129, 131, 17}, "two_stage_k17");
  run_case<gd::dmma_small_smem_config>({260, 300, 100}, "two_stage_non_multiples");
  shape t{40, 50, 33};
  t.batch = 4, t.beta = -0.5;
  run_case<gd::dmma_small_smem_config>(t, "two_stage_batch4");
}

TEST(DmmaKernelGpu, OffsetsPast2To31) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  // lda and ldc of about 2^20 with 2,050 rows: rows 2,048 and up start past element 2^31, so
  // row * ld must be computed in 64 bits. 17 GB each for A and C; only the used elements are set.
  const index_t m = 2050, n = 40, k = 24, lda = (index_t{1} << 20) + 2, ldc = (index_t{1} << 20) + 1;
  ASSERT_GT((m - 1) * lda, index_t{1} << 31);
  const std::size_t a_elems = static_cast<std::size_t>((m - 1) * lda + k);
  const std::size_t c_elems = static_cast<std::size_t>((m - 1) * ldc + n);
  std::size_t free_b = 0, total_b = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
  if (free_b < (a_elems + c_elems) * sizeof(double) + (std::size_t{1} << 30)) {
    GTEST_SKIP() << "needs " << (a_elems + c_elems) * 8 / (1 << 30) << " GiB of device memory, "
                 << free_b / (1 << 30) << " GiB free";
  }
  spillway::stream st;
  std::mt19937_64 rng(spillway::test::seed("dmma/offsets_2_31"));
  const auto ha = random_vec(static_cast<std::size_t>(m * k), rng);
  const auto hb = random_vec(static_cast<std::size_t>(n * k), rng);
  std::vector<double> hc(static_cast<std::size_t>(m * n), poison());
  spillway::device_buffer<double> a(a_elems, st), b(hb.size(), st), c(c_elems, st);
  ASSERT_EQ(cudaMemcpy2DAsync(a.data(), lda * 8, ha.data(), k * 8, k * 8, m, cudaMemcpyHostToDevice, st.value()),
            cudaSuccess);
  b.copy_from_host_async(cuda::std::span<const double>(hb.data(), hb.size()), st);
  ASSERT_EQ(cudaMemcpy2DAsync(c.data(), ldc * 8, hc.data(), n * 8, n * 8, m, cudaMemcpyHostToDevice, st.value()),
            cudaSuccess);
  gd::problem<double, double, double, double, spillway::gemm::identity> p;
  p.m = m, p.n = n, p.k = k;
  p.a = a.data(), p.lda = lda, p.b = b.data(), p.ldb = k, p.c = c.data(), p.ldc = ldc;
  p.alpha = 1.0, p.beta = 0.0;
  gd::launch_dmma(p, st);
  ASSERT_EQ(cudaMemcpy2DAsync(hc.data(), n * 8, c.data(), ldc * 8, n * 8, m, cudaMemcpyDeviceToHost, st.value()),
            cudaSuccess);
  st.synchronize();
  shape s{m, n, k};
  s.lda = k, s.ldb = k, s.ldc = n;  // the compact host copies
  complete(s);
  index_t bad = 0;
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j) {
      const host_ref r = reference(s, ha, hb, 0.0, 0, i, j);
      const double got = hc[static_cast<std::size_t>(i * n + j)];
      const double err = std::fabs(static_cast<double>(static_cast<long double>(got) - r.value));
      if (!(err <= r.bound) && ++bad <= 5) ADD_FAILURE() << "C(" << i << ", " << j << ") = " << got;
    }
  EXPECT_EQ(bad, 0);
}

}  // namespace
