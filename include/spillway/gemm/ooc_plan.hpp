// spillway/gemm/ooc_plan.hpp — the plan of an out-of-core GEMM (pure host logic, no CUDA): which
// operand stays resident, the C block shape, the panel caches, the order in which blocks are
// visited, and the bytes the job will move with the copy-time floor they imply.
//
// The executed frame. The job always keeps panels of its "A" resident and streams its "B": when
// keeping B resident moves fewer bytes, the plan is `transposed` and the job runs Cᵀ = Bᵀ·Aᵀ (views
// only, nothing moves). In that frame C is m x n, A's row panels are bm x k and B's column panels
// are k x bn; a C block {i, j, w} is rows [i·bm, …) x the columns of B panels [j, j + w) (w = 1
// unless C's lines are to be longer: ooc_plan_request::c_min_line_bytes, ooc_plan::group).
//
// Device memory per device: `a_slots` cached A panels + `b_slots` cached B panels (each slot of
// a cache holds one panel; panel p goes to slot p mod slots, guarded by events) + per in-flight
// task (`slots`) one C block, and where needed an accumulator block (k split and C narrower than the
// accumulator) and the split-K workspace; plus, once per device, two raw panel buffers for each
// operand that is MN-major on a tensor-core path (`stage_bytes`): such a panel lands there as the
// host holds it and is transposed once into its cache slot K-major, so the GEMMs stage nothing.
//
// Bytes. A is read once per device when its row panels fit the A cache (a_slots ≥ the device's row
// panels); otherwise in bands of a_slots panels, and B once per band, less the B panels still
// cached when a band turns (the column order is a serpentine). C is written once, and read once
// when β ≠ 0. k is split into accumulating chunks only when no plan with full-k panels fits.
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/core/launch.hpp>
#include <spillway/gemm/types.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

namespace spillway::gemm {

/// Host↔device copy rates (bytes per second) the floor is computed at. The defaults are the lent
/// H200's pinned rates (one direction, and both at once); a benchmark passes measured ones.
struct copy_rates {
  double h2d = 55.4e9;
  double d2h = 55.4e9;
  double both = 101.0e9;
  /// Device→host rate of C blocks copied as 2-D copies with lines shorter than ooc_long_line while
  /// GEMMs run (0: d2h, no penalty). The default is the lent H200's for 8 and 16 KiB lines beside
  /// bf16 GEMMs (docs/gemm.md, "ooc_plan.hpp").
  /// Only the order's bound (ramp_seconds) uses it, and through it the choice of C block widths.
  double d2h_short = 31.0e9;
  /// Rate at which host threads copy a staged C block (1-D out of the device into pinned memory)
  /// into C (0: not priced). Only the order's bound uses it.
  double scatter = 0;
  /// Seconds to move `h2d` and `d2h` bytes: each direction at its rate, both sharing `both`.
  [[nodiscard]] double seconds(double h2d_bytes, double d2h_bytes) const {
    return std::max({h2d_bytes / h2d, d2h_bytes / d2h, (h2d_bytes + d2h_bytes) / both});
  }
};

/// What a product's in-core GEMM computes in (ooc_compute_estimate): `fp16` stands for half and
/// bf16, `fp8` for e4m3 and e5m2, `complex_fp32` counts complex multiply-adds.
enum class ooc_arith { fp32, complex_fp32, fp64, tf32, fp16, int8, fp8 };
/// The rate class of an element type's arithmetic (gemm/types.hpp), FP32 through TF32 when `tf32`.
inline ooc_arith ooc_arith_of(element_arith a, bool tf32) {
  switch (a) {
    case element_arith::fp32: return tf32 ? ooc_arith::tf32 : ooc_arith::fp32;
    case element_arith::fp64: return ooc_arith::fp64;
    case element_arith::fp16: return ooc_arith::fp16;
    case element_arith::int8: return ooc_arith::int8;
    case element_arith::fp8:
      return ooc_arith::fp8;
    case element_arith::complex_fp32: return ooc_arith::complex_fp32;
  }
  return ooc_arith::fp32;
}
/// The kernel family that computes it (gemm_path without `automatic`).
enum class ooc_unit { simt, mma_sync, wgmma };

/// Multiply-adds per SM and clock that spillway's in-core GEMM sustains on large products.
/// Compute capability 9.0: measured on the lent H200, except SIMT double (docs/gemm.md,
/// "ooc_plan.hpp"). Elsewhere the cc 9.0 mma_sync and SIMT figures scaled by the width of the units
/// (not measured): cc 8.0 half the FP32 and FP64 lanes and DMMA; other cc 8.x and 12.x half the
/// tensor rate and 1/32 of the FP64 one; 10.x as 9.0 (no wgmma there). 0 where the unit cannot
/// compute the arithmetic.
inline double ooc_macs_per_sm_clock(ooc_arith a, ooc_unit u, int cc) {
  if (u == ooc_unit::wgmma) {
    if (cc != 90) return 0;
    switch (a) {
      case ooc_arith::fp16: return 1300;
      case ooc_arith::tf32: return 630;
      case ooc_arith::int8: return 2430;
      case ooc_arith::fp8:
        return 2430;  // FP8 and int8 share the tensor-core peak on Hopper
      default: return 0;
    }
  }
  const bool ampere = cc == 80;
  const bool narrow = (cc >= 81 && cc < 90) || cc >= 120;  // consumer-class tensor and FP64 units
  if (u == ooc_unit::mma_sync) {
    if (cc < 80) return 0;
    const double tensor = narrow ? 0.5 : 1.0;
    switch (a) {
      case ooc_arith::fp16: return 770 * tensor;
      case ooc_arith::tf32: return 400 * tensor;
      case ooc_arith::int8: return 1600 * tensor;
      case ooc_arith::fp64: return ampere ? 45 : narrow ? 90.0 / 32 : 90;
      default: return 0;
    }
  }
  switch (a) {
    case ooc_arith::fp32: return ampere ? 46 : 92;
    case ooc_arith::complex_fp32: return ampere ? 11.5 : 23;
    case ooc_arith::fp64: return ampere ? 22.5 : narrow ? 45.0 / 32 : 45;
    default: return 0;
  }
}

/// What the estimate needs of a device.
struct ooc_device_shape {
  int cc = 0;             ///< compute capability, major·10 + minor
  int sms = 0;            ///< multiprocessors
  double clock_hz = 0;    ///< the SM clock's peak
};

/// An estimate of the in-core time of an m x n x k product on one device (seconds; 0 where the
/// device or unit gives no rate): the multiply-adds at ooc_macs_per_sm_clock x SMs x clock. The
/// out-of-core GEMM plans with it when ooc_options::compute_seconds is not given.
inline double ooc_compute_estimate(index_t m, index_t n, index_t k, ooc_arith a, ooc_unit u,
                                   const ooc_device_shape& d) {
  const double rate = ooc_macs_per_sm_clock(a, u, d.cc) * d.sms * d.clock_hz;
  if (!(rate > 0) || m <= 0 || n <= 0 || k <= 0) return 0;
  return static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) / rate;
}

/// How C blocks leave the device when C is page-locked (pageable C is always staged).
enum class ooc_copy_out {
  /// By DMA straight into C: a 2-D copy, one line per row of the block (column for column-major C).
  direct,
  /// In detail::ooc_scatter_pieces pieces of whole lines, each 1-D (the full D2H rate whatever the
  /// block's lines in C) into a pinned buffer of its slot and written into C by one of
  /// `ooc_options::scatter_threads` host threads of the job's own as soon as it lands; the slot's
  /// stream waits for them in a host function, so the slot is free again once the block is in C.
  /// The scheduler's thread copies nothing. The plan prices the host copy at copy_rates::scatter
  /// and asks for no wide C blocks (docs/gemm.md, "Out of core").
  staged,
  /// `staged` when the plan's bound (ooc_plan::ramp_seconds, at ooc_options::compute_seconds or
  /// its estimate) is lower by at least 1% (detail::ooc_staged_margin) with staged
  /// copies out (the host copy priced at rates.scatter, 0: not priced) than with direct ones
  /// (short lines priced at rates.d2h_short); else `direct`. The margin: the host copies' memory
  /// traffic slows the copies in, which the bound leaves out (docs/gemm.md, "ooc_plan.hpp"). Never
  /// when the plan transposes panels on load (an MN-major operand on a tensor-core path): measured
  /// slower there (docs/gemm.md, "Layouts out of core").
  automatic,
};

