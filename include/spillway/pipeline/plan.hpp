// spillway/pipeline/plan.hpp — the chunk plan of an out-of-core job (pure host logic).
//
// A job streams an extent of "units" (elements, rows, row panels…) through a ring of reusable
// device slots. Each slot holds one device buffer per input/output, sized for one chunk. The plan
// picks the chunk size: as large as the memory budget allows for `slots` slots at once, capped by
// `max_slot_bytes` (smaller chunks shorten the pipeline's fill and drain), rounded down to
// `granularity` units, each buffer's start aligned to `alignment` bytes.
#pragma once

#include <spillway/core/error.hpp>

#include <cstddef>
#include <limits>
#include <string>
#include <vector>

namespace spillway {

/// One chunk of a plan: units [begin, begin + count).
struct chunk {
  std::size_t index = 0;
  std::size_t begin = 0;
  std::size_t count = 0;
  [[nodiscard]] std::size_t end() const noexcept { return begin + count; }
  friend bool operator==(const chunk& a, const chunk& b) noexcept {
    return a.index == b.index && a.begin == b.begin && a.count == b.count;
  }
};

/// What a plan is made from.
struct plan_request {
  std::size_t extent = 0;                   ///< units to process
  std::vector<std::size_t> bytes_per_unit;  ///< device bytes per unit, one entry per input/output buffer
  std::size_t budget_bytes = 0;             ///< device memory the job may use (per device)
  std::size_t slots = 3;                    ///< chunks in flight at once (the ring's size), ≥ 1
  std::size_t granularity = 1;              ///< chunk sizes are multiples of this (except the last)
  std::size_t alignment = 256;              ///< each buffer of a slot starts at a multiple of this
  std::size_t fixed_slot_bytes = 0;         ///< extra scratch per slot, independent of the chunk size
  std::size_t max_slot_bytes = 0;           ///< optional cap on one slot's bytes (0: no cap)
};

namespace detail {

inline std::size_t align_up(std::size_t v, std::size_t a, const char* who) {
  const std::size_t r = v % a;
  if (r == 0) return v;
  if (v > std::numeric_limits<std::size_t>::max() - (a - r)) {
    throw logic_error(std::string(who) + ": size " + std::to_string(v) + " overflows when aligned");
  }
  return v + (a - r);
}

/// Device buffers of a task slot start on this boundary: run_tasks allocates a slot as one block,
/// each buffer at an offset that is a multiple of it.
inline constexpr std::size_t slot_buffer_alignment = 256;

/// The device bytes of a slot whose buffers have `sizes` bytes (each rounded up to
/// slot_buffer_alignment), with each buffer's offset appended to `offsets` where given: what
/// run_tasks allocates, and what every planner counts (one rule).
inline std::size_t slot_device_bytes(const std::vector<std::size_t>& sizes, std::vector<std::size_t>* offsets = nullptr) {
  std::size_t total = 0;
  for (std::size_t b : sizes) {
    if (offsets != nullptr) offsets->push_back(total);
    total = align_up(total + b, slot_buffer_alignment, "slot_device_bytes");
  }
  return total;
}

inline bool mul_overflows(std::size_t a, std::size_t b) noexcept {
  return a != 0 && b > std::numeric_limits<std::size_t>::max() / a;
}

}  // namespace detail

/// The chunk list of a job and the sizes of its slots.
class chunk_plan {
 public:
  chunk_plan() = default;
  chunk_plan(std::size_t extent, std::size_t chunk_units, std::size_t slots,
             std::vector<std::size_t> buffer_offsets, std::vector<std::size_t> buffer_bytes,
             std::size_t slot_bytes)
      : extent_(extent),
        chunk_units_(chunk_units),
        slots_(slots),
        buffer_offsets_(std::move(buffer_offsets)),
        buffer_bytes_(std::move(buffer_bytes)),
        slot_bytes_(slot_bytes) {}

