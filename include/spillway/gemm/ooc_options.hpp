// spillway/gemm/ooc_options.hpp — the options, trace and report of an out-of-core GEMM
// (gemm_out_of_core, gemm/out_of_core.cuh).
#pragma once

#include <spillway/core/host_memory.hpp>
#include <spillway/core/host_registration.hpp>
#include <spillway/core/memory_budget.hpp>
#include <spillway/gemm/ooc_plan.hpp>
#include <spillway/gemm/options.hpp>
#include <spillway/pipeline/job.hpp>
#include <spillway/pipeline/task_pipeline.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace spillway::gemm {


struct ooc_report;
struct ooc_trace;

/// How an out-of-core GEMM is laid out over the devices.
struct ooc_options {
  /// Devices to use (each once). Empty: every visible device.
  std::vector<int> devices;
  /// Device memory per device. Default: memory_budget::default_for_all(devices) (80% of free).
  std::optional<memory_budget> budget;
  /// Blocks in flight per device (one stream each, one C block of device memory each). The
  /// scheduler enqueues a block once the block `slots` before it is in C, so with 4 one block
  /// copies out while one GEMM runs and two wait queued: the host has a whole block's time to
  /// enqueue the next. 0: 4 when C blocks go out by DMA straight into C, 8 when they are staged
  /// (a staged block holds its slot through its host copy too; docs/gemm.md, "ooc_options.hpp").
  std::size_t slots_per_device = 0;
  /// How A, B and C are copied: `detect` asks the runtime for each; page_locked: DMA directly;
  /// pageable: through pinned staging.
  host_memory memory = host_memory::detect;
  /// Which pageable operands the job page-locks for the call (with `memory` = detect; undone before
  /// it returns; ooc_report::a_registered etc. say which). Page-locking runs at ~20 GB/s of the
  /// caller's memory, so it pays only where staging is slow: a row-major B (NumPy's layout), whose
  /// panels are strided host lines and which a tensor-core job holds whole before its first block.
  /// `automatic`: with a row-major B, B — and A and C too for elements of 1 and 2 bytes; with a
  /// column-major (K-major) B, nothing: what measured faster (docs/gemm.md, "ooc_options.hpp").
  /// `always`: all three; `never`: none. Where the driver
  /// refuses (already registered in part, the locked-memory limit), that operand is staged.
  page_lock lock = page_lock::automatic;
  /// Cap on the C block's sides (0: none); forces many blocks on small problems (tests).
  index_t max_block = 0;
  /// Called as blocks complete; return false to cancel (see job_report::cancelled).
  progress_callback progress;
  /// The rates the plan's copy-time floor is stated at (the H200's pinned rates by default).
  copy_rates rates{};
  /// If set, also receives the report when the job fails (pipeline_error): which blocks were written.
  ooc_report* report_on_error = nullptr;
  /// The in-core time of the whole product on one device, in seconds. The plan weighs its choices
  /// by the bound its order puts on the job at that rate (ooc_plan::ramp_seconds): staged or direct
  /// copies out (`c_out` automatic), C blocks of several B panels (`c_min_line_bytes` 0). 0 (the
  /// default): estimated from the device (ooc_compute_estimate: its SMs and peak clock at the rate
  /// spillway's in-core GEMM sustains per SM and clock; docs/gemm.md, "ooc_options.hpp");
  /// ooc_report::compute_seconds says which was used.
  double compute_seconds = 0;
  /// If set, receives device timestamps of the job (diagnosis; timing events cost a few µs a block;
  /// a staged block's end is read on the host clock; docs/gemm.md, "Out of core").
  ooc_trace* trace = nullptr;
  /// How C blocks are copied out of the device when C is page-locked.
  ooc_copy_out c_out = ooc_copy_out::automatic;
  /// Shortest line of C a block's copy out should write, in bytes: shorter lines make C blocks
  /// span several B panels (ooc_plan_request::c_min_line_bytes). 0: automatic — the plan weighs
  /// blocks with lines of ooc_long_line (64 KiB) against single-panel blocks by the order's bound
  /// at `rates` (whose d2h_short prices short lines) and `compute_seconds` (or its estimate), and
  /// keeps the lower. 1: single-panel blocks always.
  std::size_t c_min_line_bytes = 0;
  /// Host threads of the job's own that write staged C blocks into C (ooc_copy_out::staged, and
  /// pageable C), each one piece of a block at a time: 0 takes detail::ooc_scatter_threads (12).
  std::size_t scatter_threads = 0;
  /// Staged C blocks are written into C with non-temporal stores (x86; elsewhere a plain copy): C's
  /// lines are not read before they are overwritten.
  bool scatter_streaming = true;
  /// Largest piece (bytes) in which an MN-major panel lands before its transpose into the cache;
  /// 0: detail::ooc_raw_piece_bytes (512 MiB). Tests force many pieces with it.
  std::size_t raw_piece_bytes = 0;
};

/// When each part of an out-of-core job happened on its device, in ms after that device's panel
/// caches were ready (each device has its own origin). NaN: never happened (cancelled, failed).
struct ooc_trace {
  /// Panel copies in the order the loader issued them: the device, the operand ('A' or 'B' in the
  /// plan's executed frame), its panel and k chunk, bytes, and when the copy ended.
  std::vector<int> load_device;
  std::vector<char> load_operand;
  std::vector<index_t> load_panel, load_chunk;
  std::vector<std::size_t> load_bytes;
  std::vector<float> load_end_ms;
  /// Per block of the plan's order: the device, when its stream reached its first GEMM (panels in,
  /// C block in, the slot free), when its last GEMM (or combine) ended, and when its C block was out
  /// (staged: in C, after the host copy — read on the host clock against the origin's host time,
  /// taken when the caches were ready, so within a few µs of the device's times).
  std::vector<int> block_device;
  std::vector<float> ready_ms, gemm_end_ms, out_end_ms;
  /// Host seconds from the call to the scheduler's start (planning, device memory, events).
  double setup_seconds = 0;
};

/// A block of C in the caller's coordinates: rows [row0, row0 + rows), columns [col0, col0 + cols).
struct c_block {
  index_t row0 = 0, rows = 0, col0 = 0, cols = 0;
};

/// What an out-of-core GEMM did.
struct ooc_report {
  ooc_plan plan;
  /// The scheduler's report: task t completed ⇔ block_of_task[t] of C is written.
  job_report job;
  /// The C block task t computed (empty entries for tasks that never started).
  std::vector<c_block> block_of_task;
  std::size_t budget_bytes = 0;
  bool a_page_locked = false, b_page_locked = false, c_page_locked = false;
  /// Which of them the job page-locked itself for the call (ooc_options::lock).
  bool a_registered = false, b_registered = false, c_registered = false;
  /// The in-core time of the product the plan weighed (its order's bound, the choice of copies out
  /// and of C block widths): ooc_options::compute_seconds, or where that is 0 the estimate from the
  /// device (ooc_compute_estimate; `compute_estimated` set).
  double compute_seconds = 0;
  bool compute_estimated = false;
  /// The blocks whose C is written, in the caller's coordinates.
  [[nodiscard]] std::vector<c_block> written() const {
    std::vector<c_block> v;
    for (std::size_t t = 0; t < job.completed.size() && t < block_of_task.size(); ++t)
      if (job.completed[t]) v.push_back(block_of_task[t]);
    return v;
  }
};

}  // namespace spillway::gemm
