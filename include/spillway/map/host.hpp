// spillway/map/host.hpp — the host target: map, gufunc and reductions over host memory, in plain
// C++ (OpenMP when the translation unit is compiled with it). It computes exactly what the device
// functions compute and is their tests' oracle; choose it per call for work whose arithmetic
// intensity does not pay for moving the data over PCIe (see docs/map.md).
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/map/config.hpp>
#include <spillway/map/detail/gufunc_invoke.hpp>
#include <spillway/map/detail/gufunc_plan.hpp>
#include <spillway/map/ndview.hpp>
#include <spillway/map/operand.hpp>
#include <spillway/map/shape.hpp>
#include <spillway/map/signature.hpp>
#include <spillway/map/team.hpp>

#include <cuda/std/tuple>

#include <array>
#include <cstddef>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#define SPILLWAY_MAP_OMP_FOR _Pragma("omp parallel for schedule(static)")
#else
#define SPILLWAY_MAP_OMP_FOR
#endif

namespace spillway {

/// An owned, contiguous row-major host array (the host target's allocated outputs).
template <class T>
struct host_array {
  std::vector<T> data;
  std::vector<index_t> shape;

  host_array() = default;
  explicit host_array(std::vector<index_t> s) : shape(std::move(s)) {
    index_t n = 1;
    for (index_t e : shape) n *= e;
    data.resize(static_cast<std::size_t>(n));
  }
  [[nodiscard]] ndview<T> view() { return ndview<T>(data.data(), shape); }
  [[nodiscard]] ndview<const T> view() const { return ndview<const T>(data.data(), shape); }
  [[nodiscard]] index_t size() const { return static_cast<index_t>(data.size()); }
};

namespace detail {

/// An operand's shape and strides: an array's own, none for a scalar (rank 0).
template <class Op>
shape_and_strides operand_layout(const Op& op) {
  if constexpr (operand_info<Op>::is_array) {
    return {op.shape(), op.strides()};
  } else {
    return {};
  }
}
template <class Op>
std::vector<index_t> operand_shape(const Op& op) {
  return operand_layout(op).shape;
}
/// An operand's strides over the broadcast shape `b` (a scalar's: all zero).
template <class Op>
std::vector<index_t> operand_strides_over(const Op& op, const std::vector<index_t>& b) {
  if constexpr (!operand_info<Op>::is_array) return std::vector<index_t>(b.size(), 0);
  const shape_and_strides l = operand_layout(op);
  return broadcast_strides(l.shape, l.strides, b);
}

/// Plans the elementwise loop of `out` = f(ops...): broadcast check, per-operand strides, collapse.
/// Operand 0 of the plan is the output; scalars get all-zero strides.
template <class Out, class... Ops>
loop_plan plan_map(const ndview<Out>& out, const std::string& who, const Ops&... ops) {
  std::vector<std::vector<index_t>> shapes{operand_shape(ops)...};
  shapes.push_back(out.shape());
  const auto b = broadcast_shapes(shapes, who);
  if (b != out.shape()) {
    throw logic_error(who + ": the output has shape " + out.shape_string() + " but the arguments broadcast to " +
                      shape_string(b));
  }
  loop_plan p;
  p.extents = b;
  p.strides.push_back(out.strides());
  (p.strides.push_back(operand_strides_over(ops, b)), ...);
  return collapse(p);
}

template <class... Ops>
std::vector<index_t> broadcast_operands(const std::string& who, const Ops&... ops) {
  return broadcast_shapes({operand_shape(ops)...}, who);
}

/// Calls body(offsets) for every element of a collapsed loop; offsets[k] is operand k's element
/// offset. Work items are runs of up to 2^14 elements along the innermost dimension (split over
/// OpenMP threads); inside a run the offsets only advance by the inner strides.
template <std::size_t K, class Body>
void host_loop(const loop_plan& p, Body&& body) {
  const index_t n = p.size();
  if (n == 0) return;
  const int r = p.rank();
  if (r == 0) {
    body(std::array<index_t, K>{});
    return;
  }
  const auto ur = static_cast<std::size_t>(r - 1);
  const index_t inner = p.extents[ur];
  std::array<index_t, K> step{};
  for (std::size_t k = 0; k < K; ++k) step[k] = p.strides[k][ur];
  constexpr index_t run = 1 << 14;
  const index_t pieces = (inner + run - 1) / run;
  const index_t items = (n / inner) * pieces;
  SPILLWAY_MAP_OMP_FOR
  for (index_t item = 0; item < items; ++item) {
    index_t row = item / pieces;
    const index_t j0 = (item % pieces) * run;
    const index_t j1 = j0 + run < inner ? j0 + run : inner;
    std::array<index_t, K> off{};
    for (int d = r - 2; d >= 0; --d) {
      const auto ud = static_cast<std::size_t>(d);
      const index_t i = row % p.extents[ud];
      row /= p.extents[ud];
      for (std::size_t k = 0; k < K; ++k) off[k] += i * p.strides[k][ud];
    }
    for (std::size_t k = 0; k < K; ++k) off[k] += j0 * step[k];
    for (index_t j = j0; j < j1; ++j) {
      body(off);
      for (std::size_t k = 0; k < K; ++k) off[k] += step[k];
    }
  }
}

template <class Out, class F, class Loaded, std::size_t K, std::size_t... I>
void host_apply(Out* out, const F& f, const Loaded& ops, const std::array<index_t, K>& off,
                std::index_sequence<I...>) {
  out[off[0]] = static_cast<Out>(f(std::get<I>(ops).value(off[I + 1])...));
}

}  // namespace detail

/// out = f(args...) elementwise on the host, with NumPy broadcasting; args are host ndviews (or
/// host_arrays) and scalars. `out` must have the broadcast shape.
template <class Out, class F, class... Args>
void map_host_into(ndview<Out> out, F f, const Args&... args) {
  static_assert(!std::is_const_v<Out>, "map_host_into: the output view must be writable");
  const auto plan = detail::plan_map(out, "map_host", detail::as_operand(args)...);
  const auto loaded = std::make_tuple(detail::make_loaded(detail::as_operand(args))...);
  Out* o = out.data();
  detail::host_loop<1 + sizeof...(Args)>(plan, [&](const auto& off) {
    detail::host_apply(o, f, loaded, off, std::index_sequence_for<Args...>{});
  });
}

/// Allocates the broadcast-shaped output (element type from the functor) and maps into it.
template <class F, class... Args>
auto map_host(F f, const Args&... args) {
  using R = detail::map_result_t<F, Args...>;
  host_array<R> out(detail::broadcast_operands("map_host", detail::as_operand(args)...));
  map_host_into(out.view(), f, args...);
  return out;
}

// ---- generalized ufuncs ------------------------------------------------------------------------

/// A gufunc call's signature plus options. Implicit from a string: gufunc_into(..., "(n),(n)->()", ...).
struct gufunc_spec {
  gufunc_signature signature;
  /// Threads per core instance on the device: 0 picks by core size; otherwise 1, a power of two up
  /// to 32 (a sub-warp), or 256 (a block). Ignored by the host target.
  int team_size = 0;
  /// With team_size 0 and a team functor: small dense input cores are staged through shared
  /// memory (see docs/map.md). false keeps the direct path (for comparisons). Ignored on the host.
  bool stage = true;
  /// Shared slots per team on the staged path: 0 automatic (1, measured fastest); 1: load an
  /// instance, wait, compute; 2: load the next instance while computing this one (where two fit
  /// the device's shared memory per block, else 1). Other values throw. Ignored on the host.
  int stage_buffers = 0;

