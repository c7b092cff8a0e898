// spillway/gemm/out_of_core.cuh — C = α·op(A)·op(B) + β·C with A, B and C in host memory larger
// than the device's memory budget, on one or several GPUs through spillway's scheduler (run_tasks).
// See docs/gemm.md, "Out of core".
//
//   namespace g = spillway::gemm;
//   g::ooc_options o;
//   o.budget = spillway::memory_budget(8_GiB);
//   g::ooc_report r = g::gemm_out_of_core(1.0f, g::row_major(a, m, k), g::col_major(b, k, n), 0.0f,
//                                         g::row_major(c, m, n), {}, o);
//   std::puts(r.plan.describe().c_str());   // blocks, cached panels, bytes moved, the copy floor
//
// How a job runs (the executed frame of ooc_plan.hpp: panels of "A" resident, "B" streamed): each
// task is one C block. Panels are copied into the device's two panel caches on a loader stream of
// the device's own, in the order the blocks need them and as far ahead of the running blocks as the
// caches allow (up to ooc_lookahead blocks; every panel from the first block on when the caches hold
// them all, as the 32,768² bf16 job in 8 GiB does): a cache slot is refilled once no block before the one
// that needs the new panel still needs the old one, and only after every stream that read the old
// panel has passed the event recorded after that read. On its slot's stream a task waits for its
// panels' copy events, copies the C block in when β ≠ 0, runs the in-core gemm_async over the
// panels (one GEMM per B panel when the block spans several: ooc_options::c_min_line_bytes), and
// copies the block out. So panel copies run back to back during the GEMMs, and the
// device→host copy of one block overlaps the GEMM of the next. Page-locked host memory is copied
// by DMA directly (2-D copies of the sub-matrices), except C blocks that ooc_options::c_out stages:
// out in a few 1-D pieces into their slot's pinned buffer, each written into C by one of the job's
// own host threads as soon as it lands (the block's stream waits for them before its slot is
// free). Pageable panels go through pinned staging filled by the pipeline's host threads
// (double-buffered per device); pageable C is staged like the blocks above. On the tensor-core
// paths an MN-major operand (A column-major, B row-major in the executed frame) would make every
// block's GEMM stage a K-major copy of its panel; instead each panel lands in one of two raw
// buffers of the device and is transposed once into its cache slot by ooc_transpose_kernel on a
// second stream of the device, while the loader copies the next panel (ooc_job::load).
#pragma once

#include <spillway/core/fault_hook.hpp>
#include <spillway/core/device.hpp>
#include <spillway/core/device_buffer.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/host_memory.hpp>
#include <spillway/core/host_registration.hpp>
#include <spillway/core/memory_budget.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/gemm/detail/validate.hpp>
#include <spillway/gemm/epilogue.hpp>
#include <spillway/gemm/gemm.cuh>
#include <spillway/gemm/matrix_view.hpp>
#include <spillway/gemm/ooc_plan.hpp>
#include <spillway/gemm/options.hpp>
#include <spillway/pipeline/host_workers.hpp>
#include <spillway/pipeline/host_operand.hpp>
#include <spillway/pipeline/job.hpp>
#include <spillway/pipeline/task_pipeline.hpp>

#include <cuda_runtime_api.h>

