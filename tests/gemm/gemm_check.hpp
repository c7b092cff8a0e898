// Shared by the host and GPU GEMM tests: random operands in any layout, the double-precision
// reference, the error bound, and the element-by-element check (every element written, nothing
// outside C's matrices touched).
//
// The bound. For C = epi(α·Σ_k a·b + β·c0) accumulated with machine epsilon ε of the accumulator
// (float: 2^-23, double: 2^-52: one ulp per operation, which also covers tensor cores whose FP32
// accumulation truncates instead of rounding to nearest) and S = Σ_k |a_ik|·|b_kj|,
// P = |α|·S + |β|·|c0|:
//   |c - ref| <= 1.25 · (|α|·(k + 2)·ε·S + |α|·2·u_op·S) + 16·ε·P + u_out·|ref|
// - k·ε·S: any order of k multiply-adds (the classic γ_k bound; split-K and tensor-core
//   accumulation orders stay inside it);
// - 2·u_op·S: the operands as the arithmetic sees them — TF32 truncates each FP32 operand to 10
//   mantissa bits (relative error < 2^-10 each, so the product < 2·2^-10); 0 for exact paths (bf16,
//   half and int8 products are exact in FP32/int32);
// - 16·ε·P: α, β, the bias add and the epilogue's own evaluation (erf in GELU: a few ulps);
// - the factor 1.25 covers the epilogue's Lipschitz constant (GELU's is < 1.13, the others' 1);
// - u_out·|ref|: rounding to a narrower C (half 2^-11, bf16 2^-8, float 2^-24 for int8 sums).
// int8 with int32 output is exact (tolerance 0).
// FP8 on the tensor cores: products are exact, but the tensor cores add them at reduced precision;
// (k + 2)·ε becomes (min(k, r) + 2)·u_tc + (⌈k / r⌉ + 2)·ε for runs of r products summed at u_tc
// before the FP32 adds (use_fp8_tensor_cores: r = 128 promoted, r = k fast).
#pragma once

#include <spillway/gemm/epilogue.hpp>
#include <spillway/gemm/host_gemm.hpp>
#include <spillway/gemm/matrix_view.hpp>
#include <spillway/gemm/options.hpp>

#include <cuda/std/complex>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace spillway::gemm::test {

using cfloat = cuda::std::complex<float>;
using cdouble = cuda::std::complex<double>;

template <class T>
inline constexpr bool is_complex_v = std::is_same_v<T, cfloat> || std::is_same_v<T, cdouble>;

/// The double (or complex<double>) image of any element type.
template <class T>
auto to_wide(T x) {
  if constexpr (is_complex_v<T>) {
    return cdouble(static_cast<double>(x.real()), static_cast<double>(x.imag()));
  } else {
    return detail::load_output<double>(x);
  }
}
template <class T>
double magnitude(T x) {
  if constexpr (is_complex_v<T>) {
    return std::hypot(static_cast<double>(x.real()), static_cast<double>(x.imag()));
  } else {
    return std::fabs(detail::load_output<double>(x));
  }
}

inline double wabs(double x) {
  return std::fabs(x);
}
inline double wabs(const cdouble& x) {
  return std::hypot(x.real(), x.imag());
}
inline std::string wstr(double x) {
  std::ostringstream os;
  os.precision(9);
  os << x;
  return os.str();
}
inline std::string wstr(const cdouble& x) {
  return "(" + wstr(x.real()) + "," + wstr(x.imag()) + ")";
}

/// A random element: floats uniform in [-1, 1] (never 0), ints in [-128, 127] (never 0).
template <class T>
T random_value(std::mt19937_64& g) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  auto nz = [&] {
    double v = u(g);
    while (std::fabs(v) < 1e-3) v = u(g);
    return v;
  };
  if constexpr (std::is_same_v<T, std::int8_t> || std::is_same_v<T, std::int32_t>) {
    std::uniform_int_distribution<int> d(-128, 127);
    int v = 0;
    while (v == 0) v = d(g);
    return static_cast<T>(v);
  } else if constexpr (is_complex_v<T>) {
    using R = typename T::value_type;
    return T(static_cast<R>(nz()), static_cast<R>(nz()));
  } else {
    return detail::convert_output<T>(nz());
  }
}

/// The poison written into outputs before a run: NaN for floating point, 0x7f7f7f7f for ints.
template <class T>
T poison() {
  if constexpr (std::is_same_v<T, std::int32_t>) {
    return static_cast<T>(0x7f7f7f7f);
  } else if constexpr (std::is_same_v<T, std::int8_t>) {
    return static_cast<T>(0x7f);
  } else if constexpr (is_complex_v<T>) {
    using R = typename T::value_type;
    return T(std::numeric_limits<R>::quiet_NaN(), std::numeric_limits<R>::quiet_NaN());
  } else {
    return detail::convert_output<T>(std::numeric_limits<float>::quiet_NaN());
  }
}

