// spillway/dist/host_gram.hpp — the Gram product A·Aᵀ of a 0/1 matrix across MPI ranks, host
// implementation (plain C++, OpenMP), and what the GPU form (dist/gram.cuh) shares with it: the
// input on every rank, the row split, the top-k merge to the rows' owners and the sinks' files.
//
// The job: A's rows are cut into strips of P rows; strip I computes its rows against the columns
// from its first row on (the upper triangle). Rank r OWNS the rows [first_row[r], first_row[r+1]).
// Which strips it COMPUTES (the split: dist/gram_split.hpp): the strips of its own rows — by pairs
// on the host, by each share's predicted seconds on the GPU, the first ranks getting fewer, wider
// rows — or, for top-k, strips dealt across the matrix (cyclic, snake, greedy; rows then owned in
// equal blocks).
// Then per sink:
//   * triangle (upper_packed / condensed): a rank's rows are one contiguous range of the packed
//     output; every rank writes its range into ONE .npy with MPI-IO (dist/npy_file.hpp).
//   * top-k: a pair (i, j), i < j, is computed once, by the rank computing row i's strip; it is a
//     candidate of row i and of row j. Each rank keeps partial top-k lists for every row it
//     touched (rows from its lowest strip's first row on), sends the lists of rows OTHER ranks own
//     to those owners whose rows it touched (MPI_Alltoallv; its own rows' lists stay) — the later
//     ranks when split contiguously, every rank when dealt — and each owner merges its lists with
//     those that arrived: a k-way merge of sorted lists (dist/topk_lists.hpp). Disjoint candidate
//     sets and one total order (better value, then smaller column) make the merged lists exactly
//     the one-process result. Contiguous, the first rank with rows receives nothing (no other rank
//     touches its rows); with one rank nothing is sent at all.
//   * threshold (upper triangle, both_halves = false): a rank's kept entries are those of its own
//     rows, already in the global (row, column) order: the ranks' COO runs concatenated in rank
//     order are the one-process COO. Written as three .npy (row, col, value) with MPI-IO, or
//     gathered to rank 0.
#pragma once

