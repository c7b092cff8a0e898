// spillway/dist/gram.cuh — the Gram product A·Aᵀ across MPI ranks, one GPU per rank: each rank
// runs its strips of the upper triangle (the split of dist/host_gram.hpp) through the pair job of
// the one-process out-of-core Gram (the same b1 tile kernels, planner and device sinks) on its
// own GPU, then the results meet as in the host form: the triangle rows into one .npy by MPI-IO,
// the top-k lists merged at the rows' owners, the threshold COO in rank order. The strips are
// split by each share's predicted seconds on its GPU (gram_job_options::split, the model of
// dist/gram_split.hpp): each rank computes its own rows' strips, or for top-k the strips are dealt
// across the matrix (cyclic, snake, greedy) where the model predicts that faster, the rows still
// owned in contiguous blocks. Every job reports where each rank's time went (gram_report::ranks). Where some rank
// has no GPU (or gram_job_options::host is set) every rank runs the host implementation
// instead, so the strips are cut alike everywhere; the results are the same either way.
//
//   spillway::dist::environment env(argc, argv);
//   spillway::dist::communicator comm;
//   auto a = spillway::dist::read_bits_npy(comm, "A.npy");
//   auto nn = spillway::dist::gram_topk<std::int32_t>(comm, a, {32});
//   spillway::dist::write_topk_npy(comm, "nn.npy", nn, a.rows());
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/memory_budget.hpp>
#include <spillway/dist/agree.hpp>
#include <spillway/dist/communicator.hpp>
#include <spillway/dist/device_exchange.cuh>
#include <spillway/dist/gram_split.hpp>
#include <spillway/dist/host_gram.hpp>
#include <spillway/dist/pair_tasks.cuh>
#include <spillway/dist/run_tasks.hpp>
#include <spillway/gram/out_of_core.cuh>
#include <spillway/pairwise/pair_job.cuh>
#include <spillway/pairwise/plan.hpp>

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <future>
#include <string>
#include <vector>