/// Unit roundoff of an accumulator / output type (0: exact).
template <class T>
double unit_roundoff() {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, cfloat>) return std::ldexp(1.0, -24);
  if constexpr (std::is_same_v<T, double> || std::is_same_v<T, cdouble>) return std::ldexp(1.0, -53);
  if constexpr (std::is_same_v<T, __half>) return std::ldexp(1.0, -11);
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return std::ldexp(1.0, -8);
  return 0.0;
}

/// How a test operand is stored: `order` of the stored matrix, `transposed`: the stored matrix is
/// cols x rows and the view handed to the GEMM is its .t(); `pad`: extra leading-dimension
/// elements; `offset`: elements skipped at the start (misaligns sub-views).
struct storage {
  layout order = layout::row_major;
  bool transposed = false;
  index_t pad = 0;
  index_t offset = 0;
};

inline std::string describe(const storage& s) {
  std::string r = std::string(s.transposed ? "T(" : "") + (s.order == layout::row_major ? "row" : "col") +
                  (s.transposed ? ")" : "");
  if (s.pad != 0) r += "+ld" + std::to_string(s.pad);
  if (s.offset != 0) r += "@" + std::to_string(s.offset);
  return r;
}

/// A host matrix (or strided batch) of T and its view as the GEMM takes it.
template <class T>
struct host_matrix {
  std::vector<T> buf;
  matrix_view<T> view;  ///< into buf (host); the GPU tests rebase it onto a device copy
  [[nodiscard]] matrix_view<const T> cview() const { return view; }
};

/// rows x cols (as the GEMM sees it) stored per `st`, `batch` matrices `extra` elements apart beyond
/// the footprint (extra < 0: batch stride 0, every entry the same matrix), filled at random.
template <class T>
host_matrix<T> make_matrix(index_t rows, index_t cols, storage st, index_t batch, index_t extra,
                           std::mt19937_64& g) {
  host_matrix<T> h;
  const index_t sr = st.transposed ? cols : rows, sc = st.transposed ? rows : cols;
  const index_t minor = st.order == layout::row_major ? sc : sr,
                major = st.order == layout::row_major ? sr : sc;
  const index_t ld = (minor > 1 ? minor : 1) + st.pad;
  const index_t fp = major > 0 && minor > 0 ? (major - 1) * ld + minor : 0;
  const index_t stride = extra < 0 ? 0 : fp + extra;
  const index_t count = st.offset + (batch > 1 && stride > 0 ? (batch - 1) * stride : 0) + fp + 1;
  h.buf.resize(static_cast<std::size_t>(count));
  for (auto& x : h.buf) x = random_value<T>(g);
  matrix_view<T> v{h.buf.data() + st.offset, sr, sc, ld, st.order, batch > 1 ? stride : 0};
  h.view = st.transposed ? v.t() : v;
  return h;
}

/// The reference C (as double or complex<double>, in C's frame, batch-major, row-major per
/// matrix) and the error bound of each element (see the file comment).
template <class W>
struct reference {
  std::vector<W> value;
  std::vector<double> tol;
};

/// How the arithmetic under test reads operands and accumulates.
struct arithmetic {
  double u_acc = 0;  ///< accumulator machine epsilon (0: exact integer arithmetic)
  double u_op = 0;   ///< operand rounding (TF32: 2^-10)
  double u_out = 0;  ///< output rounding
  /// FP8 on the tensor cores: runs of `chunk` products summed at `u_chunk` per addition before
  /// the FP32 adds at u_acc (chunk 0: every addition at u_acc).
  double u_chunk = 0;
  index_t chunk = 0;
};

/// The tensor cores' FP8 accumulation as the bound models it: 2^-12 per addition (a model that
/// holds the measured errors with room; docs/gemm.md, "Accuracy"), over runs of 128 products when promoted
/// (fp8_accumulation::promoted) or the whole k (fast).
inline void use_fp8_tensor_cores(arithmetic& ar, bool fast, index_t k) {
  ar.u_chunk = std::ldexp(1.0, -12);
  ar.chunk = fast ? std::max<index_t>(k, 1) : 128;
}

