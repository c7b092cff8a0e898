// spillway/gram/out_of_core.cuh — the out-of-core Gram driver: row strips of the output as tasks
// of spillway's scheduler (run_tasks), the column operand resident on each device (or streamed
// panel by panel when it does not fit), sinks that copy only what they keep.
//
// Per strip I (rows [I0, I1) of A), on one slot's stream:
//   operand   A·Aᵀ: the panels I.. of A are copied once per device (the first strip that needs
//             one copies it and records an event; later strips wait on it); strips run from the
//             last to the first, so the first strips need the fewest panels and the device→host
//             copies start early. A·Bᵀ: the strip's A panel, B resident. Streamed mode: the
//             strip's panel, then each column panel in turn.
//   compute   bit_gemm_async over tiles i ≤ j (A·Aᵀ) with an epilogue that writes the strip's
//             output layout directly (packed triangle, full rows + mirrored column strip, scores).
//   sink      dense: straight device→host copies into the caller's matrix (cudaMemcpy2DAsync
//             where rows are strided) while the next strip computes on another slot; top-k: the
//             strip's rows and (mirrored) columns merged into per-row lists on the device;
//             threshold: compacted on the device, only the kept entries copied.
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/device_buffer.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/memory_budget.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/gram/bit_matrix.hpp>
#include <spillway/gram/detail/kernels.cuh>
#include <spillway/gram/detail/sink_kernels.cuh>
#include <spillway/gram/device_bit_matrix.cuh>
#include <spillway/gram/epilogue.hpp>
#include <spillway/gram/host_gram.hpp>
#include <spillway/gram/kernel_path.hpp>
#include <spillway/gram/plan.hpp>
#include <spillway/pipeline/job.hpp>
#include <spillway/pipeline/task_pipeline.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace spillway::gram {

/// What a Gram job did (filled when gram_options::report is set).
struct gram_report {
  job_report job;
  gram_plan plan;
  std::size_t budget_bytes = 0;
};

/// Options shared by every Gram entry point.
struct gram_options {
  metric epilogue = metric::counts;
  score_options scores{};
  /// Tile kernel (automatic = fastest the device and build can run).
  kernel_path path = kernel_path::automatic;
  /// Device memory per device. Default: memory_budget::default_for_all(devices) (80% of free).
  std::optional<memory_budget> budget;
  /// Devices to use. Empty: every visible device.
  std::vector<int> devices;
  /// Cap on rows per strip (0: automatic). Tests use it to force many strips.
  std::int64_t max_panel_rows = 0;
  /// Strips in flight per device (one stream each): copy-in, compute and copy-out overlap.
  std::size_t slots_per_device = 3;
  /// Called as strips complete; return false to cancel (see job_report::cancelled).
  progress_callback progress;
  /// If set, receives the plan and the scheduler's report.
  gram_report* report = nullptr;
  /// With no GPU (and `devices` empty): true runs the host implementation (host_gram_dense /
  /// host_gram_topk / host_gram_threshold, multi-threaded with OpenMP; the report then lists no
  /// devices); false (the default) throws no_gpu_error naming this option.
  bool host_fallback = false;
};

/// One finished strip of the Gram matrix, handed to a gram_strips callback: rows
/// [first_row, first_row + rows) and columns [first_col, first_col + cols), row-major with `cols`
/// values per row, in host memory that is valid only during the callback (copy what you keep).
/// For A·Aᵀ a strip holds the columns from its own first row on (first_col == first_row: the
/// upper triangle and the diagonal block, complete); by symmetry the rest of those rows is in
/// earlier strips' columns. For A·Bᵀ, and on the host fallback, first_col is 0 and cols is all of
/// them.
template <class V>
struct gram_strip {
  std::int64_t first_row = 0;
  std::int64_t rows = 0;
  std::int64_t first_col = 0;
  std::int64_t cols = 0;
  const V* values = nullptr;
  /// Entry (i, j) in the matrix's own indices (first_row <= i < first_row + rows, likewise j).
  [[nodiscard]] V at(std::int64_t i, std::int64_t j) const noexcept {
    return values[(i - first_row) * cols + (j - first_col)];
  }
};

