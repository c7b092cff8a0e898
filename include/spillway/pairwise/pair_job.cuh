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
//   compute   the Producer delivers each (i, j ≥ i for A·Aᵀ) to a writer: the strip's output
//             layout directly (packed triangle, full rows + mirrored column strip, dense scores).
//   sink      dense: straight device→host copies into the caller's matrix (cudaMemcpy2DAsync
//             where rows are strided) while the next strip computes on another slot; top-k: the
//             strip's rows and (mirrored) columns merged into per-row lists on the device;
//             threshold: compacted on the device, only the kept entries copied; strips: handed
//             to a callback (host staging, or the device buffer itself).
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
//   template <class W> void compute(const panel_pair<aux_type>&, const W& writer, V* scratch, stream_view) const;
#pragma once

#include <spillway/core/fault_hook.hpp>
#include <spillway/core/device.hpp>
#include <spillway/core/device_buffer.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/memory_budget.hpp>
#include <spillway/core/memory_pool.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/pairwise/sink_kernels.cuh>
#include <spillway/pairwise/layout.hpp>
#include <spillway/pairwise/plan.hpp>
#include <spillway/pairwise/sinks.hpp>
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
  /// Host rows of A / B that the call page-locked for its length (gemm::similarity_options::lock);
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

/// One finished strip of an all-pairs result, handed to a per-strip callback: rows
/// [first_row, first_row + rows) and columns [first_col, first_col + cols), row-major with `cols`
/// values per row, in host memory that is valid only during the callback (copy what you keep).
/// For A·Aᵀ a strip holds the columns from its own first row on (first_col == first_row: the
/// upper triangle and the diagonal block, complete); by symmetry the rest of those rows is in
/// earlier strips' columns. For A·Bᵀ first_col is 0 and cols is all of them.
template <class V>
struct strip_place {
  std::int64_t first_row = 0;
  std::int64_t rows = 0;
  std::int64_t first_col = 0;
  std::int64_t cols = 0;
  const V* values = nullptr;
  /// Where entry (i, j) (global indices) lies in `values`.
  [[nodiscard]] const V* address(std::int64_t i, std::int64_t j) const noexcept {
    return values + (i - first_row) * cols + (j - first_col);
  }
};

template <class V>
struct host_strip : strip_place<V> {
  /// Entry (i, j) in the matrix's own indices (first_row <= i < first_row + rows, likewise j).
  [[nodiscard]] V at(std::int64_t i, std::int64_t j) const noexcept { return *this->address(i, j); }
};

/// The same strip in DEVICE memory of `device`, before any device→host copy, handed over on the
/// strip's `stream`. Work the callback enqueues on `stream` sees the finished strip; the buffer is
/// reused for a later strip only after everything enqueued on `stream` before the callback
/// returned has completed, so a kernel or a copy the callback enqueues there needs no
/// synchronization.
template <class V>
struct device_strip : strip_place<V> {
  using strip_place<V>::first_row, strip_place<V>::rows, strip_place<V>::first_col, strip_place<V>::cols,
      strip_place<V>::values;
  int device = 0;
  stream_view stream;
  /// Address of entry (i, j) (global indices) in device memory: dereference it on the device only.
  [[nodiscard]] const V* at(std::int64_t i, std::int64_t j) const noexcept { return this->address(i, j); }
  /// Enqueues on `stream` the copy of the strip into its place in a row-major matrix `dst` with `ld`
  /// values per row, in device memory of `dst_device` — which need not be the strip's device: a
  /// strip of device 1 copied into a buffer of device 0 is a 2-D peer copy (cudaMemcpy3DPeerAsync;
  /// over NVLink where the devices have it, else staged by the driver). dst points at entry (0, 0).
  void copy_to(V* dst, std::int64_t ld, int dst_device) const {
    if (rows == 0 || cols == 0) return;
    if (ld < first_col + cols) {
      throw logic_error("device_strip::copy_to: ld " + std::to_string(ld) + " is less than the strip's last column + 1 (" +
                        std::to_string(first_col + cols) + ")");
    }
    cudaMemcpy3DPeerParms p{};
    p.srcPtr = make_cudaPitchedPtr(const_cast<V*>(values), static_cast<std::size_t>(cols) * sizeof(V),
                                   static_cast<std::size_t>(cols) * sizeof(V), static_cast<std::size_t>(rows));
    p.srcDevice = device;
    p.dstPtr = make_cudaPitchedPtr(dst + first_row * ld + first_col, static_cast<std::size_t>(ld) * sizeof(V),
                                   static_cast<std::size_t>(cols) * sizeof(V), static_cast<std::size_t>(rows));
    p.dstDevice = dst_device;
    p.extent = make_cudaExtent(static_cast<std::size_t>(cols) * sizeof(V), static_cast<std::size_t>(rows), 1);
    SPILLWAY_CUDA_TRY(cudaMemcpy3DPeerAsync(&p, stream.value()));
  }
};

