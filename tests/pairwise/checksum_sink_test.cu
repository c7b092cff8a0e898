// The checksum sink of the pair job (pairwise/sinks/checksum.cuh, what the out-of-core benchmarks
// time as a job's bare compute): it must see every count of the upper triangle exactly once, on
// every Gram kernel path — the wgmma kernel's register epilogue and the per-element one.
#include <spillway/gram.cuh>

#include <support/gpu_test.hpp>
#include <support/random_bits.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace {

using namespace spillway;
using namespace spillway::gram;

using spillway::test::random_bit_bytes;

// The checksum sink (what the benchmarks time as the bare compute) sums the counts of the upper
// triangle with the diagonal: Σ over columns of m(m + 1)/2, m the column's ones.
TEST(PairwiseChecksumGpu, SumsTheUpperTriangleCounts) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto seed = test::seed("checksum-sink");
  const std::int64_t n = 2100, cols = 4100;
  const auto bits = random_bit_bytes(n, cols, 0.4, seed);
  const bit_matrix a = pack_bits(bits, n, cols);
  unsigned long long want = 0;
  for (std::int64_t c = 0; c < cols; ++c) {
    unsigned long long m = 0;
    for (std::int64_t r = 0; r < n; ++r) m += bits[static_cast<std::size_t>(r * cols + c)];
    want += m * (m + 1) / 2;
  }
  for (kernel_path path : {kernel_path::automatic, kernel_path::mma_sync, kernel_path::popc}) {
    gram_options o;
    o.max_panel_rows = 256;
    o.devices = {0};
    o.path = path;
    auto job = gram::detail::make_job<std::int32_t>(a.view(), nullptr, o,
                                                    pairwise::detail::checksum_sink<std::int32_t>{});
    gram::detail::run_gram_job(job);
    EXPECT_EQ(job.sink.collect(job), want) << "path " << static_cast<int>(path);
  }
}

}  // namespace
