// spillway/pipeline/host_workers.hpp — a process-wide pool of host threads for the
// pipeline's host-side copies (pageable ⇄ pinned staging), and a cache of pinned staging blocks.
//
// Why threads: a single core copies ~10 GB/s at best, below what one PCIe 5 link moves in each
// direction; staging pageable data on several cores keeps the copy engines busy. Why a cache:
// pinning is slow (the OS locks every page), so staging blocks are pinned once and reused by later
// jobs, like device memory in spillway's pool.
#pragma once

#include <spillway/core/fault_hook.hpp>
#include <spillway/core/error.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace spillway::detail {

/// A fixed pool of worker threads running submitted closures. Destroyed at exit (joins).
class host_workers {
 public:
  explicit host_workers(std::size_t threads) {
    threads_.reserve(threads);
    for (std::size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { work(); });
  }
  ~host_workers() {
    {
      std::lock_guard<std::mutex> l(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  host_workers(const host_workers&) = delete;
  host_workers& operator=(const host_workers&) = delete;

  [[nodiscard]] std::size_t size() const noexcept { return threads_.size(); }

  /// Queues fn for the next free thread and returns (fn must not throw). The destructor runs every
  /// queued fn before it joins.
  void submit(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> l(mutex_);
      queue_.push_back(std::move(fn));
    }
    cv_.notify_one();
  }

  /// Runs fn(i) for i in [0, parts): part 0 on the calling thread, the rest on the pool; returns
  /// when all are done. If parts throw, every part still finishes (they share the caller's
  /// frame) and then the first exception is rethrown on the calling thread, so a failing copy stops
  /// the job that asked for it instead of terminating the process from a pool thread.
  template <class Fn>
  void run_parts(std::size_t parts, const Fn& fn) {
    if (parts == 0) return;
#if defined(SPILLWAY_FAULT_INJECTION)
    const bool injected = ::spillway::fault::detail::staging_call_fault();  // the last part throws (tests only)
    auto part = [&fn, parts, injected](std::size_t i) {
      if (injected && i == parts - 1) ::spillway::fault::detail::throw_staging_fault();
      fn(i);
    };
#else
    const Fn& part = fn;
#endif
    if (parts == 1 || threads_.empty()) {
      std::exception_ptr first;
      for (std::size_t i = 0; i < parts; ++i) {
        try {
          part(i);
        } catch (...) {
          if (!first) first = std::current_exception();
        }
      }
      if (first) std::rethrow_exception(first);
      return;
    }
    struct latch_t {
      std::mutex m;
      std::condition_variable cv;
      std::size_t left;
      std::exception_ptr error;
    } latch;
    latch.left = parts - 1;
    {
      std::lock_guard<std::mutex> l(mutex_);
      for (std::size_t i = 1; i < parts; ++i) {
        queue_.emplace_back([&part, &latch, i] {
          std::exception_ptr e;
          try {
            part(i);
          } catch (...) {
            e = std::current_exception();
          }
          std::lock_guard<std::mutex> g(latch.m);
          if (e && !latch.error) latch.error = e;
          if (--latch.left == 0) latch.cv.notify_one();
        });
      }
    }
    cv_.notify_all();
    std::exception_ptr first;
    try {
      part(0);
    } catch (...) {
      first = std::current_exception();
    }
    std::unique_lock<std::mutex> g(latch.m);
    latch.cv.wait(g, [&] { return latch.left == 0; });
    if (!first) first = latch.error;
    g.unlock();
    if (first) std::rethrow_exception(first);
  }

 private:
  void work() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> l(mutex_);
        cv_.wait(l, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping and drained
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      job();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
};

/// The pipeline's host worker pool: one thread per hardware thread, less one (the caller's), at most 32.
inline host_workers& staging_workers() {
  static host_workers pool([] {
    const unsigned hc = std::thread::hardware_concurrency();
    const std::size_t n = hc > 1 ? hc - 1 : 0;
    return std::min<std::size_t>(n, 32);
  }());
  return pool;
}

/// memcpy of `bytes` split over up to `max_parts` threads of the pool (pieces ≥ 4 MiB, 4 KiB-aligned).
inline void parallel_copy(void* dst, const void* src, std::size_t bytes, std::size_t max_parts) {
  constexpr std::size_t min_piece = std::size_t{4} << 20;
  std::size_t parts = bytes / min_piece;
  if (parts > max_parts) parts = max_parts;
  if (parts <= 1) {
#if defined(SPILLWAY_FAULT_INJECTION)
    if (::spillway::fault::detail::staging_call_fault()) ::spillway::fault::detail::throw_staging_fault();
#endif
    if (bytes != 0) std::memcpy(dst, src, bytes);
    return;
  }
  std::size_t piece = (bytes + parts - 1) / parts;
  piece = (piece + 4095) / 4096 * 4096;
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  staging_workers().run_parts(parts, [=](std::size_t i) {
    const std::size_t b = i * piece;
    if (b >= bytes) return;
    const std::size_t n = std::min(piece, bytes - b);
    std::memcpy(d + b, s + b, n);
  });
}

/// A cache of pinned host blocks reused across jobs (portable across devices).
class pinned_cache {
 public:
  /// Blocks beyond this many cached bytes are freed rather than kept.
  static constexpr std::size_t keep_limit = std::size_t{2} << 30;

  ~pinned_cache() { trim(); }

  /// A pinned block of at least `bytes` (the smallest cached one that fits, else a new one).
  void* acquire(std::size_t bytes, std::size_t* got) {
    {
      std::lock_guard<std::mutex> l(mutex_);
      std::size_t best = free_.size();
      for (std::size_t i = 0; i < free_.size(); ++i) {
        if (free_[i].second >= bytes && (best == free_.size() || free_[i].second < free_[best].second)) best = i;
      }
      if (best != free_.size()) {
        auto b = free_[best];
        free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(best));
        cached_ -= b.second;
        *got = b.second;
        return b.first;
      }
    }
    void* p = nullptr;
#if defined(SPILLWAY_FAULT_INJECTION)
    const bool injected = ::spillway::fault::detail::pinned_allocation_fault();  // both tries fail (tests only)
#else
    constexpr bool injected = false;
#endif
    cudaError_t e = injected ? cudaErrorMemoryAllocation : host_alloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      trim();
      e = injected ? cudaErrorMemoryAllocation : host_alloc(&p, bytes);
    }
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      throw out_of_memory("pipeline staging: cannot pin " + format_bytes(bytes) + " of host memory", bytes, 0);
    }
    SPILLWAY_CUDA_CHECK(e, "cudaHostAlloc of " + format_bytes(bytes) + " for pipeline staging");
    *got = bytes;
    return p;
  }

