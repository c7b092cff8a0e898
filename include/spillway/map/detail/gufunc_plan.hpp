// spillway/map/detail/gufunc_plan.hpp — the loop/core split of a gufunc call (pure host logic).
#pragma once

#include <spillway/map/config.hpp>
#include <spillway/map/shape.hpp>
#include <spillway/map/signature.hpp>

#include <cstddef>
#include <cstdint>
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

/// Merges the loop dimensions the kernels walk (binding.loop_shape, what callers see, is left as
/// it is): size-1 dimensions are dropped, and a dimension joins its outer neighbour when every
/// operand's outer stride is its inner stride times the inner extent (e.g. the loop (100, 4000) of
/// contiguous operands becomes (400000)). Instance numbering and every operand's offsets are
/// unchanged; what changes is the work per instance (one multiply per operand at loop rank 1).
inline void collapse_loop_dims(gufunc_plan& p) {
  if (p.instances <= 0 || p.loop_rank <= 0) return;
  int r = 0;
  index_t ext[max_rank] = {};
  std::vector<std::vector<index_t>> st(p.ops.size(), std::vector<index_t>(max_rank, 0));
  for (int d = 0; d < p.loop_rank; ++d) {
    const index_t e = p.loop_extents[d];
    if (e == 1) continue;
    bool merge = r > 0;
    for (std::size_t k = 0; merge && k < p.ops.size(); ++k) {
      merge = st[k][static_cast<std::size_t>(r - 1)] == p.ops[k].loop_strides[d] * e;
    }
    if (merge) {
      ext[r - 1] *= e;
      for (std::size_t k = 0; k < p.ops.size(); ++k) st[k][static_cast<std::size_t>(r - 1)] = p.ops[k].loop_strides[d];
    } else {
      ext[r] = e;
      for (std::size_t k = 0; k < p.ops.size(); ++k) st[k][static_cast<std::size_t>(r)] = p.ops[k].loop_strides[d];
      ++r;
    }
  }
  p.loop_rank = r;
  for (int d = 0; d < max_rank; ++d) {
    p.loop_extents[d] = d < r ? ext[d] : 0;
    for (std::size_t k = 0; k < p.ops.size(); ++k) p.ops[k].loop_strides[d] = d < r ? st[k][static_cast<std::size_t>(d)] : 0;
  }
}

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
  collapse_loop_dims(p);
  return p;
}

