// spillway::dist on the GPU, one GPU per rank: the distributed Gram through the one-process pair
// job on each rank's GPU against the host oracle (exact), the fused float top-k across ranks
// against the host in double (and the one-process job's k-th places), and the device form of
// dist::run_tasks.
// Run by scripts/gpu-check.sh mpi under mpirun -np 1 and -np 2 (the latter needs two GPUs).
//
// The skip decision is collective (every rank skips, or none does): a rank that skipped while the
// others entered a collective would leave them waiting.
#include <spillway/core/device_buffer.hpp>
#include <spillway/dist.hpp>
#include <spillway/gram.cuh>
#include <spillway/gram/host_gram.hpp>
#include <spillway/io/npy.hpp>
#include <spillway/similarity.cuh>

#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include "dist_support.hpp"
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace sd = spillway::dist;
namespace sg = spillway::gram;
namespace sp = spillway::pairwise;

namespace {

int visible_gpus() {
  try {
    return spillway::device_count();
  } catch (const std::exception&) {
    return 0;
  }
}

bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' && std::string(v) != "0";
}

// Empty when every rank has a GPU of its own; else why not (the same text on every rank), and
// whether that is a failure here (SPILLWAY_REQUIRE_GPU=1 with no GPU; SPILLWAY_REQUIRE_GPUS=N
// asking for as many GPUs as the host has ranks).
std::string gpu_skip_reason(const sd::communicator& c, bool& fail) {
  const int have = visible_gpus();
  int worst[2] = {have == 0 ? 2 : (have < c.local_size() ? 1 : 0), c.local_size()};
  int all[2] = {0, 0};
  MPI_Allreduce(worst, all, 2, MPI_INT, MPI_MAX, c.get());
  int fewest = 0;
  MPI_Allreduce(&have, &fewest, 1, MPI_INT, MPI_MIN, c.get());
  fail = false;
  if (all[0] == 2) {
    fail = env_on("SPILLWAY_REQUIRE_GPU");
    return "needs a CUDA GPU on every rank; a rank has none (" + spillway::no_gpu_reason() + ")";
  }
  if (all[0] == 1) {
    const char* req = std::getenv("SPILLWAY_REQUIRE_GPUS");
    fail = req != nullptr && std::atoi(req) >= all[1];
    return "needs " + std::to_string(all[1]) + " GPUs (one per rank of a host); " + std::to_string(fewest) +
           " visible (run -np 2 on nvidia-h200-x2)";
  }
  return "";
}

#define DIST_GPU_TEST_OR_SKIP(c)                        \
  do {                                                  \
    bool fail_ = false;                                 \
    const std::string why_ = gpu_skip_reason(c, fail_); \
    if (!why_.empty()) {                                \
      if (fail_) FAIL() << "required but: " << why_;    \
      GTEST_SKIP() << why_;                             \
    }                                                   \
  } while (0)

using spillway::dist_test::random_bits;
using spillway::dist_test::seed;
using spillway::dist_test::shared_dir;

}  // namespace

TEST(DistGramGpu, TopkEqualsOneProcess) {
  sd::communicator c;
  DIST_GPU_TEST_OR_SKIP(c);
  // 3001 rows (prime) x 1500 columns, strips of at most 256 rows: 12 strips over the ranks.
  const auto a = random_bits(3001, 1500, 0.3, seed("dist gpu topk"));
  sd::gram_job_options o;
  o.strip_rows = 256;
  o.budget = spillway::memory_budget(std::size_t{64} << 20);
  for (const bool diag : {false, true}) {
    const sp::topk_options k{32, diag};
    sd::gram_report rep;
    const auto b = sd::gram_topk<std::int32_t>(c, a, k, o, &rep);
    EXPECT_TRUE(rep.on_gpu);
    EXPECT_EQ(rep.split.strip_rows, 256);
    const auto ref = sg::host_gram_topk<std::int32_t>(a, k);
    std::int64_t bad = 0;
    for (std::int64_t i = 0; i < b.lists.rows; ++i)
      for (int t = 0; t < k.k; ++t) {
        const std::int64_t g = b.first_row + i;
        if (b.lists.index(i, t) != ref.index(g, t) || b.lists.value(i, t) != ref.value(g, t)) {
          if (bad++ < 5)
            ADD_FAILURE() << "row " << g << " place " << t << ": " << b.lists.index(i, t) << "/"
                          << b.lists.value(i, t) << " vs " << ref.index(g, t) << "/" << ref.value(g, t);
        }
      }
    EXPECT_EQ(bad, 0);
  }
  o.epilogue = sg::metric::jaccard;
  const auto bj = sd::gram_topk<float>(c, a, {16, false}, o);
  const auto rj = sg::host_gram_topk<float>(a, {16, false}, sg::metric::jaccard);
  for (std::int64_t i = 0; i < bj.lists.rows; ++i)
    for (int t = 0; t < 16; ++t) {
      ASSERT_EQ(bj.lists.index(i, t), rj.index(bj.first_row + i, t));
      ASSERT_EQ(bj.lists.value(i, t),
                rj.value(bj.first_row + i, t));  // the same epilogue code: bit-identical
    }
}