#include <spillway/core/enum_name.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/memory_budget.hpp>
#include <spillway/dist/agree.hpp>
#include <spillway/dist/communicator.hpp>
#include <spillway/dist/gram_split.hpp>
#include <spillway/dist/npy_file.hpp>
#include <spillway/dist/run_tasks.hpp>
#include <spillway/dist/topk_lists.hpp>
#include <spillway/gram/bit_matrix.hpp>
#include <spillway/gram/epilogue.hpp>
#include <spillway/gram/host_gram.hpp>
#include <spillway/gram/kernel_path.hpp>
#include <spillway/io/npy.hpp>
#include <spillway/io/raw.hpp>
#include <spillway/pairwise/host_job.hpp>
#include <spillway/pairwise/layout.hpp>
#include <spillway/pairwise/sinks.hpp>
#include <spillway/pairwise/split_plan.hpp>

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace spillway::dist {

// ---- the input on every rank -----------------------------------------------------------------------

/// Reads and packs a 2-D 0/1 .npy (uint8, int8 or bool) on this rank alone (not collective).
inline gram::bit_matrix read_bits_npy_local(const std::string& path, gram::pack_options po = {}) {
  const io::npy_array arr = io::read_npy(path);
  if (arr.header.shape.size() != 2) {
    throw logic_error("dist::read_bits_npy: '" + path + "' holds a " +
                      std::to_string(arr.header.shape.size()) + "-D array; a 2-D 0/1 matrix is needed");
  }
  const std::int64_t r = arr.header.shape[0], k = arr.header.shape[1];
  switch (arr.header.dtype) {
    case io::npy_dtype::b1:
      return gram::pack_bits(arr.data<bool>(), r, k, k, po);
    case io::npy_dtype::u1:
      return gram::pack_bits(arr.data<std::uint8_t>(), r, k, k, po);
    case io::npy_dtype::i1:
      return gram::pack_bits(arr.data<std::int8_t>(), r, k, k, po);
    default:
      throw logic_error("dist::read_bits_npy: '" + path + "' holds " + io::npy_descr(arr.header.dtype) +
                        "; uint8, int8 or bool 0/1 values are needed");
  }
}

/// Every rank reads the 2-D 0/1 .npy at `path` (a shared file system, or the same file on each
/// host) and packs it. A rank that cannot read it makes every rank throw rank_error naming that
/// rank and the file. Collective.
inline gram::bit_matrix read_bits_npy(const communicator& c, const std::string& path,
                                      gram::pack_options po = {}) {
  return agree(c, ("reading the input '" + path + "'").c_str(),
               [&] { return read_bits_npy_local(path, po); });
}

/// Reads and packs a raw file of `rows` x `cols` 0/1 bytes (C order, from `offset`) on this rank
/// alone (not collective).
inline gram::bit_matrix read_bits_raw_local(const std::string& path, std::int64_t rows, std::int64_t cols,
                                            std::int64_t offset = 0, gram::pack_options po = {}) {
  io::raw_layout l;
  l.rows = rows;
  l.row_bytes = cols;
  l.offset = offset;
  const std::vector<unsigned char> b = io::read_raw(path, l);
  return gram::pack_bits(b.data(), rows, cols, cols, po);
}

/// Every rank reads the raw 0/1 bytes at `path` (rows x cols) and packs them; a rank that cannot
/// makes every rank throw rank_error naming it. Collective.
inline gram::bit_matrix read_bits_raw(const communicator& c, const std::string& path, std::int64_t rows,
                                      std::int64_t cols, std::int64_t offset = 0,
                                      gram::pack_options po = {}) {
  return agree(c, ("reading the input '" + path + "'").c_str(),
               [&] { return read_bits_raw_local(path, rows, cols, offset, po); });
}

/// Rank 0's packed matrix on every rank (MPI_Bcast in pieces of at most 1 GiB): `m` on rank 0
/// is sent, the others' are replaced. Collective.
inline void broadcast_bits(const communicator& c, gram::bit_matrix& m) {
  std::int64_t shape[2] = {m.rows(), m.cols()};
  SPILLWAY_MPI_TRY(MPI_Bcast(shape, 2, MPI_INT64_T, 0, c.get()));
  if (c.rank() != 0) {
    agree(c, "allocating the broadcast input", [&] { m = gram::bit_matrix(shape[0], shape[1], m.memory()); });
  } else {
    agree(c, "allocating the broadcast input", [] {});
  }
  auto* p = reinterpret_cast<char*>(m.data());
  const auto bytes = static_cast<std::int64_t>(m.size_bytes());
  for (std::int64_t at = 0; at < bytes; at += detail::io_piece_bytes) {
    const std::int64_t n = std::min(detail::io_piece_bytes, bytes - at);
    SPILLWAY_MPI_TRY(MPI_Bcast(p + at, static_cast<int>(n), MPI_BYTE, 0, c.get()));
  }
}

// ---- options, results ---------------------------------------------------------------------------

/// How a distributed Gram job splits its strips between the ranks (gram_job_options::split).
enum class gram_split_policy { automatic, pairs, model, cyclic, snake, greedy };

inline const char* split_policy_name(gram_split_policy p) {
  return ::spillway::detail::enum_name(p, {"auto", "pairs", "model", "cyclic", "snake", "greedy"});
}

/// "auto", "pairs", "model", "cyclic", "snake" or "greedy" (logic_error otherwise).
inline gram_split_policy parse_split_policy(const std::string& s) {
  for (const auto p : {gram_split_policy::automatic, gram_split_policy::pairs, gram_split_policy::model,
                       gram_split_policy::cyclic, gram_split_policy::snake, gram_split_policy::greedy}) {
    if (s == split_policy_name(p)) return p;
  }
  throw logic_error("unknown split '" + s + "': auto, pairs, model, cyclic, snake or greedy");
}

struct gram_job_options {
  gram::metric epilogue = gram::metric::counts;
  gram::score_options scores{};
  /// Rows per strip (the unit of the split). 0: 256 on the host; on the GPU the pair planner's
  /// strip height for the budget (the smallest over the ranks, so all ranks cut alike).
  std::int64_t strip_rows = 0;
  /// Progress of the whole job on rank 0; cancelling stops every rank (nothing is written).
  run_options run;
  /// The triangle's file is synced (MPI_File_sync) before the job returns: its time then includes
  /// the storage device's, not only the page cache's.
  bool sync_files = false;
  /// The triangle's ranges go out with MPI_File_write_at_all (true) or each rank's MPI_File_write_at.
  bool collective_io = true;
  // ---- the GPU form (dist/gram.cuh) ----
  /// Run the host implementation even where every rank has a GPU.
  bool host = false;
  /// This rank's GPU. −1: local_rank % (GPUs visible to this rank) — one GPU per rank of a host.
  int device = -1;
  /// Device memory of this rank's GPU. Default: memory_budget::default_for (80% of free).
  std::optional<memory_budget> budget;
  gram::kernel_path path = gram::kernel_path::automatic;
  std::size_t slots_per_device = 3;
  /// Which rank computes which strips (dist/gram_split.hpp; the rows a rank owns are one
  /// contiguous block whatever this says). automatic: on the GPU, the contiguous split by each
  /// share's predicted seconds, and for top-k with several ranks whichever of it and the dealt
  /// splits (cyclic, snake, greedy) the model predicts fastest (make_gram_split_best); on the host,
  /// by pairs. pairs / model: contiguous, by pairs or by predicted seconds (the host: by pairs).
  /// cyclic / snake / greedy: top-k's strips dealt across the matrix (the host deals greedy as
  /// cyclic: it has no model); the triangle and threshold keep the contiguous split (model).
  gram_split_policy split = gram_split_policy::automatic;
  /// The rates of that prediction (rank 0's model decides the split for every rank).
  gram_cost_model model{};
  /// Top-k: where every rank is on one host, the lists of other ranks' rows go to their owners
  /// through a window of shared memory (each sender packs into its segment, each owner merges
  /// straight from the senders' segments: one copy, not MPI's copy in and out); false, or ranks
  /// on several hosts: MPI_Alltoallv.
  bool shared_memory_exchange = true;
  /// Top-k on GPUs, every rank on one host: the lists go to their owners GPU to GPU (each rank's
  /// merged lists in a buffer the other processes map through CUDA IPC; each owner copies its rows
  /// over the peer link, merges them on its GPU and brings only its own rows to the host:
  /// dist/device_exchange.cuh). false, ranks on several hosts, or GPUs that cannot map each
  /// other's memory: the host exchange above.
  bool device_exchange = true;
};

/// Where one rank's time and bytes went in a distributed Gram job.
struct gram_phases {
  double setup_seconds = 0.0;     ///< checks, planning, the GPU's buffers (the collectives between them included)
  double compute_seconds = 0.0;   ///< its share of the strips (= run.ranks[rank].seconds)
  double wait_seconds = 0.0;      ///< after its share, until every rank's had ended (the run's collectives)
  double collect_seconds = 0.0;   ///< top-k: the GPU's lists merged on the device and copied to the host
  double exchange_seconds = 0.0;  ///< top-k: lists of other ranks' rows sent to their owners (MPI_Alltoallv)
  double merge_seconds = 0.0;     ///< top-k: its rows' lists merged with those that arrived
  double write_seconds = 0.0;     ///< triangle: the MPI-IO write (and sync)
  double total_seconds = 0.0;     ///< the whole call on this rank
  double predicted_seconds = 0.0;  ///< the split's prediction of compute_seconds (0: split by pairs)
  double transfer_bytes = 0.0;    ///< host↔device bytes of its share (uploads, and the triangle's strips)
  double collect_bytes = 0.0;     ///< top-k: device→host bytes of the lists
  double sent_bytes = 0.0;        ///< top-k: bytes sent to other ranks
  double received_bytes = 0.0;    ///< top-k: bytes received from other ranks
  double written_bytes = 0.0;     ///< bytes it wrote to the file
  /// Triangle on the GPU, inside compute_seconds: the worker's copies of its strips out of the
  /// pinned staging into the rank's rows (written_bytes of them).
  double host_copy_seconds = 0.0;
  static constexpr int fields = 15;
  void to(double* v) const {
    const double x[fields] = {setup_seconds,     compute_seconds, wait_seconds,   collect_seconds,
                              exchange_seconds,  merge_seconds,   write_seconds,  total_seconds,
                              predicted_seconds, transfer_bytes,  collect_bytes,  sent_bytes,
                              received_bytes,    written_bytes,   host_copy_seconds};
    std::copy(x, x + fields, v);
  }
  static gram_phases from(const double* v) {
    gram_phases p;
    double* x[fields] = {&p.setup_seconds,     &p.compute_seconds, &p.wait_seconds,   &p.collect_seconds,
                         &p.exchange_seconds,  &p.merge_seconds,   &p.write_seconds,  &p.total_seconds,
                         &p.predicted_seconds, &p.transfer_bytes,  &p.collect_bytes,  &p.sent_bytes,
                         &p.received_bytes,    &p.written_bytes,   &p.host_copy_seconds};
    for (int i = 0; i < fields; ++i) *x[i] = v[i];
    return p;
  }
  /// What the phases above do not account for (timers' gaps, the result's hand-over).
  [[nodiscard]] double other_seconds() const {
    return total_seconds - setup_seconds - compute_seconds - wait_seconds - collect_seconds - exchange_seconds -
           merge_seconds - write_seconds;
  }
};

/// What a distributed Gram job did, the same on every rank except the `local_*` fields.
struct gram_report {
  run_report run;                              ///< tasks, bytes and seconds of every rank
  gram_split split;                            ///< who owned which rows
  bool on_gpu = false;                         ///< this rank ran on its GPU (else the host implementation)
  int device = -1;                             ///< this rank's GPU
  gram_phases local;                           ///< this rank's phases
  std::vector<gram_phases> ranks;              ///< every rank's phases (the same on every rank)
  double local_compute_seconds = 0.0;          ///< this rank's share (= run.ranks[rank].seconds)
  double local_merge_seconds = 0.0;            ///< top-k: collect + exchange + merge (see `local`)
  double local_write_seconds = 0.0;            ///< the MPI-IO writes (0 when nothing is written)
  std::size_t local_merge_bytes_sent = 0;      ///< top-k: bytes this rank sent to other ranks
  std::size_t local_merge_bytes_received = 0;  ///< top-k: bytes it received from other ranks
  bool lists_on_device = false;                ///< top-k: the lists went to their owners GPU to GPU (device_exchange)
};

/// This rank's rows of a top-k result: rows [first_row, first_row + lists.rows) of the matrix.
template <class V>
struct topk_block {
  std::int64_t first_row = 0;
  pairwise::topk_result<V> lists;
};

/// This rank's entries of a threshold result (its own rows, sorted) and where they go in the
/// concatenation of all ranks' (= the one-process COO).
template <class V>
struct coo_block {
  pairwise::coo_result<V> entries;
  std::int64_t offset = 0;  ///< entries before this rank's
  std::int64_t total = 0;   ///< over all ranks
};

namespace detail {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

template <class V>
void check_dist_gram(const gram::bit_matrix_view& a, const gram_job_options& o, const char* who) {
  gram::detail::check_view(a, who, "a");
  gram::detail::check_output_type<V>(o.epilogue, a.cols, who);
  if (o.strip_rows < 0)
    throw logic_error(std::string(who) + ": strip_rows must be >= 0, got " + std::to_string(o.strip_rows));
}

/// The exchange counts entries (rows · k) in MPI's int (one rank exchanges nothing: no limit).
inline void check_exchange(std::int64_t n, int k, const char* who) {
  if (n * static_cast<std::int64_t>(k) > 0x7FFFFFFF) {
    throw logic_error(std::string(who) + ": n * k = " + std::to_string(n * k) +
                      " list entries; the exchange to the owners counts them in int (at most 2^31 - 1)");
  }
}

/// The checks of a distributed job, on every rank at once (agree, "checking the <sink> job"): A and
/// the options (check_dist_gram), then the sink's own (`sink_checks`).
template <class V, class SinkChecks>
void check_job(const communicator& c, const gram::bit_matrix_view& a, const gram_job_options& o, const char* what,
               const char* who, SinkChecks&& sink_checks) {
  agree(c, what, [&] {
    check_dist_gram<V>(a, o, who);
    sink_checks();
  });
}

/// What a distributed job cannot do yet: logic_error "<who>: <why>" where `refused`.
inline void refuse_if(bool refused, const char* who, const char* why) {
  if (refused) throw logic_error(std::string(who) + why);
}

/// The checks of a distributed top-k, triangle or threshold job, on every rank at once (agree): the
/// same for the GPU and the host implementations, each naming its own entry point.
template <class V>
void check_topk_job(const communicator& c, const gram::bit_matrix_view& a, const pairwise::topk_options& k,
                    const gram_job_options& o, const char* who) {
  check_job<V>(c, a, o, "checking the top-k job", who, [&] {
    pairwise::detail::check_topk(k, who);
    if (c.size() > 1) check_exchange(a.rows, k.k, who);
  });
}

template <class V>
void check_triangle_job(const communicator& c, const gram::bit_matrix_view& a, pairwise::triangle_layout layout,
                        const gram_job_options& o, const char* who) {
  check_job<V>(c, a, o, "checking the triangle job", who, [&] {
    refuse_if(layout == pairwise::triangle_layout::full, who,
              ": the full layout is not distributed (its rows need the mirrored half from other ranks); use "
              "upper_packed or condensed");
  });
}

template <class V>
void check_threshold_job(const communicator& c, const gram::bit_matrix_view& a, const pairwise::threshold_options& t,
                         const gram_job_options& o, const char* who) {
  check_job<V>(c, a, o, "checking the threshold job", who, [&] {
    refuse_if(t.both_halves, who,
              ": both_halves is not distributed yet (a row's lower half is computed by other ranks); mirror "
              "the upper-triangle COO instead");
  });
}

/// Per-row partial top-k lists for rows [row0, n): at most k entries each, best first.
template <class V>
struct partial_topk {
  std::int64_t row0 = 0, rows = 0;
  int k = 0;
  bool larger = true;
  std::vector<V> v;
  std::vector<std::int64_t> c;  // -1: empty place
  std::vector<int> count;

  partial_topk(std::int64_t first, std::int64_t n, int k_, bool larger_)
      : row0(first),
        rows(n - first),
        k(k_),
        larger(larger_),
        v(static_cast<std::size_t>(rows) * static_cast<std::size_t>(k_), V{}),
        c(static_cast<std::size_t>(rows) * static_cast<std::size_t>(k_), -1),
        count(static_cast<std::size_t>(rows), 0) {}

  void offer(std::int64_t row, V val, std::int64_t col) {
    const auto base = static_cast<std::size_t>(row - row0) * static_cast<std::size_t>(k);
    int& m = count[static_cast<std::size_t>(row - row0)];
    V* vv = v.data() + base;
    std::int64_t* cc = c.data() + base;
    if (m == k && !pairwise::detail::topk_better(larger, val, col, vv[k - 1], cc[k - 1])) return;
    int at = m == k ? k - 1 : m;
    if (m < k) ++m;
    while (at > 0 && pairwise::detail::topk_better(larger, val, col, vv[at - 1], cc[at - 1])) {
      vv[at] = vv[at - 1];
      cc[at] = cc[at - 1];
      --at;
    }
    vv[at] = val;
    cc[at] = col;
  }
};

/// The host jobs' scores of A's rows as the host pair job's `Ops` (pairwise/host_job.hpp): a view
/// is a range of A's rows; dense scores a range of rows against a range of columns with A's
/// popcounts counted once, rows in parallel (OpenMP), each row's columns in order on one thread.
template <class V>
struct host_strip_ops {
  /// Rows [first, first + rows) of A.
  struct view {
    std::int64_t first = 0, rows = 0;
  };
  const gram::bit_matrix_view& a;
  std::vector<std::int32_t> pc;
  gram::detail::scorer sc;
  std::int64_t nw;
  host_strip_ops(const gram::bit_matrix_view& rows, const gram_job_options& o)
      : a(rows),
        pc(gram::row_popcounts(rows)),
        sc{o.epilogue, o.scores.jaccard_empty, o.scores.cosine_zero},
        nw(gram::detail::words64(rows)) {}
  /// All of A's rows.
  [[nodiscard]] view all() const noexcept { return view{0, a.rows}; }
  [[nodiscard]] view rows(const view& m, std::int64_t first, std::int64_t count) const noexcept {
    return view{m.first + first, count};
  }
  [[nodiscard]] V score(std::int64_t i, std::int64_t j) const {
    return sc.template operator()<V>(gram::detail::and_count(a.row(i), a.row(j), nw), pc[static_cast<std::size_t>(i)],
                                     pc[static_cast<std::size_t>(j)]);
  }
  void dense(const view& x, const view& y, V* out, std::int64_t ldc) const {
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 4)
#endif
    for (std::int64_t i = 0; i < x.rows; ++i) {
      for (std::int64_t j = 0; j < y.rows; ++j) out[i * ldc + j] = score(x.first + i, y.first + j);
    }
  }
  /// Rows [i0, i1) of the upper triangle, each score handed over as it is computed (no strip in
  /// between): rows in parallel (OpenMP), each row's columns in order on one thread. For row i,
  /// row_put(i, j0) gives the row's put(j, score), called for the columns j of [j0, n), j0 = i
  /// (`diagonal`) or i + 1.
  template <class RowPut>
  void upper_rows(std::int64_t i0, std::int64_t i1, bool diagonal, RowPut&& row_put) const {
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 4)
#endif
    for (std::int64_t i = i0; i < i1; ++i) {
      const std::int64_t j0 = diagonal ? i : i + 1;
      auto put = row_put(i, j0);
      for (std::int64_t j = j0; j < a.rows; ++j) put(j, score(i, j));
    }
  }
};

