// spillway/gemm/detail/ooc_job.cuh — one out-of-core GEMM job: its panel caches, staging and
// scatter, the per-device state, the task body, and the compute estimate. gemm_out_of_core
// (gemm/out_of_core.cuh) plans it and runs it through run_tasks.
//
// How a job runs (the executed frame of ooc_plan.hpp: panels of "A" resident, "B" streamed): each
// task is one C block. Panels are copied into the device's two panel caches on a loader stream of
// the device's own, in the order the blocks need them and as far ahead of the running blocks as the
// caches allow (up to ooc_lookahead blocks; every panel from the first block on when the caches hold
// them all, as the 32,768² bf16 job in 8 GiB does): a cache slot is refilled once no block before the one
// that needs the new panel still needs the old one, and only after every stream that read the old
// panel has passed the event recorded after that read. On its slot's stream a task waits for its
// panels' copy events, copies the C block in when β ≠ 0, runs the in-core gemm_async over the
// panels (one GEMM per B panel when the block spans several: ooc_options::c_min_line_bytes), and
// copies the block out. So panel copies run back to back during the GEMMs, and the
// device→host copy of one block overlaps the GEMM of the next. Page-locked host memory is copied
// by DMA directly (2-D copies of the sub-matrices), except C blocks that ooc_options::c_out stages:
// out in a few 1-D pieces into their slot's pinned buffer, each written into C by one of the job's
// own host threads as soon as it lands (the block's stream waits for them before its slot is
// free). Pageable panels go through pinned staging filled by the pipeline's host threads
// (double-buffered per device); pageable C is staged like the blocks above. On the tensor-core
// paths an MN-major operand (A column-major, B row-major in the executed frame) would make every
// block's GEMM stage a K-major copy of its panel; instead each panel lands in one of two raw
// buffers of the device and is transposed once into its cache slot by ooc_transpose_kernel on a
// second stream of the device, while the loader copies the next panel (ooc_job::load).
#pragma once

#include <spillway/core/fault_hook.hpp>
#include <spillway/core/device.hpp>
#include <spillway/core/device_buffer.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/host_memory.hpp>
#include <spillway/core/host_registration.hpp>
#include <spillway/core/memory_budget.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/gemm/detail/validate.hpp>
#include <spillway/gemm/epilogue.hpp>
#include <spillway/gemm/gemm.cuh>
#include <spillway/gemm/matrix_view.hpp>
#include <spillway/gemm/detail/ooc_host_copy.hpp>
#include <spillway/gemm/detail/ooc_kernels.cuh>
#include <spillway/gemm/ooc_options.hpp>
#include <spillway/gemm/ooc_plan.hpp>
#include <spillway/gemm/options.hpp>
#include <spillway/pipeline/host_workers.hpp>
#include <spillway/pipeline/host_operand.hpp>
#include <spillway/pipeline/job.hpp>
#include <spillway/pipeline/task_pipeline.hpp>

#include <cuda_runtime_api.h>


#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace spillway::gemm::detail {

/// A sub-matrix as 2-D copy geometry: `lines` runs of `len` contiguous elements, `ld` apart.
template <class T>
struct ooc_rect {
  const T* first = nullptr;  // element (r0, c0)
  index_t lines = 0, len = 0, ld = 0;
};

template <class T>
ooc_rect<T> ooc_sub(const matrix_view<const T>& v, index_t r0, index_t rows, index_t c0, index_t cols) {
  ooc_rect<T> r;
  r.first = &v(r0, c0);
  r.ld = v.ld;
  if (v.order == layout::row_major) {
    r.lines = rows;
    r.len = cols;
  } else {
    r.lines = cols;
    r.len = rows;
  }
  return r;
}

/// One double-buffered pinned staging pair for a device's panel loads from pageable memory.
struct ooc_staging {
  ::spillway::detail::staging_block buf[2];
  event done[2];
  int next = 0;
};

/// The two raw buffers of a device in which an MN-major operand's panels land (as the host holds
/// them) before their transpose into the cache: `landed` after the copy in, `free` after the
/// transpose that read it (the copy into it two panels later waits for that).
struct ooc_raw {
  std::byte* buf[ooc_raw_buffers] = {};
  event landed[ooc_raw_buffers], free[ooc_raw_buffers];
  std::size_t next = 0;
};

/// The panel caches of one device.
struct ooc_cache {
  std::byte* base = nullptr;
  std::size_t panel_bytes = 0;
  std::vector<index_t> tag;
  std::vector<event> ready;
  std::vector<std::vector<event>> used;  // [cache slot][task slot]
  void init(std::byte* b, std::size_t slots, std::size_t bytes, std::size_t task_slots) {
    base = b;
    panel_bytes = bytes;
    tag.assign(slots, -1);
    ready.clear();
    used.clear();
    for (std::size_t i = 0; i < slots; ++i) {
      ready.emplace_back();
      used.emplace_back();
      for (std::size_t j = 0; j < task_slots; ++j) used.back().emplace_back();
    }
  }
};