namespace detail {

/// Where a top-k job's lists land on the host: the result's vectors (rows x k values and int64
/// columns, 38 MB at 100,000 x 32) and a pinned block the lists pass through on their way, both
/// made on another thread while the strips run (start_topk_host). The block comes from the
/// pipeline's staging cache; none (a refusal to pin) means copies straight into the vectors.
template <class V>
struct topk_host_side {
  topk_result<V> result;
  ::spillway::detail::staging_block stage;
};

/// The bytes of one half of the collect's pinned block: the lists come back in pieces of this
/// size, one half filling over PCIe while the other is copied into the vectors.
inline constexpr std::size_t topk_stage_half_bytes = std::size_t{8} << 20;

/// `devices`: the devices that will copy lists down at once (each its rows' share, through its own
/// pair of halves of the block).
template <class V>
std::future<topk_host_side<V>> start_topk_host(std::int64_t n, int k, std::size_t devices = 1) {
  return std::async(std::launch::async, [n, k, devices] {
    topk_host_side<V> h;
    h.result = empty_topk<V>(n, k);
    try {
      h.stage = ::spillway::detail::staging_block(2 * topk_stage_half_bytes * std::max<std::size_t>(devices, 1));
    } catch (const out_of_memory&) {
      // (no pinned block: the lists are copied straight into the vectors, at the pageable rate)
    }
    return h;
  });
}

}  // namespace detail

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
  device_buffer<std::byte> topk_state;  // slots x rows_a x k entries
  device_buffer<std::byte> topk_bar;    // A·Aᵀ top-k: a key per row (topk_mirror), over all slots
  device_buffer<unsigned long long> topk_full;  // column groups read in full (topk_cols_kernel)
  device_buffer<unsigned long long> checksum;  // checksum sink: 1024 partial sums
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

template <class V>
struct strip_sparse {
  std::vector<std::int64_t> offsets;  // rows + 1
  std::vector<std::int32_t> cols;
  std::vector<V> vals;
};

/// Everything a job's tasks need; the sink-specific parts are set by the entry point.
template <class V, class Producer>
struct pair_job {
  using aux_type = typename Producer::aux_type;
  Producer prod;
  bool symmetric = true;
  sink_kind sink = sink_kind::dense_packed;
  pair_job_options opt;
  const char* who = "pairwise";
  // dense sinks
  V* out = nullptr;
  std::int64_t ldc = 0;
  bool with_diagonal = true;  // dense_packed: upper_packed (true) or condensed (false)
  // per-strip callbacks (sink strips for A·Aᵀ or dense_rect for A·Bᵀ): the host form through the
  // slot's pinned staging, the device form inside the strip's enqueue with the device buffer
  std::function<void(const host_strip<V>&)> on_strip;
  std::function<void(const device_strip<V>&)> on_device_strip;
  // top-k / threshold
  topk_options topk{};
  threshold_options thr{};
  // results
  pair_plan plan;
  std::vector<std::unique_ptr<pair_device_ctx<aux_type>>> ctx;
  std::unique_ptr<panel_share> share;  // resident panels across workers (setup_devices)
  // trace only (opt.trace): per task, the events around its products
  std::vector<std::unique_ptr<event>> ev_start, ev_end;
  std::vector<int> ev_worker;
  std::vector<strip_sparse<V>> strips;
  std::future<detail::topk_host_side<V>> topk_host;  // the result's host vectors, allocated while the job runs
  job_report report;
};

inline std::size_t round8(std::size_t x) { return (x + 7) / 8 * 8; }

template <class F>
void with_larger(bool larger, F&& f) {
  if (larger) f(std::true_type{});
  else f(std::false_type{});
}

template <class V, class P>
bool on_device(const pair_job<V, P>& job) {
  return job.prod.device_rows(false) != nullptr;
}

template <class V, class P>
void setup_devices(pair_job<V, P>& job, const std::vector<int>& devices) {
  using Aux = typename P::aux_type;
  const pair_plan& p = job.plan;
  const std::int64_t rows_a = job.prod.rows(false);
  const std::int64_t rows_b = job.symmetric ? rows_a : job.prod.rows(true);
  const bool col_b = !job.symmetric;
  const bool dev = on_device(job);
  for (int d : devices) {
    auto c = std::make_unique<pair_device_ctx<Aux>>();
    c->device = d;
    device_guard g(d);
    c->setup = std::make_unique<stream>(d);
    c->products_done = std::make_unique<event>();
    const stream_view s = c->setup->view();
    c->aux_a = device_buffer<Aux>(static_cast<std::size_t>(rows_a), s);
    if (col_b) c->aux_b = device_buffer<Aux>(static_cast<std::size_t>(rows_b), s);
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
    if (job.sink == sink_kind::topk) {
      const std::size_t n = p.slots * static_cast<std::size_t>(rows_a) * static_cast<std::size_t>(job.topk.k);
      c->topk_state = device_buffer<std::byte>(n * sizeof(topk_entry<V>), s);
      if (n > 0) {
        with_larger(job.prod.larger(), [&](auto L) {
          topk_init_kernel<V, decltype(L)::value>
              <<<grid_blocks(static_cast<std::int64_t>(n) / 8 + 1, 8), 256, 0, s.value()>>>(
                  reinterpret_cast<topk_entry<V>*>(c->topk_state.data()), static_cast<std::int64_t>(n));
        });
        SPILLWAY_CUDA_TRY(cudaGetLastError());
      }
      if (job.symmetric) {  // only A·Aᵀ's columns kernel counts the groups it reads in full
        c->topk_full = device_buffer<unsigned long long>(1, s);
        SPILLWAY_CUDA_TRY(cudaMemsetAsync(c->topk_full.data(), 0, 8u, s.value()));
      }
      static_assert(sizeof(topk_key<V>) == topk_key_size(sizeof(V)), "the plan sizes the bars by topk_key_size");
      if (p.topk_bar_bytes > 0) {
        c->topk_bar = device_buffer<std::byte>(p.topk_bar_bytes, s);
        SPILLWAY_CUDA_TRY(cudaMemsetAsync(c->topk_bar.data(), 0, p.topk_bar_bytes, s.value()));
      }
    }
    if (job.sink == sink_kind::checksum) {
      c->checksum = device_buffer<unsigned long long>(1024, s);
      SPILLWAY_CUDA_TRY(cudaMemsetAsync(c->checksum.data(), 0, 1024 * 8u, s.value()));
    }
    s.synchronize();
    job.ctx.push_back(std::move(c));
  }
  job.share = std::make_unique<panel_share>();
  job.share->workers = devices.size();
  job.share->holder.assign(p.resident && !dev ? static_cast<std::size_t>(p.b_panels) : 0u, -1);
  job.share->reach.assign(devices.size() * devices.size(), 0);
  for (std::size_t w = 0; w < devices.size(); ++w)
    for (std::size_t h = 0; h < devices.size(); ++h)
      job.share->reach[w * devices.size() + h] = pool_reachable_from(devices[h], devices[w]) ? 1 : 0;
}