/// Scores of strip rows [i0, i1) against the columns [i0, n) (the host pair job's block scores;
/// the entries j < i of the diagonal block are computed too, and not read).
template <class V>
void host_strip_scores(const host_strip_ops<V>& ops, std::int64_t i0, std::int64_t i1, std::vector<V>& out) {
  pairwise::detail::host_block_scores(ops, ops.all(), i0, i1, ops.all(), i0, out);
}

/// Offers a strip's scores to the partial lists: each pair i < j to row i and to row j, (i, i)
/// to row i when the diagonal counts.
template <class V>
void offer_strip(partial_topk<V>& pt, const std::vector<V>& s, std::int64_t i0, std::int64_t i1,
                 std::int64_t n, bool diagonal) {
  const std::int64_t w = n - i0;
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 4)
#endif
  for (std::int64_t i = i0; i < i1; ++i) {
    const V* row = s.data() + (i - i0) * w - i0;
    for (std::int64_t j = diagonal ? i : i + 1; j < n; ++j) pt.offer(i, row[j], j);
  }
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
  for (std::int64_t j = i0 + 1; j < n; ++j) {
    const std::int64_t top = std::min(i1, j);
    for (std::int64_t i = i0; i < top; ++i)
      pt.offer(j, s[static_cast<std::size_t>((i - i0) * w + (j - i0))], i);
  }
}

