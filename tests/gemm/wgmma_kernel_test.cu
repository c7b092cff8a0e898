// The Hopper GEMM launcher (gemm::detail::launch_wgmma) called directly, per input type, against a
// host double-precision reference on random inputs (printed seeds): edge shapes, batches (and a
// zero batch stride), beta = 0 over a NaN-poisoned C, beta != 0, narrower outputs, an epilogue,
// and C's padding left untouched; both epilogue paths (bulk tensor stores of whole 64 x 256
// blocks when ldc and C's base are 16-byte aligned — the ldc_pad = 0 / 8 shapes — and per-element
// stores everywhere else); the public gemm_async with path wgmma on tiny shapes.
//
// Error bounds, per element, with S = sum_kk |A(i,kk) B(j,kk)| (u = 2^-24, FP32's unit roundoff):
//  - half, bf16: products are exact in FP32 (11- and 8-bit significands); the accumulation in
//    FP32 is bounded by 2 k u S.
//  - float as TF32: each operand truncated to 10 mantissa bits (relative error < 2^-10), so each
//    product is off by < 2 * 2^-10 (1 + 2^-11) |ab|: bound 2.01 * 2^-10 S, plus 2 k u S.
//  - then alpha * acc + beta * C and the epilogue in FP32: 4 u (|alpha| S + |beta C| + |bias|),
//    and the conversion to a narrower output: 2^-11 (half) or 2^-8 (bf16) of the magnitude.
//  - int8: exact (int32 accumulation of products < 2^14, k < 2^17); to float, one rounding.
#include <spillway/core/device_buffer.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/gemm.cuh>
#include <spillway/gemm/detail/wgmma_kernel.cuh>
#include <spillway/gemm/epilogue.hpp>
#include <spillway/tile/arch.cuh>
#include <spillway/tile/tensor_map.hpp>

#include "support/gpu_test.hpp"
#include "support/narrow_values.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using spillway::index_t;
using spillway::test::from_double;
namespace gemm = spillway::gemm;

// Whether this binary was compiled for sm_90 (sm_90a reports 900 too): only then must an sm_90
// device with SPILLWAY_REQUIRE_GPU=1 run the wgmma tests (the sm_80 test binary skips them).
constexpr int compiled_archs[] = {__CUDA_ARCH_LIST__};
constexpr bool compiled_for_sm90() {
  for (int a : compiled_archs) {
    if (a == 900) return true;
  }
  return false;
}

#define SPILLWAY_WGMMA_TEST_OR_SKIP()                                                                     \
  do {                                                                                                    \
    SPILLWAY_GPU_TEST_OR_SKIP();                                                                          \
    const int dev_ = spillway::current_device();                                                          \
    if ((spillway::tile::build_features(dev_) & spillway::tile::feature_wgmma) == 0) {                    \
      if (spillway::test::gpu_required() && compiled_for_sm90() &&                                        \
          spillway::tile::compute_capability(dev_) == 90) {                                               \
        FAIL() << "SPILLWAY_REQUIRE_GPU=1, an sm_90 device and an sm_90 build, but no sm_90a wgmma code"; \
      }                                                                                                   \
      GTEST_SKIP() << "no sm_90a wgmma code for " << spillway::tile::describe_device(dev_);               \
    }                                                                                                     \
  } while (0)

template <class T>
double to_double(T x) {
  if constexpr (std::is_same_v<T, __half>) {
    return static_cast<double>(__half2float(x));
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return static_cast<double>(__bfloat162float(x));
  } else {
    return static_cast<double>(x);
  }
}

struct shape {
  index_t m, n, k, batch = 1;
  bool broadcast_b = false;  // stride_b = 0: every batch multiplies by the same B
  index_t ldc_pad = 3;       // ldc = n + ldc_pad (odd: per-element stores; even: pairs)
};

template <class T>
constexpr bool is_int8 = std::is_same_v<T, std::int8_t>;

