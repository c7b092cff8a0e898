// spillway/map/map.cuh — elementwise maps over N-d device arrays with NumPy broadcasting.
//
//   auto cv = spillway::map_async(s, [] __host__ __device__ (double m, double d) { return m * d; },
//                                 mult_by.view(), discount.view());   // (4000,5) ⊙ (100,4000,5)
//
// Arguments are device ndviews (or device_arrays) and scalars; scalars are passed to the kernel by
// value. The output's element type is the functor's return type (a __host__ __device__ lambda, a
// functor, or an extended __device__ lambda wrapped in cuda::proclaim_return_type<R>). The loop is
// collapsed first, then runs as a 1-d kernel (contiguous), a 2-d rows kernel (unit inner strides:
// the broadcast case) or a general N-d one; the first two use 16-byte vector loads when every
// operand's alignment allows it.
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/map/config.hpp>
#include <spillway/map/detail/kernels.cuh>
#include <spillway/map/device_array.hpp>
#include <spillway/map/host.hpp>
#include <spillway/map/ndview.hpp>
#include <spillway/map/operand.hpp>
#include <spillway/map/shape.hpp>

#include <cuda/std/tuple>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace spillway {

namespace detail {

template <class Op>
auto make_kop(const Op& op, const std::vector<index_t>& strides) {
  using I = operand_info<Op>;
  if constexpr (I::is_array) {
    kop<typename I::value_type, true> k{op.data(), {}};
    for (std::size_t d = 0; d < strides.size(); ++d) k.s[d] = strides[d];
    return k;
  } else {
    return kop<Op, false>{op};
  }
}

template <class Op>
constexpr std::size_t array_elem_size() {
  if constexpr (operand_info<Op>::is_array) {
    return sizeof(typename operand_info<Op>::value_type);
  } else {
    return 1;
  }
}

/// map's kernels do not loop over a grid: one launch holds all of `work`, or this throws.
inline unsigned grid_for(index_t work, index_t per_block, const char* who) {
  if ((work + per_block - 1) / per_block > max_grid_blocks) {
    throw logic_error(std::string(who) + ": " + std::to_string(work) + " work items exceed one launch");
  }
  return grid_blocks(work, per_block, max_grid_blocks);
}

template <class KOp>
bool kop_aligned(const KOp& k, std::size_t bytes, int rank, index_t v) {
  if constexpr (KOp::is_array) {
    const bool unit_inner = k.s[rank - 1] != 0;
    if (!unit_inner) return true;  // broadcast inner: one scalar load per row
    if (reinterpret_cast<std::uintptr_t>(k.p) % (bytes * static_cast<std::size_t>(v)) != 0) return false;
    if (rank == 2 && k.s[0] % v != 0) return false;
    return true;
  } else {
    (void)bytes;
    (void)rank;
    (void)v;
    return true;
  }
}

template <class KOp>
bool kop_unit_inner(const KOp& k, int rank) {
  if constexpr (KOp::is_array) {
    return k.s[rank - 1] == 0 || k.s[rank - 1] == 1;
  } else {
    (void)rank;
    return true;
  }
}

/// Launches the elementwise loop `plan` (operand 0 = out). U = vectors per thread per operand.
template <int U, class Out, class F, class... KOps>
void launch_map(const loop_plan& plan0, Out* out_base, const F& f, stream_view s, const KOps&... kops_in) {
  loop_plan plan = plan0;
  if (plan.rank() == 0) {  // a single element
    plan.extents = {1};
    for (auto& st : plan.strides) st = {0};
  }
  const index_t n = plan.size();
  if (n == 0) return;
  const int rank = plan.rank();
  // Re-create the kernel operands with the collapsed strides (operand k+1 of the plan).
  cuda::std::tuple<KOps...> ops{kops_in...};
  [[maybe_unused]] std::size_t k = 1;
  auto restride = [&](auto& op) {
    using KOp = std::decay_t<decltype(op)>;
    if constexpr (KOp::is_array) {
      for (int d = 0; d < rank; ++d) op.s[d] = plan.strides[k][static_cast<std::size_t>(d)];
    }
    ++k;
  };
  cuda::std::apply([&](auto&... op) { (restride(op), ...); }, ops);

  constexpr std::size_t widest = std::max({sizeof(Out), array_elem_size<KOps>()...});
  constexpr int V = (16 % widest == 0) ? static_cast<int>(16 / widest) : 1;
  const auto& os = plan.strides[0];
  const bool all_unit = cuda::std::apply([&](const auto&... op) { return (kop_unit_inner(op, rank) && ...); }, ops);
  const bool out_unit = os[static_cast<std::size_t>(rank - 1)] == 1;
  auto aligned_for = [&](index_t v) {
    if (reinterpret_cast<std::uintptr_t>(out_base) % (sizeof(Out) * static_cast<std::size_t>(v)) != 0) return false;
    if (rank == 2 && os[0] % v != 0) return false;
    return cuda::std::apply(
        [&](const auto&... op) {
          return (kop_aligned(op, sizeof(typename std::decay_t<decltype(op)>::value_type), rank, v) && ...);
        },
        ops);
  };

  if (rank == 1 && all_unit && out_unit) {
    if (V > 1 && aligned_for(V)) {
      auto* k = &map_contig_kernel<V, U, Out, F, KOps...>;
      k<<<grid_for(n / V, index_t{map_block} * U, "map"), map_block, 0, s.value()>>>(out_base, n, f, ops);
    } else {
      auto* k = &map_contig_kernel<1, U, Out, F, KOps...>;
      k<<<grid_for(n, index_t{map_block} * U, "map"), map_block, 0, s.value()>>>(out_base, n, f, ops);
    }
    SPILLWAY_CUDA_TRY(cudaGetLastError());
    return;
  }
  if (rank == 2 && all_unit && out_unit) {
    const index_t rows = plan.extents[0];
    const index_t len = plan.extents[1];
    auto go = [&](auto vtag) {
      constexpr int VV = decltype(vtag)::value;
      const index_t lv = len / VV;
      const index_t total = rows * lv;
      const unsigned grid = grid_for(total, index_t{map_block} * U, "map");
      if (total + index_t{map_block} * U < (index_t{1} << 32)) {
        auto* k = &map_rows_kernel<VV, U, std::uint32_t, Out, F, KOps...>;
        k<<<grid, map_block, 0, s.value()>>>(
            out_base, os[0], static_cast<std::uint32_t>(rows), static_cast<std::uint32_t>(lv), f, ops);
      } else {
        auto* k = &map_rows_kernel<VV, U, std::uint64_t, Out, F, KOps...>;
        k<<<grid, map_block, 0, s.value()>>>(
            out_base, os[0], static_cast<std::uint64_t>(rows), static_cast<std::uint64_t>(lv), f, ops);
      }
    };
    if (V > 1 && len % V == 0 && aligned_for(V)) {
      go(std::integral_constant<int, V>{});
    } else {
      go(std::integral_constant<int, 1>{});
    }
    SPILLWAY_CUDA_TRY(cudaGetLastError());
    return;
  }
  kout<Out> ko{out_base, {}};
  kextents ext{rank, {}};
  for (int d = 0; d < rank; ++d) {
    ko.s[d] = os[static_cast<std::size_t>(d)];
    ext.e[d] = plan.extents[static_cast<std::size_t>(d)];
  }
  constexpr int UN = 4;
  const unsigned grid = grid_for(n, index_t{map_block} * UN, "map");
  if (n + index_t{map_block} * UN < (index_t{1} << 32)) {
    map_nd_kernel<UN, std::uint32_t><<<grid, map_block, 0, s.value()>>>(ko, ext, static_cast<std::uint32_t>(n), f, ops);
  } else {
    map_nd_kernel<UN, std::uint64_t><<<grid, map_block, 0, s.value()>>>(ko, ext, static_cast<std::uint64_t>(n), f, ops);
  }
  SPILLWAY_CUDA_TRY(cudaGetLastError());
}

/// Vectors per thread per operand for the 1-d and rows kernels (tuned on the H200: see
/// benchmarks/map_bench.cu).
inline constexpr int map_unroll = 4;

/// The 1-d and rows kernels run one block per tile: a resident-sized grid with the tiles strided
/// over it measured slower (docs/map.md, "one block per tile").
template <int U, class Out, class F, class... Args>
void map_into_impl(stream_view s, ndview<Out> out, F f, const Args&... args) {
  static_assert(!std::is_const_v<Out>, "map_into: the output view must be writable");
  const auto plan = plan_map(out, "map", as_operand(args)...);
  launch_map<U>(plan, out.data(), f, s, make_kop(as_operand(args), std::vector<index_t>{})...);
}

}  // namespace detail

