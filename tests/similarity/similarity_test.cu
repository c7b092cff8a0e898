// Float similarity (spillway/similarity/similarity.cuh) through the pairwise sinks, on the GPU, against
// the host reference in double on the same input values (printed seeds; outputs poisoned).
//
// Error bound used throughout (stated once): a float-accumulated dot product of d terms is within
// γ_d·Σ|a_k b_k| ≤ d·u·|a|·|b| of the exact one (u = 2^-24; bf16 and half products are exact in
// float, float products are covered by γ_d). Cosine divides by the two norms, each within about
// (d/2 + 1)·u, and multiplies twice more, so |cos_gpu − cos_exact| ≤ (2d + 8)·u; we allow 4(d + 8)·u
// for the tensor cores' partial-sum alignment, which is not IEEE. TF32 (float rows with
// math_mode::tf32) truncates each operand to 10 mantissa bits: + 2·2^-10 + 2^-20. Inner product:
// the same times |a|·|b|. Euclidean: |Δ(d²)| ≤ eps_cos·(|a|² + |b|²) and |√x − √y| ≤ √|x − y|.
// A top-k entry j of row i is correct when host(i, j) is within 2·eps of the host's k-th score or
// better (the GPU's value of j beat the GPU's value of the true k-th, each off by ≤ eps).
#include <spillway/similarity/similarity.cuh>

#include <support/gpu_test.hpp>

#include "fused_sizes_scope.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace spillway;
namespace g = spillway::similarity;
using g::similarity_metric;
using spillway::pairwise::triangle_layout;

template <class T>
T from_float(float x) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(x);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(x);
  else return x;
}

/// n x d rows, normal(0, 1); row 2 all zero; rows 4 and 5 copies of row 3 (exact ties).
template <class T>
std::vector<T> random_rows(std::int64_t n, std::int64_t d, std::uint64_t seed, std::int64_t ld = -1) {
  if (ld < 0) ld = d;
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<T> v(static_cast<std::size_t>(n * ld), from_float<T>(0.0f));
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t c = 0; c < d; ++c) v[static_cast<std::size_t>(i * ld + c)] = from_float<T>(nd(gen));
  if (n > 5) {
    for (std::int64_t c = 0; c < d; ++c) {
      v[static_cast<std::size_t>(2 * ld + c)] = from_float<T>(0.0f);
      v[static_cast<std::size_t>(4 * ld + c)] = v[static_cast<std::size_t>(3 * ld + c)];
      v[static_cast<std::size_t>(5 * ld + c)] = v[static_cast<std::size_t>(3 * ld + c)];
    }
  }
  return v;
}

double eps_cos(std::int64_t d, bool tf32) {
  const double u = std::ldexp(1.0, -24);
  return 4.0 * static_cast<double>(d + 8) * u + (tf32 ? 2.0 * std::ldexp(1.0, -10) + std::ldexp(1.0, -20) : 0.0);
}

/// The bound on |gpu − exact| for one pair (see the top of the file).
template <class T>
double pair_eps(const g::matrix_view<const T>& a, const g::matrix_view<const T>& b, std::int64_t i, std::int64_t j,
                similarity_metric m, bool tf32) {
  const double e = eps_cos(a.cols, tf32);
  if (m == similarity_metric::cosine) return e;
  const double na = g::host_similarity_score(a, a, i, i, similarity_metric::inner_product);
  const double nb = g::host_similarity_score(b, b, j, j, similarity_metric::inner_product);
  if (m == similarity_metric::inner_product) return e * std::sqrt(na * nb) + 1e-30;
  return std::sqrt(e * (na + nb)) + 1e-30;
}

template <class T>
void poison(std::vector<T>& v) {
  std::memset(static_cast<void*>(v.data()), 0xFF, v.size() * sizeof(T));  // NaN for float
}

/// Checks a top-k result against the host reference by the rule stated at the top.
template <class T>
void check_topk(const g::topk_result<float>& r, const g::matrix_view<const T>& a, const g::matrix_view<const T>& b,
                bool symmetric, int k, bool include_diagonal, similarity_metric m, bool tf32, const char* what) {
  const bool larger = g::is_similarity(m);
  const std::int64_t cand = symmetric && !include_diagonal ? b.rows - 1 : b.rows;
  ASSERT_EQ(r.rows, a.rows);
  ASSERT_EQ(r.k, k);
  for (std::int64_t i = 0; i < a.rows; ++i) {
    std::vector<double> host(static_cast<std::size_t>(b.rows));
    double row_eps = 0.0;
    for (std::int64_t j = 0; j < b.rows; ++j) {
      host[static_cast<std::size_t>(j)] = g::host_similarity_score(a, b, i, j, m);
      row_eps = std::max(row_eps, pair_eps(a, b, i, j, m, tf32));
    }
    std::vector<double> sorted;
    for (std::int64_t j = 0; j < b.rows; ++j)
      if (!(symmetric && j == i && !include_diagonal)) sorted.push_back(host[static_cast<std::size_t>(j)]);
    std::sort(sorted.begin(), sorted.end(), [&](double x, double y) { return larger ? x > y : x < y; });
    const int kk = static_cast<int>(std::min<std::int64_t>(k, cand));
    const double kth = sorted[static_cast<std::size_t>(kk - 1)];
    std::vector<std::int64_t> seen;
    for (int t = 0; t < k; ++t) {
      const std::int64_t j = r.index(i, t);
      if (t >= kk) {
        ASSERT_EQ(j, -1) << what << " row " << i << " place " << t;
        continue;
      }
      ASSERT_GE(j, 0) << what << " row " << i << " place " << t;
      ASSERT_LT(j, b.rows);
      if (symmetric && !include_diagonal) ASSERT_NE(j, i) << what << ": the diagonal is excluded by default";
      ASSERT_EQ(std::count(seen.begin(), seen.end(), j), 0) << what << " row " << i << " lists " << j << " twice";
      seen.push_back(j);
      const double h = host[static_cast<std::size_t>(j)];
      const double e = pair_eps(a, b, i, j, m, tf32);
      ASSERT_NEAR(r.value(i, t), h, e) << what << " row " << i << " place " << t << " column " << j;
      if (larger) ASSERT_GE(h, kth - 2 * row_eps) << what << " row " << i << " column " << j << " is not in the top " << k;
      else ASSERT_LE(h, kth + 2 * row_eps) << what << " row " << i << " column " << j << " is not in the top " << k;
      if (t > 0) {
        const float pv = r.value(i, t - 1), cv = r.value(i, t);
        ASSERT_TRUE(larger ? pv >= cv : pv <= cv) << what << " row " << i << ": list not sorted at " << t;
        if (pv == cv) ASSERT_LT(r.index(i, t - 1), j) << what << " row " << i << ": a tie goes to the smaller column";
      }
    }
  }
}