/// Makes panels [first, last) of the resident operand available on `s` for worker `w`: those no
/// worker holds yet are copied from the host (and their aux values computed), those another
/// worker holds (or has enqueued) are copied from it with their aux values (panel_share), those
/// this worker has are waited for. Host copies are enqueued first, so a strip's own panel is never
/// queued behind a wait on another device: the other device's event fires only after its aux
/// kernel, which runs only once that device's current product kernel has left the SMs. Returns
/// the bytes copied in from the host (counted with the strip that first needed them).
template <class V, class P>
std::size_t ensure_panels(pair_job<V, P>& job, std::size_t w, std::int64_t first, std::int64_t last, stream_view s) {
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
/// two streams only split the SMs and the L2 between two strips: H200, 100,000 x 200,000, the
/// checksum sink (benchmarks/results/gram_topk.md) took 0.31 s with the products overlapping
/// across 3 slots and 0.19 s chained.
template <class V, class P, class Ctx, class Writer>
void chained_compute(pair_job<V, P>& job, Ctx& c, const panel_pair<typename P::aux_type>& g, const Writer& w, V* scratch,
                     stream_view s, std::size_t t, std::size_t worker) {
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

/// The mirrored side of a top-k strip of PI rows and W columns (pairwise/sink_kernels.cuh:
/// topk_mirror) in the slot's candidate area, its counts zeroed on `s`; empty where the strip is not
/// symmetric or the plan has no candidate area (every column group then read in full).
template <class V, class P, class Aux>
topk_mirror<V> topk_mirror_of(pair_job<V, P>& job, pair_device_ctx<Aux>& c, task_slot& slot, bool sym, std::int64_t PI,
                              std::int64_t W, stream_view s) {
  const pair_plan& p = job.plan;
  const std::int64_t n = job.prod.rows(false);
  topk_mirror<V> m;
  if (!sym || p.buf_cand == pair_plan::none) return m;
  std::byte* area = slot.device<std::byte>(p.buf_cand);
  std::vector<std::size_t> at;  // counts, places, hit masks: as the plan laid them out
  (void)topk_mirror_bytes(static_cast<std::size_t>(p.panel_rows), static_cast<std::size_t>(n), sizeof(V), &at);
  m.bar = reinterpret_cast<topk_key<V>*>(c.topk_bar.data());
  m.x_begin = PI;
  m.count = reinterpret_cast<int*>(area + at[0]);
  m.cand = reinterpret_cast<topk_entry<V>*>(area + at[1]);
  m.cap = topk_mirror_cap;
  m.hits = reinterpret_cast<unsigned*>(area + at[2]);
  m.hit_words = static_cast<std::int64_t>(topk_mirror_hit_words(static_cast<std::size_t>(W)));
  // The other workers' bars, where this device reaches them (pool peer access).
  const std::size_t w = slot.worker();
  for (std::size_t h = 0; h < job.ctx.size() && m.n_peers < topk_max_peer_bars; ++h) {
    if (h == w || !job.share->reaches(w, h)) continue;
    m.peers[m.n_peers++] = reinterpret_cast<topk_key<V>*>(job.ctx[h]->topk_bar.data());
  }
  if (W > PI) {
    SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaMemsetAsync(m.count, 0, static_cast<std::size_t>(W - PI) * 4u, s.value())));
  }
  return m;
}

