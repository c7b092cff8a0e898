// The binary-quantized approximate top-k (similarity_topk_binary; similarity/detail/binary_topk.cuh)
// against a host reference of the same definition: each row's candidates are its kc nearest rows
// by the Hamming distance of the sign bits (x > 0), ties to the smaller column — exact integers,
// so the device's candidate sets must equal the host's — and the k best of them by exact cosine.
// Random normal rows (printed seeds) with exact ties planted: row 2 all zero, rows 4 and 5 copies
// of row 3, row 6 one repeated positive value (every sign bit set). The job's sizes are shrunk
// (fused_topk_sizes) so that many seed blocks, strips and chunks run, and with tiny buckets the
// overflowed rows are recomputed over their words.
//
// Scores: a float dot product of d terms rescored on the CUDA cores is within d·u·|a|·|b| of the
// exact one (u = 2^-24; bf16 and half products are exact in float), a cosine within (2d + 8)·u;
// the check allows eps = 4(d + 8)·u per score, 2·eps on the k-th place (as similarity_test.cu).
#include <spillway/similarity/similarity.cuh>

#include <support/expect_throw.hpp>
#include <support/gpu_test.hpp>

#include "fused_sizes_scope.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bitset>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace spillway;
namespace g = spillway::similarity;

template <class T>
T from_float(float x) {
  if constexpr (std::is_same_v<T, __half>)
    return __float2half_rn(x);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16_rn(x);
  else
    return x;
}
template <class T>
double to_double(T x) {
  if constexpr (std::is_same_v<T, __half>)
    return static_cast<double>(__half2float(x));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return static_cast<double>(__bfloat162float(x));
  else
    return static_cast<double>(x);
}

/// n x d normal rows with the planted ties (see the top of the file).
template <class T>
std::vector<T> planted_rows(std::int64_t n, std::int64_t d, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<T> v(static_cast<std::size_t>(n * d));
  for (auto& x : v) x = from_float<T>(nd(gen));
  for (std::int64_t c = 0; c < d; ++c) {
    v[static_cast<std::size_t>(2 * d + c)] = from_float<T>(0.0f);
    v[static_cast<std::size_t>(4 * d + c)] = v[static_cast<std::size_t>(3 * d + c)];
    v[static_cast<std::size_t>(5 * d + c)] = v[static_cast<std::size_t>(3 * d + c)];
    v[static_cast<std::size_t>(6 * d + c)] = from_float<T>(0.75f);
  }
  return v;
}

/// The host reference: per row its candidate columns (Hamming order, ties to the smaller column)
/// and the exact cosines.
template <class T>
struct host_binary {
  std::int64_t n, d;
  std::vector<std::vector<std::int64_t>> cand;
  std::vector<double> norm;
  const std::vector<T>& x;

  host_binary(const std::vector<T>& rows, std::int64_t n_, std::int64_t d_, int kc) : n(n_), d(d_), x(rows) {
    const std::int64_t words = (d + 63) / 64;
    std::vector<std::uint64_t> sign(static_cast<std::size_t>(n * words), 0);
    norm.assign(static_cast<std::size_t>(n), 0.0);
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t c = 0; c < d; ++c) {
        const double v = to_double(x[static_cast<std::size_t>(i * d + c)]);
        norm[static_cast<std::size_t>(i)] += v * v;
        if (v > 0.0) sign[static_cast<std::size_t>(i * words + c / 64)] |= std::uint64_t{1} << (c % 64);
      }
    for (auto& v : norm) v = std::sqrt(v);
    cand.resize(static_cast<std::size_t>(n));
    std::vector<std::pair<int, std::int64_t>> hj;
    for (std::int64_t i = 0; i < n; ++i) {
      hj.clear();
      for (std::int64_t j = 0; j < n; ++j) {
        if (j == i) continue;
        int h = 0;
        for (std::int64_t w = 0; w < words; ++w)
          h += static_cast<int>(std::bitset<64>(sign[static_cast<std::size_t>(i * words + w)] ^
                                                sign[static_cast<std::size_t>(j * words + w)])
                                    .count());
        hj.emplace_back(h, j);
      }
      const auto m = std::min<std::size_t>(static_cast<std::size_t>(kc), hj.size());
      std::partial_sort(hj.begin(), hj.begin() + static_cast<std::ptrdiff_t>(m), hj.end());
      for (std::size_t q = 0; q < m; ++q) cand[static_cast<std::size_t>(i)].push_back(hj[q].second);
    }
  }
  [[nodiscard]] double cosine(std::int64_t i, std::int64_t j) const {
    const double ni = norm[static_cast<std::size_t>(i)], nj = norm[static_cast<std::size_t>(j)];
    if (ni == 0.0 || nj == 0.0) return 0.0;  // cosine_zero
    double s = 0.0;
    for (std::int64_t c = 0; c < d; ++c)
      s += to_double(x[static_cast<std::size_t>(i * d + c)]) *
           to_double(x[static_cast<std::size_t>(j * d + c)]);
    return s / (ni * nj);
  }
};

bool device_has_wgmma() {
  return (tile::build_features(current_device()) & tile::feature_wgmma) != 0;
}

