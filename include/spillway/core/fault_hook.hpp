// spillway/core/fault_hook.hpp — a fault-injection hook for spillway's own tests, compiled
// only where SPILLWAY_FAULT_INJECTION is defined (the pipeline, gram and gemm test binaries define
// it for every translation unit; without it this header declares nothing, its marks expand to the
// bare calls, and the library carries no trace of it).
//
// The hook sits where every out-of-core job passes — spillway's device pool allocation
// (core/device_buffer.hpp), spillway's cudaHostAlloc calls (core/pinned_buffer.hpp and the
// pipeline's staging cache), the host worker pool that stages pageable memory, and run_tasks's
// per-task checks and progress loop (pipeline/task_pipeline.hpp) — so run_tasks, streamed_job,
// the streamed maps, and the Gram and GEMM jobs built on them are all reached without code of
// their own. The jobs that enqueue several copies and launches per task (the pair jobs of Gram and
// float similarity, the out-of-core GEMM) also mark each of them (the macros at the end), so that
// the k-th call of a task can fail in the middle of its enqueue. Injected faults are substituted
// results: the CUDA code the runtime would have returned at that point, or a thrown
// injected_fault; nothing real fails, so the CUDA context stays usable (a real sticky fault would
// not; see docs/reliability.md).
//
// Define the macro for a whole program or not at all: the inline functions of the pipeline differ
// with it, and mixing both kinds of translation unit in one program breaks the one-definition rule.
#pragma once

#if defined(SPILLWAY_FAULT_INJECTION)

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>