/// Blocks ahead of the one being enqueued whose panels the loader may already copy.
inline constexpr std::size_t ooc_lookahead = 64;
/// Pageable panels staged ahead per enqueued block (each is a host copy on the scheduler's thread).
inline constexpr std::size_t ooc_staged_per_block = 2;

struct ooc_device_ctx {
  int device = 0;
  std::unique_ptr<stream> setup;
  std::unique_ptr<stream> loader;   // every panel copy of this device, in the order they are needed
  std::unique_ptr<stream> xposer;   // the transposes of MN-major panels, beside the loader's next copy
  std::size_t first = 0, last = 0;  // the device's own range of the plan's order
  std::size_t cursor = 0;           // blocks of its range before this have their panels requested
  std::vector<int> need_a, need_b;  // prefetch's scratch: readers of each panel in its window
  bool resident = false;            // the caches hold every panel of its range: nothing is evicted
  std::unique_ptr<event> origin;    // trace only: when the caches were ready
  std::chrono::steady_clock::time_point host_origin;  // trace only: the host clock at `origin`
  std::vector<event> load_end;      // trace only: the end of each panel copy, in issue order
  std::vector<std::size_t> load_bytes;
  std::vector<index_t> load_key;  // trace only: operand A: key + 1, B: -(key + 1)
  device_buffer<std::byte> memory;
  ooc_cache a, b;
  ooc_staging a_stage, b_stage;
  ooc_raw a_raw, b_raw;              // used where the plan transposes the operand (plan.stage_a / stage_b)
  std::vector<std::unique_ptr<ooc_scatter>> scatter;  // per task slot: its staged C block's way into C
  ooc_device_ctx() = default;
  ooc_device_ctx(const ooc_device_ctx&) = delete;
  ooc_device_ctx& operator=(const ooc_device_ctx&) = delete;
  // Copies the loader issued ahead for blocks that never ran (cancelled, failed, or taken by
  // another device) finish before the caches and the staging they use are freed.
  ~ooc_device_ctx() {
    if (loader) (void)cudaStreamSynchronize(loader->value());
    if (xposer) (void)cudaStreamSynchronize(xposer->value());
    (void)cudaGetLastError();
  }
};

template <class T, class TC>
struct ooc_job {
  using Acc = accumulator_t<T>;
  matrix_view<const T> a, b;  // executed frame
  matrix_view<TC> c;
  Acc alpha{}, beta{};
  bool read_c = false;
  bool a_pinned = false, b_pinned = false, c_pinned = false;
  bool c_staged_out = false;  // C blocks leave through the slot's pinned buffer (always when C is pageable)
  std::size_t scatter_threads = 0;  // the scatter pool's threads (staged C blocks)
  bool scatter_streaming = false;
  bool use_work = false;
  gemm_options opt;
  ooc_plan plan;
  std::vector<int> devices;
  std::vector<std::unique_ptr<ooc_device_ctx>> ctx;
  // Staged C blocks' writers (ooc_write_piece); after ctx, so drained and joined before its states go.
  std::unique_ptr<::spillway::detail::host_workers> scatter_pool;
  std::unique_ptr<ooc_queue> queue;
  std::vector<std::size_t> task_block;  // order index of task t (none: never started)
  bool traced = false;
  std::vector<std::unique_ptr<event>> ev_ready, ev_gemm, ev_out;  // trace only, per order index
  // Trace only: a staged block's end on the host clock (its host copy into C), per order index.
  // No timing event follows the slot's host function: one there, with the next block's ready
  // event, slowed the job by almost a third (docs/gemm.md, "ooc_job.cuh").
  std::vector<std::chrono::steady_clock::time_point> host_out;
  std::vector<int> ev_ctx;                                        // trace only: which context ran it
  static constexpr std::size_t none = static_cast<std::size_t>(-1);

  /// The panels' layout in the caches: the host's, or K-major where the plan transposes them.
  [[nodiscard]] layout a_dev_order() const { return plan.stage_a ? layout::row_major : a.order; }
  [[nodiscard]] layout b_dev_order() const { return plan.stage_b ? layout::col_major : b.order; }
  [[nodiscard]] index_t a_ld_dev() const {
    return a_dev_order() == layout::row_major ? ooc_r16(plan.kc) : ooc_r16(plan.bm);
  }
  [[nodiscard]] index_t b_ld_dev() const {
    return b_dev_order() == layout::row_major ? ooc_r16(plan.bn) : ooc_r16(plan.kc);
  }
  /// The pitch of a raw (MN-major) panel: its lines run along the panel's rows (A) / columns (B).
  [[nodiscard]] index_t raw_ld(bool is_a) const { return is_a ? ooc_r16(plan.bm) : ooc_r16(plan.bn); }
  [[nodiscard]] index_t c_ld_dev(index_t rows, index_t cols) const {
    return std::max<index_t>(1, c.order == layout::row_major ? cols : rows);
  }