/// The split of the host implementation: by pairs, contiguous, except top-k's dealt policies
/// (greedy dealt as cyclic: the host has no model). Every rank computes it alike.
inline gram_split host_split(std::int64_t n, std::int64_t strip_rows, std::size_t parts, std::size_t row_bytes,
                             gram_split_policy policy, bool topk) {
  if (topk && parts > 1) {
    if (policy == gram_split_policy::cyclic || policy == gram_split_policy::greedy)
      return make_gram_split_dealt(n, strip_rows, parts, strip_deal::cyclic, row_bytes);
    if (policy == gram_split_policy::snake)
      return make_gram_split_dealt(n, strip_rows, parts, strip_deal::snake, row_bytes);
  }
  return make_gram_split(n, strip_rows, parts, row_bytes);
}

/// A host job's split of A over the ranks of `c`: strips of o.strip_rows rows (256 where 0), by
/// pairs (host_split: top-k also its dealt policies).
inline gram_split host_job_split(const communicator& c, const gram::bit_matrix_view& a, const gram_job_options& o,
                                 bool topk) {
  return host_split(a.rows, o.strip_rows > 0 ? o.strip_rows : 256, static_cast<std::size_t>(c.size()),
                    static_cast<std::size_t>(a.ld_words) * 4u, o.split, topk);
}

/// Where a rank's partial top-k lists start: the first row of the owner block its strips first
/// touch (so each block it sends is whole); n where it computes no strip.
inline std::int64_t lists_row0(const gram_split& sp, int r) {
  if (!sp.computes(r)) return sp.n;
  return sp.first_row(sp.owner(sp.touched_from(r)));
}

/// The exchange's send (0) and receive (1) entries, kept per thread across jobs: fresh pages of
/// 12.8 MB each (two ranks of the 100,000-row job) cost milliseconds of page faults every call.
template <class V>
std::vector<topk_wire<V>>& exchange_scratch(int which) {
  thread_local std::vector<topk_wire<V>> b[2];
  return b[which];
}