template <class V, class P>
void enqueue_strip(pair_job<V, P>& job, std::size_t t, task_slot& slot, stream_view s) {
  using Aux = typename P::aux_type;
  const pair_plan& p = job.plan;
  pair_device_ctx<Aux>& c = *job.ctx[slot.worker()];  // one context per entry of the device list
  const bool sym = job.symmetric;
  const bool dev = on_device(job);
  const std::int64_t n = job.prod.rows(false);
  const std::int64_t rows_b = sym ? n : job.prod.rows(true);
  const std::size_t rb = job.prod.row_bytes();
  const std::int64_t P_ = p.panel_rows;
  const std::int64_t I = p.strip_of_task(t, sym);
  const std::int64_t I0 = I * P_, I1 = std::min(I0 + P_, n), PI = I1 - I0;
  SPILLWAY_FAULT_TASK_SCOPE(t, slot.device());  // counts this strip's copies and launches (tests only)
  const std::int64_t W = sym ? n - I0 : rows_b;
  const std::int64_t col0 = sym ? I0 : 0;

  const Aux* aux_a = c.aux_a.data();
  const Aux* aux_b = sym ? c.aux_a.data() : c.aux_b.data();
  V* scratch = p.buf_scratch != pair_plan::none ? slot.device<V>(p.buf_scratch) : nullptr;

  // The strip's rows of A.
  const std::byte* a_dev = nullptr;
  std::size_t moved = 0;
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

  auto compute = [&](const auto& writer) {
    if (dev || p.resident) {
      panel_pair<Aux> g;
      g.a = a_dev;
      g.a_rows = PI;
      g.a_row0 = I0;
      g.b = c.resident_rows + static_cast<std::size_t>(col0) * (dev ? job.prod.device_row_bytes(!sym) : rb);
      g.b_rows = W;
      g.b_row0 = col0;
      g.aux_a = aux_a;
      g.aux_b = aux_b;
      g.upper_only = sym;
      chained_compute(job, c, g, writer, scratch, s, t, slot.worker());
      SPILLWAY_FAULT_LAUNCHED("the producer's kernels of a panel pair");
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
      panel_pair<Aux> g;
      g.a = a_dev;
      g.a_rows = PI;
      g.a_row0 = I0;
      g.b = bj;
      g.b_rows = J1 - J0;
      g.b_row0 = J0;
      g.aux_a = aux_a;
      g.aux_b = aux_b;
      g.upper_only = sym;
      chained_compute(job, c, g, writer, scratch, s, t, slot.worker());
      SPILLWAY_FAULT_LAUNCHED("the producer's kernels of a panel pair");
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
      compute(packed_writer<V>{u, n, base, wd});
      if (end > base) {
        SPILLWAY_CUDA_TRY(
            SPILLWAY_FAULT_CALL(cudaMemcpyAsync(job.out + base, u, static_cast<std::size_t>(end - base) * vb,
                                                cudaMemcpyDeviceToHost, s.value())));
        moved += static_cast<std::size_t>(end - base) * vb;
      }
      break;
    }
    case sink_kind::dense_full: {
      V* u = slot.device<V>(0);
      V* tt = slot.device<V>(p.buf_mirror);
      compute(full_writer<V>{u, tt, I0, I1, W, PI});
      SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(
          cudaMemcpy2DAsync(job.out + I0 * n + I0, static_cast<std::size_t>(n) * vb, u,
                            static_cast<std::size_t>(W) * vb, static_cast<std::size_t>(W) * vb,
                            static_cast<std::size_t>(PI), cudaMemcpyDeviceToHost, s.value())));
      if (n - I1 > 0) {
        SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(
            cudaMemcpy2DAsync(job.out + I1 * n + I0, static_cast<std::size_t>(n) * vb, tt,
                              static_cast<std::size_t>(PI) * vb, static_cast<std::size_t>(PI) * vb,
                              static_cast<std::size_t>(n - I1), cudaMemcpyDeviceToHost, s.value())));
      }
      moved += static_cast<std::size_t>(PI * W + (n - I1) * PI) * vb;
      break;
    }
    case sink_kind::strips: {
      V* u = slot.device<V>(0);
      compute(score_writer<V>{u, I0, I1, W, I0, true});
      if (job.on_device_strip) {
        job.on_device_strip(device_strip<V>{{I0, PI, I0, W, u}, slot.device(), s});
        break;
      }
      // rows I0..I1, columns I0..n, to the slot's staging for on_complete
      SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaMemcpyAsync(
          slot.pinned<V>(0), u, static_cast<std::size_t>(PI * W) * vb, cudaMemcpyDeviceToHost, s.value())));
      moved += static_cast<std::size_t>(PI * W) * vb;
      break;
    }
    case sink_kind::dense_rect: {
      V* u = slot.device<V>(0);
      compute(rect_writer<V>{u, I0, rows_b});
      if (job.on_device_strip) {
        job.on_device_strip(device_strip<V>{{I0, PI, 0, rows_b, u}, slot.device(), s});
        break;
      }
      if (job.on_strip) {
        SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaMemcpyAsync(slot.pinned<V>(0), u,
                                                              static_cast<std::size_t>(PI * rows_b) * vb,
                                                              cudaMemcpyDeviceToHost, s.value())));
        moved += static_cast<std::size_t>(PI * rows_b) * vb;
        break;
      }
      SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(
          cudaMemcpy2DAsync(job.out + I0 * job.ldc, static_cast<std::size_t>(job.ldc) * vb, u,
                            static_cast<std::size_t>(rows_b) * vb, static_cast<std::size_t>(rows_b) * vb,
                            static_cast<std::size_t>(PI), cudaMemcpyDeviceToHost, s.value())));
      moved += static_cast<std::size_t>(PI * rows_b) * vb;
      break;
    }
    case sink_kind::topk: {
      V* sc_buf = slot.device<V>(0);
      compute(score_writer<V>{sc_buf, I0, I1, W, col0, sym});
      auto* st = reinterpret_cast<topk_entry<V>*>(c.topk_state.data()) +
                 slot.index() * static_cast<std::size_t>(n) * static_cast<std::size_t>(job.topk.k);
      const bool skip_diag = sym && !job.topk.include_diagonal;
      // A·Aᵀ: the rows kernel also marks each column's mirrored candidates (those reaching the
      // column's bar), the append kernel appends them to the columns' candidates, and the columns
      // kernel offers them, reading in full only the column groups whose bars are too low to filter.
      const topk_mirror<V> m = topk_mirror_of(job, c, slot, sym, PI, W, s);
      with_larger(job.prod.larger(), [&](auto L) {
        constexpr bool larger = decltype(L)::value;
        topk_rows_kernel<V, larger><<<grid_blocks(PI, 8), 256, 0, s.value()>>>(sc_buf, PI, W, I0, col0,
                                                                               skip_diag, st, job.topk.k, m);
        SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaGetLastError()));
        if (sym && W > PI) {
          if (m.hits != nullptr) {
            topk_append_kernel<V><<<grid_blocks(PI * m.hit_words, 256), 256, 0, s.value()>>>(sc_buf, PI, W, I0, m);
            SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaGetLastError()));
          }
          const std::int64_t groups = (W - PI + 31) / 32;
          topk_cols_kernel<V, larger><<<static_cast<unsigned>(std::min<std::int64_t>(groups, 528)), 1024, 0, s.value()>>>(
              sc_buf, PI, W, I0, PI, st, job.topk.k, m, c.topk_full.data());
          SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaGetLastError()));
        }
      });
      break;
    }
    case sink_kind::checksum: {
      compute(checksum_writer<V>{c.checksum.data(), sym});
      break;
    }
    case sink_kind::threshold: {
      V* sc_buf = slot.device<V>(0);
      compute(score_writer<V>{sc_buf, I0, I1, W, col0, sym});
      std::byte* comp = slot.device<std::byte>(p.buf_compact);
      auto* offs = reinterpret_cast<std::int64_t*>(comp);
      auto* cols = reinterpret_cast<std::int32_t*>(comp + round8(static_cast<std::size_t>(P_ + 1) * 8u));
      auto* vals = reinterpret_cast<V*>(comp + round8(static_cast<std::size_t>(P_ + 1) * 8u) +
                                        round8(static_cast<std::size_t>(PI * W) * 4u));
      const int shift = sym ? (job.thr.include_diagonal ? 0 : 1) : -1;
      const bool larger = job.prod.larger();
      threshold_count_kernel<V><<<grid_blocks(PI, 8), 256, 0, s.value()>>>(sc_buf, PI, W, shift, larger, job.thr.threshold, offs);
      SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaGetLastError()));
      exclusive_scan_kernel<<<1, 1024, 0, s.value()>>>(offs, PI);
      SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaGetLastError()));
      threshold_write_kernel<V><<<grid_blocks(PI, 8), 256, 0, s.value()>>>(
          sc_buf, PI, W, shift, larger, job.thr.threshold, col0, offs, cols, vals);
      SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaGetLastError()));
      strip_sparse<V>& out = job.strips[static_cast<std::size_t>(I)];
      out.offsets.resize(static_cast<std::size_t>(PI + 1));
      SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaMemcpyAsync(out.offsets.data(), offs, out.offsets.size() * 8u,
                                                            cudaMemcpyDeviceToHost, s.value())));
      s.synchronize();  // the kept count sizes the copies below
      const auto total = static_cast<std::size_t>(out.offsets.back());
      out.cols.resize(total);
      out.vals.resize(total);
      if (total > 0) {
        SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(
            cudaMemcpyAsync(out.cols.data(), cols, total * 4u, cudaMemcpyDeviceToHost, s.value())));
        SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(
            cudaMemcpyAsync(out.vals.data(), vals, total * vb, cudaMemcpyDeviceToHost, s.value())));
      }
      s.synchronize();
      moved += out.offsets.size() * 8u + total * (4u + vb);
      break;
    }
  }
  slot.add_bytes_moved(moved);
}

