// spillway/gemm/gemm.cuh — C = epi(α·A·B + β·C) on device matrices: the public entry points and
// the choice of kernel family. See docs/gemm.md.
//
//   namespace g = spillway::gemm;
//   g::gemm_async(s, 1.0f, g::row_major(d_a, m, k), g::col_major(d_b, k, n), 0.0f, g::row_major(d_c, m, n));
//   g::gemm_options o;
//   o.math = g::math_mode::tf32;                                  // float on the TF32 tensor cores
//   g::gemm_async(s, 1.0f, a, b.t(), 0.0f, c, o, g::relu{});      // op(B) = Bᵀ, ReLU epilogue
//
// Types: A and B share one element type T (float, double, __half, __nv_bfloat16, int8_t,
// cuda::std::complex<float>, __nv_fp8_e4m3, __nv_fp8_e5m2); α, β and the arithmetic are
// accumulator_t<T>; C is that type, or half/bf16 for float accumulation, or float for int8 inputs.
// FP8 takes per-tensor scales (gemm_options::scale_a / scale_b) and an accumulation mode.
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/gemm/detail/dispatch.cuh>
#include <spillway/gemm/detail/validate.hpp>
#include <spillway/gemm/epilogue.hpp>
#include <spillway/gemm/matrix_view.hpp>
#include <spillway/gemm/options.hpp>
#include <spillway/tile/arch.cuh>

#include <cstddef>
#include <type_traits>

namespace spillway::gemm {

/// The kernel family a GEMM of element type T under `opt` runs on `device`: `opt.path` itself when
/// forced, else wgmma (bf16 / half / int8 / float with math_mode::tf32, on an sm_90a build on a
/// compute-capability 9.0 device), else mma_sync from compute capability 8.0 (those types and
/// double), else simt (always for exact float and for complex<float>). A forced path the type or
/// the device cannot run is a logic_error naming the path, the type and the compute capability.
template <class T>
gemm_path resolve_path(const gemm_options& opt, int device) {
  return detail::choose_path<T>(opt, tile::compute_capability(device), tile::build_features(device));
}

namespace detail {

/// gemm_async's body; `ws`, when lent, is the split-K workspace (nothing is then allocated: see
/// run_problem). The out-of-core GEMM calls it with its task slot's workspace.
template <class TA, class TB, class TC, class Acc, class Epi>
void enqueue_gemm(stream_view s, Acc al, matrix_view<TA> a, matrix_view<TB> b, Acc be, matrix_view<TC> c,
                  const gemm_options& opt, Epi epi, const lent_workspace& ws) {
  using T = std::remove_cv_t<TA>;
  detail::check_gemm_args(a, b, c, opt, "gemm");
  const int device = current_device();
  const gemm_path path = resolve_path<T>(opt, device);
  if (c.rows == 0 || c.cols == 0) return;
  if (a.cols == 0) {
    detail::launch_scale_output(c, be, opt.batch_count, epi, s, device);
    return;
  }
  const Acc alpha = detail::scaled_alpha<T>(al, opt);
  detail::with_canonical_problem(alpha, a, b, be, c, opt.batch_count, epi, [&](auto p) {
    p.fast_accumulation = opt.fp8_accumulate == fp8_accumulation::fast;
    detail::run_problem(p, path, opt.split_k, device, s, ws);
  });
}

}  // namespace detail

/// C = epi(α·A·B + β·C), enqueued on `s` (the current device's): A is m x k, B is k x n and C is
/// m x n as the views give them (`.t()` for op = transpose), `opt.batch_count` problems apart by
/// each view's batch stride (0 for A or B: one matrix for the whole batch). m or n = 0 does
/// nothing; k = 0 gives C = epi(β·C). β = 0 never reads C. Bad arguments and impossible forced
/// paths throw logic_error before anything is enqueued. Never synchronizes; temporaries (staged
/// operands, the split-K workspace: gemm_workspace_bytes says how many bytes) are stream-ordered
/// on `s`.
template <class TA, class TB, class TC, class Scalar, class Epi = identity>
void gemm_async(stream_view s, Scalar alpha, matrix_view<TA> a, matrix_view<TB> b, Scalar beta,
                matrix_view<TC> c, const gemm_options& opt = {}, Epi epi = {}) {
  detail::static_check_types<TA, TB, TC>();
  using Acc = accumulator_t<std::remove_cv_t<TA>>;
  detail::enqueue_gemm(s, static_cast<Acc>(alpha), a, b, static_cast<Acc>(beta), c, opt, epi,
                       detail::lent_workspace{});
}

/// Bytes of device memory that gemm_async (or gemm) with these views and options allocates on the
/// current device for its temporaries, all alive at once and freed in stream order: the K-major
/// copies the tensor-core paths stage of an operand that is not K-major with a 16-byte aligned
/// base, leading dimension and batch stride (one matrix for a batch stride of 0, else one per
/// entry: rows x k rounded up to 16 bytes), plus the split-K workspace (slices x m x n accumulator
/// elements, forced or automatic). 0 when nothing is allocated (m, n or k = 0, no staging, no
/// split). Depends on the pointers (their alignment), the shapes, opt.path / math / split_k /
/// batch_count and the device (its path and SM count); not on α, β, C's values or the epilogue.
/// Throws what gemm_async throws for bad arguments. The first GEMM on a device also probes the
/// build's features once per process (a 4-byte allocation, not counted).
template <class TA, class TB, class TC>
std::size_t gemm_workspace_bytes(matrix_view<TA> a, matrix_view<TB> b, matrix_view<TC> c,
                                 const gemm_options& opt = {}) {
  detail::static_check_types<TA, TB, TC>();
  using T = std::remove_cv_t<TA>;
  using Acc = accumulator_t<T>;
  detail::check_gemm_args(a, b, c, opt, "gemm_workspace_bytes");
  const int device = current_device();
  const gemm_path path = resolve_path<T>(opt, device);
  if (c.rows == 0 || c.cols == 0 || a.cols == 0) return 0;
  std::size_t bytes = 0;
  detail::with_canonical_problem(Acc(1), a, b, Acc(0), c, opt.batch_count, identity{}, [&](const auto& p) {
    bytes = detail::problem_workspace_bytes(p, path, opt.split_k, device);
  });
  return bytes;
}

/// gemm_async on a stream of its own on the current device; returns when C is written.
template <class TA, class TB, class TC, class Scalar, class Epi = identity>
void gemm(Scalar alpha, matrix_view<TA> a, matrix_view<TB> b, Scalar beta, matrix_view<TC> c,
          const gemm_options& opt = {}, Epi epi = {}) {
  stream st;
  gemm_async(st.view(), alpha, a, b, beta, c, opt, epi);
  st.synchronize();
}

}  // namespace spillway::gemm
