// spillway/gemm/detail/ooc_host_copy.hpp — the out-of-core GEMM's host copies: lines with streaming
// stores, the scatter threads that write staged C blocks into the caller's C.
#pragma once

#if (defined(__SSE2__) || defined(_M_X64)) && !defined(__CUDA_ARCH__)
#include <emmintrin.h>
#define SPILLWAY_OOC_HAS_SSE2 1
#endif

#include <spillway/core/device.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/fault_hook.hpp>
#include <spillway/pipeline/host_workers.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <vector>

namespace spillway::gemm::detail {

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
/// moment its own copy out lands). Pieces let the copies in run faster than one block at a time on
/// the pool did; 2 held up best on a machine in a slow state (docs/gemm.md, "ooc_host_copy.hpp").
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

}  // namespace spillway::gemm::detail