/// The row-major digits of loop instance `i` (dig[d] for d < loop_rank, 0 beyond). Unrolled over
/// max_rank so that `dig` stays in registers; the outermost digit needs no division.
template <class Idx>
SPILLWAY_HD inline void loop_digits(Idx i, int loop_rank, const index_t* extents, index_t (&dig)[max_rank]) {
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
SPILLWAY_HD inline index_t loop_offset(const index_t (&dig)[max_rank], const index_t* strides, int loop_rank) {
  index_t off = 0;
  for (int d = 0; d < max_rank; ++d) {
    if (d < loop_rank) off += dig[d] * strides[d];
  }
  return off;
}

/// Offsets of instance `inst` for each of K operands (`ops`, output first). At loop rank 0 or 1
/// (every call whose loop dimensions collapse) one multiply per operand, no digits.
template <std::size_t K, class Idx, class Op>
SPILLWAY_HD inline void loop_offsets(Idx inst, int loop_rank, const index_t* extents, const Op* ops, index_t (&off)[K]) {
  if (loop_rank <= 1) {  // loop_strides[0] is 0 at rank 0, where the only instance is 0
    for (std::size_t k = 0; k < K; ++k) off[k] = static_cast<index_t>(inst) * ops[k].loop_strides[0];
    return;
  }
  index_t dig[max_rank];
  loop_digits(inst, loop_rank, extents, dig);
  for (std::size_t k = 0; k < K; ++k) off[k] = loop_offset(dig, ops[k].loop_strides, loop_rank);
}

// ---- the staged path: small contiguous cores through shared memory ------------------------------
//
// When every array input's core is dense (row-major, the loop strides anything, 0 included) and
// small, a block of gufunc_stage_block threads takes `per_block` consecutive instances at a time:
// each instance's team copies the instance's input cores into shared memory with asynchronous
// 16-byte copies (all of a tile's copies are in flight before the first is used), then the
// functor runs on views of the shared copies. The functor is unchanged: it sees the same core
// extents and strides, and its reads hit shared memory instead of scattered global words.

inline constexpr int gufunc_stage_block = 256;
/// Shared bytes a tile aims at (the bytes a block keeps in flight); the largest power-of-two
/// instance count within it is taken, down to 8 instances (a 32-lane team each).
inline constexpr index_t gufunc_stage_target_bytes = 24 * 1024;
/// Staging is used only while 8 instances fit in this many shared bytes.
inline constexpr index_t gufunc_stage_max_bytes = 96 * 1024;

/// What the planner needs to know about one input beyond its layout.
struct gufunc_stage_input {
  bool is_array = false;
  std::size_t elem_size = 0;
  std::uintptr_t address = 0;
};

/// One operand's place in the shared buffer (unused for the output and for scalars).
struct gufunc_stage_operand {
  bool staged = false;  ///< an array input copied into shared memory
  bool vec16 = false;   ///< every instance starts 16-byte aligned: 16-byte copies
  index_t pitch = 0;    ///< elements between consecutive staged instances
  index_t offset = 0;   ///< bytes from the start of the shared buffer (a multiple of 16)
};

struct gufunc_stage_plan {
  bool ok = false;          ///< false: use the direct path
  int per_block = 0;        ///< instances per tile
  int team = 0;             ///< threads per instance = gufunc_stage_block / per_block
  index_t smem_bytes = 0;   ///< dynamic shared memory per block
  std::vector<gufunc_stage_operand> ops;  ///< ops[0] is the output (never staged), then the inputs
};

/// True when a core of `rank` dims is dense row-major (size-1 dimensions ignored).
inline bool dense_core(const gufunc_operand_plan& o) {
  index_t s = 1;
  for (int d = o.core_rank - 1; d >= 0; --d) {
    if (o.core_extents[d] == 1) continue;
    if (o.core_extents[d] == 0) return true;
    if (o.core_strides[d] != s) return false;
    s *= o.core_extents[d];
  }
  return true;
}

/// Plans the staged path for `p` (ops[0] the output, then one entry of `in` per input), or
/// returns ok == false when it does not apply: no instances, no array input, an input whose core
/// is not dense, an element size other than 4, 8 or 16 bytes, or cores too big for 8 instances
/// in gufunc_stage_max_bytes.
inline gufunc_stage_plan plan_gufunc_stage(const gufunc_plan& p, const std::vector<gufunc_stage_input>& in) {
  gufunc_stage_plan sp;
  sp.ops.resize(p.ops.size());
  if (p.instances <= 0 || in.size() + 1 != p.ops.size()) return sp;
  index_t per_instance = 0;  // shared bytes per instance before bank padding
  bool any = false;
  for (std::size_t k = 0; k < in.size(); ++k) {
    if (!in[k].is_array) continue;
    const auto& o = p.ops[k + 1];
    const std::size_t es = in[k].elem_size;
    if ((es != 4 && es != 8 && es != 16) || !dense_core(o) || in[k].address % es != 0) return sp;
    any = true;
    per_instance += (o.core_size * static_cast<index_t>(es) + 15) / 16 * 16;
  }
  if (!any || per_instance == 0 || 8 * per_instance > gufunc_stage_max_bytes) return sp;
  int per_block = gufunc_stage_block;
  while (per_block > 8 && static_cast<index_t>(per_block) * per_instance > gufunc_stage_target_bytes) per_block /= 2;
  sp.per_block = per_block;
  sp.team = gufunc_stage_block / per_block;
  index_t offset = 0;
  for (std::size_t k = 0; k < in.size(); ++k) {
    if (!in[k].is_array) continue;
    const auto& o = p.ops[k + 1];
    const auto es = static_cast<index_t>(in[k].elem_size);
    auto& so = sp.ops[k + 1];
    so.staged = true;
    // 16-byte copies when the base and every loop step keep instances 16-byte aligned.
    so.vec16 = in[k].address % 16 == 0;
    for (int d = 0; d < p.loop_rank; ++d) {
      if (p.loop_extents[d] > 1 && (o.loop_strides[d] * es) % 16 != 0) so.vec16 = false;
    }
    // Pitch in 4-byte words: 16-byte multiple, and congruent (mod 32 banks) to the words a team
    // reads per step, so that the teams of one warp read disjoint banks.
    const index_t words = (o.core_size * es + 15) / 16 * 4;
    index_t want = (static_cast<index_t>(sp.team) * (es > 4 ? es : 4) / 4 + 3) / 4 * 4;
    want %= 32;
    const index_t pad = ((want - words % 32) % 32 + 32) % 32;
    const index_t pitch_words = words + pad;
    so.pitch = pitch_words * 4 / es;
    so.offset = offset;
    offset += pitch_words * 4 * per_block;
  }
  if (offset > gufunc_stage_max_bytes) return gufunc_stage_plan{false, 0, 0, 0, std::vector<gufunc_stage_operand>(p.ops.size())};
  sp.smem_bytes = offset;
  sp.ok = true;
  return sp;
}

/// How many shared slots per team the staged kernel uses (gufunc_staged_kernel's Buffers). 1: a
/// team loads an instance, waits, computes (the other resident teams keep the SM's loads in
/// flight). 2: a team issues its next instance's copies before it computes the current one.
/// `requested` is gufunc_spec::stage_buffers (0 automatic, 1 or 2 forced; anything else throws);
/// two are used only while 2 * sp.smem_bytes fits `smem_optin` (the device's per-block opt-in
/// maximum), otherwise one. Automatic picks 1, which measured faster than two (docs/map.md, "The
/// staged path").
inline int gufunc_stage_buffers(const gufunc_stage_plan& sp, int requested, index_t smem_optin) {
  if (requested < 0 || requested > 2) {
    throw logic_error("gufunc_spec::stage_buffers: " + std::to_string(requested) +
                      " must be 0 (automatic), 1 (single-buffered tiles) or 2 (double-buffered tiles)");
  }
  if (!sp.ok) return 0;
  if (requested != 2) return 1;
  return 2 * sp.smem_bytes <= smem_optin ? 2 : 1;
}

}  // namespace spillway::detail