/// Where sender q's lists for owner o begin in its send buffer, in entries: its lists of the
/// owners before o that it meets, in the order of the owners. The one layout the sender packs
/// (and gives MPI_Alltoallv as displacements) and the owner reads from the sender's segment.
inline std::int64_t sent_before(const gram_split& sp, int q, int o, int k) {
  std::int64_t before = 0;
  for (int u = 0; u < o; ++u)
    if (sp.lists_meet(q, u)) before += sp.rows_of(u) * k;
  return before;
}

/// Per-row top-k lists of rows [row0, row0 + lists.rows) (this rank's partial lists; every owner
/// block they meet whole: lists_row0, or row0 = 0 with n rows) → this rank's rows' final lists.
/// Only the lists of rows other ranks own leave the rank (MPI_Alltoallv to the owners whose rows
/// its strips touched; none at all where no lists meet); its own rows' lists stay where they are
/// and are merged with those that arrived. Collective. Fills the exchange and merge phases of `ph`.
template <class V>
pairwise::topk_result<V> lists_to_owners(const communicator& c, const gram_split& sp, pairwise::topk_result<V>&& lists,
                                         std::int64_t row0, bool larger, bool shared_memory, gram_phases& ph) {
  const int P = c.size(), me = c.rank();
  const int k = lists.k;
  const std::int64_t r0 = sp.first_row(me), r1 = sp.last_row(me), mine = r1 - r0;
  bool any_meet = false;
  for (int q = 0; q < P; ++q)
    for (int o = 0; o < P; ++o) any_meet = any_meet || sp.lists_meet(q, o);
  // This rank's own rows are among its lists (its strips touched them).
  const bool self = sp.computes(me) && sp.touched_from(me) < r1 && mine > 0;
  const auto covers = [&](std::int64_t f, std::int64_t l) { return row0 <= f && l <= row0 + lists.rows; };
  if (self && !covers(r0, r1))
    throw logic_error("dist top-k: this rank's lists do not cover its own rows");
  const int threads = host_threads(c.local_size());
  const auto t0 = std::chrono::steady_clock::now();
  // The lists travel as (value, int32 column) entries, counted in 64-bit words (a basic MPI type:
  // a derived 8-byte type ran much slower through OpenMPI's shared memory; docs/distributed.md,
  // "the lists on the wire"); the owner merges straight from the entries that arrived.
  using wire = topk_wire<V>;
  static_assert(sizeof(wire) % 8 == 0, "topk_wire: a whole number of 64-bit words");
  constexpr std::int64_t words = static_cast<std::int64_t>(sizeof(wire) / 8);
  std::vector<wire>& sw = exchange_scratch<V>(0);
  std::vector<wire>& rw = exchange_scratch<V>(1);
  std::size_t arrived = 0;  // lists of each of this rank's rows that came from other ranks
  std::vector<const wire*> arrived_at;  // where each arrived block lies (rw, or a sender's segment)
  const bool through_shared = any_meet && shared_memory && c.one_host();
  if (any_meet) {
    std::vector<int> scount(static_cast<std::size_t>(P), 0), sdispl(static_cast<std::size_t>(P), 0);
    std::vector<int> rcount(static_cast<std::size_t>(P), 0), rdispl(static_cast<std::size_t>(P), 0);
    std::int64_t sent = 0, recv = 0;
    std::vector<std::pair<std::int64_t, std::int64_t>> send_ranges;  // (first entry of lists, count)
    const auto as_count = [&](std::int64_t entries) {
      if (entries * words > 0x7FFFFFFF)
        throw logic_error("dist top-k: " + std::to_string(entries) + " list entries to exchange with one rank; MPI counts " +
                          std::to_string(words) + " words an entry in int (at most 2^31 - 1 words)");
      return static_cast<int>(entries * words);
    };
    for (int q = 0; q < P; ++q) {
      const auto u = static_cast<std::size_t>(q);
      if (sp.lists_meet(me, q)) {  // this rank's lists of q's rows
        if (!covers(sp.first_row(q), sp.last_row(q)))
          throw logic_error("dist top-k: this rank's lists do not cover rank " + std::to_string(q) + "'s rows");
        scount[u] = as_count(sp.rows_of(q) * k);
        sdispl[u] = as_count(sent_before(sp, me, q, k));
        send_ranges.emplace_back((sp.first_row(q) - row0) * k, sp.rows_of(q) * k);
        sent += sp.rows_of(q) * k;  // = sent_before(sp, me, q + 1, k)
      }
      if (sp.lists_meet(q, me)) {
        rcount[u] = as_count(mine * k);
        rdispl[u] = as_count(recv);
        recv += mine * k;
        ++arrived;
      }
    }
    as_count(sent);
    as_count(recv);
    wire* out = nullptr;
    if (through_shared) {
      // Collective: every rank, its own size (0 where it sends nothing).
      out = reinterpret_cast<wire*>(c.shared_segment(static_cast<std::size_t>(sent) * sizeof(wire)));
    } else {
      if (sw.size() < static_cast<std::size_t>(sent)) sw.resize(static_cast<std::size_t>(sent));
      if (rw.size() < static_cast<std::size_t>(recv)) rw.resize(static_cast<std::size_t>(recv));
      out = sw.data();
    }
    {
      std::int64_t at = 0;
      for (const auto& [first, count] : send_ranges) {
        pack_topk_wire(lists.values.data() + first, lists.indices.data() + first, count, out + at, threads);
        at += count;
      }
    }
    if (through_shared) {
      c.shared_fence();
      // Sender q's segment holds its lists as its send buffer would (sent_before).
      for (int q = 0; q < P; ++q) {
        if (sp.lists_meet(q, me))
          arrived_at.push_back(reinterpret_cast<const wire*>(c.shared_segment_of(q)) + sent_before(sp, q, me, k));
      }
    } else {
      SPILLWAY_MPI_TRY(MPI_Alltoallv(sw.data(), scount.data(), sdispl.data(), MPI_UINT64_T, rw.data(), rcount.data(),
                                     rdispl.data(), MPI_UINT64_T, c.get()));
      for (std::size_t q = 0; q < arrived; ++q) arrived_at.push_back(rw.data() + q * static_cast<std::size_t>(mine * k));
    }
    ph.sent_bytes = static_cast<double>(sent) * static_cast<double>(sizeof(wire));
    ph.received_bytes = static_cast<double>(recv) * static_cast<double>(sizeof(wire));
  }
  ph.exchange_seconds = seconds_since(t0);
  const auto t1 = std::chrono::steady_clock::now();
  std::vector<topk_list_ref<V>> refs;
  const auto own = static_cast<std::size_t>(self ? (r0 - row0) * k : 0);
  if (self) refs.push_back(topk_list_ref<V>{lists.values.data() + own, lists.indices.data() + own, nullptr});
  for (const wire* w : arrived_at) refs.push_back(topk_list_ref<V>{nullptr, nullptr, w});
  pairwise::topk_result<V> out;
  if (self) {
    if (arrived > 0 && r0 - row0 >= mine) {
      // Its rows' lists lie past the front by at least their own length: merged straight to the
      // front (no row written is one the merge still reads), then the rest dropped (no move).
      merge_topk_refs(mine, k, larger, refs, lists.values.data(), lists.indices.data(), threads);
      keep_topk_rows(lists, 0, mine);
    } else {
      if (arrived > 0)
        merge_topk_refs(mine, k, larger, refs, lists.values.data() + own, lists.indices.data() + own, threads);
      keep_topk_rows(lists, r0 - row0, r1 - row0);
    }
    out = std::move(lists);
  } else {
    // Its strips did not touch its own rows (a dealt split): its rows' lists all arrived.
    out = pairwise::detail::empty_topk<V>(mine, k);
    if (!refs.empty()) merge_topk_refs(mine, k, larger, refs, out.values.data(), out.indices.data(), threads);
  }
  ph.merge_seconds = seconds_since(t1);
  return out;
}

