// spillway::dist on the host, run by ctest under mpirun -np 2 and -np 3 (oversubscribed): the
// task protocol (progress, failures on every rank, cancel), the input on every rank (a file missing
// on one), the MPI-IO .npy and the distributed Gram against the one-process host Gram, exactly.
//
// Every test is collective: each rank runs it, and an assertion that could fail on one rank only
// comes after the test's last collective (ASSERT_* before that could leave the others waiting).
#include <spillway/dist.hpp>
#include <spillway/gram/host_gram.hpp>
#include <spillway/io/npy.hpp>

#include <gtest/gtest.h>

#include "dist_support.hpp"
#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace sd = spillway::dist;
namespace sg = spillway::gram;
namespace sp = spillway::pairwise;

namespace {

using spillway::dist_test::random_bits;
using spillway::dist_test::seed;
using spillway::dist_test::shared_dir;

std::string python() {
  const char* p = std::getenv("SPILLWAY_PYTHON");
  return p != nullptr ? p : "";
}

// Whether every rank passed `ok` (so that a failure on one rank is seen by all).
bool all_ok(const sd::communicator& c, bool ok) {
  int m = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&m, &all, 1, MPI_INT, MPI_MIN, c.get());
  return all != 0;
}

}  // namespace

// ---- the task protocol ------------------------------------------------------------------------------

TEST(DistRunTasks, EveryTaskRunsOnceAndRankZeroSeesAllProgress) {
  sd::communicator c;
  const auto tasks = sp::strip_tasks(1000, 27, true);  // 38 strips, the first ones dearest
  const auto plan = sp::split_contiguous(tasks, static_cast<std::size_t>(c.size()));
  std::vector<int> ran(tasks.size(), 0);
  std::size_t last_done = 0, calls = 0;
  sd::run_options ro;
  ro.progress_interval = 0;
  ro.progress = [&](const spillway::progress_info& p) {
    EXPECT_EQ(p.tasks_total, tasks.size());
    EXPECT_GE(p.tasks_done, last_done);  // never goes back
    last_done = p.tasks_done;
    ++calls;
    return true;
  };
  const auto rep = sd::run_host_tasks(
      c, plan, [&](std::size_t t) { ++ran[t]; }, ro);
  std::vector<int> sum(tasks.size(), 0);
  MPI_Allreduce(ran.data(), sum.data(), static_cast<int>(ran.size()), MPI_INT, MPI_SUM, c.get());
  for (std::size_t t = 0; t < tasks.size(); ++t) {
    EXPECT_EQ(sum[t], 1) << "task " << t;
    EXPECT_EQ(ran[t], plan.owner[t] == static_cast<std::size_t>(c.rank()) ? 1 : 0);
  }
  EXPECT_EQ(rep.tasks_total, tasks.size());
  EXPECT_EQ(rep.tasks_completed, tasks.size());
  EXPECT_FALSE(rep.cancelled);
  ASSERT_EQ(rep.ranks.size(), static_cast<std::size_t>(c.size()));
  for (int r = 0; r < c.size(); ++r) {
    EXPECT_EQ(rep.ranks[static_cast<std::size_t>(r)].tasks,
              plan.parts[static_cast<std::size_t>(r)].task_count());
    EXPECT_EQ(rep.ranks[static_cast<std::size_t>(r)].planned,
              plan.parts[static_cast<std::size_t>(r)].task_count());
  }
  if (c.rank() == 0) {
    EXPECT_EQ(last_done, tasks.size());  // the final count reached rank 0's callback
    EXPECT_GE(calls, 2u);
  } else {
    EXPECT_EQ(calls, 0u);  // progress runs on rank 0 only
  }
}

TEST(DistRunTasks, ARankThatThrowsIsNamedOnEveryRank) {
  sd::communicator c;
  const auto plan = sp::split_contiguous(sp::strip_tasks(600, 20, true), static_cast<std::size_t>(c.size()));
  // The failing task belongs to the last rank (rank 0 for -np 1).
  const std::size_t bad = plan.parts.back().tasks.empty() ? 0
                                                          : plan.parts.back().tasks.front() +
                                                                (plan.parts.back().task_count() > 1 ? 1 : 0);
  const int owner = static_cast<int>(plan.owner[bad]);
  bool caught = false;
  try {
    (void)sd::run_host_tasks(c, plan, [&](std::size_t t) {
      if (t == bad) throw std::runtime_error("disk on fire in task " + std::to_string(t));
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    });
  } catch (const sd::rank_error& e) {
    caught = true;
    const std::string w = e.what();
    EXPECT_EQ(e.failed_rank(), owner);
    EXPECT_EQ(e.failed_task(), bad);
    EXPECT_EQ(e.here(), c.rank() == owner);
    EXPECT_EQ(e.failed_ranks(), 1);
    EXPECT_NE(w.find("rank " + std::to_string(owner) + " of " + std::to_string(c.size())), std::string::npos)
        << w;
    EXPECT_NE(w.find("task " + std::to_string(bad)), std::string::npos) << w;
    EXPECT_NE(w.find("disk on fire"), std::string::npos) << w;
  }
  EXPECT_TRUE(caught) << "rank " << c.rank() << " did not throw";
  // Nothing is left in flight: the next collectives on the same communicator work.
  EXPECT_TRUE(all_ok(c, true));
  c.barrier();
}

