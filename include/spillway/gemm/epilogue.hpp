// spillway/gemm/epilogue.hpp — what happens to each output element after α·op(A)·op(B) + β·C.
//
// An epilogue is a functor called as `epi(value, row, col)` on the host and the device
// (`__host__ __device__`), where `value` is α·acc + β·C(row, col) in the accumulator type
// (accumulator_t of the input type; β·C is left out when β = 0, and C is then never read) and
// (row, col) is the element's position in C. It returns a value that converts to C's element
// type — which may be narrower than the accumulator (float accumulation written as bf16 or half:
// round to nearest even). Pointers an epilogue holds (biases) point to device memory for the GPU
// entry points and host memory for host_gemm.
//
//   gemm::gemm_async(s, 1.0f, a, b, 0.0f, c, {}, gemm::chain(gemm::bias_per_col<float>{d_bias}, gemm::relu{}));
#pragma once

#include <spillway/core/launch.hpp>

#include <cuda/std/complex>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace spillway::gemm {

/// value as is.
struct identity {
  template <class V>
  SPILLWAY_HD V operator()(V v, index_t, index_t) const {
    return v;
  }
};

/// value + bias[row] (one entry per row of C).
template <class T>
struct bias_per_row {
  const T* bias = nullptr;
  template <class V>
  SPILLWAY_HD V operator()(V v, index_t row, index_t) const {
    return v + static_cast<V>(bias[row]);
  }
};

/// value + bias[col] (one entry per column of C).
template <class T>
struct bias_per_col {
  const T* bias = nullptr;
  template <class V>
  SPILLWAY_HD V operator()(V v, index_t, index_t col) const {
    return v + static_cast<V>(bias[col]);
  }
};

/// max(value, 0).
struct relu {
  template <class V>
  SPILLWAY_HD V operator()(V v, index_t, index_t) const {
    return v > V(0) ? v : V(0);
  }
};

/// GELU, the exact form x·Φ(x) = 0.5·x·(1 + erf(x/√2)) (not the tanh approximation), in the
/// value's floating-point type.
struct gelu {
  template <class V>
  SPILLWAY_HD V operator()(V v, index_t, index_t) const {
    static_assert(std::is_floating_point_v<V>, "gelu needs a floating-point accumulator");
    if constexpr (std::is_same_v<V, float>) {
      return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    } else {
      return 0.5 * v * (1.0 + erf(v * 0.70710678118654752440));
    }
  }
};

/// min(max(value, lo), hi).
template <class T>
struct clamp {
  T lo;
  T hi;
  template <class V>
  SPILLWAY_HD V operator()(V v, index_t, index_t) const {
    const V l = static_cast<V>(lo), h = static_cast<V>(hi);
    return v < l ? l : (v > h ? h : v);
  }
};

/// Applies `first` then `second` (nest for more: chain(a, chain(b, c))).
template <class E1, class E2>
struct chained {
  E1 first;
  E2 second;
  template <class V>
  SPILLWAY_HD auto operator()(V v, index_t row, index_t col) const {
    return second(first(v, row, col), row, col);
  }
};
template <class E1, class E2>
chained<E1, E2> chain(E1 a, E2 b) {
  return {a, b};
}
template <class E1, class E2, class E3, class... Rest>
auto chain(E1 a, E2 b, E3 c, Rest... rest) {
  return chain(chained<E1, E2>{a, b}, c, rest...);
}

namespace detail {

/// The conversion of an epilogue's result to C's element type: round to nearest even for half and
/// bf16, static_cast otherwise.
template <class TC, class V>
SPILLWAY_HD TC convert_output(V v) {
  if constexpr (std::is_same_v<TC, __half>) {
    return __float2half_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<TC, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else {
    return static_cast<TC>(v);
  }
}

/// An input element as an accumulator-type value (host GEMM, SIMT kernel).
template <class V, class T>
SPILLWAY_HD V widen(T x) {
  if constexpr (std::is_same_v<T, __half>) {
    return static_cast<V>(__half2float(x));
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return static_cast<V>(__bfloat162float(x));
  } else {
    return static_cast<V>(x);
  }
}

/// C's element as an accumulator value (for β·C): widened like an input element.
template <class V, class TC>
SPILLWAY_HD V load_output(TC c) {
  return widen<V>(c);
}

/// An epilogue seen from the transposed frame: kernels compute row-major C; a column-major C is
/// computed as its transpose, and the user's functor still receives (row, col) of C as given.
template <class Epi>
struct swap_frame {
  Epi epi;
  template <class V>
  SPILLWAY_HD auto operator()(V v, index_t r, index_t c) const {
    return epi(v, c, r);
  }
};

}  // namespace detail
}  // namespace spillway::gemm
