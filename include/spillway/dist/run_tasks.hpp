// spillway/dist/run_tasks.hpp — a task job across MPI ranks: each rank runs its share of the
// task list (a split_plan part, static by cost) through the local scheduler (spillway::run_tasks
// over its GPUs) or on the host, rank 0 sees the progress of all ranks, and a failure anywhere is
// reported on every rank.
//
//   const auto plan = spillway::pairwise::split_contiguous(tasks, comm.size());
//   spillway::dist::run_options ro;
//   ro.progress = [](const spillway::progress_info& p) { /* rank 0: all ranks' tasks */ return true; };
//   auto rep = spillway::dist::run_tasks(comm, plan, local_opts,
//       [&](std::size_t t, spillway::task_slot& slot, spillway::stream_view s) { /* global task t */ },
//       [&](std::size_t t) { /* task t's results are on the host */ }, ro);
//   // rep.ranks[r].tasks / .bytes / .seconds for every rank, on every rank
//
// The protocol (all MPI calls on the calling thread; the devices' workers never call MPI):
//   * while its share runs, a rank other than 0 sends rank 0 its {tasks done, bytes} (MPI_Isend,
//     at most one in flight, at most every progress_interval seconds); rank 0 folds them into the
//     progress callback, which runs on rank 0 only. A `false` from it cancels every rank.
//   * when its share ends (finished, failed or cancelled) a rank sends rank 0 a final message
//     with its status; rank 0 receives every rank's final message before any collective. A failed
//     final makes rank 0 tell the other ranks to stop (a message each, which they poll between
//     tasks), so a failure does not wait for the rest of the job.
//   * then every rank, whatever happened, takes part in the same collectives: the stop flag
//     (MPI_Bcast; a rank that was told to stop but had finished receives the message now), the
//     per-rank figures (MPI_Allgather), and settle() (dist/agree.hpp): if any rank failed, every
//     rank throws the same rank_error naming the lowest failing rank and its global task.
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/dist/agree.hpp>
#include <spillway/dist/communicator.hpp>
#include <spillway/pairwise/split_plan.hpp>
#include <spillway/pipeline/job.hpp>
#include <spillway/pipeline/task_pipeline.hpp>

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace spillway::dist {

struct run_options {
  /// Rank 0 only, on the calling thread: the tasks completed on ALL ranks (bytes likewise) of the
  /// whole job. Return false to cancel every rank (run_report::cancelled). Ignored elsewhere.
  progress_callback progress;
  /// Least seconds between two progress messages of one rank (its final message always goes).
  double progress_interval = 0.05;
};

/// One rank's share, as reported to every rank.
struct rank_stats {
  std::size_t tasks = 0;    ///< tasks this rank completed
  std::size_t bytes = 0;    ///< host↔device bytes of those tasks (0 on the host path)
  double seconds = 0.0;     ///< wall time of the rank's share (its local job)
  std::size_t planned = 0;  ///< tasks the plan gave it
};

struct run_report {
  std::size_t tasks_total = 0;
  std::size_t tasks_completed = 0;  ///< over all ranks
  bool cancelled = false;           ///< rank 0's progress callback returned false
  std::vector<rank_stats> ranks;    ///< every rank's figures (the same on every rank)
  job_report local;                 ///< this rank's scheduler report (GPU form; empty on the host)
  double elapsed_seconds = 0.0;     ///< this rank, protocol included
};

namespace detail {

enum : int { tag_progress = 7101, tag_stop = 7102 };

/// Rank 0's and the other ranks' sides of the progress/stop messages for one job.
class progress_channel {
 public:
  progress_channel(const communicator& c, std::size_t total, const run_options& o)
      : c_(c), total_(total), o_(o), t0_(std::chrono::steady_clock::now()) {
    if (c_.rank() == 0) {
      done_.assign(static_cast<std::size_t>(c_.size()), 0);
      bytes_.assign(static_cast<std::size_t>(c_.size()), 0);
    }
  }

  /// This rank's count changed (or it polls): returns false when the rank must stop.
  bool hook(std::size_t done, std::size_t bytes) {
    if (c_.rank() == 0) {
      done_[0] = done;
      bytes_[0] = bytes;
      drain(false);
      report();
      return !stop_sent_;
    }
    poll_stop();
    if (stopped_) return false;
    const auto now = std::chrono::steady_clock::now();
    const bool due = std::chrono::duration<double>(now - last_).count() >= o_.progress_interval;
    if (due && done != sent_done_ && ready_to_send()) {
      msg_[0] = done;
      msg_[1] = bytes;
      msg_[2] = 0;
      SPILLWAY_MPI_TRY(MPI_Isend(msg_, 3, MPI_UINT64_T, 0, tag_progress, c_.get(), &pending_));
      sent_done_ = done;
      last_ = now;
    }
    return true;
  }

  /// After the local share: the final messages (rank 0 collects all of them), then the stop
  /// flag's collective. `failed`: this rank's share threw.
  void finish(std::size_t done, std::size_t bytes, bool failed) {
    if (c_.rank() == 0) {
      done_[0] = done;
      bytes_[0] = bytes;
      if (failed) stop_all();
      drain(true);
      report();
    } else {
      if (pending_ != MPI_REQUEST_NULL) SPILLWAY_MPI_TRY(MPI_Wait(&pending_, MPI_STATUS_IGNORE));
      msg_[0] = done;
      msg_[1] = bytes;
      msg_[2] = failed ? 2 : 1;
      SPILLWAY_MPI_TRY(MPI_Send(msg_, 3, MPI_UINT64_T, 0, tag_progress, c_.get()));
    }
    int stop = stop_sent_ ? 1 : 0;
    SPILLWAY_MPI_TRY(MPI_Bcast(&stop, 1, MPI_INT, 0, c_.get()));
    if (c_.rank() == 0) {
      if (!stops_.empty())
        SPILLWAY_MPI_TRY(MPI_Waitall(static_cast<int>(stops_.size()), stops_.data(), MPI_STATUSES_IGNORE));
    } else if (stop != 0 && !stopped_) {
      int dummy = 0;  // the stop message that arrived after this rank had finished
      SPILLWAY_MPI_TRY(MPI_Recv(&dummy, 1, MPI_INT, 0, tag_stop, c_.get(), MPI_STATUS_IGNORE));
      stopped_ = true;
    }
  }

  [[nodiscard]] bool cancelled() const noexcept { return cancelled_; }
  /// What rank 0's progress callback threw (null: nothing).
  [[nodiscard]] std::exception_ptr callback_error() const noexcept { return callback_error_; }
  [[nodiscard]] bool stopped() const noexcept { return stopped_ || stop_sent_; }

 private:
  bool ready_to_send() {
    if (pending_ == MPI_REQUEST_NULL) return true;
    int flag = 0;
    SPILLWAY_MPI_TRY(MPI_Test(&pending_, &flag, MPI_STATUS_IGNORE));
    return flag != 0;
  }

  void poll_stop() {
    if (stopped_) return;
    int flag = 0;
    SPILLWAY_MPI_TRY(MPI_Iprobe(0, tag_stop, c_.get(), &flag, MPI_STATUS_IGNORE));
    if (flag) {
      int dummy = 0;
      SPILLWAY_MPI_TRY(MPI_Recv(&dummy, 1, MPI_INT, 0, tag_stop, c_.get(), MPI_STATUS_IGNORE));
      stopped_ = true;
    }
  }

  void stop_all() {
    if (stop_sent_) return;
    stop_sent_ = true;
    stops_.reserve(static_cast<std::size_t>(c_.size()));
    for (int r = 1; r < c_.size(); ++r) {
      stops_.push_back(MPI_REQUEST_NULL);
      SPILLWAY_MPI_TRY(MPI_Isend(&stop_word_, 1, MPI_INT, r, tag_stop, c_.get(), &stops_.back()));
    }
  }

  // Rank 0: takes every progress message that has arrived; `until_final`: blocks until each
  // other rank's final message is in.
  void drain(bool until_final) {
    for (;;) {
      if (until_final && finals_ == c_.size() - 1) return;  // some may have come in early
      MPI_Status st;
      if (!until_final) {
        int flag = 0;
        SPILLWAY_MPI_TRY(MPI_Iprobe(MPI_ANY_SOURCE, tag_progress, c_.get(), &flag, &st));
        if (!flag) return;
      }
      std::uint64_t m[3] = {0, 0, 0};
      SPILLWAY_MPI_TRY(MPI_Recv(m, 3, MPI_UINT64_T, until_final ? MPI_ANY_SOURCE : st.MPI_SOURCE,
                                tag_progress, c_.get(), &st));
      const auto r = static_cast<std::size_t>(st.MPI_SOURCE);
      done_[r] = static_cast<std::size_t>(m[0]);
      bytes_[r] = static_cast<std::size_t>(m[1]);
      if (m[2] != 0) {
        ++finals_;
        if (m[2] == 2) stop_all();  // a rank failed: the others need not finish their shares
      }
      if (until_final) report();
    }
  }

  void report() {
    std::size_t d = 0, b = 0;
    for (std::size_t r = 0; r < done_.size(); ++r) {
      d += done_[r];
      b += bytes_[r];
    }
    if (d == reported_ || !o_.progress || cancelled_ || callback_error_) return;
    reported_ = d;
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    bool keep_going = true;
    try {
      keep_going = o_.progress(progress_info{d, total_, b, el});
    } catch (...) {
      // Kept for after the protocol's collectives: thrown from here, it would skip them.
      callback_error_ = std::current_exception();
      stop_all();
      return;
    }
    if (!keep_going) {
      cancelled_ = true;
      stop_all();
    }
  }

  const communicator& c_;
  std::size_t total_;
  const run_options& o_;
  std::chrono::steady_clock::time_point t0_, last_{};
  // rank 0
  std::vector<std::size_t> done_, bytes_;
  std::size_t reported_ = static_cast<std::size_t>(-1);
  int finals_ = 0;
  bool stop_sent_ = false, cancelled_ = false;
  std::exception_ptr callback_error_;
  std::vector<MPI_Request> stops_;
  int stop_word_ = 1;
  // other ranks
  std::uint64_t msg_[3] = {0, 0, 0};
  MPI_Request pending_ = MPI_REQUEST_NULL;
  std::size_t sent_done_ = static_cast<std::size_t>(-1);
  bool stopped_ = false;
};

/// The protocol around a local share: `local(hook, stats, failed_task)` runs this rank's tasks,
/// calling hook(done, bytes) on this thread (false: stop), keeping `stats` and the global index of
/// a task that fails in `failed_task`.
template <class Local>
run_report run_protocol(const communicator& c, std::size_t n_total, std::size_t planned, const run_options& o,
                        Local&& local) {
  const auto t0 = std::chrono::steady_clock::now();
  progress_channel ch(c, n_total, o);
  rank_stats mine;
  mine.planned = planned;
  std::uint64_t failed_task = rank_error::no_task;
  std::exception_ptr err;
  run_report rep;
  rep.tasks_total = n_total;
  try {
    local([&ch](std::size_t d, std::size_t b) { return ch.hook(d, b); }, mine, failed_task, rep.local);
  } catch (...) {
    err = std::current_exception();
  }
  mine.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ch.finish(mine.tasks, mine.bytes, static_cast<bool>(err));
  if (!err && ch.callback_error()) err = ch.callback_error();  // rank 0's progress callback threw
  // Every rank's figures on every rank.
  double mine_v[4] = {static_cast<double>(mine.tasks), static_cast<double>(mine.bytes), mine.seconds,
                      static_cast<double>(mine.planned)};
  std::vector<double> all(4u * static_cast<std::size_t>(c.size()));
  SPILLWAY_MPI_TRY(MPI_Allgather(mine_v, 4, MPI_DOUBLE, all.data(), 4, MPI_DOUBLE, c.get()));
  int cancelled = ch.cancelled() ? 1 : 0;
  SPILLWAY_MPI_TRY(MPI_Bcast(&cancelled, 1, MPI_INT, 0, c.get()));
  for (int r = 0; r < c.size(); ++r) {
    const double* v = all.data() + 4 * r;
    rank_stats s{static_cast<std::size_t>(v[0]), static_cast<std::size_t>(v[1]), v[2],
                 static_cast<std::size_t>(v[3])};
    rep.tasks_completed += s.tasks;
    rep.ranks.push_back(s);
  }
  rep.cancelled = cancelled != 0;
  settle(c, outcome_of(err, failed_task), "running its tasks");
  rep.elapsed_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

inline const std::vector<std::size_t>& my_part(const communicator& c, const pairwise::split_plan& plan) {
  if (plan.parts.size() != static_cast<std::size_t>(c.size())) {
    throw logic_error("dist::run_tasks: the plan has " + std::to_string(plan.parts.size()) + " parts for " +
                      std::to_string(c.size()) + " ranks");
  }
  return plan.parts[static_cast<std::size_t>(c.rank())].tasks;
}

/// This rank's part of `plan`, checked on every rank (collective): a plan for another number of
/// ranks throws the same rank_error everywhere.
inline const std::vector<std::size_t>& settled_part(const communicator& c, const pairwise::split_plan& plan) {
  static const std::vector<std::size_t> none;
  const std::vector<std::size_t>* mine = &none;
  std::exception_ptr err;
  try {
    mine = &my_part(c, plan);
  } catch (...) {
    err = std::current_exception();
  }
  settle(c, outcome_of(err), "checking its plan");
  return *mine;
}

}  // namespace detail

/// The host form: `run(t)` runs global task t on the calling thread (it may use OpenMP), for each
/// of `mine` in order. Collective over `c`; every rank throws the same rank_error if any fails.
template <class Run>
run_report run_host_tasks(const communicator& c, const std::vector<std::size_t>& mine, std::size_t n_total,
                          Run&& run, const run_options& o = {}) {
  static_assert(std::is_invocable_v<Run&, std::size_t>,
                "run must be callable as run(std::size_t global_task)");
  return detail::run_protocol(
      c, n_total, mine.size(), o, [&](auto&& hook, rank_stats& st, std::uint64_t& failed, job_report&) {
        if (!hook(0, 0)) return;
        for (std::size_t t : mine) {
          if (t >= n_total) {
            throw logic_error("dist::run_host_tasks: task " + std::to_string(t) + " is out of range (" +
                              std::to_string(n_total) + " tasks)");
          }
          failed = t;
          run(t);
          failed = rank_error::no_task;
          ++st.tasks;
          if (!hook(st.tasks, 0)) return;
        }
      });
}

/// The same with this rank's part of `plan` (plan.parts.size() must be the communicator's size).
template <class Run>
run_report run_host_tasks(const communicator& c, const pairwise::split_plan& plan, Run&& run,
                          const run_options& o = {}) {
  return run_host_tasks(c, detail::settled_part(c, plan), plan.owner.size(), std::forward<Run>(run), o);
}

/// The device form: this rank's tasks `mine` (global indices) through spillway::run_tasks over
/// the devices of `local` (their slots, buffers and budget as in a one-process job; its own
/// `progress` is replaced by the protocol's). enqueue(t, slot, s) and on_complete(t) receive the
/// GLOBAL task index (on_complete may also take the task_slot, as in spillway::run_tasks). A task that fails
/// is named by its global index on every rank.
template <class Enqueue, class OnComplete = ::spillway::detail::no_completion>
run_report run_tasks(const communicator& c, const std::vector<std::size_t>& mine, std::size_t n_total,
                     const task_job_options& local, Enqueue&& enqueue, OnComplete&& on_complete = {},
                     const run_options& o = {}) {
  return detail::run_protocol(
      c, n_total, mine.size(), o, [&](auto&& hook, rank_stats& st, std::uint64_t& failed, job_report& lrep) {
        for (std::size_t t : mine) {
          if (t >= n_total) {
            throw logic_error("dist::run_tasks: task " + std::to_string(t) + " is out of range (" +
                              std::to_string(n_total) + " tasks)");
          }
        }
        task_job_options lo = local;
        lo.progress = [&](const progress_info& p) {
          st.tasks = p.tasks_done;
          st.bytes = p.bytes_moved;
          return hook(p.tasks_done, p.bytes_moved);
        };
        try {
          lrep = ::spillway::run_tasks(
              mine.size(), lo,
              [&](std::size_t i, task_slot& slot, stream_view s) { enqueue(mine[i], slot, s); },
              [&](std::size_t i, task_slot& slot) {
                if constexpr (std::is_invocable_v<OnComplete&, std::size_t, task_slot&>) {
                  on_complete(mine[i], slot);
                } else {
                  on_complete(mine[i]);
                }
              });
        } catch (const pipeline_error& e) {
          st.tasks = e.report().tasks_completed;
          st.bytes = e.report().bytes_moved;
          if (e.failed_task() != pipeline_error::no_task && e.failed_task() < mine.size())
            failed = mine[e.failed_task()];
          throw;
        }
        st.tasks = lrep.tasks_completed;
        st.bytes = lrep.bytes_moved;
      });
}

/// The same with this rank's part of `plan`.
template <class Enqueue, class OnComplete = ::spillway::detail::no_completion>
run_report run_tasks(const communicator& c, const pairwise::split_plan& plan, const task_job_options& local,
                     Enqueue&& enqueue, OnComplete&& on_complete = {}, const run_options& o = {}) {
  return run_tasks(c, detail::settled_part(c, plan), plan.owner.size(), local, std::forward<Enqueue>(enqueue),
                   std::forward<OnComplete>(on_complete), o);
}

}  // namespace spillway::dist