/// One finished strip handed to a gram_device_strips callback: the same rows and columns as
/// gram_strip, but `values` is DEVICE memory of `device` (row-major, `cols` values per row), and
/// the callback runs before any device→host copy, on the strip's `stream`. Work the callback
/// enqueues on `stream` sees the finished strip; the buffer is reused for a later strip only after
/// everything enqueued on `stream` before the callback returned has completed, so a kernel or a
/// copy the callback enqueues there is safe without any synchronization.
template <class V>
struct gram_device_strip {
  std::int64_t first_row = 0;
  std::int64_t rows = 0;
  std::int64_t first_col = 0;
  std::int64_t cols = 0;
  const V* values = nullptr;
  int device = 0;
  stream_view stream;
  /// Address of entry (i, j) (global indices) in device memory: dereference it on the device only.
  [[nodiscard]] const V* at(std::int64_t i, std::int64_t j) const noexcept {
    return values + (i - first_row) * cols + (j - first_col);
  }
};

namespace detail {

struct gram_device_ctx {
  int device = 0;
  std::unique_ptr<stream> setup;
  device_buffer<std::uint32_t> resident;
  device_buffer<std::int32_t> pop_a, pop_b;  // pop_b unused for A·Aᵀ
  std::vector<char> uploaded;
  std::vector<event> ready;
  std::mutex m;
  device_buffer<std::byte> topk_state;  // slots x rows_a x k entries
};

template <class V>
struct strip_sparse {
  std::vector<std::int64_t> offsets;  // rows + 1
  std::vector<std::int32_t> cols;
  std::vector<V> vals;
};

/// Everything a job's tasks need; the sink-specific parts are set by the entry point.
template <class V>
struct gram_job {
  bit_matrix_view a, b;
  bool symmetric = true;
  sink_kind sink = sink_kind::dense_packed;
  gram_options opt;
  // dense sinks
  V* out = nullptr;
  std::int64_t ldc = 0;
  bool with_diagonal = true;  // dense_packed: upper_packed (true) or condensed (false)
  // per-strip callback (sink dense_full for A·Aᵀ or dense_rect for A·Bᵀ, delivered through the
  // slot's pinned staging instead of into `out`)
  std::function<void(const gram_strip<V>&)> on_strip;
  // the device form: called inside the strip's enqueue with the device buffer, no copy
  std::function<void(const gram_device_strip<V>&)> on_device_strip;
  // top-k / threshold
  topk_options topk{};
  threshold_options thr{};
  // results
  gram_plan plan;
  std::vector<std::unique_ptr<gram_device_ctx>> ctx;
  std::vector<strip_sparse<V>> strips;
  job_report report;
};

template <class V>
constexpr std::size_t topk_entry_bytes() { return sizeof(topk_entry<V>); }

inline std::size_t round8(std::size_t x) { return (x + 7) / 8 * 8; }

template <class V, class F>
void with_larger(bool larger, F&& f) {
  if (larger) f(std::true_type{});
  else f(std::false_type{});
}

template <class V>
void setup_devices(gram_job<V>& job, const std::vector<int>& devices) {
  const gram_plan& p = job.plan;
  const std::int64_t ld = job.a.ld_words;
  const std::int64_t rows_b = job.symmetric ? job.a.rows : job.b.rows;
  const bit_matrix_view& col_op = job.symmetric ? job.a : job.b;
  for (int d : devices) {
    auto c = std::make_unique<gram_device_ctx>();
    c->device = d;
    device_guard g(d);
    c->setup = std::make_unique<stream>(d);
    const stream_view s = c->setup->view();
    c->pop_a = device_buffer<std::int32_t>(static_cast<std::size_t>(job.a.rows), s);
    if (!job.symmetric) c->pop_b = device_buffer<std::int32_t>(static_cast<std::size_t>(rows_b), s);
    if (p.resident) {
      c->resident = device_buffer<std::uint32_t>(static_cast<std::size_t>(rows_b * ld), s);
      c->uploaded.assign(static_cast<std::size_t>(p.b_panels), 0);
      c->ready.resize(static_cast<std::size_t>(p.b_panels));
    } else {
      // Streamed: popcounts of the column operand are computed once on the host and copied.
      const std::vector<std::int32_t> pc = row_popcounts(col_op);
      std::int32_t* dst = job.symmetric ? c->pop_a.data() : c->pop_b.data();
      if (!pc.empty())
        SPILLWAY_CUDA_TRY(cudaMemcpyAsync(dst, pc.data(), pc.size() * 4u, cudaMemcpyHostToDevice, s.value()));
      s.synchronize();
    }
    if (job.sink == sink_kind::topk) {
      const std::size_t n = p.slots * static_cast<std::size_t>(job.a.rows) * static_cast<std::size_t>(job.topk.k);
      c->topk_state = device_buffer<std::byte>(n * topk_entry_bytes<V>(), s);
      if (n > 0) {
        with_larger<V>(is_similarity(job.opt.epilogue), [&](auto L) {
          topk_init_kernel<V, decltype(L)::value><<<warp_grid(static_cast<std::int64_t>(n) / 8 + 1), 256, 0, s.value()>>>(
              reinterpret_cast<topk_entry<V>*>(c->topk_state.data()), static_cast<std::int64_t>(n));
        });
        SPILLWAY_CUDA_TRY(cudaGetLastError());
      }
    }
    s.synchronize();
    job.ctx.push_back(std::move(c));
  }
}

/// Makes panels [first, last) of the resident operand available on `s` (copying those this
/// device does not have yet, highest first, with their popcounts).
template <class V>
void ensure_panels(gram_job<V>& job, gram_device_ctx& c, std::int64_t first, std::int64_t last, stream_view s) {
  const bit_matrix_view& op = job.symmetric ? job.a : job.b;
  const std::int64_t P = job.plan.panel_rows, ld = op.ld_words;
  std::int32_t* pop = job.symmetric ? c.pop_a.data() : c.pop_b.data();
  std::lock_guard<std::mutex> l(c.m);
  for (std::int64_t J = last - 1; J >= first; --J) {
    const auto j = static_cast<std::size_t>(J);
    if (c.uploaded[j]) {
      s.wait(c.ready[j]);
      continue;
    }
    const std::int64_t r0 = J * P, r1 = std::min(r0 + P, op.rows);
    std::uint32_t* dst = c.resident.data() + r0 * ld;
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(dst, op.words + r0 * ld, static_cast<std::size_t>((r1 - r0) * ld) * 4u,
                                      cudaMemcpyHostToDevice, s.value()));
    row_popcounts_async(bit_matrix_view{dst, r1 - r0, op.cols, ld}, pop + r0, s);
    c.ready[j].record(s);
    c.uploaded[j] = 1;
  }
}