/// What an out-of-core GEMM plan is made from (sizes in the caller's frame).
struct ooc_plan_request {
  index_t m = 0, n = 0, k = 0;
  std::size_t in_bytes = 4;      ///< sizeof an A/B element
  std::size_t out_bytes = 4;     ///< sizeof a C element
  std::size_t acc_bytes = 4;     ///< sizeof the accumulator
  bool c_is_acc = true;          ///< C's type is the accumulator type (k chunks accumulate in C itself)
  bool read_c = false;           ///< β ≠ 0: C blocks are copied in
  std::size_t budget_bytes = 0;  ///< device memory per device
  std::size_t slots = 4;         ///< tasks in flight per device (C blocks)
  std::size_t devices = 1;
  /// A is MN-major and the path is a tensor-core one: each A panel lands in one of two raw buffers
  /// of the device (ping-pong) and is transposed once into its cache slot (K-major). Fixed memory
  /// per device, 2 x the panel; nothing per slot.
  bool stage_a = false;
  bool stage_b = false;
  index_t split_k = 1;    ///< forced split-K slices of each block's GEMM (workspace per slot)
  index_t max_block = 0;  ///< cap on the C block's sides (0: none); tests force many blocks with it
  bool allow_transpose = true;
  copy_rates rates{};
  /// The in-core time of the whole product on one device (an estimate; 0: unknown). With it the
  /// plan states `ramp_seconds`, the bound its visiting order puts on the job.
  double compute_seconds = 0;
  /// C's layout in the caller's frame (row-major: its lines run along columns).
  bool c_row_major = true;
  /// Shortest line (contiguous run in host C) a C block should copy out, in bytes (0: any). When
  /// the planned block's lines are shorter and C's lines run along the executed frame's columns,
  /// a C block spans `group` neighbouring B panels (bm x group·bn), computed as one GEMM per B
  /// panel, each waiting only for its own panel: the panels, the caches and the bytes moved stay
  /// those of the bm x bn plan, only the copies out get longer lines (and fewer).
  std::size_t c_min_line_bytes = 0;
  /// C blocks leave the device whole (1-D, at the full D2H rate) into pinned buffers, and host
  /// threads copy them into C (rates.scatter): no short-line penalty, so no C blocks of several
  /// B panels are weighed unless c_min_line_bytes asks for them.
  bool c_staged = false;
  /// Largest piece in which an MN-major panel lands before its transpose (0:
  /// detail::ooc_raw_piece_bytes); tests force many pieces with it.
  std::size_t raw_piece_bytes = 0;
  /// A budget below every plan: true, make_ooc_plan refuses it (logic_error stating the minimum);
  /// false (gemm_out_of_core), it returns the smallest plan, whose device_bytes exceed the budget,
  /// and the job's scheduler refuses it: run_tasks, the job's one budget check, before any work.
  bool refuse_over_budget = true;
};

/// One C block in the executed frame: row panel i, columns of the B panels [j, j + w).
struct ooc_block {
  index_t i = 0;
  index_t j = 0;
  index_t w = 1;
  friend bool operator==(const ooc_block& a, const ooc_block& b) noexcept {
    return a.i == b.i && a.j == b.j && a.w == b.w;
  }
};

/// Lines of C at least this long leave the device at the full D2H rate while GEMMs run (H200).
inline constexpr std::size_t ooc_long_line = std::size_t{64} << 10;

struct ooc_plan {
  bool transposed = false;         ///< executed as Cᵀ = Bᵀ·Aᵀ (B's panels resident)
  index_t m = 0, n = 0, k = 0;     ///< the executed frame
  index_t bm = 0, bn = 0, kc = 0;  ///< bn: a B panel's width (a C block is bn·group wide)
  index_t row_panels = 0, col_panels = 0, k_chunks = 0;
  index_t group = 1;       ///< B panels of the widest C block (see ooc_plan_request::c_min_line_bytes)
  index_t col_blocks = 0;  ///< ceil(col_panels / group)
  /// Row panels [0, narrow_rows) of the order's start run blocks of one B panel (the square start),
  /// the rest blocks of `group` panels (0 when every block has `group` panels).
  index_t narrow_rows = 0;
  bool c_row_lines = true;  ///< C's lines run along the executed frame's columns (row-major there)
  bool c_staged = false;    ///< C blocks leave whole and host threads copy them into C (see the request)
  std::size_t a_slots = 0, b_slots = 0, slots = 0;
  std::size_t a_panel_bytes = 0;  ///< one A cache slot (bm x kc, leading dimension padded to 16 elements)
  std::size_t b_panel_bytes = 0;
  std::size_t c_block_bytes = 0;     ///< one slot's C block (bm x bn·group)
  std::size_t slot_extra_bytes = 0;  ///< per slot beyond the C block: acc_block_bytes + split_k_bytes
  /// Per slot: the accumulator block where k is chunked and C is narrower than the accumulator.
  std::size_t acc_block_bytes = 0;
  /// Per slot: a forced split-K's workspace (split_k slices of a bm x bn·group accumulator block),
  /// lent to each of the block's GEMMs, so that none allocates inside a task.
  std::size_t split_k_bytes = 0;
  /// Executed frame: A's / B's panels land MN-major in raw buffers and are transposed into the cache.
  bool stage_a = false, stage_b = false;
  std::size_t raw_a_bytes = 0, raw_b_bytes = 0;  ///< one raw buffer (a piece of a panel: ooc_raw_lines)
  index_t raw_a_lines = 0, raw_b_lines = 0;       ///< k lines of an MN-major panel per raw piece
  std::size_t stage_bytes = 0;   ///< once per device: the raw buffers (2 x raw_a_bytes, 2 x raw_b_bytes)
  std::size_t device_bytes = 0;  ///< everything above on one device: reserved_bytes() + slots x the slot
  std::size_t devices = 1;
  std::vector<ooc_block> order;              ///< every block once, in visiting order
  std::vector<std::size_t> device_first;     ///< device d visits order[device_first[d], device_first[d+1])
  std::size_t h2d_bytes = 0, d2h_bytes = 0;  ///< what this plan moves (all devices)
  std::size_t min_h2d_bytes = 0, min_d2h_bytes = 0;  ///< what any plan must move: A, B (and C) in, C out
  double copy_seconds = 0;   ///< this plan's bytes at the rates (per device when devices > 1)
  double floor_seconds = 0;  ///< the independent floor: the minimum bytes at the rates
  /// The bound this plan's order puts on the job when the request stated compute_seconds (else 0):
  /// panels copied back to back at the H2D rate in the order the blocks first need them, each block
  /// computed once its panels are in and the block before it is done (at the in-core rate), its C
  /// block copied out at the D2H rate; at least copy_seconds. A block runs only once both its
  /// panels are in, so while the first panels arrive the GPU waits: after a fraction x of A and B
  /// has arrived at most x² of the work can run (the square order reaches that), and the job takes
  /// at least F·max over x of [x + (G/F)(1 − x²)] = G + F²/(4G) for G ≥ F/2 (F the copy-in time, G
  /// the compute time). Copy contention between the two directions is not in it (the `both` rate
  /// bounds copy_seconds only).
  double ramp_seconds = 0;
  [[nodiscard]] std::size_t tasks() const noexcept { return order.size(); }
  /// What the job allocates once per device outside its task slots (detail::ooc_job::setup, which
  /// allocates exactly this): the two panel caches, then the raw buffers. gemm_out_of_core passes
  /// it to run_tasks as task_job_options::reserved_bytes.
  [[nodiscard]] std::size_t reserved_bytes() const noexcept {
    return a_slots * a_panel_bytes + b_slots * b_panel_bytes + stage_bytes;
  }
  /// The device buffers of one task slot (task_job_options::device_buffer_bytes): the C block, then
  /// the accumulator block (acc_buffer()) and the split-K workspace (split_k_buffer()) where planned.
  /// Each is a multiple of 256 bytes, so run_tasks's slot (pipeline's slot_device_bytes) is their sum.
  [[nodiscard]] std::vector<std::size_t> slot_buffer_bytes() const {
    std::vector<std::size_t> v{c_block_bytes};
    if (acc_block_bytes > 0) v.push_back(acc_block_bytes);
    if (split_k_bytes > 0) v.push_back(split_k_bytes);
    return v;
  }
  /// Index of the accumulator block / split-K workspace in slot_buffer_bytes() (0: not planned).
  [[nodiscard]] std::size_t acc_buffer() const noexcept { return acc_block_bytes > 0 ? 1 : 0; }
  [[nodiscard]] std::size_t split_k_buffer() const noexcept {
    return split_k_bytes > 0 ? 1 + acc_buffer() : 0;
  }
  /// Rows [r0, r0 + rows) and columns of block b in the executed frame.
  [[nodiscard]] index_t block_rows(const ooc_block& b) const noexcept { return std::min(bm, m - b.i * bm); }
  [[nodiscard]] index_t block_col0(const ooc_block& b) const noexcept { return b.j * bn; }
  [[nodiscard]] index_t block_cols(const ooc_block& b) const noexcept {
    return std::min(bn * b.w, n - block_col0(b));
  }
  /// The B panels block b reads: [first_panel(b), last_panel(b)).
  [[nodiscard]] index_t first_panel(const ooc_block& b) const noexcept { return b.j; }
  [[nodiscard]] index_t last_panel(const ooc_block& b) const noexcept {
    return std::min(col_panels, b.j + b.w);
  }
  [[nodiscard]] index_t panel_cols(index_t j) const noexcept { return std::min(bn, n - j * bn); }
  [[nodiscard]] index_t chunk_k(index_t kk) const noexcept { return std::min(kc, k - kk * kc); }
  [[nodiscard]] std::string describe() const;
};