TEST(DistRunTasks, EveryRankFailingReportsOneOfThemOnAll) {
  sd::communicator c;
  const auto plan = sp::split_contiguous(sp::strip_tasks(300, 10, true), static_cast<std::size_t>(c.size()));
  try {
    (void)sd::run_host_tasks(c, plan, [&](std::size_t) {
      throw spillway::logic_error("rank " + std::to_string(c.rank()) + " says no");
    });
    ADD_FAILURE() << "no exception";
  } catch (const sd::rank_error& e) {
    // The first failure stops the other ranks, so a rank may stop before its own task throws:
    // the lowest rank that did fail is named, with its own task and message, the same on all.
    const int f = e.failed_rank();
    int lo = 0, hi = 0;
    MPI_Allreduce(&f, &lo, 1, MPI_INT, MPI_MIN, c.get());
    MPI_Allreduce(&f, &hi, 1, MPI_INT, MPI_MAX, c.get());
    EXPECT_EQ(lo, hi) << "the ranks name different failing ranks";
    ASSERT_GE(f, 0);
    ASSERT_LT(f, c.size());
    EXPECT_EQ(e.failed_task(), plan.parts[static_cast<std::size_t>(f)].tasks.front());
    EXPECT_GE(e.failed_ranks(), 1);
    EXPECT_LE(e.failed_ranks(), c.size());
    EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(f) + " says no"), std::string::npos)
        << e.what();
  }
}

TEST(DistRunTasks, CancelOnRankZeroStopsEveryRank) {
  sd::communicator c;
  const auto plan =
      sp::split_contiguous(sp::strip_tasks(4000, 20, false), static_cast<std::size_t>(c.size()));
  std::atomic<int> ran{0};
  sd::run_options ro;
  ro.progress_interval = 0;
  ro.progress = [](const spillway::progress_info& p) { return p.tasks_done < 3; };
  const auto rep = sd::run_host_tasks(
      c, plan,
      [&](std::size_t) {
        ++ran;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      },
      ro);
  EXPECT_TRUE(rep.cancelled);
  EXPECT_LT(rep.tasks_completed, rep.tasks_total);
  c.barrier();
}

TEST(DistRunTasks, AProgressCallbackThatThrowsOnRankZeroFailsEveryRank) {
  sd::communicator c;
  const auto plan =
      sp::split_contiguous(sp::strip_tasks(2000, 20, false), static_cast<std::size_t>(c.size()));
  sd::run_options ro;
  ro.progress_interval = 0;
  ro.progress = [](const spillway::progress_info& p) -> bool {
    if (p.tasks_done >= 2) throw std::runtime_error("progress bar broke");
    return true;
  };
  try {
    (void)sd::run_host_tasks(
        c, plan, [](std::size_t) { std::this_thread::sleep_for(std::chrono::milliseconds(1)); }, ro);
    ADD_FAILURE() << "no exception";
  } catch (const sd::rank_error& e) {
    EXPECT_EQ(e.failed_rank(), 0);
    EXPECT_NE(std::string(e.what()).find("progress bar broke"), std::string::npos) << e.what();
  }
  c.barrier();
}

TEST(DistRunTasks, APlanForAnotherRankCountIsRefusedOnEveryRank) {
  sd::communicator c;
  const auto plan =
      sp::split_contiguous(sp::strip_tasks(100, 10, true), static_cast<std::size_t>(c.size() + 1));
  EXPECT_THROW((void)sd::run_host_tasks(c, plan, [](std::size_t) {}), sd::rank_error);
}

// ---- the input on every rank -------------------------------------------------------------------------

