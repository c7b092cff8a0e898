// The SIMT GEMM launcher (gemm/detail/simt_kernel.cuh) called directly on canonical problems:
// every element type, both majors of each operand, vector-aligned and misaligned operands (pointer
// one element off, odd leading dimensions), edge shapes, batches with gaps and a broadcast A,
// β = 0 over a NaN-poisoned C and β ≠ 0, an epilogue that reads (row, col); against a host
// reference in double (complex<double>, int64 for int8) on random inputs with printed seeds.
//
// Operand elements outside the m x k / n x k matrices (leading-dimension padding, gaps between
// batch entries) are NaN for floating types, so a load past an edge that reached the arithmetic
// shows as NaN. C's padding and gaps are poisoned and must come back bit-identical.
//
// Error bound, u = unit roundoff of the accumulator (float, and complex<float>: 2^-24; double:
// 2^-53), S = Σ_kk |A(i,kk)|·|B(j,kk)| (complex magnitudes), P = |α|·S + |β|·|C0(i,j)|:
//   real:    |err| ≤ 2·(k + 4)·u·P + u_out·|ref|
//   complex: |err| ≤ 4·(k + 4)·u·P + u_out·|ref|   (each part is a chain of 2k FMAs)
// (k FMAs in any order: γ_k·S; the factor 2 and the +4 cover α·acc + β·C and the epilogue's
// adds.) half / bf16 inputs are exact in float and so are their products. u_out: rounding to a
// narrower C (half 2^-11, bf16 2^-8), else 0. int8 -> int32 is exact.
#include <spillway/gemm/detail/simt_kernel.cuh>

#include <spillway/core/device_buffer.hpp>
#include <spillway/core/stream.hpp>

#include <support/gpu_test.hpp>
#include <support/narrow_values.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using namespace spillway;
using gemm::detail::launch_simt;
using gemm::detail::problem;
using spillway::test::from_double;
using spillway::test::poison_value;
using cfloat = cuda::std::complex<float>;

template <class T>
inline constexpr bool is_cplx = std::is_same_v<T, cfloat>;
template <class T>
inline constexpr bool is_int = std::is_same_v<T, std::int8_t> || std::is_same_v<T, std::int32_t>;

// Host images of elements as std::complex<double> (imaginary part 0 for real types).
template <class T>
std::complex<double> wide(T x) {
  if constexpr (is_cplx<T>) {
    return {static_cast<double>(x.real()), static_cast<double>(x.imag())};
  } else {
    return {gemm::detail::widen<double>(x), 0.0};
  }
}

template <class T>
T random_value(std::mt19937_64& g) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  if constexpr (std::is_same_v<T, std::int8_t> || std::is_same_v<T, std::int32_t>) {
    int v = 0;
    while (v == 0) v = std::uniform_int_distribution<int>(-128, 127)(g);
    return static_cast<T>(v);
  } else if constexpr (is_cplx<T>) {
    return T(static_cast<float>(u(g)), static_cast<float>(u(g)));
  } else {
    return from_double<T>(u(g));
  }
}

template <class T>
double unit_roundoff() {
  if constexpr (std::is_same_v<T, double>) return std::ldexp(1.0, -53);
  if constexpr (std::is_same_v<T, __half>) return std::ldexp(1.0, -11);
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return std::ldexp(1.0, -8);
  if constexpr (is_int<T>) return 0.0;
  return std::ldexp(1.0, -24);
}

/// A test case in the launcher's own terms (see problem.hpp).
struct spec {
  index_t m = 1, n = 1, k = 1;
  bool a_kmajor = true, b_kmajor = true;
  index_t batch = 1;
  double alpha = 1.0, beta = 0.0;
  index_t off_a = 0, off_b = 0, off_c = 0;  // elements: misalign the pointers
  index_t pad_a = 0, pad_b = 0, pad_c = 0;  // extra leading-dimension elements
  bool broadcast_a = false;                 // stride_a = 0
};

std::string describe(const spec& s) {
  std::ostringstream os;
  os << s.m << "x" << s.n << "x" << s.k << " A:" << (s.a_kmajor ? "K" : "M") << " B:" << (s.b_kmajor ? "K" : "M")
     << " batch " << s.batch << " alpha " << s.alpha << " beta " << s.beta << " off " << s.off_a << "/" << s.off_b
     << "/" << s.off_c << " pad " << s.pad_a << "/" << s.pad_b << "/" << s.pad_c
     << (s.broadcast_a ? " broadcast A" : "");
  return os.str();
}