namespace detail {

/// How much lower (relative) the staged plan's bound must be for ooc_copy_out::automatic to stage.
inline constexpr double ooc_staged_margin = 0.01;

inline constexpr index_t ooc_granule = 16;    ///< panel sides are multiples of this (16 bytes for int8)
inline constexpr index_t ooc_min_side = 128;  ///< the smallest block side / k chunk planned
inline constexpr std::size_t ooc_align = 256;
/// Shortest host line an MN-major panel is planned to be copied in by (see make_ooc_plan): 2-D
/// host→device copies of shorter lines run well under the link's rate, and the job with row-major
/// B ran fastest with 16 KiB lines (docs/gemm.md, "ooc_plan.hpp").
inline constexpr std::size_t ooc_mn_line_bytes = 16384;

inline index_t ooc_ceil(index_t a, index_t b) {
  return b == 0 ? 0 : (a + b - 1) / b;
}
inline index_t ooc_r16(index_t v) {
  return ooc_ceil(v, ooc_granule) * ooc_granule;
}
inline std::size_t ooc_aligned(std::size_t v) {
  return (v + ooc_align - 1) / ooc_align * ooc_align;
}
inline std::size_t ooc_mul(std::size_t a, std::size_t b) {
  if (a != 0 && b > std::numeric_limits<std::size_t>::max() / a)
    return std::numeric_limits<std::size_t>::max();
  return a * b;
}
inline std::size_t ooc_add(std::size_t a, std::size_t b) {
  return a > std::numeric_limits<std::size_t>::max() - b ? std::numeric_limits<std::size_t>::max() : a + b;
}

/// Side candidates for an extent: extent / p for a geometric p, rounded up to the granule, ≥ lo.
inline std::vector<index_t> ooc_sides(index_t extent, index_t lo, index_t cap) {
  std::vector<index_t> v;
  if (extent <= 0) return {0};
  if (cap > 0) lo = std::min(lo, cap);
  for (index_t p = 1;; p = std::max(p + 1, p * 9 / 8)) {
    index_t s = p == 1 ? extent : std::min(extent, ooc_r16(ooc_ceil(extent, p)));
    if (cap > 0 && s > cap) continue;
    if (s < lo) break;
    if (v.empty() || v.back() != s) v.push_back(s);
    if (s <= ooc_granule) break;
  }
  if (v.empty() || v.back() > lo) v.push_back(lo);  // the smallest side searched is always a candidate
  return v;
}

/// The geometry of one candidate (executed frame).
struct ooc_shape {
  index_t m, n, k, bm, bn, kc;
  bool stage_a, stage_b;
};

inline std::size_t ooc_panel_bytes(index_t major, index_t minor, std::size_t elem) {
  return ooc_aligned(ooc_mul(
      ooc_mul(static_cast<std::size_t>(ooc_r16(major)), static_cast<std::size_t>(ooc_r16(minor))), elem));
}

struct ooc_sizes {
  std::size_t pa, pb, cblk, extra, slots;
  std::size_t acc, split;  ///< the parts of `extra`: accumulator block, split-K workspace
  index_t la, lb;      ///< k lines per raw piece of a transposed A / B (0: not transposed)
  std::size_t ra, rb;  ///< one raw buffer of a transposed A / B (0: not transposed)
  std::size_t stage;   ///< per device, not per slot: the raw buffers of the transposed operands
};

/// Raw landing buffers per transposed operand and device: the next piece's copy fills one while
/// the previous piece's transpose reads the other.
inline constexpr std::size_t ooc_raw_buffers = 2;
/// An MN-major panel lands in pieces of whole k lines of at most this many bytes (at least 16
/// lines), each transposed into its place in the cache slot as the next one lands.
inline constexpr std::size_t ooc_raw_piece_bytes = std::size_t{512} << 20;

/// k lines of an MN-major panel per raw piece: lines of `mn` elements (padded to 16) at most
/// ooc_raw_piece_bytes, a multiple of 16 unless the panel's kc lines are fewer.
inline index_t ooc_raw_lines(index_t mn, index_t kc, std::size_t elem, std::size_t cap) {
  if (cap == 0) cap = ooc_raw_piece_bytes;
  const std::size_t line = static_cast<std::size_t>(ooc_r16(mn)) * elem;
  const index_t fit = static_cast<index_t>(cap / std::max<std::size_t>(line, 1)) / 16 * 16;
  return std::min(kc, std::max<index_t>(16, fit));
}
/// One raw buffer: `lines` lines of `mn` elements (padded to 16).
inline std::size_t ooc_raw_bytes(index_t mn, index_t lines, std::size_t elem) {
  return ooc_aligned(ooc_mul(static_cast<std::size_t>(lines), ooc_mul(static_cast<std::size_t>(ooc_r16(mn)), elem)));
}

/// A slot's buffers beyond its C block of `area` elements (k in `kchunks` chunks): the accumulator
/// block where C is narrower than the accumulator and k is chunked; a forced split-K's workspace,
/// split_k accumulator blocks (detail::plan_split_k cuts k into at most split_k slices).
inline void ooc_slot_extras(const ooc_plan_request& r, std::size_t area, index_t kchunks, std::size_t& acc,
                            std::size_t& split) {
  acc = kchunks > 1 && !r.c_is_acc ? ooc_aligned(ooc_mul(area, r.acc_bytes)) : 0;
  split = r.split_k > 1
              ? ooc_aligned(ooc_mul(ooc_mul(area, r.acc_bytes), static_cast<std::size_t>(r.split_k)))
              : 0;
}

inline ooc_sizes ooc_size_of(const ooc_plan_request& r, const ooc_shape& s) {
  ooc_sizes z{};
  z.pa = s.k == 0 ? 0 : ooc_panel_bytes(s.bm, s.kc, r.in_bytes);
  z.pb = s.k == 0 ? 0 : ooc_panel_bytes(s.kc, s.bn, r.in_bytes);
  const std::size_t area = ooc_mul(static_cast<std::size_t>(s.bm), static_cast<std::size_t>(s.bn));
  z.cblk = ooc_aligned(ooc_mul(area, r.out_bytes));
  ooc_slot_extras(r, area, s.k == 0 ? 1 : ooc_ceil(s.k, s.kc), z.acc, z.split);
  z.extra = ooc_add(z.acc, z.split);
  z.la = s.stage_a && s.k > 0 ? ooc_raw_lines(s.bm, s.kc, r.in_bytes, r.raw_piece_bytes) : 0;
  z.lb = s.stage_b && s.k > 0 ? ooc_raw_lines(s.bn, s.kc, r.in_bytes, r.raw_piece_bytes) : 0;
  z.ra = z.la > 0 ? ooc_raw_bytes(s.bm, z.la, r.in_bytes) : 0;
  z.rb = z.lb > 0 ? ooc_raw_bytes(s.bn, z.lb, r.in_bytes) : 0;
  z.stage = ooc_add(ooc_mul(ooc_raw_buffers, z.ra), ooc_mul(ooc_raw_buffers, z.rb));
  const std::size_t tasks =
      ooc_mul(static_cast<std::size_t>(ooc_ceil(s.m, s.bm)), static_cast<std::size_t>(ooc_ceil(s.n, s.bn)));
  z.slots = std::max<std::size_t>(1, std::min(r.slots, tasks));
  return z;
}

/// Row panels [r0, r1) of one device, visited as: a first band that grows as a square of shells
/// (row panel s with the columns before s, then column s down to row s: the data loaded so far
/// yields the most blocks, so compute starts early), then the rest of its rows against those
/// columns, then the remaining columns; later bands run their columns in a serpentine, so the B
/// panels still cached at a turn are reused.
inline void ooc_device_order(index_t r0, index_t r1, index_t ncols, std::size_t a_slots, std::size_t b_slots,
                             std::vector<ooc_block>& out) {
  bool forward = true;
  for (index_t b0 = r0; b0 < r1; b0 += static_cast<index_t>(a_slots)) {
    const index_t b1 = std::min(r1, b0 + static_cast<index_t>(a_slots));
    const index_t rows = b1 - b0;
    if (b0 == r0) {
      const index_t sq = std::min({static_cast<index_t>(b_slots), rows, ncols});
      for (index_t s = 0; s < sq; ++s) {
        for (index_t c = 0; c < s; ++c) out.push_back({b0 + s, c});
        for (index_t r = 0; r <= s; ++r) out.push_back({b0 + r, s});
      }
      for (index_t r = sq; r < rows; ++r)
        for (index_t c = 0; c < sq; ++c) out.push_back({b0 + r, c});
      for (index_t c = sq; c < ncols; ++c)
        for (index_t r = 0; r < rows; ++r) out.push_back({b0 + r, c});
      forward = false;
      continue;
    }
    for (index_t t = 0; t < ncols; ++t) {
      const index_t c = forward ? t : ncols - 1 - t;
      for (index_t r = b0; r < b1; ++r) out.push_back({r, c});
    }
    forward = !forward;
  }
}

/// The first band's start when a C block spans several B panels (group > 1): rows and column
/// blocks are added one at a time, a row when the rows loaded so far span no more elements than the
/// columns (row_w = bm, col_w = bn·group), so that the loaded extents of A and B stay balanced
/// (the work the loaded panels allow is their product; g = 1 gives the square of ooc_device_order).
/// Up to `col_cap` column blocks take part (those the B cache holds); the rest follow row by row.
/// Column block x is B panels [x·group, x·group + group) of `panels`.
inline void ooc_balanced_band(index_t b0, index_t rows, index_t ncols, index_t col_cap, index_t row_w,
                              index_t col_w, index_t group, index_t panels, std::vector<ooc_block>& out) {
  const index_t cap = std::min(col_cap, ncols);
  auto blk = [&](index_t r, index_t x) {
    return ooc_block{r, x * group, std::min(group, panels - x * group)};
  };
  index_t r = 0, c = 0;
  while (r < rows || c < cap) {
    const bool add_row = r < rows && (c == cap || r * row_w <= c * col_w);
    if (add_row) {
      for (index_t x = 0; x < c; ++x) out.push_back(blk(b0 + r, x));
      ++r;
    } else {
      for (index_t y = 0; y < r; ++y) out.push_back(blk(b0 + y, c));
      ++c;
    }
  }
  for (index_t x = cap; x < ncols; ++x)
    for (index_t y = 0; y < rows; ++y) out.push_back(blk(b0 + y, x));
}

/// One device's rows [r0, r1) (all resident) as a square start of single-panel blocks over row
/// panels and B panels [0, S), those S rows against the remaining B panels, then every later row
/// as blocks of `group` panels: the start needs the fewest bytes (its short-line copies out are
/// few and overlap the panels still arriving), the rest leave in long lines.
inline void ooc_hybrid_order(index_t r0, index_t r1, index_t panels, index_t group, index_t S,
                             std::vector<ooc_block>& out) {
  const index_t rows = r1 - r0;
  S = std::min({S, rows, panels});
  for (index_t s = 0; s < S; ++s) {
    for (index_t c = 0; c < s; ++c) out.push_back({r0 + s, c, 1});
    for (index_t r = 0; r <= s; ++r) out.push_back({r0 + r, s, 1});
  }
  for (index_t j = S; j < panels; ++j)
    for (index_t r = 0; r < S; ++r) out.push_back({r0 + r, j, 1});
  for (index_t r = S; r < rows; ++r)
    for (index_t j = 0; j < panels; j += group) out.push_back({r0 + r, j, std::min(group, panels - j)});
}

/// ooc_device_order for C blocks of `group` B panels: the first band starts balanced
/// (ooc_balanced_band), later bands run their column blocks in a serpentine as with group 1.
inline void ooc_device_order_grouped(index_t r0, index_t r1, index_t ncols, std::size_t a_slots,
                                     std::size_t b_slots, index_t group, index_t row_w, index_t col_w,
                                     index_t panels, std::vector<ooc_block>& out) {
  bool forward = true;
  const index_t cap = std::max<index_t>(1, static_cast<index_t>(b_slots) / std::max<index_t>(group, 1));
  for (index_t b0 = r0; b0 < r1; b0 += static_cast<index_t>(a_slots)) {
    const index_t b1 = std::min(r1, b0 + static_cast<index_t>(a_slots));
    if (b0 == r0) {
      ooc_balanced_band(b0, b1 - b0, ncols, cap, row_w, col_w, group, panels, out);
      forward = false;
      continue;
    }
    for (index_t t = 0; t < ncols; ++t) {
      const index_t c = forward ? t : ncols - 1 - t;
      for (index_t r = b0; r < b1; ++r) out.push_back({r, c * group, std::min(group, panels - c * group)});
    }
    forward = !forward;
  }
}

/// Bytes one device moves for its part of the order, by simulating its two direct-mapped caches
/// (panel p of A with k chunk q is key p·k_chunks + q, cached in slot key mod slots).
inline void ooc_simulate(const ooc_plan& p, std::size_t begin, std::size_t end, bool read_c,
                         std::size_t in_bytes, std::size_t out_bytes, std::size_t& h2d, std::size_t& d2h) {
  std::vector<index_t> a_tag(p.a_slots, -1), b_tag(p.b_slots, -1);
  const index_t kch = p.k_chunks;
  for (std::size_t t = begin; t < end; ++t) {
    const ooc_block& b = p.order[t];
    const auto rows = static_cast<std::size_t>(p.block_rows(b)),
               cols = static_cast<std::size_t>(p.block_cols(b));
    if (p.k > 0) {
      for (index_t q = 0; q < kch; ++q) {
        const auto kq = static_cast<std::size_t>(p.chunk_k(q));
        const index_t ka = b.i * kch + q;
        auto& ta = a_tag[static_cast<std::size_t>(ka) % p.a_slots];
        if (ta != ka) {
          ta = ka;
          h2d += rows * kq * in_bytes;
        }
        for (index_t j = p.first_panel(b); j < p.last_panel(b); ++j) {
          const index_t kb = j * kch + q;
          auto& tb = b_tag[static_cast<std::size_t>(kb) % p.b_slots];
          if (tb != kb) {
            tb = kb;
            h2d += kq * static_cast<std::size_t>(p.panel_cols(j)) * in_bytes;
          }
        }
      }
    }
    if (read_c) h2d += rows * cols * out_bytes;
    d2h += rows * cols * out_bytes;
  }
}

/// The order's bound on one device's part of the job (see ooc_plan::ramp_seconds): its two caches
/// simulated as in ooc_simulate, each missing panel copied after the previous one at rates.h2d,
/// each block computed (`compute_seconds` x its share of the product's work) once its panels are in
/// and the previous block is done, its C block out at rates.d2h after the previous one (staged: then
/// copied into C at rates.scatter after the previous block's host copy). A block of several B
/// panels runs one GEMM per panel, each once its own panel is in.
inline double ooc_ramp(const ooc_plan& p, std::size_t begin, std::size_t end, bool read_c,
                       std::size_t in_bytes, std::size_t out_bytes, const copy_rates& rates,
                       double compute_seconds) {
  std::vector<index_t> a_tag(p.a_slots, -1), b_tag(p.b_slots, -1);
  std::vector<double> a_at(p.a_slots, 0.0), b_at(p.b_slots, 0.0);
  const double work =
      static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(std::max<index_t>(p.k, 1));
  double in = 0, gpu = 0, out = 0, host = 0;
  const index_t kch = p.k_chunks;
  const double kk = static_cast<double>(std::max<index_t>(p.k, 1));
  for (std::size_t t = begin; t < end; ++t) {
    const ooc_block& b = p.order[t];
    const auto rows = static_cast<double>(p.block_rows(b)), cols = static_cast<double>(p.block_cols(b));
    auto arrive = [&](std::vector<index_t>& tag, std::vector<double>& at, index_t key, double bytes) {
      const std::size_t s = static_cast<std::size_t>(key) % tag.size();
      if (tag[s] != key) {
        tag[s] = key;
        in += bytes / rates.h2d;
        at[s] = in;
      }
      return at[s];
    };
    const double cbytes = rows * cols * static_cast<double>(out_bytes);
    double c_in = 0;
    auto read_block = [&] {
      if (!read_c) return;
      in += cbytes / rates.h2d;
      c_in = in;
    };
    if (p.k > 0) {
      // Panels are requested in the order the block's GEMMs read them (chunk by chunk, A first).
      std::vector<double> b_ready(static_cast<std::size_t>(p.last_panel(b) - p.first_panel(b)) *
                                  static_cast<std::size_t>(kch));
      std::vector<double> a_ready(static_cast<std::size_t>(kch));
      for (index_t q = 0; q < kch; ++q) {
        const auto kq = static_cast<double>(p.chunk_k(q));
        a_ready[static_cast<std::size_t>(q)] =
            arrive(a_tag, a_at, b.i * kch + q, rows * kq * static_cast<double>(in_bytes));
        for (index_t j = p.first_panel(b); j < p.last_panel(b); ++j) {
          b_ready[static_cast<std::size_t>((j - p.first_panel(b)) * kch + q)] =
              arrive(b_tag, b_at, j * kch + q,
                     kq * static_cast<double>(p.panel_cols(j)) * static_cast<double>(in_bytes));
        }
      }
      read_block();
      for (index_t q = 0; q < kch; ++q) {
        const auto kq = static_cast<double>(p.chunk_k(q));
        for (index_t j = p.first_panel(b); j < p.last_panel(b); ++j) {
          const double ready =
              std::max({c_in, a_ready[static_cast<std::size_t>(q)],
                        b_ready[static_cast<std::size_t>((j - p.first_panel(b)) * kch + q)]});
          gpu = std::max(gpu, ready) +
                compute_seconds * rows * static_cast<double>(p.panel_cols(j)) * kq / work;
        }
      }
    } else {
      read_block();
      gpu = std::max(gpu, c_in) + compute_seconds * rows * cols * kk / work;
    }
    // A block whose lines in C are short leaves at the short-line rate (unless it is whole lines,
    // or staged: copied out whole, then by host threads into C after the previous block).
    const double line = (p.c_row_lines ? cols : rows) * static_cast<double>(out_bytes);
    const bool whole = p.c_row_lines ? p.block_cols(b) == p.n : p.block_rows(b) == p.m;
    const bool short_lines =
        !p.c_staged && rates.d2h_short > 0 && !whole && line < static_cast<double>(ooc_long_line);
    out = std::max(out, gpu) + cbytes / (short_lines ? rates.d2h_short : rates.d2h);
    if (p.c_staged && rates.scatter > 0) host = std::max(host, out) + cbytes / rates.scatter;
  }
  return std::max({gpu, out, host});
}

/// Which block each device takes next: its own range of the plan's order from the front; when
/// that is done, the back of the range with the most blocks left (so every task the scheduler
/// hands out finds a block, and a faster device helps a slower one at the end).
class ooc_queue {
 public:
  explicit ooc_queue(const std::vector<std::size_t>& first) {
    for (std::size_t d = 0; d + 1 < first.size(); ++d) {
      lo_.push_back(first[d]);
      hi_.push_back(first[d + 1]);
    }
  }
  std::size_t pop(std::size_t d) {
    std::lock_guard<std::mutex> l(m_);
    if (lo_[d] < hi_[d]) return lo_[d]++;
    std::size_t v = d, most = 0;
    for (std::size_t x = 0; x < lo_.size(); ++x)
      if (hi_[x] - lo_[x] > most) {
        most = hi_[x] - lo_[x];
        v = x;
      }
    if (most == 0) throw logic_error("gemm_out_of_core: internal error: a task with no block left");
    return --hi_[v];
  }