template <class T>
g::matrix_view<const T> view(const std::vector<T>& v, std::int64_t n, std::int64_t d, std::int64_t ld = -1) {
  return g::row_major(v.data(), n, d, ld < 0 ? d : ld);
}

TEST(SimilarityGpu, DenseLayoutsEveryMetricFloatExact) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const std::int64_t n = 301, d = 200;
  const auto rows = random_rows<float>(n, d, test::seed("SimilarityGpu.Dense"));
  const auto a = view(rows, n, d);
  for (similarity_metric m : {similarity_metric::inner_product, similarity_metric::cosine, similarity_metric::euclidean}) {
    for (triangle_layout l : {triangle_layout::full, triangle_layout::upper_packed, triangle_layout::condensed}) {
      g::similarity_options o;
      o.metric = m;
      o.max_panel_rows = 64;  // 5 strips
      std::vector<float> out(static_cast<std::size_t>(g::layout_size(l, n)));
      poison(out);
      const auto rep = g::similarity_dense(a, out.data(), l, o);
      EXPECT_TRUE(rep.complete());
      const auto sq = spillway::pairwise::triangle_to_square(out.data(), n, l, -1.0f);
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
          if (l == triangle_layout::condensed && i == j) continue;
          const float v = sq[static_cast<std::size_t>(i * n + j)];
          ASSERT_FALSE(std::isnan(v)) << to_string(m) << " " << to_string(l) << " (" << i << "," << j << ") never written";
          ASSERT_NEAR(v, g::host_similarity_score(a, a, i, j, m), pair_eps(a, a, i, j, m, false))
              << to_string(m) << " " << to_string(l) << " (" << i << "," << j << ")";
          if (l == triangle_layout::full) ASSERT_EQ(v, out[static_cast<std::size_t>(j * n + i)]) << "full is mirrored exactly";
        }
      // Cosine of the zero row is cosine_zero (0) with every row, itself included.
      if (m == similarity_metric::cosine) {
        for (std::int64_t j = 0; j < n; ++j)
          if (!(l == triangle_layout::condensed && j == 2)) ASSERT_EQ(sq[static_cast<std::size_t>(2 * n + j)], 0.0f) << j;
      }
    }
  }
}

template <class T>
void topk_bf16_half_case(const char* name) {
  const std::int64_t n = 1000, d = 96;
  const auto rows = random_rows<T>(n, d, test::seed(name));
  const auto a = view(rows, n, d);
  g::similarity_options o;
  o.max_panel_rows = 128;  // 8 strips: rows and mirrored columns of every strip merged on the device
  g::pair_report rep;
  o.report = &rep;
  for (int k : {1, 16, 64, 128}) {
    const auto r = g::similarity_topk(a, {k}, o);
    EXPECT_GE(rep.plan.strips, 8);
    check_topk(r, a, a, true, k, false, similarity_metric::cosine, false, name);
    if (k >= 3) {
      // The duplicates: rows 4 and 5 are copies of row 3, so row 3's best two are 4 then 5 (equal
      // scores, ties to the smaller column), and the zero row scores 0 with everyone.
      EXPECT_EQ(r.index(3, 0), 4);
      EXPECT_EQ(r.index(3, 1), 5);
      EXPECT_EQ(r.value(3, 0), r.value(3, 1));
      EXPECT_EQ(r.index(5, 0), 3);
      EXPECT_EQ(r.index(5, 1), 4);
      for (int t = 0; t < k; ++t) {
        EXPECT_EQ(r.value(2, t), 0.0f);
        EXPECT_EQ(r.index(2, t), t < 2 ? t : t + 1) << "zero row: all ties, smallest columns first, itself excluded";
      }
    }
  }
  // The diagonal when asked for.
  const auto rd = g::similarity_topk(a, {8, true}, o);
  check_topk(rd, a, a, true, 8, true, similarity_metric::cosine, false, name);
}

TEST(SimilarityGpu, TopKCosineBf16) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  topk_bf16_half_case<__nv_bfloat16>("SimilarityGpu.TopKBf16");
}

TEST(SimilarityGpu, TopKCosineHalf) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  topk_bf16_half_case<__half>("SimilarityGpu.TopKHalf");
}

// ---- the fused top-k (bf16 / half / TF32 rows on sm_90a: scores filtered in the GEMM) ----------

using spillway::test::fused_sizes_scope;

bool device_has_wgmma() {
  return (spillway::tile::build_features(spillway::current_device()) & spillway::tile::feature_wgmma) != 0;
}

/// Small blocks (256 rows), strips (128) and chunks (≤ 512 columns) so that every part of the job
/// runs on 2,333 rows: the seed, chunks of doubling width, both merges, and with tiny capacities
/// the recomputation of overflowed buckets; checked against the host in double.
template <class T>
void fused_case(const char* name, similarity_metric m, bool tf32, int k, std::int32_t cap_a, std::int32_t cap_b) {
  const std::int64_t n = 2333, d = 100;
  const auto rows = random_rows<T>(n, d, test::seed(name));
  const auto a = view(rows, n, d);
  fused_sizes_scope scope(test::small_fused_sizes(cap_a, cap_b));
  g::similarity_options o;
  o.metric = m;
  if (tf32) o.gemm.math = g::math_mode::tf32;
  int calls = 0;
  std::size_t last_done = 0;
  o.progress = [&](const spillway::progress_info& p) {
    ++calls;
    EXPECT_GE(p.tasks_done, last_done) << "progress never goes back";
    last_done = p.tasks_done;
    return true;
  };
  g::pair_report rep;
  o.report = &rep;
  const auto r = g::similarity_topk(a, {k}, o);
  auto& hook = g::detail::fused_topk_hook();
  ASSERT_TRUE(hook.last_ran) << name << ": the fused path was not taken";
  EXPECT_EQ(rep.plan.strips, 19);
  EXPECT_TRUE(rep.job.complete());
  EXPECT_EQ(last_done, rep.job.tasks_total);
  EXPECT_GE(calls, 2);
  EXPECT_GE(hook.last_chunks.load(), 19 * 2) << "chunks of doubling width";
  if (cap_a > 0 && cap_a <= 2) EXPECT_GT(hook.last_recomputed_rows.load(), 0u) << name << ": tiny buckets must overflow";
  else EXPECT_EQ(hook.last_recomputed_rows.load(), 0u) << name << ": no bucket should overflow on random rows";
  check_topk(r, a, a, true, k, false, m, tf32, name);
  if (cap_a == 0 && cap_b == 0) {
    // With profile on, the merges count the candidates the filter passed (last_candidates): at
    // least every listed column from outside its row's seed block, which only a merge can have
    // brought (with overflowing buckets, recomputed pairs bypass the count: not checked there).
    hook.profile = true;
    last_done = 0;  // the progress of the second job starts again from 0
    const auto r2 = g::similarity_topk(a, {k}, o);
    hook.profile = false;
    const auto L = g::detail::fused_topk_shape(n, k, 0, 0);
    const auto block = [&](std::int64_t i) { return std::min(i / L.S, L.blocks - 1); };
    std::uint64_t outside = 0;
    for (std::int64_t i = 0; i < n; ++i)
      for (int t = 0; t < k; ++t) {
        const std::int64_t j = r2.index(i, t);
        if (j >= 0 && block(j) != block(i)) ++outside;
      }
    EXPECT_GT(outside, 0u) << name;
    EXPECT_GE(hook.last_candidates.load(), outside)
        << name << ": candidates merged, against the listed columns from other blocks";
    EXPECT_TRUE(r2.indices == r.indices && r2.values == r.values)
        << name << ": the profiled job lists what the first did";
  }
}