/// Runs one problem through launch_wgmma and checks every element (and C's padding).
/// `epi_ref(value, row, col)` is the host image of the device epilogue `epi`.
template <class T, class TC, class Epi = gemm::identity>
void run_case(const shape& sh, double alpha, double beta, const std::string& label, Epi epi = {},
              const std::function<double(double, index_t, index_t)>& epi_ref = nullptr,
              double bias_mag = 0.0) {
  using S = std::conditional_t<is_int8<T>, std::int32_t, float>;
  SCOPED_TRACE(label + " m=" + std::to_string(sh.m) + " n=" + std::to_string(sh.n) +
               " k=" + std::to_string(sh.k) + " batch=" + std::to_string(sh.batch));
  std::mt19937_64 rng(spillway::test::seed("wgmma " + label));
  const index_t align = 16 / static_cast<index_t>(sizeof(T));
  const index_t ld = (sh.k + align - 1) / align * align + align;  // padded, a multiple of 16 bytes
  const index_t stride_a = sh.m * ld + 2 * align;
  const index_t stride_b = sh.broadcast_b ? 0 : sh.n * ld + align;
  const index_t ldc = sh.n + sh.ldc_pad;
  const index_t stride_c = sh.m * ldc + 16;  // keeps 16-byte alignment when ldc has it
  const index_t batches_b = sh.broadcast_b ? 1 : sh.batch;

  std::vector<T> a(static_cast<std::size_t>(stride_a * sh.batch)),
      b(static_cast<std::size_t>((sh.n * ld + align) * batches_b));
  std::uniform_real_distribution<double> real(-1.0, 1.0);
  std::uniform_int_distribution<int> small(-128, 127);
  auto gen = [&]() -> T {
    if constexpr (is_int8<T>) {
      return static_cast<T>(small(rng));
    } else {
      return from_double<T>(real(rng));
    }
  };
  // Padding holds values too (not zeros): a kernel that reads past k would be caught.
  for (auto& x : a) x = gen();
  for (auto& x : b) x = gen();

  // C: the poison everywhere, random values inside the matrices when beta != 0.
  const unsigned char poison = is_int8<T> && std::is_integral_v<TC> ? 0x7f : 0xff;  // 0xff.. is NaN
  std::vector<TC> c(static_cast<std::size_t>(stride_c * sh.batch));
  std::memset(static_cast<void*>(c.data()), poison, c.size() * sizeof(TC));
  const std::vector<TC> poisoned = c;
  if (beta != 0.0) {
    for (index_t q = 0; q < sh.batch; ++q)
      for (index_t i = 0; i < sh.m; ++i)
        for (index_t j = 0; j < sh.n; ++j) {
          // With int32 alpha/beta (int8 inputs), beta * C is formed in int32: C holds integers.
          c[static_cast<std::size_t>(q * stride_c + i * ldc + j)] =
              std::is_integral_v<TC> || std::is_integral_v<S> ? from_double<TC>(small(rng))
                                                              : from_double<TC>(real(rng));
        }
  }
  const std::vector<TC> c0 = c;

  auto check = [&](const std::vector<TC>& out) {
    const double u = std::ldexp(1.0, -24);
    const double prod_rel = std::is_same_v<T, float> ? 2.01 * std::ldexp(1.0, -10) : 0.0;
    const double out_rel = std::is_same_v<TC, __half>          ? std::ldexp(1.0, -11)
                           : std::is_same_v<TC, __nv_bfloat16> ? std::ldexp(1.0, -8)
                                                               : (std::is_same_v<TC, float> ? u : 0.0);
    index_t bad = 0;
    for (index_t q = 0; q < sh.batch; ++q) {
      const T* aq = a.data() + q * stride_a;
      const T* bq = b.data() + q * stride_b;
      for (index_t i = 0; i < sh.m; ++i) {
        for (index_t j = 0; j < sh.n; ++j) {
          double dot = 0.0, mag = 0.0;
          for (index_t kk = 0; kk < sh.k; ++kk) {
            const double pr = to_double(aq[i * ld + kk]) * to_double(bq[j * ld + kk]);
            dot += pr;
            mag += std::fabs(pr);
          }
          const std::size_t at = static_cast<std::size_t>(q * stride_c + i * ldc + j);
          const double cold = beta != 0.0 ? to_double(c0[at]) : 0.0;
          double want = alpha * dot + beta * cold;
          if (epi_ref) want = epi_ref(want, i, j);
          const double got = to_double(out[at]);
          double tol = 0.0;
          if (!is_int8<T>) {
            tol = std::fabs(alpha) * (prod_rel * mag + 2.0 * static_cast<double>(sh.k) * u * mag) +
                  4.0 * u * (std::fabs(alpha) * mag + std::fabs(beta * cold) + bias_mag);
          }
          tol += out_rel * (std::fabs(want) + tol);
          if (!(std::fabs(got - want) <= tol)) {
            if (++bad <= 5) {
              ADD_FAILURE() << "C[" << q << "](" << i << ", " << j << ") = " << got << ", want " << want
                            << " +- " << tol;
            }
          }
        }
      }
      // Padding columns of C and the gap between batches stay as they were.
      for (index_t i = 0; i < sh.m; ++i) {
        for (index_t j = sh.n; j < ldc; ++j) {
          const std::size_t at = static_cast<std::size_t>(q * stride_c + i * ldc + j);
          if (std::memcmp(&out[at], &poisoned[at], sizeof(TC)) != 0 && ++bad <= 5) {
            ADD_FAILURE() << "padding C[" << q << "](" << i << ", " << j << ") was written";
          }
        }
      }
    }
    EXPECT_EQ(bad, 0);
  };

  spillway::stream s(spillway::current_device());
  spillway::device_buffer<T> da(a.size(), s), db(b.size(), s);
  spillway::device_buffer<TC> dc(c.size(), s);
  da.copy_from_host_async(cuda::std::span<const T>(a.data(), a.size()), s);
  db.copy_from_host_async(cuda::std::span<const T>(b.data(), b.size()), s);

  gemm::detail::problem<T, T, TC, S, Epi> p;
  p.m = sh.m;
  p.n = sh.n;
  p.k = sh.k;
  p.a = da.data();
  p.lda = ld;
  p.b = db.data();
  p.ldb = ld;
  p.c = dc.data();
  p.ldc = ldc;
  p.alpha = static_cast<S>(alpha);
  p.beta = static_cast<S>(beta);
  p.batch = sh.batch;
  p.stride_a = stride_a;
  p.stride_b = stride_b;
  p.stride_c = stride_c;
  p.epi = epi;

  dc.copy_from_host_async(cuda::std::span<const TC>(c0.data(), c0.size()), s);
  gemm::detail::launch_wgmma(p, s.view());
  std::vector<TC> out(c.size());
  dc.copy_to_host_async(cuda::std::span<TC>(out.data(), out.size()), s);
  s.synchronize();
  check(out);
}