 private:
  std::mutex m_;
  std::vector<std::size_t> lo_, hi_;
};

/// A quick estimate of a candidate's bytes (for ranking; the chosen plan is simulated exactly).
inline double ooc_estimate(const ooc_plan_request& r, const ooc_shape& s, std::size_t a_slots,
                           std::size_t b_slots, std::size_t devices) {
  const double in = static_cast<double>(r.in_bytes);
  const double A = static_cast<double>(s.m) * static_cast<double>(s.k) * in;
  const double B = static_cast<double>(s.k) * static_cast<double>(s.n) * in;
  const double C = static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(r.out_bytes);
  const index_t rp = ooc_ceil(s.m, s.bm), np = ooc_ceil(s.n, s.bn);
  const index_t kch = s.k == 0 ? 1 : ooc_ceil(s.k, s.kc);
  const index_t rp_dev = ooc_ceil(rp, static_cast<index_t>(devices));
  double bytes = C * (r.read_c ? 2.0 : 1.0);
  if (s.k == 0) return bytes;
  if (kch == 1) {
    const double bands = static_cast<double>(ooc_ceil(rp_dev, static_cast<index_t>(a_slots)));
    const double reuse =
        static_cast<double>(std::min<index_t>(static_cast<index_t>(b_slots), np)) / static_cast<double>(np);
    const double used_devices = static_cast<double>(ooc_ceil(rp, rp_dev));
    bytes += A + used_devices * B * (bands - (bands - 1.0) * reuse);
  } else {
    // A chunk row stays cached along a row of blocks only when all its chunks fit.
    const bool a_row_cached = static_cast<index_t>(a_slots) >= kch;
    bytes += (a_row_cached ? A : A * static_cast<double>(np)) + B * static_cast<double>(rp);
  }
  return bytes;
}

}  // namespace detail