  /// Row panels a range of the order touches (a device's range is a band of contiguous rows).
  [[nodiscard]] index_t rows_of_range(std::size_t first, std::size_t last) const {
    index_t lo = plan.order[first].i, hi = lo;
    for (std::size_t x = first; x < last; ++x) {
      lo = std::min(lo, plan.order[x].i);
      hi = std::max(hi, plan.order[x].i);
    }
    return hi - lo + 1;
  }

  void setup() {
    if (c_staged_out) scatter_pool = std::make_unique<::spillway::detail::host_workers>(std::max<std::size_t>(1, scatter_threads));
    if (traced) {
      const std::size_t n = plan.tasks();
      ev_ready.resize(n);
      ev_gemm.resize(n);
      ev_out.resize(n);
      ev_ctx.assign(n, -1);
      host_out.assign(n, std::chrono::steady_clock::time_point{});
    }
    for (int d : devices) {
      device_guard g(d);  // the context's events belong to device d
      auto c = std::make_unique<ooc_device_ctx>();
      c->device = d;
      c->setup = std::make_unique<stream>(d);
      c->loader = std::make_unique<stream>(d);
      if (plan.stage_a || plan.stage_b) c->xposer = std::make_unique<stream>(d);
      c->first = plan.device_first[ctx.size()];
      c->last = plan.device_first[ctx.size() + 1];
      c->cursor = c->first;
      if (c_staged_out)
        for (std::size_t i = 0; i < plan.slots; ++i) c->scatter.push_back(std::make_unique<ooc_scatter>(d));
      c->need_a.assign(static_cast<std::size_t>(plan.row_panels), 0);
      c->need_b.assign(static_cast<std::size_t>(plan.col_panels), 0);
      // Exactly the plan's reserved bytes, which run_tasks counted against the budget: A's cache,
      // B's cache, then the raw buffers.
      const std::size_t a_bytes = plan.a_slots * plan.a_panel_bytes,
                        b_bytes = plan.b_slots * plan.b_panel_bytes;
      c->memory = device_buffer<std::byte>(plan.reserved_bytes(), c->setup->view());
      c->a.init(c->memory.data(), plan.a_slots, plan.a_panel_bytes, plan.slots);
      c->b.init(c->memory.data() + a_bytes, plan.b_slots, plan.b_panel_bytes, plan.slots);
      std::byte* raw = c->memory.data() + a_bytes + b_bytes;
      for (int side = 0; side < 2; ++side) {
        if (!(side == 0 ? plan.stage_a : plan.stage_b)) continue;
        const std::size_t bytes = side == 0 ? plan.raw_a_bytes : plan.raw_b_bytes;
        for (std::byte*& buf : (side == 0 ? c->a_raw : c->b_raw).buf) {
          buf = raw;
          raw += bytes;
        }
      }
      // Pageable panels are staged a copy at a time: a whole panel, or for a transposed one a
      // piece (its raw buffer's size: a row-major bf16 B held whole stages 2 x 512 MiB, not 2 x
      // 2 GiB, which the pinned cache would not keep between jobs; pinning 4 GiB anew each call
      // made spillway.matmul of 32768² float16 NumPy arrays take 3.3 s).
      if (!a_pinned) {
        for (auto& s : c->a_stage.buf)
          s = ::spillway::detail::staging_block(plan.stage_a ? plan.raw_a_bytes : plan.a_panel_bytes);
      }
      if (!b_pinned) {
        for (auto& s : c->b_stage.buf)
          s = ::spillway::detail::staging_block(plan.stage_b ? plan.raw_b_bytes : plan.b_panel_bytes);
      }
      c->setup->synchronize();  // the caches are ready for every stream of the ring
      const index_t rows = c->first == c->last ? 0 : rows_of_range(c->first, c->last);
      c->resident = plan.k > 0 && plan.a_slots >= static_cast<std::size_t>(rows * plan.k_chunks) &&
                    plan.b_slots >= static_cast<std::size_t>(plan.col_panels * plan.k_chunks);
      if (traced) {
        c->origin = std::make_unique<event>(event::timing::enabled);
        c->origin->record(c->loader->view());
        c->origin->synchronize();  // the loader is idle: the host clock now is the origin's (within µs)
        c->host_origin = std::chrono::steady_clock::now();
      }
      ctx.push_back(std::move(c));
    }
  }