  void release(void* p, std::size_t bytes) noexcept {
    if (p == nullptr) return;
    {
      std::lock_guard<std::mutex> l(mutex_);
      if (cached_ + bytes <= keep_limit) {
        free_.emplace_back(p, bytes);
        cached_ += bytes;
        return;
      }
    }
    host_free(p, bytes);
  }

  /// Frees every cached block.
  void trim() noexcept {
    std::vector<std::pair<void*, std::size_t>> v;
    {
      std::lock_guard<std::mutex> l(mutex_);
      v.swap(free_);
      cached_ = 0;
    }
    for (auto& b : v) host_free(b.first, b.second);
  }

  [[nodiscard]] std::size_t cached_bytes() {
    std::lock_guard<std::mutex> l(mutex_);
    return cached_;
  }

 private:
  static cudaError_t host_alloc(void** p, std::size_t bytes) {
#if defined(SPILLWAY_FAULT_INJECTION)
    const cudaError_t e = cudaHostAlloc(p, bytes, cudaHostAllocPortable);
    if (e == cudaSuccess) ::spillway::fault::detail::pinned_allocated(bytes);
    return e;
#else
    return cudaHostAlloc(p, bytes, cudaHostAllocPortable);
#endif
  }
  static void host_free(void* p, [[maybe_unused]] std::size_t bytes) noexcept {
    (void)cudaFreeHost(p);
#if defined(SPILLWAY_FAULT_INJECTION)
    ::spillway::fault::detail::pinned_freed(bytes);
#endif
  }

  std::mutex mutex_;
  std::vector<std::pair<void*, std::size_t>> free_;
  std::size_t cached_ = 0;
};

inline pinned_cache& staging_cache() {
  static pinned_cache c;
  return c;
}

/// A pinned staging block borrowed from the cache for one job (returned on destruction).
class staging_block {
 public:
  staging_block() noexcept = default;
  explicit staging_block(std::size_t bytes) : bytes_(bytes) {
    if (bytes != 0) ptr_ = staging_cache().acquire(bytes, &capacity_);
  }
  ~staging_block() { staging_cache().release(ptr_, capacity_); }
  staging_block(const staging_block&) = delete;
  staging_block& operator=(const staging_block&) = delete;
  staging_block(staging_block&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)), capacity_(std::exchange(o.capacity_, 0)) {}
  staging_block& operator=(staging_block&& o) noexcept {
    if (this != &o) {
      staging_cache().release(ptr_, capacity_);
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      capacity_ = std::exchange(o.capacity_, 0);
    }
    return *this;
  }
  [[nodiscard]] void* data() const noexcept { return ptr_; }
  [[nodiscard]] std::size_t size() const noexcept { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
  std::size_t capacity_ = 0;
};

}  // namespace spillway::detail

namespace spillway {
/// Frees the pinned staging blocks the pipeline keeps for reuse across jobs.
inline void trim_pinned_staging() noexcept { detail::staging_cache().trim(); }
}  // namespace spillway