inline std::string ooc_plan::describe() const {
  auto gib = [](double b) { return std::to_string(b / 1073741824.0).substr(0, 6) + " GiB"; };
  std::string s =
      std::string(transposed ? "B resident (run as C^T = B^T A^T), " : "A resident, ") + "blocks " +
      std::to_string(bm) + " x " + std::to_string(std::min(n, bn * group)) + " (" +
      std::to_string(row_panels) + " x " + std::to_string(col_blocks) +
      (group > 1 ? ", " + std::to_string(group) + " B panels of " + std::to_string(bn) + " each" +
                       (narrow_rows > 0 ? ", after a square start of " + std::to_string(narrow_rows) +
                                              " rows of " + std::to_string(bn) + "-wide blocks"
                                        : std::string())
                 : std::string()) +
      "), k " +
      (k_chunks > 1 ? "in " + std::to_string(k_chunks) + " chunks of " + std::to_string(kc)
                    : std::string("whole (") + std::to_string(k) + ")") +
      "; cached panels A " + std::to_string(a_slots) + " x " + gib(static_cast<double>(a_panel_bytes)) +
      ", B " + std::to_string(b_slots) + " x " + gib(static_cast<double>(b_panel_bytes)) + "; " +
      std::to_string(slots) + " slots x " + gib(static_cast<double>(c_block_bytes + slot_extra_bytes)) +
      (stage_bytes > 0
           ? std::string("; transposed on load: ") + (stage_a ? "A" : "") + (stage_a && stage_b ? ", " : "") +
                 (stage_b ? "B" : "") + " (raw buffers " + gib(static_cast<double>(stage_bytes)) + ")"
           : std::string()) +
      "; device " + gib(static_cast<double>(device_bytes)) + "; moves H2D " +
      gib(static_cast<double>(h2d_bytes)) + ", D2H " + gib(static_cast<double>(d2h_bytes)) + " (minimum " +
      gib(static_cast<double>(min_h2d_bytes)) + " / " + gib(static_cast<double>(min_d2h_bytes)) +
      "); copy time " + std::to_string(copy_seconds * 1e3) + " ms, floor " +
      std::to_string(floor_seconds * 1e3) + " ms";
  if (ramp_seconds > 0) s += ", order's bound (ramp) " + std::to_string(ramp_seconds * 1e3) + " ms";
  return s;
}