TEST(DistGramGpu, OneRankIsTheOneProcessJob) {
  // Each rank alone (MPI_COMM_SELF) on its own GPU: no exchange, no host merge — the device's
  // merged lists as the one-process gram_topk returns them, and the host oracle's.
  sd::communicator c;
  DIST_GPU_TEST_OR_SKIP(c);
  sd::communicator self(MPI_COMM_SELF);
  const int dev = c.local_rank() % visible_gpus();
  const auto a = random_bits(2503, 1100, 0.25, seed("dist gpu one rank"));
  sd::gram_job_options o;
  o.device = dev;
  o.strip_rows = 256;
  o.budget = spillway::memory_budget(std::size_t{64} << 20);
  sg::gram_options go;
  go.devices = {dev};
  go.max_panel_rows = 256;
  go.budget = o.budget;
  for (const int k : {1, 32, 64}) {
    const sp::topk_options ko{k, k == 1};
    sd::gram_report rep;
    const auto b = sd::gram_topk<std::int32_t>(self, a, ko, o, &rep);
    EXPECT_TRUE(rep.on_gpu);
    EXPECT_EQ(b.first_row, 0);
    const auto one = sg::gram_topk<std::int32_t>(a.view(), ko, go);
    const auto ref = sg::host_gram_topk<std::int32_t>(a, ko);
    EXPECT_EQ(b.lists.indices, one.indices) << "k=" << k;
    EXPECT_EQ(b.lists.values, one.values) << "k=" << k;
    EXPECT_EQ(b.lists.indices, ref.indices) << "k=" << k;
    EXPECT_EQ(b.lists.values, ref.values) << "k=" << k;
    EXPECT_EQ(rep.local.sent_bytes, 0.0);
    EXPECT_EQ(rep.local.received_bytes, 0.0);
    EXPECT_EQ(rep.local.collect_bytes, static_cast<double>(a.rows() * k) * (sizeof(std::int32_t) + 8));
    ASSERT_EQ(rep.split.predicted.size(), 1u);  // split by the model (one part: the whole job)
    EXPECT_GT(rep.local.predicted_seconds, 0.0);
    EXPECT_GE(rep.local.total_seconds, rep.local.setup_seconds + rep.local.compute_seconds + rep.local.collect_seconds);
  }
  o.epilogue = sg::metric::cosine;  // a similarity in float: bit for bit
  const auto bf = sd::gram_topk<float>(self, a, {20, false}, o);
  go.epilogue = sg::metric::cosine;
  const auto of = sg::gram_topk<float>(a.view(), {20, false}, go);
  EXPECT_EQ(bf.lists.indices, of.indices);
  EXPECT_EQ(bf.lists.values, of.values);
}

