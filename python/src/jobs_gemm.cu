// python/src/jobs_gemm.cu — spillway.matmul's C++ side: the out-of-core GEMM of host matrices
// (spillway::gemm::gemm_out_of_core) for every element type of the GEMM's table (float32,
// float64, float16, bf16, complex64, int8, FP8 e4m3 / e5m2), or the host GEMM in row blocks where
// no GPU is present.
#include "job_support.hpp"
#include "jobs.hpp"

#include <spillway/gemm.cuh>
#include <spillway/gemm/host_gemm.hpp>

#include <cuda/std/complex>
#include <cuda_bf16.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace spillway::python {
namespace {

namespace sg = ::spillway::gemm;

template <class T>
sg::matrix_view<T> view_of(const host_matrix& m) {
  T* d = static_cast<T*>(m.data);
  return m.row_major ? sg::row_major<T>(d, m.rows, m.cols, m.ld) : sg::col_major<T>(d, m.rows, m.cols, m.ld);
}

/// Rows [r0, r0 + rows) of m.
template <class T>
sg::matrix_view<T> rows_of(sg::matrix_view<T> m, std::int64_t r0, std::int64_t rows) {
  m.data += m.order == sg::layout::row_major ? r0 * m.ld : r0;
  m.rows = rows;
  return m;
}

/// The request's options for the in-core GEMM: TF32, FP8's scales and accumulation.
sg::gemm_options options_of(const matmul_request& r) {
  sg::gemm_options o;
  if (r.tf32) o.math = sg::math_mode::tf32;
  o.scale_a = r.scale_a;
  o.scale_b = r.scale_b;
  if (r.fp8_fast) o.fp8_accumulate = sg::fp8_accumulation::fast;
  return o;
}

template <class T, class TC>
job_summary run_typed(const host_matrix& ha, const host_matrix& hb, const host_matrix& hc, const matmul_request& r,
                      job_progress& p) {
  using S = sg::accumulator_t<T>;
  const auto a = view_of<const T>(ha);
  const auto b = view_of<const T>(hb);
  const auto c = view_of<TC>(hc);
  const sg::gemm_options o = options_of(r);
  const S alpha = static_cast<S>(r.alpha), beta = static_cast<S>(r.beta);
  job_summary s;
  const auto t0 = std::chrono::steady_clock::now();
  if (::spillway::detail::run_on_host_instead(r.host_fallback, r.devices, "spillway.matmul", "host_fallback",
                                              "the host GEMM")) {
    // Row blocks of ~2^26 multiply-adds (at least one row), so progress and Ctrl-C reach Python.
    const std::int64_t work = std::max<std::int64_t>(1, b.rows * b.cols);
    const std::int64_t step = std::max<std::int64_t>(1, (std::int64_t{1} << 26) / work);
    const std::int64_t blocks = a.rows == 0 ? 0 : (a.rows + step - 1) / step;
    s.on_host = true;
    s.tasks_total = static_cast<std::size_t>(blocks);
    s.completed.assign(s.tasks_total, false);
    p.update(0, s.tasks_total);
    std::int64_t done = 0;
    for (; done < blocks; ++done) {
      if (p.cancel.load()) {
        s.cancelled = true;
        break;
      }
      const std::int64_t r0 = done * step, rows = std::min(step, a.rows - r0);
      // The host GEMM ignores TF32 (exact FP32) and sums FP8 in FP32; FP8's scales apply.
      sg::host_gemm(alpha, rows_of(a, r0, rows), b, beta, rows_of(c, r0, rows), o);
      s.completed[static_cast<std::size_t>(done)] = true;
      p.update(static_cast<std::size_t>(done + 1), s.tasks_total);
    }
    s.tasks_completed = static_cast<std::size_t>(done);
    s.elapsed_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return s;
  }
  // NumPy memory is pageable: page-locked for the job, the blocks move by DMA instead of through
  // host threads' staging copies (see job_support.hpp; where refused, the staging path runs).
  const auto extent = [](const host_matrix& m, std::size_t elem) {
    return m.row_major ? detail::span_bytes(m.rows, m.cols, m.ld, elem) : detail::span_bytes(m.cols, m.rows, m.ld, elem);
  };
  const detail::maybe_registered pin_a(ha.data, extent(ha, sizeof(T)), (r.register_mask & 1u) != 0);
  const detail::maybe_registered pin_b(hb.data, extent(hb, sizeof(T)), (r.register_mask & 2u) != 0);
  const detail::maybe_registered pin_c(hc.data, extent(hc, sizeof(TC)), (r.register_mask & 4u) != 0);
  sg::ooc_options oo;
  oo.lock = spillway::page_lock::never;  // the binding page-locks by register_mask above
  if (r.budget_bytes > 0) oo.budget = memory_budget(r.budget_bytes);
  oo.devices = r.devices;
  oo.progress = detail::forward_progress(p);
  const sg::ooc_report rep = sg::gemm_out_of_core(alpha, a, b, beta, c, o, oo);
  detail::summarize(s, rep.job);
  return s;
}

template <class T, class TC>
void run_typed_device(const host_matrix& ha, const host_matrix& hb, const host_matrix& hc, const matmul_request& r,
                      int device, std::uintptr_t stream) {
  using S = sg::accumulator_t<T>;
  const sg::gemm_options o = options_of(r);
  device_guard g(device);
  // 0 is how CuPy, PyTorch and Numba name the legacy default stream (stream_view refuses null).
  const stream_view s(stream == 0 ? cudaStreamLegacy : reinterpret_cast<cudaStream_t>(stream));
  sg::gemm_async(s, static_cast<S>(r.alpha), view_of<const T>(ha), view_of<const T>(hb), static_cast<S>(r.beta),
                 view_of<TC>(hc), o);
}

}  // namespace

void run_matmul_device(const host_matrix& a, const host_matrix& b, const host_matrix& c, const matmul_request& r,
                       int device, std::uintptr_t stream) {
  // C is the accumulator type for every row (the dtype spillway.matmul allocates: numpy_c).
  const bool known = sg::visit_gemm_type(r.dtype, [&](auto row) {
    using R = decltype(row);
    run_typed_device<typename R::input, typename R::accumulator>(a, b, c, r, device, stream);
  });
  if (!known) throw logic_error(std::string("spillway.matmul: unknown element type code '") + r.dtype + "'");
}

job_summary run_matmul(const host_matrix& a, const host_matrix& b, const host_matrix& c, const matmul_request& r,
                       job_progress& p) {
  job_summary s;
  const bool known = sg::visit_gemm_type(r.dtype, [&](auto row) {
    using R = decltype(row);
    s = run_typed<typename R::input, typename R::accumulator>(a, b, c, r, p);
  });
  if (!known) throw logic_error(std::string("spillway.matmul: unknown element type code '") + r.dtype + "'");
  return s;
}

}  // namespace spillway::python
