// spillway/map/streamed.cuh — NumPy broadcasting in the scheduler's streamed transform, for host
// arrays larger than the device-memory budget.
//
//   std::vector<double> mult_by(4000 * 5), discount(n_dates * 4000 * 5), cv(discount.size());
//   spillway::transform_options o;                 // the pipeline's options: devices, budget, slots
//   o.budget = spillway::memory_budget(1_GiB);
//   spillway::transform(o, spillway::make_view(cv.data(), {n_dates, 4000, 5}), multiply{},
//                       spillway::make_view(mult_by.data(), {4000, 5}),
//                       spillway::make_view(discount.data(), {n_dates, 4000, 5}));
//
// This is an overload of spillway::transform (pipeline/transform.cuh), chosen when the output is
// an ndview: the same options, chunking, pinned staging of pageable memory, multi-device
// scheduling and failure reporting (it runs on the pipeline's run_tasks), plus shapes. Inputs are
// host ndviews (or host_arrays) and scalars, broadcast against the output's shape:
//   - an input with the output's full shape is streamed: each chunk copies its slice;
//   - any other (smaller, broadcast) input is copied whole to each slot once and stays resident;
//   - chunks are whole "outer rows": the output's leading dimensions along which every resident
//     input is broadcast, so each chunk is an ordinary device map with broadcasting.
// Arrays must be contiguous in host memory (a strided host view is a logic_error: copy it first).
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/core/memory_budget.hpp>
#include <spillway/map/map.cuh>
#include <spillway/map/ndview.hpp>
#include <spillway/map/operand.hpp>
#include <spillway/map/shape.hpp>
#include <spillway/pipeline/detail/host_workers.hpp>
#include <spillway/pipeline/host_operand.hpp>
#include <spillway/pipeline/job.hpp>
#include <spillway/pipeline/plan.hpp>
#include <spillway/pipeline/task_pipeline.hpp>
#include <spillway/pipeline/transform.cuh>

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace spillway {

namespace detail {

/// How one input of a streamed broadcast travels.
enum class stream_role { scalar, streamed, resident };

struct streamed_input_plan {
  stream_role role = stream_role::scalar;
  const void* data = nullptr;
  std::size_t elem = 0;
  std::size_t bytes = 0;                 ///< whole array (resident) or bytes per outer row (streamed)
  std::vector<index_t> device_shape;     ///< resident: the shape used on the device (trailing dims)
  std::size_t buffer = 0;                ///< slot device buffer index
  std::size_t staging = static_cast<std::size_t>(-1);
};

template <class Op>
void classify_streamed(const Op& op, const std::vector<index_t>& out_shape, std::size_t index,
                       std::vector<streamed_input_plan>& plans) {
  streamed_input_plan p;
  if constexpr (operand_info<Op>::is_array) {
    using T = typename operand_info<Op>::value_type;
    if (!op.is_contiguous()) {
      throw logic_error("transform: argument " + std::to_string(index) + " (shape " + op.shape_string() +
                        ") is not contiguous in host memory; streamed inputs must be (copy it first)");
    }
    // Streamed when it holds exactly the output's elements in the output's order.
    auto strip = [](std::vector<index_t> v) {
      while (!v.empty() && v.front() == 1) v.erase(v.begin());
      return v;
    };
    const std::vector<index_t> s = strip(op.shape());
    const std::vector<index_t> os = strip(out_shape);
    p.data = op.data();
    p.elem = sizeof(T);
    p.role = (s == os) ? stream_role::streamed : stream_role::resident;
    p.bytes = static_cast<std::size_t>(op.size()) * sizeof(T);
    p.device_shape = op.shape();
  }
  plans.push_back(p);
}

/// The device-side argument for input k of a chunk: a device view, or the scalar itself.
template <class Op>
auto chunk_arg(const Op& op, const streamed_input_plan& p, task_slot& slot, const std::vector<index_t>& chunk_shape,
               int p_dim) {
  if constexpr (operand_info<Op>::is_array) {
    using T = typename operand_info<Op>::value_type;
    const T* d = slot.device<T>(p.buffer);
    if (p.role == stream_role::streamed) return ndview<const T>(d, chunk_shape);
    // Resident: drop its leading dimensions in front of the chunk's row dimension (all size 1 by
    // construction of the split point).
    std::vector<index_t> s = p.device_shape;
    const std::size_t keep = chunk_shape.size() - 1;
    (void)p_dim;
    while (s.size() > keep && s.front() == 1) s.erase(s.begin());
    return ndview<const T>(d, s);
  } else {
    return op;
  }
}

template <class Out, class F, class OpsTuple, std::size_t... I>
job_report streamed_transform_impl(const transform_options& o, ndview<Out> out, F f, const OpsTuple& ops,
                                   std::index_sequence<I...>) {
  constexpr std::size_t n_in = sizeof...(I);
  if (o.slots_per_device == 0) throw logic_error("transform: slots_per_device must be at least 1, got 0");
  if (o.granularity == 0) throw logic_error("transform: granularity must be at least 1, got 0");
  if (!out.is_contiguous()) {
    throw logic_error("transform: the output (shape " + out.shape_string() + ") must be contiguous in host memory");
  }
  // Broadcast check (throws naming the argument, the dimension and both sizes).
  (void)plan_map(out, "transform", std::get<I>(ops)...);
  const std::vector<index_t> out_shape = out.shape();
  const index_t n = out.size();
  if (n == 0) return job_report{};

  std::vector<streamed_input_plan> in_plans;
  (classify_streamed(std::get<I>(ops), out_shape, I, in_plans), ...);

  // Split point: the leading output dimensions along which every resident input is broadcast.
  const int rank = out.rank();
  int split = rank;
  std::size_t resident_bytes = 0;
  std::size_t k_in = 0;
  auto find_split = [&](const auto& op) {
    using Op = std::decay_t<decltype(op)>;
    if constexpr (operand_info<Op>::is_array) {
      if (in_plans[k_in].role == stream_role::resident) {
        const auto bs = broadcast_strides(op.shape(), op.strides(), out_shape);
        int first = rank;
        for (int d = 0; d < rank; ++d) {
          if (bs[static_cast<std::size_t>(d)] != 0) {
            first = d;
            break;
          }
        }
        split = first < split ? first : split;
        resident_bytes += align_up(in_plans[k_in].bytes, 256, "transform");
      }
    }
    ++k_in;
  };
  (find_split(std::get<I>(ops)), ...);
  index_t row = 1;  // elements per outer row
  for (int d = split; d < rank; ++d) row *= out.extent(d);
  const index_t rows = n / row;

  const std::vector<int> devices = resolve_devices(o.devices, "transform");
  const memory_budget budget = o.budget ? *o.budget : memory_budget::default_for_all(devices);

  plan_request pr;
  pr.extent = static_cast<std::size_t>(rows);
  std::vector<std::size_t> streamed_index;  // plan buffer k -> input index (n_in for the output)
  for (std::size_t k = 0; k < n_in; ++k) {
    if (in_plans[k].role == stream_role::streamed) {
      pr.bytes_per_unit.push_back(static_cast<std::size_t>(row) * in_plans[k].elem);
      streamed_index.push_back(k);
    }
  }
  pr.bytes_per_unit.push_back(static_cast<std::size_t>(row) * sizeof(Out));
  streamed_index.push_back(n_in);
  pr.budget_bytes = budget.bytes();
  pr.slots = o.slots_per_device;
  pr.granularity = (o.granularity + static_cast<std::size_t>(row) - 1) / static_cast<std::size_t>(row);
  pr.max_slot_bytes = o.max_chunk_bytes > resident_bytes ? o.max_chunk_bytes : 0;
  pr.fixed_slot_bytes = resident_bytes;
  const chunk_plan plan = make_chunk_plan(pr);

  task_job_options t;
  t.devices = devices;
  t.slots_per_device = plan.slots();
  t.device_buffer_bytes = plan.buffer_bytes();
  t.budget = budget;
  t.progress = o.progress;
  std::size_t out_buffer = 0;
  std::size_t out_staging = static_cast<std::size_t>(-1);
  for (std::size_t b = 0; b < streamed_index.size(); ++b) {
    const std::size_t k = streamed_index[b];
    const void* p = k == n_in ? static_cast<const void*>(out.data()) : in_plans[k].data;
    const std::size_t total = k == n_in ? static_cast<std::size_t>(n) * sizeof(Out)
                                        : static_cast<std::size_t>(rows) * static_cast<std::size_t>(row) * in_plans[k].elem;
    const bool pageable = resolve_memory(host_memory::detect, p, total) == host_memory::pageable;
    std::size_t staging = static_cast<std::size_t>(-1);
    if (pageable) {
      staging = t.pinned_buffer_bytes.size();
      t.pinned_buffer_bytes.push_back(plan.buffer_bytes()[b]);
    }
    if (k == n_in) {
      out_buffer = b;
      out_staging = staging;
    } else {
      in_plans[k].buffer = b;
      in_plans[k].staging = staging;
    }
  }
  for (std::size_t k = 0; k < n_in; ++k) {
    if (in_plans[k].role == stream_role::resident) {
      in_plans[k].buffer = t.device_buffer_bytes.size();
      t.device_buffer_bytes.push_back(in_plans[k].bytes);
    }
  }
  const std::size_t copy_parts =
      (staging_workers().size() + 1) / devices.size() > 0 ? (staging_workers().size() + 1) / devices.size() : 1;
  // Resident inputs are copied once per slot: flags per device (its own worker thread) and slot.
  int max_dev = 0;
  for (int d : devices) max_dev = d > max_dev ? d : max_dev;
  std::vector<std::vector<char>> loaded(static_cast<std::size_t>(max_dev) + 1,
                                        std::vector<char>(plan.slots() * (n_in + 1), 0));

  auto enqueue = [&](std::size_t task, task_slot& slot, stream_view s) {
    const chunk c = plan.at(task);
    const std::size_t elems = c.count * static_cast<std::size_t>(row);
    auto& flags = loaded[static_cast<std::size_t>(slot.device())];
    for (std::size_t k = 0; k < n_in; ++k) {
      const auto& p = in_plans[k];
      if (p.role == stream_role::resident) {
        char& done = flags[slot.index() * (n_in + 1) + k];
        if (done == 0) {
          SPILLWAY_CUDA_TRY(cudaMemcpyAsync(slot.device(p.buffer), p.data, p.bytes, cudaMemcpyHostToDevice, s.value()));
          slot.add_bytes_moved(p.bytes);
          done = 1;
        }
      } else if (p.role == stream_role::streamed) {
        const std::size_t bytes = elems * p.elem;
        const auto* src = static_cast<const unsigned char*>(p.data) + c.begin * static_cast<std::size_t>(row) * p.elem;
        if (p.staging != static_cast<std::size_t>(-1)) {
          void* st = slot.pinned(p.staging);
          parallel_copy(st, src, bytes, copy_parts);
          src = static_cast<const unsigned char*>(st);
        }
        SPILLWAY_CUDA_TRY(cudaMemcpyAsync(slot.device(p.buffer), src, bytes, cudaMemcpyHostToDevice, s.value()));
        slot.add_bytes_moved(bytes);
      }
    }
    std::vector<index_t> chunk_shape{static_cast<index_t>(c.count)};
    for (int d = split; d < rank; ++d) chunk_shape.push_back(out.extent(d));
    ndview<Out> dev_out(slot.device<Out>(out_buffer), chunk_shape);
    map_into_impl<map_unroll>(s, dev_out, f, map_persistent,
                              chunk_arg(std::get<I>(ops), in_plans[I], slot, chunk_shape, split)...);
    void* dst = out.data() + c.begin * static_cast<std::size_t>(row);
    if (out_staging != static_cast<std::size_t>(-1)) dst = slot.pinned(out_staging);
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(dst, slot.device(out_buffer), elems * sizeof(Out), cudaMemcpyDeviceToHost, s.value()));
    slot.add_bytes_moved(elems * sizeof(Out));
  };
  auto complete = [&](std::size_t task, task_slot& slot) {
    if (out_staging == static_cast<std::size_t>(-1)) return;
    const chunk c = plan.at(task);
    parallel_copy(out.data() + c.begin * static_cast<std::size_t>(row), slot.pinned(out_staging),
                  c.count * static_cast<std::size_t>(row) * sizeof(Out), copy_parts);
  };
  return run_tasks(plan.chunk_count(), t, enqueue, complete);
}

}  // namespace detail

/// The streamed transform with shapes: out = f(in...) with NumPy broadcasting, for host arrays of
/// any size, through the pipeline (see the file comment). Chosen over the flat overload because
/// the output is an ndview. Throws logic_error for bad arguments before touching any data, and
/// pipeline_error when the job fails.
template <class Out, class F, class... InR>
job_report transform(const transform_options& o, ndview<Out> out, F f, const InR&... in) {
  static_assert(!std::is_const_v<Out>, "transform: the output view must be writable");
  const auto ops = std::make_tuple(detail::as_operand(in)...);
  return detail::streamed_transform_impl(o, out, f, ops, std::index_sequence_for<InR...>{});
}

/// The same with default options (every visible device, 80% of each one's free memory).
template <class Out, class F, class... InR>
job_report transform(ndview<Out> out, F f, const InR&... in) {
  return transform(transform_options{}, out, f, in...);
}

}  // namespace spillway
