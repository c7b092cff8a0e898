// spillway/gemm/host_gemm.hpp — the host implementation of the GEMM: the same function as
// gemm::gemm / gemm_async (layouts, transposes, strided batches, α/β, epilogues, narrower outputs,
// the same argument checks and messages) computed on the CPU. The tests' oracle and the fallback
// on a machine with no GPU. Plain C++; OpenMP over output blocks where the build enables it.
//
//   gemm::host_gemm(1.0f, gemm::row_major(a.data(), m, k), gemm::row_major(b.data(), k, n), 0.0f,
//                   gemm::row_major(c.data(), m, n));
//
// Accumulates in accumulator_t of the input type (float for float/half/bf16/FP8, int32 for int8…),
// in exact arithmetic of that type: no TF32 emulation (gemm_options' path, math, split_k and
// fp8_accumulate are ignored: FP8 sums in FP32; its scales apply). For a reference in higher
// precision, pass double (or cuda::std::complex<double>) views: those accumulate in double. Epilogue pointers
// (biases) must point to host memory.
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/gemm/detail/problem.hpp>
#include <spillway/gemm/detail/validate.hpp>
#include <spillway/gemm/epilogue.hpp>
#include <spillway/gemm/matrix_view.hpp>
#include <spillway/gemm/options.hpp>

#include <cuda/std/complex>

#include <algorithm>
#include <type_traits>
#include <vector>