const std::vector<shape> edge_shapes = {
    {1, 1, 1},
    {7, 13, 1},
    {1, 300, 5},
    {131, 257, 67},
    {128, 256, 64, 1, false, 0},
    {129, 255, 200},
    {61, 509, 129},
    {4099, 67, 45},
    {97, 4099, 33},
    {65, 130, 4099},
    {257, 513, 130, 1, false, 2},
    {300, 520, 96, 1, false, 8},
    {1000, 768, 64, 1, false, 0},
};

template <class T, class TC>
void run_edges(const char* type) {
  for (const shape& sh : edge_shapes) {
    run_case<T, TC>(sh, 1.0, 0.0, std::string(type) + " edges beta=0");
  }
}

}  // namespace

TEST(WgmmaKernelGpu, Bf16EdgeShapes) {
  SPILLWAY_WGMMA_TEST_OR_SKIP();
  run_edges<__nv_bfloat16, float>("bf16");
}

TEST(WgmmaKernelGpu, HalfEdgeShapes) {
  SPILLWAY_WGMMA_TEST_OR_SKIP();
  run_edges<__half, float>("half");
}

TEST(WgmmaKernelGpu, Tf32EdgeShapes) {
  SPILLWAY_WGMMA_TEST_OR_SKIP();
  run_edges<float, float>("tf32");
}

TEST(WgmmaKernelGpu, Int8EdgeShapes) {
  SPILLWAY_WGMMA_TEST_OR_SKIP();
  run_edges<std::int8_t, std::int32_t>("int8");
}

TEST(WgmmaKernelGpu, BetaAndAlpha) {
  SPILLWAY_WGMMA_TEST_OR_SKIP();
  run_case<__nv_bfloat16, float>({131, 300, 77}, 0.75, -1.5, "bf16 beta");
  run_case<__half, float>({200, 129, 150, 1, false, 2}, -2.0, 0.5, "half beta pairs");
  run_case<float, float>({67, 260, 99}, 1.25, 1.0, "tf32 beta");
  run_case<std::int8_t, std::int32_t>({130, 257, 300, 1, false, 4}, 3.0, -2.0, "int8 beta");
}

TEST(WgmmaKernelGpu, NarrowerOutputs) {
  SPILLWAY_WGMMA_TEST_OR_SKIP();
  run_case<__nv_bfloat16, __nv_bfloat16>({131, 259, 96}, 1.0, 0.0, "bf16->bf16");
  run_case<__nv_bfloat16, __nv_bfloat16>({64, 512, 64, 1, false, 0}, 0.5, 2.0, "bf16->bf16 beta pairs");
  run_case<__half, __half>({129, 300, 257, 1, false, 1}, 1.0, 0.0, "half->half");
  run_case<__half, __half>({100, 256, 80, 1, false, 0}, 1.0, -1.0, "half->half beta pairs");
  run_case<std::int8_t, float>({77, 301, 129}, 1.0, 0.0, "int8->float");
  run_case<std::int8_t, float>({128, 256, 256, 1, false, 0}, 2.0, 1.0, "int8->float beta pairs");
}

