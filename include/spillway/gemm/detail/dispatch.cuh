// spillway/gemm/detail/dispatch.cuh — from a checked, canonical problem to kernel launches: the
// staging copy that gives the tensor-core launchers their preconditions, split-K (a batched
// problem over k slices into an accumulator workspace, then a reduce pass with α/β and the
// epilogue), the k = 0 pass, and the choice among the four launchers. Everything is enqueued on
// the caller's stream; nothing synchronizes; temporaries (staged operands, the split-K workspace)
// come from the device's pool and are freed in stream order, unless the caller lends the
// workspace (lent_workspace: the out-of-core GEMM's task slot). problem_workspace_bytes states
// what a problem's temporaries take (gemm_workspace_bytes).
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/device_buffer.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/gemm/detail/dmma_kernel.cuh>
#include <spillway/gemm/detail/mma_sync_kernel.cuh>
#include <spillway/gemm/detail/problem.hpp>
#include <spillway/gemm/detail/simt_kernel.cuh>
#include <spillway/gemm/detail/validate.hpp>
#include <spillway/gemm/detail/wgmma_kernel.cuh>
#include <spillway/gemm/epilogue.hpp>
#include <spillway/gemm/matrix_view.hpp>
#include <spillway/gemm/options.hpp>
#include <spillway/tile/arch.cuh>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace spillway::gemm::detail {

static_assert(path_feature_mma == tile::feature_mma && path_feature_wgmma == tile::feature_wgmma,
              "validate.hpp repeats tile::build_features' bits");

/// Blocks for a grid-stride loop over `total` items of `per_block`: enough to fill the device a
/// few times over (16 waves of one block per SM), never more than the items need.
inline unsigned stride_grid(index_t total, int per_block, int device) {
  return grid_blocks(total, per_block, index_t{16} * multiprocessor_count(device));
}

// ---- staging copy --------------------------------------------------------------------------------

inline constexpr int stage_tile = 32;
inline constexpr int stage_rows_per_pass = 8;

/// dst (rows x k per batch entry, K-major, leading dimension dld >= k, columns [k, dld) zeroed) from
/// an operand in either major order. A 32 x 32 tile goes through shared memory so that both the
/// read (along the source's contiguous dimension) and the write (along k) are coalesced.
template <class T>
__global__ void __launch_bounds__(stage_tile* stage_rows_per_pass)
    stage_kmajor_kernel(const T* __restrict__ src, index_t ld, bool kmajor, index_t src_stride, index_t rows,
                        index_t k, index_t batch, T* __restrict__ dst, index_t dld, index_t dst_stride) {
  __shared__ T tile[stage_tile][stage_tile + 1];
  const index_t tiles_r = ceil_div(rows, stage_tile), tiles_k = ceil_div(dld, stage_tile);
  const index_t total = batch * tiles_r * tiles_k;
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  for (index_t t = blockIdx.x; t < total; t += gridDim.x) {
    const index_t q = t / (tiles_r * tiles_k);
    const index_t r0 = (t / tiles_k) % tiles_r * stage_tile, k0 = t % tiles_k * stage_tile;
    const T* s = src + q * src_stride;
    T* d = dst + q * dst_stride;
    if (kmajor) {
      for (int y = ty; y < stage_tile; y += stage_rows_per_pass) {
        const index_t r = r0 + y, x = k0 + tx;
        tile[y][tx] = r < rows && x < k ? s[r * ld + x] : T{};
      }
    } else {
      for (int y = ty; y < stage_tile; y += stage_rows_per_pass) {
        const index_t x = k0 + y, r = r0 + tx;
        tile[tx][y] = r < rows && x < k ? s[x * ld + r] : T{};
      }
    }
    __syncthreads();
    for (int y = ty; y < stage_tile; y += stage_rows_per_pass) {
      const index_t r = r0 + y, x = k0 + tx;
      if (r < rows && x < dld) d[r * dld + x] = tile[y][tx];  // zeros past k
    }
    __syncthreads();
  }
}

