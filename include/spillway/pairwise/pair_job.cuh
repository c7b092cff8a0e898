// spillway/pairwise/pair_job.cuh — the out-of-core all-pairs job: row strips of the output as
// tasks of spillway's scheduler (run_tasks), the column operand resident on each device (or
// streamed panel by panel when it does not fit), and the sinks, which copy only what they keep.
// What the rows are (bits, floats) and how a panel pair becomes scores (a b1 tile kernel with its
// epilogue, a GEMM) is a Producer's business; everything here reads only strips of scores.
//
// Per strip I (rows [I0, I1) of A), on one slot's stream:
//   operand   A·Aᵀ: the panels I.. of A are copied once per device (the first strip that needs
//             one copies it, computes its rows' auxiliary values — popcounts, norms — and records
//             an event; later strips wait on it); strips run from the last to the first, so the
//             first strips need the fewest panels and the device→host copies start early. A·Bᵀ:
//             the strip's A panel, B resident. Streamed mode: the strip's panel, then each column
//             panel in turn. Operands already in device memory are used where they are.
//   compute   the Producer delivers each (i, j ≥ i for A·Aᵀ) to the sink's writer: the strip's
//             output layout directly (packed triangle, full rows + mirrored column strip, dense
//             scores).
//   sink      the job's Sink (pairwise/sinks/, the contract in sinks/sink.cuh) gets the strip
//             (strip_span) and the compute step: it calls compute(writer), then enqueues what it
//             keeps — dense: device→host copies into the caller's matrix; strips: a callback;
//             top-k: per-row lists on the device; threshold: compaction, only kept entries copied;
//             neighbour counts: per-row counters; checksum: a sum. The job is generic over it:
//             pair_job<V, Producer, Sink>, and knows none of them.
//
// A Producer P provides (see gram's bit_producer and gemm's similarity producer):
//   using aux_type;                                   per-row value beside each operand row
//   std::int64_t rows(bool b) const;                  rows of A (false) or B (true; A when symmetric)
//   std::size_t row_bytes() const;                    bytes of one copied operand row on the device
//   std::size_t device_row_bytes(bool b) const;       the same for an operand already in device memory
//   bool larger() const;                              similarity (true) or distance (false)
//   const std::byte* device_rows(bool b) const;       the operand in device memory, or null (host)
//   std::size_t upload(bool b, r0, count, std::byte* dst, stream_view) const;   host rows → device
//   void aux_async(bool b, const std::byte* rows, count, aux_type* out, stream_view) const;
//   std::vector<aux_type> host_aux(bool b) const;    every row's aux (streamed operand)
//   bool score_scratch() const;                       needs a dense strip to scatter from
//   template <class W>
//   void compute(const panel_pair<aux_type>&, const W& writer, V* scratch, stream_view) const;
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/device_buffer.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/fault_hook.hpp>
#include <spillway/core/memory_budget.hpp>
#include <spillway/core/memory_pool.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/pairwise/layout.hpp>
#include <spillway/pairwise/plan.hpp>
#include <spillway/pairwise/sink_kernels.cuh>
#include <spillway/pairwise/sinks.hpp>
#include <spillway/pairwise/sinks/checksum.cuh>
#include <spillway/pairwise/sinks/dense.cuh>
#include <spillway/pairwise/sinks/sink.cuh>
#include <spillway/pairwise/sinks/strips.cuh>
#include <spillway/pairwise/sinks/threshold.cuh>
#include <spillway/pairwise/sinks/topk.cuh>
#include <spillway/pairwise/strip.cuh>
#include <spillway/pipeline/job.hpp>
#include <spillway/pipeline/task_pipeline.hpp>

#include <cuda_runtime_api.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <limits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace spillway::pairwise {