TEST(DistInput, AFileMissingOnOneRankFailsOnAll) {
  sd::communicator c;
  const shared_dir dir(c);
  const std::string good = dir + "/a.npy";
  if (c.rank() == 0) {
    std::vector<std::uint8_t> b(12 * 70, 1);
    spillway::io::write_npy(good, b, {12, 70});
  }
  c.barrier();
  const int missing_on = c.size() - 1;
  const std::string mine = c.rank() == missing_on ? dir + "/not_here.npy" : good;
  bool caught = false;
  try {
    const auto m = sd::read_bits_npy(c, mine);
    (void)m;
  } catch (const sd::rank_error& e) {
    caught = true;
    EXPECT_EQ(e.failed_rank(), missing_on);
    EXPECT_EQ(e.failed_task(), sd::rank_error::no_task);
    const std::string w = e.what();
    EXPECT_NE(w.find("rank " + std::to_string(missing_on)), std::string::npos) << w;
    EXPECT_NE(w.find("not_here.npy"), std::string::npos) << w;
  }
  EXPECT_TRUE(caught);
  // With the file everywhere, every rank has the same matrix.
  const auto m = sd::read_bits_npy(c, good);
  EXPECT_EQ(m.rows(), 12);
  EXPECT_EQ(m.cols(), 70);
  EXPECT_TRUE(m.get(11, 69));
  // Raw bytes: a file too short on one rank (its shape says more rows than it holds) fails on all.
  const std::string raw = dir + "/a.bin";
  if (c.rank() == 0) {
    std::vector<char> b(12 * 70, 1);
    b[5 * 70 + 3] = 0;
    std::ofstream(raw, std::ios::binary).write(b.data(), static_cast<std::streamsize>(b.size()));
  }
  c.barrier();
  const auto r = sd::read_bits_raw(c, raw, 12, 70);
  EXPECT_FALSE(r.get(5, 3));
  EXPECT_TRUE(r.get(5, 4));
  EXPECT_THROW((void)sd::read_bits_raw(c, raw, c.rank() == missing_on ? 13 : 12, 70), sd::rank_error);
}

TEST(DistInput, BroadcastGivesEveryRankRankZerosMatrix) {
  sd::communicator c;
  sg::bit_matrix m;
  const auto ref = random_bits(77, 1100, 0.4, seed("broadcast"));
  if (c.rank() == 0) m = random_bits(77, 1100, 0.4, seed("broadcast"));
  sd::broadcast_bits(c, m);
  ASSERT_EQ(m.rows(), 77);
  ASSERT_EQ(m.cols(), 1100);
  EXPECT_EQ(std::memcmp(m.data(), ref.data(), ref.size_bytes()), 0);
}

// ---- MPI-IO .npy -------------------------------------------------------------------------------------

TEST(DistNpy, EveryRanksRangeLandsInOneFileNumPyOpens) {
  sd::communicator c;
  const shared_dir dir(c);
  const std::string path = dir + "/blocks.npy";
  // Uneven blocks of a 2-D int64 array (rank r holds r + 3 rows of 5).
  std::int64_t rows_before = 0;
  for (int r = 0; r < c.rank(); ++r) rows_before += r + 3;
  std::int64_t n = 0;
  for (int r = 0; r < c.size(); ++r) n += r + 3;
  const std::int64_t mine = c.rank() + 3;
  std::vector<std::int64_t> v(static_cast<std::size_t>(mine * 5));
  for (std::int64_t i = 0; i < mine * 5; ++i) v[static_cast<std::size_t>(i)] = (rows_before * 5 + i) * 3 - 7;
  // A longer file of that name first: the new one must not keep its tail.
  if (c.rank() == 0) spillway::io::write_npy(path, std::vector<double>(1000, 1.0), {1000});
  c.barrier();
  sd::write_npy_at_all(c, path, {n, 5}, v.data(), rows_before * 5, mine * 5, /*sync=*/true);
  EXPECT_EQ(sd::npy_data_offset<std::int64_t>({n, 5}) % 64, 0);
  // The same through each rank's own writes (no collective I/O) into a second file.
  sd::write_npy_at_all(c, path + ".ind.npy", {n, 5}, v.data(), rows_before * 5, mine * 5, false,
                       /*collective=*/false);
  if (c.rank() == 0) {
    const auto a = spillway::io::read_npy(path);
    ASSERT_EQ(a.header.shape, (std::vector<std::int64_t>{n, 5}));
    for (std::int64_t i = 0; i < n * 5; ++i) ASSERT_EQ(a.data<std::int64_t>()[i], i * 3 - 7) << i;
    const auto b = spillway::io::read_npy(path + ".ind.npy");
    ASSERT_EQ(b.header.shape, (std::vector<std::int64_t>{n, 5}));
    for (std::int64_t i = 0; i < n * 5; ++i) ASSERT_EQ(b.data<std::int64_t>()[i], i * 3 - 7) << i;
    const std::string py = python();
    if (!py.empty()) {
      const std::string cmd =
          py +
          " -c \"import numpy as np, sys; a = np.load(sys.argv[1], mmap_mode='r'); "
          "sys.exit(0 if a.shape == (" +
          std::to_string(n) +
          ", 5) and a.dtype == np.int64 and "
          "(np.asarray(a).ravel() == np.arange(a.size) * 3 - 7).all() and a.offset % 64 == 0 else 1)\" " +
          path;
      EXPECT_EQ(std::system(cmd.c_str()), 0) << "NumPy did not read " << path << " as written";
    } else {
      std::printf("[ note     ] SPILLWAY_PYTHON unset: the NumPy read-back of the MPI-IO file is skipped\n");
    }
  }
}

