// spillway/map/shape.hpp — NumPy broadcasting and loop planning (pure host logic).
//
// A map's loop runs over the broadcast shape; each operand walks it with its own strides, 0 along
// the dimensions it broadcasts. Before launching, the loop is collapsed: size-1 dimensions are
// dropped and neighbouring dimensions that every operand walks as one are merged, so a contiguous
// (100,4000,5) ⊙ (4000,5) becomes a 2-d (100, 20000) loop and a contiguous a*b a 1-d one.
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/map/config.hpp>
#include <spillway/map/ndview.hpp>

#include <cstddef>
#include <limits>
#include <string>
#include <vector>

namespace spillway {

/// The NumPy broadcast of `shapes`: shapes are right-aligned, a missing leading dimension counts
/// as 1, and along each dimension all sizes must be equal or 1 (a 0 meets only 0 or 1). Throws
/// logic_error naming `who`, the argument, the dimension and both sizes when they do not.
inline std::vector<index_t> broadcast_shapes(const std::vector<std::vector<index_t>>& shapes,
                                             const std::string& who = "broadcast_shapes",
                                             const std::vector<std::string>* names = nullptr) {
  auto name = [&](std::size_t a) {
    return names != nullptr && a < names->size() ? (*names)[a] : "argument " + std::to_string(a);
  };
  std::size_t rank = 0;
  for (const auto& s : shapes) rank = s.size() > rank ? s.size() : rank;
  if (rank > static_cast<std::size_t>(max_rank)) {
    throw logic_error(who + ": broadcast rank " + std::to_string(rank) + " exceeds max_rank " +
                      std::to_string(max_rank));
  }
  std::vector<index_t> out(rank, 1);
  std::vector<int> owner(rank, -1);  // which argument set each dimension (for the message)
  for (std::size_t a = 0; a < shapes.size(); ++a) {
    const auto& s = shapes[a];
    for (std::size_t k = 0; k < s.size(); ++k) {
      const std::size_t d = rank - s.size() + k;
      const index_t e = s[k];
      if (e < 0) {
        throw logic_error(who + ": " + name(a) + " has negative extent " + std::to_string(e) +
                          " in dimension " + std::to_string(k));
      }
      if (e == 1) continue;
      if (out[d] == 1) {
        out[d] = e;
        owner[d] = static_cast<int>(a);
      } else if (out[d] != e) {
        const auto& o = shapes[static_cast<std::size_t>(owner[d])];
        throw logic_error(who + ": " + name(a) + " with shape " + detail::shape_string(s) +
                          " cannot be broadcast with " + name(static_cast<std::size_t>(owner[d])) + " with shape " +
                          detail::shape_string(o) + ": dimension " + std::to_string(static_cast<long>(d) -
                                                                                    static_cast<long>(rank)) +
                          " (from the right) has size " + std::to_string(e) + " vs " + std::to_string(out[d]));
      }
    }
  }
  // The element count must fit in index_t (an absurd shape is refused here, not by an overflow
  // in some later product).
  index_t count = 1;
  for (std::size_t d = 0; d < rank; ++d) {
    if (out[d] == 0) return out;
  }
  for (std::size_t d = 0; d < rank; ++d) {
    if (count > std::numeric_limits<index_t>::max() / out[d]) {
      throw logic_error(who + ": the broadcast shape " + detail::shape_string(out) + " has more than 2^63 elements");
    }
    count *= out[d];
  }
  return out;
}

/// The strides with which an operand of `shape`/`strides` walks the broadcast shape `out`
/// (0 along missing and size-1 dimensions). The shape must broadcast to `out`.
inline std::vector<index_t> broadcast_strides(const std::vector<index_t>& shape, const std::vector<index_t>& strides,
                                              const std::vector<index_t>& out) {
  std::vector<index_t> r(out.size(), 0);
  const std::size_t off = out.size() - shape.size();
  for (std::size_t k = 0; k < shape.size(); ++k) r[off + k] = shape[k] == 1 ? 0 : strides[k];
  return r;
}

/// A loop over `extents` with one stride vector per operand (operand 0 is the output by convention).
struct loop_plan {
  std::vector<index_t> extents;
  std::vector<std::vector<index_t>> strides;

  [[nodiscard]] int rank() const noexcept { return static_cast<int>(extents.size()); }
  [[nodiscard]] index_t size() const noexcept {
    index_t n = 1;
    for (index_t e : extents) n *= e;
    return n;
  }
};

/// Drops size-1 dimensions and merges dimension d into d+1 wherever every operand has
/// stride[d] == stride[d+1] * extent[d+1]. Element order (row-major over the loop) is unchanged.
/// A loop with a 0 extent collapses to a single 0 dimension.
inline loop_plan collapse(const loop_plan& in) {
  loop_plan out;
  out.strides.resize(in.strides.size());
  for (index_t e : in.extents) {
    if (e == 0) {
      out.extents = {0};
      for (auto& s : out.strides) s = {0};
      return out;
    }
  }
  for (int d = 0; d < in.rank(); ++d) {
    const index_t e = in.extents[static_cast<std::size_t>(d)];
    if (e == 1) continue;
    if (!out.extents.empty()) {
      const index_t inner_e = out.extents.back();
      bool mergeable = true;
      for (std::size_t o = 0; o < in.strides.size() && mergeable; ++o) {
        // previous (outer) dim in out is merged with the new inner dim when outer stride = inner stride * inner extent
        mergeable = out.strides[o].back() == in.strides[o][static_cast<std::size_t>(d)] * e;
      }
      if (mergeable) {
        out.extents.back() = inner_e * e;
        for (std::size_t o = 0; o < in.strides.size(); ++o) out.strides[o].back() = in.strides[o][static_cast<std::size_t>(d)];
        continue;
      }
    }
    out.extents.push_back(e);
    for (std::size_t o = 0; o < in.strides.size(); ++o) out.strides[o].push_back(in.strides[o][static_cast<std::size_t>(d)]);
  }
  return out;
}

/// Normalizes reduction axes (negative counts from the end) and checks them: in range, no repeats.
inline std::vector<bool> reduction_mask(const std::vector<int>& axes, int rank, const std::string& who) {
  std::vector<bool> m(static_cast<std::size_t>(rank), false);
  for (std::size_t k = 0; k < axes.size(); ++k) {
    int a = axes[k];
    if (a < -rank || a >= rank) {
      throw logic_error(who + ": axis " + std::to_string(a) + " (axes[" + std::to_string(k) +
                        "]) is out of range for an input of rank " + std::to_string(rank));
    }
    if (a < 0) a += rank;
    if (m[static_cast<std::size_t>(a)]) {
      throw logic_error(who + ": axis " + std::to_string(axes[k]) + " is repeated in axes");
    }
    m[static_cast<std::size_t>(a)] = true;
  }
  return m;
}

}  // namespace spillway