/// Enqueues out = f(args...) elementwise on `s` (NumPy broadcasting; `out` must have the
/// broadcast shape and may be strided). Arguments are device ndviews/device_arrays and scalars.
template <class Out, class F, class... Args>
void map_into_async(stream_view s, ndview<Out> out, F f, const Args&... args) {
  detail::map_into_impl<detail::map_unroll>(s, out, f, args...);
}

/// Allocates the broadcast-shaped output on `s` (element type: the functor's return type) and
/// enqueues the map into it.
template <class F, class... Args>
auto map_async(stream_view s, F f, const Args&... args) {
  using R = detail::map_result_t<F, Args...>;
  device_array<R> out(detail::broadcast_operands("map", detail::as_operand(args)...), s);
  map_into_async(s, out.view(), f, args...);
  return out;
}

/// map_into_async on a stream of its own; returns when the result is in `out`.
template <class Out, class F, class... Args>
void map_into(ndview<Out> out, F f, const Args&... args) {
  stream st;
  map_into_async(st.view(), out, f, args...);
  st.synchronize();
}

/// map_async on the calling thread's per-thread stream, synchronized before it returns (the
/// returned array's memory is bound to that stream, which outlives the call).
template <class F, class... Args>
auto map(F f, const Args&... args) {
  auto out = map_async(stream_view::per_thread(), f, args...);
  stream_view::per_thread().synchronize();
  return out;
}

}  // namespace spillway
