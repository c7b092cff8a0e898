// Test support: an array of n elements cut into tasks of per_task (the last one shorter), as the
// run_tasks tests (tests/pipeline/) cut theirs, and the check of a job stopped part way.
#pragma once

#include <algorithm>
#include <cstddef>

#include <gtest/gtest.h>

namespace spillway::test {

struct task_split {
  std::size_t n, per_task;

  [[nodiscard]] std::size_t tasks() const { return (n + per_task - 1) / per_task; }
  [[nodiscard]] std::size_t begin(std::size_t t) const { return t * per_task; }
  [[nodiscard]] std::size_t count(std::size_t t) const { return std::min(per_task, n - begin(t)); }
};

/// After a job that stopped part way (cancelled: it drains what it started): every task the report
/// `r` lists complete is right, every other one still poison. Job: tasks(), task_correct(t),
/// task_untouched(t).
template <class Job, class Report>
void expect_complete_or_untouched(const Job& job, const Report& r) {
  for (std::size_t t = 0; t < job.tasks(); ++t) {
    if (r.completed[t]) {
      EXPECT_TRUE(job.task_correct(t)) << t;
    } else {
      EXPECT_TRUE(job.task_untouched(t)) << t << ": a cancelled job drains what it started, so the rest is poison";
    }
  }
}

}  // namespace spillway::test