  [[nodiscard]] std::size_t extent() const noexcept { return extent_; }
  /// Units per chunk (every chunk but possibly the last).
  [[nodiscard]] std::size_t chunk_units() const noexcept { return chunk_units_; }
  [[nodiscard]] std::size_t chunk_count() const noexcept {
    return chunk_units_ == 0 ? 0 : extent_ / chunk_units_ + (extent_ % chunk_units_ != 0 ? 1 : 0);
  }
  /// Chunk `i` (0 ≤ i < chunk_count()).
  [[nodiscard]] chunk at(std::size_t i) const {
    if (i >= chunk_count()) {
      throw logic_error("chunk_plan::at: chunk index " + std::to_string(i) + " out of range (" +
                        std::to_string(chunk_count()) + " chunks)");
    }
    const std::size_t b = i * chunk_units_;
    const std::size_t left = extent_ - b;
    return chunk{i, b, left < chunk_units_ ? left : chunk_units_};
  }
  [[nodiscard]] std::vector<chunk> chunks() const {
    std::vector<chunk> v;
    v.reserve(chunk_count());
    for (std::size_t i = 0; i < chunk_count(); ++i) v.push_back(at(i));
    return v;
  }
  /// Slots worth allocating: min(requested slots, chunk_count()).
  [[nodiscard]] std::size_t slots() const noexcept { return slots_; }
  /// Byte offset of buffer `k` inside a slot, and its size (for a full chunk).
  [[nodiscard]] const std::vector<std::size_t>& buffer_offsets() const noexcept { return buffer_offsets_; }
  [[nodiscard]] const std::vector<std::size_t>& buffer_bytes() const noexcept { return buffer_bytes_; }
  /// Bytes of one slot (all its buffers, aligned, plus the fixed scratch).
  [[nodiscard]] std::size_t slot_bytes() const noexcept { return slot_bytes_; }
  /// Device bytes the job allocates per device: slots() × slot_bytes().
  [[nodiscard]] std::size_t device_bytes() const noexcept { return slots_ * slot_bytes_; }