TEST(DistGramGpu, EverySplitGivesTheOneProcessLists) {
  // Contiguous (by the model or by pairs) and dealt (cyclic, snake, greedy: a rank's strips lie
  // across the matrix, its GPU's lists cover every row), only the lists of other ranks' rows are
  // sent, to the owners whose rows a rank's strips touched, and every rank's rows equal the
  // oracle's (its own rows' lists merged with what arrived).
  sd::communicator c;
  DIST_GPU_TEST_OR_SKIP(c);
  const auto a = random_bits(4099, 900, 0.15, seed("dist gpu owned rows"));
  for (const bool diag : {false, true}) {
    const int k = diag ? 7 : 16;
    const auto ref = sg::host_gram_topk<std::int32_t>(a, {k, diag});
    for (const auto policy : {sd::gram_split_policy::automatic, sd::gram_split_policy::model,
                              sd::gram_split_policy::pairs, sd::gram_split_policy::cyclic,
                              sd::gram_split_policy::snake, sd::gram_split_policy::greedy})
    for (const bool on_device : {true, false}) {
      const std::string what = std::string(sd::split_policy_name(policy)) + (diag ? " diag" : "") +
                               (on_device ? " GPU to GPU" : " through the host");
      sd::gram_job_options o;
      o.strip_rows = 128;
      o.split = policy;
      o.device_exchange = on_device;
      o.budget = spillway::memory_budget(std::size_t{64} << 20);
      sd::gram_report rep;
      const auto b = sd::gram_topk<std::int32_t>(c, a, {k, diag}, o, &rep);
      const auto& sp_ = rep.split;
      EXPECT_EQ(sp_.predicted.size(), static_cast<std::size_t>(c.size())) << what;  // every split predicted
      if (c.size() > 1 && (policy == sd::gram_split_policy::cyclic || policy == sd::gram_split_policy::snake ||
                           policy == sd::gram_split_policy::greedy)) {
        EXPECT_NE(sp_.deal, sd::strip_deal::contiguous) << what;
      }
      if (policy == sd::gram_split_policy::model || policy == sd::gram_split_policy::pairs) {
        EXPECT_EQ(sp_.deal, sd::strip_deal::contiguous) << what;
      }
      // GPU to GPU (CUDA IPC) wherever it may run: several ranks on one host, each computing
      // strips and owning rows (two H200s map each other's memory).
      bool every_rank_works = true;
      for (int q = 0; q < c.size(); ++q) every_rank_works = every_rank_works && sp_.computes(q) && sp_.rows_of(q) > 0;
      EXPECT_EQ(rep.lists_on_device, on_device && c.size() > 1 && c.one_host() && every_rank_works) << what;
      EXPECT_EQ(b.first_row, sp_.first_row(c.rank())) << what;
      EXPECT_EQ(b.lists.rows, sp_.rows_of(c.rank())) << what;
      std::int64_t bad = 0;
      for (std::int64_t i = 0; i < b.lists.rows; ++i)
        for (int t = 0; t < k; ++t) {
          const std::int64_t g = b.first_row + i;
          if (b.lists.index(i, t) != ref.index(g, t) || b.lists.value(i, t) != ref.value(g, t)) {
            if (bad++ < 5)
              ADD_FAILURE() << what << ": row " << g << " place " << t << ": " << b.lists.index(i, t) << "/"
                            << b.lists.value(i, t) << " vs " << ref.index(g, t) << "/" << ref.value(g, t);
          }
        }
      EXPECT_EQ(bad, 0) << what;
      const int me = c.rank();
      bool any = false;
      for (int q = 0; q < c.size(); ++q)
        for (int r = 0; r < c.size(); ++r) any = any || sp_.lists_meet(q, r);
      double sent = 0, received = 0;
      const double entry = sizeof(sd::topk_wire<std::int32_t>);  // value + int32 column, as sent
      for (int q = 0; q < c.size() && any; ++q) {
        if (sp_.lists_meet(me, q)) sent += static_cast<double>(sp_.rows_of(q) * k) * entry;
        if (sp_.lists_meet(q, me)) received += static_cast<double>(sp_.rows_of(me) * k) * entry;
      }
      EXPECT_EQ(rep.local.sent_bytes, sent) << what;
      EXPECT_EQ(rep.local.received_bytes, received) << what;
      EXPECT_DOUBLE_EQ(rep.local.sent_bytes, sp_.predicted[static_cast<std::size_t>(me)].sent_bytes) << what;
      std::size_t strips = 0;
      for (const auto& r : rep.run.ranks) strips += r.tasks;
      EXPECT_EQ(strips, static_cast<std::size_t>(sp_.strips)) << what;  // every strip once
      ASSERT_EQ(rep.ranks.size(), static_cast<std::size_t>(c.size()));
    }
  }
  // A similarity in float, dealt: bit for bit.
  sd::gram_job_options o;
  o.strip_rows = 128;
  o.split = sd::gram_split_policy::cyclic;
  o.epilogue = sg::metric::cosine;
  o.budget = spillway::memory_budget(std::size_t{64} << 20);
  const auto bf = sd::gram_topk<float>(c, a, {20, false}, o);
  const auto rf = sg::host_gram_topk<float>(a, {20, false}, sg::metric::cosine);
  std::int64_t bad = 0;
  for (std::int64_t i = 0; i < bf.lists.rows; ++i)
    for (int t = 0; t < 20; ++t)
      bad += bf.lists.index(i, t) != rf.index(bf.first_row + i, t) || bf.lists.value(i, t) != rf.value(bf.first_row + i, t);
  EXPECT_EQ(bad, 0) << "cyclic cosine";
}

