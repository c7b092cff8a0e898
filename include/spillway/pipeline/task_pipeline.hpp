// spillway/pipeline/task_pipeline.hpp — the low-level out-of-core scheduler: N tasks over one or
// several devices, each device a ring of reusable slots (a stream, device scratch, optional pinned
// staging) guarded by events.
//
//   spillway::task_job_options o;
//   o.device_buffer_bytes = {panel_bytes, panel_bytes, block_bytes};   // per slot
//   o.budget = spillway::memory_budget(8_GiB);
//   auto report = spillway::run_tasks(n_tasks, o,
//       [&](std::size_t t, spillway::task_slot& slot, spillway::stream_view s) {
//         auto* a = slot.device<std::uint32_t>(0);                 // this slot's buffer 0
//         cudaMemcpyAsync(a, host + off(t), bytes(t), cudaMemcpyHostToDevice, s);
//         my_kernel<<<grid, block, 0, s>>>(a, …);
//         cudaMemcpy2DAsync(…, cudaMemcpyDeviceToHost, s);
//         slot.add_bytes_moved(bytes(t) + out_bytes(t));
//       },
//       [&](std::size_t t) { /* host side: task t's results are complete */ });
//
// Guarantees: slot memory is allocated once per job (never inside the loop); when enqueue(t, slot,
// s) is called, every operation of the slot's previous task has finished and its on_complete has
// returned, so the slot's buffers are free; every worker (one per device list entry) takes task w
// as its first, then tasks are handed out in index order from one shared counter, so a faster
// device takes more (near the end a worker takes one only with at most one task in flight); an exception (from a callback, a CUDA error, an
// allocation) stops the job: no new task starts, in-flight work is drained, every buffer is freed,
// and a pipeline_error names the failed task and which tasks completed.
#pragma once

#include <spillway/core/fault_hook.hpp>
#include <spillway/core/device.hpp>
#include <spillway/core/device_buffer.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/memory_budget.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/pipeline/host_workers.hpp>
#include <spillway/pipeline/job.hpp>
#include <spillway/pipeline/plan.hpp>

#include <cuda/std/span>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace spillway {

/// How a task job is laid out on each device.
struct task_job_options {
  /// Devices to use, one worker (a ring of slots on its own host thread) per entry. Empty: all
  /// visible devices. A device may be listed more than once: {0, 0} runs two workers on device 0,
  /// each with its own ring and the whole `budget` (the budget is per list entry), which drives the
  /// several-device scheduling, split and failure paths on one GPU.
  std::vector<int> devices;
  /// Slots (= streams) per device: tasks in flight at once. 3 or more let one task's host→device
  /// copy, another's kernels and a third's device→host copy run at the same time.
  std::size_t slots_per_device = 3;
  /// Bytes of each device buffer of a slot (slot.device<T>(k) for k < size()).
  std::vector<std::size_t> device_buffer_bytes;
  /// Bytes of each pinned host staging buffer of a slot (slot.pinned<T>(k)); may be empty.
  std::vector<std::size_t> pinned_buffer_bytes;
  /// If set, the job's whole device memory on every device: the slots plus reserved_bytes must
  /// fit in it (else logic_error stating the minimum). This is the job's one budget check.
  std::optional<memory_budget> budget;
  /// Bytes the job allocates on each device outside the slots (its set-up: a resident operand,
  /// per-row values, a sink's state, the out-of-core GEMM's panel caches), before the run or in
  /// `setup`, counted with the slots against `budget`.
  std::size_t reserved_bytes = 0;
  /// Optional: the job's own set-up (what `reserved_bytes` counts), called once on the caller's
  /// thread after the checks above passed and before any slot is allocated or task enqueued, so a
  /// budget too small is refused before the job allocates anything. What it throws leaves
  /// run_tasks as it is (nothing of the job has run).
  std::function<void()> setup;
  /// Optional; see progress_callback.
  progress_callback progress;
};

