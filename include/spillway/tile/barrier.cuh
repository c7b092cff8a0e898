// spillway/tile/barrier.cuh — the stage-ring machinery of tensor-copy-engine kernels (sm_90+):
// shared-memory mbarriers (init, arrive, transaction counts, parity waits), the fences that order
// them against the async proxy, 2-D and 3-D tensor loads into shared memory (optionally multicast
// to a cluster), and tensor stores from shared memory with their bulk-group commit and waits.
//
// Addresses are 32-bit shared-state-space addresses (tile::smem_addr); tensor maps are passed by
// their generic address (a __grid_constant__ kernel parameter or global memory).
//
// The functions exist in every compilation pass so kernels that call them parse everywhere; on a
// target without the tensor copy engine their body traps (dispatchers never launch such kernels
// there: tile::build_features()).
#pragma once

#include <spillway/tile/arch.cuh>
#include <spillway/tile/cp_async.cuh>

#include <cstdint>

namespace spillway::tile {


/// Initializes the mbarrier at `bar` to expect `count` arrivals per phase (one thread, before use;
/// follow with fence_barrier_init() and a block barrier).
__device__ __forceinline__ void mbar_init(std::uint32_t bar, std::uint32_t count) {
  SPILLWAY_TILE_TMA_BODY(asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count)
                                      : "memory");)
  (void)bar, (void)count;
}

/// Makes mbarrier initializations visible to the async proxy and the cluster.
__device__ __forceinline__ void fence_barrier_init() {
  SPILLWAY_TILE_TMA_BODY(asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");)
}

/// Arrives once on `bar` and adds `bytes` to the transactions its current phase waits for (the
/// producer's arrival before it issues the tensor loads that complete them).
__device__ __forceinline__ void mbar_arrive_expect_tx(std::uint32_t bar, std::uint32_t bytes) {
  SPILLWAY_TILE_TMA_BODY(
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                   : "memory");)
  (void)bar, (void)bytes;
}