TEST(DistGramGpu, TriangleFileEqualsOneProcess) {
  sd::communicator c;
  DIST_GPU_TEST_OR_SKIP(c);
  const shared_dir dir(c);
  const auto a = random_bits(2111, 3000, 0.4, seed("dist gpu triangle"));
  sd::gram_job_options o;
  o.strip_rows = 128;
  for (const auto layout : {sp::triangle_layout::upper_packed, sp::triangle_layout::condensed}) {
    const std::string path = dir + "/tri.npy";
    const auto rep = sd::gram_triangle_npy<std::int32_t>(c, a, path, layout, o);
    EXPECT_TRUE(rep.on_gpu);
    if (c.rank() == 0) {
      std::vector<std::int32_t> ref(static_cast<std::size_t>(sp::layout_size(layout, a.rows())), -1);
      sg::host_gram_dense(a.view(), ref.data(), layout);
      const auto f = spillway::io::read_npy(path);
      ASSERT_EQ(f.header.shape[0], static_cast<std::int64_t>(ref.size()));
      std::size_t bad = 0;
      for (std::size_t q = 0; q < ref.size(); ++q) bad += f.data<std::int32_t>()[q] != ref[q];
      EXPECT_EQ(bad, 0u) << sp::to_string(layout);
    }
  }
}

TEST(DistGramGpu, ThresholdEqualsOneProcess) {
  sd::communicator c;
  DIST_GPU_TEST_OR_SKIP(c);
  const auto a = random_bits(1777, 2000, 0.3, seed("dist gpu threshold"));
  sd::gram_job_options o;
  o.strip_rows = 200;
  const sp::threshold_options t{190.0, false, false};
  const auto b = sd::gram_threshold<std::int32_t>(c, a, t, o);
  const auto all = sd::gather_coo(c, b);
  if (c.rank() == 0) {
    const auto ref = sg::host_gram_threshold<std::int32_t>(a, t);
    EXPECT_GT(ref.size(), 0u);
    EXPECT_EQ(all.row, ref.row);
    EXPECT_EQ(all.col, ref.col);
    EXPECT_EQ(all.value, ref.value);
  }
}

TEST(DistRunTasksGpu, EveryTaskOnceAndAFailureNamedOnEveryRank) {
  sd::communicator c;
  DIST_GPU_TEST_OR_SKIP(c);
  const auto plan =
      sp::split_contiguous(sp::strip_tasks(5000, 100, true), static_cast<std::size_t>(c.size()));
  const std::size_t n = plan.owner.size();
  spillway::task_job_options lo;
  lo.devices = {c.local_rank() % visible_gpus()};
  lo.device_buffer_bytes = {sizeof(std::int64_t)};
  lo.pinned_buffer_bytes = {sizeof(std::int64_t)};
  std::vector<std::int64_t> got(n, -1);
  const auto rep = sd::run_tasks(
      c, plan, lo,
      [&](std::size_t t, spillway::task_slot& slot, spillway::stream_view s) {
        *slot.pinned<std::int64_t>(0) = static_cast<std::int64_t>(t) * 7 + 1;
        SPILLWAY_CUDA_TRY(cudaMemcpyAsync(slot.device<std::int64_t>(0), slot.pinned<std::int64_t>(0), 8,
                                          cudaMemcpyHostToDevice, s.value()));
        SPILLWAY_CUDA_TRY(cudaMemsetAsync(slot.pinned<std::int64_t>(0), 0, 8, s.value()));
        SPILLWAY_CUDA_TRY(cudaMemcpyAsync(slot.pinned<std::int64_t>(0), slot.device<std::int64_t>(0), 8,
                                          cudaMemcpyDeviceToHost, s.value()));
        slot.add_bytes_moved(16);
      },
      [&](std::size_t t, spillway::task_slot& slot) { got[t] = *slot.pinned<std::int64_t>(0); });
  EXPECT_EQ(rep.tasks_completed, n);
  for (std::size_t t = 0; t < n; ++t) {
    const bool mine = plan.owner[t] == static_cast<std::size_t>(c.rank());
    EXPECT_EQ(got[t], mine ? static_cast<std::int64_t>(t) * 7 + 1 : -1) << t;
  }
  EXPECT_EQ(rep.ranks[static_cast<std::size_t>(c.rank())].bytes,
            16 * plan.parts[static_cast<std::size_t>(c.rank())].task_count());
  // A task of the last rank throws inside enqueue: every rank names that rank and the task.
  const std::size_t bad = plan.parts.back().tasks.empty() ? 0 : plan.parts.back().tasks.back();
  try {
    (void)sd::run_tasks(c, plan, lo, [&](std::size_t t, spillway::task_slot&, spillway::stream_view) {
      if (t == bad) throw std::runtime_error("no such panel");
    });
    ADD_FAILURE() << "no exception";
  } catch (const sd::rank_error& e) {
    EXPECT_EQ(e.failed_rank(), static_cast<int>(plan.owner[bad]));
    EXPECT_EQ(e.failed_task(), bad);
    EXPECT_NE(std::string(e.what()).find("no such panel"), std::string::npos) << e.what();
  }
  c.barrier();
}