/// One operand stored as `rows` (of C's frame) x k, K-major or not, `batch` entries 7 elements
/// apart beyond the footprint (or all the same when broadcast); everything outside the matrices is
/// poison.
template <class T>
struct operand {
  std::vector<T> buf;
  index_t off = 0, ld = 0, stride = 0;
  bool kmajor = true;
  index_t rows = 0, k = 0;
  [[nodiscard]] std::size_t index(index_t q, index_t r, index_t kk) const {
    return static_cast<std::size_t>(off + q * stride + (kmajor ? r * ld + kk : kk * ld + r));
  }
  const T& at(index_t q, index_t r, index_t kk) const { return buf[index(q, r, kk)]; }
};

template <class T>
operand<T> make_operand(index_t rows, index_t k, bool kmajor, index_t pad, index_t off, index_t batch, bool broadcast,
                        std::mt19937_64& g) {
  operand<T> o;
  o.rows = rows, o.k = k, o.kmajor = kmajor, o.off = off;
  o.ld = (kmajor ? k : rows) + pad;
  const index_t fp = (kmajor ? rows : k) * o.ld;
  o.stride = broadcast ? 0 : fp + 7;
  o.buf.assign(static_cast<std::size_t>(off + (batch - 1) * o.stride + fp), poison_value<T>());
  for (index_t q = 0; q < (broadcast ? 1 : batch); ++q)
    for (index_t r = 0; r < rows; ++r)
      for (index_t kk = 0; kk < k; ++kk) o.buf[o.index(q, r, kk)] = random_value<T>(g);
  return o;
}

/// An epilogue that reads both coordinates: adds row_bias[row] + col_bias[col].
struct row_col_bias {
  const float* row_bias;
  const float* col_bias;
  template <class V>
  __host__ __device__ V operator()(V v, index_t row, index_t col) const {
    return v + static_cast<V>(row_bias[row]) + static_cast<V>(col_bias[col]);
  }
};