namespace detail {
template <class Enqueue, class Complete>
class task_runner;
}  // namespace detail

/// One reusable slot of a device's ring: its stream, its device buffers and pinned staging.
class task_slot {
 public:
  [[nodiscard]] int device() const noexcept { return device_; }
  /// The slot's worker: the index of its entry in the job's device list (0 ≤ worker < the number
  /// of entries). Per-device state of a job is indexed by this, not by device(): a device listed
  /// twice has two workers.
  [[nodiscard]] std::size_t worker() const noexcept { return worker_; }
  /// The slot's index in its device's ring (0 ≤ index < slots_per_device).
  [[nodiscard]] std::size_t index() const noexcept { return index_; }
  /// The task currently (or last) assigned to the slot.
  [[nodiscard]] std::size_t task() const noexcept { return task_; }
  [[nodiscard]] stream_view stream() const noexcept { return stream_view(stream_); }

  /// Device buffer k as T* (its start is 256-byte aligned).
  template <class T = std::byte>
  [[nodiscard]] T* device(std::size_t k) const {
    check(k, device_ptrs_.size(), "device");
    return static_cast<T*>(device_ptrs_[k]);
  }
  [[nodiscard]] std::size_t device_bytes(std::size_t k) const {
    check(k, device_sizes_.size(), "device_bytes");
    return device_sizes_[k];
  }
  template <class T>
  [[nodiscard]] cuda::std::span<T> device_span(std::size_t k) const {
    return {device<T>(k), device_bytes(k) / sizeof(T)};
  }
  /// Pinned staging buffer k as T*.
  template <class T = std::byte>
  [[nodiscard]] T* pinned(std::size_t k) const {
    check(k, pinned_.size(), "pinned");
    return static_cast<T*>(pinned_[k].data());
  }
  [[nodiscard]] std::size_t pinned_bytes(std::size_t k) const {
    check(k, pinned_.size(), "pinned_bytes");
    return pinned_[k].size();
  }
  /// Credits host↔device bytes to the current task (reported in progress when it completes).
  void add_bytes_moved(std::size_t bytes) noexcept { bytes_ += bytes; }

  task_slot() = default;
  task_slot(const task_slot&) = delete;
  task_slot& operator=(const task_slot&) = delete;
  task_slot(task_slot&&) noexcept = default;
  task_slot& operator=(task_slot&&) noexcept = default;
  ~task_slot() = default;

 private:
  template <class E, class C>
  friend class detail::task_runner;
  static void check(std::size_t k, std::size_t n, const char* who) {
    if (k >= n) {
      throw logic_error(std::string("task_slot::") + who + ": buffer index " + std::to_string(k) +
                        " out of range (the slot has " + std::to_string(n) + ")");
    }
  }
  int device_ = 0;
  std::size_t worker_ = 0;
  std::size_t index_ = 0;
  std::size_t task_ = 0;
  std::size_t bytes_ = 0;
  cudaStream_t stream_ = nullptr;
  std::vector<void*> device_ptrs_;
  std::vector<std::size_t> device_sizes_;
  std::vector<detail::staging_block> pinned_;
};