namespace {

namespace ss = spillway::similarity;

/// The same random normal rows on every rank (same seed), as bf16 or float.
template <class T>
std::vector<T> random_rows(std::int64_t n, std::int64_t d, std::uint64_t s) {
  std::mt19937_64 g(s);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<T> v(static_cast<std::size_t>(n * d));
  for (auto& x : v) {
    if constexpr (std::is_same_v<T, float>)
      x = nd(g);
    else
      x = __float2bfloat16_rn(nd(g));
  }
  return v;
}

/// The fused job's sizes shrunk for a test (many seed blocks, strips and chunks at a few thousand
/// rows), put back at the end of the scope.
struct fused_sizes_scope {
  ss::detail::fused_topk_sizes old;
  explicit fused_sizes_scope(const ss::detail::fused_topk_sizes& z)
      : old(ss::detail::fused_topk_hook().sizes) {
    ss::detail::fused_topk_hook().sizes = z;
  }
  ~fused_sizes_scope() { ss::detail::fused_topk_hook().sizes = old; }
};

/// This rank's rows of a dist result against rows [first_row, ..) of the one-process lists, entry
/// for entry. Returns the mismatches.
std::int64_t mismatches(const sd::topk_block<float>& b, const ss::topk_result<float>& ref,
                        const std::string& what) {
  std::int64_t bad = 0;
  for (std::int64_t i = 0; i < b.lists.rows; ++i)
    for (int t = 0; t < b.lists.k; ++t) {
      const std::int64_t g = b.first_row + i;
      if (b.lists.index(i, t) != ref.index(g, t) || b.lists.value(i, t) != ref.value(g, t)) {
        if (bad++ < 5)
          ADD_FAILURE() << what << ": row " << g << " place " << t << ": " << b.lists.index(i, t) << "/"
                        << b.lists.value(i, t) << " vs " << ref.index(g, t) << "/" << ref.value(g, t);
      }
    }
  return bad;
}

/// This rank's rows of a dist result against the host in double: each listed value within the
/// pair's float-accumulation bound e of its exact score (e = 4(d + 8)·2^-24 on cosine, e·√(|a|²|b|²)
/// for inner products, √(e(|a|² + |b|²)) for distances), each listed column's exact score within
/// 2e of the exact k-th best, no column twice, not the row itself, sorted, ties to the smaller
/// column. (Not entry for entry against the one-process job: a row whose bucket overflowed is
/// recomputed on the CUDA cores, and which rows overflow depends on each worker's bars.) Returns
/// the rows that break the rule.
template <class T>
std::int64_t wrong_rows(const sd::topk_block<float>& b, const ss::matrix_view<const T>& a, int k,
                        ss::similarity_metric m, const std::string& what) {
  const bool larger = ss::is_similarity(m);
  const double e = 4.0 * static_cast<double>(a.cols + 8) * std::ldexp(1.0, -24);
  std::vector<double> norm(static_cast<std::size_t>(a.rows));
  for (std::int64_t j = 0; j < a.rows; ++j)
    norm[static_cast<std::size_t>(j)] =
        ss::host_similarity_score(a, a, j, j, ss::similarity_metric::inner_product);
  const auto eps = [&](std::int64_t i, std::int64_t j) {
    const double ni = norm[static_cast<std::size_t>(i)], nj = norm[static_cast<std::size_t>(j)];
    if (m == ss::similarity_metric::cosine) return e;
    if (m == ss::similarity_metric::inner_product) return e * std::sqrt(ni * nj) + 1e-30;
    return std::sqrt(e * (ni + nj)) + 1e-30;
  };
  std::int64_t bad = 0;
  for (std::int64_t r = 0; r < b.lists.rows; ++r) {
    const std::int64_t i = b.first_row + r;
    std::vector<double> host(static_cast<std::size_t>(a.rows)), others;
    double row_eps = 0.0;
    for (std::int64_t j = 0; j < a.rows; ++j) {
      host[static_cast<std::size_t>(j)] = ss::host_similarity_score(a, a, i, j, m);
      row_eps = std::max(row_eps, eps(i, j));
      if (j != i) others.push_back(host[static_cast<std::size_t>(j)]);
    }
    std::nth_element(others.begin(), others.begin() + (k - 1), others.end(),
                     [&](double x, double y) { return larger ? x > y : x < y; });
    const double kth = others[static_cast<std::size_t>(k - 1)];
    std::string why;
    for (int t = 0; t < k && why.empty(); ++t) {
      const std::int64_t j = b.lists.index(r, t);
      const float v = b.lists.value(r, t);
      if (j < 0 || j >= a.rows || j == i) {
        why = "column " + std::to_string(j);
        continue;
      }
      for (int u = 0; u < t; ++u)
        if (b.lists.index(r, u) == j) why = "column " + std::to_string(j) + " twice";
      const double h = host[static_cast<std::size_t>(j)];
      if (std::fabs(static_cast<double>(v) - h) > eps(i, j))
        why = "column " + std::to_string(j) + ": " + std::to_string(v) + " against " + std::to_string(h);
      else if (larger ? h < kth - 2 * row_eps : h > kth + 2 * row_eps)
        why = "column " + std::to_string(j) + " not in the top " + std::to_string(k);
      else if (t > 0) {
        const float pv = b.lists.value(r, t - 1);
        if (larger ? pv < v : pv > v)
          why = "not sorted at place " + std::to_string(t);
        else if (pv == v && b.lists.index(r, t - 1) > j)
          why = "a tie not to the smaller column at place " + std::to_string(t);
      }
    }
    if (!why.empty() && bad++ < 5) ADD_FAILURE() << what << ": row " << i << ": " << why;
  }
  return bad;
}

}  // namespace