template <class T, class TC, class Epi = gemm::identity>
void run_case(const spec& s, std::uint64_t seed) {
  using S = gemm::accumulator_t<T>;
  SCOPED_TRACE(describe(s));
  std::mt19937_64 g(seed);
  stream st;
  const operand<T> a = make_operand<T>(s.m, s.k, s.a_kmajor, s.pad_a, s.off_a, s.batch, s.broadcast_a, g);
  const operand<T> b = make_operand<T>(s.n, s.k, s.b_kmajor, s.pad_b, s.off_b, s.batch, false, g);

  const index_t ldc = s.n + s.pad_c, stride_c = s.m * ldc + 3;
  std::vector<TC> c0(static_cast<std::size_t>(s.off_c + (s.batch - 1) * stride_c + s.m * ldc), poison_value<TC>());
  auto c_at = [&](std::vector<TC>& c, index_t q, index_t i, index_t j) -> TC& {
    return c[static_cast<std::size_t>(s.off_c + q * stride_c + i * ldc + j)];
  };
  if (s.beta != 0.0)
    for (index_t q = 0; q < s.batch; ++q)
      for (index_t i = 0; i < s.m; ++i)
        for (index_t j = 0; j < s.n; ++j) c_at(c0, q, i, j) = random_value<TC>(g);

  std::vector<float> row_bias(static_cast<std::size_t>(s.m)), col_bias(static_cast<std::size_t>(s.n));
  for (auto& x : row_bias) x = random_value<float>(g);
  for (auto& x : col_bias) x = random_value<float>(g);

  auto da = device_buffer<T>::from_host(a.buf, st);
  auto db = device_buffer<T>::from_host(b.buf, st);
  auto dc = device_buffer<TC>::from_host(c0, st);
  auto drb = device_buffer<float>::from_host(row_bias, st);
  auto dcb = device_buffer<float>::from_host(col_bias, st);

  problem<T, T, TC, S, Epi> p;
  p.m = s.m, p.n = s.n, p.k = s.k;
  p.a = da.data() + s.off_a, p.lda = a.ld, p.a_kmajor = s.a_kmajor;
  p.b = db.data() + s.off_b, p.ldb = b.ld, p.b_kmajor = s.b_kmajor;
  p.c = dc.data() + s.off_c, p.ldc = ldc;
  p.alpha = static_cast<S>(s.alpha);
  p.beta = static_cast<S>(s.beta);
  p.batch = s.batch;
  p.stride_a = a.stride, p.stride_b = b.stride, p.stride_c = stride_c;
  if constexpr (std::is_same_v<Epi, row_col_bias>) p.epi = row_col_bias{drb.data(), dcb.data()};

  launch_simt(p, stream_view(st.value()));
  std::vector<TC> c(c0.size());
  dc.copy_to_host_async(cuda::std::span<TC>(c.data(), c.size()), st);
  st.synchronize();

  const double u = unit_roundoff<S>(), u_out = std::is_same_v<TC, S> ? 0.0 : unit_roundoff<TC>();
  const double factor = is_cplx<T> ? 4.0 : 2.0;
  long bad = 0;
  double worst = 0;
  std::ostringstream os;
  std::vector<char> inside(c.size(), 0);
  for (index_t q = 0; q < s.batch; ++q)
    for (index_t i = 0; i < s.m; ++i)
      for (index_t j = 0; j < s.n; ++j) {
        std::complex<double> acc = 0;
        double sabs = 0;
        std::int64_t iacc = 0;
        for (index_t kk = 0; kk < s.k; ++kk) {
          const auto x = wide(a.at(q, i, kk)), y = wide(b.at(q, j, kk));
          acc += x * y;
          sabs += std::abs(x) * std::abs(y);
          if constexpr (is_int<T>) iacc += static_cast<std::int64_t>(a.at(q, i, kk)) * b.at(q, j, kk);
        }
        const std::size_t e = static_cast<std::size_t>(s.off_c + q * stride_c + i * ldc + j);
        inside[e] = 1;
        std::complex<double> ref = s.alpha * acc;
        double pmag = std::abs(s.alpha) * sabs;
        if (s.beta != 0.0) {
          ref += s.beta * wide(c0[e]);
          pmag += std::abs(s.beta) * std::abs(wide(c0[e]));
        }
        if constexpr (std::is_same_v<Epi, row_col_bias>) {
          ref += static_cast<double>(row_bias[static_cast<std::size_t>(i)]) +
                 static_cast<double>(col_bias[static_cast<std::size_t>(j)]);
          pmag += std::abs(row_bias[static_cast<std::size_t>(i)]) + std::abs(col_bias[static_cast<std::size_t>(j)]);
        }
        if constexpr (is_int<T>) {
          std::int64_t want = static_cast<std::int64_t>(s.alpha) * iacc;
          if (s.beta != 0.0) want += static_cast<std::int64_t>(s.beta) * static_cast<std::int64_t>(c0[e]);
          ref = static_cast<double>(static_cast<TC>(want));  // int32 wraps like the device
        }
        const double tol = factor * (static_cast<double>(s.k) + 4) * u * pmag + u_out * std::abs(ref);
        const double err = std::abs(wide(c[e]) - ref);
        if (tol > 0) worst = std::max(worst, err / tol);
        if (!(err <= tol) && bad++ < 5) {
          os << "\n  C[" << q << "](" << i << "," << j << ") = " << wide(c[e]) << ", want " << ref << " (|err| " << err
             << " > tol " << tol << ")";
        }
      }
  for (std::size_t e = 0; e < c.size(); ++e)
    if (!inside[e] && std::memcmp(&c[e], &c0[e], sizeof(TC)) != 0 && bad++ < 10)
      os << "\n  element " << e << " outside C was written";
  EXPECT_EQ(bad, 0) << bad << " bad elements, worst err/tol " << worst << os.str();
}

/// The shapes every type runs, in all four major combinations.
std::vector<spec> type_sweep() {
  std::vector<spec> out;
  const index_t shapes[][3] = {{1, 1, 1}, {67, 131, 45}, {130, 70, 17}};
  for (const auto& sh : shapes)
    for (int ak = 0; ak < 2; ++ak)
      for (int bk = 0; bk < 2; ++bk) {
        spec s;
        s.m = sh[0], s.n = sh[1], s.k = sh[2];
        s.a_kmajor = ak != 0, s.b_kmajor = bk != 0;
        out.push_back(s);
      }
  spec mis;  // misaligned pointers and odd leading dimensions: the one-element load modes
  mis.m = 71, mis.n = 133, mis.k = 29, mis.off_a = 1, mis.off_b = 1, mis.off_c = 1, mis.pad_a = 1, mis.pad_b = 3,
  mis.pad_c = 1;
  out.push_back(mis);
  mis.a_kmajor = mis.b_kmajor = false;
  out.push_back(mis);
  spec bat;  // batch with gaps, β ≠ 0, α ≠ 1, aligned (vector load modes)
  bat.m = 65, bat.n = 129, bat.k = 40, bat.batch = 3, bat.alpha = -2.0, bat.beta = 3.0, bat.pad_a = 4, bat.pad_b = 4;
  out.push_back(bat);
  return out;
}