  gufunc_spec(const char* s) : signature(parse_signature(s)) {}         // NOLINT: implicit by design
  gufunc_spec(const std::string& s) : signature(parse_signature(s)) {}  // NOLINT
  gufunc_spec(const std::string& s, int team) : signature(parse_signature(s)), team_size(team) {}
  gufunc_spec(const std::string& s, int team, bool staged)
      : signature(parse_signature(s)), team_size(team), stage(staged) {}
};

namespace detail {

template <class Op>
void check_gufunc_scalar(const Op&, const gufunc_signature& sig, std::size_t i) {
  if constexpr (!operand_info<Op>::is_array) {
    if (!sig.inputs[i].empty()) {
      throw logic_error("gufunc \"" + sig.text + "\": argument " + std::to_string(i) +
                        " is a scalar but the signature gives it " + std::to_string(sig.inputs[i].size()) +
                        " core dimensions");
    }
  }
}

}  // namespace detail

/// Generalized ufunc on the host: for every loop instance, f([team,] core views of the inputs...,
/// core view of the output). Inputs are host ndviews/host_arrays (or scalars for "()" entries).
template <class R, class F, class... Args>
void gufunc_host_into(const gufunc_spec& spec, ndview<R> out, F f, const Args&... args) {
  const auto& sig = spec.signature;
  std::size_t i = 0;
  (detail::check_gufunc_scalar(detail::as_operand(args), sig, i++), ...);
  const detail::shape_and_strides ol{out.shape(), out.strides()};
  const auto plan = detail::plan_gufunc(sig, {detail::operand_layout(detail::as_operand(args))...}, &ol);
  const auto core = cuda::std::make_tuple(detail::make_core_arg(detail::as_operand(args))...);
  const gufunc_team team;
  const index_t n = plan.instances;
  SPILLWAY_MAP_OMP_FOR
  for (index_t inst = 0; inst < n; ++inst) {
    detail::gufunc_instance(f, team, out.data(), plan.ops.data(), plan.loop_extents, plan.loop_rank, inst, core,
                            std::index_sequence_for<Args...>{});
  }
}

/// Allocates the output (element type R, by default the inputs' common type) and runs the gufunc.
template <class R = void, class F, class... Args>
auto gufunc_host(const gufunc_spec& spec, F f, const Args&... args) {
  using T = std::conditional_t<std::is_void_v<R>,
                               std::common_type_t<typename detail::operand_info<detail::operand_t<Args>>::value_type...>, R>;
  std::size_t i = 0;
  (detail::check_gufunc_scalar(detail::as_operand(args), spec.signature, i++), ...);
  const auto plan = detail::plan_gufunc(spec.signature, {detail::operand_layout(detail::as_operand(args))...}, nullptr);
  host_array<T> out(plan.binding.output_shapes[0]);
  gufunc_host_into(spec, out.view(), f, args...);
  return out;
}

// ---- reductions --------------------------------------------------------------------------------

namespace detail {

/// The kept (output) and reduced dimensions of a reduction over `axes` of `in`.
struct reduce_plan {
  std::vector<index_t> out_shape;
  std::vector<index_t> keep_extents, keep_strides;
  std::vector<index_t> red_extents, red_strides;
  index_t outputs = 1;
  index_t reduced = 1;
};

inline reduce_plan plan_reduce(const std::vector<index_t>& shape, const std::vector<index_t>& strides,
                               const std::vector<bool>& mask) {
  reduce_plan p;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (mask[d]) {
      p.red_extents.push_back(shape[d]);
      p.red_strides.push_back(strides[d]);
      p.reduced *= shape[d];
    } else {
      p.keep_extents.push_back(shape[d]);
      p.keep_strides.push_back(strides[d]);
      p.outputs *= shape[d];
    }
  }
  p.out_shape = p.keep_extents;
  return p;
}

inline index_t offset_of(index_t i, const std::vector<index_t>& ext, const std::vector<index_t>& str) {
  index_t off = 0;
  for (std::size_t d = ext.size(); d-- > 0;) {
    off += (i % ext[d]) * str[d];
    i /= ext[d];
  }
  return off;
}

template <class T>
struct host_min {
  T operator()(const T& a, const T& b) const { return b < a ? b : a; }
};
template <class T>
struct host_max {
  T operator()(const T& a, const T& b) const { return a < b ? b : a; }
};

}  // namespace detail