template <class V>
void enqueue_strip(gram_job<V>& job, std::size_t t, task_slot& slot, stream_view s) {
  const gram_plan& p = job.plan;
  gram_device_ctx* cp = nullptr;
  for (auto& c : job.ctx)
    if (c->device == slot.device()) cp = c.get();
  gram_device_ctx& c = *cp;
  const bool sym = job.symmetric;
  const std::int64_t n = job.a.rows;
  const std::int64_t rows_b = sym ? n : job.b.rows;
  const std::int64_t ld = job.a.ld_words;
  const std::int64_t P = p.panel_rows;
  const std::int64_t I = sym ? p.strips - 1 - static_cast<std::int64_t>(t) : static_cast<std::int64_t>(t);
  const std::int64_t I0 = I * P, I1 = std::min(I0 + P, n), PI = I1 - I0;
  const std::int64_t W = sym ? n - I0 : rows_b;
  const std::int64_t col0 = sym ? I0 : 0;
  std::size_t next = (job.sink == sink_kind::dense_full || job.sink == sink_kind::threshold) ? 2 : 1;
  const std::size_t a_idx = !sym ? next++ : 0;
  const std::size_t own_idx = (sym && !p.resident) ? next++ : 0;
  const std::size_t str_idx = !p.resident ? next++ : 0;
  const std::size_t row_bytes = static_cast<std::size_t>(ld) * 4u;

  std::int32_t* pop_a = c.pop_a.data();
  std::int32_t* pop_b = sym ? c.pop_a.data() : c.pop_b.data();
  const scorer sc{job.opt.epilogue, job.opt.scores.jaccard_empty, job.opt.scores.cosine_zero};

  // The strip's rows of A.
  const std::uint32_t* a_dev = nullptr;
  std::size_t moved = 0;
  if (!sym) {
    auto* dst = slot.device<std::uint32_t>(a_idx);
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(dst, job.a.words + I0 * ld, static_cast<std::size_t>(PI) * row_bytes,
                                      cudaMemcpyHostToDevice, s.value()));
    moved += static_cast<std::size_t>(PI) * row_bytes;
    row_popcounts_async(bit_matrix_view{dst, PI, job.a.cols, ld}, pop_a + I0, s);
    a_dev = dst;
    if (p.resident) ensure_panels(job, c, 0, p.b_panels, s);
  } else if (p.resident) {
    ensure_panels(job, c, I, p.strips, s);
    a_dev = c.resident.data() + I0 * ld;
  } else {
    auto* dst = slot.device<std::uint32_t>(own_idx);
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(dst, job.a.words + I0 * ld, static_cast<std::size_t>(PI) * row_bytes,
                                      cudaMemcpyHostToDevice, s.value()));
    moved += static_cast<std::size_t>(PI) * row_bytes;
    a_dev = dst;
  }

  auto gemm = [&](auto epi) {
    if (p.resident) {
      bit_gemm_args g;
      g.a = a_dev;
      g.a_rows = PI;
      g.b = c.resident.data() + col0 * ld;
      g.b_rows = W;
      g.ld_words = ld;
      g.a_row0 = I0;
      g.b_row0 = col0;
      g.upper_only = sym;
      bit_gemm_async(g, epi, job.opt.path, s);
      return;
    }
    const bit_matrix_view& op = sym ? job.a : job.b;
    for (std::int64_t J = sym ? I : 0; J < p.b_panels; ++J) {
      const std::int64_t J0 = J * P, J1 = std::min(J0 + P, rows_b);
      const std::uint32_t* bj = a_dev;
      if (!(sym && J == I)) {
        auto* dst = slot.device<std::uint32_t>(str_idx);
        SPILLWAY_CUDA_TRY(cudaMemcpyAsync(dst, op.words + J0 * ld, static_cast<std::size_t>(J1 - J0) * row_bytes,
                                          cudaMemcpyHostToDevice, s.value()));
        moved += static_cast<std::size_t>(J1 - J0) * row_bytes;
        bj = dst;
      }
      bit_gemm_args g;
      g.a = a_dev;
      g.a_rows = PI;
      g.b = bj;
      g.b_rows = J1 - J0;
      g.ld_words = ld;
      g.a_row0 = I0;
      g.b_row0 = J0;
      g.upper_only = sym;
      bit_gemm_async(g, epi, job.opt.path, s);
    }
  };

  const std::size_t vb = sizeof(V);
  switch (job.sink) {
    case sink_kind::dense_packed: {
      V* u = slot.device<V>(0);
      const bool wd = job.with_diagonal;
      const std::int64_t base = wd ? packed_row_offset(n, I0) : condensed_row_offset(n, I0);
      const std::int64_t end = I1 == n ? layout_size(wd ? triangle_layout::upper_packed : triangle_layout::condensed, n)
                                       : (wd ? packed_row_offset(n, I1) : condensed_row_offset(n, I1));
      gemm(packed_strip_epilogue<V>{u, n, base, wd, pop_a, sc});
      if (end > base) {
        SPILLWAY_CUDA_TRY(cudaMemcpyAsync(job.out + base, u, static_cast<std::size_t>(end - base) * vb,
                                          cudaMemcpyDeviceToHost, s.value()));
        moved += static_cast<std::size_t>(end - base) * vb;
      }
      break;
    }
    case sink_kind::dense_full: {
      V* u = slot.device<V>(0);
      V* tt = slot.device<V>(1);
      gemm(full_strip_epilogue<V>{u, tt, I0, I1, W, PI, pop_a, sc});
      if (job.on_device_strip) {
        job.on_device_strip(gram_device_strip<V>{I0, PI, I0, W, u, slot.device(), s});
        break;
      }
      if (job.on_strip) {  // rows I0..I1, columns I0..n, to the slot's staging for on_complete
        SPILLWAY_CUDA_TRY(cudaMemcpyAsync(slot.pinned<V>(0), u, static_cast<std::size_t>(PI * W) * vb,
                                          cudaMemcpyDeviceToHost, s.value()));
        moved += static_cast<std::size_t>(PI * W) * vb;
        break;
      }
      SPILLWAY_CUDA_TRY(cudaMemcpy2DAsync(job.out + I0 * n + I0, static_cast<std::size_t>(n) * vb, u,
                                          static_cast<std::size_t>(W) * vb, static_cast<std::size_t>(W) * vb,
                                          static_cast<std::size_t>(PI), cudaMemcpyDeviceToHost, s.value()));
      if (n - I1 > 0) {
        SPILLWAY_CUDA_TRY(cudaMemcpy2DAsync(job.out + I1 * n + I0, static_cast<std::size_t>(n) * vb, tt,
                                            static_cast<std::size_t>(PI) * vb, static_cast<std::size_t>(PI) * vb,
                                            static_cast<std::size_t>(n - I1), cudaMemcpyDeviceToHost, s.value()));
      }
      moved += static_cast<std::size_t>(PI * W + (n - I1) * PI) * vb;
      break;
    }
    case sink_kind::dense_rect: {
      V* u = slot.device<V>(0);
      gemm(rect_strip_epilogue<V>{u, I0, rows_b, pop_a, pop_b, sc});
      if (job.on_device_strip) {
        job.on_device_strip(gram_device_strip<V>{I0, PI, 0, rows_b, u, slot.device(), s});
        break;
      }
      if (job.on_strip) {
        SPILLWAY_CUDA_TRY(cudaMemcpyAsync(slot.pinned<V>(0), u, static_cast<std::size_t>(PI * rows_b) * vb,
                                          cudaMemcpyDeviceToHost, s.value()));
        moved += static_cast<std::size_t>(PI * rows_b) * vb;
        break;
      }
      SPILLWAY_CUDA_TRY(cudaMemcpy2DAsync(job.out + I0 * job.ldc, static_cast<std::size_t>(job.ldc) * vb, u,
                                          static_cast<std::size_t>(rows_b) * vb, static_cast<std::size_t>(rows_b) * vb,
                                          static_cast<std::size_t>(PI), cudaMemcpyDeviceToHost, s.value()));
      moved += static_cast<std::size_t>(PI * rows_b) * vb;
      break;
    }
    case sink_kind::topk: {
      V* sc_buf = slot.device<V>(0);
      gemm(score_strip_epilogue<V>{sc_buf, I0, I1, W, col0, sym, pop_a, pop_b, sc});
      auto* st = reinterpret_cast<topk_entry<V>*>(c.topk_state.data()) +
                 slot.index() * static_cast<std::size_t>(n) * static_cast<std::size_t>(job.topk.k);
      const bool skip_diag = sym && !job.topk.include_diagonal;
      with_larger<V>(is_similarity(job.opt.epilogue), [&](auto L) {
        constexpr bool larger = decltype(L)::value;
        topk_rows_kernel<V, larger><<<warp_grid(PI), 256, 0, s.value()>>>(sc_buf, PI, W, I0, col0, skip_diag, st,
                                                                          job.topk.k);
        SPILLWAY_CUDA_TRY(cudaGetLastError());
        if (sym && W > PI) {
          const std::int64_t groups = (W - PI + 31) / 32;
          topk_cols_kernel<V, larger><<<static_cast<unsigned>(std::min<std::int64_t>(groups, 65535)), 1024, 0, s.value()>>>(
              sc_buf, PI, W, I0, PI, st, job.topk.k);
          SPILLWAY_CUDA_TRY(cudaGetLastError());
        }
      });
      break;
    }
    case sink_kind::threshold: {
      V* sc_buf = slot.device<V>(0);
      gemm(score_strip_epilogue<V>{sc_buf, I0, I1, W, col0, sym, pop_a, pop_b, sc});
      std::byte* comp = slot.device<std::byte>(1);
      auto* offs = reinterpret_cast<std::int64_t*>(comp);
      auto* cols = reinterpret_cast<std::int32_t*>(comp + round8(static_cast<std::size_t>(P + 1) * 8u));
      auto* vals = reinterpret_cast<V*>(comp + round8(static_cast<std::size_t>(P + 1) * 8u) +
                                        round8(static_cast<std::size_t>(PI * W) * 4u));
      const int shift = sym ? (job.thr.include_diagonal ? 0 : 1) : -1;
      const bool larger = is_similarity(job.opt.epilogue);
      threshold_count_kernel<V><<<warp_grid(PI), 256, 0, s.value()>>>(sc_buf, PI, W, shift, larger, job.thr.threshold, offs);
      SPILLWAY_CUDA_TRY(cudaGetLastError());
      exclusive_scan_kernel<<<1, 1024, 0, s.value()>>>(offs, PI);
      SPILLWAY_CUDA_TRY(cudaGetLastError());
      threshold_write_kernel<V><<<warp_grid(PI), 256, 0, s.value()>>>(sc_buf, PI, W, shift, larger, job.thr.threshold,
                                                                      col0, offs, cols, vals);
      SPILLWAY_CUDA_TRY(cudaGetLastError());
      strip_sparse<V>& out = job.strips[static_cast<std::size_t>(I)];
      out.offsets.resize(static_cast<std::size_t>(PI + 1));
      SPILLWAY_CUDA_TRY(cudaMemcpyAsync(out.offsets.data(), offs, out.offsets.size() * 8u, cudaMemcpyDeviceToHost, s.value()));
      s.synchronize();  // the kept count sizes the copies below
      const auto total = static_cast<std::size_t>(out.offsets.back());
      out.cols.resize(total);
      out.vals.resize(total);
      if (total > 0) {
        SPILLWAY_CUDA_TRY(cudaMemcpyAsync(out.cols.data(), cols, total * 4u, cudaMemcpyDeviceToHost, s.value()));
        SPILLWAY_CUDA_TRY(cudaMemcpyAsync(out.vals.data(), vals, total * vb, cudaMemcpyDeviceToHost, s.value()));
      }
      s.synchronize();
      moved += out.offsets.size() * 8u + total * (4u + vb);
      break;
    }
  }
  slot.add_bytes_moved(moved);
}

