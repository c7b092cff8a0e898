// spillway/pairwise/sinks/sink.cuh — what a sink of the pair job is, and the defaults it inherits.
//
// A sink decides what is kept of an all-pairs result. The pair job (pairwise/pair_job.cuh) runs
// the strips — operands in, the producer's products — and hands each strip to its sink; it knows
// nothing of what the sink keeps. A sink is a class (one file per sink in this folder) providing:
//
//   sink_footprint footprint() const;          what the planner reserves: per slot, per device
//   template <class Job> void setup(Job&, std::size_t worker, stream_view s);
//                                              per device, on its setup stream, before the strips
//                                              (the job synchronizes `s` after): its state
//   template <class Job> void start(Job&);     once, after every device's setup: host-side work
//                                              that runs while the strips do
//   std::vector<std::size_t> pinned_buffers(const pair_plan&) const;   per-slot pinned staging
//   template <class Job, class Compute>
//   std::size_t enqueue(Job&, const strip_span&, task_slot&, stream_view s, Compute&& compute);
//                                              calls compute(writer) with its device writer (see
//                                              sink_kernels.cuh), then enqueues on `s` what it
//                                              does with the strip; never waits for the stream.
//                                              Returns the host-link bytes it enqueued. (A sink
//                                              that runs its own product on the resident rows,
//                                              similarity's fused top-k, does not call compute:
//                                              the strip's rows are then never staged.)
//   template <class Job> std::size_t complete(Job&, const strip_span&, task_slot&);
//                                              on the host once the strip's work has finished
//                                              (its staging filled); returns host-link bytes moved
//   collect(Job&)                              the result, after the job (where there is one)
//
// sink_base gives the empty defaults of setup, start, pinned_buffers and complete. The job's
// per-device state (Job::ctx[worker]: device, setup stream) and its plan (Job::plan: buffer
// indices of the slot) are the sink's to read.
#pragma once

#include <spillway/core/stream.hpp>
#include <spillway/pairwise/plan.hpp>
#include <spillway/pairwise/strip.cuh>
#include <spillway/pipeline/task_pipeline.hpp>

#include <cstddef>
#include <type_traits>
#include <vector>

namespace spillway::pairwise::detail {

/// The defaults of a sink: no device state, no host start, no staging, nothing on completion.
struct sink_base {
  template <class Job>
  void setup(Job&, std::size_t, stream_view) {}
  template <class Job>
  void start(Job&) {}
  [[nodiscard]] std::vector<std::size_t> pinned_buffers(const pair_plan&) const { return {}; }
  template <class Job>
  std::size_t complete(Job&, const strip_span&, task_slot&) {
    return 0;
  }
};

inline std::size_t round8(std::size_t x) {
  return (x + 7) / 8 * 8;
}

/// Calls f(std::true_type) for similarities (larger is better), f(std::false_type) for distances.
template <class F>
void with_larger(bool larger, F&& f) {
  if (larger)
    f(std::true_type{});
  else
    f(std::false_type{});
}

/// A per-worker vector grown to hold worker `w` (setup runs for the workers in turn).
template <class T>
T& per_worker(std::vector<T>& v, std::size_t w) {
  if (v.size() <= w) v.resize(w + 1);
  return v[w];
}

}  // namespace spillway::pairwise::detail