TEST(DistNpy, CountsThatDoNotAddUpAreRefusedOnEveryRank) {
  sd::communicator c;
  const shared_dir dir(c);
  std::vector<float> v(4, 1.0f);
  EXPECT_THROW(sd::write_npy_at_all(c, dir + "/bad.npy", {static_cast<std::int64_t>(4 * c.size() + 1)},
                                    v.data(), 4 * c.rank(), 4),
               sd::rank_error);
  // An unreachable folder: the open fails (on every rank), named on every rank.
  try {
    sd::write_npy_at_all(c, dir + "/no/such/folder/x.npy", {static_cast<std::int64_t>(4 * c.size())},
                         v.data(), 4 * c.rank(), 4);
    ADD_FAILURE() << "no exception";
  } catch (const sd::rank_error& e) {
    EXPECT_NE(std::string(e.what()).find("no/such/folder"), std::string::npos) << e.what();
  }
}

// ---- the Gram product across ranks == one process ------------------------------------------------

template <class V>
void expect_topk_block(const sd::topk_block<V>& b, const sp::topk_result<V>& ref, const std::string& what) {
  for (std::int64_t i = 0; i < b.lists.rows; ++i) {
    for (int t = 0; t < ref.k; ++t) {
      ASSERT_EQ(b.lists.index(i, t), ref.index(b.first_row + i, t))
          << what << " row " << b.first_row + i << " place " << t;
      ASSERT_EQ(b.lists.value(i, t), ref.value(b.first_row + i, t))
          << what << " row " << b.first_row + i << " place " << t;
    }
  }
}

TEST(DistGram, TopkEqualsOneProcess) {
  sd::communicator c;
  // 301 rows (prime), 517 columns (not a multiple of the word), strips of 16: many strips, uneven ranks.
  const auto a = random_bits(301, 517, 0.3, seed("dist topk"));
  sd::gram_job_options o;
  o.strip_rows = 16;
  for (const bool diag : {false, true}) {
    for (const int k : {1, 7, 64}) {
      const sp::topk_options ko{k, diag};
      const auto ref = sg::host_gram_topk<std::int32_t>(a, ko);
      sd::gram_report rep;
      const auto b = sd::host_gram_topk<std::int32_t>(c, a, ko, o, &rep);
      EXPECT_EQ(b.first_row, rep.split.first_row(c.rank()));
      EXPECT_EQ(b.lists.rows, rep.split.last_row(c.rank()) - rep.split.first_row(c.rank()));
      expect_topk_block(b, ref, "counts k=" + std::to_string(k) + (diag ? " diag" : ""));
      const auto all = sd::gather_topk(c, b, a.rows());
      if (c.rank() == 0) {
        EXPECT_EQ(all.indices, ref.indices);
        EXPECT_EQ(all.values, ref.values);
      }
    }
  }
  // A similarity in float, a distance (smaller first).
  o.epilogue = sg::metric::jaccard;
  const auto rj = sg::host_gram_topk<float>(a, {9, false}, sg::metric::jaccard);
  expect_topk_block(sd::host_gram_topk<float>(c, a, {9, false}, o), rj, "jaccard");
  o.epilogue = sg::metric::hamming;
  const auto rh = sg::host_gram_topk<std::int32_t>(a, {5, false}, sg::metric::hamming);
  sd::gram_report rep;
  expect_topk_block(sd::host_gram_topk<std::int32_t>(c, a, {5, false}, o, &rep), rh, "hamming");
  // Lists of rows owned by later ranks crossed the network: the bytes are reported.
  if (c.size() > 1 && c.rank() < c.size() - 1) {
    EXPECT_GT(rep.local_merge_bytes_sent, 0u);
  }
}