/// out = reduction of `in` over `axes` with `op` starting from `init` (op associative; the result
/// is computed in a fixed order, so it is the same run to run whatever the thread count). `out`
/// has `in`'s shape without the reduced axes.
template <class T, class R, class Op>
void reduce_host_into(ndview<const T> in, ndview<R> out, Op op, R init, const std::vector<int>& axes) {
  const auto mask = reduction_mask(axes, in.rank(), "reduce_host");
  const auto p = detail::plan_reduce(in.shape(), in.strides(), mask);
  if (out.shape() != p.out_shape) {
    throw logic_error("reduce_host: the output has shape " + out.shape_string() + " but reducing " +
                      in.shape_string() + " gives " + detail::shape_string(p.out_shape));
  }
  constexpr index_t block = 1 << 15;
  const index_t blocks = p.reduced == 0 ? 0 : (p.reduced + block - 1) / block;
  std::vector<R> partial(static_cast<std::size_t>(p.outputs * blocks));
  const index_t work = p.outputs * blocks;
  SPILLWAY_MAP_OMP_FOR
  for (index_t w = 0; w < work; ++w) {
    const index_t o = w / blocks;
    const index_t b = w % blocks;
    const index_t base = detail::offset_of(o, p.keep_extents, p.keep_strides);
    const index_t begin = b * block;
    const index_t end = begin + block < p.reduced ? begin + block : p.reduced;
    R acc = static_cast<R>(in.data()[base + detail::offset_of(begin, p.red_extents, p.red_strides)]);
    for (index_t r = begin + 1; r < end; ++r) {
      acc = op(acc, static_cast<R>(in.data()[base + detail::offset_of(r, p.red_extents, p.red_strides)]));
    }
    partial[static_cast<std::size_t>(w)] = acc;
  }
  for (index_t o = 0; o < p.outputs; ++o) {
    R acc = init;
    for (index_t b = 0; b < blocks; ++b) acc = op(acc, partial[static_cast<std::size_t>(o * blocks + b)]);
    out.data()[detail::offset_of(o, p.keep_extents, out.strides())] = acc;
  }
}
/// Reduction over all elements.
template <class T, class R, class Op>
void reduce_host_into(ndview<const T> in, ndview<R> out, Op op, R init) {
  std::vector<int> all(static_cast<std::size_t>(in.rank()));
  for (int d = 0; d < in.rank(); ++d) all[static_cast<std::size_t>(d)] = d;
  reduce_host_into(in, out, op, init, all);
}