inline std::vector<int> gram_devices(const gram_options& o) {
  return ::spillway::detail::resolve_devices(o.devices, "gram");
}

/// Plans and runs a job through the scheduler.
template <class V>
void run_gram_job(gram_job<V>& job) {
  const std::vector<int> devices = gram_devices(job.opt);
  const memory_budget budget = job.opt.budget ? *job.opt.budget : memory_budget::default_for_all(devices);
  gram_plan_request r;
  r.rows_a = job.a.rows;
  r.rows_b = job.symmetric ? job.a.rows : job.b.rows;
  r.ld_words = job.a.ld_words;
  r.symmetric = job.symmetric;
  r.sink = job.sink;
  r.out_bytes = sizeof(V);
  r.k = job.topk.k;
  r.budget_bytes = budget.bytes();
  r.slots = job.opt.slots_per_device;
  r.max_panel_rows = job.opt.max_panel_rows;
  job.plan = make_gram_plan(r);
  if (job.sink == sink_kind::threshold) job.strips.resize(static_cast<std::size_t>(job.plan.strips));
  setup_devices(job, devices);

  task_job_options to;
  to.devices = devices;
  to.slots_per_device = job.plan.slots;
  to.device_buffer_bytes = job.plan.slot_buffers;
  to.budget = memory_budget(std::max<std::size_t>(1, budget.bytes() - std::min(budget.bytes(), job.plan.shared_bytes)));
  to.progress = job.opt.progress;
  if (job.on_strip) {
    // Pinned staging per slot for one strip (the same bytes as its device output buffer).
    to.pinned_buffer_bytes = {job.plan.slot_buffers[0]};
    const std::int64_t n = job.a.rows, P = job.plan.panel_rows, strips = job.plan.strips;
    const std::int64_t rows_b = job.symmetric ? n : job.b.rows;
    job.report = run_tasks(
        static_cast<std::size_t>(strips), to,
        [&job](std::size_t t, task_slot& slot, stream_view s) { enqueue_strip(job, t, slot, s); },
        [&job, n, P, strips, rows_b](std::size_t t, task_slot& slot) {
          const std::int64_t I = job.symmetric ? strips - 1 - static_cast<std::int64_t>(t) : static_cast<std::int64_t>(t);
          gram_strip<V> st;
          st.first_row = I * P;
          st.rows = std::min(st.first_row + P, n) - st.first_row;
          st.first_col = job.symmetric ? st.first_row : 0;
          st.cols = job.symmetric ? n - st.first_row : rows_b;
          st.values = slot.pinned<V>(0);
          job.on_strip(st);
        });
  } else {
    job.report = run_tasks(static_cast<std::size_t>(job.plan.strips), to,
                           [&job](std::size_t t, task_slot& slot, stream_view s) { enqueue_strip(job, t, slot, s); });
  }
  if (job.opt.report != nullptr) {
    job.opt.report->job = job.report;
    job.opt.report->plan = job.plan;
    job.opt.report->budget_bytes = budget.bytes();
  }
}

