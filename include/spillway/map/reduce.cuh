// spillway/map/reduce.cuh — reductions of device arrays over all or chosen axes, into device memory.
//
//   spillway::device_array<double> total = spillway::sum_async(s, x.view());         // shape ()
//   spillway::reduce_into_async(s, x.view(), out.view(), op, init, {0, 2});          // user op
//
// Built on CUB (DeviceReduce for one output, DeviceSegmentedReduce for several), which gives the
// same floating-point result run to run for the same input on the same device. The result stays in
// device memory: no host round-trip. A strided input, or reduced axes that are not the trailing
// ones, is read through an index-mapping iterator (no copy).
#pragma once

#include <spillway/core/device_buffer.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/map/config.hpp>
#include <spillway/map/detail/kernels.cuh>
#include <spillway/map/device_array.hpp>
#include <spillway/map/host.hpp>
#include <spillway/map/map.cuh>
#include <spillway/map/ndview.hpp>
#include <spillway/map/shape.hpp>

#include <cub/device/device_reduce.cuh>
#include <cub/device/device_segmented_reduce.cuh>
#include <cuda/functional>
#include <cuda/std/functional>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <cstddef>
#include <string>
#include <type_traits>
#include <vector>

namespace spillway {

namespace detail {

template <class It, class R, class Op>
void cub_reduce(stream_view s, It in, R* out, const reduce_plan& p, Op op, R init) {
  std::size_t bytes = 0;
  if (p.outputs == 1) {
    SPILLWAY_CUDA_TRY(cub::DeviceReduce::Reduce(nullptr, bytes, in, out, p.reduced, op, init, s.value()));
    device_buffer<unsigned char> tmp(bytes, s);
    SPILLWAY_CUDA_TRY(cub::DeviceReduce::Reduce(tmp.data(), bytes, in, out, p.reduced, op, init, s.value()));
    return;
  }
  const auto begin = thrust::make_transform_iterator(thrust::counting_iterator<index_t>(0), scaled_index{p.reduced, 0});
  const auto end =
      thrust::make_transform_iterator(thrust::counting_iterator<index_t>(0), scaled_index{p.reduced, p.reduced});
  SPILLWAY_CUDA_TRY(
      cub::DeviceSegmentedReduce::Reduce(nullptr, bytes, in, out, p.outputs, begin, end, op, init, s.value()));
  device_buffer<unsigned char> tmp(bytes, s);
  SPILLWAY_CUDA_TRY(
      cub::DeviceSegmentedReduce::Reduce(tmp.data(), bytes, in, out, p.outputs, begin, end, op, init, s.value()));
}

}  // namespace detail

/// Enqueues out = reduction of `in` over `axes` with `op` (associative, __host__ __device__)
/// starting from `init`, on `s`. `out` (device memory) has `in`'s shape without the reduced axes;
/// the caller's arrays are untouched on a bad argument.
template <class T, class R, class Op>
void reduce_into_async(stream_view s, ndview<const T> in, ndview<R> out, Op op, R init, const std::vector<int>& axes) {
  const auto mask = reduction_mask(axes, in.rank(), "reduce");
  const auto p = detail::plan_reduce(in.shape(), in.strides(), mask);
  if (out.shape() != p.out_shape) {
    throw logic_error("reduce: the output has shape " + out.shape_string() + " but reducing " + in.shape_string() +
                      " over the given axes gives " + detail::shape_string(p.out_shape));
  }
  if (p.outputs == 0) return;
  device_buffer<R> staging;
  R* dst = out.data();
  if (!out.is_contiguous()) {
    staging = device_buffer<R>(static_cast<std::size_t>(p.outputs), s);
    dst = staging.data();
  }
  if (p.reduced == 0) {
    detail::fill_kernel<<<static_cast<unsigned>((p.outputs + 255) / 256), 256, 0, s.value()>>>(dst, p.outputs, init);
    SPILLWAY_CUDA_TRY(cudaGetLastError());
  } else {
    bool trailing = true;  // reduced axes after every kept axis (ignoring size-1 axes)
    bool seen_reduced = false;
    for (int d = 0; d < in.rank(); ++d) {
      if (in.extent(d) == 1) continue;
      if (mask[static_cast<std::size_t>(d)]) seen_reduced = true;
      else if (seen_reduced) trailing = false;
    }
    if (trailing && in.is_contiguous()) {
      detail::cub_reduce(s, in.data(), dst, p, op, init);
    } else {
      detail::strided_reader<T> rd{};
      rd.p = in.data();
      rd.keep_rank = static_cast<int>(p.keep_extents.size());
      rd.red_rank = static_cast<int>(p.red_extents.size());
      rd.reduced = p.reduced;
      for (int d = 0; d < rd.keep_rank; ++d) {
        rd.keep_e[d] = p.keep_extents[static_cast<std::size_t>(d)];
        rd.keep_s[d] = p.keep_strides[static_cast<std::size_t>(d)];
      }
      for (int d = 0; d < rd.red_rank; ++d) {
        rd.red_e[d] = p.red_extents[static_cast<std::size_t>(d)];
        rd.red_s[d] = p.red_strides[static_cast<std::size_t>(d)];
      }
      detail::cub_reduce(s, thrust::make_transform_iterator(thrust::counting_iterator<index_t>(0), rd), dst, p, op,
                         init);
    }
  }
  if (!out.is_contiguous()) {
    map_into_async(s, out, cuda::std::identity{}, ndview<const R>(staging.data(), p.out_shape));
  }
}

/// Reduction over all axes into a 0-d (or any single-element-shaped-()) output.
template <class T, class R, class Op>
void reduce_into_async(stream_view s, ndview<const T> in, ndview<R> out, Op op, R init) {
  reduce_into_async(s, in, out, op, init, detail::all_axes(in));
}

/// Allocates the output on `s` and enqueues the reduction into it.
template <class T, class R, class Op>
device_array<R> reduce_async(stream_view s, ndview<const T> in, Op op, R init, const std::vector<int>& axes) {
  const auto p = detail::plan_reduce(in.shape(), in.strides(), reduction_mask(axes, in.rank(), "reduce"));
  device_array<R> out(p.out_shape, s);
  reduce_into_async(s, in, out.view(), op, init, axes);
  return out;
}
template <class T, class R, class Op>
device_array<R> reduce_async(stream_view s, ndview<const T> in, Op op, R init) {
  return reduce_async(s, in, op, init, detail::all_axes(in));
}

/// Sum in T over `axes` (all when omitted).
template <class T>
device_array<T> sum_async(stream_view s, ndview<const T> in, const std::vector<int>& axes) {
  return reduce_async(s, in, cuda::std::plus<T>{}, T{}, axes);
}
/// Minimum over `axes` (all when omitted); an empty reduced axis is a logic_error (no identity).
template <class T>
device_array<T> amin_async(stream_view s, ndview<const T> in, const std::vector<int>& axes) {
  detail::require_nonempty_extremum(in, axes, "amin");
  return reduce_async(s, in, cuda::minimum<T>{}, detail::min_identity<T>(), axes);
}
/// Maximum over `axes` (all when omitted); an empty reduced axis is a logic_error (no identity).
template <class T>
device_array<T> amax_async(stream_view s, ndview<const T> in, const std::vector<int>& axes) {
  detail::require_nonempty_extremum(in, axes, "amax");
  return reduce_async(s, in, cuda::maximum<T>{}, detail::max_identity<T>(), axes);
}

/// Plain forms: on the per-thread stream, synchronized before they return.
template <class T>
device_array<T> sum(ndview<const T> in, const std::vector<int>& axes) {
  auto r = sum_async(stream_view::per_thread(), in, axes);
  stream_view::per_thread().synchronize();
  return r;
}
template <class T>
device_array<T> sum(ndview<const T> in) {
  return sum(in, detail::all_axes(in));
}

// A view of mutable elements is read as const (template deduction would not apply the conversion
// by itself, so `sum_async(s, x.view())` on a device_array<T> would otherwise fail to compile).
template <class T, class R, class Op, class = std::enable_if_t<!std::is_const_v<T>>>
void reduce_into_async(stream_view s, ndview<T> in, ndview<R> out, Op op, R init, const std::vector<int>& axes) {
  reduce_into_async(s, ndview<const T>(in), out, op, init, axes);
}
template <class T, class R, class Op, class = std::enable_if_t<!std::is_const_v<T>>>
void reduce_into_async(stream_view s, ndview<T> in, ndview<R> out, Op op, R init) {
  reduce_into_async(s, ndview<const T>(in), out, op, init);
}
template <class T, class R, class Op, class = std::enable_if_t<!std::is_const_v<T>>>
device_array<R> reduce_async(stream_view s, ndview<T> in, Op op, R init, const std::vector<int>& axes) {
  return reduce_async(s, ndview<const T>(in), op, init, axes);
}
template <class T, class R, class Op, class = std::enable_if_t<!std::is_const_v<T>>>
device_array<R> reduce_async(stream_view s, ndview<T> in, Op op, R init) {
  return reduce_async(s, ndview<const T>(in), op, init);
}
// Every named reduction's other overloads: over all axes, and on a view of mutable elements.
#define SPILLWAY_MAP_REDUCTION_OVERLOADS(name)                                                     \
  template <class T>                                                                               \
  device_array<T> name(stream_view s, ndview<const T> in) {                                        \
    return name(s, in, detail::all_axes(in));                                                      \
  }                                                                                                \
  template <class T, class = std::enable_if_t<!std::is_const_v<T>>>                               \
  device_array<T> name(stream_view s, ndview<T> in, const std::vector<int>& axes) {                \
    return name(s, ndview<const T>(in), axes);                                                     \
  }                                                                                                \
  template <class T, class = std::enable_if_t<!std::is_const_v<T>>>                               \
  device_array<T> name(stream_view s, ndview<T> in) {                                              \
    return name(s, ndview<const T>(in));                                                           \
  }
SPILLWAY_MAP_REDUCTION_OVERLOADS(sum_async)
SPILLWAY_MAP_REDUCTION_OVERLOADS(amin_async)
SPILLWAY_MAP_REDUCTION_OVERLOADS(amax_async)
#undef SPILLWAY_MAP_REDUCTION_OVERLOADS
template <class T, class = std::enable_if_t<!std::is_const_v<T>>>
device_array<T> sum(ndview<T> in, const std::vector<int>& axes) {
  return sum(ndview<const T>(in), axes);
}
template <class T, class = std::enable_if_t<!std::is_const_v<T>>>
device_array<T> sum(ndview<T> in) {
  return sum(ndview<const T>(in));
}

}  // namespace spillway
