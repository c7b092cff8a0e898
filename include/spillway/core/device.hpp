// spillway/core/device.hpp — device queries, "is there a GPU here", and device_guard.
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/core/launch.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

namespace spillway {

/// Number of visible CUDA devices; 0 on a machine with no GPU or no driver (never throws for that).
/// Other failures (a broken driver install) throw cuda_error.
inline int device_count() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (detail::is_no_gpu_error(e)) {
    (void)cudaGetLastError();
    return 0;
  }
  SPILLWAY_CUDA_CHECK(e, "cudaGetDeviceCount (device_count)");
  return n;
}

/// Why there is no GPU, in words ("" when one is present).
inline std::string no_gpu_reason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess && n > 0) return {};
  (void)cudaGetLastError();
  if (e == cudaSuccess) return "no CUDA device is visible (CUDA_VISIBLE_DEVICES may hide them)";
  if (detail::is_no_gpu_error(e)) return detail::no_gpu_words(e);
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

/// Throws no_gpu_error saying that `what` (e.g. "transform") needs a GPU, that there is none (in
/// plain words), and `hint` (what to do instead) when given.
[[noreturn]] inline void throw_no_gpu(const std::string& what, const std::string& hint = {}) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  (void)cudaGetLastError();
  if (!detail::is_no_gpu_error(e)) e = cudaErrorNoDevice;
  std::string reason = no_gpu_reason();
  if (reason.empty()) reason = detail::no_gpu_words(e);
  throw no_gpu_error(e, what + " needs a GPU, and there is none: " + reason + (hint.empty() ? "" : "; " + hint));
}

/// True when at least one CUDA device is usable.
inline bool gpu_available() { return device_count() > 0; }

/// The calling thread's current device.
inline int current_device() {
  int d = 0;
  SPILLWAY_CUDA_CHECK(cudaGetDevice(&d), "cudaGetDevice (the current device, e.g. for a stream or buffer)");
  return d;
}

namespace detail {
inline void check_device_ordinal(int device, const char* who) {
  const int n = device_count();
  if (device < 0 || device >= n) {
    throw logic_error(std::string(who) + ": device " + std::to_string(device) +
                      " does not exist (" + std::to_string(n) + " visible)");
  }
}
}  // namespace detail

/// The facts about a device that spillway's planners use.
struct device_properties {
  int ordinal = 0;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int multiprocessors = 0;
  std::size_t total_memory = 0;
  std::size_t l2_bytes = 0;
  std::size_t shared_memory_per_block_optin = 0;
  int copy_engines = 0;  ///< asyncEngineCount
  bool memory_pools = false;

  [[nodiscard]] int compute_capability() const noexcept { return cc_major * 10 + cc_minor; }
};

inline device_properties get_device_properties(int device) {
  detail::check_device_ordinal(device, "get_device_properties");
  cudaDeviceProp p{};
  SPILLWAY_CUDA_TRY(cudaGetDeviceProperties(&p, device));
  device_properties r;
  r.ordinal = device;
  r.name = p.name;
  r.cc_major = p.major;
  r.cc_minor = p.minor;
  r.multiprocessors = p.multiProcessorCount;
  r.total_memory = p.totalGlobalMem;
  r.l2_bytes = static_cast<std::size_t>(p.l2CacheSize);
  r.shared_memory_per_block_optin = p.sharedMemPerBlockOptin;
  r.copy_engines = p.asyncEngineCount;
  int pools = 0;
  SPILLWAY_CUDA_TRY(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device));
  r.memory_pools = pools != 0;
  return r;
}

