// spillway/core/memory_pool.hpp — the per-device memory pool that spillway allocates from.
//
// spillway owns one cudaMemPool_t per device, created on first use; it never changes the
// device's default pool, so other code in the process keeps whatever settings it chose.
//
// Release threshold: UINT64_MAX, i.e. memory freed back to the pool stays cached for reuse and
// is not returned to the driver at stream synchronization. Rationale: the out-of-core jobs
// allocate their ring of chunk buffers once per call; a job repeated in a loop (benchmarks, time
// steppers) then pays cudaMalloc-class costs only once. The cache is trimmed to zero
// automatically when an allocation fails (and the allocation retried once), and explicitly with
// `trim_device_pool(device)`. Pools live until process exit (they are never destroyed, so no
// static-destruction order problem with the CUDA runtime).
//
// Peer access: every other device that can reach this one (cudaDeviceCanAccessPeer, e.g. over
// NVLink) is granted read-write access to the pool when it is created, so memory spillway hands
// out on one device can be the source or destination of a copy or a kernel on another — a strip
// computed on device 1 copied into a buffer on device 0 on device 1's stream (a pool that no other
// device may access makes such a cudaMemcpy*Async fail with cudaErrorInvalidValue), or a panel
// another device already holds fetched over NVLink instead of the host link. Devices that cannot
// reach it are left out: copies to and from them go through cudaMemcpyPeer*Async, which the driver
// stages.
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/error.hpp>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <mutex>
#include <vector>

namespace spillway {

/// The release threshold spillway sets on its pools (see the file comment).
inline constexpr std::uint64_t pool_release_threshold = UINT64_MAX;

/// spillway's memory pool for `device` (created on first call; thread-safe).
inline cudaMemPool_t device_pool(int device) {
  static std::mutex mutex;
  static std::vector<cudaMemPool_t> pools;
  std::lock_guard<std::mutex> lock(mutex);
  const int n = device_count();
  if (device < 0 || device >= n) {
    throw logic_error("device_pool: device " + std::to_string(device) + " does not exist (" +
                      std::to_string(n) + " visible)");
  }
  if (pools.size() < static_cast<std::size_t>(n)) pools.resize(static_cast<std::size_t>(n), nullptr);
  cudaMemPool_t& p = pools[static_cast<std::size_t>(device)];
  if (p == nullptr) {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    cudaMemPool_t created = nullptr;
    SPILLWAY_CUDA_TRY(cudaMemPoolCreate(&created, &props));
    std::uint64_t threshold = pool_release_threshold;
    SPILLWAY_CUDA_TRY(cudaMemPoolSetAttribute(created, cudaMemPoolAttrReleaseThreshold, &threshold));
    std::vector<cudaMemAccessDesc> access;
    for (int peer = 0; peer < n; ++peer) {
      if (peer == device) continue;
      int can = 0;
      if (cudaDeviceCanAccessPeer(&can, peer, device) != cudaSuccess) {
        (void)cudaGetLastError();
        continue;
      }
      if (can == 0) continue;
      cudaMemAccessDesc d{};
      d.location.type = cudaMemLocationTypeDevice;
      d.location.id = peer;
      d.flags = cudaMemAccessFlagsProtReadWrite;
      access.push_back(d);
    }
    // A refusal (a driver or a platform that maps no peer memory) leaves the pool private: copies
    // across devices then go through cudaMemcpyPeer*Async and pool_reachable_from() says false.
    if (!access.empty() && cudaMemPoolSetAccess(created, access.data(), access.size()) != cudaSuccess) {
      (void)cudaGetLastError();
    }
    p = created;
  }
  return p;
}

/// Whether memory of spillway's pool on `owner` can be reached from `peer` directly (the same
/// device, or a peer that was granted access when the pool was created).
inline bool pool_reachable_from(int owner, int peer) {
  if (owner == peer) return true;
  cudaMemAccessFlags f = cudaMemAccessFlagsProtNone;
  cudaMemLocation loc{};
  loc.type = cudaMemLocationTypeDevice;
  loc.id = peer;
  if (cudaMemPoolGetAccess(&f, device_pool(owner), &loc) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return f == cudaMemAccessFlagsProtReadWrite;
}

/// Bytes spillway's pool for `device` holds for reuse but has not handed out (what an earlier
/// job freed back to it): free to the next job though cudaMemGetInfo counts them as used.
inline std::size_t pool_idle_bytes(int device) {
  cudaMemPool_t p = device_pool(device);
  std::uint64_t reserved = 0, used = 0;
  SPILLWAY_CUDA_TRY(cudaMemPoolGetAttribute(p, cudaMemPoolAttrReservedMemCurrent, &reserved));
  SPILLWAY_CUDA_TRY(cudaMemPoolGetAttribute(p, cudaMemPoolAttrUsedMemCurrent, &used));
  return reserved > used ? static_cast<std::size_t>(reserved - used) : 0u;
}

/// Returns the unused memory cached in spillway's pool for `device` to the driver, keeping at most
/// `keep_bytes`. Memory still allocated is not affected.
inline void trim_device_pool(int device, std::size_t keep_bytes = 0) {
  SPILLWAY_CUDA_TRY(cudaMemPoolTrimTo(device_pool(device), keep_bytes));
}

}  // namespace spillway