#if (defined(__SSE2__) || defined(_M_X64)) && !defined(__CUDA_ARCH__)
#include <emmintrin.h>
#define SPILLWAY_OOC_HAS_SSE2 1
#endif

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace spillway::gemm {

struct ooc_report;
struct ooc_trace;

/// How an out-of-core GEMM is laid out over the devices.
struct ooc_options {
  /// Devices to use (each once). Empty: every visible device.
  std::vector<int> devices;
  /// Device memory per device. Default: memory_budget::default_for_all(devices) (80% of free).
  std::optional<memory_budget> budget;
  /// Blocks in flight per device (one stream each, one C block of device memory each). The
  /// scheduler enqueues a block once the block `slots` before it is in C, so with 4 one block
  /// copies out while one GEMM runs and two wait queued: the host has a whole block's time to
  /// enqueue the next. 0: 4 when C blocks go out by DMA straight into C, 8 when they are staged
  /// (a staged block holds its slot through its host copy too; the 32768² bf16 job on the H200:
  /// 119.5 ms with 8, 123.9 with 4, 156 with 16).
  std::size_t slots_per_device = 0;
  /// How A, B and C are copied: `detect` asks the runtime for each; page_locked: DMA directly;
  /// pageable: through pinned staging.
  host_memory memory = host_memory::detect;
  /// Which pageable operands the job page-locks for the call (with `memory` = detect; undone before
  /// it returns; ooc_report::a_registered etc. say which). Page-locking runs at ~20 GB/s of the
  /// caller's memory, so it pays only where staging is slow: a row-major B (NumPy's layout), whose
  /// panels are strided host lines and which a tensor-core job holds whole before its first block.
  /// `automatic`: with a row-major B, B — and A and C too for elements of 1 and 2 bytes; with a
  /// column-major (K-major) B, nothing. Measured on the H200, 32768², 8 GiB budget: NumPy layout
  /// (from Python) float16 0.52 s all three, 0.83 B alone, 1.52 staged; float32 0.53 s B alone,
  /// 0.81 all three, 0.66 staged; K-major B (C++) bf16 0.667 s all three against 0.231 staged,
  /// float 1.80 s B alone against 1.56 staged. `always`: all three; `never`: none. Where the driver
  /// refuses (already registered in part, the locked-memory limit), that operand is staged.
  page_lock lock = page_lock::automatic;
  /// Cap on the C block's sides (0: none); forces many blocks on small problems (tests).
  index_t max_block = 0;
  /// Called as blocks complete; return false to cancel (see job_report::cancelled).
  progress_callback progress;
  /// The rates the plan's copy-time floor is stated at (the H200's pinned rates by default).
  copy_rates rates{};
  /// If set, also receives the report when the job fails (pipeline_error): which blocks were written.
  ooc_report* report_on_error = nullptr;
  /// The in-core time of the whole product on one device, in seconds. The plan weighs its choices
  /// by the bound its order puts on the job at that rate (ooc_plan::ramp_seconds): staged or direct
  /// copies out (`c_out` automatic), C blocks of several B panels (`c_min_line_bytes` 0). 0 (the
  /// default): estimated from the device (ooc_compute_estimate: its SMs and peak clock at the rate
  /// spillway's in-core GEMM sustains per SM and clock; measured on the H200, within 1.2% of its
  /// in-core times there); ooc_report::compute_seconds says which was used.
  double compute_seconds = 0;
  /// If set, receives device timestamps of the job (diagnosis; timing events cost a few µs a block;
  /// a staged block's end is read on the host clock; docs/gemm.md, "Out of core").
  ooc_trace* trace = nullptr;
  /// How C blocks are copied out of the device when C is page-locked.
  ooc_copy_out c_out = ooc_copy_out::automatic;
  /// Shortest line of C a block's copy out should write, in bytes: shorter lines make C blocks
  /// span several B panels (ooc_plan_request::c_min_line_bytes). 0: automatic — the plan weighs
  /// blocks with lines of ooc_long_line (64 KiB) against single-panel blocks by the order's bound
  /// at `rates` (whose d2h_short prices short lines) and `compute_seconds` (or its estimate), and
  /// keeps the lower. 1: single-panel blocks always.
  std::size_t c_min_line_bytes = 0;
  /// Host threads of the job's own that write staged C blocks into C (ooc_copy_out::staged, and
  /// pageable C), each one piece of a block at a time: 0 takes detail::ooc_scatter_threads (12).
  std::size_t scatter_threads = 0;
  /// Staged C blocks are written into C with non-temporal stores (x86; elsewhere a plain copy): C's
  /// lines are not read before they are overwritten.
  bool scatter_streaming = true;
  /// Largest piece (bytes) in which an MN-major panel lands before its transpose into the cache;
  /// 0: detail::ooc_raw_piece_bytes (512 MiB). Tests force many pieces with it.
  std::size_t raw_piece_bytes = 0;
};

/// When each part of an out-of-core job happened on its device, in ms after that device's panel
/// caches were ready (each device has its own origin). NaN: never happened (cancelled, failed).
struct ooc_trace {
  /// Panel copies in the order the loader issued them: the device, the operand ('A' or 'B' in the
  /// plan's executed frame), its panel and k chunk, bytes, and when the copy ended.
  std::vector<int> load_device;
  std::vector<char> load_operand;
  std::vector<index_t> load_panel, load_chunk;
  std::vector<std::size_t> load_bytes;
  std::vector<float> load_end_ms;
  /// Per block of the plan's order: the device, when its stream reached its first GEMM (panels in,
  /// C block in, the slot free), when its last GEMM (or combine) ended, and when its C block was out
  /// (staged: in C, after the host copy — read on the host clock against the origin's host time,
  /// taken when the caches were ready, so within a few µs of the device's times).
  std::vector<int> block_device;
  std::vector<float> ready_ms, gemm_end_ms, out_end_ms;
  /// Host seconds from the call to the scheduler's start (planning, device memory, events).
  double setup_seconds = 0;
};

/// A block of C in the caller's coordinates: rows [row0, row0 + rows), columns [col0, col0 + cols).
struct c_block {
  index_t row0 = 0, rows = 0, col0 = 0, cols = 0;
};

/// What an out-of-core GEMM did.
struct ooc_report {
  ooc_plan plan;
  /// The scheduler's report: task t completed ⇔ block_of_task[t] of C is written.
  job_report job;
  /// The C block task t computed (empty entries for tasks that never started).
  std::vector<c_block> block_of_task;
  std::size_t budget_bytes = 0;
  bool a_page_locked = false, b_page_locked = false, c_page_locked = false;
  /// Which of them the job page-locked itself for the call (ooc_options::lock).
  bool a_registered = false, b_registered = false, c_registered = false;
  /// The in-core time of the product the plan weighed (its order's bound, the choice of copies out
  /// and of C block widths): ooc_options::compute_seconds, or where that is 0 the estimate from the
  /// device (ooc_compute_estimate; `compute_estimated` set).
  double compute_seconds = 0;
  bool compute_estimated = false;
  /// The blocks whose C is written, in the caller's coordinates.
  [[nodiscard]] std::vector<c_block> written() const {
    std::vector<c_block> v;
    for (std::size_t t = 0; t < job.completed.size() && t < block_of_task.size(); ++t)
      if (job.completed[t]) v.push_back(block_of_task[t]);
    return v;
  }
};

namespace detail {

/// C = W + β·C (converted to C's type): the last step of a block whose k chunks accumulated in an
/// accumulator-typed workspace because C is narrower (half/bf16 C of float sums, float C of int32).
template <class TC, class Acc>
__global__ void __launch_bounds__(256)
    ooc_combine_kernel(const Acc* __restrict__ w, TC* __restrict__ c, index_t count, Acc beta, bool read_c) {
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<index_t>(gridDim.x) * blockDim.x) {
    Acc v = w[i];
    if (read_c) v += beta * load_output<Acc>(c[i]);
    c[i] = convert_output<TC>(v);
  }
}

// ---- MN-major panels: transposed once as they land --------------------------------------------------

/// Threads of ooc_transpose_kernel; a block covers 8·V elements along a source line (128 bytes) and
/// 32·V source lines (V = 16 / element size).
inline constexpr int ooc_xpose_threads = 256;

/// ooc_transpose_kernel's tile for ES-byte elements: `len` elements along a source line, `lines`
/// source lines; tiles(len, lines) of them cover a panel (the launcher's grid, the kernel's loop).
template <int ES>
struct ooc_xpose_tile {
  static constexpr int V = 16 / ES;
  static constexpr index_t len = 8 * V, lines = 32 * V;
  SPILLWAY_HD static constexpr index_t tiles_along(index_t n) { return ceil_div(n, len); }
  SPILLWAY_HD static constexpr index_t tiles(index_t n, index_t l) { return tiles_along(n) * ceil_div(l, lines); }
};

/// One thread's V x V elements (V 16-byte vectors in, V out), transposed in registers. in[v] is
/// source line v; out row j holds element j of every line. Byte and half-word elements go through
/// PRMT (__byte_perm); 4- and 8-byte elements are only renamed.
template <int ES>
__device__ __forceinline__ uint4 ooc_xpose_row(const uint4 (&in)[16 / ES], int j) {
  constexpr int V = 16 / ES;
  auto word = [&](int v, int q) -> std::uint32_t {
    return q == 0 ? in[v].x : q == 1 ? in[v].y : q == 2 ? in[v].z : in[v].w;
  };
  std::uint32_t o[4];
  if constexpr (ES == 8) {
#pragma unroll
    for (int v = 0; v < V; ++v) {
      o[2 * v] = word(v, 2 * j);
      o[2 * v + 1] = word(v, 2 * j + 1);
    }
  } else if constexpr (ES == 4) {
#pragma unroll
    for (int v = 0; v < V; ++v) o[v] = word(v, j);
  } else if constexpr (ES == 2) {
    const unsigned sel = (j & 1) != 0 ? 0x7632u : 0x5410u;  // the high or the low half of each word
#pragma unroll
    for (int q = 0; q < 4; ++q) o[q] = __byte_perm(word(2 * q, j >> 1), word(2 * q + 1, j >> 1), sel);
  } else {
    static_assert(ES == 1, "element sizes 1, 2, 4 and 8");
    const unsigned b = static_cast<unsigned>(j & 3), sel = b | ((b + 4) << 4);  // byte b of x, then of y
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const std::uint32_t lo = __byte_perm(word(4 * q, j >> 2), word(4 * q + 1, j >> 2), sel);
      const std::uint32_t hi = __byte_perm(word(4 * q + 2, j >> 2), word(4 * q + 3, j >> 2), sel);
      o[q] = __byte_perm(lo, hi, 0x5410u);
    }
  }
  return make_uint4(o[0], o[1], o[2], o[3]);
}

/// dst (len rows of `lines` elements, K-major, pitch dld) = the transpose of src (`lines` lines of
/// `len` elements, pitch sld): dst[r·dld + x] = src[x·sld + r]. Elements are ES bytes; src, dst,
/// sld·ES and dld·ES are multiples of 16 bytes and sld ≥ round_up(len, V), dld ≥ round_up(lines, V)
/// (V = 16 / ES), so every access is a whole 16-byte vector. Each thread reads V vectors of V
/// consecutive lines (8 lanes along a line: 128 contiguous bytes per line and instruction),
/// transposes them in registers and writes V vectors, one per destination row (4 lanes along a row,
/// 8 warps of the block side by side along it: 512 contiguous bytes of each row per block). Columns
/// [lines, round_up(lines, V)) of dst are written as zeros; rows ≥ len are not written; source
/// elements of the vectors past `len` (inside the pitch) are read and dropped.
template <int ES>
__global__ void __launch_bounds__(ooc_xpose_threads)
    ooc_transpose_kernel(const std::byte* __restrict__ src, index_t sld, index_t lines, index_t len,
                         std::byte* __restrict__ dst, index_t dld) {
  using tile = ooc_xpose_tile<ES>;
  constexpr int V = tile::V;
  constexpr index_t tile_r = tile::len, tile_x = tile::lines;
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const index_t tiles_r = tile::tiles_along(len), tiles = tile::tiles(len, lines);
  for (index_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const index_t r0 = t % tiles_r * tile_r + (lane & 7) * V;
    const index_t x0 = t / tiles_r * tile_x + (warp * 4 + (lane >> 3)) * V;
    if (r0 >= len || x0 >= lines) continue;
    uint4 in[V];
#pragma unroll
    for (int v = 0; v < V; ++v) {
      in[v] = x0 + v < lines ? *reinterpret_cast<const uint4*>(src + ((x0 + v) * sld + r0) * ES)
                             : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int j = 0; j < V; ++j) {
      if (r0 + j < len)
        *reinterpret_cast<uint4*>(dst + ((r0 + j) * dld + x0) * ES) = ooc_xpose_row<ES>(in, j);
    }
  }
}

/// Enqueues ooc_transpose_kernel for elements of type T on s (see there for the preconditions).
template <class T>
void ooc_transpose(const T* src, index_t sld, index_t lines, index_t len, T* dst, index_t dld,
                   stream_view s) {
  constexpr int es = static_cast<int>(sizeof(T));
  static_assert(es == 1 || es == 2 || es == 4 || es == 8, "ooc_transpose: element sizes 1, 2, 4 and 8");
  if (lines <= 0 || len <= 0) return;
  const index_t tiles = ooc_xpose_tile<es>::tiles(len, lines);
  const unsigned grid = grid_blocks(tiles, 1, index_t{1} << 20);
  ooc_transpose_kernel<es><<<grid, ooc_xpose_threads, 0, s.value()>>>(
      reinterpret_cast<const std::byte*>(src), sld, lines, len, reinterpret_cast<std::byte*>(dst), dld);
}