TEST(DistGram, OneRankReturnsItsOwnListsWithNoExchange) {
  // Each rank alone (MPI_COMM_SELF): the whole matrix is its rows, nothing leaves it, nothing is
  // merged; the lists equal the one-process job's.
  sd::communicator self(MPI_COMM_SELF);
  const auto a = random_bits(263, 300, 0.2, seed("dist one rank"));
  sd::gram_job_options o;
  o.strip_rows = 20;
  for (const int k : {1, 5, 64}) {
    const sp::topk_options ko{k, k == 5};
    const auto ref = sg::host_gram_topk<std::int32_t>(a, ko);
    sd::gram_report rep;
    const auto b = sd::host_gram_topk<std::int32_t>(self, a, ko, o, &rep);
    EXPECT_EQ(b.first_row, 0);
    EXPECT_EQ(b.lists.rows, a.rows());
    EXPECT_EQ(b.lists.values, ref.values) << "k=" << k;
    EXPECT_EQ(b.lists.indices, ref.indices) << "k=" << k;
    EXPECT_EQ(rep.local.sent_bytes, 0.0);
    EXPECT_EQ(rep.local.received_bytes, 0.0);
    EXPECT_EQ(rep.local_merge_bytes_sent, 0u);
    ASSERT_EQ(rep.ranks.size(), 1u);
    EXPECT_EQ(rep.ranks[0].total_seconds, rep.local.total_seconds);
    EXPECT_GE(rep.local.total_seconds, rep.local.compute_seconds);
    EXPECT_GE(rep.local.compute_seconds, 0.0);
    EXPECT_EQ(rep.local.compute_seconds, rep.run.ranks[0].seconds);
  }
}

TEST(DistGram, OnlyListsOfOtherRanksRowsAreSent) {
  // Rank r sends its lists of each later rank's rows (when both own rows) and receives one list
  // per row of its own from each earlier rank with rows: the first rank with rows receives none.
  sd::communicator c;
  const auto a = random_bits(157, 90, 0.1, seed("dist owned rows"));  // sparse: many ties
  for (const std::int64_t strip : {7, 64, 200}) {  // 200: one strip, every other rank owns nothing
    sd::gram_job_options o;
    o.strip_rows = strip;
    const int k = 6;
    const auto ref = sg::host_gram_topk<std::int32_t>(a, {k, false});
    sd::gram_report rep;
    const auto b = sd::host_gram_topk<std::int32_t>(c, a, {k, false}, o, &rep);
    expect_topk_block(b, ref, "strips of " + std::to_string(strip));
    const auto& sp_ = rep.split;
    const int me = c.rank();
    const double entry = sizeof(sd::topk_wire<std::int32_t>);  // value + int32 column, as sent
    double sent = 0, received = 0;
    for (int q = 0; q < c.size(); ++q) {
      if (sp_.rows_of(me) == 0 || sp_.rows_of(q) == 0) continue;
      if (q > me) sent += static_cast<double>(sp_.rows_of(q) * k) * entry;
      if (q < me) received += static_cast<double>(sp_.rows_of(me) * k) * entry;
    }
    EXPECT_EQ(rep.local.sent_bytes, sent) << "strips of " << strip;
    EXPECT_EQ(rep.local.received_bytes, received) << "strips of " << strip;
    if (me == 0) {
      EXPECT_EQ(rep.local.received_bytes, 0.0);
    }
    // Every rank's phases on every rank, this one's among them.
    ASSERT_EQ(rep.ranks.size(), static_cast<std::size_t>(c.size()));
    EXPECT_EQ(rep.ranks[static_cast<std::size_t>(me)].sent_bytes, rep.local.sent_bytes);
    EXPECT_EQ(rep.ranks[static_cast<std::size_t>(me)].merge_seconds, rep.local.merge_seconds);
    double all_sent = 0, all_received = 0;
    for (const auto& ph : rep.ranks) {
      all_sent += ph.sent_bytes;
      all_received += ph.received_bytes;
      EXPECT_GE(ph.setup_seconds, 0.0);
      EXPECT_GE(ph.wait_seconds, 0.0);
      EXPECT_GE(ph.total_seconds + 1e-9, ph.setup_seconds + ph.compute_seconds + ph.exchange_seconds + ph.merge_seconds);
    }
    EXPECT_EQ(all_sent, all_received);
  }
}

