// spillway/ode/config.hpp — what the RK4 headers share: the host/device marker for right-hand
// sides, the state scalar types the stepper accepts, and their real type. Plain C++: the host
// implementation and its tests include it without nvcc.
#pragma once

#include <spillway/core/launch.hpp>

#include <cuda/std/complex>
#include <cuda/std/type_traits>

/// Right-hand sides and couplings carry SPILLWAY_HD (core/launch.hpp) so the host implementation
/// (the tests' oracle) and the kernels evaluate the very same functor. SPILLWAY_ODE_HD is its
/// former name (deprecated, kept for callers' functors).
#define SPILLWAY_ODE_HD SPILLWAY_HD

namespace spillway::ode {

/// The real type behind a state scalar: T for float/double, T for cuda::std::complex<T>.
template <class T>
struct real_of {
  using type = T;
};
template <class T>
struct real_of<cuda::std::complex<T>> {
  using type = T;
};
template <class T>
using real_of_t = typename real_of<T>::type;

/// The state element types the stepper accepts: float, double, cuda::std::complex<float>,
/// cuda::std::complex<double>.
template <class T>
inline constexpr bool is_state_scalar_v =
    cuda::std::is_same_v<T, float> || cuda::std::is_same_v<T, double> ||
    cuda::std::is_same_v<T, cuda::std::complex<float>> || cuda::std::is_same_v<T, cuda::std::complex<double>>;

/// A coupling that reduces nothing: the parameters stay what they were given. Use it (or the
/// overloads that take plain parameters) for systems without global coupling.
template <class P>
struct no_coupling {
  using param_type = P;
  static constexpr bool reduces = false;
};

namespace detail {
template <class C, class = void>
struct coupling_reduces : cuda::std::true_type {};
template <class C>
struct coupling_reduces<C, cuda::std::void_t<decltype(C::reduces)>>
    : cuda::std::bool_constant<static_cast<bool>(C::reduces)> {};
}  // namespace detail

/// True when coupling C recomputes its parameters each step from a reduction of the state
/// (every coupling except no_coupling, unless it declares `static constexpr bool reduces = false`).
template <class C>
inline constexpr bool coupling_reduces_v = detail::coupling_reduces<C>::value;

namespace detail {
/// What a coupling's contributions are summed in (a placeholder for couplings that reduce nothing).
template <class C, bool = coupling_reduces_v<C>>
struct accum_of {
  using type = typename C::accum_type;
};
template <class C>
struct accum_of<C, false> {
  using type = unsigned int;  // unused
};
}  // namespace detail

/// The type a coupling's contributions are summed in.
template <class C>
using accum_of_t = typename detail::accum_of<C>::type;

}  // namespace spillway::ode