/// One line of a host copy. `streaming`: the destination is written with non-temporal stores (x86
/// SSE2), so its cache lines are not read first (a plain memcpy of short lines reads each
/// destination line before overwriting it: a third stream of memory traffic beside the DMA's).
inline void ooc_copy_line(unsigned char* d, const unsigned char* s, std::size_t n, bool streaming) {
#if defined(SPILLWAY_OOC_HAS_SSE2)
  if (streaming && n >= 256) {
    const std::size_t head = (16 - (reinterpret_cast<std::uintptr_t>(d) & 15)) & 15;
    std::memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    const std::size_t body = n & ~std::size_t{63};
    for (std::size_t i = 0; i < body; i += 64) {
      const __m128i x0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
      const __m128i x1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
      const __m128i x2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
      const __m128i x3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), x0);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), x1);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), x2);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), x3);
    }
    std::memcpy(d + body, s + body, n - body);
    return;
  }
#else
  (void)streaming;
#endif
  std::memcpy(d, s, n);
}

/// Orders a thread's non-temporal stores before whatever it does next (its part's completion).
inline void ooc_store_fence() {
#if defined(SPILLWAY_OOC_HAS_SSE2)
  _mm_sfence();
#endif
}

/// `lines` lines of `width` bytes from s (pitch spitch) to d (pitch dpitch) on the calling thread;
/// with `streaming`, non-temporal stores fenced at the end (a staged C block's piece, a part below).
inline void ooc_copy_run(unsigned char* d, std::size_t dpitch, const unsigned char* s, std::size_t spitch,
                         std::size_t width, std::size_t lines, bool streaming) {
  for (std::size_t l = 0; l < lines; ++l) ooc_copy_line(d + l * dpitch, s + l * spitch, width, streaming);
  if (streaming) ooc_store_fence();
}

/// `lines` lines of `width` bytes from src (pitch spitch) to dst (pitch dpitch), split over the
/// pipeline's host threads (pageable ⇄ pinned staging; the bench's host-copy measurement) into at
/// most `max_parts` parts (0: as many as the pool has threads, plus the caller) of at least
/// `min_part` bytes.
inline void ooc_copy_lines(void* dst, std::size_t dpitch, const void* src, std::size_t spitch,
                           std::size_t width, std::size_t lines, std::size_t max_parts = 0,
                           bool streaming = false, std::size_t min_part = std::size_t{2} << 20) {
  if (lines == 0 || width == 0) return;
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  const std::size_t total = width * lines;
  const std::size_t pool = ::spillway::detail::staging_workers().size() + 1;
  std::size_t parts = std::min(max_parts == 0 ? pool : std::min(max_parts, pool), total / min_part + 1);
  parts = std::min(parts, lines);
  auto part = [=](std::size_t l0, std::size_t l1) {
    ooc_copy_run(d + l0 * dpitch, dpitch, s + l0 * spitch, spitch, width, l1 - l0, streaming);
  };
  if (parts <= 1) {
    part(0, lines);
    return;
  }
  const std::size_t per = (lines + parts - 1) / parts;
  ::spillway::detail::staging_workers().run_parts(parts, [=](std::size_t p) {
    const std::size_t l0 = std::min(lines, p * per);
    part(l0, std::min(lines, l0 + per));
  });
}

/// Host threads that write staged C blocks into C when ooc_options::scatter_threads is 0.
inline constexpr std::size_t ooc_scatter_threads = 12;

/// Pieces a staged C block is copied out and written into C in (each one host thread's, from the
/// moment its own copy out lands). On the H200, 2048 x 2048 float blocks paced at one every 375 µs
/// beside 4 GiB of copies in (two runs): 1 piece 47.9 / 46.2 GB/s in, 2 49.4 / 48.7, 4 49.8 / 49.6,
/// 8 49.4 / 50.4, the copies out keeping pace in each; one block at a time over 12 pool threads in a
/// host function, the way before, 43.1 / 43.0. In the 32768² bf16 job (8 GiB) on machines in their
/// normal state every variant ran 116.8–120.9 ms medians against 117.2–119.5 the way before (the
/// panels in by 82–88 ms instead of 92–94, the last blocks then waiting on the host copies); on one
/// in a slow state 2 pieces 124.9 ms, 4 pieces 130–143, the way before 144 and 321
/// (benchmarks/results/gemm_ooc.md, "scatter threads").
inline constexpr std::size_t ooc_scatter_pieces = 2;

/// One slot's staged C block on its way into C: its pieces' copy-out events (blocking sync: the
/// threads that wait on them sleep), how many pieces are not yet in C, and the first exception
/// of a piece. The slot's stream waits in a host function (ooc_scatter::wait) until every piece is
/// in C, so the slot's completion event, and the pipeline's reuse of the slot's buffers, come
/// after the host writes.
struct ooc_scatter {
  cudaEvent_t landed[ooc_scatter_pieces] = {};
  int device = 0;  // the events' (and the slot's) device
  std::mutex m;
  std::condition_variable cv;
  std::size_t left = 0;
  std::exception_ptr error;
  // Trace only: where the block's last piece writes the host time it finished (null: untraced).
  std::chrono::steady_clock::time_point* finished = nullptr;
  explicit ooc_scatter(int dev) : device(dev) {
    device_guard g(dev);
    for (cudaEvent_t& e : landed) {
      const cudaError_t r = cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync);
      if (r != cudaSuccess) {
        e = nullptr;
        release();
        SPILLWAY_CUDA_CHECK(r, "cudaEventCreateWithFlags for a staged C block's pieces");
      }
    }
  }
  ~ooc_scatter() { release(); }
  ooc_scatter(const ooc_scatter&) = delete;
  ooc_scatter& operator=(const ooc_scatter&) = delete;
  void done(std::exception_ptr e) {
    std::lock_guard<std::mutex> l(m);
    if (e && !error) error = e;
    if (--left == 0) {
      if (finished != nullptr) *finished = std::chrono::steady_clock::now();
      cv.notify_all();
    }
  }
  void wait_all() {
    std::unique_lock<std::mutex> l(m);
    cv.wait(l, [this] { return left == 0; });
  }
  /// The host function the slot's stream runs after the block's last copy out.
  static void CUDART_CB wait(void* self) noexcept { static_cast<ooc_scatter*>(self)->wait_all(); }

 private:
  void release() noexcept {
    for (cudaEvent_t& e : landed) {
      if (e != nullptr) (void)cudaEventDestroy(e);
      e = nullptr;
    }
  }
};

/// One piece of a staged C block: `lines` lines of `width` bytes from the slot's pinned buffer
/// (pitch spitch) into C (pitch dpitch), once `landed` has completed. `fail`: an injected fault
/// (tests) makes this piece throw instead of copying.
struct ooc_piece {
  ooc_scatter* owner = nullptr;
  cudaEvent_t landed = nullptr;
  unsigned char* dst = nullptr;
  const unsigned char* src = nullptr;
  std::size_t dpitch = 0, spitch = 0, width = 0, lines = 0;
  bool streaming = false, fail = false;
};

/// Writes one piece of a staged C block into C once its copy out has landed (the thread sleeps in
/// the blocking-sync event), then counts it done in its block, exception included. Run by the job's
/// own host threads (ooc_job::scatter_pool), not the pipeline's pool: a piece waits on the GPU,
/// and the pool's threads must stay free for the pageable panel copies the GEMMs wait for.
inline void ooc_write_piece(const ooc_piece& p) noexcept {
  std::exception_ptr err;
  try {
#if defined(SPILLWAY_FAULT_INJECTION)
    if (p.fail) ::spillway::fault::detail::throw_staging_fault();
#endif
    device_guard g(p.owner->device);  // the pool's threads serve every device of the job
    const cudaError_t e = cudaEventSynchronize(p.landed);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      ::spillway::detail::throw_cuda_error(e, "cudaEventSynchronize on a staged C block's copy out", __FILE__,
                                           __LINE__);
    }
    ooc_copy_run(p.dst, p.dpitch, p.src, p.spitch, p.width, p.lines, p.streaming);
  } catch (...) {
    err = std::current_exception();
  }
  p.owner->done(err);
}

