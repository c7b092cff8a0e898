// spillway/dist/agree.hpp — how the ranks of a distributed job agree that a step worked: each
// rank runs the step locally, catching what it throws, and then every rank takes part in the
// same two collectives (an MPI_Allreduce of "who failed", and, when someone did, an MPI_Bcast of
// the lowest failing rank's task and message). So a rank that throws never leaves the others
// waiting in a collective: every rank reaches the same calls and then throws the same rank_error.
//
//   auto bits = spillway::dist::agree(comm, "reading the input", [&] { return read_input(path); });
//   // a file missing on rank 2 only: every rank throws
//   //   rank_error "spillway dist: rank 2 failed reading the input: npy 'a.npy': cannot open ..."
#pragma once

#include <spillway/dist/communicator.hpp>
#include <spillway/pipeline/task_pipeline.hpp>

#include <mpi.h>

#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

namespace spillway::dist {

/// What one rank brings to settle(): whether its step failed, on which global task, and why.
struct local_outcome {
  bool failed = false;
  std::uint64_t task = rank_error::no_task;
  std::string message;
};

/// The outcome of a step that threw `e` (null: it did not).
inline local_outcome outcome_of(const std::exception_ptr& e, std::uint64_t task = rank_error::no_task) {
  local_outcome o;
  if (e) {
    o.failed = true;
    o.task = task;
    o.message = ::spillway::detail::exception_text(e);  // what(), or "unknown exception"
  }
  return o;
}

/// Collective over `c`: returns when no rank failed; otherwise throws, on every rank, the
/// rank_error of the lowest failing rank ("spillway dist: rank R failed <what>[ on task T]: …").
inline void settle(const communicator& c, const local_outcome& mine, const char* what) {
  const int me = mine.failed ? c.rank() : c.size();
  int lowest = c.size();
  SPILLWAY_MPI_TRY(MPI_Allreduce(&me, &lowest, 1, MPI_INT, MPI_MIN, c.get()));
  if (lowest == c.size()) return;
  const int f = mine.failed ? 1 : 0;
  int failed = 0;
  SPILLWAY_MPI_TRY(MPI_Allreduce(&f, &failed, 1, MPI_INT, MPI_SUM, c.get()));
  // A message is a few lines; one far longer is cut rather than sent whole.
  const std::string own = mine.message.substr(0, 1u << 16);
  std::uint64_t head[2] = {mine.task, static_cast<std::uint64_t>(own.size())};
  SPILLWAY_MPI_TRY(MPI_Bcast(head, 2, MPI_UINT64_T, lowest, c.get()));
  std::string msg = c.rank() == lowest ? own : std::string(static_cast<std::size_t>(head[1]), '\0');
  if (head[1] > 0) {
    SPILLWAY_MPI_TRY(MPI_Bcast(msg.data(), static_cast<int>(head[1]), MPI_CHAR, lowest, c.get()));
  }
  std::string text =
      "spillway dist: rank " + std::to_string(lowest) + " of " + std::to_string(c.size()) + " failed " + what;
  if (head[0] != rank_error::no_task) text += " on task " + std::to_string(head[0]);
  text += ": " + msg;
  if (failed > 1) text += " (" + std::to_string(failed - 1) + " other rank(s) failed too)";
  throw rank_error(text, lowest, head[0], c.rank() == lowest, failed);
}

/// Runs `step()` on this rank, then settle()s: returns step's result when every rank succeeded,
/// else every rank throws the same rank_error. Collective over `c`.
template <class Step>
auto agree(const communicator& c, const char* what, Step&& step) {
  using R = std::invoke_result_t<Step&>;
  std::exception_ptr err;
  if constexpr (std::is_void_v<R>) {
    try {
      step();
    } catch (...) {
      err = std::current_exception();
    }
    settle(c, outcome_of(err), what);
  } else {
    std::optional<R> out;
    try {
      out.emplace(step());
    } catch (...) {
      err = std::current_exception();
    }
    settle(c, outcome_of(err), what);
    return std::move(*out);
  }
}

}  // namespace spillway::dist