namespace detail {

struct no_completion {
  void operator()(std::size_t) const noexcept {}
};

inline std::string exception_text(const std::exception_ptr& p) {
  try {
    std::rethrow_exception(p);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

/// The shared state of one job (all devices).
struct task_job_state {
  std::size_t total = 0;
  std::size_t workers = 1;
  std::size_t first_round = 0;  // tasks [0, first_round) go to workers 0.. as their first
  std::atomic<std::size_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex mutex;  // guards everything below
  std::condition_variable cv;
  std::vector<bool> completed;
  std::size_t done = 0;
  std::size_t bytes = 0;
  std::size_t workers_left = 0;
  std::size_t setups_left = 0;  // workers whose ring is not set up yet (none takes a task before)
  std::exception_ptr error;
  std::size_t failed_task = pipeline_error::no_task;
  int failed_device = -1;
  std::string failed_where;
  std::vector<std::size_t> per_device;
  std::vector<std::size_t> bytes_per_device;

  void fail(std::exception_ptr e, std::size_t task, int device, const char* where) {
    std::lock_guard<std::mutex> l(mutex);
    if (!error) {
      error = std::move(e);
      failed_task = task;
      failed_device = device;
      failed_where = where;
    }
    stop.store(true);
    cv.notify_all();
  }
};

}  // namespace detail

namespace detail {

/// Runs one device's share of a job.
template <class Enqueue, class Complete>
class task_runner {
 public:
  task_runner(detail::task_job_state& st, const task_job_options& o, Enqueue& enq, Complete& comp,
                     int device, std::size_t device_index, std::size_t slots)
      : st_(st), o_(o), enq_(enq), comp_(comp), device_(device), di_(device_index), nslots_(slots) {}

  void run() noexcept {
    try {
      device_guard g(device_);
      bool ok = true;
      try {
        setup();
      } catch (...) {
        st_.fail(std::current_exception(), pipeline_error::no_task, device_, "setting up");
        ok = false;
      }
      // Every worker's ring is set up before any takes a task, so how the tasks split does not
      // depend on which device's streams and memory came first (a worker whose device had
      // nothing cached in its pool yet could otherwise find every task taken).
      {
        std::unique_lock<std::mutex> l(st_.mutex);
        --st_.setups_left;
        st_.cv.notify_all();
        st_.cv.wait(l, [&] { return st_.setups_left == 0 || st_.stop.load(); });
      }
      if (!ok) {
        teardown();
        return;
      }
      loop();
      drain();
      teardown();
    } catch (...) {
      st_.fail(std::current_exception(), pipeline_error::no_task, device_, "running");
    }
  }

 private:
  static constexpr std::size_t none = static_cast<std::size_t>(-1);

  void setup() {
    streams_.reserve(nslots_);
    events_.reserve(nslots_);
    for (std::size_t i = 0; i < nslots_; ++i) {
      streams_.emplace_back(device_);
      events_.emplace_back();
    }
    std::vector<std::size_t> offsets;
    const std::size_t per_slot = detail::slot_device_bytes(o_.device_buffer_bytes, &offsets);
    memory_ = device_buffer<std::byte>(per_slot * nslots_, streams_[0].view());
    streams_[0].synchronize();  // the memory is ready for every stream of the ring
    slots_.resize(nslots_);
    for (std::size_t i = 0; i < nslots_; ++i) {
      task_slot& s = slots_[i];
      s.device_ = device_;
      s.worker_ = di_;
      s.index_ = i;
      s.task_ = none;
      s.stream_ = streams_[i].value();
      for (std::size_t k = 0; k < o_.device_buffer_bytes.size(); ++k) {
        s.device_ptrs_.push_back(memory_.data() + i * per_slot + offsets[k]);
        s.device_sizes_.push_back(o_.device_buffer_bytes[k]);
      }
      for (std::size_t b : o_.pinned_buffer_bytes) s.pinned_.emplace_back(b);
    }
    busy_.assign(nslots_, false);
  }

  // Marks slot i's task complete (its event has been reached) and runs on_complete.
  bool complete(std::size_t i) {
    task_slot& s = slots_[i];
    busy_[i] = false;
    const std::size_t t = s.task_;
    try {
      events_[i].synchronize();
#if defined(SPILLWAY_FAULT_INJECTION)
      if (const cudaError_t fe = ::spillway::fault::detail::task_fault(::spillway::fault::task_point::complete, t, device_);
          fe != cudaSuccess) {
        detail::throw_cuda_error(fe, "cudaEventSynchronize (the task's copies and kernels; injected fault)", __FILE__,
                                 __LINE__);
      }
#endif
    } catch (...) {
      st_.fail(std::current_exception(), t, device_, "completing");
      return false;
    }
    try {
      if constexpr (std::is_invocable_v<Complete&, std::size_t, task_slot&>) {
        comp_(t, s);
      } else {
        comp_(t);
      }
    } catch (...) {
      st_.fail(std::current_exception(), t, device_, "on_complete of");
      return false;
    }
    {
      std::lock_guard<std::mutex> l(st_.mutex);
      st_.completed[t] = true;
      ++st_.done;
      st_.bytes += s.bytes_;
      ++st_.per_device[di_];
      st_.bytes_per_device[di_] += s.bytes_;
    }
    st_.cv.notify_all();
    return true;
  }

  void loop() {
    bool first = true;
    for (std::size_t k = 0;; ++k) {
      const std::size_t i = k % nslots_;
      if (busy_[i] && !complete(i)) return;
      if (st_.stop.load()) return;
      // The tail of a job of several workers: once no more tasks are left to hand out than the
      // workers have slots, a worker takes the next task only while it has at most one task in
      // flight, so the last tasks go to the devices that free up first instead of queueing
      // behind a device's own (docs/pipeline.md, "Low-level: `run_tasks`").
      if (st_.workers > 1 && !first) {
        const std::size_t next = st_.next.load();
        const std::size_t left = next < st_.total ? st_.total - next : 0;
        std::size_t in_flight = 0;
        for (bool b : busy_) in_flight += b ? 1u : 0u;
        if (left <= st_.workers * nslots_ && in_flight >= 2) continue;
      }
      // A worker's first task is its own (task w for worker w), so every worker set up for a job
      // of at least as many tasks as workers takes part however fast the others are.
      const std::size_t t = first && di_ < st_.first_round ? di_ : st_.next.fetch_add(1);
      first = false;
      if (t >= st_.total) return;
      task_slot& s = slots_[i];
      s.task_ = t;
      s.bytes_ = 0;
      try {
        enq_(t, s, s.stream());
#if defined(SPILLWAY_FAULT_INJECTION)
        if (const cudaError_t fe = ::spillway::fault::detail::task_fault(::spillway::fault::task_point::enqueue, t, device_);
            fe != cudaSuccess) {
          detail::throw_cuda_error(fe, "a copy or kernel launch of the task (injected fault)", __FILE__, __LINE__);
        }
#endif
        events_[i].record(s.stream());
      } catch (...) {
        st_.fail(std::current_exception(), t, device_, "enqueueing");
        // Whatever the callback enqueued before throwing is drained with the stream below.
        failed_slot_ = i;
        return;
      }
      busy_[i] = true;
    }
  }

  void drain() {
    // Everything enqueued on the ring finishes before its memory is freed.
    for (std::size_t i = 0; i < nslots_; ++i) {
      const cudaError_t e = cudaStreamSynchronize(streams_[i].value());
      if (e != cudaSuccess) {
        (void)cudaGetLastError();
        if (busy_[i]) {
          busy_[i] = false;
          try {
            detail::throw_cuda_error(e, "cudaStreamSynchronize (draining the ring)", __FILE__, __LINE__);
          } catch (...) {
            st_.fail(std::current_exception(), slots_[i].task_, device_, "draining");
          }
        }
      }
    }
    // Tasks in flight that finished cleanly are complete: report them (their output is valid).
    for (std::size_t k = 0; k < nslots_; ++k) {
      if (busy_[k] && k != failed_slot_) complete(k);
    }
  }

  void teardown() noexcept {
    for (auto& s : streams_) (void)cudaStreamSynchronize(s.value());
    if (!memory_.empty()) {
      memory_ = device_buffer<std::byte>();  // freed on the ring's first stream…
      if (!streams_.empty()) (void)cudaStreamSynchronize(streams_[0].value());  // …and back in the pool now
    }
    (void)cudaGetLastError();
    slots_.clear();  // returns the pinned staging to the cache
  }

  detail::task_job_state& st_;
  const task_job_options& o_;
  Enqueue& enq_;
  Complete& comp_;
  int device_;
  std::size_t di_;
  std::size_t nslots_;
  std::vector<stream> streams_;
  std::vector<event> events_;
  device_buffer<std::byte> memory_;
  std::vector<task_slot> slots_;
  std::vector<bool> busy_;
  std::size_t failed_slot_ = none;
};

/// For the jobs that have a host implementation: true when it should run instead (no devices
/// listed, none visible, and the caller allowed it); throws no_gpu_error, naming the option that
/// would allow it, when there is no GPU and the caller did not. False when there is a GPU.
inline bool run_on_host_instead(bool allowed, const std::vector<int>& devices, const char* who, const char* option,
                                const char* host_function) {
  if (!devices.empty() || device_count() > 0) return false;
  if (allowed) return true;
  throw_no_gpu(who, std::string("set ") + option + " = true to run the host implementation (" + host_function +
                        ") instead, or call it directly");
}

/// The report of a job that the host implementation ran: one task, complete, no devices.
inline job_report host_job_report(std::chrono::steady_clock::time_point t0) {
  job_report r;
  r.tasks_total = 1;
  r.completed = {true};
  r.tasks_completed = 1;
  r.elapsed_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace detail

/// Runs tasks 0..n_tasks-1 over the devices of `opts`: `enqueue(t, slot, stream)` enqueues task t's
/// copies and kernels on the slot's stream using the slot's buffers; `on_complete(t)` (or
/// `on_complete(t, slot)`) runs on the host once they have all finished. Both callbacks run on the
/// device's worker thread (one per device; callbacks of different devices may run concurrently).
/// Returns the report (check `cancelled` when a progress callback may cancel); throws
/// pipeline_error when a callback or CUDA fails, logic_error for bad options and a budget below
/// the slots plus reserved_bytes (before any work, opts.setup included).
template <class Enqueue, class OnComplete = detail::no_completion>
job_report run_tasks(std::size_t n_tasks, const task_job_options& opts, Enqueue&& enqueue,
                     OnComplete&& on_complete = {}) {
  static_assert(std::is_invocable_v<Enqueue&, std::size_t, task_slot&, stream_view>,
                "enqueue must be callable as enqueue(std::size_t task, task_slot& slot, stream_view s)");
  static_assert(std::is_invocable_v<OnComplete&, std::size_t> ||
                    std::is_invocable_v<OnComplete&, std::size_t, task_slot&>,
                "on_complete must be callable as on_complete(std::size_t task) or (task, task_slot&)");
  const auto t0 = std::chrono::steady_clock::now();
  if (opts.slots_per_device == 0) throw logic_error("run_tasks: slots_per_device must be at least 1, got 0");
  const std::vector<int> devices = resolve_devices(opts.devices, "run_tasks");
  const std::size_t slots = n_tasks < opts.slots_per_device ? n_tasks : opts.slots_per_device;
  const std::size_t per_slot = detail::slot_device_bytes(opts.device_buffer_bytes);
  if (opts.budget && slots > 0) {
    const std::size_t need = slots * per_slot + opts.reserved_bytes;
    if (detail::mul_overflows(slots, per_slot) || need < opts.reserved_bytes || need > opts.budget->bytes()) {
      throw logic_error("run_tasks: budget " + std::to_string(opts.budget->bytes()) + " bytes is too small for " +
                        std::to_string(slots) + " slot(s) of " + std::to_string(per_slot) + " bytes" +
                        (opts.reserved_bytes > 0 ? " and " + std::to_string(opts.reserved_bytes) + " reserved bytes"
                                                 : std::string()) +
                        "; the minimum budget is " + std::to_string(need) + " bytes");
    }
  }
  if (opts.setup) opts.setup();

  detail::task_job_state st;
  st.total = n_tasks;
  st.workers = devices.size();
  st.first_round = std::min(n_tasks, devices.size());
  st.next.store(st.first_round);
  st.completed.assign(n_tasks, false);
  st.per_device.assign(devices.size(), 0);
  st.bytes_per_device.assign(devices.size(), 0);
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };

  bool cancelled = false;
  if (n_tasks > 0) {
    using runner_t = detail::task_runner<std::remove_reference_t<Enqueue>, std::remove_reference_t<OnComplete>>;
    std::vector<std::unique_ptr<runner_t>> runners;
    for (std::size_t i = 0; i < devices.size(); ++i) {
      runners.push_back(std::make_unique<runner_t>(st, opts, enqueue, on_complete, devices[i], i, slots));
    }
    st.workers_left = devices.size();
    st.setups_left = devices.size();
    std::vector<std::thread> threads;
    threads.reserve(devices.size());
    for (auto& r : runners) {
      threads.emplace_back([&st, rp = r.get()] {
        rp->run();
        std::lock_guard<std::mutex> l(st.mutex);
        --st.workers_left;
        st.cv.notify_all();
      });
    }
    // The caller's thread reports progress and turns a `false` from the callback into a cancel.
    {
      std::unique_lock<std::mutex> l(st.mutex);
      std::size_t reported = static_cast<std::size_t>(-1);
#if defined(SPILLWAY_FAULT_INJECTION)
      const bool watch = static_cast<bool>(opts.progress) || ::spillway::fault::detail::watches_progress();
#else
      const bool watch = static_cast<bool>(opts.progress);
#endif
      for (;;) {
        if (watch && st.done != reported && !cancelled) {
          reported = st.done;
          const progress_info p{st.done, st.total, st.bytes, elapsed()};
          l.unlock();
          bool keep_going = true;
          try {
            if (opts.progress) keep_going = opts.progress(p);
#if defined(SPILLWAY_FAULT_INJECTION)
            if (keep_going) keep_going = ::spillway::fault::detail::progress_fault(p.tasks_done);
#endif
          } catch (...) {
            // A throw stops the job like a failed task. The callback may be told of the last
            // completion only after every task finished, and tasks already running finish after
            // a throw: the job throws all the same, and where every task completed by its end
            // (its report complete(), every output whole) the message says so (below).
            st.fail(std::current_exception(), pipeline_error::no_task, -1, "progress callback during");
          }
          l.lock();
          if (!keep_going) {
            cancelled = true;
            st.stop.store(true);
          }
          continue;  // re-check for completions that arrived meanwhile
        }
        if (st.workers_left == 0) break;
        st.cv.wait(l);
      }
    }
    for (auto& t : threads) t.join();
  }

  job_report r;
  r.tasks_total = n_tasks;
  r.completed = st.completed;
  r.tasks_completed = st.done;
  r.cancelled = cancelled && !st.error;
  r.bytes_moved = st.bytes;
  r.devices = devices;
  r.tasks_per_device = st.per_device;
  r.bytes_per_device = st.bytes_per_device;
  r.slots_per_device = slots;
  r.device_bytes_per_device = slots * per_slot;
  r.elapsed_seconds = elapsed();
  if (st.error) {
    std::string msg = "spillway pipeline: ";
    if (st.failed_task != pipeline_error::no_task) {
      msg += std::string(st.failed_where) + " task " + std::to_string(st.failed_task);
    } else if (st.done == n_tasks && st.failed_where == std::string("progress callback during")) {
      msg += "progress callback after the last task of the job";
    } else {
      msg += st.failed_where + " the job";
    }
    if (st.failed_device >= 0) msg += " on device " + std::to_string(st.failed_device);
    msg += " failed (" + std::to_string(st.done) + " of " + std::to_string(n_tasks) +
           " tasks completed): " + detail::exception_text(st.error);
    try {
      std::rethrow_exception(st.error);
    } catch (...) {
      throw pipeline_error(msg, st.failed_task, st.failed_device, std::move(r));
    }
  }
  return r;
}

}  // namespace spillway
