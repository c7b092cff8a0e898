// The fused top-k's sizes for one test (similarity::detail::fused_topk_hook().sizes), restored to
// the defaults after it: shared by the similarity suite's fused and binary-mode tests.
#pragma once

#include <spillway/similarity/detail/topk_fused.cuh>

#include <cstdint>

namespace spillway::test {

/// Small blocks (256 rows), strips (128) and chunks (≤ 512 columns), so that a few thousand rows
/// run every part of the job; bucket capacities cap_a / cap_b (0: the defaults).
inline similarity::detail::fused_topk_sizes small_fused_sizes(std::int32_t cap_a, std::int32_t cap_b) {
  similarity::detail::fused_topk_sizes z;
  z.strip_rows = 128;
  z.seed_rows = 256;
  z.chunk_cols = 512;
  z.row_capacity = cap_a;
  z.col_capacity = cap_b;
  return z;
}

struct fused_sizes_scope {
  explicit fused_sizes_scope(const similarity::detail::fused_topk_sizes& z) {
    similarity::detail::fused_topk_hook().sizes = z;
  }
  ~fused_sizes_scope() { similarity::detail::fused_topk_hook().sizes = {}; }
  fused_sizes_scope(const fused_sizes_scope&) = delete;
  fused_sizes_scope& operator=(const fused_sizes_scope&) = delete;
};

}  // namespace spillway::test