namespace detail {
/// One fact per device, computed once (under `mutex`) and then read from `cache`: launchers ask on
/// every launch, so a hit is a lookup and the ordinal is checked on a miss only.
template <class F>
int cached_per_device(int device, std::vector<int>& cache, std::mutex& mutex, F&& compute) {
  std::lock_guard<std::mutex> lock(mutex);
  if (device >= 0 && static_cast<std::size_t>(device) < cache.size() && cache[static_cast<std::size_t>(device)] >= 0) {
    return cache[static_cast<std::size_t>(device)];
  }
  check_device_ordinal(device, "device facts");
  if (cache.size() <= static_cast<std::size_t>(device)) cache.resize(static_cast<std::size_t>(device) + 1, -1);
  int& v = cache[static_cast<std::size_t>(device)];
  v = compute();
  return v;
}

inline int device_attribute(cudaDeviceAttr what, int device) {
  int v = 0;
  SPILLWAY_CUDA_TRY(cudaDeviceGetAttribute(&v, what, device));
  return v;
}
}  // namespace detail

// The cached device facts every module's launchers and planners read (no module queries device
// attributes itself).

/// major * 10 + minor, cached.
inline int compute_capability(int device) {
  static std::mutex mutex;
  static std::vector<int> cache;
  return detail::cached_per_device(device, cache, mutex, [device] {
    return detail::device_attribute(cudaDevAttrComputeCapabilityMajor, device) * 10 +
           detail::device_attribute(cudaDevAttrComputeCapabilityMinor, device);
  });
}

/// Streaming multiprocessors, cached.
inline int multiprocessor_count(int device) {
  static std::mutex mutex;
  static std::vector<int> cache;
  return detail::cached_per_device(device, cache, mutex,
                                   [device] { return detail::device_attribute(cudaDevAttrMultiProcessorCount, device); });
}

/// The SM clock in kHz (the estimators' peak rates), cached.
inline int clock_rate_khz(int device) {
  static std::mutex mutex;
  static std::vector<int> cache;
  return detail::cached_per_device(device, cache, mutex,
                                   [device] { return detail::device_attribute(cudaDevAttrClockRate, device); });
}

/// The dynamic shared memory a block may opt into on `device`, cached.
inline int max_block_smem(int device) {
  static std::mutex mutex;
  static std::vector<int> cache;
  return detail::cached_per_device(
      device, cache, mutex, [device] { return detail::device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, device); });
}

/// The blocks of `kernel` (`block` threads, `smem` dynamic shared bytes) that `device` holds at
/// once: the cap of a persistent grid (grid_blocks' `cap`), so that no block waits for a second wave.
template <class Kernel>
index_t resident_blocks(Kernel kernel, int block, std::size_t smem, int device) {
  int per_sm = 0;
  SPILLWAY_CUDA_TRY(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, reinterpret_cast<const void*>(kernel), block, smem));
  return static_cast<index_t>(multiprocessor_count(device)) * std::max(per_sm, 1);
}

/// Free and total bytes of device memory.
struct memory_info {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
};



/// Sets the current device for its lifetime and restores the previous one on destruction.
class device_guard {
 public:
  explicit device_guard(int device) {
    SPILLWAY_CUDA_TRY(cudaGetDevice(&previous_));
    if (device != previous_) {
      detail::check_device_ordinal(device, "device_guard");
      SPILLWAY_CUDA_TRY(cudaSetDevice(device));
      changed_ = true;
    }
  }
  ~device_guard() {
    if (changed_) (void)cudaSetDevice(previous_);
  }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;
  device_guard(device_guard&&) = delete;
  device_guard& operator=(device_guard&&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

inline memory_info get_memory_info(int device) {
  device_guard g(device);
  memory_info m;
  SPILLWAY_CUDA_TRY(cudaMemGetInfo(&m.free_bytes, &m.total_bytes));
  return m;
}

/// Ordinals 0..device_count()-1.
inline std::vector<int> all_devices() {
  std::vector<int> v(static_cast<std::size_t>(device_count()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int>(i);
  return v;
}

/// A job's device list: `given` (each ordinal checked; a device may repeat, one worker per entry)
/// or, when empty, every visible device. Throws no_gpu_error (naming `who`) when that leaves none,
/// logic_error for an ordinal that does not exist.
inline std::vector<int> resolve_devices(const std::vector<int>& given, const char* who) {
  std::vector<int> d = given.empty() ? all_devices() : given;
  if (d.empty()) throw_no_gpu(who);
  for (int x : d) detail::check_device_ordinal(x, who);
  return d;
}

}  // namespace spillway
