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
#include <spillway/pipeline/streamed_job.hpp>
#include <spillway/pipeline/host_operand.hpp>
#include <spillway/pipeline/job.hpp>
#include <spillway/pipeline/plan.hpp>
#include <spillway/pipeline/task_pipeline.hpp>
#include <spillway/pipeline/transform.cuh>

#include <cuda_runtime_api.h>

#include <array>
#include <chrono>
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
  std::size_t buffer = 0;                ///< index of its device buffer in the streamed job
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

/// The device-side argument for input k of a chunk: a view of its device buffer (dev[p.buffer]),
/// or the scalar itself.
template <class Op>
auto chunk_arg(const Op& op, const streamed_input_plan& p, const std::vector<void*>& dev,
               const std::vector<index_t>& chunk_shape) {
  if constexpr (operand_info<Op>::is_array) {
    using T = typename operand_info<Op>::value_type;
    const T* d = static_cast<const T*>(dev[p.buffer]);
    if (p.role == stream_role::streamed) return ndview<const T>(d, chunk_shape);
    // Resident: drop its leading dimensions in front of the chunk's row dimension (all size 1 by
    // construction of the split point).
    std::vector<index_t> s = p.device_shape;
    const std::size_t keep = chunk_shape.size() - 1;
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
  if (run_on_host_instead(o.host_fallback, o.devices, "transform", "transform_options::host_fallback",
                          "map_host_into")) {
    const auto t0 = std::chrono::steady_clock::now();
    std::apply([&](const auto&... op) { map_host_into(out, f, op...); }, ops);
    return host_job_report(t0);
  }

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

  const job_devices jd = resolve_job_devices(o.devices, o.budget, "transform");
  const std::vector<int>& devices = jd.devices;
  const memory_budget& budget = jd.budget;

  plan_request pr;
  pr.extent = static_cast<std::size_t>(rows);
  // Streamed arrays (the plan's buffers, in order): the full-shape inputs, then the output; one
  // outer row per plan unit. Resident arrays follow them in the job's buffer numbering.
  std::vector<streamed_array> arrays;
  std::vector<resident_array> residents;
  auto memory_of = [](const void* p, std::size_t bytes) { return resolve_memory(host_memory::detect, p, bytes); };
  for (std::size_t k = 0; k < n_in; ++k) {
    auto& p = in_plans[k];
    if (p.role != stream_role::streamed) continue;
    const std::size_t unit = static_cast<std::size_t>(row) * p.elem;
    p.buffer = arrays.size();
    arrays.push_back({p.data, unit, memory_of(p.data, static_cast<std::size_t>(rows) * unit), false});
    pr.bytes_per_unit.push_back(unit);
  }
  const std::size_t out_buffer = arrays.size();
  const std::size_t out_unit = static_cast<std::size_t>(row) * sizeof(Out);
  arrays.push_back({out.data(), out_unit, memory_of(out.data(), static_cast<std::size_t>(n) * sizeof(Out)), true});
  pr.bytes_per_unit.push_back(out_unit);
  for (std::size_t k = 0; k < n_in; ++k) {
    auto& p = in_plans[k];
    if (p.role != stream_role::resident) continue;
    p.buffer = arrays.size() + residents.size();
    residents.push_back({p.data, p.bytes});
  }
  pr.budget_bytes = budget.bytes();
  pr.slots = o.slots_per_device;
  pr.granularity = (o.granularity + static_cast<std::size_t>(row) - 1) / static_cast<std::size_t>(row);
  pr.max_slot_bytes = o.max_chunk_bytes > resident_bytes ? o.max_chunk_bytes : 0;
  pr.fixed_slot_bytes = resident_bytes;
  const chunk_plan plan = make_chunk_plan(pr);

  auto compute = [&](const chunk& c, task_slot&, stream_view s, const std::vector<void*>& dev) {
    std::vector<index_t> chunk_shape{static_cast<index_t>(c.count)};
    for (int d = split; d < rank; ++d) chunk_shape.push_back(out.extent(d));
    ndview<Out> dev_out(static_cast<Out*>(dev[out_buffer]), chunk_shape);
    map_into_impl<map_unroll>(s, dev_out, f, chunk_arg(std::get<I>(ops), in_plans[I], dev, chunk_shape)...);
  };
  return run_streamed_job(devices, budget, o.progress, plan, arrays, residents, compute);
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

// streamed_map (pipeline/transform.cuh) reaches these overloads too: it is spillway::transform
// under the name that says which map it is.

}  // namespace spillway