template <class T, class TC>
arithmetic arithmetic_for(bool tf32) {
  arithmetic ar;
  ar.u_acc = 2 * unit_roundoff<accumulator_t<T>>();  // machine epsilon: one ulp per operation
  ar.u_op = tf32 ? std::ldexp(1.0, -10) : 0.0;
  ar.u_out = std::is_same_v<TC, accumulator_t<T>> ? 0.0 : unit_roundoff<TC>();
  if constexpr (std::is_same_v<T, std::int8_t> && std::is_same_v<TC, float>) ar.u_out = std::ldexp(1.0, -24);
  return ar;
}

/// Element (i, j) of the reference from its sums s = Σ a·b and sabs = Σ |a|·|b| over k terms:
/// epi(α·s + β·C0(i, j)) (complex: the identity epilogue only) and its bound (see the top).
template <class TA, class W, class CQ, class Epi>
std::pair<W, double> finish_element(double alpha_re, double beta_re, const W& s, double sabs, const CQ& cq, index_t i,
                                    index_t j, index_t k, const Epi& epi, const arithmetic& ar) {
  W v = W(alpha_re) * s;
  double p = std::fabs(alpha_re) * sabs;
  if (beta_re != 0.0) {
    const W c = to_wide(cq(i, j));
    v += W(beta_re) * c;
    p += std::fabs(beta_re) * wabs(c);
  }
  W out;
  if constexpr (is_complex_v<TA>) {
    out = v;
  } else {
    out = epi(v, i, j);
  }
  const double kd = static_cast<double>(k);
  const double sum_err = ar.chunk > 0 ? (static_cast<double>(std::min(k, ar.chunk)) + 2) * ar.u_chunk +
                                            (std::ceil(kd / static_cast<double>(ar.chunk)) + 2) * ar.u_acc
                                      : (kd + 2) * ar.u_acc;
  const double tol =
      1.25 * (std::fabs(alpha_re) * sum_err * sabs + std::fabs(alpha_re) * 2 * ar.u_op * sabs) +
      16 * ar.u_acc * p + ar.u_out * wabs(out);
  return {out, tol};
}

/// ref = epi(α·A·B + β·C0) in double, element by element in each operand's own frame (no
/// canonicalization: independent of the code under test). `epi` is called with double values.
template <class TA, class TB, class TC, class Epi>
auto compute_reference(double alpha_re, matrix_view<const TA> a, matrix_view<const TB> b, double beta_re,
                       matrix_view<const TC> c0, index_t batch, const Epi& epi, const arithmetic& ar) {
  using W = std::conditional_t<is_complex_v<TA>, cdouble, double>;
  reference<W> r;
  const index_t m = c0.rows, n = c0.cols, k = a.cols;
  r.value.resize(static_cast<std::size_t>(batch * m * n));
  r.tol.resize(r.value.size());
  std::vector<W> arow(static_cast<std::size_t>(k));
  std::vector<W> bcol(static_cast<std::size_t>(k * n));
  for (index_t q = 0; q < batch; ++q) {
    const auto aq = a.batch(q), bq = b.batch(q), cq = c0.batch(q);
    for (index_t j = 0; j < n; ++j)
      for (index_t x = 0; x < k; ++x) bcol[static_cast<std::size_t>(j * k + x)] = to_wide(bq(x, j));
    for (index_t i = 0; i < m; ++i) {
      for (index_t x = 0; x < k; ++x) arow[static_cast<std::size_t>(x)] = to_wide(aq(i, x));
      for (index_t j = 0; j < n; ++j) {
        W s(0);
        double sabs = 0;
        const W* bj = bcol.data() + j * k;
        for (index_t x = 0; x < k; ++x) {
          s += arow[static_cast<std::size_t>(x)] * bj[x];
          sabs += wabs(arow[static_cast<std::size_t>(x)]) * wabs(bj[x]);
        }
        const std::size_t e = static_cast<std::size_t>((q * m + i) * n + j);
        std::tie(r.value[e], r.tol[e]) = finish_element<TA>(alpha_re, beta_re, s, sabs, cq, i, j, k, epi, ar);
      }
    }
  }
  return r;
}