// The fused job's schedule (no device): seed blocks take the pairs inside them, and each strip's
// chunks (for_each_fused_chunk, which the job and benchmarks/similarity_bench.cu both use) take the
// strip's rows against every column of the later blocks, contiguously, no chunk wider than W or
// than the columns its rows have seen. Together every pair of the symmetric half exactly once.
TEST(SimilarityHost, FusedScheduleCoversEveryPairOnce) {
  struct shape {
    std::int64_t n, strip, seed, chunk;
  };
  for (const shape c :
       {shape{2333, 128, 256, 512}, shape{1000000, 0, 0, 0}, shape{20000, 2048, 8192, 4096},
        shape{8192 + 4095, 0, 0, 0}, shape{8192 + 4096, 0, 0, 0}, shape{300, 128, 128, 256}}) {
    g::detail::fused_topk_sizes z;
    z.strip_rows = c.strip;
    z.seed_rows = c.seed;
    z.chunk_cols = c.chunk;
    fused_sizes_scope scope(z);
    const auto L = g::detail::fused_topk_shape(c.n, 32, 0, g::detail::fused_widest_chunk);
    const std::string at = "n " + std::to_string(c.n) + ", P " + std::to_string(L.P) + ", S " +
                           std::to_string(L.S) + ", W " + std::to_string(L.W);
    std::int64_t pairs = 0;
    for (std::int64_t b = 0; b < L.blocks; ++b) {
      const std::int64_t bn = g::detail::fused_block_end(L, c.n, b) - b * L.S;
      pairs += bn * (bn - 1) / 2;
    }
    for (std::int64_t r0 = 0; r0 < c.n; r0 += L.P) {
      const std::int64_t rn = std::min(L.P, c.n - r0);
      const std::int64_t first = g::detail::fused_block_end(L, c.n, std::min(r0 / L.S, L.blocks - 1));
      ASSERT_LE(r0 + rn, first) << at << ": strip " << r0 << " reaches past its block";
      std::int64_t next = first;
      g::detail::for_each_fused_chunk(L, c.n, r0, [&](std::int64_t c0, std::int64_t w) {
        EXPECT_EQ(c0, next) << at << ", strip " << r0 << ": chunks must be contiguous";
        EXPECT_GE(w, 1) << at;
        EXPECT_LE(w, L.W) << at;
        EXPECT_LE(w, c0) << at << ": a chunk no wider than the columns its rows have seen";
        next = c0 + w;
        pairs += rn * w;
      });
      EXPECT_EQ(next, c.n) << at << ", strip " << r0 << ": the chunks end at the last column";
    }
    EXPECT_EQ(pairs, c.n * (c.n - 1) / 2) << at;
  }
}

TEST(SimilarityHost, BarExchangeSchedule) {
  // The default: a worker sends at its strips 2, 4, 8, … and every max(16, strips / (16 · workers)).
  const auto L6 = g::detail::fused_topk_shape(1000000, 32, 0, g::detail::fused_widest_chunk);
  ASSERT_EQ(L6.P, 2048);
  const auto sends = [](const g::detail::fused_topk_layout& L, std::int64_t n, std::size_t w,
                        std::int64_t strips) {
    std::vector<std::int64_t> at;
    for (std::int64_t c = 1; c <= strips; ++c)
      if (g::detail::fused_exchange_due(c, L, n, w)) at.push_back(c);
    return at;
  };
  // 10^6 rows on two workers: 489 strips, 245 a worker; every 16 (489 / 32 = 15 → 16).
  std::vector<std::int64_t> want{2, 4, 8};
  for (std::int64_t c = 16; c <= 245; c += 16) want.push_back(c);
  EXPECT_EQ(sends(L6, 1000000, 2, 245), want);
  // 10^7 rows: 4,883 strips, every 4,883 / 32 = 152 (and the powers of two).
  const auto L7 = g::detail::fused_topk_shape(10000000, 32, 0, g::detail::fused_widest_chunk);
  const auto s7 = sends(L7, 10000000, 2, 2442);
  EXPECT_EQ(std::count_if(s7.begin(), s7.end(), [](std::int64_t c) { return c % 152 == 0; }), 2442 / 152);
  EXPECT_TRUE(std::find(s7.begin(), s7.end(), 1024) != s7.end());
  EXPECT_TRUE(std::find(s7.begin(), s7.end(), 160) == s7.end());
  // One worker never sends; the tests' knob: every strip.
  EXPECT_TRUE(sends(L6, 1000000, 1, 489).empty());
  g::detail::fused_topk_sizes z;
  z.exchange_every = 1;
  fused_sizes_scope scope(z);
  const auto L1 = g::detail::fused_topk_shape(1000000, 32, 0, g::detail::fused_widest_chunk);
  EXPECT_EQ(sends(L1, 1000000, 2, 30).size(), 30u);
  EXPECT_FALSE(g::detail::fused_exchange_due(0, L1, 1000000, 2));
}

TEST(SimilarityGpu, FusedTopKEveryMetricAgainstTheHost) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  if (!device_has_wgmma()) GTEST_SKIP() << "the fused top-k needs sm_90a code for this device (Hopper)";
  fused_case<__nv_bfloat16>("SimilarityGpu.Fused.bf16.cosine", similarity_metric::cosine, false, 32, 0, 0);
  fused_case<__half>("SimilarityGpu.Fused.half.ip", similarity_metric::inner_product, false, 10, 0, 0);
  fused_case<__nv_bfloat16>("SimilarityGpu.Fused.bf16.euclidean", similarity_metric::euclidean, false, 64, 0, 0);
  fused_case<float>("SimilarityGpu.Fused.tf32.cosine", similarity_metric::cosine, true, 16, 0, 0);
  // Lists of more than 64 places (three and four per lane of a warp).
  fused_case<__nv_bfloat16>("SimilarityGpu.Fused.bf16.cosine.k128", similarity_metric::cosine, false, 128, 0,
                            0);
  fused_case<__half>("SimilarityGpu.Fused.half.euclidean.k100", similarity_metric::euclidean, false, 100, 0,
                     0);
}