template <class V, class P>
void run_pair_tasks(pair_job<V, P>& job, const pair_plan_request& r, const task_job_options& to_in);

/// The trace's times (after the job: every recorded event has completed or never will).
template <class V, class P>
void read_trace(const pair_job<V, P>& job, pair_trace& tr) {
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

/// Plans and runs a job through the scheduler. `devices` empty: the job's own (or all visible).
template <class V, class P>
void run_pair_job(pair_job<V, P>& job) {
  const auto t_call = std::chrono::steady_clock::now();
  const job_devices jd = resolve_job_devices(job.opt.devices, job.opt.budget, job.who);
  const std::vector<int>& devices = jd.devices;
  if (on_device(job) && devices.size() != 1) {
    throw logic_error(std::string(job.who) + ": rows in device memory are used on their own device only; pass "
                      "exactly that device (the entry points do), got " + std::to_string(devices.size()));
  }
  const memory_budget& budget = jd.budget;
  pair_plan_request r;
  r.rows_a = job.prod.rows(false);
  r.rows_b = job.symmetric ? r.rows_a : job.prod.rows(true);
  r.row_bytes = job.prod.row_bytes();
  r.symmetric = job.symmetric;
  r.sink = job.sink;
  r.out_bytes = sizeof(V);
  r.k = job.topk.k;
  r.budget_bytes = budget.bytes();
  r.slots = job.opt.slots_per_device;
  r.max_panel_rows = job.opt.max_panel_rows;
  r.aux_bytes = sizeof(typename P::aux_type);
  r.score_scratch = job.prod.score_scratch();
  r.operands_on_device = on_device(job);
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
  if (job.sink == sink_kind::threshold) job.strips.resize(static_cast<std::size_t>(job.plan.strips));
  setup_devices(job, devices);
  if (job.sink == sink_kind::topk) {
    // rows x k values and indices (38 MB for 100,000 x 32): allocated and filled on another thread
    // while the strips run, not after them.
    const std::int64_t n = r.rows_a;
    const int k = job.topk.k;
    job.topk_host = start_topk_host<V>(n, k, job.ctx.size());
  }

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
  to.budget = memory_budget(std::max<std::size_t>(1, budget.bytes() - std::min(budget.bytes(), job.plan.shared_bytes)));
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

/// run_tasks over the job's strips, with the strip callback's staging when there is one.
template <class V, class P>
void run_pair_tasks(pair_job<V, P>& job, const pair_plan_request& r, const task_job_options& to_in) {
  task_job_options to = to_in;
  if (job.on_strip) {
    // Pinned staging per slot for one strip (the same bytes as its device output buffer).
    to.pinned_buffer_bytes = {job.plan.slot_buffers[0]};
    const std::int64_t n = r.rows_a, P_ = job.plan.panel_rows, strips = job.plan.strips;
    const std::int64_t rows_b = r.rows_b;
    job.report = run_tasks(
        static_cast<std::size_t>(strips), to,
        [&job](std::size_t t, task_slot& slot, stream_view s) { enqueue_strip(job, t, slot, s); },
        [&job, n, P_, strips, rows_b](std::size_t t, task_slot& slot) {
          const std::int64_t I = job.plan.strip_of_task(t, job.symmetric);
          host_strip<V> st;
          st.first_row = I * P_;
          st.rows = std::min(st.first_row + P_, n) - st.first_row;
          st.first_col = job.symmetric ? st.first_row : 0;
          st.cols = job.symmetric ? n - st.first_row : rows_b;
          st.values = slot.pinned<V>(0);
          job.on_strip(st);
        });
  } else {
    job.report = run_tasks(static_cast<std::size_t>(job.plan.strips), to,
                           [&job](std::size_t t, task_slot& slot, stream_view s) { enqueue_strip(job, t, slot, s); });
  }
}

/// The checksum sink's result: over every device, the sum (mod 2^64) of the per-call warp sums
/// of the scores' bits (see checksum_writer): for int32 counts, the sum of the counts kept.
template <class V, class P>
unsigned long long collect_checksum(pair_job<V, P>& job) {
  unsigned long long sum = 0;
  for (auto& c : job.ctx) {
    device_guard g(c->device);
    const stream_view s = c->setup->view();
    std::vector<unsigned long long> h(1024);
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(h.data(), c->checksum.data(), 1024 * 8u, cudaMemcpyDeviceToHost, s.value()));
    s.synchronize();
    for (unsigned long long x : h) sum += x;
  }
  return sum;
}

/// Device lists (values, int32 columns; `count` entries) into the host vectors (int64 columns,
/// widened on the host). Through `stage` (pinned, two halves of topk_stage_half_bytes, or null)
/// where there is one: a piece of both arrays fills one half over PCIe while the host threads
/// copy the previous piece out of the other. The vectors are pageable, and a straight copy into
/// them ran at 7-11 GB/s (38.4 MB: 3.6-5.2 ms on the lent H200s); pinned halves fill at the
/// link's rate. Returns when every entry is on the host.
template <class V>
void copy_lists_to_host(const V* dv, const std::int32_t* di, std::size_t count, V* hv, std::int64_t* hi,
                        std::byte* stage, stream_view s) {
  constexpr std::size_t entry = sizeof(V) + sizeof(std::int32_t);
  // Entries a half holds: their values, then their columns from the next 8-byte boundary (up to
  // 7 bytes of padding, kept inside the half for any value size).
  const std::size_t piece = (topk_stage_half_bytes - 8) / entry;
  if (stage == nullptr || count <= piece) {
    std::vector<std::int32_t> cols(count);
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(hv, dv, count * sizeof(V), cudaMemcpyDeviceToHost, s.value()));
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(cols.data(), di, count * sizeof(std::int32_t), cudaMemcpyDeviceToHost, s.value()));
    s.synchronize();
    std::copy(cols.begin(), cols.end(), hi);
    return;
  }
  std::byte* base = stage;
  const std::size_t pieces = (count + piece - 1) / piece;
  const std::size_t col_off = (piece * sizeof(V) + 7) / 8 * 8;
  event filled[2];
  const auto enqueue = [&](std::size_t q) {
    const std::size_t e0 = q * piece, m = std::min(piece, count - e0);
    std::byte* h = base + (q % 2) * topk_stage_half_bytes;
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(h, dv + e0, m * sizeof(V), cudaMemcpyDeviceToHost, s.value()));
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(h + col_off, di + e0, m * sizeof(std::int32_t), cudaMemcpyDeviceToHost, s.value()));
    filled[q % 2].record(s);
  };
  // The host copies: a few threads (each piece is 8 MB; more threads gain nothing and would
  // contend with other ranks' threads on a shared host).