TEST(DistSimilarityGpu, FusedTopkExactOnEachRanksRows) {
  sd::communicator c;
  DIST_GPU_TEST_OR_SKIP(c);
  const int dev = c.local_rank() % visible_gpus();
  // 3001 rows (prime) of 96 bf16 values; strips of 128 rows, seed blocks of 256, chunks of at most
  // 512 columns: 11 seed blocks and 24 strips dealt over the ranks.
  const std::int64_t n = 3001, d = 96;
  const auto rows = random_rows<__nv_bfloat16>(n, d, seed("dist similarity bf16"));
  const auto a = ss::row_major(rows.data(), n, d);
  ss::detail::fused_topk_sizes z;
  z.strip_rows = 128;
  z.seed_rows = 256;
  z.chunk_cols = 512;
  struct variant {
    const char* name;
    ss::similarity_metric m;
    int k;
    std::int32_t cap_a, cap_b;  // tiny buckets overflow: those rows are recomputed
  };
  for (const variant v : {variant{"cosine", ss::similarity_metric::cosine, 16, 0, 0},
                          variant{"euclidean", ss::similarity_metric::euclidean, 7, 2, 1}}) {
    z.row_capacity = v.cap_a;
    z.col_capacity = v.cap_b;
    fused_sizes_scope scope(z);
    ss::similarity_options one;
    one.metric = v.m;
    one.devices = {dev};
    const auto ref = ss::similarity_topk(a, {v.k}, one);
    const int fused_here = ss::detail::fused_topk_hook().last_ran ? 1 : 0;
    int fused_all = 0;
    MPI_Allreduce(&fused_here, &fused_all, 1, MPI_INT, MPI_MIN, c.get());
    if (fused_all == 0) GTEST_SKIP() << "the fused top-k needs sm_90a code for every rank's GPU (Hopper)";
    for (const bool on_device : {true, false}) {
      const std::string what =
          std::string(v.name) + (on_device ? ", lists GPU to GPU" : ", lists through the host");
      sd::similarity_job_options o;
      o.local.metric = v.m;
      o.device_exchange = on_device;
      sd::gram_report rep;
      const auto b = sd::similarity_topk(c, a, {v.k}, o, &rep);
      EXPECT_TRUE(rep.on_gpu) << what;
      EXPECT_EQ(rep.split.strip_rows, 128) << what;
      EXPECT_EQ(rep.split.strips, 24) << what;
      EXPECT_EQ(b.first_row, n * c.rank() / c.size()) << what;
      EXPECT_EQ(b.lists.rows, n * (c.rank() + 1) / c.size() - n * c.rank() / c.size()) << what;
      EXPECT_EQ(rep.run.tasks_completed, 24u) << what;
      // Every rank ran strips (24 dealt cyclic over up to 3 ranks).
      EXPECT_GT(rep.run.ranks[static_cast<std::size_t>(c.rank())].tasks, 0u) << what;
      if (!on_device) EXPECT_FALSE(rep.lists_on_device) << what;
      EXPECT_EQ(wrong_rows(b, a, v.k, v.m, what), 0);
      // The k-th places agree with the one-process job's within the bound (both exact to it).
      std::int64_t apart = 0;
      for (std::int64_t i = 0; i < b.lists.rows; ++i) {
        const double x = b.lists.value(i, v.k - 1), y = ref.value(b.first_row + i, v.k - 1);
        const double tol = v.m == ss::similarity_metric::cosine ? 1e-4 : 1e-4 * std::max(1.0, std::fabs(y));
        if (std::fabs(x - y) > tol && apart++ < 3)
          ADD_FAILURE() << what << ": row " << b.first_row + i << "'s k-th place " << x << " against " << y;
      }
      EXPECT_EQ(apart, 0) << what;
    }
  }
  fused_sizes_scope scope(z);
  // Float rows without TF32: not the fused job's; every rank runs the one-process job whole and
  // keeps its rows (the same lists).
  {
    const auto fr = random_rows<float>(700, 33, seed("dist similarity float"));
    const auto fa = ss::row_major(fr.data(), 700, 33);
    ss::similarity_options one;
    one.devices = {dev};
    const auto ref = ss::similarity_topk(fa, {9}, one);
    const auto b = sd::similarity_topk(c, fa, {9}, sd::similarity_job_options{});
    EXPECT_EQ(b.first_row, 700 * c.rank() / c.size());
    EXPECT_EQ(mismatches(b, ref, "exact float rows"), 0);
  }
  // A NaN in row 1601 (block 6, which rank 6 mod ranks seeds) and an infinity in row 2900: every
  // rank refuses the job naming row 1601, before any strip.
  auto bad = rows;
  bad[static_cast<std::size_t>(1601 * d + 9)] = __float2bfloat16_rn(std::numeric_limits<float>::quiet_NaN());
  bad[static_cast<std::size_t>(2900 * d)] = __float2bfloat16_rn(std::numeric_limits<float>::infinity());
  try {
    (void)sd::similarity_topk(c, ss::row_major(bad.data(), n, d), {8});
    ADD_FAILURE() << "a NaN row was not refused";
  } catch (const spillway::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("1601"), std::string::npos) << e.what();
  }
  // Different shapes on the ranks: refused on every rank.
  if (c.size() > 1) {
    const std::int64_t m = c.rank() == 0 ? n : n - 1;
    EXPECT_THROW((void)sd::similarity_topk(c, ss::row_major(rows.data(), m, d), {8}), spillway::logic_error);
  }
  c.barrier();
}