template <class T, class R, class Op>
host_array<R> reduce_host(ndview<const T> in, Op op, R init, const std::vector<int>& axes) {
  const auto p = detail::plan_reduce(in.shape(), in.strides(), reduction_mask(axes, in.rank(), "reduce_host"));
  host_array<R> out(p.out_shape);
  reduce_host_into(in, out.view(), op, init, axes);
  return out;
}
template <class T, class R, class Op>
host_array<R> reduce_host(ndview<const T> in, Op op, R init) {
  host_array<R> out(std::vector<index_t>{});
  reduce_host_into(in, out.view(), op, init);
  return out;
}

namespace detail {
template <class T>
std::vector<int> all_axes(const ndview<T>& v) {
  std::vector<int> a(static_cast<std::size_t>(v.rank()));
  for (int d = 0; d < v.rank(); ++d) a[static_cast<std::size_t>(d)] = d;
  return a;
}
template <class T>
void require_nonempty_extremum(const ndview<const T>& in, const std::vector<int>& axes, const char* who) {
  const auto mask = reduction_mask(axes, in.rank(), who);
  for (int d = 0; d < in.rank(); ++d) {
    if (mask[static_cast<std::size_t>(d)] && in.extent(d) == 0) {
      throw logic_error(std::string(who) + ": axis " + std::to_string(d) +
                        " has size 0 and the operation has no identity");
    }
  }
}
template <class T>
constexpr T max_identity() {
  return std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::lowest();
}
template <class T>
constexpr T min_identity() {
  return std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity() : std::numeric_limits<T>::max();
}
}  // namespace detail

/// Sum over `axes` (all axes when omitted) in T.
template <class T>
host_array<T> sum_host(ndview<const T> in, const std::vector<int>& axes) {
  return reduce_host(in, std::plus<T>{}, T{}, axes);
}
template <class T>
host_array<T> amin_host(ndview<const T> in, const std::vector<int>& axes) {
  detail::require_nonempty_extremum(in, axes, "amin_host");
  return reduce_host(in, detail::host_min<T>{}, detail::min_identity<T>(), axes);
}
template <class T>
host_array<T> amax_host(ndview<const T> in, const std::vector<int>& axes) {
  detail::require_nonempty_extremum(in, axes, "amax_host");
  return reduce_host(in, detail::host_max<T>{}, detail::max_identity<T>(), axes);
}

// A view of mutable elements is read as const (deduction alone would not apply the conversion).
template <class T, class R, class Op, class = std::enable_if_t<!std::is_const_v<T>>>
host_array<R> reduce_host(ndview<T> in, Op op, R init, const std::vector<int>& axes) {
  return reduce_host(ndview<const T>(in), op, init, axes);
}
template <class T, class R, class Op, class = std::enable_if_t<!std::is_const_v<T>>>
host_array<R> reduce_host(ndview<T> in, Op op, R init) {
  return reduce_host(ndview<const T>(in), op, init);
}
// Every named reduction's other overloads: over all axes, and on a view of mutable elements.
#define SPILLWAY_MAP_HOST_REDUCTION_OVERLOADS(name)                             \
  template <class T>                                                            \
  host_array<T> name(ndview<const T> in) {                                      \
    return name(in, detail::all_axes(in));                                      \
  }                                                                             \
  template <class T, class = std::enable_if_t<!std::is_const_v<T>>>            \
  host_array<T> name(ndview<T> in, const std::vector<int>& axes) {              \
    return name(ndview<const T>(in), axes);                                     \
  }                                                                             \
  template <class T, class = std::enable_if_t<!std::is_const_v<T>>>            \
  host_array<T> name(ndview<T> in) {                                            \
    return name(ndview<const T>(in));                                           \
  }
SPILLWAY_MAP_HOST_REDUCTION_OVERLOADS(sum_host)
SPILLWAY_MAP_HOST_REDUCTION_OVERLOADS(amin_host)
SPILLWAY_MAP_HOST_REDUCTION_OVERLOADS(amax_host)
#undef SPILLWAY_MAP_HOST_REDUCTION_OVERLOADS

}  // namespace spillway