template <class T, class TC>
void sweep(const char* name) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const std::uint64_t seed = test::seed(std::string("simt ") + name);
  std::uint64_t q = 0;
  for (const spec& s : type_sweep()) run_case<T, TC>(s, seed + q++);
}

TEST(SimtKernelGpu, FloatAllMajors) { sweep<float, float>("float"); }
TEST(SimtKernelGpu, DoubleAllMajors) { sweep<double, double>("double"); }
TEST(SimtKernelGpu, HalfAllMajors) { sweep<__half, __half>("half"); }
TEST(SimtKernelGpu, Bf16AllMajors) { sweep<__nv_bfloat16, __nv_bfloat16>("bf16"); }
TEST(SimtKernelGpu, Int8AllMajors) { sweep<std::int8_t, std::int32_t>("int8"); }
TEST(SimtKernelGpu, ComplexAllMajors) { sweep<cfloat, cfloat>("complex"); }

// Edge shapes on the float fast layout (both K-major, aligned) and on misaligned ones: primes,
// k = 1, sizes one past the tiles, k = 4099, the narrow (m <= 64) tile, several batch entries.
TEST(SimtKernelGpu, FloatEdgeShapes) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const std::uint64_t seed = test::seed("simt float edges");
  const index_t shapes[][3] = {{1, 1, 1},   {1, 257, 3}, {257, 1, 5},  {13, 17, 1}, {129, 129, 9},
                               {64, 300, 33}, {63, 5, 2}, {37, 41, 4099}, {256, 384, 64},
                               {300, 260, 1003}};  // the large tile's hot k loop with partial tiles and a k edge
  std::uint64_t q = 0;
  for (const auto& sh : shapes)
    for (int aligned = 0; aligned < 2; ++aligned) {
      spec s;
      s.m = sh[0], s.n = sh[1], s.k = sh[2];
      if (aligned == 0) {
        s.off_a = s.off_b = s.off_c = 1, s.pad_a = 1, s.pad_b = 2;
      } else {  // leading dimensions a multiple of 4: the vector (lean) loads, k edge included
        s.pad_a = s.pad_b = (4 - s.k % 4) % 4;
      }
      run_case<float, float>(s, seed + q++);
    }
}

// β = 0 never reads C: C is NaN everywhere, the result must be finite and right; β ≠ 0 reads it.
TEST(SimtKernelGpu, BetaZeroIgnoresNanC) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const std::uint64_t seed = test::seed("simt beta");
  spec s;
  s.m = 200, s.n = 136, s.k = 24, s.alpha = 0.5;
  run_case<float, float>(s, seed);
  run_case<cfloat, cfloat>(s, seed + 1);
  s.beta = -1.5;
  run_case<float, float>(s, seed + 2);
  run_case<cfloat, cfloat>(s, seed + 3);
}

// Strided batches on the fast layouts and on the generic one; A shared by every entry.
TEST(SimtKernelGpu, Batched) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const std::uint64_t seed = test::seed("simt batched");
  spec s;
  s.m = 64, s.n = 200, s.k = 300, s.batch = 5, s.pad_a = 4, s.pad_b = 8;
  run_case<float, float>(s, seed);  // narrow tile, vector loads
  s.m = 150, s.broadcast_a = true, s.beta = 1.0;
  run_case<float, float>(s, seed + 1);
  run_case<cfloat, cfloat>(s, seed + 2);
  s.a_kmajor = false, s.off_b = 1;
  run_case<float, float>(s, seed + 3);
}

// Mixed output types: float accumulation written as half / bf16, int8 written as float.
TEST(SimtKernelGpu, NarrowOutputs) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const std::uint64_t seed = test::seed("simt outputs");
  spec s;
  s.m = 77, s.n = 130, s.k = 50, s.beta = 0.5;
  run_case<float, __nv_bfloat16>(s, seed);
  run_case<__half, float>(s, seed + 1);
  s.beta = 0;
  run_case<std::int8_t, float>(s, seed + 2);
}

// The epilogue sees (row, col) of C: a per-row plus per-column bias.
TEST(SimtKernelGpu, EpilogueCoordinates) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const std::uint64_t seed = test::seed("simt epilogue");
  spec s;
  s.m = 190, s.n = 133, s.k = 20, s.batch = 2, s.beta = 1.0;
  run_case<float, float, row_col_bias>(s, seed);
  s.a_kmajor = false;
  run_case<float, float, row_col_bias>(s, seed + 1);
}

}  // namespace
