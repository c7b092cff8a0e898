// spillway/map/operand.hpp — how a map argument is passed: an array (an ndview, or anything with a
// view()) walked with strides, or a scalar passed by value (never copied to memory as an array).
#pragma once

#include <spillway/map/config.hpp>
#include <spillway/map/ndview.hpp>

#include <type_traits>
#include <utility>

namespace spillway::detail {

template <class A, class = void>
struct has_view : std::false_type {};
template <class A>
struct has_view<A, std::void_t<decltype(std::declval<const A&>().view())>> : std::true_type {};

/// The operand an argument becomes: ndview<const T> for arrays (ndview, device_array, host_array),
/// the value itself for scalars.
template <class A>
auto as_operand(const A& a) {
  if constexpr (is_ndview<A>::value) {
    return ndview<const typename A::value_type>(a);
  } else if constexpr (has_view<A>::value) {
    using V = decltype(a.view());
    return ndview<const typename V::value_type>(a.view());
  } else {
    static_assert(std::is_trivially_copyable_v<A>,
                  "a map argument is an ndview (or has view()) or a trivially copyable scalar");
    return a;
  }
}
template <class A>
using operand_t = decltype(as_operand(std::declval<const A&>()));

template <class Op>
struct operand_info {
  static constexpr bool is_array = false;
  using value_type = Op;
};
template <class T>
struct operand_info<ndview<T>> {
  static constexpr bool is_array = true;
  using value_type = std::remove_cv_t<T>;
};

/// What a kernel or host loop carries per operand: a base pointer for arrays, the value for scalars.
template <class T, bool Array>
struct loaded_operand;
template <class T>
struct loaded_operand<T, true> {
  const T* p;
  SPILLWAY_HD T value(index_t off) const noexcept { return p[off]; }
};
template <class T>
struct loaded_operand<T, false> {
  T v;
  SPILLWAY_HD T value(index_t) const noexcept { return v; }
};

/// What a kernel or host loop holds of operand `op` as Holder<T, is an array> (loaded_operand,
/// core_arg): the base pointer of an array, or a scalar's value.
template <template <class, bool> class Holder, class Op>
auto hold_operand(const Op& op) {
  using I = operand_info<Op>;
  if constexpr (I::is_array) {
    return Holder<typename I::value_type, true>{op.data()};
  } else {
    return Holder<Op, false>{op};
  }
}

template <class Op>
auto make_loaded(const Op& op) {
  return hold_operand<loaded_operand>(op);
}

/// The element type a functor returns for the arguments' element types.
template <class F, class... V>
struct map_result {
#if defined(__CUDACC__)
  static_assert(!__nv_is_extended_device_lambda_closure_type(F),
                "the return type of an extended __device__ lambda cannot be deduced on the host: make it "
                "__host__ __device__ or wrap it with cuda::proclaim_return_type<R>(...)");
#endif
  using type = std::decay_t<std::invoke_result_t<F, V...>>;
};
template <class F, class... Args>
using map_result_t = typename map_result<F, typename operand_info<operand_t<Args>>::value_type...>::type;

}  // namespace spillway::detail
