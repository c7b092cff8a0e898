// spillway/core/large_vector.hpp — sizing the large host vectors a job returns. A std::vector of a
// few hundred MB is written once by its own resize (value-initialized) on one thread, and with 4 KiB
// pages most of that time is page faults: ~0.14 s for 240 MB on the lent H200's host. Where the
// kernel offers transparent huge pages on request (Linux, THP "madvise" or "always"), the vector's
// pages are advised as huge before the resize touches them: one fault per 2 MiB.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace spillway::detail {

/// Advises [p, p + bytes) — its whole pages — as transparent huge pages (Linux; elsewhere, and
/// where the kernel refuses, nothing happens: the advice only changes how fast the pages fault in).
inline void advise_huge_pages(void* p, std::size_t bytes) noexcept {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr std::size_t huge = std::size_t{2} << 20;
  if (p == nullptr || bytes < 2 * huge) return;
  const long page_size = sysconf(_SC_PAGESIZE);
  if (page_size <= 0) return;
  const auto page = static_cast<std::uintptr_t>(page_size);
  const auto begin = (reinterpret_cast<std::uintptr_t>(p) + page - 1) / page * page;
  const auto end = (reinterpret_cast<std::uintptr_t>(p) + bytes) / page * page;
  if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

/// The host's physical memory in bytes (0 where it cannot be asked).
inline double host_memory_bytes() noexcept {
#if defined(__linux__)
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) return static_cast<double>(pages) * static_cast<double>(page);
#endif
  return 0.0;
}

/// v sized to n value-initialized elements (what it held is dropped), new storage advised as huge
/// pages before anything touches it.
template <class T>
void size_large(std::vector<T>& v, std::size_t n) {
  v.clear();
  if (n > v.capacity()) {
    std::vector<T>().swap(v);
    v.reserve(n);
    advise_huge_pages(v.data(), n * sizeof(T));
  }
  v.resize(n);
}

/// Gives the pages of v's storage past its size back to the system (Linux: MADV_DONTNEED on the
/// whole pages there; they read as zeros if the vector grows into them). For a vector sized ahead
/// to an estimate and then shrunk to what it holds.
template <class T>
void release_unused(std::vector<T>& v) noexcept {
#if defined(__linux__) && defined(MADV_DONTNEED)
  const long page_size = sysconf(_SC_PAGESIZE);
  if (page_size <= 0 || v.capacity() == v.size()) return;
  const auto page = static_cast<std::uintptr_t>(page_size);
  const auto begin = (reinterpret_cast<std::uintptr_t>(v.data() + v.size()) + page - 1) / page * page;
  const auto end = reinterpret_cast<std::uintptr_t>(v.data() + v.capacity()) / page * page;
  if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
#else
  (void)v;
#endif
}

}  // namespace spillway::detail