/// The operand itself when it already meets the tensor-core preconditions; otherwise a K-major,
/// 16-byte-padded copy in `tmp` (one matrix when the batch stride is 0, so broadcasts stay cheap).
template <class T>
operand<T> stage_for_tensor_cores(operand<T> op, index_t rows, index_t k, index_t batch,
                                  device_buffer<T>& tmp, stream_view s, int device) {
  const index_t elements = staged_elements(op, rows, k, batch);
  if (elements == 0) return op;
  const index_t dld = staged_ld<T>(k);
  const index_t copies = op.stride == 0 ? 1 : batch;
  const index_t dstride = rows * dld;
  tmp = device_buffer<T>(static_cast<std::size_t>(elements), s);
  const index_t tiles = copies * ceil_div(rows, stage_tile) * ceil_div(dld, stage_tile);
  const unsigned grid = stride_grid(tiles, 1, device);
  stage_kmajor_kernel<T><<<grid, dim3(stage_tile, stage_rows_per_pass), 0, s.value()>>>(
      op.data, op.ld, op.kmajor, op.stride, rows, k, copies, tmp.data(), dld, dstride);
  SPILLWAY_CHECK_LAUNCH();
  return {tmp.data(), dld, true, copies > 1 ? dstride : 0};
}

// ---- k = 0 and the split-K reduction ---------------------------------------------------------------

inline constexpr int pass_threads = 256;

/// k = 0: C = epi(β·C) (β = 0: epi(0), C not read) in C's own frame, C's contiguous dimension
/// across the threads.
template <class TC, class Acc, class Epi>
__global__ void __launch_bounds__(pass_threads)
    scale_output_kernel(matrix_view<TC> c, Acc beta, bool read_c, index_t batch, Epi epi) {
  const bool row = c.order == layout::row_major;
  const index_t minor = row ? c.cols : c.rows, major = row ? c.rows : c.cols;
  const index_t total = batch * major * minor;
  for (index_t e = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<index_t>(gridDim.x) * blockDim.x) {
    const index_t q = e / (major * minor), mj = e / minor % major, mn = e % minor;
    const index_t i = row ? mj : mn, j = row ? mn : mj;
    TC& out = c.data[q * c.batch_stride + mj * c.ld + mn];
    const Acc v = read_c ? beta * load_output<Acc>(out) : Acc(0);
    out = convert_output<TC>(epi(v, i, j));
  }
}

template <class TC, class Acc, class Epi>
void launch_scale_output(const matrix_view<TC>& c, Acc beta, index_t batch, const Epi& epi, stream_view s,
                         int device) {
  const index_t total = batch * c.rows * c.cols;
  scale_output_kernel<TC, Acc, Epi><<<stride_grid(total, pass_threads, device), pass_threads, 0, s.value()>>>(
      c, beta, !(beta == Acc(0)), batch, epi);
  SPILLWAY_CHECK_LAUNCH();
}

/// Split-K's second pass: C(i, j) = epi(α·Σ_s W[s](i, j) + β·C(i, j)) over the `slices` partial
/// products (row-major m x n each, consecutive), summed in slice order.
template <class TC, class Acc, class Epi>
__global__ void __launch_bounds__(pass_threads)
    split_k_reduce_kernel(const Acc* __restrict__ w, index_t slices, index_t m, index_t n, TC* c, index_t ldc,
                          Acc alpha, Acc beta, bool read_c, Epi epi) {
  const index_t total = m * n;
  for (index_t e = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<index_t>(gridDim.x) * blockDim.x) {
    Acc sum = w[e];
    for (index_t sl = 1; sl < slices; ++sl) sum += w[sl * total + e];
    const index_t i = e / n, j = e % n;
    TC& out = c[i * ldc + j];
    Acc v = alpha * sum;
    if (read_c) v += beta * load_output<Acc>(out);
    out = convert_output<TC>(epi(v, i, j));
  }
}

// ---- launcher choice -----------------------------------------------------------------------------

