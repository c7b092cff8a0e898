// spillway/map/gufunc.cuh — generalized ufuncs on the device.
//
//   // per-row dot product of (rows, n) arrays: "(n),(n)->()"
//   auto dots = spillway::gufunc_async<float>(s, "(n),(n)->()",
//       [] __host__ __device__ (spillway::gufunc_team t, spillway::ndview<const float> a,
//                               spillway::ndview<const float> b, spillway::ndview<float> out) {
//         float acc = 0;
//         for (spillway::index_t i = t.rank(); i < a.extent(0); i += t.size()) acc += a(i) * b(i);
//         acc = t.sum(acc);
//         if (t.leader()) out() = acc;
//       }, a.view(), b.view());
//
// The functor receives ([team,] core views of the inputs..., core view of the output) for each
// instance of the broadcast loop dimensions. The loop is spread over the GPU: a thread per instance
// for tiny cores, a sub-warp team for medium ones, a block for large ones — never one thread for the
// whole array. A functor WITHOUT a team parameter gets one thread per instance whatever the core
// size (only the functor can split its own loop): take a gufunc_team to get the block. With the automatic team
// size, a team functor and small dense input cores, the cores are first staged into shared memory
// (16-byte asynchronous copies) by a resident grid in which every team walks its own instances
// through its own shared slot (two slots, opt-in, overlap a team's next load with its compute);
// see plan_gufunc_stage, gufunc_stage_buffers, gufunc_staged_kernel and docs/map.md.
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/map/config.hpp>
#include <spillway/map/detail/gufunc_invoke.hpp>
#include <spillway/map/detail/gufunc_plan.hpp>
#include <spillway/map/detail/kernels.cuh>
#include <spillway/map/device_array.hpp>
#include <spillway/map/host.hpp>
#include <spillway/map/ndview.hpp>
#include <spillway/map/operand.hpp>
#include <spillway/map/team.hpp>

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

/// Threads per core instance for a core of `work` elements: about 8 elements per thread, a
/// sub-warp of up to 32 threads, a block of 256 for cores over 4096 elements: per-thread setup
/// outweighs shorter loops (docs/map.md, "gufunc_team_size").
inline int gufunc_team_size(index_t work) {
  if (work < 16) return 1;
  if (work > 4096) return map_block;
  int t = 1;
  while (t < 32 && t * 8 < work) t *= 2;
  return t;
}

template <class F, class R, class... Args>
constexpr bool gufunc_takes_team() {
  return std::is_invocable_v<const F&, gufunc_team,
                             decltype(make_core_arg(as_operand(std::declval<const Args&>())).get(
                                 index_t{}, std::declval<const gufunc_operand_plan&>()))...,
                             ndview<R>> ||
         std::is_invocable_v<const F&, gufunc_team, ndview<R>,
                             decltype(make_core_arg(as_operand(std::declval<const Args&>())).get(
                                 index_t{}, std::declval<const gufunc_operand_plan&>()))...>;
}

/// The staged path's view of one input: scalar or array, element size, base address.
template <class Op>
gufunc_stage_input stage_input(const Op& op) {
  using I = operand_info<Op>;
  gufunc_stage_input r;
  r.is_array = I::is_array;
  r.elem_size = sizeof(typename I::value_type);
  if constexpr (I::is_array) r.address = reinterpret_cast<std::uintptr_t>(op.data());
  return r;
}

}  // namespace detail

