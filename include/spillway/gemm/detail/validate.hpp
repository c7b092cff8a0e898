// spillway/gemm/detail/validate.hpp — what every GEMM entry point (device and host) does before
// any arithmetic: check the arguments (a logic_error naming the operand and the value, nothing
// touched), fold layouts and transposes into the canonical detail::problem, choose the kernel
// family, and plan split-K. Plain C++ (no device code), so all of it is host-testable.
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/gemm/detail/problem.hpp>
#include <spillway/gemm/epilogue.hpp>
#include <spillway/gemm/matrix_view.hpp>
#include <spillway/gemm/options.hpp>
#include <spillway/gemm/tuning.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

namespace spillway::gemm::detail {

// ---- types --------------------------------------------------------------------------------------

/// The output element types a GEMM writes for input type T (C's element type, const stripped).
template <class T, class TC>
inline constexpr bool is_gemm_output_v = gemm_type_row_t<T>::template writes<TC>;

template <class TA, class TB, class TC>
constexpr void static_check_types() {
  static_assert(std::is_same_v<std::remove_cv_t<TA>, std::remove_cv_t<TB>>,
                "gemm: A and B must have the same element type");
  static_assert(is_gemm_input_v<TA>,
                "gemm: inputs are float, double, __half, __nv_bfloat16, int8_t, cuda::std::complex<float>, "
                "__nv_fp8_e4m3 or __nv_fp8_e5m2");
  static_assert(!std::is_const_v<TC>, "gemm: C is written; its view cannot be const");
  static_assert(is_gemm_output_v<std::remove_cv_t<TA>, TC>,
                "gemm: C's element type must be the accumulator type (float/double/int32/complex<float>), or "
                "half/bf16 for float accumulation (float, half, bf16, FP8 inputs), or float for int8 inputs");
}

// ---- argument checks ----------------------------------------------------------------------------

inline std::string num(index_t v) {
  return std::to_string(v);
}

/// Elements a matrix spans from its first to one past its last element (0 when empty).
template <class T>
index_t footprint(const matrix_view<T>& v) {
  if (v.rows == 0 || v.cols == 0) return 0;
  const index_t major = v.order == layout::row_major ? v.rows : v.cols;
  const index_t minor = v.order == layout::row_major ? v.cols : v.rows;
  return (major - 1) * v.ld + minor;
}

template <class T>
void check_view(const matrix_view<T>& v, const char* who, const char* name) {
  const std::string w = std::string(who) + ": " + name;
  SPILLWAY_EXPECTS(v.rows >= 0, w + ".rows is " + num(v.rows) + "; sizes must be >= 0");
  SPILLWAY_EXPECTS(v.cols >= 0, w + ".cols is " + num(v.cols) + "; sizes must be >= 0");
  SPILLWAY_EXPECTS(v.ld >= v.min_ld(), w + "'s leading dimension " + num(v.ld) + " is smaller than " +
                                           num(v.min_ld()) + ", the minimum for " + v.describe());
  SPILLWAY_EXPECTS(v.data != nullptr || v.rows == 0 || v.cols == 0,
                   w + ".data is null for a " + num(v.rows) + " x " + num(v.cols) + " matrix");
  SPILLWAY_EXPECTS(v.batch_stride >= 0,
                   w + "'s batch stride is " + num(v.batch_stride) + "; it must be >= 0");
}

/// Whether T takes per-tensor scales (gemm_options::scale_a / scale_b): the FP8 rows of the table.
template <class T>
constexpr bool takes_scales() {
  if constexpr (is_gemm_input_v<T>) {
    return gemm_type_info_of<T>().scaled;
  } else {
    return false;  // the host GEMM's complex<double>
  }
}

/// The scales are finite and non-zero for the FP8 types, exactly 1 for every other type.
template <class T>
void check_scales(const gemm_options& opt, const std::string& w) {
  const std::pair<const char*, float> scales[] = {{"scale_a", opt.scale_a}, {"scale_b", opt.scale_b}};
  for (const auto& [name, v] : scales) {
    const std::string said = w + ": " + name + " is " + std::to_string(v);
    if constexpr (takes_scales<T>()) {
      SPILLWAY_EXPECTS(std::isfinite(v) && v != 0.0f,
                       said + "; a per-tensor scale must be finite and non-zero");
    } else {
      SPILLWAY_EXPECTS(v == 1.0f, said + "; per-tensor scales are for FP8 inputs only (fold it into alpha)");
    }
  }
}

/// Every check of C = op(A)·op(B) + C's arguments, in the order a reader would make them.
template <class TA, class TB, class TC>
void check_gemm_args(const matrix_view<TA>& a, const matrix_view<TB>& b, const matrix_view<TC>& c,
                     const gemm_options& opt, const char* who) {
  const std::string w(who);
  SPILLWAY_EXPECTS(opt.batch_count >= 1,
                   w + ": batch_count is " + num(opt.batch_count) + "; it must be >= 1");
  SPILLWAY_EXPECTS(opt.split_k >= 0, w + ": split_k is " + std::to_string(opt.split_k) +
                                         "; it must be 0 (automatic), 1 (off) or the number of k slices");
  check_scales<std::remove_cv_t<TA>>(opt, w);
  check_view(a, who, "a");
  check_view(b, who, "b");
  check_view(c, who, "c");
  SPILLWAY_EXPECTS(a.cols == b.rows, w + ": a is " + num(a.rows) + " x " + num(a.cols) + " but b is " +
                                         num(b.rows) + " x " + num(b.cols) +
                                         "; a.cols must equal b.rows (k)");
  SPILLWAY_EXPECTS(c.rows == a.rows, w + ": c has " + num(c.rows) + " rows but a has " + num(a.rows) +
                                         "; c must be a.rows x b.cols (" + num(a.rows) + " x " + num(b.cols) +
                                         ")");
  SPILLWAY_EXPECTS(c.cols == b.cols, w + ": c has " + num(c.cols) + " columns but b has " + num(b.cols) +
                                         "; c must be a.rows x b.cols (" + num(a.rows) + " x " + num(b.cols) +
                                         ")");
  if (opt.batch_count > 1 && c.rows > 0 && c.cols > 0) {
    const index_t fp = footprint(c);
    SPILLWAY_EXPECTS(c.batch_stride >= fp, w + ": c's batch stride " + num(c.batch_stride) +
                                               " is smaller than its matrix footprint " + num(fp) + " (" +
                                               c.describe() + "): the " + num(opt.batch_count) +
                                               " outputs of the batch would overlap");
  }
}

/// α as the kernels apply it: α·scale_a·scale_b for the types that take per-tensor scales (FP8),
/// α itself for the others (their scales are checked to be 1).
template <class T, class Acc>
Acc scaled_alpha(Acc alpha, const gemm_options& opt) {
  if constexpr (takes_scales<std::remove_cv_t<T>>()) {
    return alpha * (opt.scale_a * opt.scale_b);
  } else {
    return alpha;
  }
}

// ---- canonical form -----------------------------------------------------------------------------

/// An epilogue as seen from the transposed frame (C column-major is computed as Cᵀ): the built-ins
/// that ignore the position stay themselves, per-row and per-column biases trade places, chains map
/// element-wise; anything else is wrapped in swap_frame. Keeps the built-ins to one kernel
/// instantiation for both C layouts.
template <class Epi>
struct transposed_epilogue {
  using type = swap_frame<Epi>;
  static type make(const Epi& e) { return type{e}; }
};
template <class Epi>
struct transposed_same {
  using type = Epi;
  static type make(const Epi& e) { return e; }
};
template <>
struct transposed_epilogue<identity> : transposed_same<identity> {};
template <>
struct transposed_epilogue<relu> : transposed_same<relu> {};
template <>
struct transposed_epilogue<gelu> : transposed_same<gelu> {};
template <class T>
struct transposed_epilogue<clamp<T>> : transposed_same<clamp<T>> {};
template <class T>
struct transposed_epilogue<bias_per_row<T>> {
  using type = bias_per_col<T>;
  static type make(const bias_per_row<T>& e) { return type{e.bias}; }
};
template <class T>
struct transposed_epilogue<bias_per_col<T>> {
  using type = bias_per_row<T>;
  static type make(const bias_per_col<T>& e) { return type{e.bias}; }
};
template <class E1, class E2>
struct transposed_epilogue<chained<E1, E2>> {
  using type = chained<typename transposed_epilogue<E1>::type, typename transposed_epilogue<E2>::type>;
  static type make(const chained<E1, E2>& e) {
    return type{transposed_epilogue<E1>::make(e.first), transposed_epilogue<E2>::make(e.second)};
  }
};

/// One operand as the canonical problem reads it: `rows` (m or n) by k, k contiguous or not.
template <class T>
struct operand {
  const T* data = nullptr;
  index_t ld = 0;
  bool kmajor = true;
  index_t stride = 0;
};

/// A (m x k): k runs along a row-major view's rows.
template <class T, class V>
operand<T> rows_operand(const matrix_view<V>& a) {
  return {a.data, a.ld, a.order == layout::row_major, a.batch_stride};
}
/// B (k x n) seen as n rows of k: k is contiguous in a column-major view.
template <class T, class V>
operand<T> cols_operand(const matrix_view<V>& b) {
  return {b.data, b.ld, b.order == layout::col_major, b.batch_stride};
}

/// Puts `o` into `p` as its A (`is_a`) or B operand: pointer, ld, orientation and, for a batch of
/// more than one, the batch stride.
template <class P, class T>
void set_operand(P& p, bool is_a, const operand<T>& o) {
  const index_t stride = p.batch > 1 ? o.stride : 0;
  if (is_a) {
    p.a = o.data, p.lda = o.ld, p.a_kmajor = o.kmajor, p.stride_a = stride;
  } else {
    p.b = o.data, p.ldb = o.ld, p.b_kmajor = o.kmajor, p.stride_b = stride;
  }
}

template <class T, class TC, class Acc, class E>
problem<T, T, TC, Acc, E> make_problem(index_t m, index_t n, index_t k, operand<T> pa, operand<T> pb,
                                       const matrix_view<TC>& c, Acc alpha, Acc beta, index_t batch, E epi) {
  problem<T, T, TC, Acc, E> p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.batch = batch;
  set_operand(p, true, pa);
  set_operand(p, false, pb);
  p.c = c.data;
  p.ldc = c.ld;
  p.alpha = alpha;
  p.beta = beta;
  p.stride_c = batch > 1 ? c.batch_stride : 0;
  p.epi = epi;
  return p;
}

/// Calls f(problem) with the canonical (row-major C) form of C = epi(α·A·B + β·C): a row-major C
/// as given; a column-major C as Cᵀ = Bᵀ·Aᵀ (m and n, A and B trade places, the epilogue sees
/// through transposed_epilogue). Expects checked arguments with m, n, k >= 1.
template <class TA, class TB, class TC, class Acc, class Epi, class F>
void with_canonical_problem(Acc alpha, const matrix_view<TA>& a, const matrix_view<TB>& b, Acc beta,
                            const matrix_view<TC>& c, index_t batch, const Epi& epi, F&& f) {
  using T = std::remove_cv_t<TA>;
  const operand<T> oa = rows_operand<T>(a), ob = cols_operand<T>(b);
  if (c.order == layout::row_major) {
    f(make_problem<T>(a.rows, b.cols, a.cols, oa, ob, c, alpha, beta, batch, epi));
  } else {
    using tr = transposed_epilogue<Epi>;
    f(make_problem<T>(b.cols, a.rows, a.cols, ob, oa, c, alpha, beta, batch, tr::make(epi)));
  }
}

// ---- which kernel family ------------------------------------------------------------------------

/// Bits of tile::build_features (repeated here so this header stays free of device code).
inline constexpr int path_feature_mma = 1;
inline constexpr int path_feature_wgmma = 2;

inline std::string cc_string(int cc) {
  return std::to_string(cc / 10) + "." + std::to_string(cc % 10);
}

/// The path that runs element type T under `opt` on a device of compute capability `cc` whose
/// build carries `features` (tile::build_features bits). A forced path the type or the device
/// cannot run is a logic_error naming both.
template <class T>
gemm_path choose_path(const gemm_options& opt, int cc, int features) {
  using U = std::remove_cv_t<T>;
  const gemm_type_info& info = gemm_type_info_of<U>();
  const bool math_ok = !std::is_same_v<U, float> || opt.math == math_mode::tf32;
  const bool mma_type = info.mma_sync && math_ok;
  const bool wgmma_type = info.wgmma && math_ok;
  const bool is_double = info.dmma;
  const bool can_mma = cc >= 80 && (features & path_feature_mma) != 0;
  const bool can_wgmma = cc == 90 && (features & path_feature_wgmma) != 0;
  const std::string type_name =
      std::is_same_v<U, float> ? (opt.math == math_mode::tf32 ? "float (tf32)" : "float (exact)") : info.short_name;
  auto refuse = [&](const std::string& why) {
    throw logic_error(std::string("gemm: path ") + to_string(opt.path) + " cannot run " + type_name +
                      " on a device of compute capability " + cc_string(cc) + ": " + why);
  };
  // Why path p cannot run this type on this device and build ("" when it can).
  const auto why_not = [&](gemm_path p) -> std::string {
    switch (p) {
      case gemm_path::automatic:
        return "";
      case gemm_path::simt:
        if (std::is_same_v<U, float> && opt.math == math_mode::tf32) {
          return "simt computes exact FP32; math_mode::tf32 needs a tensor-core path (mma_sync or wgmma)";
        }
        return "";
      case gemm_path::mma_sync:
        if (!mma_type && !is_double) {
          if (std::is_same_v<U, float>) return "exact FP32 runs on simt only (ask for math_mode::tf32)";
          return std::string(info.short_name) +
                 (wgmma_type ? " has no mma_sync kernel (it runs on wgmma or simt)" : " runs on simt only");
        }
        if (cc < 80) return "mma_sync needs compute capability 8.0 or newer";
        if (!can_mma)
          return "this build carries no mma.sync code for the device (compile for sm_80 or newer)";
        return "";
      case gemm_path::wgmma:
        if (!wgmma_type) {
          if (is_double) return "wgmma has no FP64 form (double runs on mma_sync or simt)";
          if (std::is_same_v<U, float>) return "exact FP32 runs on simt only (ask for math_mode::tf32)";
          return std::string(info.short_name) + " runs on simt only";
        }
        if (cc != 90) return "wgmma needs compute capability 9.0";
        if (!can_wgmma) return "this build carries no wgmma code for the device (compile for sm_90a)";
        return "";
    }
    return "unknown path";
  };
  if (opt.path == gemm_path::automatic) {
    // The type's row of the measured ranking (gemm/tuning.hpp): its first family that runs here.
    // simt, last in every row, runs every type (float under tf32 then computes exact FP32).
    if (const path_ranking* row = path_ranking_of(info.code, opt.math == math_mode::tf32)) {
      for (int i = 0; i < row->count; ++i) {
        const gemm_path p = row->order[i];
        if (p == gemm_path::simt || why_not(p).empty()) return p;
      }
    }
    return gemm_path::simt;
  }
  const std::string why = why_not(opt.path);
  if (!why.empty()) refuse(why);
  return opt.path;
}

// ---- split-K ------------------------------------------------------------------------------------

/// k cut into `full` slices of `ks` and, when `rem` > 0, one more slice of `rem`.
struct split_plan {
  index_t ks = 0;
  index_t full = 1;
  index_t rem = 0;
  [[nodiscard]] index_t slices() const noexcept { return full + (rem > 0 ? 1 : 0); }
  [[nodiscard]] bool split() const noexcept { return slices() > 1; }
};

SPILLWAY_HD constexpr index_t ceil_div(index_t a, index_t b) {
  return (a + b - 1) / b;
}
SPILLWAY_HD constexpr index_t round_up(index_t a, index_t b) {
  return ceil_div(a, b) * b;
}

/// The output tile a launcher runs a problem with and how many of its blocks one SM holds at once:
/// the automatic split-K fills tiles x slices up to sms x blocks_per_sm. The default (128 x 128, one
/// block per SM) stands for the tensor-core launchers; the SIMT launcher reports its own
/// (simt_tile_shape in simt_kernel.cuh).
struct split_tile_shape {
  index_t bm = 128;
  index_t bn = 128;
  int blocks_per_sm = 1;
};
/// Automatic slices are multiples of this in k (a full main loop per slice).
inline constexpr index_t split_k_granule = 256;
/// Forced slices are multiples of this in k, so every slice of a K-major operand keeps 16-byte
/// alignment for every element type (int8 has the most elements per 16 bytes).
inline constexpr index_t split_k_align = 16;

/// How k is cut for an m x n x k problem of `batch` entries on `sms` multiprocessors under
/// `split_k` (gemm_options::split_k), for a launcher whose tile and residency are `tile`.
/// Automatic: only for a single problem whose output tiles fill fewer than the device's block slots
/// (sms x blocks_per_sm) and whose k gives each slice at least 256: as many slices as fit those
/// slots in one wave, floor(slots / tiles). SIMT float 64 x 8192 x 8192 on 132 SMs: 64 tiles of
/// 64 x 128, 4 blocks per SM -> 528 slots -> 8 slices of 1024 (512 blocks).
inline split_plan plan_split_k(index_t m, index_t n, index_t k, index_t batch, int split_k, int sms,
                               split_tile_shape tile = {}) {
  split_plan p;
  p.ks = k;
  index_t want = 1;
  index_t granule = split_k_align;
  if (split_k > 1) {
    want = split_k;
  } else if (split_k == 0 && batch == 1) {
    const index_t tiles = ceil_div(m, tile.bm) * ceil_div(n, tile.bn);
    const index_t slots = static_cast<index_t>(sms) * (tile.blocks_per_sm > 0 ? tile.blocks_per_sm : 1);
    if (tiles < slots) {
      want = slots / tiles;
      if (want > k / split_k_granule) want = k / split_k_granule;
      granule = split_k_granule;
    }
  }
  if (want <= 1 || k <= granule) return p;
  p.ks = round_up(ceil_div(k, want), granule);
  p.full = k / p.ks;
  p.rem = k - p.full * p.ks;
  if (p.full == 0) {  // unreachable given k > granule, kept for clarity of the invariant full >= 1
    p.ks = k;
    p.full = 1;
    p.rem = 0;
  }
  return p;
}

// ---- staging (tensor-core preconditions) ---------------------------------------------------------

/// Whether an operand meets the tensor-core launchers' preconditions: K-major, 16-byte-aligned
/// base, leading dimension and batch stride multiples of 16 bytes.
template <class T>
bool tensor_ready(const T* data, index_t ld, bool kmajor, index_t stride) {
  constexpr index_t per16 = 16 / static_cast<index_t>(sizeof(T));
  return kmajor && reinterpret_cast<std::uintptr_t>(data) % 16 == 0 && ld % per16 == 0 && stride % per16 == 0;
}

/// The leading dimension of a staged (K-major) copy of k columns: k rounded up to 16 bytes.
template <class T>
index_t staged_ld(index_t k) {
  constexpr index_t per16 = 16 / static_cast<index_t>(sizeof(T));
  return round_up(k, per16);
}

/// Elements of the K-major copy the tensor-core paths stage of an operand (`rows` x k, `batch`
/// entries `op.stride` apart): 0 when it is used as it is (tensor_ready), one matrix when its
/// batch stride is 0 (a broadcast), else one per entry.
template <class T>
index_t staged_elements(const operand<T>& op, index_t rows, index_t k, index_t batch) {
  if (tensor_ready(op.data, op.ld, op.kmajor, op.stride)) return 0;
  return (op.stride == 0 ? 1 : batch) * rows * staged_ld<T>(k);
}

/// Elements of the accumulator workspace a split of an m x n output takes: the slices' partial
/// products (m x n each), reused entry by entry of a batch; 0 when k is not split.
inline index_t split_workspace_elements(index_t m, index_t n, const split_plan& plan) {
  return plan.split() ? plan.slices() * m * n : 0;
}

}  // namespace spillway::gemm::detail