namespace spillway::dist {

namespace detail {

/// True when every rank has a GPU and the options allow it. Collective.
inline bool all_ranks_on_gpu(const communicator& c, const gram_job_options& o) {
  int mine = 0;
  if (!o.host) {
    try {
      mine = device_count() > 0 ? 1 : 0;
    } catch (const cuda_error&) {
      mine = 0;
    }
  }
  int all = 0;
  SPILLWAY_MPI_TRY(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, c.get()));
  return all != 0;
}

/// The one-process Gram's bit producer: this rank runs its subset of the strips through the
/// scheduler itself, with the pair job's score-strip sinks, which are exact for any subset.
using rank_bit_producer = gram::detail::bit_producer;

/// The pair job of the one-process Gram for A·Aᵀ on this rank's GPU, planned with the same strip
/// height on every rank (the smallest the ranks' budgets give). Collective.
template <class V, class Sink>
struct rank_gram_job {
  pairwise::detail::pair_job<V, rank_bit_producer, Sink> job;
  int device = 0;
  memory_budget budget{1};
  gram_split split;
  std::vector<std::size_t> mine;  // this rank's tasks (task t = strip strips − 1 − t)
};

/// Plans this rank's share of a job (collective) and fills the report's device and split. `kind`
/// is the sink as the split's model knows it (`k`: top-k's list length).
template <class V, class Sink>
void plan_rank_job(const communicator& c, const gram::bit_matrix_view& a, const gram_job_options& o,
                   gram_sink kind, int k, Sink sink, rank_gram_job<V, Sink>& rj, gram_report& rep) {
  auto& job = rj.job;
  job.prod.a = a;
  job.prod.symmetric = true;
  job.prod.m = o.epilogue;
  job.prod.sc = gram::detail::scorer{o.epilogue, o.scores.jaccard_empty, o.scores.cosine_zero};
  job.prod.path = o.path;
  job.symmetric = true;
  job.sink = std::move(sink);
  job.who = "dist gram";
  // The job's plan under this rank's budget, strips of at most `max_rows` rows (0: automatic).
  const auto plan = [&](std::int64_t max_rows) {
    pairwise::pair_plan_request r;
    r.rows_a = r.rows_b = a.rows;
    r.row_bytes = job.prod.row_bytes();
    r.symmetric = true;
    r.sink = job.sink.footprint();
    r.out_bytes = sizeof(V);
    r.budget_bytes = rj.budget.bytes();
    r.slots = o.slots_per_device;
    r.max_panel_rows = max_rows;
    r.aux_bytes = sizeof(std::int32_t);
    job.plan = pairwise::make_pair_plan(r, "dist gram");
  };
  std::int64_t p = 0;
  agree(c, "planning its GPU's share", [&] {
    const int nd = device_count();
    rj.device = o.device >= 0 ? o.device : c.local_rank() % nd;
    ::spillway::detail::check_device_ordinal(rj.device, "dist gram");
    rj.budget = memory_budget::or_default(o.budget, std::vector<int>{rj.device});
    plan(o.strip_rows);
    p = job.plan.panel_rows;
  });
  std::int64_t pmin = 0;
  SPILLWAY_MPI_TRY(MPI_Allreduce(&p, &pmin, 1, MPI_INT64_T, MPI_MIN, c.get()));
  agree(c, "setting up its GPU", [&] {
    if (pmin != p) {
      // A smaller strip fits any budget a larger one fits: plan again with the common height.
      plan(pmin);
      if (job.plan.panel_rows != pmin) {
        throw logic_error("dist gram: this rank's budget plans strips of " +
                          std::to_string(job.plan.panel_rows) + " rows, not the common " +
                          std::to_string(pmin));
      }
    }
    job.opt.devices = {rj.device};
    job.opt.slots_per_device = o.slots_per_device;
    pairwise::detail::setup_devices(job, job.opt.devices);
    job.sink.start(job);
  });
  gram_job_shape js;
  js.n = a.rows;
  js.cols = a.cols;
  js.strip_rows = pmin;
  js.row_bytes = job.prod.row_bytes();
  js.out_bytes = sizeof(V);
  js.sink = kind;
  js.slots = job.plan.slots;
  js.resident = job.plan.resident;
  js.k = std::max(k, 1);
  // Rank 0's model splits for every rank (a model that differs between ranks cannot split them
  // differently): which rank computes each strip, the owners' bounds, the deal; each rank then
  // predicts the shares with its own.
  const auto parts = static_cast<std::size_t>(c.size());
  const auto S = static_cast<std::size_t>((a.rows + pmin - 1) / pmin);
  std::vector<std::uint64_t> dealt(S + parts + 2, 0);  // dealer[S], bounds[parts + 1], deal
  agree(c, "splitting the strips", [&] {
    if (c.rank() != 0) return;
    const bool topk = js.sink == gram_sink::topk && parts > 1;
    gram_split s;
    switch (o.split) {
      case gram_split_policy::pairs:
        s = make_gram_split(a.rows, pmin, parts, js.row_bytes);
        break;
      case gram_split_policy::model:
        s = make_gram_split_timed(js, o.model, parts);
        break;
      case gram_split_policy::cyclic:
        s = topk ? make_gram_split_dealt(js, o.model, parts, strip_deal::cyclic) : make_gram_split_timed(js, o.model, parts);
        break;
      case gram_split_policy::snake:
        s = topk ? make_gram_split_dealt(js, o.model, parts, strip_deal::snake) : make_gram_split_timed(js, o.model, parts);
        break;
      case gram_split_policy::greedy:
        s = topk ? make_gram_split_dealt(js, o.model, parts, strip_deal::greedy) : make_gram_split_timed(js, o.model, parts);
        break;
      case gram_split_policy::automatic:
        s = make_gram_split_best(js, o.model, parts);
        break;
    }
    for (std::size_t t = 0; t < S; ++t) dealt[t] = s.plan.owner[t];
    for (std::size_t q = 0; q <= parts; ++q) dealt[S + q] = static_cast<std::uint64_t>(s.bounds[q]);
    dealt[S + parts + 1] = static_cast<std::uint64_t>(s.deal);
  });
  SPILLWAY_MPI_TRY(MPI_Bcast(dealt.data(), static_cast<int>(dealt.size()), MPI_UINT64_T, 0, c.get()));
  rj.split = agree(c, "predicting its share", [&] {
    return gram_split_from_deal(js, o.model, std::vector<std::size_t>(dealt.begin(), dealt.begin() + S),
                                std::vector<std::int64_t>(dealt.begin() + S, dealt.begin() + S + parts + 1),
                                static_cast<strip_deal>(dealt[S + parts + 1]));
  });
  const auto& part = rj.split.plan.parts[static_cast<std::size_t>(c.rank())];
  // The scheduler's task t is strip strips − 1 − t: the last (narrowest) strips first, as in one
  // process, so the resident column panels are uploaded from the end as the strips need them.
  for (auto it = part.tasks.rbegin(); it != part.tasks.rend(); ++it) {
    rj.mine.push_back(static_cast<std::size_t>(rj.split.strips - 1) - *it);
  }
  rep.on_gpu = true;
  rep.device = rj.device;
  rep.split = rj.split;
}

/// A GPU job's run, once its setup is done (run_host_strips' counterpart): the setup's seconds
/// since `t_start`, this rank's strips (run_tasks under o.run; collective), and the run noted in
/// the report (note_run).
template <class V, class Sink>
void run_rank_job(const communicator& c, rank_gram_job<V, Sink>& rj, const gram_job_options& o,
                  gram_report& rep, std::chrono::steady_clock::time_point t_start) {
  auto& job = rj.job;
  rep.local.setup_seconds = seconds_since(t_start);
  rep.run = run_pair_tasks(c, job, rj.mine, static_cast<std::size_t>(rj.split.strips), rj.budget, o.run);
  note_run(c, rep);
}

}  // namespace detail