  /// Copies panel `key` into its cache slot on the device's loader stream (after every stream that
  /// read the slot's previous panel is past that read); the copy's end is the slot's ready event.
  /// A panel the plan transposes lands in a raw buffer instead (after the transpose that read that
  /// buffer last), and the transpose into the slot runs on the device's xposer stream, after the
  /// copy and the slot's readers; its end is the ready event, so the next copy overlaps it.
  void load(ooc_device_ctx& dc, bool is_a, index_t key, std::size_t& moved) {
    ooc_cache& cache = is_a ? dc.a : dc.b;
    ooc_staging& stage = is_a ? dc.a_stage : dc.b_stage;
    const bool pinned = is_a ? a_pinned : b_pinned;
    const bool xpose = is_a ? plan.stage_a : plan.stage_b;
    ooc_raw& raw = is_a ? dc.a_raw : dc.b_raw;
    const stream_view ls = dc.loader->view();
    const std::size_t cs = static_cast<std::size_t>(key) % cache.tag.size();
    T* const slot_ptr = reinterpret_cast<T*>(cache.base + cs * cache.panel_bytes);
    const index_t panel = key / plan.k_chunks, q = key % plan.k_chunks;
    const index_t k0 = q * plan.kc, kq = plan.chunk_k(q);
    const ooc_rect<T> src =
        is_a ? ooc_sub<T>(a, panel * plan.bm, std::min(plan.bm, plan.m - panel * plan.bm), k0, kq)
             : ooc_sub<T>(b, k0, kq, panel * plan.bn, std::min(plan.bn, plan.n - panel * plan.bn));
    const std::size_t es = sizeof(T);
    const auto lines = static_cast<std::size_t>(src.lines), len = static_cast<std::size_t>(src.len);
    // Lines [l0, l0 + n) of the panel into dst (pitch dld elements) on the loader stream.
    auto copy_in = [&](T* dst, index_t dld, std::size_t l0, std::size_t n) {
      if (n == 0 || len == 0) return;
      const T* from = src.first + l0 * static_cast<std::size_t>(src.ld);
      if (pinned) {
        SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaMemcpy2DAsync(
            dst, static_cast<std::size_t>(dld) * es, from, static_cast<std::size_t>(src.ld) * es, len * es, n,
            cudaMemcpyHostToDevice, ls.value())));
      } else {
        const int f = stage.next;
        stage.next ^= 1;
        stage.done[f].synchronize();  // the previous copy out of this staging buffer has finished
        ooc_copy_lines(stage.buf[f].data(), static_cast<std::size_t>(dld) * es, from,
                       static_cast<std::size_t>(src.ld) * es, len * es, n);
        SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaMemcpyAsync(
            dst, stage.buf[f].data(), ((n - 1) * static_cast<std::size_t>(dld) + len) * es,
            cudaMemcpyHostToDevice, ls.value())));
        stage.done[f].record(ls);
      }
      moved += n * len * es;
    };
    stream_view done = ls;
    if (!xpose) {
      for (auto& e : cache.used[cs]) ls.wait(e);
      copy_in(slot_ptr, is_a ? a_ld_dev() : b_ld_dev(), 0, lines);
    } else {
      // The raw panel has `lines` = k-chunk lines of `len` = rows (A) / columns (B) elements. It
      // lands in pieces of whole lines, alternating between the two raw buffers; each piece is
      // transposed on the xposer stream into its k columns of the slot (after the slot's readers)
      // while the next one lands.
      const index_t rld = raw_ld(is_a);
      const auto per = static_cast<std::size_t>(std::max<index_t>(1, is_a ? plan.raw_a_lines : plan.raw_b_lines));
      done = dc.xposer->view();
      for (auto& e : cache.used[cs]) done.wait(e);
      for (std::size_t l0 = 0; l0 < lines; l0 += per) {
        const std::size_t n = std::min(per, lines - l0);
        const std::size_t rf = raw.next;
        raw.next = (raw.next + 1) % ooc_raw_buffers;
        ls.wait(raw.free[rf]);
        T* const rbuf = reinterpret_cast<T*>(raw.buf[rf]);
        copy_in(rbuf, rld, l0, n);
        raw.landed[rf].record(ls);
        done.wait(raw.landed[rf]);
        ooc_transpose<T>(rbuf, rld, static_cast<index_t>(n), static_cast<index_t>(len), slot_ptr + l0,
                         is_a ? a_ld_dev() : b_ld_dev(), done);
        SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaGetLastError()));
        raw.free[rf].record(done);
      }
    }
    cache.ready[cs].record(done);
    cache.tag[cs] = key;
    if (traced) {
      dc.load_end.emplace_back(event::timing::enabled);
      dc.load_end.back().record(done);
      dc.load_bytes.push_back(lines * len * es);
      dc.load_key.push_back(is_a ? key + 1 : -(key + 1));
    }
  }

  /// Panel `key` present for stream s (copied now if it is not cached); its device address.
  const T* ensure(ooc_device_ctx& dc, bool is_a, index_t key, stream_view s, std::size_t& moved) {
    ooc_cache& cache = is_a ? dc.a : dc.b;
    const std::size_t cs = static_cast<std::size_t>(key) % cache.tag.size();
    if (cache.tag[cs] != key) load(dc, is_a, key, moved);
    s.wait(cache.ready[cs]);
    return reinterpret_cast<const T*>(cache.base + cs * cache.panel_bytes);
  }

  /// Requests the panels of the blocks after `idx` in the device's range, in order, while each
  /// one's cache slot holds a panel that no block between idx and it still needs.
  void prefetch(ooc_device_ctx& dc, std::size_t idx, std::size_t& moved) {
    if (idx < dc.first || idx >= dc.last || plan.k == 0) return;  // a block taken from another device
    if (dc.cursor <= idx) dc.cursor = idx + 1;
    // need_a[i] / need_b[j]: how many blocks in (idx, cursor) read A row panel i / B column panel j.
    auto window = [&](int d) {
      for (std::size_t x = idx + 1; x < dc.cursor; ++x) {
        dc.need_a[static_cast<std::size_t>(plan.order[x].i)] += d;
        for (index_t j = plan.first_panel(plan.order[x]); j < plan.last_panel(plan.order[x]); ++j)
          dc.need_b[static_cast<std::size_t>(j)] += d;
      }
    };
    window(1);
    // A pageable panel is staged by host threads inside this call: a few per block keep the
    // scheduler's next enqueue (and so the GPU) from waiting behind a long run of host copies.
    std::size_t staged = 0;
    // With every panel resident nothing is ever evicted: the loader copies all of them back to
    // back from the first block on, in the order the blocks first need them.
    const std::size_t ahead = dc.resident ? dc.last : ooc_lookahead;
    while (dc.cursor < dc.last && dc.cursor - idx <= ahead && staged < ooc_staged_per_block) {
      const ooc_block nb = plan.order[dc.cursor];
      bool ok = true;
      // The block's own panels on each side: A row panel i; B panels [first, last) of its group.
      const index_t own_lo[2] = {nb.i, plan.first_panel(nb)}, own_hi[2] = {nb.i + 1, plan.last_panel(nb)};
      for (int side = 0; side < 2 && ok; ++side) {
        const bool is_a = side == 0;
        const ooc_cache& cache = is_a ? dc.a : dc.b;
        // More keys than cache slots: the block's own panels evict each other, so it copies them
        // in turn itself (a prefetch here would be evicted unused and copied again).
        if ((own_hi[side] - own_lo[side]) * plan.k_chunks > static_cast<index_t>(cache.tag.size())) continue;
        const std::vector<int>& need = is_a ? dc.need_a : dc.need_b;
        for (index_t own = own_lo[side]; own < own_hi[side] && ok; ++own) {
          for (index_t q = 0; q < plan.k_chunks && ok; ++q) {
            const index_t key = own * plan.k_chunks + q;
            const index_t held = cache.tag[static_cast<std::size_t>(key) % cache.tag.size()];
            if (held == key || held < 0) continue;
            const index_t held_panel = held / plan.k_chunks;
            // Not while a block before this one still reads the held panel, nor when two of this
            // block's own keys share the slot (the block then copies them in turn itself).
            const bool held_own = held_panel >= own_lo[side] && held_panel < own_hi[side];
            if (held_own || need[static_cast<std::size_t>(held_panel)] > 0) ok = false;
          }
        }
      }
      if (!ok) break;
      for (int side = 0; side < 2; ++side) {
        const bool is_a = side == 0;
        ooc_cache& cache = is_a ? dc.a : dc.b;
        if ((own_hi[side] - own_lo[side]) * plan.k_chunks > static_cast<index_t>(cache.tag.size())) continue;
        for (index_t q = 0; q < plan.k_chunks; ++q) {
          for (index_t own = own_lo[side]; own < own_hi[side]; ++own) {
            const index_t key = own * plan.k_chunks + q;
            if (cache.tag[static_cast<std::size_t>(key) % cache.tag.size()] != key) {
              load(dc, is_a, key, moved);
              if (!(is_a ? a_pinned : b_pinned)) ++staged;
            }
          }
        }
      }
      ++dc.need_a[static_cast<std::size_t>(nb.i)];
      for (index_t j = own_lo[1]; j < own_hi[1]; ++j) ++dc.need_b[static_cast<std::size_t>(j)];
      ++dc.cursor;
    }
    window(-1);
  }

  /// A forced split's workspace for the block GEMMs of `slot`: the slot's own (the budget counted
  /// it). The panels are K-major and aligned on the tensor-core paths (a_dev_order, b_dev_order),
  /// so with it the GEMMs allocate nothing.
  [[nodiscard]] lent_workspace split_workspace(const task_slot& slot) const {
    if (plan.split_k_bytes == 0) return {};
    return {slot.device<std::byte>(plan.split_k_buffer()), plan.split_k_bytes};
  }

  void enqueue(std::size_t t, task_slot& slot, stream_view s) {
    SPILLWAY_FAULT_TASK_SCOPE(t, slot.device());  // counts this block's copies and launches (tests only)
    const std::size_t di = slot.worker();
    ooc_device_ctx& dc = *ctx[di];
    const std::size_t idx = queue->pop(di);
    task_block[t] = idx;
    const ooc_block blk = plan.order[idx];
    const index_t r0 = blk.i * plan.bm, rows = plan.block_rows(blk);
    const index_t c0 = plan.block_col0(blk), cols = plan.block_cols(blk);
    const index_t ldc = c_ld_dev(rows, cols);
    TC* cdev = slot.device<TC>(0);
    const matrix_view<TC> cblock{cdev, rows, cols, ldc, c.order, 0};
    const std::size_t cb = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols) * sizeof(TC);
    std::size_t moved = 0;
    const ooc_rect<TC> csub = ooc_sub<TC>(matrix_view<const TC>(c), r0, rows, c0, cols);
    const std::size_t c_line = static_cast<std::size_t>(csub.len) * sizeof(TC);
    const std::size_t c_pitch = static_cast<std::size_t>(ldc) * sizeof(TC);
    if (read_c) {
      if (c_pinned) {
        SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(
            cudaMemcpy2DAsync(cdev, c_pitch, csub.first, static_cast<std::size_t>(c.ld) * sizeof(TC), c_line,
                              static_cast<std::size_t>(csub.lines), cudaMemcpyHostToDevice, s.value())));
      } else {
        TC* st = slot.pinned<TC>(0);
        ooc_copy_lines(st, c_pitch, csub.first, static_cast<std::size_t>(c.ld) * sizeof(TC), c_line,
                       static_cast<std::size_t>(csub.lines));
        SPILLWAY_CUDA_TRY(
            SPILLWAY_FAULT_CALL(cudaMemcpyAsync(cdev, st, cb, cudaMemcpyHostToDevice, s.value())));
      }
      moved += cb;
    }
    gemm_options o = opt;
    o.batch_count = 1;
    Acc* work = use_work ? slot.device<Acc>(plan.acc_buffer()) : nullptr;
    const lent_workspace ws = split_workspace(slot);
    auto stamp = [&](std::vector<std::unique_ptr<event>>& evs) {
      if (!traced) return;
      evs[idx] = std::make_unique<event>(event::timing::enabled);
      evs[idx]->record(s);
      ev_ctx[idx] = static_cast<int>(di);
    };
    if (plan.k == 0) {
      stamp(ev_ready);
      gemm_async(s, alpha, matrix_view<const T>{nullptr, rows, 0, 1, layout::row_major, 0},
                 matrix_view<const T>{nullptr, 0, cols, 1, layout::col_major, 0}, beta, cblock, o);
      SPILLWAY_FAULT_LAUNCHED("gemm_async of a block (k = 0)");
    }
    // One GEMM per k chunk and B panel of the block's group, each after only its own panels: with
    // a group of several panels the first GEMMs run while the later panels are still arriving.
    // The C sub-block of panel j starts at column (j - first) * bn of the block.
    auto sub = [&](auto* base, index_t off, index_t w) {
      using E = std::remove_pointer_t<decltype(base)>;
      E* p0 = base == nullptr ? nullptr
                              : base + (c.order == layout::row_major ? off : off * static_cast<index_t>(ldc));
      return matrix_view<E>{p0, rows, w, ldc, c.order, 0};
    };
    for (index_t q = 0; q < (plan.k == 0 ? 0 : plan.k_chunks); ++q) {
      const index_t kq = plan.chunk_k(q);
      const T* ap = ensure(dc, true, blk.i * plan.k_chunks + q, s, moved);
      const matrix_view<const T> av{ap, rows, kq, a_ld_dev(), a_dev_order(), 0};
      for (index_t j = plan.first_panel(blk); j < plan.last_panel(blk); ++j) {
        const T* bp = ensure(dc, false, j * plan.k_chunks + q, s, moved);
        if (q == 0 && j == plan.first_panel(blk)) stamp(ev_ready);
        const index_t off = (j - plan.first_panel(blk)) * plan.bn, w = plan.panel_cols(j);
        const matrix_view<const T> bv{bp, kq, w, b_ld_dev(), b_dev_order(), 0};
        if (use_work) {
          enqueue_gemm(s, alpha, av, bv, q == 0 ? Acc(0) : Acc(1), sub(work, off, w), o, identity{}, ws);
        } else {
          enqueue_gemm(s, alpha, av, bv, q == 0 ? beta : Acc(1), sub(cdev, off, w), o, identity{}, ws);
        }
        SPILLWAY_FAULT_LAUNCHED("gemm_async of a block's k chunk");
        dc.b.used[static_cast<std::size_t>(j * plan.k_chunks + q) % dc.b.tag.size()][slot.index()].record(s);
      }
      dc.a.used[static_cast<std::size_t>(blk.i * plan.k_chunks + q) % dc.a.tag.size()][slot.index()].record(
          s);
    }
    if (use_work) {
      const index_t count = rows * cols;
      const unsigned grid = grid_blocks(count, 256, 4096);
      ooc_combine_kernel<TC, Acc><<<grid, 256, 0, s.value()>>>(work, cdev, count, beta, read_c);
      SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaGetLastError()));
    }
    stamp(ev_gemm);
    if (!c_staged_out) {
      SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaMemcpy2DAsync(
          const_cast<TC*>(csub.first), static_cast<std::size_t>(c.ld) * sizeof(TC), cdev, c_pitch, c_line,
          static_cast<std::size_t>(csub.lines), cudaMemcpyDeviceToHost, s.value())));
    } else {
      // In pieces of whole lines, each 1-D into the slot's pinned buffer (the device block's own
      // layout) with an event after it; each piece goes to the scatter pool, whose threads write it
      // into C as soon as it lands. The slot's stream then waits for all of them (ooc_scatter::wait).
      ooc_scatter& sc = *dc.scatter[slot.index()];  // its previous block is in C (the slot was free)
      const std::size_t lines = static_cast<std::size_t>(csub.lines);
      const std::size_t pieces = std::min(ooc_scatter_pieces, lines);
      const std::size_t per = (lines + pieces - 1) / pieces;
      auto* stage = reinterpret_cast<unsigned char*>(slot.pinned<TC>(0));
      const auto* dev = reinterpret_cast<const unsigned char*>(cdev);
      ooc_piece piece[ooc_scatter_pieces];
      std::size_t issued = 0;
      for (std::size_t l0 = 0; l0 < lines; l0 += per, ++issued) {
        const std::size_t n = std::min(per, lines - l0);
        SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaMemcpyAsync(stage + l0 * c_pitch, dev + l0 * c_pitch,
                                                              n * c_pitch, cudaMemcpyDeviceToHost, s.value())));
        SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaEventRecord(sc.landed[issued], s.value())));
        ooc_piece& p = piece[issued];
        p.owner = &sc;
        p.landed = sc.landed[issued];
        p.dst = reinterpret_cast<unsigned char*>(const_cast<TC*>(csub.first)) +
                l0 * static_cast<std::size_t>(c.ld) * sizeof(TC);
        p.dpitch = static_cast<std::size_t>(c.ld) * sizeof(TC);
        p.src = stage + l0 * c_pitch;
        p.spitch = c_pitch;
        p.width = c_line;
        p.lines = n;
        p.streaming = scatter_streaming;
      }