/// A sub-matrix as 2-D copy geometry: `lines` runs of `len` contiguous elements, `ld` apart.
template <class T>
struct ooc_rect {
  const T* first = nullptr;  // element (r0, c0)
  index_t lines = 0, len = 0, ld = 0;
};

template <class T>
ooc_rect<T> ooc_sub(const matrix_view<const T>& v, index_t r0, index_t rows, index_t c0, index_t cols) {
  ooc_rect<T> r;
  r.first = &v(r0, c0);
  r.ld = v.ld;
  if (v.order == layout::row_major) {
    r.lines = rows;
    r.len = cols;
  } else {
    r.lines = cols;
    r.len = rows;
  }
  return r;
}

/// One double-buffered pinned staging pair for a device's panel loads from pageable memory.
struct ooc_staging {
  ::spillway::detail::staging_block buf[2];
  event done[2];
  int next = 0;
};

/// The two raw buffers of a device in which an MN-major operand's panels land (as the host holds
/// them) before their transpose into the cache: `landed` after the copy in, `free` after the
/// transpose that read it (the copy into it two panels later waits for that).
struct ooc_raw {
  std::byte* buf[ooc_raw_buffers] = {};
  event landed[ooc_raw_buffers], free[ooc_raw_buffers];
  std::size_t next = 0;
};

/// The panel caches of one device.
struct ooc_cache {
  std::byte* base = nullptr;
  std::size_t panel_bytes = 0;
  std::vector<index_t> tag;
  std::vector<event> ready;
  std::vector<std::vector<event>> used;  // [cache slot][task slot]
  void init(std::byte* b, std::size_t slots, std::size_t bytes, std::size_t task_slots) {
    base = b;
    panel_bytes = bytes;
    tag.assign(slots, -1);
    ready.clear();
    used.clear();
    for (std::size_t i = 0; i < slots; ++i) {
      ready.emplace_back();
      used.emplace_back();
      for (std::size_t j = 0; j < task_slots; ++j) used.back().emplace_back();
    }
  }
};

/// Blocks ahead of the one being enqueued whose panels the loader may already copy.
inline constexpr std::size_t ooc_lookahead = 64;
/// Pageable panels staged ahead per enqueued block (each is a host copy on the scheduler's thread).
inline constexpr std::size_t ooc_staged_per_block = 2;

struct ooc_device_ctx {
  int device = 0;
  std::unique_ptr<stream> setup;
  std::unique_ptr<stream> loader;   // every panel copy of this device, in the order they are needed
  std::unique_ptr<stream> xposer;   // the transposes of MN-major panels, beside the loader's next copy
  std::size_t first = 0, last = 0;  // the device's own range of the plan's order
  std::size_t cursor = 0;           // blocks of its range before this have their panels requested
  std::vector<int> need_a, need_b;  // prefetch's scratch: readers of each panel in its window
  bool resident = false;            // the caches hold every panel of its range: nothing is evicted
  std::unique_ptr<event> origin;    // trace only: when the caches were ready
  std::chrono::steady_clock::time_point host_origin;  // trace only: the host clock at `origin`
  std::vector<event> load_end;      // trace only: the end of each panel copy, in issue order
  std::vector<std::size_t> load_bytes;
  std::vector<index_t> load_key;  // trace only: operand A: key + 1, B: -(key + 1)
  device_buffer<std::byte> memory;
  ooc_cache a, b;
  ooc_staging a_stage, b_stage;
  ooc_raw a_raw, b_raw;              // used where the plan transposes the operand (plan.stage_a / stage_b)
  std::vector<std::unique_ptr<ooc_scatter>> scatter;  // per task slot: its staged C block's way into C
  ooc_device_ctx() = default;
  ooc_device_ctx(const ooc_device_ctx&) = delete;
  ooc_device_ctx& operator=(const ooc_device_ctx&) = delete;
  // Copies the loader issued ahead for blocks that never ran (cancelled, failed, or taken by
  // another device) finish before the caches and the staging they use are freed.
  ~ooc_device_ctx() {
    if (loader) (void)cudaStreamSynchronize(loader->value());
    if (xposer) (void)cudaStreamSynchronize(xposer->value());
    (void)cudaGetLastError();
  }
};

template <class T, class TC>
struct ooc_job {
  using Acc = accumulator_t<T>;
  matrix_view<const T> a, b;  // executed frame
  matrix_view<TC> c;
  Acc alpha{}, beta{};
  bool read_c = false;
  bool a_pinned = false, b_pinned = false, c_pinned = false;
  bool c_staged_out = false;  // C blocks leave through the slot's pinned buffer (always when C is pageable)
  std::size_t scatter_threads = 0;  // the scatter pool's threads (staged C blocks)
  bool scatter_streaming = false;
  bool use_work = false;
  gemm_options opt;
  ooc_plan plan;
  std::vector<int> devices;
  std::vector<std::unique_ptr<ooc_device_ctx>> ctx;
  // Staged C blocks' writers (ooc_write_piece); after ctx, so drained and joined before its states go.
  std::unique_ptr<::spillway::detail::host_workers> scatter_pool;
  std::unique_ptr<ooc_queue> queue;
  std::vector<std::size_t> task_block;  // order index of task t (none: never started)
  bool traced = false;
  std::vector<std::unique_ptr<event>> ev_ready, ev_gemm, ev_out;  // trace only, per order index
  // Trace only: a staged block's end on the host clock (its host copy into C), per order index.
  // No timing event follows the slot's host function: one there, with the next block's ready
  // event, slowed the 32768^3 bf16 job from 119 to 153 ms (results/gemm_ooc.md, "fifth session").
  std::vector<std::chrono::steady_clock::time_point> host_out;
  std::vector<int> ev_ctx;                                        // trace only: which context ran it
  static constexpr std::size_t none = static_cast<std::size_t>(-1);

  /// The panels' layout in the caches: the host's, or K-major where the plan transposes them.
  [[nodiscard]] layout a_dev_order() const { return plan.stage_a ? layout::row_major : a.order; }
  [[nodiscard]] layout b_dev_order() const { return plan.stage_b ? layout::col_major : b.order; }
  [[nodiscard]] index_t a_ld_dev() const {
    return a_dev_order() == layout::row_major ? ooc_r16(plan.kc) : ooc_r16(plan.bm);
  }
  [[nodiscard]] index_t b_ld_dev() const {
    return b_dev_order() == layout::row_major ? ooc_r16(plan.bn) : ooc_r16(plan.kc);
  }
  /// The pitch of a raw (MN-major) panel: its lines run along the panel's rows (A) / columns (B).
  [[nodiscard]] index_t raw_ld(bool is_a) const { return is_a ? ooc_r16(plan.bm) : ooc_r16(plan.bn); }
  [[nodiscard]] index_t c_ld_dev(index_t rows, index_t cols) const {
    return std::max<index_t>(1, c.order == layout::row_major ? cols : rows);
  }

  /// Row panels a range of the order touches (a device's range is a band of contiguous rows).
  [[nodiscard]] index_t rows_of_range(std::size_t first, std::size_t last) const {
    index_t lo = plan.order[first].i, hi = lo;
    for (std::size_t x = first; x < last; ++x) {
      lo = std::min(lo, plan.order[x].i);
      hi = std::max(hi, plan.order[x].i);
    }
    return hi - lo + 1;
  }