/// What a pair job did (filled when the job's options ask for it, also when the job fails with
/// pipeline_error: then `job` is the error's report, which strips were written).
struct pair_report {
  job_report job;
  pair_plan plan;
  std::size_t budget_bytes = 0;
  bool symmetric = true;  ///< A·Aᵀ: the strips run from the last to the first
  std::int64_t rows = 0;  ///< rows of A
  /// A·Aᵀ top-k: the groups of 32 columns whose mirrored side was read in full from a strip's
  /// scores because a column's candidates overflowed its places (its bar still too low to filter);
  /// the others took only the candidates the rows pass proposed. −1 for other jobs. Set when the
  /// result is collected.
  std::int64_t topk_full_column_groups = -1;
  /// Host rows of A / B that the call page-locked for its length (similarity::similarity_options::lock);
  /// false for rows already page-locked, in device memory, or refused by the driver.
  bool a_registered = false, b_registered = false;
  /// Bytes of resident panels one device copied from another that held them (over NVLink where
  /// the GPUs have it) instead of from the host; not in job.bytes_moved, which counts the host
  /// links. 0 with one device.
  std::size_t peer_bytes = 0;
  /// The strip task t computed (job.completed[t] ⇔ that strip's output is complete).
  [[nodiscard]] std::int64_t strip_of_task(std::size_t t) const noexcept { return plan.strip_of_task(t, symmetric); }
  /// First row of A and row count of the strip task t computed. What a strip writes: for A·Aᵀ its
  /// rows from their diagonal on (dense: the packed rows; full: also the mirrored columns below
  /// it); for A·Bᵀ its rows, every column.
  [[nodiscard]] std::pair<std::int64_t, std::int64_t> rows_of_task(std::size_t t) const noexcept {
    const std::int64_t r0 = strip_of_task(t) * plan.panel_rows;
    return {r0, std::min(r0 + plan.panel_rows, rows) - r0};
  }
};

/// A panel pair for a Producer: A rows [a_row0, a_row0 + a_rows) at `a`, B rows [b_row0, ..) at
/// `b` (device memory, row_bytes apart), and each operand's aux values indexed by GLOBAL row.
template <class Aux>
struct panel_pair {
  const std::byte* a = nullptr;
  std::int64_t a_rows = 0, a_row0 = 0;
  const std::byte* b = nullptr;
  std::int64_t b_rows = 0, b_row0 = 0;
  const Aux* aux_a = nullptr;
  const Aux* aux_b = nullptr;
  /// A·Aᵀ: only pairs with i ≤ j are needed (tiles wholly below the diagonal may be skipped).
  bool upper_only = false;
};

/// When each strip's product kernels ran on its device, in ms after that worker's origin (an
/// event recorded once its setup was done, just before the scheduler started; each worker has its
/// own). NaN: never ran (cancelled, failed). For benchmarks: where a device waited, and for what.
struct pair_trace {
  std::vector<int> task_worker;  ///< the entry of the device list that ran task t (−1: never)
  /// The stream reached the strip's first product kernel (its panels in, the device's previous
  /// product done) / its last product kernel ended.
  std::vector<float> start_ms, end_ms;
  /// Host seconds from the call to the workers' origins (planning, the devices' setup).
  double setup_seconds = 0;
};

/// The scheduling options every pair job shares.
struct pair_job_options {
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
  /// If set, receives the plan and the scheduler's report (also when the job fails: see pair_report).
  pair_report* report = nullptr;
  /// If set, receives when each strip's products ran (pair_trace; costs two events a strip).
  pair_trace* trace = nullptr;
};

