// spillway/pipeline/detail/streamed_job.hpp — the one streamed-job core that both streamed
// transforms run on (the flat spillway::transform of pipeline/transform.cuh and the broadcasting
// one of map/streamed.cuh): arrays moved chunk by chunk between host and device, pageable memory
// staged through pinned buffers by host threads, small inputs copied once per slot and kept
// resident, a caller-supplied device computation per chunk, all on run_tasks.
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/core/memory_budget.hpp>
#include <spillway/pipeline/host_workers.hpp>
#include <spillway/pipeline/host_operand.hpp>
#include <spillway/pipeline/job.hpp>
#include <spillway/pipeline/plan.hpp>
#include <spillway/pipeline/task_pipeline.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

namespace spillway::detail {

/// An array that moves chunk by chunk: `unit_bytes` per plan unit (an element, or an outer row of
/// a shaped array); chunk c covers host bytes [c.begin * unit_bytes, (c.begin + c.count) * unit_bytes).
struct streamed_array {
  const void* host = nullptr;  ///< inputs: the source; outputs: the destination; scratch: unused
  std::size_t unit_bytes = 0;
  host_memory memory = host_memory::page_locked;  ///< resolved: page_locked (DMA directly) or pageable (staged)
  bool output = false;                       ///< copied back to the host after the compute
  bool scratch = false;                      ///< device-only per-chunk space: never copied either way
};

/// An input copied whole to every slot once, before that slot's first chunk, and kept there.
struct resident_array {
  const void* host = nullptr;
  std::size_t bytes = 0;
};

/// Runs `plan` (made from a plan_request whose bytes_per_unit are the streamed arrays' unit_bytes,
/// in order, and whose fixed_slot_bytes hold the resident arrays) on `devices`. Per chunk and slot:
/// the streamed inputs' slices go to device buffers (pageable ones through a pinned staging buffer
/// filled by host threads), resident inputs are copied if the slot does not hold them yet, then
/// `compute(chunk, slot, stream, dev)` enqueues the device work on `stream` (dev[k]: the device
/// buffer of streamed array k, then of resident array r at streamed.size() + r), then every output
/// slice goes back (through staging when pageable; copied out by host threads when the chunk
/// completes). Any number of outputs (none: the compute keeps its results itself) and scratch
/// arrays. Returns run_tasks's report; throws what it throws. The public form is
/// spillway::streamed_job (pipeline/streamed_job.hpp).
template <class Compute>
job_report run_streamed_job(const std::vector<int>& devices, const memory_budget& budget,
                            const progress_callback& progress, const chunk_plan& plan,
                            const std::vector<streamed_array>& streamed, const std::vector<resident_array>& resident,
                            Compute compute) {
  const std::size_t ns = streamed.size();
  const std::size_t nr = resident.size();

  task_job_options t;
  t.devices = devices;
  t.slots_per_device = plan.slots();
  t.device_buffer_bytes = plan.buffer_bytes();
  t.budget = budget;
  t.progress = progress;
  constexpr std::size_t direct = static_cast<std::size_t>(-1);
  std::vector<std::size_t> staging(ns, direct);
  bool any_staged_output = false;
  for (std::size_t k = 0; k < ns; ++k) {
    if (!streamed[k].scratch && streamed[k].memory == host_memory::pageable) {
      staging[k] = t.pinned_buffer_bytes.size();
      t.pinned_buffer_bytes.push_back(plan.buffer_bytes()[k]);
      any_staged_output = any_staged_output || streamed[k].output;
    }
  }
  for (const auto& r : resident) t.device_buffer_bytes.push_back(r.bytes);
  // Host copy threads per device pipeline: the pool shared fairly between the devices.
  const std::size_t copy_parts = (staging_workers().size() + 1) / devices.size() > 0
                                     ? (staging_workers().size() + 1) / devices.size()
                                     : 1;
  // Whether slot s of worker w holds resident array r (each worker — an entry of the device list,
  // so a device listed twice has two — runs on a thread of its own and touches only its flags).
  std::vector<std::vector<char>> loaded(devices.size(), std::vector<char>(plan.slots() * (nr > 0 ? nr : 1), 0));
  auto host_at = [&](std::size_t k, const chunk& c) {
    return static_cast<unsigned char*>(const_cast<void*>(streamed[k].host)) + c.begin * streamed[k].unit_bytes;
  };

  auto enqueue = [&](std::size_t task, task_slot& slot, stream_view s) {
    const chunk c = plan.at(task);
    std::vector<void*> dev(ns + nr);
    for (std::size_t k = 0; k < ns + nr; ++k) dev[k] = slot.device(k);
    auto& flags = loaded[slot.worker()];
    for (std::size_t r = 0; r < nr; ++r) {
      char& done = flags[slot.index() * nr + r];
      if (done == 0) {
        SPILLWAY_CUDA_TRY(cudaMemcpyAsync(dev[ns + r], resident[r].host, resident[r].bytes, cudaMemcpyHostToDevice, s.value()));
        slot.add_bytes_moved(resident[r].bytes);
        done = 1;
      }
    }
    for (std::size_t k = 0; k < ns; ++k) {
      if (streamed[k].output || streamed[k].scratch) continue;
      const std::size_t bytes = c.count * streamed[k].unit_bytes;
      const unsigned char* src = host_at(k, c);
      if (staging[k] != direct) {
        void* st = slot.pinned(staging[k]);
        parallel_copy(st, src, bytes, copy_parts);
        src = static_cast<const unsigned char*>(st);
      }
      SPILLWAY_CUDA_TRY(cudaMemcpyAsync(dev[k], src, bytes, cudaMemcpyHostToDevice, s.value()));
      slot.add_bytes_moved(bytes);
    }
    compute(c, slot, s, dev);
    for (std::size_t k = 0; k < ns; ++k) {
      if (!streamed[k].output) continue;
      const std::size_t bytes = c.count * streamed[k].unit_bytes;
      void* dst = staging[k] != direct ? slot.pinned(staging[k]) : static_cast<void*>(host_at(k, c));
      SPILLWAY_CUDA_TRY(cudaMemcpyAsync(dst, dev[k], bytes, cudaMemcpyDeviceToHost, s.value()));
      slot.add_bytes_moved(bytes);
    }
  };
  auto complete = [&](std::size_t task, task_slot& slot) {
    if (!any_staged_output) return;
    const chunk c = plan.at(task);
    for (std::size_t k = 0; k < ns; ++k) {
      if (!streamed[k].output || staging[k] == direct) continue;
      parallel_copy(host_at(k, c), slot.pinned(staging[k]), c.count * streamed[k].unit_bytes, copy_parts);
    }
  };
  return run_tasks(plan.chunk_count(), t, enqueue, complete);
}

}  // namespace spillway::detail