/// Per-row top-k of A·Aᵀ across the ranks of `c`, one GPU per rank (host implementation where a
/// rank has none): every rank passes the whole A and gets the final lists of the rows it owns,
/// equal to the one-process gram_topk / host_gram_topk. Collective.
///
/// Each rank's GPU merges its lists on the device (the one-process job's collect); then only the
/// lists of rows other ranks own are sent, and a rank merges its own rows' lists with those that
/// arrived from the ranks before it. With one rank (or one rank with rows) nothing is exchanged:
/// the result is the device's merged lists as they come.
template <class V>
topk_block<V> gram_topk(const communicator& c, const gram::bit_matrix_view& a,
                        const pairwise::topk_options& k, const gram_job_options& o = {},
                        gram_report* report = nullptr) {
  const auto t_start = std::chrono::steady_clock::now();
  if (a.rows == 0 || !detail::all_ranks_on_gpu(c, o))
    return host_gram_topk<V>(c, a, k, o, report);  // (rows: the same on every rank)
  gram_report rep;
  detail::check_topk_job<V>(c, a, k, o, "dist::gram_topk");
  pairwise::detail::topk_sink<V> sink;
  sink.topk = k;
  sink.start_host = false;  // this rank's own rows, below
  detail::rank_gram_job<V, pairwise::detail::topk_sink<V>> rj;
  detail::plan_rank_job<V>(c, a, o, gram_sink::topk, k.k, std::move(sink), rj, rep);
  const std::int64_t n = a.rows, r0 = rj.split.first_row(c.rank());
  // Its GPU's lists cover every row (those its strips did not touch empty): n x k.
  const bool computes = rj.split.computes(c.rank());
  const int kk = k.k;
  // Where the ranks share a host, the lists go to their owners GPU to GPU (device_exchange.cuh).
  detail::ipc_lists ipc;
  if (detail::device_exchange_possible(c, rj.split, o.device_exchange)) {
    detail::open_ipc_lists(c, rj.split, rj.device, n, kk, sizeof(pairwise::detail::topk_entry<V>), ipc);
  }
  rep.lists_on_device = ipc.on;
  // The result's host vectors (n x k: 38 MB at 100,000 x 32; this rank's rows only where the lists
  // meet on the GPUs) allocated and filled on another thread while the strips run, as the
  // one-process job does.
  if (computes)
    rj.job.sink.host = pairwise::detail::start_topk_host<V>(ipc.on ? rj.split.rows_of(c.rank()) : n, kk);
  detail::run_rank_job(c, rj, o, rep, t_start);
  topk_block<V> b;
  b.first_row = r0;
  if (rep.run.cancelled) {
    b.lists = pairwise::detail::empty_topk<V>(0, k.k);
  } else if (ipc.on) {
    b.lists = detail::ipc_lists_to_owners(c, rj.split, rj.job, ipc, rep.local);
  } else {
    const auto t0 = std::chrono::steady_clock::now();
    // This rank's lists over every row its strips touched, merged over its slots on the device:
    // rows [0, n) (those its strips did not touch empty), or none where it computes no strip.
    pairwise::topk_result<V> all = agree(c, "collecting its top-k lists", [&] {
      return computes ? rj.job.sink.collect(rj.job) : pairwise::detail::empty_topk<V>(0, kk);
    });
    rep.local.collect_seconds = detail::seconds_since(t0);
    rep.local.collect_bytes = static_cast<double>(all.values.size()) * static_cast<double>(sizeof(V) + 8);
    b.lists = detail::lists_to_owners(c, rj.split, std::move(all), computes ? 0 : n,
                                      gram::is_similarity(o.epilogue), o.shared_memory_exchange, rep.local);
  }
  detail::finish_report(c, rep, t_start);
  if (report != nullptr) *report = std::move(rep);
  return b;
}