/// One launch on the resolved path (the problem already meets that launcher's preconditions).
template <class T, class TC, class Acc, class Epi>
void launch_on_path(const problem<T, T, TC, Acc, Epi>& p, gemm_path path, stream_view s) {
  constexpr gemm_type_info info = gemm_type_info_of<T>();
  if constexpr (info.dmma) {
    if (path == gemm_path::mma_sync) return launch_dmma(p, s);
  }
  if constexpr (info.wgmma) {
    if (path == gemm_path::wgmma) return launch_wgmma(p, s);
  }
  if constexpr (info.mma_sync) {
    if (path == gemm_path::mma_sync) return launch_mma_sync(p, s);
  }
  launch_simt(p, s);
}

/// Device memory a caller lends run_problem for the split-K workspace, so that the call allocates
/// nothing: the out-of-core GEMM lends its task slot's (ooc_plan::split_k_bytes), counted in the
/// job's budget. Not lent (the in-core gemm): run_problem allocates it from the pool.
struct lent_workspace {
  std::byte* data = nullptr;
  std::size_t bytes = 0;
  [[nodiscard]] bool lent() const noexcept { return data != nullptr; }
};

/// The types whose tensor-core paths take K-major operands only (the others never stage).
template <class T>
inline constexpr bool has_staging_paths_v = gemm_type_info_of<T>().mma_sync || gemm_type_info_of<T>().wgmma
                                            || gemm_type_info_of<T>().dmma;

/// Whether `path` stages operands that are not tensor_ready (the tensor-core paths of the types
/// that have them).
template <class T>
bool stages_operands(gemm_path path) {
  return has_staging_paths_v<T> && path != gemm_path::simt;
}

/// How run_problem cuts k for p on `path`. The automatic split fills the device with the
/// launcher's own tiles: the SIMT launcher says which tile it runs this m with and how many of its
/// blocks an SM holds; the tensor-core paths keep the plan's default (128 x 128, one block per SM).
template <class T, class TC, class Acc, class Epi>
split_plan split_of(const problem<T, T, TC, Acc, Epi>& p, gemm_path path, int split_k, int device) {
  split_tile_shape shape{};
  if (path == gemm_path::simt) shape = simt_tile_shape<T>(p.m);
  return plan_split_k(p.m, p.n, p.k, p.batch, split_k, tile::multiprocessor_count(device), shape);
}

/// Bytes of the temporaries run_problem allocates for p when no workspace is lent: the staged
/// K-major copies of A and B (all alive together with the workspace) and the split-K workspace.
template <class T, class TC, class Acc, class Epi>
std::size_t problem_workspace_bytes(const problem<T, T, TC, Acc, Epi>& p, gemm_path path, int split_k,
                                    int device) {
  std::size_t bytes = 0;
  if (stages_operands<T>(path)) {
    const index_t staged = staged_elements<T>({p.a, p.lda, p.a_kmajor, p.stride_a}, p.m, p.k, p.batch) +
                           staged_elements<T>({p.b, p.ldb, p.b_kmajor, p.stride_b}, p.n, p.k, p.batch);
    bytes += static_cast<std::size_t>(staged) * sizeof(T);
  }
  const split_plan plan = split_of(p, path, split_k, device);
  return bytes + static_cast<std::size_t>(split_workspace_elements(p.m, p.n, plan)) * sizeof(Acc);
}