namespace detail {

template <class Aux>
struct pair_device_ctx {
  int device = 0;
  std::unique_ptr<stream> setup;
  device_buffer<std::byte> resident;           // the column operand's rows, when copied
  const std::byte* resident_rows = nullptr;    // resident.data(), or the caller's device rows
  device_buffer<Aux> aux_a, aux_b;             // aux_b unused for A·Aᵀ
  std::vector<char> uploaded;
  std::vector<event> ready;
  std::mutex m;
  std::unique_ptr<event> products_done;        // the last product kernel on this device (chained_compute)
  std::unique_ptr<event> origin;               // trace only: the worker's time zero
};

/// Which worker holds each panel of the resident operand, shared by the workers of one job: a
/// panel is copied from the host once, by the first worker that needs it; the others copy it from
/// that worker's memory (cudaMemcpyPeerAsync: NVLink on an H200 pair, ~8x the host link) where
/// the two devices reach each other's pools, else from the host too.
struct panel_share {
  std::mutex m;                    // guards holder, and orders a holder's event record before any wait on it
  std::vector<int> holder;         // per panel: the worker whose upload is enqueued, or -1
  std::vector<char> reach;         // reach[w * workers + h]: worker w can copy from worker h's pool
  std::size_t workers = 0;
  std::atomic<std::size_t> peer_bytes{0};  // bytes copied between workers
  /// Worker w can copy from (and write to) worker h's memory.
  [[nodiscard]] bool reaches(std::size_t w, std::size_t h) const { return reach[w * workers + h] != 0; }
};

/// Everything a job's tasks need. The sink (pairwise/sinks/) is set by the entry point.
template <class V, class Producer, class Sink>
struct pair_job {
  using aux_type = typename Producer::aux_type;
  using value_type = V;
  Producer prod;
  bool symmetric = true;
  pair_job_options opt;
  const char* who = "pairwise";
  // results
  pair_plan plan;
  std::vector<std::unique_ptr<pair_device_ctx<aux_type>>> ctx;
  std::unique_ptr<panel_share> share;  // resident panels across workers (setup_devices)
  // trace only (opt.trace): per task, the events around its products
  std::vector<std::unique_ptr<event>> ev_start, ev_end;
  std::vector<int> ev_worker;
  job_report report;
  /// Declared after ctx, so destroyed before it: the sink's device buffers were allocated on
  /// (and are freed on) the devices' setup streams, which ctx owns.
  Sink sink;
};

template <class V, class P, class S>
bool on_device(const pair_job<V, P, S>& job) {
  return job.prod.device_rows(false) != nullptr;
}

template <class V, class P, class S>
void setup_devices(pair_job<V, P, S>& job, const std::vector<int>& devices) {
  using Aux = typename P::aux_type;
  const pair_plan& p = job.plan;
  const std::int64_t rows_a = job.prod.rows(false);
  const std::int64_t rows_b = job.symmetric ? rows_a : job.prod.rows(true);
  const bool col_b = !job.symmetric;
  const bool dev = on_device(job);
  // The panel share first: a sink's setup may bring panels in (ensure_panels).
  job.share = std::make_unique<panel_share>();
  job.share->workers = devices.size();
  job.share->holder.assign(p.resident && !dev ? static_cast<std::size_t>(p.b_panels) : 0u, -1);
  job.share->reach.assign(devices.size() * devices.size(), 0);
  for (std::size_t w = 0; w < devices.size(); ++w)
    for (std::size_t h = 0; h < devices.size(); ++h)
      job.share->reach[w * devices.size() + h] = pool_reachable_from(devices[h], devices[w]) ? 1 : 0;
  for (int d : devices) {
    auto c = std::make_unique<pair_device_ctx<Aux>>();
    c->device = d;
    device_guard g(d);
    c->setup = std::make_unique<stream>(d);
    c->products_done = std::make_unique<event>();
    const stream_view s = c->setup->view();
    // One entry past the last row: a kernel may load a row's value in pairs (similarity's fused
    // top-k); it is never used as a row's.
    c->aux_a = device_buffer<Aux>(static_cast<std::size_t>(rows_a) + 1, s);
    if (col_b) c->aux_b = device_buffer<Aux>(static_cast<std::size_t>(rows_b) + 1, s);
    Aux* col_aux = col_b ? c->aux_b.data() : c->aux_a.data();
    if (dev) {
      // In core: the rows are where the caller put them; their aux values are computed once here.
      c->resident_rows = job.prod.device_rows(col_b);
      job.prod.aux_async(col_b, c->resident_rows, rows_b, col_aux, s);
      if (col_b) job.prod.aux_async(false, job.prod.device_rows(false), rows_a, c->aux_a.data(), s);
      c->uploaded.assign(static_cast<std::size_t>(p.b_panels), 1);
      c->ready.resize(static_cast<std::size_t>(p.b_panels));
      for (auto& e : c->ready) e.record(s);
    } else if (p.resident) {
      c->resident = device_buffer<std::byte>(static_cast<std::size_t>(rows_b) * job.prod.row_bytes(), s);
      c->resident_rows = c->resident.data();
      c->uploaded.assign(static_cast<std::size_t>(p.b_panels), 0);
      c->ready.resize(static_cast<std::size_t>(p.b_panels));
    } else {
      // Streamed: the column operand's aux values are computed once on the host and copied.
      const std::vector<Aux> h = job.prod.host_aux(col_b);
      if (!h.empty()) {
        SPILLWAY_CUDA_TRY(cudaMemcpyAsync(col_aux, h.data(), h.size() * sizeof(Aux), cudaMemcpyHostToDevice, s.value()));
      }
      s.synchronize();
    }
    job.ctx.push_back(std::move(c));
    job.sink.setup(job, job.ctx.size() - 1, s);  // this worker's state (job.ctx[worker] is set)
    s.synchronize();
  }
}

/// Makes panels [first, last) of the resident operand available on `s` for worker `w`: those no
/// worker holds yet are copied from the host (and their aux values computed), those another
/// worker holds (or has enqueued) are copied from it with their aux values (panel_share), those
/// this worker has are waited for. Host copies are enqueued first, so a strip's own panel is never
/// queued behind a wait on another device: the other device's event fires only after its aux
/// kernel, which runs only once that device's current product kernel has left the SMs. Returns
/// the bytes copied in from the host (counted with the strip that first needed them).
template <class V, class P, class S>
std::size_t ensure_panels(pair_job<V, P, S>& job, std::size_t w, std::int64_t first, std::int64_t last,
                          stream_view s) {
  using Aux = typename P::aux_type;
  pair_device_ctx<Aux>& c = *job.ctx[w];
  panel_share& sh = *job.share;
  const bool col_b = !job.symmetric;
  const std::int64_t rows = job.prod.rows(col_b);
  const std::int64_t P_ = job.plan.panel_rows;
  const std::size_t rb = job.prod.row_bytes();
  auto aux_of = [&](pair_device_ctx<Aux>& x) { return col_b ? x.aux_b.data() : x.aux_a.data(); };
  auto rows_of = [&](std::int64_t J) { return std::min(J * P_ + P_, rows) - J * P_; };
  auto at = [&](pair_device_ctx<Aux>& x, std::int64_t J) { return x.resident.data() + static_cast<std::size_t>(J * P_) * rb; };
  std::lock_guard<std::mutex> l(c.m);
  std::size_t moved = 0;
  // 1. From the host: every panel no worker this one reaches holds. The copies first, then the
  // aux kernels, then the events (a peer waiting on one needs both).
  std::vector<std::int64_t> mine, peers, had;
  {
    std::lock_guard<std::mutex> lj(sh.m);
    for (std::int64_t J = last - 1; J >= first; --J) {
      const auto j = static_cast<std::size_t>(J);
      if (c.uploaded[j]) {
        had.push_back(J);
        continue;
      }
      const int h = sh.holder[j];
      if (h >= 0 && sh.reaches(w, static_cast<std::size_t>(h))) {
        peers.push_back(J);
        continue;
      }
      moved += job.prod.upload(col_b, J * P_, rows_of(J), at(c, J), s);
      SPILLWAY_FAULT_LAUNCHED("the producer's upload of a resident panel");
      mine.push_back(J);
    }
    for (const std::int64_t J : mine) {
      const auto j = static_cast<std::size_t>(J);
      job.prod.aux_async(col_b, at(c, J), rows_of(J), aux_of(c) + J * P_, s);
      SPILLWAY_FAULT_LAUNCHED("the producer's per-row values of a resident panel");
      // Recorded before holder names this worker (under sh.m), so a peer's wait sees it.
      c.ready[j].record(s);
      c.uploaded[j] = 1;
      if (sh.holder[j] < 0) sh.holder[j] = static_cast<int>(w);
    }
  }
  // 2. From the workers that hold them: the rows and their aux values, after the holder's event.
  for (const std::int64_t J : peers) {
    const auto j = static_cast<std::size_t>(J);
    pair_device_ctx<Aux>* src = nullptr;
    {
      std::lock_guard<std::mutex> lj(sh.m);
      src = job.ctx[static_cast<std::size_t>(sh.holder[j])].get();
    }
    s.wait(src->ready[j]);
    const std::size_t bytes = static_cast<std::size_t>(rows_of(J)) * rb;
    SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaMemcpyPeerAsync(at(c, J), c.device, at(*src, J), src->device, bytes, s.value())));
    SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaMemcpyPeerAsync(aux_of(c) + J * P_, c.device, aux_of(*src) + J * P_, src->device,
                                                              static_cast<std::size_t>(rows_of(J)) * sizeof(Aux), s.value())));
    sh.peer_bytes.fetch_add(bytes);
    c.ready[j].record(s);
    c.uploaded[j] = 1;
  }
  // 3. What this worker already had (enqueued by its other slots): waited for last.
  for (const std::int64_t J : had) s.wait(c.ready[static_cast<std::size_t>(J)]);
  return moved;
}

