// spillway/map/detail/gufunc_invoke.hpp — calling a gufunc functor on one core instance (shared by
// the host target and the device kernels).
#pragma once

#include <spillway/map/config.hpp>
#include <spillway/map/detail/gufunc_plan.hpp>
#include <spillway/map/ndview.hpp>
#include <spillway/map/operand.hpp>
#include <spillway/map/team.hpp>

#include <cuda/std/tuple>

#include <cstddef>
#include <type_traits>
#include <utility>

namespace spillway::detail {

/// The argument a gufunc functor receives for one core instance of operand `o`.
template <class T, bool Array>
struct core_arg;
template <class T>
struct core_arg<T, true> {
  const T* p;
  SPILLWAY_HD ndview<const T> get(index_t off, const gufunc_operand_plan& o) const {
    return ndview<const T>::from_parts(p + off, o.core_rank, o.core_extents, o.core_strides);
  }
};
template <class T>
struct core_arg<T, false> {
  T v;
  SPILLWAY_HD T get(index_t, const gufunc_operand_plan&) const { return v; }
};
template <class Op>
auto make_core_arg(const Op& op) {
  return hold_operand<core_arg>(op);
}

template <class F, class R, class... A>
SPILLWAY_HD inline void invoke_gufunc(const F& f, const gufunc_team& team, ndview<R> out, const A&... a) {
  if constexpr (std::is_invocable_v<const F&, gufunc_team, ndview<R>, A...>) {
    f(team, out, a...);
  } else if constexpr (std::is_invocable_v<const F&, gufunc_team, A..., ndview<R>>) {
    f(team, a..., out);
  } else {
    static_assert(std::is_invocable_v<const F&, A..., ndview<R>>,
                  "a gufunc functor takes ([gufunc_team,] inputs..., ndview<R> output)");
    f(a..., out);
  }
}

template <class F, class R, class Args, class Idx, std::size_t... I>
SPILLWAY_HD inline void gufunc_instance(const F& f, const gufunc_team& team, R* out_base, const gufunc_operand_plan* ops,
                                            const index_t* loop_extents, int loop_rank, Idx inst, const Args& args,
                                            std::index_sequence<I...>) {
  index_t off[sizeof...(I) + 1];
  loop_offsets(inst, loop_rank, loop_extents, ops, off);
  const ndview<R> out = ndview<R>::from_parts(out_base + off[0], ops[0].core_rank, ops[0].core_extents, ops[0].core_strides);
  invoke_gufunc(f, team, out, cuda::std::get<I>(args).get(off[I + 1], ops[I + 1])...);
}

}  // namespace spillway::detail