/// Runs one canonical problem (m, n, k >= 1) on `path`: staging for the tensor-core paths, then
/// either one launch or split-K, its workspace `ws` when lent (then nothing is allocated: a lent
/// workspace too small, or an operand that would need staging, is a logic_error; the out-of-core
/// GEMM's panels are K-major and 16-byte aligned on the tensor-core paths, so it stages nothing).
template <class T, class TC, class Acc, class Epi>
void run_problem(problem<T, T, TC, Acc, Epi> p, gemm_path path, int split_k, int device, stream_view s,
                 const lent_workspace& ws = {}) {
  device_buffer<T> staged_a, staged_b;
  if constexpr (has_staging_paths_v<T>) {  // (stage_for_tensor_cores exists for these types only)
    if (stages_operands<T>(path)) {
      const operand<T> oa{p.a, p.lda, p.a_kmajor, p.stride_a}, ob{p.b, p.ldb, p.b_kmajor, p.stride_b};
      SPILLWAY_EXPECTS(!ws.lent() || (staged_elements(oa, p.m, p.k, p.batch) == 0 &&
                                      staged_elements(ob, p.n, p.k, p.batch) == 0),
                       "gemm: an operand would be staged (not K-major and 16-byte aligned) in a call whose "
                       "workspace is lent; the lender counts no staging");
      set_operand(p, true, stage_for_tensor_cores<T>(oa, p.m, p.k, p.batch, staged_a, s, device));
      set_operand(p, false, stage_for_tensor_cores<T>(ob, p.n, p.k, p.batch, staged_b, s, device));
    }
  }
  const split_plan plan = split_of(p, path, split_k, device);
  if (!plan.split()) return launch_on_path(p, path, s);

  // Slice sl of batch entry q is the k range [sl·ks, (sl+1)·ks): a K-major operand moves by ks
  // elements, an MN-major one by ks rows. Partial products go to W (Acc, row-major m x n each)
  // with α = 1, β = 0 and no epilogue; the reduce pass applies the caller's.
  const index_t mn = p.m * p.n;
  const auto elements = static_cast<std::size_t>(split_workspace_elements(p.m, p.n, plan));
  const std::size_t need = elements * sizeof(Acc);
  device_buffer<Acc> owned;
  Acc* w = nullptr;
  if (ws.lent()) {
    SPILLWAY_EXPECTS(ws.bytes >= need && reinterpret_cast<std::uintptr_t>(ws.data) % alignof(Acc) == 0,
                     "gemm: the lent split-K workspace has " + std::to_string(ws.bytes) + " bytes; " +
                         std::to_string(plan.slices()) + " slices of " + std::to_string(p.m) + " x " +
                         std::to_string(p.n) + " need " + std::to_string(need) + " (aligned to " +
                         std::to_string(alignof(Acc)) + ")");
    w = reinterpret_cast<Acc*>(ws.data);
  } else {
    owned = device_buffer<Acc>(elements, s);
    w = owned.data();
  }
  const index_t step_a = p.a_kmajor ? plan.ks : plan.ks * p.lda;
  const index_t step_b = p.b_kmajor ? plan.ks : plan.ks * p.ldb;
  for (index_t q = 0; q < p.batch; ++q) {
    problem<T, T, Acc, Acc, identity> part;
    part.m = p.m;
    part.n = p.n;
    part.k = plan.ks;
    part.a = p.a + q * p.stride_a;
    part.lda = p.lda;
    part.a_kmajor = p.a_kmajor;
    part.b = p.b + q * p.stride_b;
    part.ldb = p.ldb;
    part.b_kmajor = p.b_kmajor;
    part.c = w;
    part.ldc = p.n;
    part.alpha = Acc(1);
    part.beta = Acc(0);
    part.batch = plan.full;
    part.stride_a = step_a;
    part.stride_b = step_b;
    part.stride_c = mn;
    part.fast_accumulation = p.fast_accumulation;
    launch_on_path(part, path, s);
    if (plan.rem > 0) {
      part.k = plan.rem;
      part.a += plan.full * step_a;
      part.b += plan.full * step_b;
      part.c += plan.full * mn;
      part.batch = 1;
      part.stride_a = part.stride_b = part.stride_c = 0;
      launch_on_path(part, path, s);
    }
    split_k_reduce_kernel<TC, Acc, Epi>
        <<<stride_grid(mn, pass_threads, device), pass_threads, 0, s.value()>>>(
            w, plan.slices(), p.m, p.n, p.c + q * p.stride_c, p.ldc, p.alpha, p.beta, !(p.beta == Acc(0)),
            p.epi);
    SPILLWAY_CHECK_LAUNCH();
  }
}

}  // namespace spillway::gemm::detail