/// The producer's product kernels of a device run one after the other across its slots, while
/// the copies and the sinks' own kernels still overlap them. Two persistent product kernels on
/// two streams only split the SMs and the L2 between two strips (docs/gram.md, "chained_compute").
template <class V, class P, class S, class Ctx, class Writer>
void chained_compute(pair_job<V, P, S>& job, Ctx& c, const panel_pair<typename P::aux_type>& g,
                     const Writer& w, V* scratch, stream_view s, std::size_t t, std::size_t worker) {
  s.wait(*c.products_done);
  if (job.opt.trace != nullptr && !job.ev_start[t]) {
    job.ev_start[t] = std::make_unique<event>(event::timing::enabled);
    job.ev_start[t]->record(s);
    job.ev_worker[t] = static_cast<int>(worker);
  }
  job.prod.compute(g, w, scratch, s);
  c.products_done->record(s);
  if (job.opt.trace != nullptr) {
    if (!job.ev_end[t]) job.ev_end[t] = std::make_unique<event>(event::timing::enabled);
    job.ev_end[t]->record(s);
  }
}

/// Where strip task t of the job lies.
template <class V, class P, class S>
strip_span span_of_task(const pair_job<V, P, S>& job, std::size_t t) {
  strip_span st;
  st.symmetric = job.symmetric;
  st.n = job.prod.rows(false);
  st.rows_b = job.symmetric ? st.n : job.prod.rows(true);
  st.strip = job.plan.strip_of_task(t, job.symmetric);
  st.first_row = st.strip * job.plan.panel_rows;
  st.end_row = std::min(st.first_row + job.plan.panel_rows, st.n);
  st.rows = st.end_row - st.first_row;
  st.first_col = job.symmetric ? st.first_row : 0;
  st.cols = job.symmetric ? st.n - st.first_row : st.rows_b;
  return st;
}