#if defined(SPILLWAY_FAULT_INJECTION)
      // One pool call per block, as the host copies of pageable panels count: its last piece throws.
      if (::spillway::fault::detail::staging_call_fault()) piece[issued - 1].fail = true;
#endif
      {
        std::lock_guard<std::mutex> l(sc.m);
        sc.left = issued;
        sc.error = nullptr;
        sc.finished = traced ? &host_out[idx] : nullptr;
      }
      std::size_t submitted = 0;
      try {
        for (; submitted < issued; ++submitted) {
          scatter_pool->submit([p = piece[submitted]] { ooc_write_piece(p); });
        }
        SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaLaunchHostFunc(s.value(), &ooc_scatter::wait, &sc)));
      } catch (...) {
        {
          std::lock_guard<std::mutex> l(sc.m);
          sc.left -= issued - submitted;  // never queued
        }
        sc.wait_all();  // the queued pieces read the slot's buffer: they finish before the task fails
        throw;
      }
    }
    moved += cb;
    if (!c_staged_out) stamp(ev_out);
    prefetch(dc, idx, moved);
    slot.add_bytes_moved(moved);
  }

  /// The trace's times (after the job: every recorded event has completed or never will).
  void read_trace(ooc_trace& tr) const {
    auto ms = [](const event& from, const event* to) {
      float v = 0;
      if (to == nullptr || cudaEventElapsedTime(&v, from.value(), to->value()) != cudaSuccess) {
        (void)cudaGetLastError();
        return std::numeric_limits<float>::quiet_NaN();
      }
      return v;
    };
    for (std::size_t d = 0; d < ctx.size(); ++d) {
      const ooc_device_ctx& dc = *ctx[d];
      device_guard g(dc.device);
      for (std::size_t x = 0; x < dc.load_end.size(); ++x) {
        tr.load_device.push_back(dc.device);
        const index_t key = dc.load_key[x] > 0 ? dc.load_key[x] - 1 : -dc.load_key[x] - 1;
        tr.load_operand.push_back(dc.load_key[x] > 0 ? 'A' : 'B');
        tr.load_panel.push_back(key / plan.k_chunks);
        tr.load_chunk.push_back(key % plan.k_chunks);
        tr.load_bytes.push_back(dc.load_bytes[x]);
        tr.load_end_ms.push_back(ms(*dc.origin, &dc.load_end[x]));
      }
    }
    const std::size_t n = plan.tasks();
    tr.block_device.assign(n, -1);
    tr.ready_ms.assign(n, std::numeric_limits<float>::quiet_NaN());
    tr.gemm_end_ms = tr.ready_ms;
    tr.out_end_ms = tr.ready_ms;
    for (std::size_t x = 0; x < n; ++x) {
      if (ev_ctx[x] < 0) continue;
      const ooc_device_ctx& dc = *ctx[static_cast<std::size_t>(ev_ctx[x])];
      device_guard g(dc.device);
      tr.block_device[x] = dc.device;
      tr.ready_ms[x] = ms(*dc.origin, ev_ready[x].get());
      tr.gemm_end_ms[x] = ms(*dc.origin, ev_gemm[x].get());
      if (c_staged_out) {
        if (host_out[x] != std::chrono::steady_clock::time_point{})
          tr.out_end_ms[x] = static_cast<float>(
              std::chrono::duration<double, std::milli>(host_out[x] - dc.host_origin).count());
      } else {
        tr.out_end_ms[x] = ms(*dc.origin, ev_out[x].get());
      }
    }
  }

  /// Task t's C block is in C (its stream, host copy included, has passed the slot's event); a
  /// staged block whose host copy threw fails its task here.
  void complete(std::size_t, task_slot& slot) {
    if (!c_staged_out) return;
    ooc_scatter& sc = *ctx[slot.worker()]->scatter[slot.index()];
    std::exception_ptr e;
    {
      std::lock_guard<std::mutex> l(sc.m);
      e = std::exchange(sc.error, nullptr);
    }
    if (e) std::rethrow_exception(e);
  }

  [[nodiscard]] c_block caller_block(std::size_t t, bool transposed) const {
    if (task_block[t] == none) return {};
    const ooc_block blk = plan.order[task_block[t]];
    c_block r{blk.i * plan.bm, plan.block_rows(blk), plan.block_col0(blk), plan.block_cols(blk)};
    if (transposed) r = {r.col0, r.cols, r.row0, r.rows};
    return r;
  }
};