/// One job against the host: every listed column a candidate of its row, within 2·eps of the best
/// k among the candidates, sorted (ties to the smaller column), no duplicates; with k = kc the
/// listed set is the candidate set itself.
template <class T>
void check_binary(std::int64_t n, std::int64_t d, int k, int kc, std::int32_t cap_a, std::int32_t cap_b,
                  const char* name) {
  SCOPED_TRACE(std::string(name) + " n " + std::to_string(n) + " d " + std::to_string(d) + " k " +
               std::to_string(k) + " kc " + std::to_string(kc));
  const auto rows = planted_rows<T>(n, d, test::seed(name));
  test::fused_sizes_scope scope(test::small_fused_sizes(cap_a, cap_b));
  const auto r = g::similarity_topk_binary(g::row_major(rows.data(), n, d, d), {k}, {}, kc);
  const host_binary<T> h(rows, n, d, kc);
  const double eps = 4.0 * static_cast<double>(d + 8) * std::ldexp(1.0, -24);
  ASSERT_EQ(r.rows, n);
  ASSERT_EQ(r.k, k);
  for (std::int64_t i = 0; i < n; ++i) {
    const auto& c = h.cand[static_cast<std::size_t>(i)];
    std::vector<double> sc;
    for (const std::int64_t j : c) sc.push_back(h.cosine(i, j));
    std::vector<double> sorted = sc;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    const int kk = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(k), c.size()));
    const double kth = sorted[static_cast<std::size_t>(kk - 1)];
    std::vector<std::int64_t> listed;
    for (int t = 0; t < k; ++t) {
      const std::int64_t j = r.index(i, t);
      if (t >= kk) {
        ASSERT_EQ(j, -1) << "row " << i << " place " << t;
        continue;
      }
      const auto at = std::find(c.begin(), c.end(), j);
      ASSERT_TRUE(at != c.end()) << "row " << i << " place " << t << ": column " << j
                                 << " is not a candidate";
      ASSERT_EQ(std::count(listed.begin(), listed.end(), j), 0) << "row " << i << " lists " << j << " twice";
      listed.push_back(j);
      const double hv = sc[static_cast<std::size_t>(at - c.begin())];
      ASSERT_NEAR(r.value(i, t), hv, eps) << "row " << i << " column " << j;
      ASSERT_GE(hv, kth - 2 * eps) << "row " << i << " column " << j << " is not among the best " << k
                                   << " candidates";
      if (t > 0) {
        ASSERT_GE(r.value(i, t - 1), r.value(i, t)) << "row " << i << ": not sorted at " << t;
        if (r.value(i, t - 1) == r.value(i, t))
          ASSERT_LT(r.index(i, t - 1), j) << "row " << i << ": tie order";
      }
    }
    if (k == kc) {
      std::vector<std::int64_t> a = listed, b = c;
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      ASSERT_EQ(a, b) << "row " << i << ": with k = kc the list is the candidate set";
    }
  }
}

TEST(SimilarityBinaryGpu, CandidatesAndRescoringEqualTheHost) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  if (!device_has_wgmma()) GTEST_SKIP() << "the binary mode needs sm_90a code for this device (Hopper)";
  // d = 100: a partial last word, rows not 16-byte loadable (the scalar rescoring); d = 256: the
  // 16-byte loads; k = kc: the candidate sets compared whole; kc = 100, 128: 128-place lists.
  check_binary<__nv_bfloat16>(2333, 100, 32, 128, 0, 0, "SimilarityBinary.bf16.d100");
  check_binary<__nv_bfloat16>(1500, 256, 64, 64, 0, 0, "SimilarityBinary.bf16.k=kc");
  check_binary<__half>(1200, 96, 5, 100, 0, 0, "SimilarityBinary.half.kc100");
  check_binary<float>(1000, 64, 16, 128, 0, 0, "SimilarityBinary.float");
  // Tiny buckets: overflowed rows recomputed over their sign words.
  check_binary<__nv_bfloat16>(2333, 100, 128, 128, 2, 1, "SimilarityBinary.overflow.k=kc");
  // Fewer rows than candidates: every other row is one, the rest of the places empty.
  check_binary<__nv_bfloat16>(40, 48, 8, 64, 0, 0, "SimilarityBinary.few rows");
}

TEST(SimilarityBinary, RefusesBeforeAnyDeviceWork) {
  // Refused before a device is asked for: these run on a machine without a GPU too.
  std::vector<float> rows(8 * 16, 1.0f);
  const auto a = g::row_major(rows.data(), 8, 16, 16);
  using test::expect_throw_naming;
  expect_throw_naming([&] { (void)g::similarity_topk_binary(a, {4}, {}, 3); },
                      {"candidates must be in [k = 4, 128], got 3"});
  expect_throw_naming([&] { (void)g::similarity_topk_binary(a, {4}, {}, 129); }, {"got 129"});
  expect_throw_naming([&] { (void)g::similarity_topk_binary(a, {4, true}); }, {"include_diagonal"});
  g::similarity_options o;
  o.metric = g::similarity_metric::euclidean;
  expect_throw_naming([&] { (void)g::similarity_topk_binary(a, {4}, o); },
                      {"the metric must be cosine, got euclidean"});
  expect_throw_naming([&] { (void)g::similarity_topk_binary(a, {0}); }, {"k must be in [1, 128], got 0"});
}

}  // namespace
