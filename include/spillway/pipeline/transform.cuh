// spillway/pipeline/transform.cuh — spillway's streamed elementwise map over host arrays that may
// be larger than device memory: out[i] = f(in0[i], in1[i], …).
//
//   std::vector<double> a(n), b(n), c(n);
//   spillway::transform_options o;
//   o.budget = spillway::memory_budget(1_GiB);         // per device; default 80% of free memory
//   auto r = spillway::streamed_map(o, c, multiplies{}, a, b);   // all visible GPUs; = transform
//
// f is a device functor: a __host__ __device__ lambda or functor (also usable by the host
// fallback), or a __device__ lambda wrapped in cuda::proclaim_return_type. Operands are anything
// contiguous (std::vector, pinned_buffer, span) or host_input()/host_output() descriptors; pinned
// or registered memory is copied by DMA directly, pageable memory is staged through pinned buffers
// by host threads (see host_operand.hpp for why).
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/memory_budget.hpp>
#include <spillway/pipeline/host_workers.hpp>
#include <spillway/pipeline/detail/kernels.cuh>
#include <spillway/pipeline/detail/streamed_job.hpp>
#include <spillway/pipeline/host_operand.hpp>
#include <spillway/pipeline/job.hpp>
#include <spillway/pipeline/plan.hpp>
#include <spillway/pipeline/streamed_job.hpp>
#include <spillway/pipeline/task_pipeline.hpp>
#include <spillway/pipeline/transform_host.hpp>

#include <cuda_runtime_api.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace spillway {

/// How spillway::transform runs: the streamed job's options (devices, budget, slots_per_device,
/// max_chunk_bytes, granularity — 1024 elements by default — and progress), and the kernel's.
struct transform_options : detail::streamed_options<1024> {
  /// Threads per block of the kernel.
  unsigned block_size = 256;
  /// With no GPU (and `devices` empty): true runs the host implementation (transform_on_host, or
  /// map_host_into for the broadcasting overload; the report then lists no devices); false (the
  /// default) throws no_gpu_error, so a GPU job never silently becomes a host one.
  bool host_fallback = false;
};

namespace detail {

template <class F, class Out, class... In, std::size_t... I>
job_report transform_impl(const transform_options& o, const host_result<Out>& out, F f,
                          const std::tuple<host_operand<In>...>& ins, std::index_sequence<I...>) {
  constexpr std::size_t n_in = sizeof...(In);
  static_assert(n_in >= 1, "spillway::transform needs at least one input array");
  check_transform_operands("transform", out, std::get<I>(ins)...);
  if (o.block_size == 0 || o.block_size > 256 || o.block_size % 32 != 0) {
    throw logic_error("transform: block_size must be a multiple of 32 in [32, 256], got " +
                      std::to_string(o.block_size));
  }
  if (o.slots_per_device == 0) throw logic_error("transform: slots_per_device must be at least 1, got 0");
  if (o.granularity == 0) throw logic_error("transform: granularity must be at least 1, got 0");
  const std::size_t n = out.size;
  if (n == 0) return job_report{};
  if (run_on_host_instead(o.host_fallback, o.devices, "transform", "transform_options::host_fallback",
                          "transform_on_host")) {
    const auto t0 = std::chrono::steady_clock::now();
    transform_on_host(out, f, std::get<I>(ins)...);
    return host_job_report(t0);
  }

  const job_devices jd = resolve_job_devices(o.devices, o.budget, "transform");
  const std::vector<int>& devices = jd.devices;
  const memory_budget& budget = jd.budget;

  plan_request pr;
  pr.extent = n;
  pr.bytes_per_unit = {sizeof(In)..., sizeof(Out)};
  pr.budget_bytes = budget.bytes();
  pr.slots = o.slots_per_device;
  pr.granularity = o.granularity;
  pr.max_slot_bytes = o.max_chunk_bytes;
  const chunk_plan plan = make_chunk_plan(pr);

  // Streamed arrays: the inputs, then the output (buffer n_in), one element per plan unit.
  std::vector<streamed_array> arrays;
  (arrays.push_back({std::get<I>(ins).data, sizeof(In),
                     resolve_memory(std::get<I>(ins).memory, std::get<I>(ins).data, n * sizeof(In)), false}),
   ...);
  arrays.push_back({out.data, sizeof(Out), resolve_memory(out.memory, out.data, n * sizeof(Out)), true});

  auto compute = [&](const chunk& c, task_slot& slot, stream_view s, const std::vector<void*>& dev) {
    // A grid-stride kernel: 8 waves of one block per SM.
    const unsigned grid = grid_blocks(static_cast<index_t>(c.count), o.block_size,
                                      index_t{8} * multiprocessor_count(slot.device()));
    transform_kernel<F, Out, In...><<<grid, o.block_size, 0, s.value()>>>(
        f, static_cast<Out*>(dev[n_in]), c.count, static_cast<const In*>(dev[I])...);
    SPILLWAY_CHECK_LAUNCH();
  };
  return run_streamed_job(devices, budget, o.progress, plan, arrays, {}, compute);
}

template <class T>
struct is_transform_options : std::is_same<std::remove_cv_t<std::remove_reference_t<T>>, transform_options> {};

}  // namespace detail

/// out[i] = f(in[i]...) for host arrays of any size, streamed through the devices of `o` in chunks
/// that fit its budget (one chunk in flight per slot and device). Returns when the output is
/// complete on the host, or — if the progress callback cancelled — with report.cancelled set and
/// report.completed saying which chunks (plan chunk indices) were written. Throws logic_error for
/// bad arguments (sizes, options; before touching any data) and pipeline_error when the job fails
/// (naming the chunk; its report says which chunks were written).
template <class OutR, class F, class... InR>
job_report transform(const transform_options& o, OutR&& out, F f, const InR&... in) {
  auto out_d = detail::as_output(out);
  auto ins = std::make_tuple(detail::as_input(in)...);
  return detail::transform_impl(o, out_d, f, ins, std::index_sequence_for<InR...>{});
}

/// The same with default options: every visible device, 80% of each one's free memory.
template <class OutR, class F, class... InR,
          std::enable_if_t<!detail::is_transform_options<OutR>::value, int> = 0>
job_report transform(OutR&& out, F f, const InR&... in) {
  return transform(transform_options{}, std::forward<OutR>(out), f, in...);
}

/// streamed_map: the name that says which map this is — over HOST arrays of any size, streamed
/// through the GPUs — beside map_async (device arrays) and map_host (the host target). The same
/// function as spillway::transform, every overload (this flat one and, with <spillway/map.cuh>,
/// the broadcasting one for ndview outputs, found by argument-dependent lookup: its arguments are
/// spillway types). `transform` stays as the older name.
template <class... Args>
job_report streamed_map(Args&&... args) {
  return transform(std::forward<Args>(args)...);
}

}  // namespace spillway