namespace spillway::fault {

inline constexpr std::size_t never = static_cast<std::size_t>(-1);
/// For plan::task: whichever task is checked first (on plan::task_device, if set).
inline constexpr std::size_t any_task = static_cast<std::size_t>(-2);

/// What an injected host-side fault throws (a staging copy, the progress point).
class injected_fault : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Where a task's substituted CUDA error surfaces.
enum class task_point {
  /// Right after the task's enqueue callback returned: as if one of its copies or launches had
  /// returned the error when it was enqueued (the callback's SPILLWAY_CUDA_TRY would throw).
  enqueue,
  /// When the scheduler checks that the task's work finished (its event): as if a copy or kernel
  /// of the task had failed asynchronously. The work itself ran; only its status is replaced.
  complete,
};

/// What to inject. Every field is off by default; counters restart at arm().
struct plan {
  /// The k-th (0-based) allocation from spillway's device pools fails with cudaErrorMemoryAllocation
  /// (both the first try and the retry after trimming the pool, as a full device would).
  std::size_t device_allocation = never;
  /// Count (and fail) only allocations on this device; -1: every device.
  int allocation_device = -1;
  /// Fail only the first try of that allocation: the pool's trim-and-retry path then succeeds.
  bool allocation_retry_succeeds = false;
  /// The k-th page-locked allocation by spillway (a pinned_buffer, or a staging block the pipeline's
  /// cache has to pin anew) fails with cudaErrorMemoryAllocation, the cache's retry after trimming too.
  std::size_t pinned_allocation = never;
  /// This task's check at `task_at` reports `task_error` (any_task: the first task checked).
  std::size_t task = never;
  /// Only on this device; -1: every device.
  int task_device = -1;
  task_point task_at = task_point::complete;
  cudaError_t task_error = cudaErrorLaunchFailure;
  /// The k-th call of the host worker pool (a pageable ⇄ pinned staging copy) throws injected_fault
  /// from its last part: on a pool worker thread when the call is split, else on the caller.
  std::size_t staging_call = never;
  /// At the progress point of run_tasks (with or without a caller's progress callback): cancel once
  /// this many tasks are done…
  std::size_t cancel_after = never;
  /// …or, if set, throw injected_fault there instead of cancelling.
  bool progress_throws = false;
  /// The k-th (0-based) copy or kernel launch that task `call_task` enqueues reports `call_error`
  /// when it is enqueued. Counted where a job marks its calls (SPILLWAY_FAULT_CALL and
  /// SPILLWAY_FAULT_LAUNCHED below: the pair jobs (Gram, float similarity) and the out-of-core
  /// GEMM mark every copy and launch of a task's enqueue, a Producer's tile kernel or an in-core
  /// GEMM counting as one launch) inside that task's SPILLWAY_FAULT_TASK_SCOPE.
  std::size_t call = never;
  /// Whose calls count: a task index, or any_task (the calls of every task, in the order they are
  /// made; with several devices, restrict it with call_device).
  std::size_t call_task = any_task;
  int call_device = -1;
  cudaError_t call_error = cudaErrorLaunchFailure;
};

namespace detail {

struct state {
  std::mutex mutex;  // guards p and fired_task
  plan p;
  std::size_t fired_task = never;
  int fired_device = -1;
  std::atomic<std::size_t> device_allocations{0};
  std::atomic<std::size_t> pinned_allocations{0};
  std::atomic<std::size_t> staging_calls{0};
  std::atomic<std::size_t> task_calls{0};
  std::atomic<std::size_t> fired{0};
  std::atomic<std::int64_t> pinned_live_bytes{0};
  std::atomic<std::int64_t> pinned_live_blocks{0};
};

inline state& global() {
  static state s;
  return s;
}

/// Called by pool_allocate once per allocation: how many tries to fail (0, 1 or 2).
inline int device_allocation_fault(int device) {
  state& s = global();
  std::lock_guard<std::mutex> l(s.mutex);
  if (s.p.allocation_device >= 0 && s.p.allocation_device != device) return 0;
  const std::size_t k = s.device_allocations.fetch_add(1);
  if (k != s.p.device_allocation) return 0;
  s.fired.fetch_add(1);
  s.fired_device = device;
  return s.p.allocation_retry_succeeds ? 1 : 2;
}

/// Counts a call on `calls` (a counter of global()) and says whether it is the plan's call number
/// `target` of the plan (`target` read under the lock), which then counts as fired.
template <class Target>
bool nth_call_fails(std::atomic<std::size_t> state::*calls, Target target) {
  state& s = global();
  std::lock_guard<std::mutex> l(s.mutex);
  const std::size_t k = (s.*calls).fetch_add(1);
  if (k != target(s.p)) return false;
  s.fired.fetch_add(1);
  return true;
}

/// Called before each cudaHostAlloc by spillway: true to fail it.
inline bool pinned_allocation_fault() {
  return nth_call_fails(&state::pinned_allocations, [](const plan& p) { return p.pinned_allocation; });
}

inline void pinned_allocated(std::size_t bytes) noexcept {
  global().pinned_live_bytes.fetch_add(static_cast<std::int64_t>(bytes));
  global().pinned_live_blocks.fetch_add(1);
}
inline void pinned_freed(std::size_t bytes) noexcept {
  global().pinned_live_bytes.fetch_sub(static_cast<std::int64_t>(bytes));
  global().pinned_live_blocks.fetch_sub(1);
}

/// Called at a task's check points: the error to report instead of success (cudaSuccess: none).
inline cudaError_t task_fault(task_point where, std::size_t task, int device) {
  state& s = global();
  std::lock_guard<std::mutex> l(s.mutex);
  if (s.p.task == never || s.p.task_at != where) return cudaSuccess;
  if (s.p.task_device >= 0 && s.p.task_device != device) return cudaSuccess;
  if (s.p.task != any_task && s.p.task != task) return cudaSuccess;
  s.p.task = never;  // once
  s.fired.fetch_add(1);
  s.fired_task = task;
  s.fired_device = device;
  return s.p.task_error;
}

/// Called once per host worker pool call: true when this call's last part must throw.
inline bool staging_call_fault() {
  return nth_call_fails(&state::staging_calls, [](const plan& p) { return p.staging_call; });
}

[[noreturn]] inline void throw_staging_fault() {
  throw injected_fault("injected fault: a host staging copy part threw");
}

/// The task (and its device) whose enqueue the calling thread is in: set by SPILLWAY_FAULT_TASK_SCOPE.
struct current_task {
  std::size_t task = never;
  int device = -1;
};
inline current_task& this_thread_task() {
  thread_local current_task t;
  return t;
}

class task_scope {
 public:
  task_scope(std::size_t task, int device) : saved_(this_thread_task()) { this_thread_task() = {task, device}; }
  ~task_scope() { this_thread_task() = saved_; }
  task_scope(const task_scope&) = delete;
  task_scope& operator=(const task_scope&) = delete;