TEST(DistGram, DealtStripsGiveTheOneProcessLists) {
  // Cyclic and snake deals: a rank computes strips across the matrix, owns one block of rows, and
  // sends every other owner the lists of its rows that its strips touched; owners merge them.
  // Exact against the one-process job (each pair computed once; ties break on the smaller column).
  sd::communicator c;
  const auto a = random_bits(233, 150, 0.15, seed("dist dealt"));  // sparse: many ties
  // Both exchanges: through the host's shared memory where every rank is on one host (the
  // default; mpirun -np 2 and 3 here), and MPI_Alltoallv.
  for (const bool shared : {true, false}) {
    for (const auto policy : {sd::gram_split_policy::cyclic, sd::gram_split_policy::snake,
                              sd::gram_split_policy::greedy}) {
      for (const std::int64_t strip : {5, 16, 64, 300}) {  // 300: one strip, one rank computes
        for (const bool diag : {false, true}) {
          const std::string what = std::string(sd::split_policy_name(policy)) + " strips of " +
                                   std::to_string(strip) + (diag ? " diag" : "") +
                                   (shared ? " shared memory" : " alltoallv");
          sd::gram_job_options o;
          o.strip_rows = strip;
          o.split = policy;
          o.shared_memory_exchange = shared;
          const int k = 5;
          const auto ref = sg::host_gram_topk<std::int32_t>(a, {k, diag});
          sd::gram_report rep;
          const auto b = sd::host_gram_topk<std::int32_t>(c, a, {k, diag}, o, &rep);
          const auto& sp_ = rep.split;
          EXPECT_EQ(sp_.deal, c.size() > 1 ? (policy == sd::gram_split_policy::snake ? sd::strip_deal::snake
                                                                                       : sd::strip_deal::cyclic)
                                           : sd::strip_deal::contiguous)
              << what;
          EXPECT_EQ(b.first_row, sp_.first_row(c.rank())) << what;
          EXPECT_EQ(b.lists.rows, sp_.rows_of(c.rank())) << what;
          expect_topk_block(b, ref, what);
          const auto all = sd::gather_topk(c, b, a.rows());
          if (c.rank() == 0) {
            EXPECT_EQ(all.indices, ref.indices) << what;
            EXPECT_EQ(all.values, ref.values) << what;
          }
          // The bytes: this rank's lists of each owner's rows its strips touched, out; one list per
          // own row from each rank whose strips touched them, in. Every strip once.
          const int me = c.rank();
          const double entry = sizeof(sd::topk_wire<std::int32_t>);  // value + int32 column, as sent
          double sent = 0, received = 0;
          bool any = false;
          for (int q = 0; q < c.size(); ++q)
            for (int r = 0; r < c.size(); ++r) any = any || sp_.lists_meet(q, r);
          for (int q = 0; q < c.size() && any; ++q) {
            if (sp_.lists_meet(me, q)) sent += static_cast<double>(sp_.rows_of(q) * k) * entry;
            if (sp_.lists_meet(q, me)) received += static_cast<double>(sp_.rows_of(me) * k) * entry;
          }
          EXPECT_EQ(rep.local.sent_bytes, sent) << what;
          EXPECT_EQ(rep.local.received_bytes, received) << what;
          std::size_t computed = 0;
          for (const auto& r : rep.run.ranks) computed += r.tasks;
          EXPECT_EQ(computed, static_cast<std::size_t>(sp_.strips)) << what;
        }
      }
    }
  }
  // A similarity in float and a distance, dealt.
  sd::gram_job_options o;
  o.strip_rows = 8;
  o.split = sd::gram_split_policy::cyclic;
  o.epilogue = sg::metric::jaccard;
  expect_topk_block(sd::host_gram_topk<float>(c, a, {9, false}, o),
                    sg::host_gram_topk<float>(a, {9, false}, sg::metric::jaccard), "cyclic jaccard");
  o.epilogue = sg::metric::hamming;
  expect_topk_block(sd::host_gram_topk<std::int32_t>(c, a, {4, true}, o),
                    sg::host_gram_topk<std::int32_t>(a, {4, true}, sg::metric::hamming), "cyclic hamming");
  // The triangle and the threshold keep the contiguous split whatever the policy.
  const auto t = sd::host_gram_threshold<std::int32_t>(c, a, {3.0, false, false}, o);
  EXPECT_EQ(t.total, static_cast<std::int64_t>(
                         sg::host_gram_threshold<std::int32_t>(a, {3.0, false, false}, sg::metric::hamming).size()));
}

TEST(DistGram, DealtTinyShapesAndMoreRanksThanStrips) {
  sd::communicator c;
  for (const std::int64_t n : {0, 1, 2, 17, 40}) {
    const auto a = random_bits(n, 33, 0.5, seed("dealt tiny " + std::to_string(n)));
    sd::gram_job_options o;
    o.strip_rows = 16;  // up to three strips: some ranks compute none, some own rows they never touch
    o.split = sd::gram_split_policy::snake;
    const auto ref = sg::host_gram_topk<std::int32_t>(a, {3, false});
    const auto b = sd::host_gram_topk<std::int32_t>(c, a, {3, false}, o);
    expect_topk_block(b, ref, "dealt n=" + std::to_string(n));
    const auto all = sd::gather_topk(c, b, a.rows());
    if (c.rank() == 0) {
      EXPECT_EQ(all.indices, ref.indices);
    }
  }
}

