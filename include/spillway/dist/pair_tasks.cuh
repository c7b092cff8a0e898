// spillway/dist/pair_tasks.cuh — a pair job's share of strips on this rank's GPU through
// dist::run_tasks: the scheduler's slots, buffers and budget from the job's plan, its strips
// enqueued and completed as in one process. What the distributed Gram and similarity jobs run
// once their plan and split are made.
#pragma once

#include <spillway/core/memory_budget.hpp>
#include <spillway/dist/communicator.hpp>
#include <spillway/dist/run_tasks.hpp>
#include <spillway/pairwise/pair_job.cuh>

#include <cstddef>
#include <vector>

namespace spillway::dist::detail {

/// Runs the scheduler tasks `mine` (of `tasks`) of `job` (set up on its one device) under `o`.
/// Collective.
template <class V, class P, class S>
run_report run_pair_tasks(const communicator& c, pairwise::detail::pair_job<V, P, S>& job,
                          const std::vector<std::size_t>& mine, std::size_t tasks,
                          const memory_budget& budget, const run_options& o) {
  task_job_options to;
  to.devices = job.opt.devices;
  to.slots_per_device = job.plan.slots;
  to.device_buffer_bytes = job.plan.slot_buffers;
  to.budget = budget;
  to.reserved_bytes = job.plan.shared_bytes;  // allocated by setup_devices (and the sink's setup)
  to.pinned_buffer_bytes = job.sink.pinned_buffers(job.plan);
  return run_tasks(
      c, mine, tasks, to,
      [&job](std::size_t t, task_slot& slot, stream_view s) {
        pairwise::detail::enqueue_strip(job, t, slot, s);
      },
      [&job](std::size_t t, task_slot& slot) { pairwise::detail::complete_strip(job, t, slot); }, o);
}

}  // namespace spillway::dist::detail