/// Arrives once on `bar` (release semantics: this thread's prior shared-memory reads are done).
__device__ __forceinline__ void mbar_arrive(std::uint32_t bar) {
  SPILLWAY_TILE_TMA_BODY(asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");)
  (void)bar;
}

/// Arrives once on the mbarrier at the same offset in the shared memory of cluster block `cta`.
/// Release at CTA scope (the default), which is what a consumer handing a stage back needs: its
/// reads of the stage were tensor-core (async-proxy) reads, complete once wgmma.wait_group
/// returned, and the peer's producer only overwrites the stage through the copy engine.
/// (.release.cluster costs a MEMBAR.ALL.GPU before every arrival: measured in SASS.)
#define SPILLWAY_TILE_ARRIVE_REMOTE(name, arrive)                                                           \
  __device__ __forceinline__ void name(std::uint32_t bar, std::uint32_t cta) {                               \
    SPILLWAY_TILE_TMA_BODY(asm volatile("{\n .reg .b32 remote;\n mapa.shared::cluster.u32 remote, %0, %1;\n " arrive \
                                        " _, [remote];\n}\n" ::"r"(bar),                                     \
                                        "r"(cta)                                                            \
                                        : "memory");)                                                       \
    (void)bar, (void)cta;                                                                                   \
  }
SPILLWAY_TILE_ARRIVE_REMOTE(mbar_arrive_cluster, "mbarrier.arrive.shared::cluster.b64")

/// Arrives once on the mbarrier at the same offset in cluster block `cta` with release at cluster
/// scope: this thread's prior writes (global or shared) are visible to whoever waits on that
/// barrier with mbar_wait_cluster.
SPILLWAY_TILE_ARRIVE_REMOTE(mbar_arrive_release_cluster, "mbarrier.arrive.release.cluster.shared::cluster.b64")
#undef SPILLWAY_TILE_ARRIVE_REMOTE

/// One probe: true when the phase of parity `parity` of `bar` has completed (`try_wait`: the
/// instruction, with its semantics and scope). `hint` is "" or ", %3": the suspend-time hint
/// operand (10 ms, an immediate; an operand the text does not name emits nothing).
#define SPILLWAY_TILE_TRY_WAIT(name, try_wait, hint)                                              \
  __device__ __forceinline__ bool name(std::uint32_t bar, std::uint32_t parity) {                 \
    std::uint32_t done = 1;                                                                       \
    SPILLWAY_TILE_TMA_BODY(asm volatile("{\n .reg .pred p;\n " try_wait " p, [%1], %2" hint ";\n" \
                                        " selp.u32 %0, 1, 0, p;\n}\n"                             \
                                        : "=r"(done)                                              \
                                        : "r"(bar), "r"(parity), "n"(10000000)                    \
                                        : "memory");)                                             \
    (void)bar, (void)parity;                                                                      \
    return done != 0;                                                                             \
  }
SPILLWAY_TILE_TRY_WAIT(mbar_try_wait, "mbarrier.try_wait.parity.shared::cta.b64", "")

/// The probe with a suspend-time hint (ns): a thread whose phase is not complete is suspended
/// until it completes or the hint runs out, instead of returning at once, so a waiting producer
/// does not spin on its scheduler's issue slots.
SPILLWAY_TILE_TRY_WAIT(mbar_try_wait_suspend, "mbarrier.try_wait.parity.shared::cta.b64", ", %3")

/// The same probe with acquire at cluster scope (mbar_wait_cluster).
SPILLWAY_TILE_TRY_WAIT(mbar_try_wait_cluster, "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64", "")
#undef SPILLWAY_TILE_TRY_WAIT

/// mbar_wait with acquire at cluster scope (the phase was completed by arrivals from other blocks
/// of the cluster whose writes must be visible afterwards).
__device__ __forceinline__ void mbar_wait_cluster(std::uint32_t bar, std::uint32_t parity) {
  while (!mbar_try_wait_cluster(bar, parity)) {
  }
}

/// Waits until the phase of parity `parity` of `bar` has completed (acquire: the data the phase
/// guarded is visible afterwards). A fresh barrier's phase of parity 1 counts as completed, so a
/// producer waiting on "empty" with parity phase ^ 1 passes the first round.
__device__ __forceinline__ void mbar_wait(std::uint32_t bar, std::uint32_t parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}

/// mbar_wait for a thread with nothing else to do (the producer waiting for a free stage): it
/// sleeps in the barrier instead of spinning.
__device__ __forceinline__ void mbar_wait_suspend(std::uint32_t bar, std::uint32_t parity) {
  while (!mbar_try_wait_suspend(bar, parity)) {
  }
}

/// Orders this thread's generic-proxy shared-memory writes before later async-proxy reads of them
/// (a tensor store of a tile the threads just wrote).
__device__ __forceinline__ void fence_proxy_async_shared() {
  SPILLWAY_TILE_TMA_BODY(asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");)
}

/// Named barrier `id` (1..15; 0 is __syncthreads) over `threads` threads (a multiple of 32).
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/// Arrives on named barrier `id` without waiting (the producer side of an ordered hand-over: the
/// barrier completes once `threads` threads have arrived or synced on it).
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/// Tensor load of the box at (x, y) of a 2-D map into shared `dst`, completing `bytes` of `bar`.
__device__ __forceinline__ void tma_load_2d(std::uint32_t dst, const void* map, int x, int y,
                                            std::uint32_t bar) {
  SPILLWAY_TILE_TMA_BODY(asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::"
                                      "bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
                                      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(x), "r"(y), "r"(bar)
                                      : "memory");)
  (void)dst, (void)map, (void)x, (void)y, (void)bar;
}

/// An L2 cache policy for the `.L2::cache_hint` forms below: lines touched under it are evicted
/// first (data read once, or written and never read back here) or last (data many blocks re-read).
__device__ __forceinline__ std::uint64_t l2_policy_evict_first() {
  std::uint64_t p = 0;
  SPILLWAY_TILE_TMA_BODY(asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));)
  return p;
}
__device__ __forceinline__ std::uint64_t l2_policy_evict_normal() {
  std::uint64_t p = 0;
  SPILLWAY_TILE_TMA_BODY(asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(p));)
  return p;
}
__device__ __forceinline__ std::uint64_t l2_policy_evict_last() {
  std::uint64_t p = 0;
  SPILLWAY_TILE_TMA_BODY(asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(p));)
  return p;
}

/// tma_load_2d under L2 cache policy `policy`.
__device__ __forceinline__ void tma_load_2d_hint(std::uint32_t dst, const void* map, int x, int y,
                                                 std::uint32_t bar, std::uint64_t policy) {
  SPILLWAY_TILE_TMA_BODY(asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::"
                                      "bytes.L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
                                      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(x), "r"(y), "r"(bar),
                                      "l"(policy)
                                      : "memory");)
  (void)dst, (void)map, (void)x, (void)y, (void)bar, (void)policy;
}

/// Tensor load of a 2-D box written to the same shared offset `dst` (and completing the mbarrier at
/// the same offset `bar`) in every cluster block whose bit is set in `cta_mask`, under `policy`.
__device__ __forceinline__ void tma_load_2d_multicast_hint(std::uint32_t dst, const void* map, int x, int y,
                                                           std::uint32_t bar, std::uint16_t cta_mask,
                                                           std::uint64_t policy) {
  SPILLWAY_TILE_TMA_BODY(
      asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::"
                   "cluster.L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5, %6;\n" ::"r"(dst),
                   "l"(reinterpret_cast<std::uint64_t>(map)), "r"(x), "r"(y), "r"(bar), "h"(cta_mask),
                   "l"(policy)
                   : "memory");)
  (void)dst, (void)map, (void)x, (void)y, (void)bar, (void)cta_mask, (void)policy;
}