namespace spillway::gemm {

namespace detail {

/// The host GEMM's accumulator: the device's for the GEMM input types, plus complex<double> so a
/// complex reference can be computed in double.
template <class T>
struct host_accumulator {
  using type = accumulator_t<T>;
};
template <>
struct host_accumulator<cuda::std::complex<double>> {
  using type = cuda::std::complex<double>;
};
template <>
struct host_accumulator<const cuda::std::complex<double>> {
  using type = cuda::std::complex<double>;
};
template <class T>
using host_accumulator_t = typename host_accumulator<T>::type;

template <class TA, class TB, class TC>
constexpr void static_check_host_types() {
  using T = std::remove_cv_t<TA>;
  if constexpr (std::is_same_v<T, cuda::std::complex<double>>) {
    static_assert(std::is_same_v<T, std::remove_cv_t<TB>>,
                  "host_gemm: A and B must have the same element type");
    static_assert(std::is_same_v<TC, T>, "host_gemm: complex<double> inputs write complex<double>");
  } else {
    static_check_types<TA, TB, TC>();
  }
}

/// Host cache blocking: an output block of mb x nb accumulators stays in L1/L2 while k streams
/// through in kb-wide panels of A and B, widened to the accumulator type and packed K-major so the
/// inner loop is a unit-stride dot product whatever the operands' layouts.
inline constexpr index_t host_mb = 64;
inline constexpr index_t host_nb = 64;
inline constexpr index_t host_kb = 256;

template <class TA, class TB, class TC, class Acc, class Epi>
void host_run(const problem<TA, TB, TC, Acc, Epi>& p) {
  const index_t mblocks = ceil_div(p.m, host_mb), nblocks = ceil_div(p.n, host_nb);
  const index_t total = p.batch * mblocks * nblocks;
  const bool read_c = !(p.beta == Acc(0));
#if defined(_OPENMP)
#pragma omp parallel
#endif
  {
    std::vector<Acc> ap(static_cast<std::size_t>(host_mb * host_kb)),
        bp(static_cast<std::size_t>(host_nb * host_kb));
    std::vector<Acc> acc(static_cast<std::size_t>(host_mb * host_nb));
#if defined(_OPENMP)
#pragma omp for schedule(dynamic)
#endif
    for (index_t t = 0; t < total; ++t) {
      const index_t q = t / (mblocks * nblocks);
      const index_t i0 = (t / nblocks) % mblocks * host_mb, j0 = t % nblocks * host_nb;
      const index_t mr = std::min(host_mb, p.m - i0), nr = std::min(host_nb, p.n - j0);
      const TA* a = p.a + q * p.stride_a;
      const TB* b = p.b + q * p.stride_b;
      TC* c = p.c + q * p.stride_c;
      std::fill(acc.begin(), acc.end(), Acc(0));
      for (index_t k0 = 0; k0 < p.k; k0 += host_kb) {
        const index_t kr = std::min(host_kb, p.k - k0);
        for (index_t i = 0; i < mr; ++i)
          for (index_t kk = 0; kk < kr; ++kk) {
            const index_t r = i0 + i, x = k0 + kk;
            ap[static_cast<std::size_t>(i * host_kb + kk)] =
                widen<Acc>(p.a_kmajor ? a[r * p.lda + x] : a[x * p.lda + r]);
          }
        for (index_t j = 0; j < nr; ++j)
          for (index_t kk = 0; kk < kr; ++kk) {
            const index_t r = j0 + j, x = k0 + kk;
            bp[static_cast<std::size_t>(j * host_kb + kk)] =
                widen<Acc>(p.b_kmajor ? b[r * p.ldb + x] : b[x * p.ldb + r]);
          }
        for (index_t i = 0; i < mr; ++i) {
          const Acc* ai = ap.data() + i * host_kb;
          for (index_t j = 0; j < nr; ++j) {
            const Acc* bj = bp.data() + j * host_kb;
            Acc s(0);
            for (index_t kk = 0; kk < kr; ++kk) s += ai[kk] * bj[kk];
            acc[static_cast<std::size_t>(i * host_nb + j)] += s;
          }
        }
      }
      for (index_t i = 0; i < mr; ++i)
        for (index_t j = 0; j < nr; ++j) {
          TC& out = c[(i0 + i) * p.ldc + (j0 + j)];
          Acc v = p.alpha * acc[static_cast<std::size_t>(i * host_nb + j)];
          if (read_c) v += p.beta * load_output<Acc>(out);
          out = convert_output<TC>(p.epi(v, i0 + i, j0 + j));
        }
    }
  }
}

/// k = 0: C = epi(β·C) (β = 0: epi(0), C not read), in C's own frame.
template <class Acc, class TC, class Epi>
void host_scale_output(const matrix_view<TC>& c, Acc beta, index_t batch, const Epi& epi) {
  const bool read_c = !(beta == Acc(0));
  const index_t total = batch * c.rows;
#if defined(_OPENMP)
#pragma omp parallel for schedule(static)
#endif
  for (index_t t = 0; t < total; ++t) {
    const matrix_view<TC> cq = c.batch(t / c.rows);
    const index_t i = t % c.rows;
    for (index_t j = 0; j < c.cols; ++j) {
      TC& out = cq(i, j);
      const Acc v = read_c ? beta * load_output<Acc>(out) : Acc(0);
      out = convert_output<TC>(epi(v, i, j));
    }
  }
}

}  // namespace detail

/// C = epi(α·A·B + β·C) on the host: A is m x k, B is k x n, C is m x n as the views give them
/// (`.t()` for a transpose), `opt.batch_count` matrices apart by each view's batch stride. m or
/// n = 0 does nothing; k = 0 gives C = epi(β·C). Bad arguments are a logic_error naming the
/// operand and the value, with C untouched.
template <class TA, class TB, class TC, class Scalar, class Epi = identity>
void host_gemm(Scalar alpha, matrix_view<TA> a, matrix_view<TB> b, Scalar beta, matrix_view<TC> c,
               const gemm_options& opt = {}, Epi epi = {}) {
  detail::static_check_host_types<TA, TB, TC>();
  using Acc = detail::host_accumulator_t<TA>;
  detail::check_gemm_args(a, b, c, opt, "host_gemm");
  if (c.rows == 0 || c.cols == 0) return;
  const Acc al = static_cast<Acc>(alpha), be = static_cast<Acc>(beta);
  if (a.cols == 0) {
    detail::host_scale_output<Acc>(c, be, opt.batch_count, epi);
    return;
  }
  detail::with_canonical_problem(detail::scaled_alpha<TA>(al, opt), a, b, be, c, opt.batch_count, epi,
                                 [](const auto& p) { detail::host_run(p); });
}

}  // namespace spillway::gemm
