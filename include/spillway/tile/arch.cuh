// spillway/tile/arch.cuh — what the build carries for the device: the feature macros every tile
// kernel tests, which tensor-core code this build holds for a device (a probe kernel, cached), and
// the per-kernel shared-memory opt-in. The device facts themselves are core's (core/device.hpp).
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

// The body of a wrapper around one instruction family: the statements where the target has it, a
// trap elsewhere (the dispatchers never launch such code there; the trap makes a mistake loud).
#ifdef SPILLWAY_TILE_HAS_MMA
#define SPILLWAY_TILE_MMA_BODY(...) __VA_ARGS__
#else
#define SPILLWAY_TILE_MMA_BODY(...) __trap();
#endif
#ifdef SPILLWAY_TILE_HAS_TMA
#define SPILLWAY_TILE_TMA_BODY(...) __VA_ARGS__
#else
#define SPILLWAY_TILE_TMA_BODY(...) __trap();
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

using ::spillway::detail::cached_per_device;
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

// The device facts live in core (every module reads them); the tile dispatchers name them here.
using ::spillway::compute_capability;
using ::spillway::max_block_smem;
using ::spillway::multiprocessor_count;

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

/// A launch configuration of `Kernel` in clusters of `cluster` blocks of `threads` threads and
/// `smem_bytes` of dynamic shared memory on `s`, with as many clusters as can be resident on the
/// current device (asked once per kernel and device, so the launch path stays free of occupancy
/// queries), at most `max_clusters`: gridDim.x is set to that many clusters' blocks; the caller
/// may lower it (whole clusters) before cudaLaunchKernelEx. `attr` holds the cluster attribute
/// the configuration points to. The kernel's shared-memory limit must be raised first.
template <auto Kernel>
int resident_cluster_config(cudaLaunchConfig_t& cfg, cudaLaunchAttribute& attr, int cluster, int threads,
                            int smem_bytes, stream_view s, int max_clusters) {
  attr = {};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = static_cast<unsigned>(cluster);
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cfg = {};
  cfg.blockDim = dim3(static_cast<unsigned>(threads), 1, 1);
  cfg.dynamicSmemBytes = static_cast<std::size_t>(smem_bytes);
  cfg.stream = s.value();
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  const int device = current_device();
  cfg.gridDim = dim3(static_cast<unsigned>(multiprocessor_count(device)), 1, 1);
  static std::mutex mutex;
  static std::vector<int> cache;
  int clusters = detail::cached_per_device(device, cache, mutex, [&] {
    int c = 0;
    SPILLWAY_CUDA_TRY(cudaOccupancyMaxActiveClusters(&c, Kernel, &cfg));
    return c < 1 ? 1 : c;
  });
  clusters = clusters > max_clusters ? max_clusters : clusters;
  cfg.gridDim = dim3(static_cast<unsigned>(clusters * cluster), 1, 1);
  return clusters;
}

/// "compute capability X.Y" of `device`, for error messages.
inline std::string describe_device(int device) {
  const int cc = compute_capability(device);
  return "device " + std::to_string(device) + " has compute capability " + std::to_string(cc / 10) + "." +
         std::to_string(cc % 10);
}

}  // namespace spillway::tile