  void setup() {
    if (c_staged_out) scatter_pool = std::make_unique<::spillway::detail::host_workers>(std::max<std::size_t>(1, scatter_threads));
    if (traced) {
      const std::size_t n = plan.tasks();
      ev_ready.resize(n);
      ev_gemm.resize(n);
      ev_out.resize(n);
      ev_ctx.assign(n, -1);
      host_out.assign(n, std::chrono::steady_clock::time_point{});
    }
    for (int d : devices) {
      device_guard g(d);  // the context's events belong to device d
      auto c = std::make_unique<ooc_device_ctx>();
      c->device = d;
      c->setup = std::make_unique<stream>(d);
      c->loader = std::make_unique<stream>(d);
      if (plan.stage_a || plan.stage_b) c->xposer = std::make_unique<stream>(d);
      c->first = plan.device_first[ctx.size()];
      c->last = plan.device_first[ctx.size() + 1];
      c->cursor = c->first;
      if (c_staged_out)
        for (std::size_t i = 0; i < plan.slots; ++i) c->scatter.push_back(std::make_unique<ooc_scatter>(d));
      c->need_a.assign(static_cast<std::size_t>(plan.row_panels), 0);
      c->need_b.assign(static_cast<std::size_t>(plan.col_panels), 0);
      const std::size_t a_bytes = plan.a_slots * plan.a_panel_bytes,
                        b_bytes = plan.b_slots * plan.b_panel_bytes;
      c->memory = device_buffer<std::byte>(a_bytes + b_bytes + plan.stage_bytes, c->setup->view());
      c->a.init(c->memory.data(), plan.a_slots, plan.a_panel_bytes, plan.slots);
      c->b.init(c->memory.data() + a_bytes, plan.b_slots, plan.b_panel_bytes, plan.slots);
      std::byte* raw = c->memory.data() + a_bytes + b_bytes;
      for (int side = 0; side < 2; ++side) {
        if (!(side == 0 ? plan.stage_a : plan.stage_b)) continue;
        const std::size_t bytes = side == 0 ? plan.raw_a_bytes : plan.raw_b_bytes;
        for (std::byte*& buf : (side == 0 ? c->a_raw : c->b_raw).buf) {
          buf = raw;
          raw += bytes;
        }
      }
      // Pageable panels are staged a copy at a time: a whole panel, or for a transposed one a
      // piece (its raw buffer's size: a row-major bf16 B held whole stages 2 x 512 MiB, not 2 x
      // 2 GiB, which the pinned cache would not keep between jobs; pinning 4 GiB anew each call
      // made spillway.matmul of 32768² float16 NumPy arrays take 3.3 s).
      if (!a_pinned) {
        for (auto& s : c->a_stage.buf)
          s = ::spillway::detail::staging_block(plan.stage_a ? plan.raw_a_bytes : plan.a_panel_bytes);
      }
      if (!b_pinned) {
        for (auto& s : c->b_stage.buf)
          s = ::spillway::detail::staging_block(plan.stage_b ? plan.raw_b_bytes : plan.b_panel_bytes);
      }
      c->setup->synchronize();  // the caches are ready for every stream of the ring
      const index_t rows = c->first == c->last ? 0 : rows_of_range(c->first, c->last);
      c->resident = plan.k > 0 && plan.a_slots >= static_cast<std::size_t>(rows * plan.k_chunks) &&
                    plan.b_slots >= static_cast<std::size_t>(plan.col_panels * plan.k_chunks);
      if (traced) {
        c->origin = std::make_unique<event>(event::timing::enabled);
        c->origin->record(c->loader->view());
        c->origin->synchronize();  // the loader is idle: the host clock now is the origin's (within µs)
        c->host_origin = std::chrono::steady_clock::now();
      }
      ctx.push_back(std::move(c));
    }
  }