/// Enqueues the gufunc `spec` on `s`, writing `out` (its shape must be the loop shape followed by
/// the output's core shape). Inputs are device ndviews/device_arrays, or scalars for "()" entries.
template <class R, class F, class... Args>
void gufunc_into_async(stream_view s, const gufunc_spec& spec, ndview<R> out, F f, const Args&... args) {
  static_assert(!std::is_const_v<R>, "gufunc_into: the output view must be writable");
  if (spec.stage_buffers < 0 || spec.stage_buffers > 2) {
    detail::gufunc_stage_buffers(detail::gufunc_stage_plan{}, spec.stage_buffers, 0);  // throws, naming the field
  }
  const auto& sig = spec.signature;
  std::size_t i = 0;
  (detail::check_gufunc_scalar(detail::as_operand(args), sig, i++), ...);
  const detail::shape_and_strides ol{out.shape(), out.strides()};
  const auto plan = detail::plan_gufunc(sig, {detail::operand_layout(detail::as_operand(args))...}, &ol);
  constexpr std::size_t K = 1 + sizeof...(Args);
  detail::gufunc_kernel_plan<K> kp{};
  kp.loop_rank = plan.loop_rank;
  for (int d = 0; d < max_rank; ++d) kp.loop_extents[d] = plan.loop_extents[d];
  kp.instances = plan.instances;
  for (std::size_t k = 0; k < K; ++k) kp.ops[k] = plan.ops[k];
  if (kp.instances == 0) return;

  int team = spec.team_size;
  if (team == 0 && spec.stage && detail::gufunc_takes_team<F, R, Args...>()) {
    const auto sp = detail::plan_gufunc_stage(plan, {detail::stage_input(detail::as_operand(args))...});
    if (sp.ok) {
      detail::gufunc_stage_kplan<K> skp{};
      skp.per_block = sp.per_block;
      skp.team = sp.team;
      skp.smem_bytes = sp.smem_bytes;
      for (std::size_t k = 0; k < K; ++k) skp.ops[k] = sp.ops[k];
      const int device = current_device();
      const int buffers = detail::gufunc_stage_buffers(sp, spec.stage_buffers, max_block_smem(device));
      const auto smem = static_cast<std::size_t>(sp.smem_bytes) * static_cast<std::size_t>(buffers);
      const auto args_t = cuda::std::make_tuple(detail::make_core_arg(detail::as_operand(args))...);
      // A resident grid: each team walks instances grid-strided and overlaps its own loads.
      auto launch = [&](auto kernel, auto narrow_kernel) {
        if (smem > 48 * 1024) {
          SPILLWAY_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
          SPILLWAY_CUDA_TRY(
              cudaFuncSetAttribute(narrow_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
        }
        const unsigned blocks = grid_blocks(kp.instances, sp.per_block,
                                            resident_blocks(narrow_kernel, detail::gufunc_stage_block, smem, device));
        // 32-bit instance arithmetic while the last step past the end stays below 2^32.
        const index_t step = static_cast<index_t>(blocks) * sp.per_block;
        if (kp.instances + 2 * step < (index_t{1} << 32)) {
          narrow_kernel<<<blocks, detail::gufunc_stage_block, smem, s.value()>>>(out.data(), f, kp, skp, args_t);
        } else {
          kernel<<<blocks, detail::gufunc_stage_block, smem, s.value()>>>(out.data(), f, kp, skp, args_t);
        }
      };
      using A = decltype(args_t);
      if (buffers == 2) {
        launch(detail::gufunc_staged_kernel<2, std::uint64_t, R, F, A, K>, detail::gufunc_staged_kernel<2, std::uint32_t, R, F, A, K>);
      } else {
        launch(detail::gufunc_staged_kernel<1, std::uint64_t, R, F, A, K>, detail::gufunc_staged_kernel<1, std::uint32_t, R, F, A, K>);
      }
      SPILLWAY_CUDA_TRY(cudaGetLastError());
      return;
    }
  }
  if (!detail::gufunc_takes_team<F, R, Args...>()) {
    if (team > 1) {
      throw logic_error("gufunc \"" + sig.text + "\": team_size " + std::to_string(team) +
                        " needs a functor that takes a gufunc_team first");
    }
    team = 1;
  } else if (team == 0) {
    team = detail::gufunc_team_size(plan.max_core_size);
  }
  const bool block_team = team == detail::map_block;
  if (!block_team && (team < 1 || team > 32 || (team & (team - 1)) != 0)) {
    throw logic_error("gufunc \"" + sig.text + "\": team_size " + std::to_string(team) +
                      " must be 0 (automatic), a power of two up to 32, or " + std::to_string(detail::map_block));
  }
  const index_t threads = block_team ? kp.instances * detail::map_block : kp.instances * team;
  const index_t blocks = std::min<index_t>((threads + detail::map_block - 1) / detail::map_block, index_t{1} << 20);
  const auto args_t = cuda::std::make_tuple(detail::make_core_arg(detail::as_operand(args))...);
  if (kp.instances + threads < (index_t{1} << 32)) {
    detail::gufunc_kernel<std::uint32_t, R><<<static_cast<unsigned>(blocks), detail::map_block, 0, s.value()>>>(
        out.data(), f, kp, args_t, team, block_team);
  } else {
    detail::gufunc_kernel<std::uint64_t, R><<<static_cast<unsigned>(blocks), detail::map_block, 0, s.value()>>>(
        out.data(), f, kp, args_t, team, block_team);
  }
  SPILLWAY_CUDA_TRY(cudaGetLastError());
}

/// Allocates the output (element type R; by default the inputs' common type) on `s` and enqueues
/// the gufunc into it.
template <class R = void, class F, class... Args>
auto gufunc_async(stream_view s, const gufunc_spec& spec, F f, const Args&... args) {
  using T = std::conditional_t<std::is_void_v<R>,
                               std::common_type_t<typename detail::operand_info<detail::operand_t<Args>>::value_type...>, R>;
  std::size_t i = 0;
  (detail::check_gufunc_scalar(detail::as_operand(args), spec.signature, i++), ...);
  const auto plan = detail::plan_gufunc(spec.signature, {detail::operand_layout(detail::as_operand(args))...}, nullptr);
  device_array<T> out(plan.binding.output_shapes[0], s);
  gufunc_into_async(s, spec, out.view(), f, args...);
  return out;
}

/// gufunc_into_async on a stream of its own; returns when `out` holds the result.
template <class R, class F, class... Args>
void gufunc_into(const gufunc_spec& spec, ndview<R> out, F f, const Args&... args) {
  stream st;
  gufunc_into_async(st.view(), spec, out, f, args...);
  st.synchronize();
}

/// gufunc_async on the per-thread stream, synchronized before it returns.
template <class R = void, class F, class... Args>
auto gufunc(const gufunc_spec& spec, F f, const Args&... args) {
  auto out = gufunc_async<R>(stream_view::per_thread(), spec, f, args...);
  stream_view::per_thread().synchronize();
  return out;
}

}  // namespace spillway