template <class V, class P, class S>
void enqueue_strip(pair_job<V, P, S>& job, std::size_t t, task_slot& slot, stream_view s) {
  using Aux = typename P::aux_type;
  const pair_plan& p = job.plan;
  pair_device_ctx<Aux>& c = *job.ctx[slot.worker()];  // one context per entry of the device list
  const bool sym = job.symmetric;
  const bool dev = on_device(job);
  const strip_span st = span_of_task(job, t);
  const std::int64_t rows_b = st.rows_b, I = st.strip, I0 = st.first_row, PI = st.rows, W = st.cols,
                     col0 = st.first_col;
  const std::size_t rb = job.prod.row_bytes();
  const std::int64_t P_ = p.panel_rows;
  SPILLWAY_FAULT_TASK_SCOPE(t, slot.device());  // counts this strip's copies and launches (tests only)

  const Aux* aux_a = c.aux_a.data();
  const Aux* aux_b = sym ? c.aux_a.data() : c.aux_b.data();
  V* scratch = p.buf_scratch != pair_plan::none ? slot.device<V>(p.buf_scratch) : nullptr;

  // The strip's rows of A, staged when the sink first asks for the product (a sink that runs its
  // own product on the resident operand, similarity's fused top-k, never does).
  const std::byte* a_dev = nullptr;
  std::size_t moved = 0;
  bool staged = false;
  auto stage_rows = [&] {
    if (staged) return;
    staged = true;
    if (dev) {
      a_dev = job.prod.device_rows(false) + static_cast<std::size_t>(I0) * job.prod.device_row_bytes(false);
    } else if (!sym) {
      auto* dst = slot.device<std::byte>(p.buf_a);
      moved += job.prod.upload(false, I0, PI, dst, s);
      SPILLWAY_FAULT_LAUNCHED("the producer's upload of the strip's rows");
      job.prod.aux_async(false, dst, PI, c.aux_a.data() + I0, s);
      SPILLWAY_FAULT_LAUNCHED("the producer's per-row values of the strip's rows");
      a_dev = dst;
      if (p.resident) moved += ensure_panels(job, slot.worker(), 0, p.b_panels, s);
    } else if (p.resident) {
      moved += ensure_panels(job, slot.worker(), I, p.strips, s);
      a_dev = c.resident_rows + static_cast<std::size_t>(I0) * rb;
    } else {
      auto* dst = slot.device<std::byte>(p.buf_own);
      moved += job.prod.upload(false, I0, PI, dst, s);
      SPILLWAY_FAULT_LAUNCHED("the producer's upload of the strip's rows");
      a_dev = dst;
    }
  };

  // The producer's products of the strip's rows against columns [b_row0, b_row0 + b_rows) at `b`.
  auto product = [&](const auto& writer, const std::byte* b, std::int64_t b_rows, std::int64_t b_row0) {
    panel_pair<Aux> g;
    g.a = a_dev;
    g.a_rows = PI;
    g.a_row0 = I0;
    g.b = b;
    g.b_rows = b_rows;
    g.b_row0 = b_row0;
    g.aux_a = aux_a;
    g.aux_b = aux_b;
    g.upper_only = sym;
    chained_compute(job, c, g, writer, scratch, s, t, slot.worker());
    SPILLWAY_FAULT_LAUNCHED("the producer's kernels of a panel pair");
  };
  auto compute = [&](const auto& writer) {
    stage_rows();
    if (dev || p.resident) {
      product(writer,
              c.resident_rows + static_cast<std::size_t>(col0) * (dev ? job.prod.device_row_bytes(!sym) : rb),
              W, col0);
      return;
    }
    for (std::int64_t J = sym ? I : 0; J < p.b_panels; ++J) {
      const std::int64_t J0 = J * P_, J1 = std::min(J0 + P_, rows_b);
      const std::byte* bj = a_dev;
      if (!(sym && J == I)) {
        auto* dst = slot.device<std::byte>(p.buf_stream);
        moved += job.prod.upload(!sym, J0, J1 - J0, dst, s);
        SPILLWAY_FAULT_LAUNCHED("the producer's upload of a streamed panel");
        bj = dst;
      }
      product(writer, bj, J1 - J0, J0);
    }
  };

  moved += job.sink.enqueue(job, st, slot, s, compute);
  slot.add_bytes_moved(moved);
}

