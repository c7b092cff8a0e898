// spillway/gemm/types.hpp — the GEMM's element types, in one table.
//
// A new element type is one row here (its accumulator, the C types it writes, its names and which
// kernel families run it) plus its kernels: the checks, the path choice, the out-of-core estimator,
// the Python binding and docs/gemm.md's table (a test compares them) all read these rows.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda/std/complex>

#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace spillway::gemm {

/// The arithmetic a type runs in, for the rate estimators (float through TF32 is decided by the
/// options' math mode, not by the type).
enum class element_arith { fp32, fp64, fp16, int8, fp8, complex_fp32 };

/// A row's types: input T (A and B), the accumulator (α, β and the sums), and the C types it may
/// write.
template <class T, class Acc, class... C>
struct gemm_type_row {
  using input = T;
  using accumulator = Acc;
  template <class TC>
  static constexpr bool writes = (std::is_same_v<TC, C> || ...);
};

/// A row's facts for host code: the Python binding's code, the names, the rate class, and the
/// kernel families beyond simt (which runs every type).
struct gemm_type_info {
  char code;              ///< spillway.matmul's element type code
  const char* name;       ///< the C++ spelling (docs/gemm.md's table)
  const char* short_name; ///< in messages ("bf16")
  const char* numpy;      ///< NumPy dtype of A and B
  const char* numpy_c;    ///< NumPy dtype of C that spillway.matmul allocates
  element_arith arith;
  bool mma_sync;          ///< the tensor-core mma_sync kernel (float: with math_mode::tf32 only)
  bool wgmma;             ///< the wgmma kernel (float: with math_mode::tf32 only)
  bool dmma;              ///< the FP64 mma_sync kernel
  bool scaled;            ///< takes per-tensor scales (gemm_options::scale_a / scale_b: FP8)
};

/// The table: one row of types and one of facts per element type, in the same order.
using gemm_types =
    std::tuple<gemm_type_row<float, float, float, __half, __nv_bfloat16>,
               gemm_type_row<double, double, double>,
               gemm_type_row<__half, float, float, __half, __nv_bfloat16>,
               gemm_type_row<__nv_bfloat16, float, float, __half, __nv_bfloat16>,
               gemm_type_row<std::int8_t, std::int32_t, std::int32_t, float>,
               gemm_type_row<cuda::std::complex<float>, cuda::std::complex<float>, cuda::std::complex<float>>,
               gemm_type_row<__nv_fp8_e4m3, float, float, __half, __nv_bfloat16>,
               gemm_type_row<__nv_fp8_e5m2, float, float, __half, __nv_bfloat16>>;
inline constexpr gemm_type_info gemm_type_table[] = {
    {'f', "float", "float", "float32", "float32", element_arith::fp32, true, true, false, false},
    {'d', "double", "double", "float64", "float64", element_arith::fp64, false, false, true, false},
    {'h', "__half", "half", "float16", "float32", element_arith::fp16, true, true, false, false},
    {'B', "__nv_bfloat16", "bf16", "bfloat16", "float32", element_arith::fp16, true, true, false, false},
    {'b', "int8_t", "int8", "int8", "int32", element_arith::int8, true, true, false, false},
    {'c', "cuda::std::complex<float>", "complex<float>", "complex64", "complex64",
     element_arith::complex_fp32, false, false, false, false},
    {'e', "__nv_fp8_e4m3", "e4m3", "float8_e4m3fn", "float32", element_arith::fp8, false, true, false, true},
    {'E', "__nv_fp8_e5m2", "e5m2", "float8_e5m2", "float32", element_arith::fp8, false, true, false, true},
};
inline constexpr std::size_t gemm_type_count = std::tuple_size_v<gemm_types>;
static_assert(gemm_type_count == sizeof(gemm_type_table) / sizeof(gemm_type_table[0]),
              "gemm/types.hpp: one row of facts per row of types");

namespace detail {
template <class T, std::size_t... I>
constexpr int gemm_type_index_of(std::index_sequence<I...>) {
  constexpr bool match[] = {std::is_same_v<T, typename std::tuple_element_t<I, gemm_types>::input>...};
  for (std::size_t i = 0; i < sizeof...(I); ++i)
    if (match[i]) return static_cast<int>(i);
  return -1;
}
}  // namespace detail

/// T's row in the table, -1 when T is not a GEMM input (cv ignored).
template <class T>
inline constexpr int gemm_type_index =
    detail::gemm_type_index_of<std::remove_cv_t<T>>(std::make_index_sequence<gemm_type_count>{});

/// True for the element types the GEMM takes as inputs.
template <class T>
inline constexpr bool is_gemm_input_v = gemm_type_index<T> >= 0;

/// T's row of types (T must be an input type).
template <class T>
using gemm_type_row_t = std::tuple_element_t<static_cast<std::size_t>(gemm_type_index<T>), gemm_types>;

/// The accumulator (and α/β) type for an input element type.
template <class T>
using accumulator_t = typename gemm_type_row_t<T>::accumulator;

/// T's row of facts (T must be an input type).
template <class T>
constexpr const gemm_type_info& gemm_type_info_of() {
  static_assert(is_gemm_input_v<T>, "gemm: not an element type of the table (gemm/types.hpp)");
  return gemm_type_table[gemm_type_index<T>];
}

namespace detail {
template <class F, std::size_t... I>
bool visit_gemm_type(char code, F& f, std::index_sequence<I...>) {
  bool found = false;
  auto one = [&](auto row, std::size_t i) {
    if (!found && gemm_type_table[i].code == code) {
      found = true;
      f(row);
    }
  };
  (one(std::tuple_element_t<I, gemm_types>{}, I), ...);
  return found;
}
}  // namespace detail

/// Calls f(row) with the row of types (a gemm_type_row, by value) whose code is `code` and returns
/// true, or returns false when no row has it: the run-time dispatch of an element type code.
template <class F>
bool visit_gemm_type(char code, F&& f) {
  return detail::visit_gemm_type(code, f, std::make_index_sequence<gemm_type_count>{});
}

/// The NumPy dtypes of the table, "float32, float64, ... or complex64", for messages.
inline std::string gemm_numpy_types() {
  std::string s;
  for (std::size_t i = 0; i < gemm_type_count; ++i) {
    if (i > 0) s += i + 1 == gemm_type_count ? " or " : ", ";
    s += gemm_type_table[i].numpy;
  }
  return s;
}

}  // namespace spillway::gemm
