// spillway/dist/similarity.cuh — the fused all-pairs top-k of float rows (similarity/: bf16 or
// half rows, or float rows on TF32) across MPI ranks, one GPU per rank. Every rank passes the
// whole matrix (host memory) and gets the final lists of the rows it owns (contiguous blocks of
// equal size), equal to the one-process similarity_topk's up to the order of equal scores' float
// sums (the same GEMM and selection; ties to the smaller column).
//
// Each rank is one worker of the fused job (similarity/detail/fused_topk_sink.cuh): it seeds the
// blocks b ≡ rank (mod ranks) from its host rows, the ranks exchange those seeds' k-th places (the
// bars: true lower bounds of the final ones) through MPI, each brings every other row in from its
// host, then runs the strips s ≡ rank (mod ranks) in forward order — the same deal as GPUs in one
// process, with MPI in place of the peer copies. Each rank's lists then go to the rows' owners:
// GPU to GPU where the ranks share a host (CUDA IPC: dist/device_exchange.cuh), else through the
// host (lists_to_owners). Where the fused job cannot run on every rank (rows it does not take, a
// GPU without sm_90a code, a budget that cannot hold the rows), every rank runs the one-process
// similarity_topk whole and keeps its own rows: correct, and no faster than one rank.
// similarity_threshold: each rank computes the strips of its own rows through the one-process
// job's threshold sink; the entries are placed in the one-process COO order (write_coo_npy).
//
//   spillway::dist::environment env(argc, argv);
//   spillway::dist::communicator comm;
//   auto nn = spillway::dist::similarity_topk(comm, spillway::similarity::row_major(rows, n, d), {32});
//   // nn.first_row, nn.lists: this rank's rows
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/memory_budget.hpp>
#include <spillway/dist/agree.hpp>
#include <spillway/dist/communicator.hpp>
#include <spillway/dist/device_exchange.cuh>
#include <spillway/dist/gram_split.hpp>
#include <spillway/dist/host_gram.hpp>
#include <spillway/dist/pair_tasks.cuh>
#include <spillway/dist/run_tasks.hpp>
#include <spillway/dist/topk_lists.hpp>
#include <spillway/pairwise/pair_job.cuh>
#include <spillway/pairwise/sinks/topk.cuh>
#include <spillway/similarity/similarity.cuh>

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <future>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace spillway::dist {

/// Options of dist::similarity_topk.
struct similarity_job_options {
  /// The similarity's options on each rank: metric, cosine_zero, gemm (the fused job takes bf16 /
  /// half rows, or float rows with math_mode::tf32), check_finite, lock (the rank's host rows
  /// page-locked for the call), budget (of the rank's GPU), max_panel_rows (the same on every
  /// rank). `devices` is not read (the rank's GPU is `device`), nor `report` and `progress`.
  similarity::similarity_options local{};
  /// This rank's GPU. −1: local_rank % (GPUs visible to this rank) — one GPU per rank of a host.
  int device = -1;
  /// Progress of the whole job on rank 0; cancelling stops every rank (the lists are then empty).
  run_options run;
  /// Every rank on one host: the lists go to their owners GPU to GPU (CUDA IPC); false, or ranks
  /// on several hosts: through the host.
  bool device_exchange = true;
  /// The host exchange through a window of shared memory where every rank is on one host.
  bool shared_memory_exchange = true;
  /// Run the host implementation (host_similarity_*, in double) on every rank even where every
  /// rank has a GPU, as where some rank has none.
  bool host = false;
};

namespace detail {

template <class T>
using fused_rank_job = similarity::detail::similarity_job<T, similarity::detail::fused_topk_sink<T>>;

/// A logic_error on every rank when `v` is not the same on all (collective).
inline void check_same_on_ranks(const communicator& c, std::int64_t v, const char* what, const char* who) {
  std::int64_t mine[2] = {v, -v}, all[2] = {0, 0};
  SPILLWAY_MPI_TRY(MPI_Allreduce(mine, all, 2, MPI_INT64_T, MPI_MAX, c.get()));
  if (all[0] != -all[1]) {
    throw logic_error(std::string(who) + ": " + what + " differs between the ranks (from " +
                      std::to_string(-all[1]) + " to " + std::to_string(all[0]) +
                      "); every rank passes the same rows and options");
  }
}

/// True on every rank when `mine` is true on all (collective).
inline bool on_every_rank(const communicator& c, bool mine) {
  int m = mine ? 1 : 0, all = 0;
  SPILLWAY_MPI_TRY(MPI_Allreduce(&m, &all, 1, MPI_INT, MPI_MIN, c.get()));
  return all != 0;
}

/// This rank's GPU: o.device, else local_rank % visible GPUs; −1 with none (or o.host).
inline int rank_device(const communicator& c, const similarity_job_options& o, const char* who) {
  if (o.host) return -1;
  int nd = 0;
  try {
    nd = device_count();
  } catch (const cuda_error&) {
    nd = 0;
  }
  if (nd == 0) return -1;
  const int d = o.device >= 0 ? o.device : c.local_rank() % nd;
  ::spillway::detail::check_device_ordinal(d, who);
  return d;
}

/// Plans this rank's fused job on `device` (its layout as in one process: fit_fused_layout); false
/// where the fused job does not take these rows there.
template <class T>
bool plan_fused_rank(const communicator& c, const similarity::matrix_view<const T>& a,
                     const pairwise::topk_options& k, const similarity_job_options& o, int device,
                     fused_rank_job<T>& job, memory_budget& budget) {
  namespace sdt = similarity::detail;
  constexpr const char* who = "dist::similarity_topk";
  if (device < 0) return false;
  similarity::similarity_options opt = o.local;
  opt.devices = {device};
  opt.report = nullptr;
  opt.trace = nullptr;
  opt.progress = nullptr;
  if (sdt::fused_topk_devices(a, opt, -1).empty()) return false;
  budget = memory_budget::or_default(o.local.budget, std::vector<int>{device});
  job = sdt::make_job(a, static_cast<const similarity::matrix_view<const T>*>(nullptr), opt,
                      sdt::fused_topk_sink<T>{}, who, -1, false);
  job.opt.devices = {device};
  job.opt.budget = budget;
  if (!sdt::fit_fused_layout(job, k, opt.max_panel_rows, opt.check_finite, who, 1, budget)) return false;
  job.sink.across_processes(static_cast<std::size_t>(c.rank()), static_cast<std::size_t>(c.size()));
  job.plan = pairwise::make_pair_plan(pairwise::detail::plan_request_of(job, budget), who);
  job.plan.hold_strips_for(1, true);
  if (job.plan.panel_rows != job.sink.layout().P || !job.plan.resident) {
    throw logic_error(std::string(who) + ": the plan's strips of " + std::to_string(job.plan.panel_rows) +
                      " rows do not match the fused layout's " + std::to_string(job.sink.layout().P));
  }
  return true;
}

/// The bars of every seed block from the rank that seeded it (block b: rank b mod ranks), from
/// each rank's bars of all rows (`mine`: its own blocks' set). Collective.
inline std::vector<similarity::detail::topk_bar> exchange_bars(
    const communicator& c, const similarity::detail::fused_topk_layout& L, std::int64_t n,
    const std::vector<similarity::detail::topk_bar>& mine) {
  using bar = similarity::detail::topk_bar;
  const int R = c.size();
  const auto blocks_of = [&](int q, auto&& f) {
    for (std::int64_t b = q; b < L.blocks; b += R) f(b * L.S, similarity::detail::fused_block_end(L, n, b));
  };
  if (static_cast<double>(n) * sizeof(bar) >= static_cast<double>(std::numeric_limits<int>::max())) {
    throw logic_error("dist::similarity_topk: " + std::to_string(n) +
                      " rows' bars exceed one MPI message (2^31 bytes)");
  }
  std::vector<bar> packed;
  blocks_of(c.rank(), [&](std::int64_t b0, std::int64_t b1) {
    packed.insert(packed.end(), mine.begin() + b0, mine.begin() + b1);
  });
  std::vector<int> counts(static_cast<std::size_t>(R), 0), displs(static_cast<std::size_t>(R), 0);
  for (int q = 0; q < R; ++q) {
    std::int64_t m = 0;
    blocks_of(q, [&](std::int64_t b0, std::int64_t b1) { m += b1 - b0; });
    counts[static_cast<std::size_t>(q)] = static_cast<int>(m * static_cast<std::int64_t>(sizeof(bar)));
    if (q > 0)
      displs[static_cast<std::size_t>(q)] =
          displs[static_cast<std::size_t>(q) - 1] + counts[static_cast<std::size_t>(q) - 1];
  }
  std::vector<bar> got(static_cast<std::size_t>(n));
  SPILLWAY_MPI_TRY(MPI_Allgatherv(packed.data(), static_cast<int>(packed.size() * sizeof(bar)), MPI_BYTE,
                                  got.data(), counts.data(), displs.data(), MPI_BYTE, c.get()));
  // Unseeded rows (none: the blocks cover every row) keep this rank's own value.
  std::vector<bar> all = mine;
  for (int q = 0; q < R; ++q) {
    std::size_t at = static_cast<std::size_t>(displs[static_cast<std::size_t>(q)]) / sizeof(bar);
    blocks_of(q, [&](std::int64_t b0, std::int64_t b1) {
      std::copy(got.begin() + static_cast<std::ptrdiff_t>(at),
                got.begin() + static_cast<std::ptrdiff_t>(at + static_cast<std::size_t>(b1 - b0)),
                all.begin() + b0);
      at += static_cast<std::size_t>(b1 - b0);
    });
  }
  return all;
}

/// The owners' rows (equal contiguous blocks) and the strips dealt cyclic (strip s to rank s mod
/// ranks: the strips' work falls with s, so a cyclic deal evens the shares). A rank's lists hold
/// rows from its first strip's first row on (its first seed block starts later), which is what
/// lists_meet assumes.
inline gram_split fused_split(const communicator& c, std::int64_t n, std::int64_t P, std::size_t row_bytes) {
  const auto R = static_cast<std::size_t>(c.size());
  const std::int64_t strips = (n + P - 1) / P;
  std::vector<std::size_t> dealer(static_cast<std::size_t>(strips));
  for (std::size_t t = 0; t < dealer.size(); ++t) dealer[t] = t % R;
  std::vector<std::int64_t> bounds(R + 1);
  for (std::size_t q = 0; q <= R; ++q)
    bounds[q] = n * static_cast<std::int64_t>(q) / static_cast<std::int64_t>(R);
  return split_from(n, P, dealer, R, bounds, row_bytes, strip_deal::cyclic);
}

/// Where the fused job cannot run on every rank: each runs the one-process job whole (on its GPU;
/// the host implementation where it has none, or o.host) and keeps its rows. Collective.
template <class T>
topk_block<float> similarity_topk_whole_on_each(const communicator& c,
                                                const similarity::matrix_view<const T>& a,
                                                const pairwise::topk_options& k,
                                                const similarity_job_options& o, int device,
                                                gram_report& rep) {
  const std::int64_t n = a.rows;
  rep.split = fused_split(c, n, std::max<std::int64_t>(1, n), 1);
  rep.on_gpu = device >= 0;
  rep.device = device;
  const auto t0 = std::chrono::steady_clock::now();
  pairwise::topk_result<float> all = agree(c, "computing the whole job", [&] {
    if (device < 0) {
      similarity::detail::check_host_finite(a, static_cast<const similarity::matrix_view<const T>*>(nullptr),
                                            o.local, "dist::similarity_topk");
      return similarity::host_similarity_topk(a, k, o.local.metric, o.local.cosine_zero);
    }
    similarity::similarity_options opt = o.local;
    opt.devices = {device};
    opt.report = nullptr;
    opt.trace = nullptr;
    opt.progress = nullptr;
    return similarity::similarity_topk(a, k, opt);
  });
  rep.local.compute_seconds = seconds_since(t0);
  keep_topk_rows(all, rep.split.first_row(c.rank()), rep.split.last_row(c.rank()));
  return topk_block<float>{rep.split.first_row(c.rank()), std::move(all)};
}

/// The fused job's setup on this rank once planned: its seeds, every other row from the host, the
/// bars of the other ranks' seeds, the refusal of a non-finite row (on every rank alike). Collective.
template <class T>
void start_fused_rank(const communicator& c, fused_rank_job<T>& job, const char* who) {
  agree(c, "seeding its blocks on its GPU", [&] {
    pairwise::detail::setup_devices(job, job.opt.devices);  // this rank's seed blocks
    job.sink.take_rows(job);                                // the others' rows, from the host
  });
  const std::vector<similarity::detail::topk_bar> own =
      agree(c, "reading its seeds' bars", [&] { return job.sink.bars_to_host(job); });
  const std::vector<similarity::detail::topk_bar> bars =
      exchange_bars(c, job.sink.layout(), job.prod.rows(false), own);
  agree(c, "setting the other ranks' bars", [&] { job.sink.set_bars(job, bars); });
  // Each rank scanned the rows of the blocks it seeded: the first non-finite row of all.
  const std::int64_t bad = agree(c, "scanning its rows", [&] { return job.sink.first_bad_row(job); });
  std::int64_t mine = bad < 0 ? std::numeric_limits<std::int64_t>::max() : bad, first = 0;
  SPILLWAY_MPI_TRY(MPI_Allreduce(&mine, &first, 1, MPI_INT64_T, MPI_MIN, c.get()));
  if (first != std::numeric_limits<std::int64_t>::max())
    similarity::detail::refuse_nonfinite(first, who, "A");
}

/// This rank's strips (strip s: task s, the fused job's forward order) under o.run. Collective.
template <class T>
void run_fused_rank(const communicator& c, fused_rank_job<T>& job, const memory_budget& budget,
                    const similarity_job_options& o, gram_report& rep,
                    std::chrono::steady_clock::time_point t_start) {
  rep.local.setup_seconds = seconds_since(t_start);
  const auto& mine = rep.split.plan.parts[static_cast<std::size_t>(c.rank())].tasks;
  rep.run = run_pair_tasks(c, job, std::vector<std::size_t>(mine.begin(), mine.end()),
                           static_cast<std::size_t>(rep.split.strips), budget, o.run);
  note_run(c, rep);
}

}  // namespace detail

/// Per-row top-k of A·Aᵀ (the similarity of `o.local.metric`; k ≤ 128, the diagonal excluded unless
/// include_diagonal) across the ranks of `c`, one GPU per rank: every rank passes the same rows
/// (host memory) and gets its own rows' final lists (rank r: rows [n·r/R, n·(r+1)/R)). Collective;
/// a failure on any rank throws the same rank_error on every rank.
template <class T>
topk_block<float> similarity_topk(const communicator& c, similarity::matrix_view<T> a_,
                                  const pairwise::topk_options& k, const similarity_job_options& o = {},
                                  gram_report* report = nullptr) {
  namespace sdt = similarity::detail;
  constexpr const char* who = "dist::similarity_topk";
  using U = std::remove_cv_t<T>;
  const auto t_start = std::chrono::steady_clock::now();
  const sdt::const_rows<T> a = a_;
  agree(c, "checking its rows", [&] {
    sdt::check_rows(a, who, "a");
    pairwise::detail::check_topk(k, who);
    if (sdt::device_of(a.data) >= 0) {
      throw logic_error(std::string(who) +
                        ": the rows are in device memory; pass them in host memory on every rank "
                        "(each rank's GPU takes them from its host)");
    }
  });
  detail::check_same_on_ranks(c, a.rows, "the number of rows", who);
  detail::check_same_on_ranks(c, a.cols, "the number of columns", who);
  detail::check_same_on_ranks(c, k.k, "k", who);
  gram_report rep;
  if (a.rows == 0) return topk_block<float>{0, pairwise::detail::empty_topk<float>(0, k.k)};
  const sdt::rows_lock lock(a, static_cast<const sdt::const_rows<T>*>(nullptr), o.local);
  detail::fused_rank_job<U> job;
  memory_budget budget{1};
  int device = -1;
  const bool here = agree(c, "planning its GPU's share", [&] {
    device = detail::rank_device(c, o, who);
    return detail::plan_fused_rank(c, a, k, o, device, job, budget);
  });
  topk_block<float> b;
  if (!detail::on_every_rank(c, here)) {
    b = detail::similarity_topk_whole_on_each(c, a, k, o, device, rep);
  } else {
    const std::int64_t n = a.rows, P = job.plan.panel_rows;
    detail::check_same_on_ranks(c, P, "the strip height (similarity_options::max_panel_rows, the budgets)",
                                who);
    rep.split = detail::fused_split(c, n, P, job.prod.row_bytes());
    rep.on_gpu = true;
    rep.device = device;
    detail::start_fused_rank(c, job, who);
    detail::ipc_lists ipc;
    if (detail::device_exchange_possible(c, rep.split, o.device_exchange))
      detail::open_ipc_lists(c, rep.split, device, n, k.k, sizeof(pairwise::detail::topk_entry<float>), ipc);
    rep.lists_on_device = ipc.on;
    // The result's host side, made on another thread while the strips run: this rank's rows only
    // where the lists meet on the GPUs, else the n rows the collect copies down.
    std::future<pairwise::detail::topk_host_side<float>> host;
    if (ipc.on)
      host = pairwise::detail::start_topk_host<float>(rep.split.rows_of(c.rank()), k.k);
    else
      job.sink.start_host(job);
    detail::run_fused_rank(c, job, budget, o, rep, t_start);
    b.first_row = rep.split.first_row(c.rank());
    if (rep.run.cancelled) {
      b.lists = pairwise::detail::empty_topk<float>(0, k.k);
    } else if (ipc.on) {
      auto& D = job.sink.device_state(0);
      b.lists = detail::ipc_lists_to_owners<float>(
          c, rep.split, device, D.cs.view(), n, k.k, job.prod.larger(),
          [&D] {
            D.cs.view().synchronize();
            return static_cast<const pairwise::detail::topk_entry<float>*>(D.state.data());
          },
          [&host] { return host.get(); }, ipc, rep.local);
    } else {
      const auto t0 = std::chrono::steady_clock::now();
      pairwise::topk_result<float> all =
          agree(c, "collecting its top-k lists", [&] { return job.sink.collect(job); });
      rep.local.collect_seconds = detail::seconds_since(t0);
      rep.local.collect_bytes =
          static_cast<double>(all.values.size()) * static_cast<double>(sizeof(float) + 8);
      b.lists = detail::lists_to_owners(c, rep.split, std::move(all), 0, job.prod.larger(),
                                        o.shared_memory_exchange, rep.local);
    }
  }
  detail::finish_report(c, rep, t_start);
  if (report != nullptr) *report = std::move(rep);
  return b;
}

namespace detail {

/// This rank's share of a threshold job on its GPU: the pair job with the threshold sink, planned
/// with the same strip height on every rank (the smallest the budgets give), run over the strips of
/// the rows this rank owns (contiguous, split by pairs). Collective.
template <class T>
coo_block<float> similarity_threshold_on_gpu(const communicator& c, const similarity::matrix_view<const T>& a,
                                             const pairwise::threshold_options& t,
                                             const similarity_job_options& o, int device, gram_report& rep,
                                             std::chrono::steady_clock::time_point t_start,
                                             std::chrono::steady_clock::time_point& t_collect) {
  namespace sdt = similarity::detail;
  namespace pd = pairwise::detail;
  constexpr const char* who = "dist::similarity_threshold";
  using job_t = sdt::similarity_job<T, pd::threshold_sink<float>>;
  job_t job;
  memory_budget budget{1};
  const auto plan = [&](std::int64_t max_rows) {
    job.opt.max_panel_rows = max_rows;
    job.plan = pairwise::make_pair_plan(pd::plan_request_of(job, budget), who);
    job.plan.hold_strips_for(1, true);
  };
  std::int64_t p = agree(c, "planning its GPU's share", [&] {
    similarity::similarity_options opt = o.local;
    opt.devices = {device};
    opt.report = nullptr;
    opt.trace = nullptr;
    opt.progress = nullptr;
    budget = memory_budget::or_default(o.local.budget, std::vector<int>{device});
    job =
        sdt::make_job(a, static_cast<const similarity::matrix_view<const T>*>(nullptr), opt,
                      pd::threshold_sink<float>(t), who, -1);  // refuses a non-finite row (every rank alike)
    job.opt.devices = {device};
    job.opt.budget = budget;
    plan(o.local.max_panel_rows);
    return job.plan.panel_rows;
  });
  std::int64_t pmin = 0;
  SPILLWAY_MPI_TRY(MPI_Allreduce(&p, &pmin, 1, MPI_INT64_T, MPI_MIN, c.get()));
  agree(c, "setting up its GPU", [&] {
    if (pmin != p) {
      plan(pmin);  // a smaller strip fits any budget a larger one fits
      if (job.plan.panel_rows != pmin) {
        throw logic_error(std::string(who) + ": this rank's budget plans strips of " +
                          std::to_string(job.plan.panel_rows) + " rows, not the common " +
                          std::to_string(pmin));
      }
    }
    pd::setup_devices(job, job.opt.devices);
    job.sink.start(job);
  });
  rep.split = make_gram_split(a.rows, pmin, static_cast<std::size_t>(c.size()), job.prod.row_bytes());
  rep.on_gpu = true;
  rep.device = device;
  const auto& part = rep.split.plan.parts[static_cast<std::size_t>(c.rank())];
  std::vector<std::size_t> mine;  // the scheduler's tasks whose strips are this rank's
  for (std::size_t q = 0; q < static_cast<std::size_t>(job.plan.strips); ++q) {
    const auto st = static_cast<std::size_t>(job.plan.strip_of_task(q, true));
    if (st >= part.first && st < part.last) mine.push_back(q);
  }
  rep.local.setup_seconds = seconds_since(t_start);
  rep.run = run_pair_tasks(c, job, mine, static_cast<std::size_t>(job.plan.strips), budget, o.run);
  note_run(c, rep);
  coo_block<float> b;
  t_collect = std::chrono::steady_clock::now();
  if (!rep.run.cancelled) b.entries = job.sink.collect_strips(job, part.first, part.last);
  return b;
}

}  // namespace detail

/// Pairs (i, j), i < j (i = j too with include_diagonal), of A·Aᵀ passing a threshold (≥ for
/// similarities, ≤ for Euclidean distance) across the ranks of `c`, one GPU per rank: every rank
/// passes the same rows (host memory); each computes the strips of the rows it owns (contiguous
/// blocks, split by pairs) through the one-process job's threshold sink (compacted on the device)
/// and gets its rows' entries, sorted by row then column, with their place in the one-process COO
/// (write_coo_npy writes the three .npy through MPI-IO; gather_coo brings them to rank 0). Where
/// some rank has no GPU (or o.host), every rank runs the host implementation whole and keeps its
/// rows. both_halves is not distributed (a logic_error on every rank). Collective.
template <class T>
coo_block<float> similarity_threshold(const communicator& c, similarity::matrix_view<T> a_,
                                      const pairwise::threshold_options& t,
                                      const similarity_job_options& o = {}, gram_report* report = nullptr) {
  namespace sdt = similarity::detail;
  using U = std::remove_cv_t<T>;
  constexpr const char* who = "dist::similarity_threshold";
  const auto t_start = std::chrono::steady_clock::now();
  const sdt::const_rows<T> a = a_;
  agree(c, "checking its rows", [&] {
    sdt::check_rows(a, who, "a");
    if (t.both_halves) {
      throw logic_error(std::string(who) +
                        ": both_halves is not distributed yet (a row's lower half is computed by "
                        "other ranks); mirror the upper-triangle COO instead");
    }
    if (sdt::device_of(a.data) >= 0) {
      throw logic_error(std::string(who) +
                        ": the rows are in device memory; pass them in host memory on every rank");
    }
  });
  detail::check_same_on_ranks(c, a.rows, "the number of rows", who);
  detail::check_same_on_ranks(c, a.cols, "the number of columns", who);
  gram_report rep;
  coo_block<float> b;
  if (a.rows == 0) {
    detail::place_coo_and_finish(c, b, rep, std::chrono::steady_clock::now(), t_start, report);
    return b;
  }
  const sdt::rows_lock lock(a, static_cast<const sdt::const_rows<T>*>(nullptr), o.local);
  const int device = agree(c, "finding its GPU", [&] { return detail::rank_device(c, o, who); });
  auto t_collect = std::chrono::steady_clock::now();  // (the host form has no collect)
  if (detail::on_every_rank(c, device >= 0)) {
    b = detail::similarity_threshold_on_gpu<U>(c, a, t, o, device, rep, t_start, t_collect);
  } else {
    // The host implementation whole on every rank; each keeps its own rows' entries.
    rep.split = make_gram_split(a.rows, std::max<std::int64_t>(1, a.rows / c.size()),
                                static_cast<std::size_t>(c.size()));
    const std::int64_t r0 = rep.split.first_row(c.rank()), r1 = rep.split.last_row(c.rank());
    const auto t0 = std::chrono::steady_clock::now();
    pairwise::coo_result<float> all = agree(c, "computing the whole job on the host", [&] {
      sdt::check_host_finite(a, static_cast<const sdt::const_rows<T>*>(nullptr), o.local, who);
      return similarity::host_similarity_threshold(a, t, o.local.metric, o.local.cosine_zero);
    });
    rep.local.compute_seconds = detail::seconds_since(t0);
    for (std::size_t e = 0; e < all.size(); ++e) {
      if (all.row[e] < r0 || all.row[e] >= r1) continue;
      b.entries.row.push_back(all.row[e]);
      b.entries.col.push_back(all.col[e]);
      b.entries.value.push_back(all.value[e]);
    }
    t_collect = std::chrono::steady_clock::now();
  }
  detail::place_coo_and_finish(c, b, rep, t_collect, t_start, report);
  return b;
}

}  // namespace spillway::dist