/// The bytes any plan must move (A and B in, C in when β ≠ 0, C out) and their time at `rates`.
inline void ooc_independent_floor(const ooc_plan_request& r, std::size_t& h2d, std::size_t& d2h,
                                  double& seconds) {
  const auto m = static_cast<std::size_t>(r.m), n = static_cast<std::size_t>(r.n),
             k = static_cast<std::size_t>(r.k);
  const std::size_t c = detail::ooc_mul(detail::ooc_mul(m, n), r.out_bytes);
  h2d = detail::ooc_add(detail::ooc_mul(detail::ooc_mul(m, k), r.in_bytes),
                        detail::ooc_mul(detail::ooc_mul(k, n), r.in_bytes));
  if (r.read_c) h2d = detail::ooc_add(h2d, c);
  d2h = c;
  seconds = r.rates.seconds(static_cast<double>(h2d), static_cast<double>(d2h));
}
namespace detail {

/// Throws logic_error with the planner's prefix.
[[noreturn]] inline void ooc_fail(const std::string& m) {
  throw logic_error("gemm_out_of_core: " + m);
}

/// make_ooc_plan's checks of the request's sizes, slots, devices, element sizes and split-K.
inline void ooc_check_request(const ooc_plan_request& r) {
  if (r.m < 0 || r.n < 0 || r.k < 0) {
    ooc_fail("sizes must be >= 0, got m " + std::to_string(r.m) + ", n " + std::to_string(r.n) + ", k " +
             std::to_string(r.k));
  }
  if (r.slots == 0) ooc_fail("slots_per_device must be at least 1, got 0");
  if (r.devices == 0) ooc_fail("no devices");
  if (r.in_bytes == 0 || r.out_bytes == 0 || r.acc_bytes == 0) ooc_fail("element sizes must be > 0");
  if (r.split_k < 1) ooc_fail("split_k for the blocks must be >= 1, got " + std::to_string(r.split_k));
}

/// The best candidate of make_ooc_plan's search so far (found: there is one).
struct ooc_choice {
  bool found = false;
  bool whole = false;
  bool transposed = false;
  double bytes = 0;
  std::size_t panel = 0;
  std::size_t tasks = 0;
  ooc_shape s{};
  std::size_t a_slots = 0, b_slots = 0;
  ooc_sizes z{};
};

/// The k chunks the search tries, longest first: k whole, then halvings (rounded up to the
/// granule) down to ooc_min_side ({0} when k is 0).
inline std::vector<index_t> ooc_k_chunk_candidates(const ooc_plan_request& r) {
  std::vector<index_t> kcs;
  if (r.k == 0) {
    kcs.push_back(0);
  } else {
    kcs.push_back(r.k);
    for (index_t q = 2;; q *= 2) {
      const index_t c = ooc_r16(ooc_ceil(r.k, q));
      if (c >= r.k) {
        if (q >= r.k) break;  // k ≤ 16: every chunk rounds up to 16 ≥ k; no smaller one exists
        continue;
      }
      if (c <= std::min(r.k, ooc_min_side)) break;
      kcs.push_back(c);
    }
    if (kcs.back() > ooc_min_side) kcs.push_back(ooc_min_side);
  }
  return kcs;
}

/// One candidate shape of the search (orientation `tr`): its cache slots within the budget and its
/// estimated bytes; it replaces `pick` when it moves fewer bytes, or as many and ranks before it.
inline void ooc_consider(const ooc_plan_request& r, const ooc_shape& s, bool tr, ooc_choice& pick) {
  const index_t M = s.m, N = s.n, bm = s.bm, bn = s.bn, kc = s.kc;
  const bool sb = s.stage_b;
  const ooc_sizes z = ooc_size_of(r, s);
  const index_t rp = ooc_ceil(M, bm), np = ooc_ceil(N, bn);
  const index_t kch = r.k == 0 ? 1 : ooc_ceil(r.k, kc);
  const index_t rp_dev = ooc_ceil(rp, static_cast<index_t>(r.devices));
  // Every device gets rows (as many as there are 128-row panels to give).
  const index_t want_devices = std::min<index_t>(static_cast<index_t>(r.devices), ooc_ceil(M, ooc_min_side));
  if (ooc_ceil(rp, rp_dev) < want_devices) return;
  const std::size_t fixed = ooc_add(ooc_mul(z.slots, ooc_add(z.cblk, z.extra)), z.stage);
  if (fixed > r.budget_bytes) return;
  std::size_t rem = r.budget_bytes - fixed;
  // At least two B slots (one loading while one is read) when there is more than one B panel.
  const std::size_t b_min = static_cast<std::size_t>(std::min<index_t>(2, np * kch));
  const std::size_t a_min = static_cast<std::size_t>(std::min<index_t>(kch > 1 ? 2 : 1, rp_dev * kch));
  if (ooc_add(ooc_mul(b_min, z.pb), ooc_mul(a_min, z.pa)) > rem) return;
  std::size_t a_slots = 1;
  if (z.pa > 0) {
    a_slots = (rem - ooc_mul(b_min, z.pb)) / z.pa;
    a_slots = std::min<std::size_t>(a_slots, static_cast<std::size_t>(rp_dev * kch));
  }
  rem -= ooc_mul(a_slots, z.pa);
  // B slots beyond two widen the square start (ooc_device_order grows it over as many
  // columns as B has slots: after a fraction x of the panels has arrived, x² of the work
  // can run, over the whole first band instead of a linear ramp after its corner) and add
  // reuse at band turns; more slots never move more bytes, so they take what the budget
  // leaves, up to every panel.
  std::size_t b_slots = 1;
  if (z.pb > 0) {
    b_slots = rem / z.pb;
    b_slots = std::min<std::size_t>(b_slots, static_cast<std::size_t>(np * kch));
  }
  a_slots = std::max<std::size_t>(a_slots, 1);
  b_slots = std::max<std::size_t>(b_slots, 1);
  const double bytes = ooc_estimate(r, s, a_slots, b_slots, r.devices);
  // A row-major B (MN-major in the executed frame) of 1- or 2-byte elements held whole as
  // one panel, landing in pieces of whole rows (1-D copies at the full rate, each
  // transposed as the next lands), with C blocks of whole rows (1-D copies out) when C is
  // row-major there: preferred among the plans that move the fewest bytes (faster than
  // 8192-column panels for bf16 and int8; docs/gemm.md, "ooc_plan.hpp"). Not for 4-byte
  // elements: TF32 measured slower whole (its 4 GiB B delays the first block); 8-byte ones
  // not measured. Such candidates share that panel; the smaller streamed one decides.
  const bool whole = r.in_bytes <= 2 && sb && bn == N && (r.c_row_major != tr);
  const std::size_t panel = whole ? std::min(z.pa, z.pb) : std::max(z.pa, z.pb);
  const std::size_t tasks = static_cast<std::size_t>(rp * np);
  const bool same_bytes = pick.found && bytes <= pick.bytes * (1 + 1e-9);
  const bool better = !pick.found || bytes < pick.bytes * (1 - 1e-9) ||
                      (same_bytes && whole && !pick.whole) ||
                      (same_bytes && whole == pick.whole &&
                       (panel < pick.panel || (panel == pick.panel && tasks < pick.tasks)));
  if (better) {
    pick.found = true;
    pick.whole = whole;
    pick.bytes = bytes;
    pick.panel = panel;
    pick.tasks = tasks;
    pick.s = s;
    pick.a_slots = a_slots;
    pick.b_slots = b_slots;
    pick.z = z;
    pick.transposed = tr;
  }
}

/// The search (see make_ooc_plan): k chunks longest first; for each, the passes over MN-major
/// line lengths; for each, the side floors largest first; the first of these that yields a
/// candidate in either orientation gives the best of its candidates (not found: nothing fits).
inline ooc_choice ooc_search(const ooc_plan_request& r) {
  ooc_choice pick;
  const index_t floors[] = {2048, 1024, 512, 256, ooc_min_side};
  const std::vector<index_t> kcs = ooc_k_chunk_candidates(r);
  // An MN-major panel is copied in as host lines of its MN side (bn elements of a row-major B,
  // bm of a column-major A): for each k chunk, a first pass keeps those lines at least
  // ooc_mn_line_bytes long (where the extent allows), a second, only if nothing fits, does not
  // (full-k panels with short lines before chunks of k with long ones: chunks move more bytes).
  const bool any_mn = r.stage_a || r.stage_b;
  const index_t mn_min =
      ooc_r16(ooc_ceil(static_cast<index_t>(ooc_mn_line_bytes), static_cast<index_t>(r.in_bytes)));
  for (const index_t kc : kcs) {
    for (int pass = 0; pass < (any_mn ? 2 : 1); ++pass) {
      for (const index_t fl : floors) {
        for (int orient = 0; orient < (r.allow_transpose ? 2 : 1); ++orient) {
          const bool tr = orient == 1;
          const index_t M = tr ? r.n : r.m, N = tr ? r.m : r.n;
          const bool sa = tr ? r.stage_b : r.stage_a, sb = tr ? r.stage_a : r.stage_b;
          const index_t lo_m = std::max(std::min(M, fl), pass == 0 && sa ? std::min(M, mn_min) : index_t{0});
          const index_t lo_n = std::max(std::min(N, fl), pass == 0 && sb ? std::min(N, mn_min) : index_t{0});
          const auto bms = ooc_sides(M, lo_m, r.max_block);
          const auto bns = ooc_sides(N, lo_n, r.max_block);
          for (const index_t bm : bms)
            for (const index_t bn : bns)
              ooc_consider(r, ooc_shape{M, N, r.k, bm, bn, kc == 0 ? 0 : kc, sa, sb}, tr, pick);
        }
        if (pick.found) return pick;
      }
    }
  }
  return pick;
}

/// The smallest candidate of the search, in the cheaper orientation: one block of at most
/// 128 x 128 with 128-wide chunks of k, the fewest cache slots a plan takes (A: one, two when k is
/// chunked; B: two) and the slots' C blocks. Below its bytes no plan fits the budget.
/// `need`: its device bytes (the plan's device_bytes, without building its order).
inline ooc_choice ooc_smallest(const ooc_plan_request& r, std::size_t& need) {
  ooc_choice best;
  need = std::numeric_limits<std::size_t>::max();
  for (int orient = 0; orient < (r.allow_transpose ? 2 : 1); ++orient) {
    const bool tr = orient == 1;
    const index_t M = tr ? r.n : r.m, N = tr ? r.m : r.n;
    const index_t bm = std::min(M, ooc_min_side), bn = std::min(N, ooc_min_side);
    const index_t kc = r.k == 0 ? 0 : std::min(r.k, ooc_min_side);
    const ooc_shape s{M, N, r.k, bm, bn, kc, tr ? r.stage_b : r.stage_a, tr ? r.stage_a : r.stage_b};
    const ooc_sizes z = ooc_size_of(r, s);
    const index_t kch = r.k == 0 ? 1 : ooc_ceil(r.k, kc);
    const index_t rp_dev = ooc_ceil(ooc_ceil(M, bm), static_cast<index_t>(r.devices));
    const std::size_t a_min = static_cast<std::size_t>(std::min<index_t>(kch > 1 ? 2 : 1, rp_dev * kch));
    const std::size_t b_min = static_cast<std::size_t>(std::min<index_t>(2, ooc_ceil(N, bn) * kch));
    const std::size_t v =
        ooc_add(ooc_add(ooc_add(ooc_mul(z.slots, ooc_add(z.cblk, z.extra)), ooc_mul(a_min, z.pa)),
                        ooc_mul(b_min, z.pb)),
                z.stage);
    if (v < need) {
      need = v;
      best.found = true;
      best.transposed = tr;
      best.s = s;
      best.z = z;
      best.a_slots = std::max<std::size_t>(a_min, 1);
      best.b_slots = std::max<std::size_t>(b_min, 1);
    }
  }
  return best;
}

/// Throws the refusal of a budget below every candidate, stating the minimum: the device bytes of
/// the smallest candidate (ooc_smallest).
[[noreturn]] inline void ooc_fail_budget(const ooc_plan_request& r, std::size_t need) {
  ooc_fail(
      "memory budget " + std::to_string(r.budget_bytes) + " bytes is below the minimum of " +
      std::to_string(need) +
      " bytes for this problem (one block of at most 128 x 128 with 128-wide chunks of k, " +
      std::to_string(r.slots) + " slot(s)" +
      (r.stage_a || r.stage_b ? ", and two raw panel buffers per MN-major operand for its transpose" : "") +
      ")");
}

/// The plan of the chosen candidate, before any grouping: single-panel C blocks, C's lines and
/// staging as the request states them in the executed frame.
inline void ooc_apply_choice(const ooc_plan_request& r, const ooc_choice& pick, ooc_plan& p) {
  p.transposed = pick.transposed;
  p.m = pick.s.m;
  p.n = pick.s.n;
  p.k = r.k;
  p.bm = pick.s.bm;
  p.bn = pick.s.bn;
  p.kc = pick.s.kc;
  p.row_panels = ooc_ceil(p.m, p.bm);
  p.col_panels = ooc_ceil(p.n, p.bn);
  p.k_chunks = r.k == 0 ? 1 : ooc_ceil(r.k, p.kc);
  p.a_slots = pick.a_slots;
  p.b_slots = pick.b_slots;
  p.slots = pick.z.slots;
  p.a_panel_bytes = pick.z.pa;
  p.b_panel_bytes = pick.z.pb;
  p.c_block_bytes = pick.z.cblk;
  p.slot_extra_bytes = pick.z.extra;
  p.acc_block_bytes = pick.z.acc;
  p.split_k_bytes = pick.z.split;
  p.stage_a = pick.s.stage_a;
  p.stage_b = pick.s.stage_b;
  p.stage_bytes = pick.z.stage;
  p.raw_a_bytes = pick.z.ra;
  p.raw_b_bytes = pick.z.rb;
  p.raw_a_lines = pick.z.la;
  p.raw_b_lines = pick.z.lb;
  p.group = 1;
  p.col_blocks = p.col_panels;
  p.c_row_lines = r.c_row_major != p.transposed;
  p.c_staged = r.c_staged;
}

/// C blocks of several B panels when C's lines in the caller's memory run along the executed
/// frame's columns (p.c_row_lines) and the planned block's are shorter than asked: the same panels,
/// caches and bytes in, wider C blocks (more slot memory, paid for with B cache slots while B keeps
/// at least the block's panels, else a narrower group). Leaves p.group 1 when no group fits.
inline void ooc_group_blocks(const ooc_plan_request& r, ooc_plan& p) {
  // The line length asked for: c_min_line_bytes, or, when the product's compute time is known,
  // ooc_long_line as a candidate that the order's bound then accepts or refuses.
  const std::size_t want = r.c_min_line_bytes > 0
                               ? r.c_min_line_bytes
                               : (r.compute_seconds > 0 && !r.c_staged ? ooc_long_line : 0);
  const std::size_t line = static_cast<std::size_t>(p.bn) * r.out_bytes;
  if (!(want > line && p.c_row_lines && p.col_panels > 1 && p.k > 0)) return;
  const index_t widest = std::min<index_t>(p.col_panels, static_cast<index_t>((want + line - 1) / line));
  for (index_t g = widest; g > 1; --g) {
    const index_t cols = std::min(p.n, g * p.bn);
    const std::size_t area = ooc_mul(static_cast<std::size_t>(p.bm), static_cast<std::size_t>(cols));
    const std::size_t cblk = ooc_aligned(ooc_mul(area, r.out_bytes));
    std::size_t acc = 0, split = 0;
    ooc_slot_extras(r, area, p.k_chunks, acc, split);
    const std::size_t extra = ooc_add(acc, split);
    const index_t blocks = p.row_panels * ooc_ceil(p.col_panels, g);
    const std::size_t slots = std::max<std::size_t>(1, std::min(r.slots, static_cast<std::size_t>(blocks)));
    const std::size_t fixed = ooc_add(
        ooc_add(ooc_mul(slots, ooc_add(cblk, extra)), ooc_mul(p.a_slots, p.a_panel_bytes)), p.stage_bytes);
    if (fixed > r.budget_bytes) continue;
    // B keeps a block's panels where it held that many (else, as with more k chunks than slots,
    // the block copies its own panels in turn).
    const std::size_t b_need = std::min(p.b_slots, static_cast<std::size_t>(g * p.k_chunks));
    const std::size_t b_fit = p.b_panel_bytes == 0 ? p.b_slots : (r.budget_bytes - fixed) / p.b_panel_bytes;
    if (b_fit < b_need) continue;
    p.group = g;
    p.col_blocks = ooc_ceil(p.col_panels, g);
    p.b_slots = std::min(p.b_slots, b_fit);
    p.slots = slots;
    p.c_block_bytes = cblk;
    p.slot_extra_bytes = extra;
    p.acc_block_bytes = acc;
    p.split_k_bytes = split;
    return;
  }
}

/// The order of q's blocks (mode 0: single-panel blocks, the square start and serpentine bands;
/// 1: every block of `group` panels, a balanced start; 2: a square start of S rows of single-panel
/// blocks, then blocks of `group` panels), each device's range of it, and q's device memory.
inline void ooc_build_order(const ooc_plan_request& r, ooc_plan& q, int mode, index_t S) {
  const index_t per_dev = ooc_ceil(q.row_panels, static_cast<index_t>(r.devices));
  q.order.clear();
  q.device_first.assign(1, 0);
  q.h2d_bytes = q.d2h_bytes = 0;
  q.narrow_rows = mode == 2 ? S : 0;
  q.device_bytes = q.reserved_bytes() + q.slots * (q.c_block_bytes + q.slot_extra_bytes);
  for (std::size_t d = 0; d < r.devices; ++d) {
    const index_t r0 = std::min(q.row_panels, static_cast<index_t>(d) * per_dev);
    const index_t r1 = std::min(q.row_panels, r0 + per_dev);
    if (mode == 0) {
      ooc_device_order(r0, r1, q.col_panels, q.a_slots, q.b_slots, q.order);
    } else if (mode == 1) {
      ooc_device_order_grouped(r0, r1, q.col_blocks, q.a_slots, q.b_slots, q.group, q.bm, q.bn * q.group,
                               q.col_panels, q.order);
    } else {
      ooc_hybrid_order(r0, r1, q.col_panels, q.group, S, q.order);
    }
    q.device_first.push_back(q.order.size());
  }
}

/// The bytes q's order moves, its copy time (the slowest device's) and, with a compute time, its
/// bound (ramp_seconds, at least the copy time).
inline void ooc_price_order(const ooc_plan_request& r, ooc_plan& q) {
  double worst = 0;
  for (std::size_t d = 0; d < r.devices; ++d) {
    std::size_t h = 0, o = 0;
    ooc_simulate(q, q.device_first[d], q.device_first[d + 1], r.read_c, r.in_bytes, r.out_bytes, h, o);
    q.h2d_bytes += h;
    q.d2h_bytes += o;
    worst = std::max(worst, r.rates.seconds(static_cast<double>(h), static_cast<double>(o)));
  }
  q.copy_seconds = worst;
  q.ramp_seconds = 0;
  if (r.compute_seconds > 0) {
    double ramp = 0;
    for (std::size_t d = 0; d < r.devices; ++d) {
      ramp = std::max(ramp, ooc_ramp(q, q.device_first[d], q.device_first[d + 1], r.read_c, r.in_bytes,
                                     r.out_bytes, r.rates, r.compute_seconds));
    }
    q.ramp_seconds = std::max(ramp, q.copy_seconds);
  }
}

/// The order (see ooc_build_order), then the bytes it moves and, with a compute time, its bound.
inline void ooc_finish(const ooc_plan_request& r, ooc_plan& q, int mode, index_t S) {
  ooc_build_order(r, q, mode, S);
  ooc_price_order(r, q);
}

/// Replaces `best` by the grouped plan p in the order of a square start of S rows of single-panel
/// blocks (ooc_finish mode 2) for the S whose bound is lowest, when lower than best's. S in
/// [0, top): every S below 16, then a geometric grid (steps of 1/4), then a pattern search around
/// the best of those (halving steps): each candidate simulates the whole order, so the search stays
/// ~40 candidates where it would take `top` (489 for 10^6-row bf16 operands held whole: seconds of
/// planning).
inline void ooc_search_square_start(const ooc_plan_request& r, const ooc_plan& p, ooc_plan& best) {
  const index_t top = std::min(p.row_panels, p.col_panels);
  std::vector<index_t> tried;
  index_t best_s = -1;
  auto try_s = [&](index_t S) {
    if (S < 0 || S >= top || std::find(tried.begin(), tried.end(), S) != tried.end()) return;
    tried.push_back(S);
    ooc_plan cand = p;
    ooc_finish(r, cand, 2, S);
    if (cand.ramp_seconds < best.ramp_seconds) {
      best = cand;
      best_s = S;
    }
  };
  for (index_t S = 0; S < top; S = S < 16 ? S + 1 : S + S / 4) try_s(S);
  if (best_s >= 16) {
    for (index_t step = std::max<index_t>(1, best_s / 8); step >= 1; step /= 2) {
      const index_t centre = best_s;
      try_s(centre - step);
      try_s(centre + step);
    }
  }
}

/// The finished plan of p, whose C blocks span group > 1 B panels (`narrow`: p before grouping).
/// Without a compute time, every block grouped: c_min_line_bytes asked for groups and there is no
/// bound to weigh them. With one, the order with the lowest bound: single-panel blocks, every block
/// grouped, or a square start of S rows of single-panel blocks (one device whose caches hold every
/// panel, so that no band turns) then grouped blocks. Ties keep the earlier (fewer, simpler changes).
inline ooc_plan ooc_weigh_groups(const ooc_plan_request& r, ooc_plan p, const ooc_plan& narrow) {
  ooc_finish(r, p, 1, 0);
  if (r.compute_seconds <= 0) return p;
  ooc_plan best = p;
  ooc_plan cand = narrow;
  ooc_finish(r, cand, 0, 0);
  if (cand.ramp_seconds <= best.ramp_seconds) best = cand;
  const bool resident = r.devices == 1 && p.k_chunks == 1 &&
                        p.a_slots >= static_cast<std::size_t>(p.row_panels) &&
                        p.b_slots >= static_cast<std::size_t>(p.col_panels);
  if (resident) ooc_search_square_start(r, p, best);
  return best;
}

}  // namespace detail

