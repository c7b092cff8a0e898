// spillway/dist/communicator.hpp — MPI for spillway's distributed jobs: the exceptions (an MPI
// call that failed, a failure of some rank reported on every rank), the MPI environment as an
// RAII object, and a communicator that owns a private duplicate of the caller's (so a job's
// messages never meet the caller's) with errors returned, not fatal.
//
//   spillway::dist::environment env(argc, argv);      // MPI_Init_thread(FUNNELED) … MPI_Finalize
//   spillway::dist::communicator comm;                // a duplicate of MPI_COMM_WORLD
//   comm.rank(), comm.size(), comm.local_rank()       // local rank: among the ranks of this host
//
// Part of the optional component spillway::mpi (find_package(spillway COMPONENTS mpi)); nothing
// outside include/spillway/dist/ includes <mpi.h>. All MPI calls of spillway run on the thread
// that called MPI_Init (MPI_THREAD_FUNNELED is enough): the scheduler's device workers never
// call MPI.
#pragma once

#include <spillway/core/error.hpp>

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace spillway::dist {

/// An MPI call returned an error. `code()` is MPI's error code, `rank()` the rank that saw it.
class mpi_error : public std::runtime_error {
 public:
  mpi_error(int code, int rank, const std::string& what)
      : std::runtime_error(what), code_(code), rank_(rank) {}
  [[nodiscard]] int code() const noexcept { return code_; }
  [[nodiscard]] int rank() const noexcept { return rank_; }

 private:
  int code_;
  int rank_;
};

/// Some rank of a distributed job failed; thrown on EVERY rank of the communicator with the same
/// message: the lowest failing rank, the task it was running (or no_task) and its own error's
/// text. `here()` is true on the rank that failed.
class rank_error : public std::runtime_error {
 public:
  static constexpr std::uint64_t no_task = std::numeric_limits<std::uint64_t>::max();
  rank_error(const std::string& what, int failed_rank, std::uint64_t failed_task, bool here, int failed_ranks)
      : std::runtime_error(what), rank_(failed_rank), task_(failed_task), here_(here), count_(failed_ranks) {}
  /// The lowest rank that failed (the one whose message this is).
  [[nodiscard]] int failed_rank() const noexcept { return rank_; }
  /// The global task index it failed on, or no_task (failed outside a task: loading, writing).
  [[nodiscard]] std::uint64_t failed_task() const noexcept { return task_; }
  [[nodiscard]] bool here() const noexcept { return here_; }
  /// How many ranks failed.
  [[nodiscard]] int failed_ranks() const noexcept { return count_; }

 private:
  int rank_;
  std::uint64_t task_;
  bool here_;
  int count_;
};

namespace detail {

inline std::string mpi_error_text(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, static_cast<std::size_t>(len));
}

inline int world_rank_or_minus1() noexcept {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  int r = -1;
  if (init && !fin) MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

[[noreturn]] inline void throw_mpi_error(int code, const char* call, const char* file, int line) {
  const int r = world_rank_or_minus1();
  throw mpi_error(code, r,
                  "spillway: " + std::string(call) + " failed on rank " + std::to_string(r) + " (" + file +
                      ":" + std::to_string(line) + "): " + mpi_error_text(code));
}

}  // namespace detail

/// Checks an MPI call's return code; throws mpi_error naming the call, the rank and MPI's text.
#define SPILLWAY_MPI_TRY(call)                                                                \
  do {                                                                                        \
    const int spillway_mpi_rc_ = (call);                                                      \
    if (spillway_mpi_rc_ != MPI_SUCCESS) {                                                    \
      ::spillway::dist::detail::throw_mpi_error(spillway_mpi_rc_, #call, __FILE__, __LINE__); \
    }                                                                                         \
  } while (0)

/// MPI_Init_thread(MPI_THREAD_FUNNELED) on construction unless MPI is already initialized;
/// MPI_Finalize on destruction if it initialized MPI. Destroy it only after every communicator.
class environment {
 public:
  environment() : environment(nullptr, nullptr) {}
  environment(int& argc, char**& argv) : environment(&argc, &argv) {}
  environment(const environment&) = delete;
  environment& operator=(const environment&) = delete;
  ~environment() {
    int fin = 0;
    MPI_Finalized(&fin);
    if (owner_ && !fin) MPI_Finalize();
  }
  /// The thread level MPI provides.
  [[nodiscard]] int thread_level() const noexcept { return provided_; }

 private:
  environment(int* argc, char*** argv) {
    int init = 0;
    SPILLWAY_MPI_TRY(MPI_Initialized(&init));
    if (init) {
      SPILLWAY_MPI_TRY(MPI_Query_thread(&provided_));
      return;
    }
    SPILLWAY_MPI_TRY(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided_));
    owner_ = true;
  }
  bool owner_ = false;
  int provided_ = MPI_THREAD_SINGLE;
};

/// Owns a duplicate of an MPI communicator (MPI_Comm_dup) whose errors return codes that
/// SPILLWAY_MPI_TRY turns into exceptions, and a second duplicate split by host for local_rank().
/// Constructing it is collective over `parent`. Move-only.
class communicator {
 public:
  explicit communicator(MPI_Comm parent = MPI_COMM_WORLD) {
    SPILLWAY_MPI_TRY(MPI_Comm_dup(parent, &comm_));
    SPILLWAY_MPI_TRY(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    SPILLWAY_MPI_TRY(MPI_Comm_rank(comm_, &rank_));
    SPILLWAY_MPI_TRY(MPI_Comm_size(comm_, &size_));
    MPI_Comm node = MPI_COMM_NULL;
    SPILLWAY_MPI_TRY(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
    SPILLWAY_MPI_TRY(MPI_Comm_rank(node, &local_rank_));
    SPILLWAY_MPI_TRY(MPI_Comm_size(node, &local_size_));
    // Kept where every rank is on this host: its shared-memory segments (shared_segment).
    if (local_size_ == size_ && size_ > 1) {
      node_ = node;
      SPILLWAY_MPI_TRY(MPI_Comm_set_errhandler(node_, MPI_ERRORS_RETURN));
    } else {
      MPI_Comm_free(&node);
    }
  }
  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;
  communicator(communicator&& o) noexcept { *this = std::move(o); }
  communicator& operator=(communicator&& o) noexcept {
    if (this != &o) {
      release();
      comm_ = std::exchange(o.comm_, MPI_COMM_NULL);
      node_ = std::exchange(o.node_, MPI_COMM_NULL);
      win_ = std::exchange(o.win_, MPI_WIN_NULL);
      win_base_ = std::exchange(o.win_base_, nullptr);
      win_bytes_ = std::exchange(o.win_bytes_, 0);
      rank_ = o.rank_;
      size_ = o.size_;
      local_rank_ = o.local_rank_;
      local_size_ = o.local_size_;
    }
    return *this;
  }
  ~communicator() { release(); }

  [[nodiscard]] MPI_Comm get() const noexcept { return comm_; }
  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  /// This rank's index among the ranks on its host (MPI_COMM_TYPE_SHARED): pick the local GPU.
  [[nodiscard]] int local_rank() const noexcept { return local_rank_; }
  [[nodiscard]] int local_size() const noexcept { return local_size_; }
  void barrier() const { SPILLWAY_MPI_TRY(MPI_Barrier(comm_)); }

  /// Whether every rank is on this host (and there are several): shared_segment works.
  [[nodiscard]] bool one_host() const noexcept { return node_ != MPI_COMM_NULL; }

  /// This rank's segment of a window of memory that every rank of the host reads
  /// (MPI_Win_allocate_shared), at least `bytes` long; kept across calls and grown when some
  /// rank needs more (fresh pages cost page faults: ~1 ms per 4 MB). Collective (every rank, its
  /// own `bytes`); one_host() only (logic_error otherwise). The segments are written by their
  /// owners, then shared_fence(), then read by anyone (shared_segment_of); a segment is written
  /// again only after a collective that follows every rank's reads.
  std::byte* shared_segment(std::size_t bytes) const {
    if (!one_host()) throw logic_error("communicator::shared_segment: the ranks are not all on one host");
    int grow = bytes > win_bytes_ ? 1 : 0;
    SPILLWAY_MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, &grow, 1, MPI_INT, MPI_MAX, node_));
    if (grow != 0) {
      free_window();
      const std::size_t want = std::max<std::size_t>({bytes + bytes / 4, win_bytes_, 64});
      MPI_Info info = MPI_INFO_NULL;
      SPILLWAY_MPI_TRY(MPI_Info_create(&info));
      MPI_Info_set(info, "alloc_shared_noncontig", "true");  // each segment on its own rank's pages
      void* base = nullptr;
      const int rc = MPI_Win_allocate_shared(static_cast<MPI_Aint>(want), 1, info, node_, &base, &win_);
      MPI_Info_free(&info);
      if (rc != MPI_SUCCESS) {
        win_ = MPI_WIN_NULL;
        detail::throw_mpi_error(rc, "MPI_Win_allocate_shared", __FILE__, __LINE__);
      }
      SPILLWAY_MPI_TRY(MPI_Win_lock_all(MPI_MODE_NOCHECK, win_));
      win_base_ = static_cast<std::byte*>(base);
      win_bytes_ = want;
    }
    return win_base_;
  }
  /// Rank `r`'s segment (after shared_fence).
  [[nodiscard]] const std::byte* shared_segment_of(int r) const {
    MPI_Aint size = 0;
    int unit = 0;
    void* p = nullptr;
    SPILLWAY_MPI_TRY(MPI_Win_shared_query(win_, r, &size, &unit, &p));
    return static_cast<const std::byte*>(p);
  }
  /// Every rank's writes to its segment visible to every rank. Collective.
  void shared_fence() const {
    SPILLWAY_MPI_TRY(MPI_Win_sync(win_));
    SPILLWAY_MPI_TRY(MPI_Barrier(node_));
    SPILLWAY_MPI_TRY(MPI_Win_sync(win_));
  }

 private:
  void free_window() const noexcept {
    if (win_ == MPI_WIN_NULL) return;
    MPI_Win_unlock_all(win_);
    MPI_Win_free(&win_);
    win_ = MPI_WIN_NULL;
    win_base_ = nullptr;
    win_bytes_ = 0;
  }
  void release() noexcept {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) free_window();
    if (node_ != MPI_COMM_NULL && !fin) MPI_Comm_free(&node_);
    node_ = MPI_COMM_NULL;
    if (comm_ != MPI_COMM_NULL && !fin) MPI_Comm_free(&comm_);
    comm_ = MPI_COMM_NULL;
  }
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm node_ = MPI_COMM_NULL;  // every rank, ordered as in comm_, where all are on one host
  mutable MPI_Win win_ = MPI_WIN_NULL;
  mutable std::byte* win_base_ = nullptr;
  mutable std::size_t win_bytes_ = 0;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
};

/// The MPI datatype of a C++ arithmetic type.
template <class T>
MPI_Datatype mpi_type() {
  if constexpr (std::is_same_v<T, std::int32_t>)
    return MPI_INT32_T;
  else if constexpr (std::is_same_v<T, std::uint32_t>)
    return MPI_UINT32_T;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return MPI_INT64_T;
  else if constexpr (std::is_same_v<T, std::uint64_t>)
    return MPI_UINT64_T;
  else if constexpr (std::is_same_v<T, std::uint16_t>)
    return MPI_UINT16_T;
  else if constexpr (std::is_same_v<T, std::uint8_t>)
    return MPI_UINT8_T;
  else if constexpr (std::is_same_v<T, float>)
    return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>)
    return MPI_DOUBLE;
  else {
    static_assert(sizeof(T) == 0, "spillway::dist::mpi_type: no MPI datatype for this type");
    return MPI_DATATYPE_NULL;
  }
}

}  // namespace spillway::dist