 private:
  current_task saved_;
};

/// Called with the status a marked copy or launch returned: that status, or the planned error when
/// this is the planned call of the planned task (a real error is passed on and not counted).
inline cudaError_t call_fault(cudaError_t real) {
  if (real != cudaSuccess) return real;
  const current_task ct = this_thread_task();
  if (ct.task == never) return real;  // outside a task's enqueue (a job's setup): not counted
  state& s = global();
  std::lock_guard<std::mutex> l(s.mutex);
  if (s.p.call == never) return real;
  if (s.p.call_device >= 0 && s.p.call_device != ct.device) return real;
  if (s.p.call_task != any_task && s.p.call_task != ct.task) return real;
  const std::size_t k = s.task_calls.fetch_add(1);
  if (k != s.p.call) return real;
  s.fired.fetch_add(1);
  s.fired_task = ct.task;
  s.fired_device = ct.device;
  return s.p.call_error;
}

/// Whether run_tasks must visit its progress point even without a caller's callback.
inline bool watches_progress() {
  state& s = global();
  std::lock_guard<std::mutex> l(s.mutex);
  return s.p.cancel_after != never;
}

/// Called at run_tasks's progress point: false to cancel; throws injected_fault if so planned.
inline bool progress_fault(std::size_t tasks_done) {
  state& s = global();
  std::lock_guard<std::mutex> l(s.mutex);
  if (s.p.cancel_after == never || tasks_done < s.p.cancel_after) return true;
  s.p.cancel_after = never;  // once
  s.fired.fetch_add(1);
  if (s.p.progress_throws) {
    throw injected_fault("injected fault: the progress point threw after " + std::to_string(tasks_done) + " tasks");
  }
  return false;
}

}  // namespace detail

/// Arms `p` (replacing any plan) and restarts the counters.
inline void arm(const plan& p) {
  detail::state& s = detail::global();
  std::lock_guard<std::mutex> l(s.mutex);
  s.p = p;
  s.fired_task = never;
  s.fired_device = -1;
  s.device_allocations.store(0);
  s.pinned_allocations.store(0);
  s.staging_calls.store(0);
  s.task_calls.store(0);
  s.fired.store(0);
}
/// Injects nothing more (the counters keep counting).
inline void disarm() { arm(plan{}); }

/// Faults injected since arm().
inline std::size_t fired() { return detail::global().fired.load(); }
/// The task and device of the last injected task fault (never / -1 if none); the device also for
/// an injected device allocation failure.
inline std::size_t fired_task() {
  std::lock_guard<std::mutex> l(detail::global().mutex);
  return detail::global().fired_task;
}
inline int fired_device() {
  std::lock_guard<std::mutex> l(detail::global().mutex);
  return detail::global().fired_device;
}
/// Events counted since arm() (allocations on plan::allocation_device only, when it is set).
inline std::size_t device_allocations() { return detail::global().device_allocations.load(); }
inline std::size_t pinned_allocations() { return detail::global().pinned_allocations.load(); }
inline std::size_t staging_calls() { return detail::global().staging_calls.load(); }
/// Marked copies and launches counted since arm() (those of plan::call_task / call_device only).
inline std::size_t task_calls() { return detail::global().task_calls.load(); }
/// Page-locked bytes and blocks spillway holds now (cudaHostAlloc minus cudaFreeHost, since the
/// program started; pinned_buffer objects and the pipeline's staging cache both count).
inline std::int64_t pinned_live_bytes() { return detail::global().pinned_live_bytes.load(); }
inline std::int64_t pinned_live_blocks() { return detail::global().pinned_live_blocks.load(); }

/// Arms a plan for one scope; disarms when it ends (also when a test assertion returns early).
class scope {
 public:
  explicit scope(const plan& p) { arm(p); }
  ~scope() { disarm(); }
  scope(const scope&) = delete;
  scope& operator=(const scope&) = delete;
};

}  // namespace spillway::fault

#endif  // SPILLWAY_FAULT_INJECTION

// Marks for a job's own copies and launches; without SPILLWAY_FAULT_INJECTION they are the call
// itself, nothing, and nothing.
//   SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaMemcpyAsync(...)));   a copy (or a launch check)
//   SPILLWAY_FAULT_LAUNCHED("bit_gemm_async");                       after work another header launched
//   SPILLWAY_FAULT_TASK_SCOPE(t, device);                            at the top of task t's enqueue
#if defined(SPILLWAY_FAULT_INJECTION)
#define SPILLWAY_FAULT_CALL(call) ::spillway::fault::detail::call_fault(call)
#define SPILLWAY_FAULT_LAUNCHED(what)                                                                        \
  do {                                                                                                       \
    if (const cudaError_t spillway_fault_err_ = ::spillway::fault::detail::call_fault(cudaSuccess);          \
        spillway_fault_err_ != cudaSuccess) {                                                                \
      ::spillway::detail::throw_cuda_error(spillway_fault_err_, what " (injected fault)", __FILE__, __LINE__); \
    }                                                                                                        \
  } while (0)
#define SPILLWAY_FAULT_TASK_SCOPE(task, device) \
  const ::spillway::fault::detail::task_scope spillway_fault_task_scope_((task), (device))
#else
#define SPILLWAY_FAULT_CALL(call) (call)
#define SPILLWAY_FAULT_LAUNCHED(what) ((void)0)
#define SPILLWAY_FAULT_TASK_SCOPE(task, device) ((void)0)
#endif