TEST(DistGram, TopkFileEqualsOneProcess) {
  sd::communicator c;
  const shared_dir dir(c);
  const auto a = random_bits(150, 300, 0.5, seed("dist topk file"));
  sd::gram_job_options o;
  o.strip_rows = 8;
  const auto b = sd::host_gram_topk<std::int32_t>(c, a, {32, false}, o);
  sd::write_topk_npy(c, dir + "/nn.npy", b, a.rows());
  if (c.rank() == 0) {
    const auto ref = sg::host_gram_topk<std::int32_t>(a, {32, false});
    const auto v = spillway::io::read_npy(dir + "/nn.npy");
    const auto ix = spillway::io::read_npy(dir + "/nn.npy.indices.npy");
    ASSERT_EQ(v.header.shape, (std::vector<std::int64_t>{150, 32}));
    ASSERT_EQ(ix.header.dtype, spillway::io::npy_dtype::i8);
    for (std::size_t q = 0; q < ref.values.size(); ++q) {
      ASSERT_EQ(v.data<std::int32_t>()[q], ref.values[q]) << q;
      ASSERT_EQ(ix.data<std::int64_t>()[q], ref.indices[q]) << q;
    }
  }
}

TEST(DistGram, TriangleFileEqualsOneProcess) {
  sd::communicator c;
  const shared_dir dir(c);
  const auto a = random_bits(233, 1030, 0.25, seed("dist triangle"));
  sd::gram_job_options o;
  o.strip_rows = 12;
  for (const auto layout : {sp::triangle_layout::upper_packed, sp::triangle_layout::condensed}) {
    const std::string path = dir + "/tri_" + sp::to_string(layout) + ".npy";
    const auto rep = sd::host_gram_triangle_npy<std::int32_t>(c, a, path, layout, o);
    EXPECT_FALSE(rep.on_gpu);
    EXPECT_EQ(rep.run.tasks_completed, static_cast<std::size_t>(rep.split.strips));
    if (c.rank() == 0) {
      std::vector<std::int32_t> ref(static_cast<std::size_t>(sp::layout_size(layout, a.rows())), -1);
      sg::host_gram_dense(a.view(), ref.data(), layout);
      const auto f = spillway::io::read_npy(path);
      ASSERT_EQ(f.header.shape, (std::vector<std::int64_t>{static_cast<std::int64_t>(ref.size())}));
      for (std::size_t q = 0; q < ref.size(); ++q)
        ASSERT_EQ(f.data<std::int32_t>()[q], ref[q]) << sp::to_string(layout) << " " << q;
      const std::string py = python();
      if (!py.empty()) {
        long long sum = 0;
        for (auto x : ref) sum += x;
        const std::string cmd = py +
                                " -c \"import numpy as np, sys; a = np.load(sys.argv[1]); "
                                "sys.exit(0 if a.dtype == np.int32 and a.shape == (" +
                                std::to_string(ref.size()) +
                                ",) and int(a.astype(np.int64).sum()) == " + std::to_string(sum) +
                                " else 1)\" " + path;
        EXPECT_EQ(std::system(cmd.c_str()), 0) << "NumPy did not read " << path;
      }
    }
  }
  // Cosine in double, the packed triangle.
  o.epilogue = sg::metric::cosine;
  const std::string path = dir + "/cos.npy";
  (void)sd::host_gram_triangle_npy<double>(c, a, path, sp::triangle_layout::upper_packed, o);
  if (c.rank() == 0) {
    std::vector<double> ref(
        static_cast<std::size_t>(sp::layout_size(sp::triangle_layout::upper_packed, a.rows())));
    sg::host_gram_dense(a.view(), ref.data(), sp::triangle_layout::upper_packed, sg::metric::cosine);
    const auto f = spillway::io::read_npy(path);
    for (std::size_t q = 0; q < ref.size(); ++q)
      ASSERT_EQ(f.data<double>()[q], ref[q]) << q;  // bit-identical
  }
  EXPECT_THROW(
      (void)sd::host_gram_triangle_npy<std::int32_t>(c, a, dir + "/full.npy", sp::triangle_layout::full, {}),
      sd::rank_error);
}