TEST(DistSimilarityGpu, ThresholdFileEqualsOneProcess) {
  sd::communicator c;
  DIST_GPU_TEST_OR_SKIP(c);
  const int dev = c.local_rank() % visible_gpus();
  const shared_dir dir(c);
  // 2777 rows of 96 bf16 values, cosine ≥ 0.3 (about 3 standard deviations of a random pair),
  // strips of at most 256 rows: 11 strips over the ranks.
  const std::int64_t n = 2777, d = 96;
  const auto rows = random_rows<__nv_bfloat16>(n, d, seed("dist similarity threshold"));
  const auto a = ss::row_major(rows.data(), n, d);
  const sp::threshold_options t{0.3, false, false};
  ss::similarity_options one;
  one.devices = {dev};
  one.max_panel_rows = 256;
  const auto ref = ss::similarity_threshold(a, t, one);
  ASSERT_GT(ref.size(), 100u);
  sd::similarity_job_options o;
  o.local.max_panel_rows = 256;
  sd::gram_report rep;
  const auto b = sd::similarity_threshold(c, a, t, o, &rep);
  EXPECT_TRUE(rep.on_gpu);
  EXPECT_EQ(rep.split.strip_rows, 256);
  EXPECT_EQ(b.total, static_cast<std::int64_t>(ref.size()));
  // This rank's entries are the one-process COO's run [offset, offset + size): the same GEMM tiles
  // score every pair, so the values are bit-identical.
  ASSERT_LE(b.offset + static_cast<std::int64_t>(b.entries.size()), static_cast<std::int64_t>(ref.size()));
  std::int64_t bad = 0;
  for (std::size_t e = 0; e < b.entries.size(); ++e) {
    const auto q = static_cast<std::size_t>(b.offset) + e;
    bad += b.entries.row[e] != ref.row[q] || b.entries.col[e] != ref.col[q] ||
           b.entries.value[e] != ref.value[q];
  }
  EXPECT_EQ(bad, 0);
  for (std::size_t e = 0; e < b.entries.size(); ++e) {
    ASSERT_GE(b.entries.row[e], rep.split.first_row(c.rank()));
    ASSERT_LT(b.entries.row[e], rep.split.last_row(c.rank()));
  }
  // One COO in three .npy through MPI-IO: what the one-process job returns.
  const std::string path = dir + "/thr.npy";
  sd::write_coo_npy(c, path, b);
  if (c.rank() == 0) {
    const auto fv = spillway::io::read_npy(path), fr = spillway::io::read_npy(path + ".row.npy"),
               fc = spillway::io::read_npy(path + ".col.npy");
    ASSERT_EQ(fv.header.shape[0], static_cast<std::int64_t>(ref.size()));
    std::size_t fbad = 0;
    for (std::size_t q = 0; q < ref.size(); ++q) {
      fbad += fv.data<float>()[q] != ref.value[q] || fr.data<std::int64_t>()[q] != ref.row[q] ||
              fc.data<std::int64_t>()[q] != ref.col[q];
    }
    EXPECT_EQ(fbad, 0u);
  }
  // both_halves is not distributed: refused on every rank.
  EXPECT_THROW((void)sd::similarity_threshold(c, a, sp::threshold_options{0.3, true, false}), sd::rank_error);
  c.barrier();
}