#ifdef _OPENMP
  const int threads = std::max(1, std::min(8, omp_get_max_threads()));
#else
  [[maybe_unused]] constexpr int threads = 1;
#endif
  enqueue(0);
  if (pieces > 1) enqueue(1);
  for (std::size_t q = 0; q < pieces; ++q) {
    filled[q % 2].synchronize();
    const std::size_t e0 = q * piece, m = std::min(piece, count - e0);
    const std::byte* h = base + (q % 2) * topk_stage_half_bytes;
    const V* sv = reinterpret_cast<const V*>(h);
    const std::int32_t* sc = reinterpret_cast<const std::int32_t*>(h + col_off);
    constexpr std::int64_t parts = 16;
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static)
#endif
    for (std::int64_t t = 0; t < parts; ++t) {
      const std::size_t a = m * static_cast<std::size_t>(t) / parts, b = m * static_cast<std::size_t>(t + 1) / parts;
      std::memcpy(hv + e0 + a, sv + a, (b - a) * sizeof(V));
      std::copy(sc + a, sc + b, hi + e0 + a);
    }
    if (q + 2 < pieces) enqueue(q + 2);
  }
}

/// Merges `lists` lists of `rows` rows of k entries, `stride` entries apart, into the first (in
/// place, on `s`).
template <class V>
void merge_topk_device(topk_entry<V>* st, std::int64_t rows, int k, int lists, std::size_t stride, bool larger,
                      stream_view s) {
  if (lists < 2 || rows == 0) return;
  with_larger(larger, [&](auto L) {
    topk_merge_kernel<V, decltype(L)::value>
        <<<grid_blocks(rows, 8), 256, 0, s.value()>>>(st, rows, k, lists, static_cast<std::int64_t>(stride));
  });
  SPILLWAY_CUDA_TRY(cudaGetLastError());
}