/// The upper triangle of A·Aᵀ (upper_packed or condensed) across the ranks, one GPU per rank, into
/// ONE .npy at `path` (what the one-process spillway-gram writes). Collective.
template <class V>
gram_report gram_triangle_npy(const communicator& c, const gram::bit_matrix_view& a, const std::string& path,
                              pairwise::triangle_layout layout = pairwise::triangle_layout::upper_packed,
                              const gram_job_options& o = {}) {
  const auto t_start = std::chrono::steady_clock::now();
  if (a.rows == 0 || !detail::all_ranks_on_gpu(c, o))
    return host_gram_triangle_npy<V>(c, a, path, layout, o);  // (rows: the same on every rank)
  gram_report rep;
  detail::check_triangle_job<V>(c, a, layout, o, "dist::gram_triangle_npy");
  detail::rank_gram_job<V, pairwise::detail::strips_sink<V>> rj;
  detail::plan_rank_job<V>(c, a, o, gram_sink::triangle, 0, pairwise::detail::strips_sink<V>{}, rj, rep);
  const auto tri = detail::make_rank_triangle<V>(c, rj.split, layout);
  // A strip arrives in the slot's pinned staging: rows [I0, I1) x columns [I0, n), row-major.
  // The copy runs on the GPU's worker thread, which enqueues no strip meanwhile: on all cores
  // where it is large (a 2,048-row strip of 100,000 columns is 0.8 GB, and the rank's rows are
  // fresh pages).
  double copy_seconds = 0.0;
  rj.job.sink.on_strip = [&](const pairwise::host_strip<V>& h) {
    const auto tc = std::chrono::steady_clock::now();
    pairwise::detail::strip_to_triangle(
        h.values, h.first_row, h.first_row + h.rows, tri.n, tri.with_diagonal,
        [&tri](std::int64_t i) { return tri.row(i); }, h.rows * h.cols > (1 << 20));
    copy_seconds += detail::seconds_since(tc);
  };
  detail::run_rank_job(c, rj, o, rep, t_start);
  rep.local.host_copy_seconds = copy_seconds;
  detail::write_rows_and_finish(c, path, tri, o, rep, t_start);
  return rep;
}

/// Entries of the upper triangle of A·Aᵀ passing a threshold, across the ranks, one GPU per rank
/// (compacted on the device): this rank's rows' entries and their place in the one-process COO.
/// both_halves is not distributed (logic_error on every rank). Collective.
template <class V>
coo_block<V> gram_threshold(const communicator& c, const gram::bit_matrix_view& a,
                            const pairwise::threshold_options& t, const gram_job_options& o = {},
                            gram_report* report = nullptr) {
  const auto t_start = std::chrono::steady_clock::now();
  if (a.rows == 0 || !detail::all_ranks_on_gpu(c, o))
    return host_gram_threshold<V>(c, a, t, o, report);  // (rows: the same on every rank)
  gram_report rep;
  detail::check_threshold_job<V>(c, a, t, o, "dist::gram_threshold");
  detail::rank_gram_job<V, pairwise::detail::threshold_sink<V>> rj;
  pairwise::detail::threshold_sink<V> sink(t);
  sink.size_ahead = false;  // a rank collects its strips' part (collect_strips), not the whole result
  detail::plan_rank_job<V>(c, a, o, gram_sink::threshold, 0, std::move(sink), rj, rep);
  detail::run_rank_job(c, rj, o, rep, t_start);
  const auto t_collect = std::chrono::steady_clock::now();
  coo_block<V> b;
  const auto& part = rj.split.plan.parts[static_cast<std::size_t>(c.rank())];
  if (!rep.run.cancelled) b.entries = rj.job.sink.collect_strips(rj.job, part.first, part.last);
  detail::place_coo_and_finish(c, b, rep, t_collect, t_start, report);
  return b;
}

}  // namespace spillway::dist