/// ooc_compute_estimate of the product on the slowest of `devices` (its SM count, peak clock and
/// compute capability read from the runtime), for the element type and the resolved path.
template <class T>
double ooc_estimate(index_t m, index_t n, index_t k, const gemm_options& o, gemm_path path,
                    const std::vector<int>& devices) {
  const ooc_arith a = ooc_arith_of(gemm_type_info_of<T>().arith, o.math == math_mode::tf32);
  const ooc_unit u = path == gemm_path::wgmma      ? ooc_unit::wgmma
                     : path == gemm_path::mma_sync ? ooc_unit::mma_sync
                                                   : ooc_unit::simt;
  double worst = 0;
  for (int d : devices) {
    const ooc_device_shape shape{compute_capability(d), multiprocessor_count(d), clock_rate_khz(d) * 1e3};
    worst = std::max(worst, ooc_compute_estimate(m, n, k, a, u, shape));
  }
  return worst;
}

/// Page-locks a pageable operand of the job for the call where `wanted` (ooc_options::lock).
template <class T>
host_registration ooc_register(const matrix_view<const T>& v, bool wanted, bool read_only) {
  const index_t fp = footprint(v);
  if (!wanted || fp == 0) return {};
  return try_register_host(v.data, static_cast<std::size_t>(fp) * sizeof(T), read_only);
}

template <class T>
bool ooc_page_locked(host_memory mode, const matrix_view<const T>& v) {
  const index_t fp = footprint(v);
  if (fp == 0) return true;
  return ::spillway::detail::resolve_memory(mode, v.data, static_cast<std::size_t>(fp) * sizeof(T)) ==
         host_memory::page_locked;
}

}  // namespace spillway::gemm::detail