template <class V, class P, class S>
void run_pair_tasks(pair_job<V, P, S>& job, const pair_plan_request& r, const task_job_options& to_in);

/// The trace's times (after the job: every recorded event has completed or never will).
template <class V, class P, class S>
void read_trace(const pair_job<V, P, S>& job, pair_trace& tr) {
  const std::size_t n = job.ev_start.size();
  tr.task_worker.assign(n, -1);
  tr.start_ms.assign(n, std::numeric_limits<float>::quiet_NaN());
  tr.end_ms.assign(n, std::numeric_limits<float>::quiet_NaN());
  for (std::size_t t = 0; t < n; ++t) {
    if (!job.ev_start[t] || !job.ev_end[t] || job.ev_worker[t] < 0) continue;
    const auto& c = *job.ctx[static_cast<std::size_t>(job.ev_worker[t])];
    float a = 0, b = 0;
    if (cudaEventElapsedTime(&a, c.origin->value(), job.ev_start[t]->value()) != cudaSuccess ||
        cudaEventElapsedTime(&b, c.origin->value(), job.ev_end[t]->value()) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    tr.task_worker[t] = job.ev_worker[t];
    tr.start_ms[t] = a;
    tr.end_ms[t] = b;
  }
}

/// What the planner is asked for this job under `budget` (run_pair_job's request; an entry point
/// may plan with it first to choose between jobs).
template <class V, class P, class S>
pair_plan_request plan_request_of(const pair_job<V, P, S>& job, const memory_budget& budget) {
  pair_plan_request r;
  r.rows_a = job.prod.rows(false);
  r.rows_b = job.symmetric ? r.rows_a : job.prod.rows(true);
  r.row_bytes = job.prod.row_bytes();
  r.symmetric = job.symmetric;
  r.sink = job.sink.footprint();
  r.out_bytes = sizeof(V);
  r.budget_bytes = budget.bytes();
  r.slots = job.opt.slots_per_device;
  r.max_panel_rows = job.opt.max_panel_rows;
  r.aux_bytes = sizeof(typename P::aux_type);
  r.score_scratch = job.prod.score_scratch();
  r.operands_on_device = on_device(job);
  return r;
}

/// Plans and runs a job through the scheduler. `devices` empty: the job's own (or all visible).
template <class V, class P, class S>
void run_pair_job(pair_job<V, P, S>& job) {
  const auto t_call = std::chrono::steady_clock::now();
  const job_devices jd = resolve_job_devices(job.opt.devices, job.opt.budget, job.who);
  const std::vector<int>& devices = jd.devices;
  if (on_device(job) && devices.size() != 1) {
    throw logic_error(std::string(job.who) +
                      ": rows in device memory are used on their own device only; pass "
                      "exactly that device (the entry points do), got " +
                      std::to_string(devices.size()));
  }
  const memory_budget& budget = jd.budget;
  const pair_plan_request r = plan_request_of(job, budget);
  job.plan = make_pair_plan(r, job.who);
  job.plan.hold_strips_for(devices.size(), job.symmetric);
  if (job.opt.report != nullptr) {
    // Before anything can fail: a failed job's caller learns which rows each task holds.
    *job.opt.report = pair_report{};
    job.opt.report->plan = job.plan;
    job.opt.report->budget_bytes = budget.bytes();
    job.opt.report->symmetric = job.symmetric;
    job.opt.report->rows = r.rows_a;
  }
  setup_devices(job, devices);
  job.sink.start(job);

  if (job.opt.trace != nullptr) {
    const auto n = static_cast<std::size_t>(job.plan.strips);
    job.ev_start.clear();
    job.ev_end.clear();
    job.ev_start.resize(n);
    job.ev_end.resize(n);
    job.ev_worker.assign(n, -1);
    for (auto& c : job.ctx) {
      device_guard g(c->device);
      c->origin = std::make_unique<event>(event::timing::enabled);
      c->origin->record(c->setup->view());
      c->origin->synchronize();
    }
    *job.opt.trace = pair_trace{};
    job.opt.trace->setup_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_call).count();
  }
  task_job_options to;
  to.devices = devices;
  to.slots_per_device = job.plan.slots;
  to.device_buffer_bytes = job.plan.slot_buffers;
  to.budget = budget;
  to.reserved_bytes = job.plan.shared_bytes;  // allocated by setup_devices (and the sink's setup)
  to.progress = job.opt.progress;
  try {
    run_pair_tasks(job, r, to);
  } catch (const pipeline_error& e) {
    if (job.opt.trace != nullptr) read_trace(job, *job.opt.trace);
    if (job.opt.report != nullptr) {
      job.opt.report->job = e.report();
      job.opt.report->peer_bytes = job.share->peer_bytes.load();
    }
    throw;
  }
  if (job.opt.report != nullptr) {
    job.opt.report->job = job.report;
    job.opt.report->peer_bytes = job.share->peer_bytes.load();
  }
  if (job.opt.trace != nullptr) read_trace(job, *job.opt.trace);
}

/// The sink's completion of task t (on the worker thread, once the strip's work has finished).
template <class V, class P, class S>
void complete_strip(pair_job<V, P, S>& job, std::size_t t, task_slot& slot) {
  slot.add_bytes_moved(job.sink.complete(job, span_of_task(job, t), slot));
}

/// run_tasks over the job's strips, with the sink's staging and completion.
template <class V, class P, class S>
void run_pair_tasks(pair_job<V, P, S>& job, const pair_plan_request&, const task_job_options& to_in) {
  task_job_options to = to_in;
  to.pinned_buffer_bytes = job.sink.pinned_buffers(job.plan);
  job.report = run_tasks(
      static_cast<std::size_t>(job.plan.strips), to,
      [&job](std::size_t t, task_slot& slot, stream_view s) { enqueue_strip(job, t, slot, s); },
      [&job](std::size_t t, task_slot& slot) { complete_strip(job, t, slot); });
}

}  // namespace detail
}  // namespace spillway::pairwise
