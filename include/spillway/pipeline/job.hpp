// spillway/pipeline/job.hpp — what an out-of-core job reports: progress, the final report, and
// pipeline_error (a failed job: which task failed, which tasks completed, the original exception).
#pragma once

#include <cstddef>
#include <exception>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace spillway {

/// A snapshot handed to a job's progress callback.
struct progress_info {
  std::size_t tasks_done = 0;   ///< tasks (chunks) whose results are complete
  std::size_t tasks_total = 0;
  std::size_t bytes_moved = 0;  ///< host↔device bytes of the completed tasks
  double elapsed_seconds = 0.0;
};

/// Called on the caller's thread: once at the start (0 done), then whenever the count of completed
/// tasks has changed (calls are coalesced; the last one sees the final count). Return false to cancel:
/// no further task starts, the tasks in flight are drained, and the job returns with
/// `job_report::cancelled` set.
using progress_callback = std::function<bool(const progress_info&)>;

/// The outcome of a job that did not fail.
struct job_report {
  std::size_t tasks_total = 0;
  std::vector<bool> completed;              ///< completed[i]: task i's results are complete
  std::size_t tasks_completed = 0;
  bool cancelled = false;                   ///< stopped by the progress callback
  std::size_t bytes_moved = 0;
  double elapsed_seconds = 0.0;
  std::vector<int> devices;                 ///< the devices used
  std::vector<std::size_t> tasks_per_device;  ///< how many tasks each of `devices` completed
  /// Host↔device bytes of the tasks each of `devices` completed (they sum to bytes_moved): how
  /// the traffic was split over the devices' copy links.
  std::vector<std::size_t> bytes_per_device;
  std::size_t slots_per_device = 0;
  std::size_t device_bytes_per_device = 0;  ///< slot memory allocated on each device

  /// True when every task completed (the output is whole).
  [[nodiscard]] bool complete() const noexcept { return tasks_completed == tasks_total; }
  /// The indices of the completed tasks, ascending.
  [[nodiscard]] std::vector<std::size_t> completed_tasks() const {
    std::vector<std::size_t> v;
    for (std::size_t i = 0; i < completed.size(); ++i)
      if (completed[i]) v.push_back(i);
    return v;
  }
};

/// A job stopped by an exception (from a caller's callback, a CUDA error, an allocation failure).
/// In-flight work was drained and every buffer freed before it was thrown. It names the task that
/// failed (`no_task` when the failure was in setup), carries the report of what completed (so the
/// caller knows which parts of its output are valid), and nests the original exception
/// (std::rethrow_if_nested(e), or `cause()`).
class pipeline_error : public std::runtime_error, public std::nested_exception {
 public:
  static constexpr std::size_t no_task = std::numeric_limits<std::size_t>::max();

  /// Must be constructed while the original exception is being handled (it is nested from there).
  pipeline_error(const std::string& what, std::size_t failed_task, int device, job_report report)
      : std::runtime_error(what), failed_task_(failed_task), device_(device), report_(std::move(report)) {}

  /// The task (chunk) index whose work failed, or no_task.
  [[nodiscard]] std::size_t failed_task() const noexcept { return failed_task_; }
  /// The device whose pipeline failed (-1 when not device-specific).
  [[nodiscard]] int device() const noexcept { return device_; }
  /// What had completed when the job stopped.
  [[nodiscard]] const job_report& report() const noexcept { return report_; }
  [[nodiscard]] std::exception_ptr cause() const noexcept { return nested_ptr(); }

 private:
  std::size_t failed_task_;
  int device_;
  job_report report_;
};

}  // namespace spillway