/// Every rank's phases on every rank (MPI_Allgather). Collective.
inline void share_phases(const communicator& c, gram_report& rep) {
  std::vector<double> mine(gram_phases::fields), all(static_cast<std::size_t>(gram_phases::fields * c.size()));
  rep.local.to(mine.data());
  SPILLWAY_MPI_TRY(MPI_Allgather(mine.data(), gram_phases::fields, MPI_DOUBLE, all.data(), gram_phases::fields,
                                 MPI_DOUBLE, c.get()));
  rep.ranks.clear();
  for (int q = 0; q < c.size(); ++q)
    rep.ranks.push_back(gram_phases::from(all.data() + static_cast<std::size_t>(q) * gram_phases::fields));
}

/// The phases every job reports alike: its share, the wait for the others, the legacy fields.
inline void note_run(const communicator& c, gram_report& rep) {
  const auto& mine = rep.run.ranks[static_cast<std::size_t>(c.rank())];
  rep.local.compute_seconds = mine.seconds;
  rep.local.wait_seconds = std::max(0.0, rep.run.elapsed_seconds - mine.seconds);
  rep.local.transfer_bytes = static_cast<double>(mine.bytes);
  if (!rep.split.predicted.empty())
    rep.local.predicted_seconds = rep.split.predicted[static_cast<std::size_t>(c.rank())].seconds;
  rep.local_compute_seconds = mine.seconds;
}

/// A host job's run, once its setup is done: the setup's seconds since `t_start`, then
/// strip(i0, i1) for the rows [i0, i1) of every strip of rep.split this rank computes
/// (run_host_tasks under o.run; collective), and the run noted in the report (note_run).
template <class Strip>
void run_host_strips(const communicator& c, const gram_job_options& o, gram_report& rep,
                     std::chrono::steady_clock::time_point t_start, Strip&& strip) {
  const gram_split& sp = rep.split;
  rep.local.setup_seconds = seconds_since(t_start);
  rep.run = run_host_tasks(
      c, sp.plan,
      [&](std::size_t t) {
        const std::int64_t i0 = static_cast<std::int64_t>(t) * sp.strip_rows;
        strip(i0, std::min(sp.n, i0 + sp.strip_rows));
      },
      o.run);
  note_run(c, rep);
}

/// The end of a job: the legacy fields from the phases, the total, every rank's phases. Collective.
inline void finish_report(const communicator& c, gram_report& rep, std::chrono::steady_clock::time_point t0) {
  rep.local_merge_seconds = rep.local.collect_seconds + rep.local.exchange_seconds + rep.local.merge_seconds;
  rep.local_write_seconds = rep.local.write_seconds;
  rep.local_merge_bytes_sent = static_cast<std::size_t>(rep.local.sent_bytes);
  rep.local_merge_bytes_received = static_cast<std::size_t>(rep.local.received_bytes);
  rep.local.total_seconds = seconds_since(t0);
  share_phases(c, rep);
}

/// This rank's rows [r0, r1) of the upper triangle of n rows in `layout` (upper_packed or
/// condensed): elements [base, base + size()) of the layout, uninitialised once allocated (every
/// element is written by its strip: at 10^5 rows the triangle is 20 GB, which a value-initialised
/// vector would first zero).
template <class V>
struct rank_triangle {
  std::int64_t n = 0;
  pairwise::triangle_layout layout = pairwise::triangle_layout::upper_packed;
  bool with_diagonal = true;  ///< row i from column i (upper_packed), else from i + 1 (condensed)
  std::int64_t base = 0, count = 0;
  std::unique_ptr<V[]> p;

  rank_triangle(std::int64_t rows, pairwise::triangle_layout l, std::int64_t r0, std::int64_t r1)
      : n(rows), layout(l), with_diagonal(l == pairwise::triangle_layout::upper_packed) {
    base = offset(r0);
    count = offset(r1) - base;
  }
  /// Where row i starts in the layout (the layout's size for i = n).
  [[nodiscard]] std::int64_t offset(std::int64_t i) const noexcept {
    if (i >= n) return pairwise::layout_size(layout, n);
    return with_diagonal ? pairwise::packed_row_offset(n, i) : pairwise::condensed_row_offset(n, i);
  }
  void allocate() { p.reset(new V[static_cast<std::size_t>(std::max<std::int64_t>(count, 1))]); }
  [[nodiscard]] V* data() const noexcept { return p.get(); }
  [[nodiscard]] std::int64_t size() const noexcept { return count; }
  /// Row i's first element (column i, or i + 1 where condensed), for a row of this rank.
  [[nodiscard]] V* row(std::int64_t i) const noexcept { return p.get() + (offset(i) - base); }
};

/// This rank's rows of the triangle under the split `sp`, allocated on every rank at once
/// (agree). Collective.
template <class V>
rank_triangle<V> make_rank_triangle(const communicator& c, const gram_split& sp,
                                    pairwise::triangle_layout layout) {
  rank_triangle<V> t(sp.n, layout, sp.first_row(c.rank()), sp.last_row(c.rank()));
  agree(c, "allocating its rows of the triangle", [&] { t.allocate(); });
  return t;
}