// The triangle's rows are written straight from their scores: tiny shapes (one or two strips, so
// some ranks own no rows; a condensed last row holds nothing), both layouts, a float metric.
TEST(DistGram, TriangleTinyShapesEqualOneProcess) {
  sd::communicator c;
  const shared_dir dir(c);
  for (const std::int64_t n : {1, 2, 17}) {
    const auto a = random_bits(n, 33, 0.5, seed("tiny triangle " + std::to_string(n)));
    sd::gram_job_options o;
    o.strip_rows = 16;
    o.epilogue = sg::metric::jaccard;
    for (const auto layout : {sp::triangle_layout::upper_packed, sp::triangle_layout::condensed}) {
      const std::string path = dir + "/tiny_" + std::to_string(n) + "_" + sp::to_string(layout) + ".npy";
      (void)sd::host_gram_triangle_npy<float>(c, a, path, layout, o);
      if (c.rank() == 0) {
        std::vector<float> ref(static_cast<std::size_t>(sp::layout_size(layout, n)));
        sg::host_gram_dense(a.view(), ref.data(), layout, sg::metric::jaccard);
        const auto f = spillway::io::read_npy(path);
        const std::string what = "n=" + std::to_string(n) + " " + sp::to_string(layout);
        if (f.header.shape != std::vector<std::int64_t>{static_cast<std::int64_t>(ref.size())}) {
          ADD_FAILURE() << what << ": the file's shape";
          continue;
        }
        // EXPECT (not ASSERT) on rank 0 alone: the other ranks go on to the next collective.
        for (std::size_t q = 0; q < ref.size(); ++q) {
          if (f.data<float>()[q] != ref[q]) {
            ADD_FAILURE() << what << ": element " << q << " is " << f.data<float>()[q] << ", not " << ref[q];
            break;
          }
        }
      }
    }
  }
}

TEST(DistGram, ThresholdEqualsOneProcess) {
  sd::communicator c;
  const shared_dir dir(c);
  const auto a = random_bits(257, 400, 0.3, seed("dist threshold"));
  sd::gram_job_options o;
  o.strip_rows = 10;
  for (const bool diag : {false, true}) {
    const sp::threshold_options t{40.0, false, diag};
    const auto ref = sg::host_gram_threshold<std::int32_t>(a, t);
    const auto b = sd::host_gram_threshold<std::int32_t>(c, a, t, o);
    EXPECT_EQ(b.total, static_cast<std::int64_t>(ref.size()));
    for (std::size_t q = 0; q < b.entries.size(); ++q) {
      const auto g = static_cast<std::size_t>(b.offset) + q;
      ASSERT_LT(g, ref.size());
      ASSERT_EQ(b.entries.row[q], ref.row[g]) << q;
      ASSERT_EQ(b.entries.col[q], ref.col[g]) << q;
      ASSERT_EQ(b.entries.value[q], ref.value[g]) << q;
    }
    const auto all = sd::gather_coo(c, b);
    sd::write_coo_npy(c, dir + "/thr.npy", b);
    if (c.rank() == 0) {
      EXPECT_EQ(all.row, ref.row);
      EXPECT_EQ(all.col, ref.col);
      EXPECT_EQ(all.value, ref.value);
      const auto rows = spillway::io::read_npy(dir + "/thr.npy.row.npy");
      const auto cols = spillway::io::read_npy(dir + "/thr.npy.col.npy");
      const auto vals = spillway::io::read_npy(dir + "/thr.npy");
      ASSERT_EQ(rows.header.shape, (std::vector<std::int64_t>{static_cast<std::int64_t>(ref.size())}));
      for (std::size_t q = 0; q < ref.size(); ++q) {
        ASSERT_EQ(rows.data<std::int64_t>()[q], ref.row[q]);
        ASSERT_EQ(cols.data<std::int64_t>()[q], ref.col[q]);
        ASSERT_EQ(vals.data<std::int32_t>()[q], ref.value[q]);
      }
    }
  }
  EXPECT_THROW((void)sd::host_gram_threshold<std::int32_t>(c, a, {40.0, true, false}, o), sd::rank_error);
}

TEST(DistGram, MoreRanksThanStripsAndTinyShapes) {
  sd::communicator c;
  for (const std::int64_t n : {0, 1, 2, 17}) {
    const auto a = random_bits(n, 33, 0.5, seed("tiny " + std::to_string(n)));
    sd::gram_job_options o;
    o.strip_rows = 16;  // one or two strips: some ranks own no rows
    const auto ref = sg::host_gram_topk<std::int32_t>(a, {3, false});
    const auto b = sd::host_gram_topk<std::int32_t>(c, a, {3, false}, o);
    expect_topk_block(b, ref, "n=" + std::to_string(n));
    const auto t = sd::host_gram_threshold<std::int32_t>(c, a, {1.0, false, true}, o);
    EXPECT_EQ(t.total,
              static_cast<std::int64_t>(sg::host_gram_threshold<std::int32_t>(a, {1.0, false, true}).size()));
  }
}

TEST(DistGram, BadOptionsAreRefusedOnEveryRank) {
  sd::communicator c;
  const auto a = random_bits(20, 40, 0.5, 1);
  EXPECT_THROW((void)sd::host_gram_topk<std::int32_t>(c, a, {129, false}), sd::rank_error);
  sd::gram_job_options o;
  o.epilogue = sg::metric::jaccard;  // needs float or double
  EXPECT_THROW((void)sd::host_gram_topk<std::int32_t>(c, a, {3, false}, o), sd::rank_error);
  c.barrier();
}