TEST(WgmmaKernelGpu, Batched) {
  SPILLWAY_WGMMA_TEST_OR_SKIP();
  run_case<__nv_bfloat16, float>({67, 300, 150, 3}, 1.0, 0.0, "bf16 batched");
  run_case<__half, float>({130, 70, 64, 4, true}, 1.0, 0.5, "half batched shared B");
  run_case<float, float>({129, 257, 40, 2}, -1.0, 0.0, "tf32 batched");
  run_case<std::int8_t, std::int32_t>({50, 513, 200, 3}, 1.0, 1.0, "int8 batched");
  run_case<__nv_bfloat16, __nv_bfloat16>({130, 512, 64, 2, false, 0}, 1.0, 0.0, "bf16->bf16 batched bulk");
  run_case<float, float>({200, 520, 72, 3, false, 8}, 1.0, 2.0, "tf32 batched bulk beta");
}

TEST(WgmmaKernelGpu, Epilogue) {
  SPILLWAY_WGMMA_TEST_OR_SKIP();
  const index_t n = 301;
  std::vector<float> bias(static_cast<std::size_t>(n));
  std::mt19937_64 rng(spillway::test::seed("wgmma epilogue bias"));
  std::uniform_real_distribution<float> real(-4.0f, 4.0f);
  for (auto& x : bias) x = real(rng);
  spillway::stream s(spillway::current_device());
  spillway::device_buffer<float> dbias(bias.size(), s);
  dbias.copy_from_host_async(cuda::std::span<const float>(bias.data(), bias.size()), s);
  s.synchronize();
  auto epi = gemm::chain(gemm::bias_per_col<float>{dbias.data()}, gemm::relu{});
  auto ref = [&](double v, index_t, index_t col) {
    const double r = v + static_cast<double>(bias[static_cast<std::size_t>(col)]);
    return r > 0.0 ? r : 0.0;
  };
  run_case<__nv_bfloat16, float>({133, n, 70}, 1.0, 0.5, "bf16 bias+relu", epi, ref, 4.0);
}

namespace {

/// The public entry point with path wgmma on tiny shapes (a 1 x 1 x 1 product is one tile of 1 row
/// and one column, mostly zero-filled boxes). In a full run the direct-launcher tests have already
/// launched the same kernels (launch set-up is cached per instantiation). TN layout; the bound is
/// run_case's with alpha = 1, beta = 0.
template <class T, class TC>
void public_small(const char* type) {
  using S = gemm::accumulator_t<T>;
  std::mt19937_64 rng(spillway::test::seed(std::string("wgmma public small ") + type));
  std::uniform_real_distribution<double> real(-1.0, 1.0);
  std::uniform_int_distribution<int> small(-128, 127);
  const index_t shapes[][3] = {{1, 1, 1}, {1, 1, 9}, {2, 3, 1}, {1, 5, 70}, {19, 1, 33}, {3, 300, 2}};
  spillway::stream s(spillway::current_device());
  for (const auto& sh : shapes) {
    const index_t m = sh[0], n = sh[1], k = sh[2];
    SCOPED_TRACE(std::string(type) + " m=" + std::to_string(m) + " n=" + std::to_string(n) +
                 " k=" + std::to_string(k));
    std::vector<T> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(n * k));
    for (auto* v : {&a, &b}) {
      for (auto& x : *v) x = is_int8<T> ? static_cast<T>(small(rng)) : from_double<T>(real(rng));
    }
    spillway::device_buffer<T> da(a.size(), s), db(b.size(), s);
    spillway::device_buffer<TC> dc(static_cast<std::size_t>(m * n), s);
    da.copy_from_host_async(cuda::std::span<const T>(a.data(), a.size()), s);
    db.copy_from_host_async(cuda::std::span<const T>(b.data(), b.size()), s);
    std::vector<TC> out(static_cast<std::size_t>(m * n));
    std::memset(static_cast<void*>(out.data()), 0x7f, out.size() * sizeof(TC));  // poison
    dc.copy_from_host_async(cuda::std::span<const TC>(out.data(), out.size()), s);
    gemm::gemm_options o;
    o.path = gemm::gemm_path::wgmma;
    gemm::gemm_async(s.view(), S(1), gemm::row_major(da.data(), m, k), gemm::row_major(db.data(), n, k).t(),
                     S(0), gemm::row_major(dc.data(), m, n), o);
    dc.copy_to_host_async(cuda::std::span<TC>(out.data(), out.size()), s);
    s.synchronize();
    const double u = std::ldexp(1.0, -24);
    for (index_t i = 0; i < m; ++i) {
      for (index_t j = 0; j < n; ++j) {
        double dot = 0.0, mag = 0.0;
        for (index_t kk = 0; kk < k; ++kk) {
          const double pr = to_double(a[static_cast<std::size_t>(i * k + kk)]) *
                            to_double(b[static_cast<std::size_t>(j * k + kk)]);
          dot += pr;
          mag += std::fabs(pr);
        }
        const double tol = is_int8<T> ? 0.0 : (2.0 * static_cast<double>(k) + 4.0) * u * mag;
        const double got = to_double(out[static_cast<std::size_t>(i * n + j)]);
        EXPECT_LE(std::fabs(got - dot), tol) << "C(" << i << ", " << j << ") = " << got << ", want " << dot;
      }
    }
  }
}

}  // namespace