// Two workers on one device (devices {d, d}): each keeps lists of its own under worker 0's seeded
// bars, and collect merges them; both workers run strips. Checked against the host in double as on
// one worker, once with tiny buckets so that both workers recompute overflowed rows.
TEST(SimilarityGpu, FusedTopKTwoWorkersMergeTheirLists) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  if (!device_has_wgmma()) GTEST_SKIP() << "the fused top-k needs sm_90a code for this device (Hopper)";
  struct variant {
    const char* name;
    similarity_metric m;
    int k;
    std::int32_t cap_a, cap_b;
    std::int64_t exchange_every;  // 1: a bar exchange sent at every strip; 0: the default schedule
  };
  // Two workers on one GPU everywhere, {0, 1} where two GPUs are visible: the seed blocks are
  // dealt round robin (9 blocks of 256 rows here), so both workers seed, scan and swap bars, and
  // send each other their lists (at every strip in the first variant).
  for (const auto& devices : test::two_worker_lists()) {
    SCOPED_TRACE(test::list_name(devices));
    for (const variant v :
         {variant{"SimilarityGpu.FusedTwoWorkers.cosine", similarity_metric::cosine, 16, 0, 0, 1},
          variant{"SimilarityGpu.FusedTwoWorkers.euclidean", similarity_metric::euclidean, 7, 2, 1, 0},
          variant{"SimilarityGpu.FusedTwoWorkers.cosine.k128", similarity_metric::cosine, 128, 0, 0, 1}}) {
      const std::int64_t n = 2333, d = 100;
      auto rows = random_rows<__nv_bfloat16>(n, d, test::seed(v.name));
      const auto a = view(rows, n, d);
      g::detail::fused_topk_sizes z;
      z.strip_rows = 128;
      z.seed_rows = 256;
      z.chunk_cols = 512;
      z.row_capacity = v.cap_a;
      z.col_capacity = v.cap_b;
      z.exchange_every = v.exchange_every;
      fused_sizes_scope scope(z);
      g::similarity_options o;
      o.metric = v.m;
      o.devices = devices;
      g::pair_report rep;
      o.report = &rep;
      const auto r = g::similarity_topk(a, {v.k}, o);
      auto& hook = g::detail::fused_topk_hook();
      ASSERT_TRUE(hook.last_ran) << v.name << ": two named devices must take the fused path";
      ASSERT_EQ(rep.job.tasks_per_device.size(), 2u) << v.name;
      EXPECT_GT(rep.job.tasks_per_device[0], 0u) << v.name << ": worker 0 ran no strip";
      EXPECT_GT(rep.job.tasks_per_device[1], 0u) << v.name << ": worker 1 ran no strip";
      EXPECT_TRUE(rep.job.complete()) << v.name;
      if (v.cap_a > 0)
        EXPECT_GT(hook.last_recomputed_rows.load(), 0u) << v.name << ": tiny buckets must overflow";
      if (v.exchange_every == 1)
        EXPECT_GT(hook.last_exchanges.load(), 0) << v.name << ": a send at every strip, none read";
      check_topk(r, a, a, true, v.k, false, v.m, false, v.name);
      // An infinity in a block worker 1 seeds (block 3: rows 768..1023) and a NaN in a later block
      // worker 0 seeds (block 6): the first is named, whichever worker scanned it (the same shape
      // and devices as above: the fused path).
      rows[static_cast<std::size_t>(1601 * d + 9)] =
          __float2bfloat16_rn(std::numeric_limits<float>::quiet_NaN());
      rows[static_cast<std::size_t>(900 * d + 2)] =
          __float2bfloat16_rn(std::numeric_limits<float>::infinity());
      try {
        (void)g::similarity_topk(a, {v.k}, o);
        FAIL() << v.name << ": a non-finite row must be refused";
      } catch (const spillway::logic_error& e) {
        EXPECT_NE(std::string(e.what()).find("row 900 "), std::string::npos) << v.name << ": " << e.what();
      }
    }
  }
}

TEST(SimilarityGpu, FusedTopKOverflowedBucketsAreRecomputed) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  if (!device_has_wgmma()) GTEST_SKIP() << "the fused top-k needs sm_90a code for this device (Hopper)";
  fused_case<__nv_bfloat16>("SimilarityGpu.FusedOverflow.cosine", similarity_metric::cosine, false, 16, 2, 1);
  fused_case<__half>("SimilarityGpu.FusedOverflow.euclidean", similarity_metric::euclidean, false, 5, 1, 2);
  fused_case<__nv_bfloat16>("SimilarityGpu.FusedOverflow.cosine.k128", similarity_metric::cosine, false, 128,
                            2, 1);
}

