// spillway/gemm/out_of_core.cuh — C = α·op(A)·op(B) + β·C with A, B and C in host memory larger
// than the device's memory budget, on one or several GPUs through spillway's scheduler (run_tasks).
// See docs/gemm.md, "Out of core".
//
//   namespace g = spillway::gemm;
//   g::ooc_options o;
//   o.budget = spillway::memory_budget(8_GiB);
//   g::ooc_report r = g::gemm_out_of_core(1.0f, g::row_major(a, m, k), g::col_major(b, k, n), 0.0f,
//                                         g::row_major(c, m, n), {}, o);
//   std::puts(r.plan.describe().c_str());   // blocks, cached panels, bytes moved, the copy floor
//
// The job itself (how it moves panels and blocks) is gemm/detail/ooc_job.cuh; the options and the
// report are gemm/ooc_options.hpp.
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/host_registration.hpp>
#include <spillway/core/memory_budget.hpp>
#include <spillway/gemm/detail/ooc_job.cuh>
#include <spillway/gemm/detail/validate.hpp>
#include <spillway/gemm/gemm.cuh>
#include <spillway/gemm/matrix_view.hpp>
#include <spillway/gemm/ooc_options.hpp>
#include <spillway/gemm/ooc_plan.hpp>
#include <spillway/gemm/options.hpp>
#include <spillway/pipeline/job.hpp>
#include <spillway/pipeline/task_pipeline.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace spillway::gemm {