TEST(WgmmaKernelGpu, PublicPathSmallShapes) {
  SPILLWAY_WGMMA_TEST_OR_SKIP();
  public_small<__nv_bfloat16, float>("bf16");
  public_small<__half, float>("half");
  public_small<std::int8_t, std::int32_t>("int8");
}

// The persistent tile order visits every (batch, tile row, tile column) exactly once (host only).
TEST(WgmmaKernel, ScheduleIsABijection) {
  for (std::int64_t tm : {1, 3, 16, 17, 40}) {
    for (std::int64_t tn : {1, 5, 32}) {
      for (std::int64_t batch : {1, 3}) {
        for (int group : {1, 8, 16}) {
          gemm::detail::wgmma_schedule sch;
          sch.tiles_m = tm;
          sch.tiles_n = tn;
          sch.per_batch = tm * tn;
          sch.total = sch.per_batch * batch;
          sch.group_m = group;
          std::vector<int> seen(static_cast<std::size_t>(sch.total), 0);
          for (std::int64_t t = 0; t < sch.total; ++t) {
            const auto tl = sch.locate(t);
            ASSERT_TRUE(tl.q >= 0 && tl.q < batch && tl.tm >= 0 && tl.tm < tm && tl.tn >= 0 && tl.tn < tn)
                << "t=" << t << " tm=" << tm << " tn=" << tn << " group=" << group;
            ++seen[static_cast<std::size_t>((tl.q * tm + tl.tm) * tn + tl.tn)];
          }
          for (int v : seen) ASSERT_EQ(v, 1) << "tm=" << tm << " tn=" << tn << " group=" << group;
        }
      }
    }
  }
}

// The tensor-map builder names what TMA cannot encode before it reaches the driver (host only).
TEST(WgmmaKernel, TensorMapRefusesWhatTmaCannotEncode) {
  alignas(16) static std::uint16_t buf[64];
  auto msg = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const spillway::logic_error& e) {
      return e.what();
    }
    return "no logic_error";
  };
  using spillway::tile::make_matrix_tensor_map;
  using spillway::tile::swizzle;
  const __half* h = reinterpret_cast<const __half*>(buf);
  EXPECT_NE(msg([&] {
              make_matrix_tensor_map(h + 1, 4, 8, 8, 4, 8, swizzle::none, "A");
            }).find("not 16-byte aligned"),
            std::string::npos);
  EXPECT_NE(msg([&] { make_matrix_tensor_map(h, 4, 8, 9, 4, 8, swizzle::none, "A"); }).find("pitch 18 bytes"),
            std::string::npos);
  EXPECT_NE(
      msg([&] { make_matrix_tensor_map(h, 4, 8, 8, 300, 8, swizzle::none, "A"); }).find("box extent 300"),
      std::string::npos);
  EXPECT_NE(msg([&] {
              make_matrix_tensor_map(h, 4, 8, 8, 4, 128, swizzle::b128, "A");
            }).find("exceeds the 128-byte"),
            std::string::npos);
  EXPECT_NE(
      msg([&] { make_matrix_tensor_map(h, 4, 8, 8, 4, 4, swizzle::b128, "A"); }).find("not a multiple of 16"),
      std::string::npos);
  EXPECT_NE(msg([&] { make_matrix_tensor_map(h, 0, 8, 8, 4, 8, swizzle::b128, "A"); }).find("extent 0"),
            std::string::npos);
  EXPECT_EQ(
      msg([&] { make_matrix_tensor_map(h, 0, 8, 8, 4, 8, swizzle::b128, "gemm: A"); }).rfind("gemm: A: ", 0),
      0u);
}