TEST(SimilarityGpu, FusedTopKExactTiesGoToTheSmallerColumns) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  if (!device_has_wgmma()) GTEST_SKIP() << "the fused top-k needs sm_90a code for this device (Hopper)";
  // Every third row is one vector of small integers (exact in bf16, exact sums in float), so all
  // pairs among them score exactly 1 and the lists must hold the smallest such columns, across
  // blocks, strips and chunks. The other rows are random.
  const std::int64_t n = 1800, d = 64;
  const std::uint64_t seed = test::seed("SimilarityGpu.FusedTies");
  auto rows = random_rows<__nv_bfloat16>(n, d, seed);
  std::mt19937_64 gen(seed + 1);
  std::vector<float> v(static_cast<std::size_t>(d));
  for (auto& x : v) x = static_cast<float>(static_cast<int>(gen() % 5) - 2);
  v[0] = 3.0f;  // never all zero
  for (std::int64_t i = 0; i < n; i += 3)
    for (std::int64_t c = 0; c < d; ++c) rows[static_cast<std::size_t>(i * d + c)] = __float2bfloat16_rn(v[static_cast<std::size_t>(c)]);
  const auto a = view(rows, n, d);
  // One worker, then two exchanging their lists at every strip (a bar from the union of two lists
  // must keep the tie rule: a column below the bar's column at the bar's score still enters).
  std::vector<std::vector<int>> lists{{}};
  for (const auto& l : test::two_worker_lists()) lists.push_back(l);
  for (const auto& devices : lists) {
    SCOPED_TRACE(test::list_name(devices));
    g::detail::fused_topk_sizes z;
    z.strip_rows = 128;
    z.seed_rows = 256;
    z.chunk_cols = 384;
    z.exchange_every = 1;
    fused_sizes_scope scope(z);
    const int k = 12;
    g::similarity_options o;
    o.devices = devices;
    const auto r = g::similarity_topk(a, {k}, o);
    ASSERT_TRUE(g::detail::fused_topk_hook().last_ran);
    if (devices.size() == 2) EXPECT_GT(g::detail::fused_topk_hook().last_exchanges.load(), 0);
    for (std::int64_t i = 0; i < n; i += 3) {
      std::int64_t want = 0;
      for (int t = 0; t < k; ++t, want += 3) {
        if (want == i) want += 3;
        ASSERT_EQ(r.index(i, t), want) << "row " << i << " place " << t << " (seed " << seed << ")";
        ASSERT_EQ(r.value(i, t), r.value(i, 0)) << "row " << i << ": one exact score";
      }
      ASSERT_NEAR(r.value(i, 0), 1.0, eps_cos(d, false));
    }
    check_topk(r, a, a, true, k, false, similarity_metric::cosine, false, "ties");

    // A nonzero cosine_zero: row 2 (all zero) scores exactly 0.75 with every row, above any random
    // pair, so it is the first neighbour of every row without a duplicate (the multiples of 3 have
    // each other at 1, rows 4 and 5 each other), and its own list is the smallest columns.
    g::similarity_options oz = o;
    oz.cosine_zero = 0.75f;
    const auto rz = g::similarity_topk(a, {k}, oz);
    ASSERT_TRUE(g::detail::fused_topk_hook().last_ran);
    for (std::int64_t i = 0; i < n; ++i) {
      if (i == 2 || i == 4 || i == 5 || i % 3 == 0) continue;
      ASSERT_EQ(rz.index(i, 0), 2) << "row " << i;
      ASSERT_EQ(rz.value(i, 0), 0.75f) << "row " << i;
    }
    for (int t = 0; t < k; ++t) {
      ASSERT_EQ(rz.index(2, t), t < 2 ? t : t + 1) << "the zero row's list: ties to the smaller column";
      ASSERT_EQ(rz.value(2, t), 0.75f);
    }
  }
}

/// fused_union_bars_kernel against the host: per row two disjoint lists sorted best first (scores
/// from a few values, so ties across the lists are common; some lists part empty), bars raised to
/// the k-th place of their union and never lowered.
template <bool Larger>
void check_union_bars(int k, std::uint64_t seed) {
  using entry = spillway::pairwise::detail::topk_entry<float>;
  using bar = g::detail::topk_bar;
  const std::int64_t n = 3001;
  std::mt19937_64 gen(seed);
  const float worst = Larger ? -FLT_MAX : FLT_MAX;
  const auto better = [](const entry& x, const entry& y) {
    return (Larger ? x.v > y.v : x.v < y.v) || (x.v == y.v && x.c < y.c);
  };
  std::vector<entry> own(static_cast<std::size_t>(n * k)), other(own.size());
  std::vector<bar> bars(static_cast<std::size_t>(n)), want(bars.size());
  for (std::int64_t i = 0; i < n; ++i) {
    // 2k distinct columns dealt to the two lists, each keeping a random number of them.
    std::vector<entry> pool;
    for (int q = 0; q < 2 * k; ++q)
      pool.push_back({static_cast<float>(gen() % 7) * 0.25f, static_cast<std::int32_t>(q * 3 + gen() % 3)});
    std::vector<entry> a, b;
    for (const entry& e : pool) ((gen() & 1u) ? a : b).push_back(e);
    const auto fill = [&](std::vector<entry>& l, entry* dst) {
      if (gen() % 4 == 0 && !l.empty()) l.resize(gen() % l.size());  // a list not yet full
      std::sort(l.begin(), l.end(), better);
      if (l.size() > static_cast<std::size_t>(k)) l.resize(static_cast<std::size_t>(k));
      for (int t = 0; t < k; ++t)
        dst[t] = t < static_cast<int>(l.size()) ? l[static_cast<std::size_t>(t)] : entry{worst, INT_MAX};
    };
    fill(a, own.data() + i * k);
    fill(b, other.data() + i * k);
    std::vector<entry> u(own.begin() + i * k, own.begin() + (i + 1) * k);
    u.insert(u.end(), other.begin() + i * k, other.begin() + (i + 1) * k);
    std::sort(u.begin(), u.end(), better);
    const bar nb{Larger ? u[static_cast<std::size_t>(k - 1)].v : -u[static_cast<std::size_t>(k - 1)].v,
                 u[static_cast<std::size_t>(k - 1)].c};
    // The old bar: below, at or above the union's place.
    const int how = static_cast<int>(gen() % 3);
    const bar ob = how == 0   ? bar{nb.key - 1.0f, 0}
                   : how == 1 ? bar{nb.key, nb.col < INT_MAX ? nb.col + 1 : INT_MAX}
                              : bar{nb.key + 0.5f, 7};
    bars[static_cast<std::size_t>(i)] = ob;
    want[static_cast<std::size_t>(i)] = (nb.key > ob.key || (nb.key == ob.key && nb.col < ob.col)) ? nb : ob;
  }
  stream s;
  auto d_own = device_buffer<entry>::from_host(own, s.view());
  auto d_other = device_buffer<entry>::from_host(other, s.view());
  auto d_bars = device_buffer<bar>::from_host(bars, s.view());
  g::detail::fused_union_bars_kernel<Larger>
      <<<7, 128, 0, s.view().value()>>>(d_own.data(), d_other.data(), n, k, d_bars.data());
  SPILLWAY_CHECK_LAUNCH();
  const auto got = d_bars.to_host(s.view());
  for (std::int64_t i = 0; i < n; ++i) {
    const bar& x = got[static_cast<std::size_t>(i)];
    const bar& y = want[static_cast<std::size_t>(i)];
    ASSERT_TRUE(x.key == y.key && x.col == y.col)
        << "row " << i << " k " << k << " larger " << Larger << ": got (" << x.key << ", " << x.col
        << ") want (" << y.key << ", " << y.col << ") (seed " << seed << ")";
  }
}

TEST(SimilarityGpu, FusedUnionBarsAreTheUnionsKthPlace) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const std::uint64_t seed = test::seed("SimilarityGpu.FusedUnionBars");
  for (const int k : {1, 2, 7, 32, 64, 100, 128}) {
    check_union_bars<true>(k, seed + static_cast<std::uint64_t>(k));
    check_union_bars<false>(k, seed + 100 + static_cast<std::uint64_t>(k));
  }
}