  /// Copies panel `key` into its cache slot on the device's loader stream (after every stream that
  /// read the slot's previous panel is past that read); the copy's end is the slot's ready event.
  /// A panel the plan transposes lands in a raw buffer instead (after the transpose that read that
  /// buffer last), and the transpose into the slot runs on the device's xposer stream, after the
  /// copy and the slot's readers; its end is the ready event, so the next copy overlaps it.
  void load(ooc_device_ctx& dc, bool is_a, index_t key, std::size_t& moved) {
    ooc_cache& cache = is_a ? dc.a : dc.b;
    ooc_staging& stage = is_a ? dc.a_stage : dc.b_stage;
    const bool pinned = is_a ? a_pinned : b_pinned;
    const bool xpose = is_a ? plan.stage_a : plan.stage_b;
    ooc_raw& raw = is_a ? dc.a_raw : dc.b_raw;
    const stream_view ls = dc.loader->view();
    const std::size_t cs = static_cast<std::size_t>(key) % cache.tag.size();
    T* const slot_ptr = reinterpret_cast<T*>(cache.base + cs * cache.panel_bytes);
    const index_t panel = key / plan.k_chunks, q = key % plan.k_chunks;
    const index_t k0 = q * plan.kc, kq = plan.chunk_k(q);
    const ooc_rect<T> src =
        is_a ? ooc_sub<T>(a, panel * plan.bm, std::min(plan.bm, plan.m - panel * plan.bm), k0, kq)
             : ooc_sub<T>(b, k0, kq, panel * plan.bn, std::min(plan.bn, plan.n - panel * plan.bn));
    const std::size_t es = sizeof(T);
    const auto lines = static_cast<std::size_t>(src.lines), len = static_cast<std::size_t>(src.len);
    // Lines [l0, l0 + n) of the panel into dst (pitch dld elements) on the loader stream.
    auto copy_in = [&](T* dst, index_t dld, std::size_t l0, std::size_t n) {
      if (n == 0 || len == 0) return;
      const T* from = src.first + l0 * static_cast<std::size_t>(src.ld);
      if (pinned) {
        SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaMemcpy2DAsync(
            dst, static_cast<std::size_t>(dld) * es, from, static_cast<std::size_t>(src.ld) * es, len * es, n,
            cudaMemcpyHostToDevice, ls.value())));
      } else {
        const int f = stage.next;
        stage.next ^= 1;
        stage.done[f].synchronize();  // the previous copy out of this staging buffer has finished
        ooc_copy_lines(stage.buf[f].data(), static_cast<std::size_t>(dld) * es, from,
                       static_cast<std::size_t>(src.ld) * es, len * es, n);
        SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaMemcpyAsync(
            dst, stage.buf[f].data(), ((n - 1) * static_cast<std::size_t>(dld) + len) * es,
            cudaMemcpyHostToDevice, ls.value())));
        stage.done[f].record(ls);
      }
      moved += n * len * es;
    };
    stream_view done = ls;
    if (!xpose) {
      for (auto& e : cache.used[cs]) ls.wait(e);
      copy_in(slot_ptr, is_a ? a_ld_dev() : b_ld_dev(), 0, lines);
    } else {
      // The raw panel has `lines` = k-chunk lines of `len` = rows (A) / columns (B) elements. It
      // lands in pieces of whole lines, alternating between the two raw buffers; each piece is
      // transposed on the xposer stream into its k columns of the slot (after the slot's readers)
      // while the next one lands.
      const index_t rld = raw_ld(is_a);
      const auto per = static_cast<std::size_t>(std::max<index_t>(1, is_a ? plan.raw_a_lines : plan.raw_b_lines));
      done = dc.xposer->view();
      for (auto& e : cache.used[cs]) done.wait(e);
      for (std::size_t l0 = 0; l0 < lines; l0 += per) {
        const std::size_t n = std::min(per, lines - l0);
        const std::size_t rf = raw.next;
        raw.next = (raw.next + 1) % ooc_raw_buffers;
        ls.wait(raw.free[rf]);
        T* const rbuf = reinterpret_cast<T*>(raw.buf[rf]);
        copy_in(rbuf, rld, l0, n);
        raw.landed[rf].record(ls);
        done.wait(raw.landed[rf]);
        ooc_transpose<T>(rbuf, rld, static_cast<index_t>(n), static_cast<index_t>(len), slot_ptr + l0,
                         is_a ? a_ld_dev() : b_ld_dev(), done);
        SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaGetLastError()));
        raw.free[rf].record(done);
      }
    }
    cache.ready[cs].record(done);
    cache.tag[cs] = key;
    if (traced) {
      dc.load_end.emplace_back(event::timing::enabled);
      dc.load_end.back().record(done);
      dc.load_bytes.push_back(lines * len * es);
      dc.load_key.push_back(is_a ? key + 1 : -(key + 1));
    }
  }

  /// Panel `key` present for stream s (copied now if it is not cached); its device address.
  const T* ensure(ooc_device_ctx& dc, bool is_a, index_t key, stream_view s, std::size_t& moved) {
    ooc_cache& cache = is_a ? dc.a : dc.b;
    const std::size_t cs = static_cast<std::size_t>(key) % cache.tag.size();
    if (cache.tag[cs] != key) load(dc, is_a, key, moved);
    s.wait(cache.ready[cs]);
    return reinterpret_cast<const T*>(cache.base + cs * cache.panel_bytes);
  }

  /// Requests the panels of the blocks after `idx` in the device's range, in order, while each
  /// one's cache slot holds a panel that no block between idx and it still needs.
  void prefetch(ooc_device_ctx& dc, std::size_t idx, std::size_t& moved) {
    if (idx < dc.first || idx >= dc.last || plan.k == 0) return;  // a block taken from another device
    if (dc.cursor <= idx) dc.cursor = idx + 1;
    // need_a[i] / need_b[j]: how many blocks in (idx, cursor) read A row panel i / B column panel j.
    auto window = [&](int d) {
      for (std::size_t x = idx + 1; x < dc.cursor; ++x) {
        dc.need_a[static_cast<std::size_t>(plan.order[x].i)] += d;
        for (index_t j = plan.first_panel(plan.order[x]); j < plan.last_panel(plan.order[x]); ++j)
          dc.need_b[static_cast<std::size_t>(j)] += d;
      }
    };
    window(1);
    // A pageable panel is staged by host threads inside this call: a few per block keep the
    // scheduler's next enqueue (and so the GPU) from waiting behind a long run of host copies.
    std::size_t staged = 0;
    // With every panel resident nothing is ever evicted: the loader copies all of them back to
    // back from the first block on, in the order the blocks first need them.
    const std::size_t ahead = dc.resident ? dc.last : ooc_lookahead;
    while (dc.cursor < dc.last && dc.cursor - idx <= ahead && staged < ooc_staged_per_block) {
      const ooc_block nb = plan.order[dc.cursor];
      bool ok = true;
      // The block's own panels on each side: A row panel i; B panels [first, last) of its group.
      const index_t own_lo[2] = {nb.i, plan.first_panel(nb)}, own_hi[2] = {nb.i + 1, plan.last_panel(nb)};
      for (int side = 0; side < 2 && ok; ++side) {
        const bool is_a = side == 0;
        const ooc_cache& cache = is_a ? dc.a : dc.b;
        // More keys than cache slots: the block's own panels evict each other, so it copies them
        // in turn itself (a prefetch here would be evicted unused and copied again).
        if ((own_hi[side] - own_lo[side]) * plan.k_chunks > static_cast<index_t>(cache.tag.size())) continue;
        const std::vector<int>& need = is_a ? dc.need_a : dc.need_b;
        for (index_t own = own_lo[side]; own < own_hi[side] && ok; ++own) {
          for (index_t q = 0; q < plan.k_chunks && ok; ++q) {
            const index_t key = own * plan.k_chunks + q;
            const index_t held = cache.tag[static_cast<std::size_t>(key) % cache.tag.size()];
            if (held == key || held < 0) continue;
            const index_t held_panel = held / plan.k_chunks;
            // Not while a block before this one still reads the held panel, nor when two of this
            // block's own keys share the slot (the block then copies them in turn itself).
            const bool held_own = held_panel >= own_lo[side] && held_panel < own_hi[side];
            if (held_own || need[static_cast<std::size_t>(held_panel)] > 0) ok = false;
          }
        }
      }
      if (!ok) break;
      for (int side = 0; side < 2; ++side) {
        const bool is_a = side == 0;
        ooc_cache& cache = is_a ? dc.a : dc.b;
        if ((own_hi[side] - own_lo[side]) * plan.k_chunks > static_cast<index_t>(cache.tag.size())) continue;
        for (index_t q = 0; q < plan.k_chunks; ++q) {
          for (index_t own = own_lo[side]; own < own_hi[side]; ++own) {
            const index_t key = own * plan.k_chunks + q;
            if (cache.tag[static_cast<std::size_t>(key) % cache.tag.size()] != key) {
              load(dc, is_a, key, moved);
              if (!(is_a ? a_pinned : b_pinned)) ++staged;
            }
          }
        }
      }
      ++dc.need_a[static_cast<std::size_t>(nb.i)];
      for (index_t j = own_lo[1]; j < own_hi[1]; ++j) ++dc.need_b[static_cast<std::size_t>(j)];
      ++dc.cursor;
    }
    window(-1);
  }

  void enqueue(std::size_t t, task_slot& slot, stream_view s) {
    SPILLWAY_FAULT_TASK_SCOPE(t, slot.device());  // counts this block's copies and launches (tests only)
    const std::size_t di = slot.worker();
    ooc_device_ctx& dc = *ctx[di];
    const std::size_t idx = queue->pop(di);
    task_block[t] = idx;
    const ooc_block blk = plan.order[idx];
    const index_t r0 = blk.i * plan.bm, rows = plan.block_rows(blk);
    const index_t c0 = plan.block_col0(blk), cols = plan.block_cols(blk);
    const index_t ldc = c_ld_dev(rows, cols);
    TC* cdev = slot.device<TC>(0);
    const matrix_view<TC> cblock{cdev, rows, cols, ldc, c.order, 0};
    const std::size_t cb = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols) * sizeof(TC);
    std::size_t moved = 0;
    const ooc_rect<TC> csub = ooc_sub<TC>(matrix_view<const TC>(c), r0, rows, c0, cols);
    const std::size_t c_line = static_cast<std::size_t>(csub.len) * sizeof(TC);
    const std::size_t c_pitch = static_cast<std::size_t>(ldc) * sizeof(TC);
    if (read_c) {
      if (c_pinned) {
        SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(
            cudaMemcpy2DAsync(cdev, c_pitch, csub.first, static_cast<std::size_t>(c.ld) * sizeof(TC), c_line,
                              static_cast<std::size_t>(csub.lines), cudaMemcpyHostToDevice, s.value())));
      } else {
        TC* st = slot.pinned<TC>(0);
        ooc_copy_lines(st, c_pitch, csub.first, static_cast<std::size_t>(c.ld) * sizeof(TC), c_line,
                       static_cast<std::size_t>(csub.lines));
        SPILLWAY_CUDA_TRY(
            SPILLWAY_FAULT_CALL(cudaMemcpyAsync(cdev, st, cb, cudaMemcpyHostToDevice, s.value())));
      }
      moved += cb;
    }
    gemm_options o = opt;
    o.batch_count = 1;
    Acc* work = use_work ? slot.device<Acc>(1) : nullptr;
    auto stamp = [&](std::vector<std::unique_ptr<event>>& evs) {
      if (!traced) return;
      evs[idx] = std::make_unique<event>(event::timing::enabled);
      evs[idx]->record(s);
      ev_ctx[idx] = static_cast<int>(di);
    };
    if (plan.k == 0) {
      stamp(ev_ready);
      gemm_async(s, alpha, matrix_view<const T>{nullptr, rows, 0, 1, layout::row_major, 0},
                 matrix_view<const T>{nullptr, 0, cols, 1, layout::col_major, 0}, beta, cblock, o);
      SPILLWAY_FAULT_LAUNCHED("gemm_async of a block (k = 0)");
    }
    // One GEMM per k chunk and B panel of the block's group, each after only its own panels: with
    // a group of several panels the first GEMMs run while the later panels are still arriving.
    // The C sub-block of panel j starts at column (j - first) * bn of the block.
    auto sub = [&](auto* base, index_t off, index_t w) {
      using E = std::remove_pointer_t<decltype(base)>;
      E* p0 = base == nullptr ? nullptr
                              : base + (c.order == layout::row_major ? off : off * static_cast<index_t>(ldc));
      return matrix_view<E>{p0, rows, w, ldc, c.order, 0};
    };
    for (index_t q = 0; q < (plan.k == 0 ? 0 : plan.k_chunks); ++q) {
      const index_t kq = plan.chunk_k(q);
      const T* ap = ensure(dc, true, blk.i * plan.k_chunks + q, s, moved);
      const matrix_view<const T> av{ap, rows, kq, a_ld_dev(), a_dev_order(), 0};
      for (index_t j = plan.first_panel(blk); j < plan.last_panel(blk); ++j) {
        const T* bp = ensure(dc, false, j * plan.k_chunks + q, s, moved);
        if (q == 0 && j == plan.first_panel(blk)) stamp(ev_ready);
        const index_t off = (j - plan.first_panel(blk)) * plan.bn, w = plan.panel_cols(j);
        const matrix_view<const T> bv{bp, kq, w, b_ld_dev(), b_dev_order(), 0};
        if (use_work) {
          gemm_async(s, alpha, av, bv, q == 0 ? Acc(0) : Acc(1), sub(work, off, w), o);
        } else {
          gemm_async(s, alpha, av, bv, q == 0 ? beta : Acc(1), sub(cdev, off, w), o);
        }
        SPILLWAY_FAULT_LAUNCHED("gemm_async of a block's k chunk");
        dc.b.used[static_cast<std::size_t>(j * plan.k_chunks + q) % dc.b.tag.size()][slot.index()].record(s);
      }
      dc.a.used[static_cast<std::size_t>(blk.i * plan.k_chunks + q) % dc.a.tag.size()][slot.index()].record(
          s);
    }
    if (use_work) {
      const index_t count = rows * cols;
      const unsigned grid = grid_blocks(count, 256, 4096);
      ooc_combine_kernel<TC, Acc><<<grid, 256, 0, s.value()>>>(work, cdev, count, beta, read_c);
      SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaGetLastError()));
    }
    stamp(ev_gemm);
    if (!c_staged_out) {
      SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaMemcpy2DAsync(
          const_cast<TC*>(csub.first), static_cast<std::size_t>(c.ld) * sizeof(TC), cdev, c_pitch, c_line,
          static_cast<std::size_t>(csub.lines), cudaMemcpyDeviceToHost, s.value())));
    } else {
      // In pieces of whole lines, each 1-D into the slot's pinned buffer (the device block's own
      // layout) with an event after it; each piece goes to the scatter pool, whose threads write it
      // into C as soon as it lands. The slot's stream then waits for all of them (ooc_scatter::wait).
      ooc_scatter& sc = *dc.scatter[slot.index()];  // its previous block is in C (the slot was free)
      const std::size_t lines = static_cast<std::size_t>(csub.lines);
      const std::size_t pieces = std::min(ooc_scatter_pieces, lines);
      const std::size_t per = (lines + pieces - 1) / pieces;
      auto* stage = reinterpret_cast<unsigned char*>(slot.pinned<TC>(0));
      const auto* dev = reinterpret_cast<const unsigned char*>(cdev);
      ooc_piece piece[ooc_scatter_pieces];
      std::size_t issued = 0;
      for (std::size_t l0 = 0; l0 < lines; l0 += per, ++issued) {
        const std::size_t n = std::min(per, lines - l0);
        SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaMemcpyAsync(stage + l0 * c_pitch, dev + l0 * c_pitch,
                                                              n * c_pitch, cudaMemcpyDeviceToHost, s.value())));
        SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaEventRecord(sc.landed[issued], s.value())));
        ooc_piece& p = piece[issued];
        p.owner = &sc;
        p.landed = sc.landed[issued];
        p.dst = reinterpret_cast<unsigned char*>(const_cast<TC*>(csub.first)) +
                l0 * static_cast<std::size_t>(c.ld) * sizeof(TC);
        p.dpitch = static_cast<std::size_t>(c.ld) * sizeof(TC);
        p.src = stage + l0 * c_pitch;
        p.spitch = c_pitch;
        p.width = c_line;
        p.lines = n;
        p.streaming = scatter_streaming;
      }