/// Plans an out-of-core GEMM. Searches, for each orientation (A or B resident), C block sides
/// that are as large as possible first (at least min(extent, 2048) each, then 1024, … 128 while
/// nothing fits), full-k panels first and chunks of k only when no full-k plan fits; within that,
/// the fewest bytes moved, then a row-major B of 1- or 2-byte elements held whole (one panel of every
/// column, C blocks of whole rows; see the search), then the smaller panels (the first block starts sooner),
/// then fewer blocks. Throws logic_error for bad sizes and for a budget below the smallest plan (one 128 x
/// 128 block — or the matrix, if smaller — with 128-wide k chunks and the slots' C blocks), stating that
/// minimum in bytes; with r.refuse_over_budget false it returns that smallest plan instead (device_bytes
/// above the budget), for run_tasks's budget check to refuse.
inline ooc_plan make_ooc_plan(const ooc_plan_request& r) {
  detail::ooc_check_request(r);
  ooc_plan p;
  p.devices = r.devices;
  ooc_independent_floor(r, p.min_h2d_bytes, p.min_d2h_bytes, p.floor_seconds);
  if (r.m == 0 || r.n == 0) {
    p.m = r.m;
    p.n = r.n;
    p.k = r.k;
    p.device_first.assign(r.devices + 1, 0);
    return p;
  }
  const detail::ooc_choice pick = detail::ooc_search(r);
  if (!pick.found) {
    // Nothing fits: refused here, or (refuse_over_budget false) the smallest plan, which the
    // caller's scheduler refuses, its device_bytes (= need) above the budget.
    std::size_t need = 0;
    const detail::ooc_choice smallest = detail::ooc_smallest(r, need);
    if (r.refuse_over_budget) detail::ooc_fail_budget(r, need);
    detail::ooc_apply_choice(r, smallest, p);
    detail::ooc_finish(r, p, 0, 0);
    return p;
  }
  detail::ooc_apply_choice(r, pick, p);
  const ooc_plan narrow = p;  // single-panel blocks: the plan before any grouping
  detail::ooc_group_blocks(r, p);
  if (p.group > 1) return detail::ooc_weigh_groups(r, p, narrow);
  detail::ooc_finish(r, p, 0, 0);
  return p;
}