/// The triangle's end on every form: unless the job was cancelled, this rank's rows (`tri`) into
/// the one .npy at `path` (MPI-IO, collective), the write's seconds and bytes in the report; then
/// the report finished (collective).
template <class V>
void write_rows_and_finish(const communicator& c, const std::string& path, const rank_triangle<V>& tri,
                           const gram_job_options& o, gram_report& rep,
                           std::chrono::steady_clock::time_point t_start) {
  if (!rep.run.cancelled) {
    const auto t0 = std::chrono::steady_clock::now();
    write_npy_at_all(c, path, {pairwise::layout_size(tri.layout, tri.n)}, tri.data(), tri.base, tri.size(),
                     o.sync_files, o.collective_io);
    rep.local.write_seconds = seconds_since(t0);
    rep.local.written_bytes = static_cast<double>(tri.size()) * static_cast<double>(sizeof(V));
  }
  finish_report(c, rep, t_start);
}

/// Concatenation bookkeeping of per-rank COO runs (MPI_Exscan of the counts). Collective.
template <class V>
void place_coo(const communicator& c, coo_block<V>& b) {
  const auto mine = static_cast<std::int64_t>(b.entries.size());
  std::int64_t before = 0;
  SPILLWAY_MPI_TRY(MPI_Exscan(&mine, &before, 1, MPI_INT64_T, MPI_SUM, c.get()));
  if (c.rank() == 0) before = 0;  // MPI_Exscan leaves rank 0's result undefined
  SPILLWAY_MPI_TRY(MPI_Allreduce(&mine, &b.total, 1, MPI_INT64_T, MPI_SUM, c.get()));
  b.offset = before;
}

/// The threshold's end on every form, once this rank's entries are collected (since
/// `t_collect`): their place among all ranks' (place_coo), the report finished and handed to
/// `report` where it is not null. Collective.
template <class V>
void place_coo_and_finish(const communicator& c, coo_block<V>& b, gram_report& rep,
                          std::chrono::steady_clock::time_point t_collect,
                          std::chrono::steady_clock::time_point t_start, gram_report* report) {
  rep.local.collect_seconds = seconds_since(t_collect);
  const auto t_place = std::chrono::steady_clock::now();
  place_coo(c, b);
  rep.local.exchange_seconds = seconds_since(t_place);
  finish_report(c, rep, t_start);
  if (report != nullptr) *report = std::move(rep);
}

}  // namespace detail

// ---- writing and gathering the results ------------------------------------------------------------

/// Writes the lists of every rank's block into `path` (values, n x k) and `path + ".indices.npy"`
/// (int64 columns, −1 for an empty place): the files the one-process spillway-gram writes.
template <class V>
void write_topk_npy(const communicator& c, const std::string& path, const topk_block<V>& b, std::int64_t n) {
  const std::int64_t k = b.lists.k;
  write_npy_at_all(c, path, {n, k}, b.lists.values.data(), b.first_row * k, b.lists.rows * k);
  write_npy_at_all(c, path + ".indices.npy", {n, k}, b.lists.indices.data(), b.first_row * k,
                   b.lists.rows * k);
}

/// Writes every rank's COO run into `path` (values), `path + ".row.npy"` and `path + ".col.npy"`
/// (int64): one-process order and files.
template <class V>
void write_coo_npy(const communicator& c, const std::string& path, const coo_block<V>& b) {
  const auto m = static_cast<std::int64_t>(b.entries.size());
  write_npy_at_all(c, path + ".row.npy", {b.total}, b.entries.row.data(), b.offset, m);
  write_npy_at_all(c, path + ".col.npy", {b.total}, b.entries.col.data(), b.offset, m);
  write_npy_at_all(c, path, {b.total}, b.entries.value.data(), b.offset, m);
}

/// Every rank's top-k rows on rank 0 (rank 0 gets n rows; the others an empty result). Collective.
template <class V>
pairwise::topk_result<V> gather_topk(const communicator& c, const topk_block<V>& b, std::int64_t n) {
  const int P = c.size();
  const int k = b.lists.k;
  const auto mine = static_cast<int>(b.lists.rows * k);
  std::vector<int> counts(static_cast<std::size_t>(P)), displs(static_cast<std::size_t>(P), 0);
  SPILLWAY_MPI_TRY(MPI_Gather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, c.get()));
  pairwise::topk_result<V> r{c.rank() == 0 ? n : 0, k, {}, {}};
  if (c.rank() == 0) {
    for (int q = 1; q < P; ++q)
      displs[static_cast<std::size_t>(q)] =
          displs[static_cast<std::size_t>(q) - 1] + counts[static_cast<std::size_t>(q) - 1];
    r.values.resize(static_cast<std::size_t>(n * k));
    r.indices.resize(static_cast<std::size_t>(n * k));
  }
  SPILLWAY_MPI_TRY(MPI_Gatherv(b.lists.values.data(), mine, mpi_type<V>(), r.values.data(), counts.data(),
                               displs.data(), mpi_type<V>(), 0, c.get()));
  SPILLWAY_MPI_TRY(MPI_Gatherv(b.lists.indices.data(), mine, MPI_INT64_T, r.indices.data(), counts.data(),
                               displs.data(), MPI_INT64_T, 0, c.get()));
  return r;
}

/// Every rank's COO run on rank 0, in order (the others get an empty result). Collective.
template <class V>
pairwise::coo_result<V> gather_coo(const communicator& c, const coo_block<V>& b) {
  const int P = c.size();
  if (b.total > 0x7FFFFFFF)
    throw logic_error("dist::gather_coo: more than 2^31 entries: write them with write_coo_npy");
  const auto mine = static_cast<int>(b.entries.size());
  std::vector<int> counts(static_cast<std::size_t>(P)), displs(static_cast<std::size_t>(P), 0);
  SPILLWAY_MPI_TRY(MPI_Gather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, c.get()));
  pairwise::coo_result<V> r;
  if (c.rank() == 0) {
    for (int q = 1; q < P; ++q)
      displs[static_cast<std::size_t>(q)] =
          displs[static_cast<std::size_t>(q) - 1] + counts[static_cast<std::size_t>(q) - 1];
    r.row.resize(static_cast<std::size_t>(b.total));
    r.col.resize(static_cast<std::size_t>(b.total));
    r.value.resize(static_cast<std::size_t>(b.total));
  }
  SPILLWAY_MPI_TRY(MPI_Gatherv(b.entries.row.data(), mine, MPI_INT64_T, r.row.data(), counts.data(),
                               displs.data(), MPI_INT64_T, 0, c.get()));
  SPILLWAY_MPI_TRY(MPI_Gatherv(b.entries.col.data(), mine, MPI_INT64_T, r.col.data(), counts.data(),
                               displs.data(), MPI_INT64_T, 0, c.get()));
  SPILLWAY_MPI_TRY(MPI_Gatherv(b.entries.value.data(), mine, mpi_type<V>(), r.value.data(), counts.data(),
                               displs.data(), mpi_type<V>(), 0, c.get()));
  return r;
}