/// Tensor load of the box at (x, y, z) of a 3-D map.
__device__ __forceinline__ void tma_load_3d(std::uint32_t dst, const void* map, int x, int y, int z,
                                            std::uint32_t bar) {
  SPILLWAY_TILE_TMA_BODY(asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::"
                                      "bytes [%0], [%1, {%2, %3, %4}], "
                                      "[%5];\n" ::"r"(dst),
                                      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(x), "r"(y), "r"(z),
                                      "r"(bar)
                                      : "memory");)
  (void)dst, (void)map, (void)x, (void)y, (void)z, (void)bar;
}

/// Tensor load of a 3-D box written to the same shared offset `dst` (and completing the mbarrier at
/// the same offset `bar`) in every cluster block whose bit is set in `cta_mask`.
__device__ __forceinline__ void tma_load_3d_multicast(std::uint32_t dst, const void* map, int x, int y, int z,
                                                      std::uint32_t bar, std::uint16_t cta_mask) {
  SPILLWAY_TILE_TMA_BODY(
      asm volatile(
          "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
          "[%0], [%1, {%2, %3, %4}], [%5], %6;\n" ::"r"(dst),
          "l"(reinterpret_cast<std::uint64_t>(map)), "r"(x), "r"(y), "r"(z), "r"(bar), "h"(cta_mask)
          : "memory");)
  (void)dst, (void)map, (void)x, (void)y, (void)z, (void)bar, (void)cta_mask;
}

/// Tensor store of shared `src` to the box at (x, y) of a 2-D map (parts outside the map are not
/// written), in the current bulk group.
__device__ __forceinline__ void tma_store_2d(const void* map, int x, int y, std::uint32_t src) {
  SPILLWAY_TILE_TMA_BODY(
      asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(
                       reinterpret_cast<std::uint64_t>(map)),
                   "r"(x), "r"(y), "r"(src)
                   : "memory");)
  (void)map, (void)x, (void)y, (void)src;
}

/// tma_store_2d under L2 cache policy `policy`.
__device__ __forceinline__ void tma_store_2d_hint(const void* map, int x, int y, std::uint32_t src,
                                                  std::uint64_t policy) {
  SPILLWAY_TILE_TMA_BODY(
      asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group.L2::cache_hint [%0, {%1, %2}], [%3], "
                   "%4;\n" ::"l"(reinterpret_cast<std::uint64_t>(map)),
                   "r"(x), "r"(y), "r"(src), "l"(policy)
                   : "memory");)
  (void)map, (void)x, (void)y, (void)src, (void)policy;
}

/// Tensor store to the box at (x, y, z) of a 3-D map.
__device__ __forceinline__ void tma_store_3d(const void* map, int x, int y, int z, std::uint32_t src) {
  SPILLWAY_TILE_TMA_BODY(
      asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];\n" ::"l"(
                       reinterpret_cast<std::uint64_t>(map)),
                   "r"(x), "r"(y), "r"(z), "r"(src)
                   : "memory");)
  (void)map, (void)x, (void)y, (void)z, (void)src;
}

/// Closes the current bulk group (the tensor stores issued since the last commit).
__device__ __forceinline__ void bulk_commit_group() {
  SPILLWAY_TILE_TMA_BODY(asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");)
}

/// Waits until at most `Pending` bulk groups still read their shared-memory source (the buffer of
/// the others may be rewritten).
template <int Pending>
__device__ __forceinline__ void bulk_wait_group_read() {
  SPILLWAY_TILE_TMA_BODY(asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(Pending) : "memory");)
}

/// Waits until at most `Pending` bulk groups are incomplete (their global writes done).
template <int Pending>
__device__ __forceinline__ void bulk_wait_group() {
  SPILLWAY_TILE_TMA_BODY(asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(Pending) : "memory");)
}

/// This block's rank in its cluster.
__device__ __forceinline__ std::uint32_t cluster_ctarank() {
  std::uint32_t r = 0;
  SPILLWAY_TILE_TMA_BODY(asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));)
  return r;
}

/// Barrier over every thread of the cluster (all threads must reach it, converged per warp):
/// release of this block's prior memory operations, acquire of the others'. After mbarrier
/// initialization it makes the barriers usable by the peers; before exit it keeps a block's shared
/// memory alive while peers may still signal it.
__device__ __forceinline__ void cluster_sync() {
  SPILLWAY_TILE_TMA_BODY(asm volatile("barrier.cluster.arrive.release.aligned;\n"
                                      "barrier.cluster.wait.acquire.aligned;\n" ::
                                          : "memory");)
}

/// Hints the tensor map at `map` into the constant cache before its first use.
__device__ __forceinline__ void prefetch_tensor_map(const void* map) {
  SPILLWAY_TILE_TMA_BODY(asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<std::uint64_t>(map))
                                      : "memory");)
  (void)map;
}

#undef SPILLWAY_TILE_TMA_BODY

}  // namespace spillway::tile