/// C = α·A·B + β·C with A (m x k), B (k x n) and C (m x n) host matrices as the views give them
/// (row- or column-major, any leading dimension, `.t()` for op = transpose; page-locked or pageable),
/// computed block by block on the devices of `ooc` within its memory budget per device, by the
/// in-core GEMM of each block under `opt` (path, math; `opt.split_k` 0 means 1 here, a forced
/// split is kept and its workspace planned; batch_count must be 1). β = 0 never reads C.
/// Synchronous: returns when C is written (or the progress callback cancelled: then
/// report.job.cancelled is set and report.written() lists the blocks of C that are complete).
/// Throws logic_error for bad arguments (before anything runs), a forced path a device cannot run,
/// and a budget below the smallest plan (run_tasks's refusal, before anything is allocated: the
/// budget, the slots, the reserved bytes and the minimum); pipeline_error when a block fails (it
/// names the task; ooc.report_on_error, if set, receives which blocks were written).
template <class TA, class TB, class TC, class Scalar>
ooc_report gemm_out_of_core(Scalar alpha, matrix_view<TA> a, matrix_view<TB> b, Scalar beta,
                            matrix_view<TC> c, const gemm_options& opt = {}, const ooc_options& ooc = {}) {
  const auto t_call = std::chrono::steady_clock::now();
  detail::static_check_types<TA, TB, TC>();
  using T = std::remove_cv_t<TA>;
  using Acc = accumulator_t<T>;
  detail::check_gemm_args(a, b, c, opt, "gemm_out_of_core");
  SPILLWAY_EXPECTS(opt.batch_count == 1, "gemm_out_of_core: batch_count is " +
                                             std::to_string(opt.batch_count) +
                                             "; out-of-core GEMMs take one matrix each (batch_count 1)");
  SPILLWAY_EXPECTS(ooc.compute_seconds >= 0 && ooc.compute_seconds < std::numeric_limits<double>::infinity(),
                   "gemm_out_of_core: ooc_options::compute_seconds is " + std::to_string(ooc.compute_seconds) +
                       "; give the in-core time of the product in seconds, or 0 to have it estimated");
  const job_devices jd = resolve_job_devices(ooc.devices, ooc.budget, "gemm_out_of_core");
  const std::vector<int>& devices = jd.devices;
  gemm_options o = opt;
  if (o.split_k == 0) o.split_k = 1;  // blocks are planned large enough to fill the device
  gemm_path path = gemm_path::simt;
  bool tensor = false;  // some device runs a tensor-core path: its panels must be K-major
  for (int d : devices) {
    path = resolve_path<T>(o, d);  // a forced path every device can run, or throw
    tensor = tensor || path != gemm_path::simt;
  }

  const matrix_view<const T> ca = a, cb = b;
  const matrix_view<const TC> cc = c;
  ooc_report rep;
  // Registrations live until the call returns (declared before the job, released after it).
  const bool lock_any = ooc.memory == host_memory::detect && ooc.lock != page_lock::never;
  const bool always = ooc.lock == page_lock::always;
  const bool b_rows = b.order == layout::row_major;
  const bool lock_b = lock_any && (always || b_rows);
  const bool lock_ac = lock_any && (always || (b_rows && sizeof(T) <= 2));
  const host_registration reg_a = detail::ooc_register<T>(ca, lock_ac, true);
  const host_registration reg_b = detail::ooc_register<T>(cb, lock_b, true);
  const host_registration reg_c = detail::ooc_register<TC>(cc, lock_ac, false);
  rep.a_registered = reg_a.active();
  rep.b_registered = reg_b.active();
  rep.c_registered = reg_c.active();
  rep.a_page_locked = detail::ooc_page_locked<T>(ooc.memory, ca);
  rep.b_page_locked = detail::ooc_page_locked<T>(ooc.memory, cb);
  rep.c_page_locked = detail::ooc_page_locked<TC>(ooc.memory, cc);
  const memory_budget& budget = jd.budget;
  rep.budget_bytes = budget.bytes();
  const Acc al = static_cast<Acc>(alpha), be = static_cast<Acc>(beta);

  ooc_plan_request r;
  r.m = a.rows;
  r.n = b.cols;
  r.k = a.cols;
  r.in_bytes = sizeof(T);
  r.out_bytes = sizeof(TC);
  r.acc_bytes = sizeof(Acc);
  r.c_is_acc = std::is_same_v<TC, Acc>;
  r.read_c = !(be == Acc(0));
  r.budget_bytes = budget.bytes();
  r.devices = devices.size();
  // The tensor-core launchers read K-major operands: an MN-major operand's panels (A column-major,
  // B row-major, whatever C's layout) are transposed once each as they land (ooc_job::load), so the
  // in-core GEMMs of the blocks get K-major panels and stage nothing (on every device: a list of
  // devices of which only some run a tensor-core path transposes too).
  r.stage_a = tensor && a.order == layout::col_major;
  r.stage_b = tensor && b.order == layout::row_major;
  r.split_k = o.split_k;
  r.max_block = ooc.max_block;
  r.rates = ooc.rates;
  rep.compute_estimated = ooc.compute_seconds == 0;
  r.compute_seconds = rep.compute_estimated ? detail::ooc_estimate<T>(a.rows, b.cols, a.cols, o, path, devices)
                                            : ooc.compute_seconds;
  rep.compute_seconds = r.compute_seconds;
  r.c_row_major = c.order == layout::row_major;
  r.c_min_line_bytes = ooc.c_min_line_bytes;
  r.raw_piece_bytes = ooc.raw_piece_bytes;
  r.refuse_over_budget = false;  // a budget below every plan is refused by run_tasks, below
  rep.plan = choose_ooc_plan(r, ooc.c_out, rep.c_page_locked, ooc.slots_per_device);
  const bool c_staged = rep.plan.c_staged;
  if (c.rows == 0 || c.cols == 0) return rep;

  detail::ooc_job<T, TC> job;
  job.plan = rep.plan;
  if (job.plan.transposed) {
    job.a = cb.t();
    job.b = ca.t();
    job.c = c.t();
    job.a_pinned = rep.b_page_locked;
    job.b_pinned = rep.a_page_locked;
  } else {
    job.a = ca;
    job.b = cb;
    job.c = c;
    job.a_pinned = rep.a_page_locked;
    job.b_pinned = rep.b_page_locked;
  }
  job.c_pinned = rep.c_page_locked;
  job.c_staged_out = c_staged;
  job.scatter_threads = ooc.scatter_threads == 0 ? detail::ooc_scatter_threads : ooc.scatter_threads;
  job.scatter_streaming = ooc.scatter_streaming;
  job.alpha = al;
  job.beta = be;
  job.read_c = r.read_c;
  job.use_work = job.plan.acc_block_bytes > 0;  // k chunks and C narrower than the accumulator
  job.opt = o;
  job.devices = devices;
  job.queue = std::make_unique<detail::ooc_queue>(job.plan.device_first);
  job.task_block.assign(job.plan.tasks(), detail::ooc_job<T, TC>::none);
  job.traced = ooc.trace != nullptr;

  // The job's one budget check is run_tasks's: every device byte the job allocates is in it, the
  // caches and raw buffers (reserved, allocated by job.setup once the check has passed) and each
  // slot's C block, accumulator block and split-K workspace.
  task_job_options to;
  to.devices = devices;
  to.slots_per_device = job.plan.slots;
  to.device_buffer_bytes = job.plan.slot_buffer_bytes();
  if (job.c_staged_out) to.pinned_buffer_bytes = {job.plan.c_block_bytes};
  to.budget = budget;
  to.reserved_bytes = job.plan.reserved_bytes();
  to.setup = [&] {
    job.setup();
    if (ooc.trace != nullptr) {
      *ooc.trace = ooc_trace{};
      ooc.trace->setup_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t_call).count();
    }
  };
  to.progress = ooc.progress;
  auto fill = [&](const job_report& jr) {
    rep.job = jr;
    rep.block_of_task.resize(job.task_block.size());
    for (std::size_t t = 0; t < job.task_block.size(); ++t)
      rep.block_of_task[t] = job.caller_block(t, job.plan.transposed);
  };
  try {
    const job_report jr = run_tasks(
        job.plan.tasks(), to,
        [&job](std::size_t t, task_slot& slot, stream_view s) { job.enqueue(t, slot, s); },
        [&job](std::size_t t, task_slot& slot) { job.complete(t, slot); });
    fill(jr);
    if (ooc.trace != nullptr) job.read_trace(*ooc.trace);
  } catch (const pipeline_error& e) {
    if (ooc.report_on_error != nullptr) {
      fill(e.report());
      *ooc.report_on_error = rep;
    }
    throw;
  }
  return rep;
}

}  // namespace spillway::gemm