// ---- the host implementation ----------------------------------------------------------------------

/// Per-row top-k of A·Aᵀ across the ranks of `c` on the host: every rank passes the whole A and
/// gets the final lists of the rows it owns. Equal to gram::host_gram_topk (the same values,
/// the same columns, the same order). Collective.
template <class V>
topk_block<V> host_gram_topk(const communicator& c, const gram::bit_matrix_view& a,
                             const pairwise::topk_options& k, const gram_job_options& o = {},
                             gram_report* report = nullptr) {
  const auto t_start = std::chrono::steady_clock::now();
  gram_report rep;
  detail::check_topk_job<V>(c, a, k, o, "dist::host_gram_topk");
  rep.split = detail::host_job_split(c, a, o, true);
  const gram_split& sp = rep.split;
  const std::int64_t row0 = detail::lists_row0(sp, c.rank());  // its lists: rows [row0, n)
  const detail::host_strip_ops<V> ops(a, o);
  const bool larger = gram::is_similarity(o.epilogue);
  detail::partial_topk<V> pt(row0, a.rows, k.k, larger);
  std::vector<V> s;
  detail::run_host_strips(c, o, rep, t_start, [&](std::int64_t i0, std::int64_t i1) {
    detail::host_strip_scores(ops, i0, i1, s);
    detail::offer_strip(pt, s, i0, i1, a.rows, k.include_diagonal);
  });
  topk_block<V> b;
  b.first_row = sp.first_row(c.rank());
  if (rep.run.cancelled) {
    b.lists = pairwise::detail::empty_topk<V>(0, k.k);
  } else {
    // The partial lists are already the top-k layout (−1 past a row's last entry).
    pairwise::topk_result<V> lists{pt.rows, pt.k, std::move(pt.v), std::move(pt.c)};
    b.lists = detail::lists_to_owners(c, sp, std::move(lists), row0, larger, o.shared_memory_exchange, rep.local);
  }
  detail::finish_report(c, rep, t_start);
  if (report != nullptr) *report = std::move(rep);
  return b;
}

/// The upper triangle of A·Aᵀ (layout upper_packed or condensed) across the ranks on the host,
/// written into ONE .npy at `path` (1-D, layout_size(layout, n) elements: what the one-process
/// spillway-gram writes). Collective.
template <class V>
gram_report host_gram_triangle_npy(const communicator& c, const gram::bit_matrix_view& a,
                                   const std::string& path,
                                   pairwise::triangle_layout layout = pairwise::triangle_layout::upper_packed,
                                   const gram_job_options& o = {}) {
  const auto t_start = std::chrono::steady_clock::now();
  gram_report rep;
  detail::check_triangle_job<V>(c, a, layout, o, "dist::host_gram_triangle_npy");
  rep.split = detail::host_job_split(c, a, o, false);
  const auto tri = detail::make_rank_triangle<V>(c, rep.split, layout);
  const detail::host_strip_ops<V> ops(a, o);
  // Each row's scores straight into its place among this rank's rows.
  detail::run_host_strips(c, o, rep, t_start, [&](std::int64_t i0, std::int64_t i1) {
    ops.upper_rows(i0, i1, tri.with_diagonal, [&tri](std::int64_t i, std::int64_t j0) {
      return [row = tri.row(i), j0](std::int64_t j, V v) { row[j - j0] = v; };
    });
  });
  detail::write_rows_and_finish(c, path, tri, o, rep, t_start);
  return rep;
}

/// Entries of the upper triangle of A·Aᵀ passing a threshold, across the ranks on the host: this
/// rank's rows' entries (sorted) and their place in the one-process COO (gram::host_gram_threshold
/// with the same options). both_halves is not distributed (logic_error on every rank). Collective.
template <class V>
coo_block<V> host_gram_threshold(const communicator& c, const gram::bit_matrix_view& a,
                                 const pairwise::threshold_options& t, const gram_job_options& o = {},
                                 gram_report* report = nullptr) {
  const auto t_start = std::chrono::steady_clock::now();
  gram_report rep;
  detail::check_threshold_job<V>(c, a, t, o, "dist::host_gram_threshold");
  rep.split = detail::host_job_split(c, a, o, false);
  const detail::host_strip_ops<V> ops(a, o);
  const bool larger = gram::is_similarity(o.epilogue);
  const std::int64_t r0 = rep.split.first_row(c.rank()), r1 = rep.split.last_row(c.rank());
  std::vector<std::vector<std::pair<std::int64_t, V>>> kept(static_cast<std::size_t>(r1 - r0));
  // Each row's entries kept as they are scored.
  detail::run_host_strips(c, o, rep, t_start, [&](std::int64_t i0, std::int64_t i1) {
    ops.upper_rows(i0, i1, t.include_diagonal, [&](std::int64_t i, std::int64_t) {
      return [larger, &t, &row = kept[static_cast<std::size_t>(i - r0)]](std::int64_t j, V v) {
        if (pairwise::detail::passes(larger, v, t.threshold)) row.emplace_back(j, v);
      };
    });
  });
  const auto t_collect = std::chrono::steady_clock::now();
  coo_block<V> b;
  for (std::int64_t i = r0; i < r1 && !rep.run.cancelled; ++i) {
    for (const auto& e : kept[static_cast<std::size_t>(i - r0)]) {
      b.entries.row.push_back(i);
      b.entries.col.push_back(e.first);
      b.entries.value.push_back(e.second);
    }
  }
  detail::place_coo_and_finish(c, b, rep, t_collect, t_start, report);
  return b;
}

}  // namespace spillway::dist