template <class V>
topk_result<V> collect_topk(gram_job<V>& job) {
  const std::int64_t n = job.a.rows;
  const int k = job.topk.k;
  const bool larger = is_similarity(job.opt.epilogue);
  // Each device merges its slots' lists on the device; only one n x k list per device comes back.
  const std::size_t per_slot = static_cast<std::size_t>(n) * static_cast<std::size_t>(k);
  std::vector<std::vector<topk_entry<V>>> lists;
  for (auto& c : job.ctx) {
    device_guard g(c->device);
    const stream_view s = c->setup->view();
    auto* st = reinterpret_cast<topk_entry<V>*>(c->topk_state.data());
    const int slots = static_cast<int>(c->topk_state.size() / sizeof(topk_entry<V>) / per_slot);
    if (slots > 1) {
      with_larger<V>(larger, [&](auto L) {
        topk_merge_kernel<V, decltype(L)::value><<<warp_grid(n), 256, 0, s.value()>>>(st, n, k, slots,
                                                                                        static_cast<std::int64_t>(per_slot));
      });
      SPILLWAY_CUDA_TRY(cudaGetLastError());
    }
    std::vector<topk_entry<V>> h(per_slot);
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(h.data(), st, per_slot * sizeof(topk_entry<V>), cudaMemcpyDeviceToHost, s.value()));
    s.synchronize();
    lists.push_back(std::move(h));
  }
  topk_result<V> r;
  r.rows = n;
  r.k = k;
  r.values.assign(static_cast<std::size_t>(n * k), V{});
  r.indices.assign(static_cast<std::size_t>(n * k), -1);