/// Every device of a top-k job merges its slots' lists into its first (n x k entries at the start
/// of its topk_state), on its setup stream; one event per device, recorded after it. Once only:
/// merging again would take the other slots' entries twice.
template <class V, class P>
std::vector<event> merge_topk_slots(pair_job<V, P>& job) {
  const std::int64_t n = job.prod.rows(false);
  const std::size_t per_slot = static_cast<std::size_t>(n) * static_cast<std::size_t>(job.topk.k);
  std::vector<event> merged;  // each made on its own device
  merged.reserve(job.ctx.size());
  for (auto& cp : job.ctx) {
    auto& c = *cp;
    device_guard g(c.device);
    const int slots = per_slot == 0 ? 0 : static_cast<int>(c.topk_state.size() / sizeof(topk_entry<V>) / per_slot);
    merge_topk_device(reinterpret_cast<topk_entry<V>*>(c.topk_state.data()), n, job.topk.k, slots, per_slot,
                     job.prod.larger(), c.setup->view());
    merged.emplace_back().record(c.setup->view());
  }
  return merged;
}

template <class V, class P>
topk_result<V> collect_topk(pair_job<V, P>& job) {
  const std::int64_t n = job.prod.rows(false);
  const int k = job.topk.k;
  const bool larger = job.prod.larger();
  const std::size_t per_slot = static_cast<std::size_t>(n) * static_cast<std::size_t>(k);
  topk_host_side<V> host = job.topk_host.valid() ? job.topk_host.get() : topk_host_side<V>{empty_topk<V>(n, k), {}};
  topk_result<V>& r = host.result;
  using entry = topk_entry<V>;
  const auto merge_lists = [&](entry* st, std::int64_t rows, int lists, std::size_t stride, stream_view s) {
    merge_topk_device(st, rows, k, lists, stride, larger, s);
  };
  const auto slots_of = [&](const auto& c) {
    return static_cast<int>(c.topk_state.size() / sizeof(entry) / per_slot);
  };
  if (job.symmetric && job.opt.report != nullptr) {
    std::int64_t full = 0;
    for (auto& c : job.ctx) {
      device_guard g(c->device);
      full += static_cast<std::int64_t>(c->topk_full.to_host(c->setup->view())[0]);
    }
    job.opt.report->topk_full_column_groups = full;
  }
  // Every device merges its slots' lists into its first. Then device e owns rows
  // [n e / nd, n (e + 1) / nd): it pulls the other devices' merged lists of those rows (peer
  // copies, 12 bytes x k per row) into its freed slot lists at the same rows (or a buffer of its
  // own when it has fewer slots than there are devices), merges them, writes them out as values
  // and indices and copies them into the result's vectors through its own link and its own
  // halves of the pinned block, all devices at once. The result is sorted as the host sorts it.
  const std::size_t nd = job.ctx.size();
  std::vector<event> merged = merge_topk_slots(job);
  const std::size_t stage_pairs = host.stage.size() / (2 * topk_stage_half_bytes);
  struct owned {
    std::int64_t r0 = 0, rows = 0;
    device_buffer<std::byte> gathered;
    device_buffer<V> dv;
    device_buffer<std::int32_t> di;
  };
  std::vector<owned> own(nd);
  for (std::size_t e = 0; e < nd; ++e) {
    auto& c = *job.ctx[e];
    device_guard g(c.device);
    const stream_view s = c.setup->view();
    owned& o = own[e];
    o.r0 = n * static_cast<std::int64_t>(e) / static_cast<std::int64_t>(nd);
    o.rows = n * static_cast<std::int64_t>(e + 1) / static_cast<std::int64_t>(nd) - o.r0;
    const std::size_t cnt = static_cast<std::size_t>(o.rows) * static_cast<std::size_t>(k);
    const std::size_t at = static_cast<std::size_t>(o.r0) * static_cast<std::size_t>(k);
    entry* st = reinterpret_cast<entry*>(c.topk_state.data()) + at;
    std::size_t stride = per_slot;
    if (nd > 1 && static_cast<std::size_t>(slots_of(c)) < nd) {
      o.gathered = device_buffer<std::byte>(nd * cnt * sizeof(entry), s);
      SPILLWAY_CUDA_TRY(cudaMemcpyAsync(o.gathered.data(), st, cnt * sizeof(entry), cudaMemcpyDeviceToDevice, s.value()));
      st = reinterpret_cast<entry*>(o.gathered.data());
      stride = cnt;
    }
    std::size_t q = 1;
    for (std::size_t d = 0; d < nd; ++d) {
      if (d == e || cnt == 0) continue;
      auto& cd = *job.ctx[d];
      s.wait(merged[d]);
      SPILLWAY_CUDA_TRY(cudaMemcpyPeerAsync(st + q * stride, c.device, reinterpret_cast<const entry*>(cd.topk_state.data()) + at,
                                            cd.device, cnt * sizeof(entry), s.value()));
      ++q;
    }
    merge_lists(st, o.rows, static_cast<int>(nd), stride, s);
    o.dv = device_buffer<V>(cnt, s);
    o.di = device_buffer<std::int32_t>(cnt, s);
    if (cnt > 0) {
      topk_export_kernel<V, std::int32_t>
          <<<grid_blocks(static_cast<std::int64_t>(cnt), 256), 256, 0, s.value()>>>(
              st, static_cast<std::int64_t>(cnt), o.dv.data(), o.di.data());
      SPILLWAY_CUDA_TRY(cudaGetLastError());
    }
  }
  // The copies down, one part per device on the staging workers (the first on
  // this thread; a part that throws is rethrown here once all have ended); devices past the pinned
  // block's pairs of halves copy straight into the vectors.
  const auto copy_down = [&](std::size_t e) {
    auto& c = *job.ctx[e];
    device_guard g(c.device);
    const owned& o = own[e];
    const std::size_t at = static_cast<std::size_t>(o.r0) * static_cast<std::size_t>(k);
    std::byte* stage = e < stage_pairs ? static_cast<std::byte*>(host.stage.data()) + e * 2 * topk_stage_half_bytes : nullptr;
    copy_lists_to_host(o.dv.data(), o.di.data(), static_cast<std::size_t>(o.rows) * static_cast<std::size_t>(k),
                       r.values.data() + at, r.indices.data() + at, stage, c.setup->view());
  };
  ::spillway::detail::staging_workers().run_parts(nd, copy_down);
  return std::move(host.result);
}