TEST(SimilarityGpu, FusedTopKCancelFailAndRefuse) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  if (!device_has_wgmma()) GTEST_SKIP() << "the fused top-k needs sm_90a code for this device (Hopper)";
  const std::int64_t n = 3000, d = 48;
  auto rows = random_rows<__nv_bfloat16>(n, d, test::seed("SimilarityGpu.FusedCancel"));
  const auto a = view(rows, n, d);
  g::detail::fused_topk_sizes z;
  z.strip_rows = 128;
  z.seed_rows = 512;
  fused_sizes_scope scope(z);
  // Cancelled after the first report that shows progress: fewer strips than all, flagged.
  g::similarity_options o;
  g::pair_report rep;
  o.report = &rep;
  o.progress = [](const spillway::progress_info& p) { return p.tasks_done == 0; };
  (void)g::similarity_topk(a, {8}, o);
  ASSERT_TRUE(g::detail::fused_topk_hook().last_ran);
  EXPECT_TRUE(rep.job.cancelled);
  EXPECT_LT(rep.job.tasks_completed, rep.job.tasks_total);
  // A throwing callback: pipeline_error as every pair job gives it (the callback, not a strip,
  // failed: no task named), with the original message.
  o.progress = [](const spillway::progress_info& p) -> bool {
    if (p.tasks_done > 0) throw std::runtime_error("stop here");
    return true;
  };
  try {
    (void)g::similarity_topk(a, {8}, o);
    FAIL() << "the callback's exception must surface";
  } catch (const spillway::pipeline_error& e) {
    EXPECT_EQ(e.failed_task(), spillway::pipeline_error::no_task) << e.what();
    EXPECT_NE(std::string(e.what()).find("progress callback"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("stop here"), std::string::npos) << e.what();
    EXPECT_LT(e.report().tasks_completed, e.report().tasks_total);
  }
  // A NaN in a late block is named by its row, in host and in device memory.
  rows[static_cast<std::size_t>(2711 * d + 3)] = __float2bfloat16_rn(std::numeric_limits<float>::quiet_NaN());
  for (int on_device = 0; on_device < 2; ++on_device) {
    spillway::stream s;
    device_buffer<__nv_bfloat16> dev(rows.size(), s.view());
    dev.copy_from_host_async(cuda::std::span<const __nv_bfloat16>(rows.data(), rows.size()), s.view());
    s.synchronize();
    const auto src = on_device ? g::row_major(static_cast<const __nv_bfloat16*>(dev.data()), n, d) : a;
    try {
      (void)g::similarity_topk(src, {8});
      FAIL() << "a NaN row must be refused";
    } catch (const spillway::logic_error& e) {
      EXPECT_NE(std::string(e.what()).find("row 2711 "), std::string::npos) << e.what();
    }
  }
}

TEST(SimilarityGpu, InCoreAndOutOfCoreStreamedManyStrips) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const std::int64_t n = 1500, d = 250, ld = 257;  // odd leading dimension on the host
  const auto rows = random_rows<__nv_bfloat16>(n, d, test::seed("SimilarityGpu.InOutOfCore"), ld);
  const auto a = view(rows, n, d, ld);
  // A budget below the resident operand at 32-row strips: the planner must stream A.
  spillway::pairwise::pair_plan_request req;
  req.rows_a = req.rows_b = n;
  req.row_bytes = 256 * 2;  // d padded to 16 bytes
  req.sink =
      spillway::pairwise::detail::topk_sink<float>(spillway::pairwise::topk_options{10, false}).footprint();
  req.max_panel_rows = 32;
  req.score_scratch = true;
  const std::size_t budget = spillway::pairwise::detail::plan_for(req, 32, false).total_bytes() + 1024;
  ASSERT_LT(budget, spillway::pairwise::detail::plan_for(req, 32, true).total_bytes());
  g::similarity_options o;
  o.budget = memory_budget(budget);
  o.max_panel_rows = 32;
  g::pair_report rep;
  o.report = &rep;
  const auto ooc = g::similarity_topk(a, {10}, o);
  EXPECT_FALSE(rep.plan.resident);
  EXPECT_GE(rep.plan.strips, 9);
  check_topk(ooc, a, a, true, 10, false, similarity_metric::cosine, false, "out of core");

  // In core: the same rows in device memory (with the same odd ld).
  spillway::stream s;
  device_buffer<__nv_bfloat16> dev(rows.size(), s.view());
  dev.copy_from_host_async(cuda::std::span<const __nv_bfloat16>(rows.data(), rows.size()), s.view());
  s.synchronize();
  g::similarity_options oi;
  oi.max_panel_rows = 256;
  g::pair_report rep_in;
  oi.report = &rep_in;
  const auto inc = g::similarity_topk(g::row_major(static_cast<const __nv_bfloat16*>(dev.data()), n, d, ld), {10}, oi);
  EXPECT_EQ(rep_in.job.bytes_moved, std::size_t{0}) << "in core copies no rows";
  check_topk(inc, a, a, true, 10, false, similarity_metric::cosine, false, "in core");
  // The two agree within the bound (2 eps between any two GPU values of one pair).
  const double e = eps_cos(d, false);
  for (std::int64_t i = 0; i < n; ++i)
    for (int t = 0; t < 10; ++t) ASSERT_NEAR(inc.value(i, t), ooc.value(i, t), 2 * e) << i << "," << t;

  // A·Bᵀ dense, in core and streamed, against the host.
  const std::int64_t nb = 333;
  const auto brows = random_rows<__nv_bfloat16>(nb, d, test::seed("SimilarityGpu.InOutOfCore.B"), ld);
  const auto b = view(brows, nb, d, ld);
  std::vector<float> out(static_cast<std::size_t>(n * nb));
  poison(out);
  g::similarity_options ob;
  ob.metric = similarity_metric::inner_product;
  ob.max_panel_rows = 100;  // 15 strips
  ob.budget = memory_budget(std::size_t{4} << 20);
  EXPECT_TRUE(g::similarity_dense(a, b, out.data(), nb, ob).complete());
  for (std::int64_t i = 0; i < n; i += 7)
    for (std::int64_t j = 0; j < nb; ++j)
      ASSERT_NEAR(out[static_cast<std::size_t>(i * nb + j)], g::host_similarity_score(a, b, i, j, ob.metric),
                  pair_eps(a, b, i, j, ob.metric, false))
          << i << "," << j;
  device_buffer<__nv_bfloat16> devb(brows.size(), s.view());
  devb.copy_from_host_async(cuda::std::span<const __nv_bfloat16>(brows.data(), brows.size()), s.view());
  s.synchronize();
  std::vector<float> out_in(out.size());
  poison(out_in);
  g::similarity_options obi;
  obi.metric = ob.metric;
  EXPECT_TRUE(g::similarity_dense(g::row_major(static_cast<const __nv_bfloat16*>(dev.data()), n, d, ld),
                                  g::row_major(static_cast<const __nv_bfloat16*>(devb.data()), nb, d, ld), out_in.data(), nb, obi)
                  .complete());
  for (std::size_t q = 0; q < out.size(); ++q) {
    const std::int64_t i = static_cast<std::int64_t>(q) / nb, j = static_cast<std::int64_t>(q) % nb;
    ASSERT_NEAR(out_in[q], out[q], 2 * pair_eps(a, b, i, j, ob.metric, false)) << i << "," << j;
  }
}

