// spillway/tile/cp_async.cuh — asynchronous global -> shared copies (sm_80+), the feed of the
// mma.sync and SIMT tile kernels: 16-, 8- and 4-byte cp.async with zero fill for the bytes past an
// edge, commit groups and waits, and the shared-memory address conversion.
#pragma once

#include <spillway/tile/arch.cuh>

#include <cstdint>

namespace spillway::tile {

/// The 32-bit shared-state-space address of a shared-memory pointer (what PTX operands take).
__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// The functions exist in every compilation pass (kernels that call them must parse in the host pass
// and for older targets); on a target without cp.async their device body traps, so a kernel that
// reaches one there fails loudly rather than computing on unfilled shared memory. Dispatchers never
// launch such kernels on such targets (build_features()).

/// Copies `Bytes` (4, 8 or 16) from global `src` to shared `dst`; when `valid` is false nothing is
/// read and the destination is zero-filled (edge tiles). 16-byte copies bypass L1 (.cg).
template <int Bytes>
__device__ __forceinline__ void cp_async(std::uint32_t dst, const void* src, bool valid) {
  static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "cp.async copies 4, 8 or 16 bytes");
#ifdef SPILLWAY_TILE_HAS_MMA
  const int src_bytes = valid ? Bytes : 0;
  if constexpr (Bytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(src), "n"(Bytes), "r"(src_bytes)
                 : "memory");
  }
#else
  (void)dst, (void)src, (void)valid;
  __trap();
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#ifdef SPILLWAY_TILE_HAS_MMA
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
/// Waits until at most `Pending` committed groups are still in flight.
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
#ifdef SPILLWAY_TILE_HAS_MMA
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
#endif
}

}  // namespace spillway::tile