 private:
  std::size_t extent_ = 0;
  std::size_t chunk_units_ = 0;
  std::size_t slots_ = 0;
  std::vector<std::size_t> buffer_offsets_;
  std::vector<std::size_t> buffer_bytes_;
  std::size_t slot_bytes_ = 0;
};

namespace detail {

/// Bytes of one slot whose chunks hold `units` units, with buffer offsets (checked arithmetic).
inline std::size_t slot_layout(const plan_request& r, std::size_t units, std::vector<std::size_t>* offsets,
                               std::vector<std::size_t>* sizes, bool* overflow) {
  std::size_t total = 0;
  *overflow = false;
  const std::size_t max = std::numeric_limits<std::size_t>::max();
  for (std::size_t bpu : r.bytes_per_unit) {
    if (mul_overflows(units, bpu)) {
      *overflow = true;
      return max;
    }
    const std::size_t b = units * bpu;
    const std::size_t start = total;
    const std::size_t padded = b % r.alignment == 0 ? b : b + (r.alignment - b % r.alignment);
    if (padded < b || start > max - padded) {
      *overflow = true;
      return max;
    }
    if (offsets != nullptr) offsets->push_back(start);
    if (sizes != nullptr) sizes->push_back(b);
    total = start + padded;
  }
  const std::size_t fixed = r.fixed_slot_bytes % r.alignment == 0
                                ? r.fixed_slot_bytes
                                : r.fixed_slot_bytes + (r.alignment - r.fixed_slot_bytes % r.alignment);
  if (fixed < r.fixed_slot_bytes || total > max - fixed) {
    *overflow = true;
    return max;
  }
  return total + fixed;
}

}  // namespace detail

/// Plans the chunks of a job. Throws logic_error for a malformed request (naming the field and its
/// value) and for a budget too small for even one chunk of `granularity` units in every slot (the
/// message states the minimum budget needed).
inline chunk_plan make_chunk_plan(const plan_request& r) {
  auto fail = [](const std::string& m) { throw logic_error("make_chunk_plan: " + m); };
  if (r.bytes_per_unit.empty()) fail("bytes_per_unit is empty (need one entry per input/output buffer)");
  for (std::size_t k = 0; k < r.bytes_per_unit.size(); ++k) {
    if (r.bytes_per_unit[k] == 0) fail("bytes_per_unit[" + std::to_string(k) + "] is 0");
  }
  if (r.slots == 0) fail("slots must be at least 1, got 0");
  if (r.granularity == 0) fail("granularity must be at least 1, got 0");
  if (r.alignment == 0 || (r.alignment & (r.alignment - 1)) != 0) {
    fail("alignment must be a power of two, got " + std::to_string(r.alignment));
  }
  if (r.budget_bytes == 0) fail("budget_bytes must be > 0, got 0");

  if (r.extent == 0) return chunk_plan(0, 0, 0, {}, {}, 0);

  // The smallest chunk worth planning: one granule, or the whole extent if that is smaller.
  const std::size_t min_units = r.extent < r.granularity ? r.extent : r.granularity;
  bool overflow = false;
  const std::size_t min_slot = detail::slot_layout(r, min_units, nullptr, nullptr, &overflow);
  if (overflow) fail("one chunk of " + std::to_string(min_units) + " units overflows size_t");
  // Slots are never more than the chunks there are; the minimum is for the slots actually needed.
  const std::size_t max_chunks = r.extent / min_units + (r.extent % min_units != 0 ? 1 : 0);
  const std::size_t need_slots = r.slots < max_chunks ? r.slots : max_chunks;
  if (detail::mul_overflows(need_slots, min_slot) || need_slots * min_slot > r.budget_bytes) {
    const bool ovf = detail::mul_overflows(need_slots, min_slot);
    throw logic_error("make_chunk_plan: budget_bytes " + std::to_string(r.budget_bytes) +
                      " is too small for one chunk: " + std::to_string(need_slots) + " slot(s) of " +
                      std::to_string(min_units) + " unit(s) need at least " +
                      (ovf ? std::string("more than SIZE_MAX") : std::to_string(need_slots * min_slot)) +
                      " bytes (the minimum budget)");
  }

  // Largest multiple of the granularity whose slot fits budget / slots (and the optional cap).
  std::size_t per_slot = r.budget_bytes / need_slots;
  if (r.max_slot_bytes != 0 && r.max_slot_bytes < per_slot) per_slot = r.max_slot_bytes;
  std::size_t sum_bpu = 0;
  for (std::size_t b : r.bytes_per_unit) sum_bpu += b;  // each ≤ budget after the check above
  auto fits = [&](std::size_t units) {
    bool o = false;
    const std::size_t s = detail::slot_layout(r, units, nullptr, nullptr, &o);
    return !o && s <= per_slot;
  };
  std::size_t units;
  if (!fits(min_units)) {
    units = min_units;  // the cap is below one granule: a cap never makes a valid budget fail
  } else {
    // Upper estimate ignoring padding, then binary search on granules.
    std::size_t hi_granules = per_slot / sum_bpu / r.granularity + 1;
    const std::size_t extent_granules = r.extent / r.granularity + (r.extent % r.granularity != 0 ? 1 : 0);
    if (hi_granules > extent_granules) hi_granules = extent_granules;
    std::size_t lo = 1;  // fits
    std::size_t hi = hi_granules;
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo + 1) / 2;
      if (fits(mid * r.granularity)) lo = mid; else hi = mid - 1;
    }
    units = lo * r.granularity;
    if (units > r.extent) units = r.extent;
  }
  std::vector<std::size_t> offsets, sizes;
  const std::size_t slot_bytes = detail::slot_layout(r, units, &offsets, &sizes, &overflow);
  const std::size_t chunks = r.extent / units + (r.extent % units != 0 ? 1 : 0);
  const std::size_t slots = r.slots < chunks ? r.slots : chunks;
  return chunk_plan(r.extent, units, slots, std::move(offsets), std::move(sizes), slot_bytes);
}

}  // namespace spillway