// Runs everywhere (no GPU needed): similarity_job_options::host, the host implementation on every
// rank, against the one-process host implementation, exactly (the same code in double).
TEST(DistSimilarityHost, HostOptionEqualsTheHostImplementation) {
  sd::communicator c;
  const std::int64_t n = 600, d = 40;
  const auto rows = random_rows<float>(n, d, seed("dist similarity host"));
  const auto a = ss::row_major(rows.data(), n, d);
  sd::similarity_job_options h;
  h.host = true;
  for (const auto m : {ss::similarity_metric::cosine, ss::similarity_metric::euclidean}) {
    h.local.metric = m;
    const double thr = m == ss::similarity_metric::cosine ? 0.3 : 7.0;
    const sp::threshold_options t{thr, false, false};
    sd::gram_report rep;
    const auto hb = sd::similarity_threshold(c, a, t, h, &rep);
    EXPECT_FALSE(rep.on_gpu);
    const auto all = sd::gather_coo(c, hb);
    const auto hk = sd::similarity_topk(c, a, {8}, h);
    EXPECT_EQ(hk.first_row, n * c.rank() / c.size());
    const auto hl = sd::gather_topk(c, hk, n);
    if (c.rank() == 0) {
      const auto href = ss::host_similarity_threshold(a, t, m);
      EXPECT_GT(href.size(), 50u);
      EXPECT_EQ(all.row, href.row);
      EXPECT_EQ(all.col, href.col);
      EXPECT_EQ(all.value, href.value);
      const auto kref = ss::host_similarity_topk(a, {8}, m);
      EXPECT_EQ(hl.indices, kref.indices);
      EXPECT_EQ(hl.values, kref.values);
    }
  }
  // both_halves is not distributed: refused on every rank.
  EXPECT_THROW((void)sd::similarity_threshold(c, a, sp::threshold_options{0.3, true, false}, h),
               sd::rank_error);
  c.barrier();
}