/// The same reference through host_gemm in double (blocked, OpenMP): for the larger GPU cases,
/// where the naive loop would dominate the test's time. Σ a·b and Σ |a|·|b| are two batched
/// double GEMMs of dense copies; α, β, the epilogue and the bound follow as above.
template <class TA, class TB, class TC, class Epi>
auto compute_reference_fast(double alpha_re, matrix_view<const TA> a, matrix_view<const TB> b, double beta_re,
                            matrix_view<const TC> c0, index_t batch, const Epi& epi, const arithmetic& ar) {
  using W = std::conditional_t<is_complex_v<TA>, cdouble, double>;
  const index_t m = c0.rows, n = c0.cols, k = a.cols;
  std::vector<W> ad(static_cast<std::size_t>(batch * m * k)), bd(static_cast<std::size_t>(batch * k * n));
  std::vector<double> aa(ad.size()), ba(bd.size());
  for (index_t q = 0; q < batch; ++q) {
    const auto aq = a.batch(q), bq = b.batch(q);
    for (index_t i = 0; i < m; ++i)
      for (index_t x = 0; x < k; ++x) {
        const std::size_t e = static_cast<std::size_t>((q * m + i) * k + x);
        ad[e] = to_wide(aq(i, x));
        aa[e] = wabs(ad[e]);
      }
    for (index_t x = 0; x < k; ++x)
      for (index_t j = 0; j < n; ++j) {
        const std::size_t e = static_cast<std::size_t>((q * k + x) * n + j);
        bd[e] = to_wide(bq(x, j));
        ba[e] = wabs(bd[e]);
      }
  }
  reference<W> r;
  r.value.resize(static_cast<std::size_t>(batch * m * n));
  std::vector<double> sabs(r.value.size());
  gemm_options o;
  o.batch_count = batch;
  const index_t lda = std::max<index_t>(k, 1), ldb = std::max<index_t>(n, 1);
  host_gemm(W(1), row_major<const W>(ad.data(), m, k, lda, m * k),
            row_major<const W>(bd.data(), k, n, ldb, k * n), W(0),
            row_major(r.value.data(), m, n, ldb, m * n), o);
  host_gemm(1.0, row_major<const double>(aa.data(), m, k, lda, m * k),
            row_major<const double>(ba.data(), k, n, ldb, k * n), 0.0,
            row_major(sabs.data(), m, n, ldb, m * n), o);
  r.tol.resize(r.value.size());
  for (index_t q = 0; q < batch; ++q) {
    const auto cq = c0.batch(q);
    for (index_t i = 0; i < m; ++i)
      for (index_t j = 0; j < n; ++j) {
        const std::size_t e = static_cast<std::size_t>((q * m + i) * n + j);
        std::tie(r.value[e], r.tol[e]) =
            finish_element<TA>(alpha_re, beta_re, r.value[e], sabs[e], cq, i, j, k, epi, ar);
      }
  }
  return r;
}

/// Checks every element of C (batch entries of `c`, host memory) against `ref`, and that every
/// element of `buf` outside C's matrices still equals `before` bit for bit. Reports the first few
/// failures with their position.
template <class TC, class W>
::testing::AssertionResult check_output(const std::vector<TC>& buf, const std::vector<TC>& before,
                                        matrix_view<const TC> c, index_t batch, const reference<W>& ref,
                                        const std::string& what) {
  const index_t m = c.rows, n = c.cols;
  std::vector<char> inside(buf.size(), 0);
  long bad = 0;
  std::ostringstream os;
  double worst = 0;
  for (index_t q = 0; q < batch; ++q) {
    const auto cq = c.batch(q);
    for (index_t i = 0; i < m; ++i)
      for (index_t j = 0; j < n; ++j) {
        const TC* p = &cq(i, j);
        inside[static_cast<std::size_t>(p - buf.data())] = 1;
        const std::size_t e = static_cast<std::size_t>((q * m + i) * n + j);
        const auto got = to_wide(*p);
        const double err = wabs(got - ref.value[e]);
        const bool ok = err <= ref.tol[e];  // NaN (unwritten poison, leaked NaN) fails here
        if (ref.tol[e] > 0) worst = std::max(worst, err / ref.tol[e]);
        if (!ok && bad++ < 5) {
          os << "\n  C[" << q << "](" << i << "," << j << ") = " << wstr(got) << ", want "
             << wstr(ref.value[e]) << " (|err| " << err << " > tol " << ref.tol[e] << ")";
        }
      }
  }
  for (std::size_t e = 0; e < buf.size(); ++e) {
    if (!inside[e] && std::memcmp(&buf[e], &before[e], sizeof(TC)) != 0 && bad++ < 10) {
      os << "\n  element " << e << " of the buffer, outside C, was overwritten";
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << bad << " bad elements (worst err/tol " << worst << ")" << os.str();
}

/// A C buffer of `fill` everywhere (poison, or random values when β ≠ 0 reads it).
template <class TC>
host_matrix<TC> make_output(index_t rows, index_t cols, storage st, index_t batch, index_t extra, bool random,
                            std::mt19937_64& g) {
  host_matrix<TC> h = make_matrix<TC>(rows, cols, st, batch, extra, g);
  if (!random)
    for (auto& x : h.buf) x = poison<TC>();
  return h;
}

}  // namespace spillway::gemm::test