TEST(SimilarityGpu, ABtTopKEuclideanFloatTf32) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const std::int64_t na = 517, nb = 1203, d = 131;
  const auto ar = random_rows<float>(na, d, test::seed("SimilarityGpu.ABtEuclid.A"));
  const auto br = random_rows<float>(nb, d, test::seed("SimilarityGpu.ABtEuclid.B"));
  const auto a = view(ar, na, d);
  const auto b = view(br, nb, d);
  for (bool tf32 : {false, true}) {
    g::similarity_options o;
    o.metric = similarity_metric::euclidean;
    o.gemm.math = tf32 ? g::math_mode::tf32 : g::math_mode::exact;
    o.max_panel_rows = 128;
    const auto r = g::similarity_topk(a, b, {32}, o);
    check_topk(r, a, b, false, 32, false, similarity_metric::euclidean, tf32, tf32 ? "euclidean tf32" : "euclidean exact");
  }
}

TEST(SimilarityGpu, ThresholdUpperBothHalvesAndABt) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const std::int64_t n = 700, d = 48;
  const auto rows = random_rows<__half>(n, d, test::seed("SimilarityGpu.Threshold"));
  const auto a = view(rows, n, d);
  const double e = eps_cos(d, false);
  for (bool both : {false, true}) {
    g::threshold_options t;
    t.threshold = 0.3;
    t.both_halves = both;
    g::similarity_options o;
    o.max_panel_rows = 96;
    const auto r = g::similarity_threshold(a, t, o);
    // Every pair clearly above the threshold is kept, none clearly below; values within eps; sorted.
    std::vector<char> kept(static_cast<std::size_t>(n * n), 0);
    for (std::size_t q = 0; q < r.size(); ++q) {
      const std::int64_t i = r.row[q], j = r.col[q];
      if (q > 0) ASSERT_TRUE(r.row[q - 1] < i || (r.row[q - 1] == i && r.col[q - 1] < j)) << "COO sorted at " << q;
      ASSERT_NE(i, j) << "the diagonal is excluded by default";
      if (!both) ASSERT_LT(i, j);
      ASSERT_NEAR(r.value[q], g::host_similarity_score(a, a, i, j, similarity_metric::cosine), e);
      kept[static_cast<std::size_t>(i * n + j)] = 1;
    }
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = both ? 0 : i + 1; j < n; ++j) {
        if (i == j) continue;
        const double h = g::host_similarity_score(a, a, i, j, similarity_metric::cosine);
        if (h > t.threshold + e) ASSERT_TRUE(kept[static_cast<std::size_t>(i * n + j)]) << i << "," << j << " " << h;
        if (h < t.threshold - e) ASSERT_FALSE(kept[static_cast<std::size_t>(i * n + j)]) << i << "," << j << " " << h;
      }
  }
  // A·Bᵀ, Euclidean keeps distances ≤ the threshold.
  const auto br = random_rows<__half>(211, d, test::seed("SimilarityGpu.Threshold.B"));
  const auto b = view(br, 211, d);
  g::threshold_options t;
  t.threshold = 8.0;
  g::similarity_options o;
  o.metric = similarity_metric::euclidean;
  o.max_panel_rows = 64;
  const auto r = g::similarity_threshold(a, b, t, o);
  std::vector<char> kept(static_cast<std::size_t>(n * 211), 0);
  for (std::size_t q = 0; q < r.size(); ++q) kept[static_cast<std::size_t>(r.row[q] * 211 + r.col[q])] = 1;
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < 211; ++j) {
      const double h = g::host_similarity_score(a, b, i, j, similarity_metric::euclidean);
      const double pe = pair_eps(a, b, i, j, similarity_metric::euclidean, false);
      if (h < t.threshold - pe) ASSERT_TRUE(kept[static_cast<std::size_t>(i * 211 + j)]) << i << "," << j;
      if (h > t.threshold + pe) ASSERT_FALSE(kept[static_cast<std::size_t>(i * 211 + j)]) << i << "," << j;
    }
}

TEST(SimilarityGpu, NonFiniteRowsAreRefusedByIndex) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const std::int64_t n = 100, d = 33;
  auto rows = random_rows<float>(n, d, test::seed("SimilarityGpu.NaN"));
  rows[static_cast<std::size_t>(7 * d + 5)] = std::numeric_limits<float>::quiet_NaN();
  rows[static_cast<std::size_t>(60 * d)] = std::numeric_limits<float>::infinity();
  const auto a = view(rows, n, d);
  std::vector<float> out(static_cast<std::size_t>(g::layout_size(triangle_layout::upper_packed, n)), 1.5f);
  try {
    (void)g::similarity_dense(a, out.data(), triangle_layout::upper_packed);
    FAIL() << "a NaN row must be refused";
  } catch (const spillway::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("row 7 "), std::string::npos) << e.what();
  }
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float v) { return v == 1.5f; })) << "output untouched";
  // In core: the device scan names the same row.
  spillway::stream s;
  device_buffer<float> dev(rows.size(), s.view());
  dev.copy_from_host_async(cuda::std::span<const float>(rows.data(), rows.size()), s.view());
  s.synchronize();
  try {
    (void)g::similarity_topk(g::row_major(static_cast<const float*>(dev.data()), n, d), {4});
    FAIL() << "a NaN row must be refused in core too";
  } catch (const spillway::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("row 7 "), std::string::npos) << e.what();
  }
  // Opting out computes anyway (scores of those rows are NaN; the others are fine).
  g::similarity_options o;
  o.check_finite = false;
  EXPECT_NO_THROW((void)g::similarity_dense(a, out.data(), triangle_layout::upper_packed, o));
  EXPECT_NEAR(out[static_cast<std::size_t>(spillway::pairwise::packed_row_offset(n, 0) + 1)],
              g::host_similarity_score(a, a, 0, 1, similarity_metric::cosine), eps_cos(d, false));
}

