// spillway/map/detail/gufunc_plan.hpp — the loop/core split of a gufunc call (pure host logic).
#pragma once

#include <spillway/map/config.hpp>
#include <spillway/map/shape.hpp>
#include <spillway/map/signature.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace spillway::detail {

/// One argument's walk: strides along the (broadcast) loop dimensions, extents and strides of its
/// core dimensions.
struct gufunc_operand_plan {
  index_t loop_strides[max_rank] = {};
  int core_rank = 0;
  index_t core_extents[max_rank] = {};
  index_t core_strides[max_rank] = {};
  index_t core_size = 1;
};

struct gufunc_plan {
  gufunc_binding binding;
  int loop_rank = 0;
  index_t loop_extents[max_rank] = {};
  index_t instances = 1;
  index_t max_core_size = 1;         ///< the largest core instance (elements) over the arguments
  std::vector<gufunc_operand_plan> ops;  ///< ops[0] is the output, then the inputs
};

struct shape_and_strides {
  std::vector<index_t> shape;
  std::vector<index_t> strides;
};

/// Plans a call: `inputs` as given (scalars have empty shapes), `output` empty when spillway
/// allocates it (then it is planned as a contiguous array of binding.output_shapes[0]).
inline gufunc_plan plan_gufunc(const gufunc_signature& sig, const std::vector<shape_and_strides>& inputs,
                               const shape_and_strides* output) {
  if (sig.outputs.size() != 1) {
    throw logic_error("gufunc \"" + sig.text + "\": the signature has " + std::to_string(sig.outputs.size()) +
                      " outputs; spillway's gufuncs take exactly one");
  }
  std::vector<std::vector<index_t>> in_shapes;
  for (const auto& a : inputs) in_shapes.push_back(a.shape);
  std::vector<std::vector<index_t>> out_shapes;
  if (output != nullptr) out_shapes.push_back(output->shape);
  gufunc_plan p;
  p.binding = bind_signature(sig, in_shapes, out_shapes);
  const auto& loop = p.binding.loop_shape;
  p.loop_rank = static_cast<int>(loop.size());
  for (int d = 0; d < p.loop_rank; ++d) {
    p.loop_extents[d] = loop[static_cast<std::size_t>(d)];
    p.instances *= loop[static_cast<std::size_t>(d)];
  }
  auto add = [&](const std::vector<index_t>& shape, const std::vector<index_t>& strides, std::size_t core_rank) {
    gufunc_operand_plan o;
    const std::size_t nloop = shape.size() - core_rank;
    std::vector<index_t> ls(shape.begin(), shape.begin() + static_cast<std::ptrdiff_t>(nloop));
    std::vector<index_t> lst(strides.begin(), strides.begin() + static_cast<std::ptrdiff_t>(nloop));
    const auto b = broadcast_strides(ls, lst, loop);
    for (std::size_t d = 0; d < b.size(); ++d) o.loop_strides[d] = b[d];
    o.core_rank = static_cast<int>(core_rank);
    for (std::size_t k = 0; k < core_rank; ++k) {
      o.core_extents[k] = shape[nloop + k];
      o.core_strides[k] = strides[nloop + k];
      o.core_size *= shape[nloop + k];
    }
    if (o.core_size > p.max_core_size) p.max_core_size = o.core_size;
    p.ops.push_back(o);
  };
  if (output != nullptr) {
    add(output->shape, output->strides, sig.outputs[0].size());
  } else {
    const auto& shape = p.binding.output_shapes[0];
    std::vector<index_t> strides(shape.size());
    index_t s = 1;
    for (std::size_t d = shape.size(); d-- > 0;) {
      strides[d] = s;
      s *= shape[d] > 0 ? shape[d] : 1;
    }
    add(shape, strides, sig.outputs[0].size());
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) add(inputs[i].shape, inputs[i].strides, sig.inputs[i].size());
  if (p.ops[0].core_size == 0 || p.instances == 0) p.instances = p.ops[0].core_size == 0 ? 0 : p.instances;
  return p;
}

/// The row-major digits of loop instance `i` (dig[d] for d < loop_rank, 0 beyond). Unrolled over
/// max_rank so that `dig` stays in registers; the outermost digit needs no division.
template <class Idx>
SPILLWAY_MAP_HD inline void loop_digits(Idx i, int loop_rank, const index_t* extents, index_t (&dig)[max_rank]) {
  for (int d = max_rank - 1; d >= 0; --d) {
    if (d >= loop_rank) {
      dig[d] = 0;
    } else if (d == 0) {
      dig[d] = static_cast<index_t>(i);
    } else {
      const Idx e = static_cast<Idx>(extents[d]);
      const Idx q = i / e;
      dig[d] = static_cast<index_t>(i - q * e);
      i = q;
    }
  }
}

/// Offset of the instance with digits `dig` for an operand with loop strides `strides`.
SPILLWAY_MAP_HD inline index_t loop_offset(const index_t (&dig)[max_rank], const index_t* strides, int loop_rank) {
  index_t off = 0;
  for (int d = 0; d < max_rank; ++d) {
    if (d < loop_rank) off += dig[d] * strides[d];
  }
  return off;
}

}  // namespace spillway::detail