#ifdef _OPENMP
#pragma omp parallel
#endif
  {
    std::vector<topk_entry<V>> cand;
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
    for (std::int64_t i = 0; i < n; ++i) {
      cand.clear();
      for (const auto& h : lists)
        for (int t = 0; t < k; ++t) {
          const topk_entry<V>& e = h[static_cast<std::size_t>(i * k + t)];
          if (e.c != INT_MAX) cand.push_back(e);
        }
      const std::size_t kk = std::min<std::size_t>(static_cast<std::size_t>(k), cand.size());
      std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(kk), cand.end(),
                        [&](const topk_entry<V>& x, const topk_entry<V>& y) {
                          return topk_better(larger, x.v, static_cast<std::int64_t>(x.c), y.v, static_cast<std::int64_t>(y.c));
                        });
      for (std::size_t t = 0; t < kk; ++t) {
        r.values[static_cast<std::size_t>(i * k) + t] = cand[t].v;
        r.indices[static_cast<std::size_t>(i * k) + t] = cand[t].c;
      }
    }
  }
  return r;
}

template <class V>
coo_result<V> collect_threshold(gram_job<V>& job) {
  coo_result<V> r;
  const std::int64_t P = job.plan.panel_rows;
  const std::int64_t n = job.a.rows;
  std::size_t total = 0;
  for (const auto& s : job.strips) total += s.cols.size();
  if (!(job.symmetric && job.thr.both_halves)) {
    r.row.reserve(total);
    r.col.reserve(total);
    r.value.reserve(total);
    for (std::size_t I = 0; I < job.strips.size(); ++I) {
      const auto& s = job.strips[I];
      for (std::size_t q = 0; q + 1 < s.offsets.size(); ++q)
        for (auto e = s.offsets[q]; e < s.offsets[q + 1]; ++e) {
          r.row.push_back(static_cast<std::int64_t>(I) * P + static_cast<std::int64_t>(q));
          r.col.push_back(s.cols[static_cast<std::size_t>(e)]);
          r.value.push_back(s.vals[static_cast<std::size_t>(e)]);
        }
    }
    return r;
  }
  // Both halves: row i holds the mirrored (j < i) entries, then its own (j ≥ i), each ascending.
  std::vector<std::int64_t> lower(static_cast<std::size_t>(n) + 1, 0), upper(static_cast<std::size_t>(n), 0);
  for (std::size_t I = 0; I < job.strips.size(); ++I) {
    const auto& s = job.strips[I];
    for (std::size_t q = 0; q + 1 < s.offsets.size(); ++q) {
      const std::int64_t i = static_cast<std::int64_t>(I) * P + static_cast<std::int64_t>(q);
      upper[static_cast<std::size_t>(i)] = s.offsets[q + 1] - s.offsets[q];
      for (auto e = s.offsets[q]; e < s.offsets[q + 1]; ++e) {
        const std::int64_t j = s.cols[static_cast<std::size_t>(e)];
        if (j != i) ++lower[static_cast<std::size_t>(j)];
      }
    }
  }
  std::vector<std::int64_t> start(static_cast<std::size_t>(n) + 1, 0);
  for (std::int64_t i = 0; i < n; ++i)
    start[static_cast<std::size_t>(i) + 1] = start[static_cast<std::size_t>(i)] + lower[static_cast<std::size_t>(i)] + upper[static_cast<std::size_t>(i)];
  const auto all = static_cast<std::size_t>(start[static_cast<std::size_t>(n)]);
  r.row.resize(all);
  r.col.resize(all);
  r.value.resize(all);
  std::vector<std::int64_t> fill_lo(start.begin(), start.end() - 1);
  for (std::size_t I = 0; I < job.strips.size(); ++I) {
    const auto& s = job.strips[I];
    for (std::size_t q = 0; q + 1 < s.offsets.size(); ++q) {
      const std::int64_t i = static_cast<std::int64_t>(I) * P + static_cast<std::int64_t>(q);
      std::int64_t at = start[static_cast<std::size_t>(i)] + lower[static_cast<std::size_t>(i)];
      for (auto e = s.offsets[q]; e < s.offsets[q + 1]; ++e) {
        const std::int64_t j = s.cols[static_cast<std::size_t>(e)];
        const V v = s.vals[static_cast<std::size_t>(e)];
        r.row[static_cast<std::size_t>(at)] = i;
        r.col[static_cast<std::size_t>(at)] = j;
        r.value[static_cast<std::size_t>(at)] = v;
        ++at;
        if (j != i) {
          const auto m = static_cast<std::size_t>(fill_lo[static_cast<std::size_t>(j)]++);
          r.row[m] = j;
          r.col[m] = i;
          r.value[m] = v;
        }
      }
    }
  }
  return r;
}

}  // namespace detail
}  // namespace spillway::gram