TEST(SimilarityGpu, DeviceStripsEqualTheHostStrips) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const std::int64_t n = 640, d = 64;
  const auto rows = random_rows<__nv_bfloat16>(n, d, test::seed("SimilarityGpu.Strips"));
  const auto a = view(rows, n, d);
  g::similarity_options o;
  o.max_panel_rows = 100;
  std::vector<float> host_form(static_cast<std::size_t>(n * n));
  poison(host_form);
  std::mutex m;
  (void)g::similarity_strips(a, [&](const g::similarity_strip& st) {
    std::lock_guard<std::mutex> l(m);
    for (std::int64_t i = st.first_row; i < st.first_row + st.rows; ++i)
      for (std::int64_t j = st.first_col; j < st.first_col + st.cols; ++j) host_form[static_cast<std::size_t>(i * n + j)] = st.at(i, j);
  }, o);
  spillway::stream s;
  device_buffer<float> dev(static_cast<std::size_t>(n * n), s.view());
  dev.fill_bytes_async(0xFF, s.view());
  s.synchronize();
  // dev lives on the current device (0); with two GPUs the strips of device 1 go over by a 2-D peer
  // copy on the strip's own stream.
  const int dst_device = spillway::current_device();
  (void)g::similarity_device_strips(a, [&](const g::similarity_device_strip& st) { st.copy_to(dev.data(), n, dst_device); }, o);
  const auto got = dev.to_host(s.view());
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = i; j < n; ++j) {
      const auto q = static_cast<std::size_t>(i * n + j);
      ASSERT_FALSE(std::isnan(got[q])) << i << "," << j;
      ASSERT_EQ(std::memcmp(&got[q], &host_form[q], 4), 0) << i << "," << j << ": one GEMM, two deliveries";
      ASSERT_NEAR(got[q], g::host_similarity_score(a, a, i, j, similarity_metric::cosine), eps_cos(d, false));
    }
}

TEST(SimilarityNoGpu, HostFallbackAndRefusal) {
  if (spillway::device_count() > 0) GTEST_SKIP() << "this machine has a GPU; the no-GPU behaviour is tested in CI";
  const std::int64_t n = 50, d = 20;
  const auto rows = random_rows<float>(n, d, test::seed("SimilarityNoGpu"));
  const auto a = view(rows, n, d);
  EXPECT_THROW((void)g::similarity_topk(a, {5}), spillway::no_gpu_error);
  g::similarity_options o;
  o.host_fallback = true;
  const auto r = g::similarity_topk(a, {5}, o);
  const auto h = g::host_similarity_topk(a, {5});
  EXPECT_EQ(r.indices, h.indices);
  EXPECT_EQ(r.values, h.values);
}

// Pageable host rows are page-locked for the call (similarity_options::lock): the fused top-k
// (bf16 rows, A·Aᵀ, on Hopper), the strip path's top-k (float rows, A·Bᵀ) and threshold. With
// `never` they stay pageable. Each result matches the host; top-k lists are the same with and
// without the registration (same kernels on the same rows); no registration outlives its call;
// rows the caller page-locked are not registered again.
TEST(SimilarityGpu, PageableRowsPageLockedForTheCall) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  using spillway::page_lock;
  const std::int64_t n = 600, nb = 257, d = 96;
  const auto r16 = random_rows<__nv_bfloat16>(n, d, test::seed("SimilarityGpu.PageLock.bf16"));
  const auto ra = random_rows<float>(n, d, test::seed("SimilarityGpu.PageLock.a"));
  const auto rb = random_rows<float>(nb, d, test::seed("SimilarityGpu.PageLock.b"));
  const auto a16 = view(r16, n, d);
  const auto a = view(ra, n, d);
  const auto b = view(rb, nb, d);
  std::vector<g::topk_result<float>> sym, rect;
  for (page_lock lk : {page_lock::automatic, page_lock::never, page_lock::always}) {
    const bool want = lk != page_lock::never;
    const std::string what = std::string("lock ") +
                             (lk == page_lock::never ? "never" : lk == page_lock::always ? "always" : "automatic");
    g::similarity_options o;
    o.lock = lk;
    o.max_panel_rows = 128;
    g::pair_report rep;
    o.report = &rep;
    sym.push_back(g::similarity_topk(a16, {16}, o));
    EXPECT_EQ(rep.a_registered, want) << what << ", bf16 A·Aᵀ top-k";
    EXPECT_FALSE(rep.b_registered) << what;
    EXPECT_FALSE(is_page_locked(r16.data())) << what << ": still page-locked after the call";
    check_topk(sym.back(), a16, a16, true, 16, false, similarity_metric::cosine, false, what.c_str());
    rep = g::pair_report{};
    rect.push_back(g::similarity_topk(a, b, {8}, o));
    EXPECT_EQ(rep.a_registered, want) << what << ", float A·Bᵀ top-k";
    EXPECT_EQ(rep.b_registered, want) << what << ", float A·Bᵀ top-k";
    EXPECT_FALSE(is_page_locked(ra.data()) || is_page_locked(rb.data())) << what << ": still page-locked";
    check_topk(rect.back(), a, b, false, 8, false, similarity_metric::cosine, false, what.c_str());
    rep = g::pair_report{};
    g::threshold_options t;
    t.threshold = 0.25;
    const auto coo = g::similarity_threshold(a, t, o);
    EXPECT_EQ(rep.a_registered, want) << what << ", float threshold";
    const double e = eps_cos(d, false);
    std::size_t expected_sure = 0;
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = i + 1; j < n; ++j)
        if (g::host_similarity_score(a, a, i, j, similarity_metric::cosine) > t.threshold + e) ++expected_sure;
    EXPECT_GE(coo.size(), expected_sure) << what;
    for (std::size_t q = 0; q < coo.size(); ++q) {
      ASSERT_LT(coo.row[q], coo.col[q]) << what << " entry " << q;
      ASSERT_GE(coo.value[q], t.threshold) << what << " entry " << q;
      ASSERT_NEAR(coo.value[q], g::host_similarity_score(a, a, coo.row[q], coo.col[q], similarity_metric::cosine), e)
          << what << " entry " << q;
    }
  }
  for (std::size_t i = 1; i < sym.size(); ++i) {
    EXPECT_EQ(sym[i].indices, sym[0].indices) << "bf16 top-k lists differ with page-locked rows";
    EXPECT_EQ(rect[i].indices, rect[0].indices) << "float A·Bᵀ top-k lists differ with page-locked rows";
  }
  // Rows the caller page-locked: used as they are, not registered again.
  {
    const host_registration mine(const_cast<float*>(ra.data()), ra.size() * sizeof(float));
    g::similarity_options o;
    g::pair_report rep;
    o.report = &rep;
    const auto r = g::similarity_topk(a, b, {8}, o);
    EXPECT_FALSE(rep.a_registered) << "page-locked rows registered again";
    EXPECT_TRUE(rep.b_registered);
    EXPECT_TRUE(is_page_locked(ra.data())) << "the caller's registration was undone";
    EXPECT_EQ(r.indices, rect[0].indices);
  }
}

}  // namespace