#if defined(SPILLWAY_FAULT_INJECTION)
      // One pool call per block, as the host copies of pageable panels count: its last piece throws.
      if (::spillway::fault::detail::staging_call_fault()) piece[issued - 1].fail = true;
#endif
      {
        std::lock_guard<std::mutex> l(sc.m);
        sc.left = issued;
        sc.error = nullptr;
        sc.finished = traced ? &host_out[idx] : nullptr;
      }
      std::size_t submitted = 0;
      try {
        for (; submitted < issued; ++submitted) {
          scatter_pool->submit([p = piece[submitted]] { ooc_write_piece(p); });
        }
        SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaLaunchHostFunc(s.value(), &ooc_scatter::wait, &sc)));
      } catch (...) {
        {
          std::lock_guard<std::mutex> l(sc.m);
          sc.left -= issued - submitted;  // never queued
        }
        sc.wait_all();  // the queued pieces read the slot's buffer: they finish before the task fails
        throw;
      }
    }
    moved += cb;
    if (!c_staged_out) stamp(ev_out);
    prefetch(dc, idx, moved);
    slot.add_bytes_moved(moved);
  }

  /// The trace's times (after the job: every recorded event has completed or never will).
  void read_trace(ooc_trace& tr) const {
    auto ms = [](const event& from, const event* to) {
      float v = 0;
      if (to == nullptr || cudaEventElapsedTime(&v, from.value(), to->value()) != cudaSuccess) {
        (void)cudaGetLastError();
        return std::numeric_limits<float>::quiet_NaN();
      }
      return v;
    };
    for (std::size_t d = 0; d < ctx.size(); ++d) {
      const ooc_device_ctx& dc = *ctx[d];
      device_guard g(dc.device);
      for (std::size_t x = 0; x < dc.load_end.size(); ++x) {
        tr.load_device.push_back(dc.device);
        const index_t key = dc.load_key[x] > 0 ? dc.load_key[x] - 1 : -dc.load_key[x] - 1;
        tr.load_operand.push_back(dc.load_key[x] > 0 ? 'A' : 'B');
        tr.load_panel.push_back(key / plan.k_chunks);
        tr.load_chunk.push_back(key % plan.k_chunks);
        tr.load_bytes.push_back(dc.load_bytes[x]);
        tr.load_end_ms.push_back(ms(*dc.origin, &dc.load_end[x]));
      }
    }
    const std::size_t n = plan.tasks();
    tr.block_device.assign(n, -1);
    tr.ready_ms.assign(n, std::numeric_limits<float>::quiet_NaN());
    tr.gemm_end_ms = tr.ready_ms;
    tr.out_end_ms = tr.ready_ms;
    for (std::size_t x = 0; x < n; ++x) {
      if (ev_ctx[x] < 0) continue;
      const ooc_device_ctx& dc = *ctx[static_cast<std::size_t>(ev_ctx[x])];
      device_guard g(dc.device);
      tr.block_device[x] = dc.device;
      tr.ready_ms[x] = ms(*dc.origin, ev_ready[x].get());
      tr.gemm_end_ms[x] = ms(*dc.origin, ev_gemm[x].get());
      if (c_staged_out) {
        if (host_out[x] != std::chrono::steady_clock::time_point{})
          tr.out_end_ms[x] = static_cast<float>(
              std::chrono::duration<double, std::milli>(host_out[x] - dc.host_origin).count());
      } else {
        tr.out_end_ms[x] = ms(*dc.origin, ev_out[x].get());
      }
    }
  }

  /// Task t's C block is in C (its stream, host copy included, has passed the slot's event); a
  /// staged block whose host copy threw fails its task here.
  void complete(std::size_t, task_slot& slot) {
    if (!c_staged_out) return;
    ooc_scatter& sc = *ctx[slot.worker()]->scatter[slot.index()];
    std::exception_ptr e;
    {
      std::lock_guard<std::mutex> l(sc.m);
      e = std::exchange(sc.error, nullptr);
    }
    if (e) std::rethrow_exception(e);
  }

  [[nodiscard]] c_block caller_block(std::size_t t, bool transposed) const {
    if (task_block[t] == none) return {};
    const ooc_block blk = plan.order[task_block[t]];
    c_block r{blk.i * plan.bm, plan.block_rows(blk), plan.block_col0(blk), plan.block_cols(blk)};
    if (transposed) r = {r.col0, r.cols, r.row0, r.rows};
    return r;
  }
};

/// ooc_compute_estimate of the product on the slowest of `devices` (its SM count, peak clock and
/// compute capability read from the runtime), for the element type and the resolved path.
template <class T>
double ooc_estimate(index_t m, index_t n, index_t k, const gemm_options& o, gemm_path path,
                    const std::vector<int>& devices) {
  const ooc_arith a = ooc_arith_of(gemm_type_info_of<T>().arith, o.math == math_mode::tf32);
  const ooc_unit u = path == gemm_path::wgmma      ? ooc_unit::wgmma
                     : path == gemm_path::mma_sync ? ooc_unit::mma_sync
                                                   : ooc_unit::simt;
  double worst = 0;
  for (int d : devices) {
    const ooc_device_shape shape{compute_capability(d), multiprocessor_count(d), clock_rate_khz(d) * 1e3};
    worst = std::max(worst, ooc_compute_estimate(m, n, k, a, u, shape));
  }
  return worst;
}

/// Page-locks a pageable operand of the job for the call where `wanted` (ooc_options::lock).
template <class T>
host_registration ooc_register(const matrix_view<const T>& v, bool wanted, bool read_only) {
  const index_t fp = footprint(v);
  if (!wanted || fp == 0) return {};
  return try_register_host(v.data, static_cast<std::size_t>(fp) * sizeof(T), read_only);
}