/// The plan gemm_out_of_core runs, C blocks staged or copied straight into C: staged where `c_out`
/// asks for it or C is pageable (`c_page_locked` false); `automatic` stages where the staged plan's
/// bound is at least detail::ooc_staged_margin below the direct one's (both at r.compute_seconds),
/// except when panels are transposed on load: there staged copies out measured much slower than
/// direct ones (the blocks' GEMMs ran longer; not explained; docs/gemm.md, "ooc_plan.hpp").
/// `slots_per_device` 0: 8 slots when staged, 4 when direct. Sets r.c_staged and r.slots.
inline ooc_plan choose_ooc_plan(ooc_plan_request r, ooc_copy_out c_out, bool c_page_locked,
                                std::size_t slots_per_device) {
  auto plan_for = [&](bool staged) {
    r.c_staged = staged;
    r.slots = slots_per_device != 0 ? slots_per_device : (staged ? 8 : 4);
    return make_ooc_plan(r);
  };
  const bool staged = !c_page_locked || c_out == ooc_copy_out::staged;
  ooc_plan p = plan_for(staged);
  const bool fits = p.device_bytes <= r.budget_bytes;  // else both plans are refused
  if (fits && !staged && c_out == ooc_copy_out::automatic && r.compute_seconds > 0 && !p.stage_a &&
      !p.stage_b) {
    ooc_plan s = plan_for(true);
    if (s.ramp_seconds < p.ramp_seconds * (1 - detail::ooc_staged_margin)) return s;
  }
  return p;
}

}  // namespace spillway::gemm