template <class V, class P>
coo_result<V> collect_threshold(pair_job<V, P>& job) {
  coo_result<V> r;
  const std::int64_t P_ = job.plan.panel_rows;
  const std::int64_t n = job.prod.rows(false);
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
          r.row.push_back(static_cast<std::int64_t>(I) * P_ + static_cast<std::int64_t>(q));
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
      const std::int64_t i = static_cast<std::int64_t>(I) * P_ + static_cast<std::int64_t>(q);
      upper[static_cast<std::size_t>(i)] = s.offsets[q + 1] - s.offsets[q];
      for (auto e = s.offsets[q]; e < s.offsets[q + 1]; ++e) {
        const std::int64_t j = s.cols[static_cast<std::size_t>(e)];
        if (j != i) ++lower[static_cast<std::size_t>(j)];
      }
    }
  }
  std::vector<std::int64_t> start(static_cast<std::size_t>(n) + 1, 0);
  for (std::int64_t i = 0; i < n; ++i)
    start[static_cast<std::size_t>(i) + 1] =
        start[static_cast<std::size_t>(i)] + lower[static_cast<std::size_t>(i)] + upper[static_cast<std::size_t>(i)];
  const auto all = static_cast<std::size_t>(start[static_cast<std::size_t>(n)]);
  r.row.resize(all);
  r.col.resize(all);
  r.value.resize(all);
  std::vector<std::int64_t> fill_lo(start.begin(), start.end() - 1);
  for (std::size_t I = 0; I < job.strips.size(); ++I) {
    const auto& s = job.strips[I];
    for (std::size_t q = 0; q + 1 < s.offsets.size(); ++q) {
      const std::int64_t i = static_cast<std::int64_t>(I) * P_ + static_cast<std::int64_t>(q);
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
}  // namespace spillway::pairwise
