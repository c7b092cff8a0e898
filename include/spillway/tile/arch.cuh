// spillway/tile/arch.cuh — what the build carries and what the device is: the feature macros
// every tile kernel tests, and cached device facts for the dispatchers (compute capability,
// multiprocessor count, and which tensor-core code this build holds for the device).
//
// The tile engine layer sits on core only: gram and gemm both instantiate it, it includes
// neither.
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/device_buffer.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/launch.hpp>
#include <spillway/core/stream.hpp>

#include <cuda_runtime_api.h>

#include <mutex>
#include <string>
#include <vector>

// Device-side feature macros (defined only while compiling device code for such a target).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define SPILLWAY_TILE_HAS_MMA 1  // mma.sync for f16/bf16/tf32/s8/f64/b1, cp.async, ldmatrix
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define SPILLWAY_TILE_HAS_TMA 1  // mbarrier transaction counts, cp.async.bulk(.tensor), clusters
#endif
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SPILLWAY_TILE_HAS_WGMMA 1  // wgmma.mma_async, setmaxnreg (sm_90a only)
#endif

namespace spillway::tile {

/// Bits of build_features().
inline constexpr int feature_mma = 1;    ///< mma.sync code (sm_80+)
inline constexpr int feature_wgmma = 2;  ///< wgmma code (sm_90a)
inline constexpr int feature_tma = 4;    ///< tensor copy engine code (sm_90+)

namespace detail {
SPILLWAY_KERNEL void build_probe_kernel(int* out) {
  int v = 0;
#ifdef SPILLWAY_TILE_HAS_MMA
  v |= feature_mma;
#endif
#ifdef SPILLWAY_TILE_HAS_WGMMA
  v |= feature_wgmma;
#endif
#ifdef SPILLWAY_TILE_HAS_TMA
  v |= feature_tma;
#endif
  *out = v;
}

template <class F>
int cached_per_device(int device, std::vector<int>& cache, std::mutex& mutex, F&& compute) {
  std::lock_guard<std::mutex> lock(mutex);
  // A hit is a lookup (launchers ask on every launch); the ordinal is checked on a miss only.
  if (device >= 0 && static_cast<std::size_t>(device) < cache.size() && cache[static_cast<std::size_t>(device)] >= 0) {
    return cache[static_cast<std::size_t>(device)];
  }
  ::spillway::detail::check_device_ordinal(device, "tile: device facts");
  if (cache.size() <= static_cast<std::size_t>(device)) cache.resize(static_cast<std::size_t>(device) + 1, -1);
  int& v = cache[static_cast<std::size_t>(device)];
  v = compute();
  return v;
}
}  // namespace detail

/// Which tensor-core code this build carries for the code `device` actually runs (feature_* bits),
/// found once per device by a one-thread probe kernel compiled like every other kernel.
inline int build_features(int device) {
  static std::mutex mutex;
  static std::vector<int> cache;
  return detail::cached_per_device(device, cache, mutex, [device] {
    device_guard guard(device);
    stream s(device);
    device_buffer<int> flag(1, s);
    detail::build_probe_kernel<<<1, 1, 0, s.value()>>>(flag.data());
    SPILLWAY_CHECK_LAUNCH();
    int host = 0;
    flag.copy_to_host_async(cuda::std::span<int>(&host, 1), s);
    s.synchronize();
    return host;
  });
}

/// major * 10 + minor, cached.
inline int compute_capability(int device) {
  static std::mutex mutex;
  static std::vector<int> cache;
  return detail::cached_per_device(device, cache, mutex, [device] {
    int major = 0, minor = 0;
    SPILLWAY_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    SPILLWAY_CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    return major * 10 + minor;
  });
}

/// Streaming multiprocessors, cached.
inline int multiprocessor_count(int device) {
  static std::mutex mutex;
  static std::vector<int> cache;
  return detail::cached_per_device(device, cache, mutex, [device] {
    int n = 0;
    SPILLWAY_CUDA_TRY(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    return n;
  });
}

/// The dynamic shared memory a block may opt into on `device`, cached.
inline int max_block_smem(int device) {
  static std::mutex mutex;
  static std::vector<int> cache;
  return detail::cached_per_device(device, cache, mutex, [device] {
    int v = 0;
    SPILLWAY_CUDA_TRY(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    return v;
  });
}

/// Raises `Kernel`'s dynamic shared-memory limit to `bytes` on `device` (the current one) the first
/// time it is asked there; later calls cost a cache lookup. The cache belongs to the kernel itself
/// (a template argument): distinct instantiations of one signature share a pointer type, so a
/// cache keyed on that type would let one kernel launch with another's limit.
template <auto Kernel>
void raise_smem_limit(int device, int bytes) {
  static std::mutex mutex;
  static std::vector<int> cache;
  detail::cached_per_device(device, cache, mutex, [bytes] {
    SPILLWAY_CUDA_TRY(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    return bytes;
  });
}

/// "compute capability X.Y" of `device`, for error messages.
inline std::string describe_device(int device) {
  const int cc = compute_capability(device);
  return "device " + std::to_string(device) + " has compute capability " + std::to_string(cc / 10) + "." +
         std::to_string(cc % 10);
}

}  // namespace spillway::tile