template <class T>
bool ooc_page_locked(host_memory mode, const matrix_view<const T>& v) {
  const index_t fp = footprint(v);
  if (fp == 0) return true;
  return ::spillway::detail::resolve_memory(mode, v.data, static_cast<std::size_t>(fp) * sizeof(T)) ==
         host_memory::page_locked;
}

}  // namespace detail

/// C = α·A·B + β·C with A (m x k), B (k x n) and C (m x n) host matrices as the views give them
/// (row- or column-major, any leading dimension, `.t()` for op = transpose; page-locked or pageable),
/// computed block by block on the devices of `ooc` within its memory budget per device, by the
/// in-core GEMM of each block under `opt` (path, math; `opt.split_k` 0 means 1 here, a forced
/// split is kept and its workspace planned; batch_count must be 1). β = 0 never reads C.
/// Synchronous: returns when C is written (or the progress callback cancelled: then
/// report.job.cancelled is set and report.written() lists the blocks of C that are complete).
/// Throws logic_error for bad arguments (before anything runs), a forced path a device cannot run,
/// and a budget below the smallest plan (the message states that minimum); pipeline_error when a
/// block fails (it names the task; ooc.report_on_error, if set, receives which blocks were written).
template <class TA, class TB, class TC, class Scalar>
ooc_report gemm_out_of_core(Scalar alpha, matrix_view<TA> a, matrix_view<TB> b, Scalar beta,
                            matrix_view<TC> c, const gemm_options& opt = {}, const ooc_options& ooc = {}) {
  const auto t_call = std::chrono::steady_clock::now();
  detail::static_check_types<TA, TB, TC>();
  using T = std::remove_cv_t<TA>;
  using Acc = accumulator_t<T>;
  detail::check_gemm_args(a, b, c, opt, "gemm_out_of_core");
  SPILLWAY_EXPECTS(opt.batch_count == 1, "gemm_out_of_core: batch_count is " +
                                             std::to_string(opt.batch_count) +
                                             "; out-of-core GEMMs take one matrix each (batch_count 1)");
  SPILLWAY_EXPECTS(ooc.compute_seconds >= 0 && ooc.compute_seconds < std::numeric_limits<double>::infinity(),
                   "gemm_out_of_core: ooc_options::compute_seconds is " + std::to_string(ooc.compute_seconds) +
                       "; give the in-core time of the product in seconds, or 0 to have it estimated");
  const job_devices jd = resolve_job_devices(ooc.devices, ooc.budget, "gemm_out_of_core");
  const std::vector<int>& devices = jd.devices;
  gemm_options o = opt;
  if (o.split_k == 0) o.split_k = 1;  // blocks are planned large enough to fill the device
  gemm_path path = gemm_path::simt;
  for (int d : devices) path = resolve_path<T>(o, d);  // a forced path every device can run, or throw

  const matrix_view<const T> ca = a, cb = b;
  const matrix_view<const TC> cc = c;
  ooc_report rep;
  // Registrations live until the call returns (declared before the job, released after it).
  const bool lock_any = ooc.memory == host_memory::detect && ooc.lock != page_lock::never;
  const bool always = ooc.lock == page_lock::always;
  const bool b_rows = b.order == layout::row_major;
  const bool lock_b = lock_any && (always || b_rows);
  const bool lock_ac = lock_any && (always || (b_rows && sizeof(T) <= 2));
  const host_registration reg_a = detail::ooc_register<T>(ca, lock_ac, true);
  const host_registration reg_b = detail::ooc_register<T>(cb, lock_b, true);
  const host_registration reg_c = detail::ooc_register<TC>(cc, lock_ac, false);
  rep.a_registered = reg_a.active();
  rep.b_registered = reg_b.active();
  rep.c_registered = reg_c.active();
  rep.a_page_locked = detail::ooc_page_locked<T>(ooc.memory, ca);
  rep.b_page_locked = detail::ooc_page_locked<T>(ooc.memory, cb);
  rep.c_page_locked = detail::ooc_page_locked<TC>(ooc.memory, cc);
  const memory_budget& budget = jd.budget;
  rep.budget_bytes = budget.bytes();
  const Acc al = static_cast<Acc>(alpha), be = static_cast<Acc>(beta);

  ooc_plan_request r;
  r.m = a.rows;
  r.n = b.cols;
  r.k = a.cols;
  r.in_bytes = sizeof(T);
  r.out_bytes = sizeof(TC);
  r.acc_bytes = sizeof(Acc);
  r.c_is_acc = std::is_same_v<TC, Acc>;
  r.read_c = !(be == Acc(0));
  r.budget_bytes = budget.bytes();
  r.devices = devices.size();
  // The tensor-core launchers read K-major operands: an MN-major operand's panels (A column-major,
  // B row-major, whatever C's layout) are transposed once each as they land (ooc_job::load), so the
  // in-core GEMMs of the blocks get K-major panels and stage nothing.
  const bool tensor = path != gemm_path::simt;
  r.stage_a = tensor && a.order == layout::col_major;
  r.stage_b = tensor && b.order == layout::row_major;
  r.split_k = o.split_k;
  r.max_block = ooc.max_block;
  r.rates = ooc.rates;
  rep.compute_estimated = ooc.compute_seconds == 0;
  r.compute_seconds = rep.compute_estimated ? detail::ooc_estimate<T>(a.rows, b.cols, a.cols, o, path, devices)
                                            : ooc.compute_seconds;
  rep.compute_seconds = r.compute_seconds;
  r.c_row_major = c.order == layout::row_major;
  r.c_min_line_bytes = ooc.c_min_line_bytes;
  r.raw_piece_bytes = ooc.raw_piece_bytes;
  rep.plan = choose_ooc_plan(r, ooc.c_out, rep.c_page_locked, ooc.slots_per_device);
  const bool c_staged = rep.plan.c_staged;
  if (c.rows == 0 || c.cols == 0) return rep;

  detail::ooc_job<T, TC> job;
  job.plan = rep.plan;
  if (job.plan.transposed) {
    job.a = cb.t();
    job.b = ca.t();
    job.c = c.t();
    job.a_pinned = rep.b_page_locked;
    job.b_pinned = rep.a_page_locked;
  } else {
    job.a = ca;
    job.b = cb;
    job.c = c;
    job.a_pinned = rep.a_page_locked;
    job.b_pinned = rep.b_page_locked;
  }
  job.c_pinned = rep.c_page_locked;
  job.c_staged_out = c_staged;
  job.scatter_threads = ooc.scatter_threads == 0 ? detail::ooc_scatter_threads : ooc.scatter_threads;
  job.scatter_streaming = ooc.scatter_streaming;
  job.alpha = al;
  job.beta = be;
  job.read_c = r.read_c;
  job.use_work = job.plan.k_chunks > 1 && !std::is_same_v<TC, Acc>;
  job.opt = o;
  job.devices = devices;
  job.queue = std::make_unique<detail::ooc_queue>(job.plan.device_first);
  job.task_block.assign(job.plan.tasks(), detail::ooc_job<T, TC>::none);
  job.traced = ooc.trace != nullptr;
  job.setup();
  if (ooc.trace != nullptr) {
    *ooc.trace = ooc_trace{};
    ooc.trace->setup_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t_call).count();
  }

  task_job_options to;
  to.devices = devices;
  to.slots_per_device = job.plan.slots;
  to.device_buffer_bytes = {job.plan.c_block_bytes};
  if (job.use_work) to.device_buffer_bytes.push_back(job.plan.c_block_bytes / sizeof(TC) * sizeof(Acc));
  if (job.c_staged_out) to.pinned_buffer_bytes = {job.plan.c_block_bytes};
  to.progress = ooc.progress;
  auto fill = [&](const job_report& jr) {
    rep.job = jr;
    rep.block_of_task.resize(job.task_block.size());
    for (std::size_t t = 0; t < job.task_block.size(); ++t)
      rep.block_of_task[t] = job.caller_block(t, job.plan.transposed);
  };
  try {
    const job_report jr = run_tasks(
        job.plan.tasks(), to,
        [&job](std::size_t t, task_slot& slot, stream_view s) { job.enqueue(t, slot, s); },
        [&job](std::size_t t, task_slot& slot) { job.complete(t, slot); });
    fill(jr);
    if (ooc.trace != nullptr) job.read_trace(*ooc.trace);
  } catch (const pipeline_error& e) {
    if (ooc.report_on_error != nullptr) {
      fill(e.report());
      *ooc.report_on_error = rep;
    }
    throw;
  }
  return rep;
}

}  // namespace spillway::gemm
