// spillway/core/error.hpp — exceptions and the CUDA call check.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace spillway {

/// A CUDA runtime call failed. `code()` is the runtime's error code.
class cuda_error : public std::runtime_error {
 public:
  cuda_error(cudaError_t code, const std::string& what) : std::runtime_error(what), code_(code) {}
  [[nodiscard]] cudaError_t code() const noexcept { return code_; }

 private:
  cudaError_t code_;
};

/// A CUDA call failed because this machine has no usable GPU: no device, or no driver (or one too
/// old for this CUDA runtime). A cuda_error, so existing handlers still catch it; catch this one to
/// fall back to a host implementation.
class no_gpu_error : public cuda_error {
 public:
  using cuda_error::cuda_error;
};

/// A caller passed an argument the function cannot accept. The message names the argument and its
/// value; the caller's data is untouched.
class logic_error : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

/// An allocation (device, pinned host) could not be satisfied. Carries the bytes asked for and the
/// bytes that were free at the time (0 when unknown, e.g. for pinned host memory).
class out_of_memory : public std::runtime_error {
 public:
  out_of_memory(const std::string& what, std::size_t requested, std::size_t available)
      : std::runtime_error(what), requested_(requested), available_(available) {}
  [[nodiscard]] std::size_t requested_bytes() const noexcept { return requested_; }
  [[nodiscard]] std::size_t available_bytes() const noexcept { return available_; }

 private:
  std::size_t requested_;
  std::size_t available_;
};

namespace detail {

// Both codes mean "no usable GPU on this machine": no device, or no (or too old a) driver.
inline bool is_no_gpu_error(cudaError_t e) noexcept {
  return e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver;
}

/// The no-GPU codes in plain words (the runtime's own texts say "CUDA driver version is
/// insufficient for CUDA runtime version" even when there is no driver at all).
inline std::string no_gpu_words(cudaError_t e) {
  if (e == cudaErrorNoDevice) return "no CUDA GPU is present on this machine (cudaErrorNoDevice)";
  return "no usable NVIDIA driver on this machine: none is loaded, or it is older than this CUDA runtime "
         "needs, which usually means there is no GPU here (cudaErrorInsufficientDriver)";
}

[[noreturn]] inline void throw_cuda_error(cudaError_t code, const char* call, const char* file,
                                          int line) {
  if (is_no_gpu_error(code)) {
    throw no_gpu_error(code, std::string(call) + " needs a GPU: " + no_gpu_words(code) + " [" + file + ":" +
                                 std::to_string(line) + "]");
  }
  std::string msg = std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " +
                    cudaGetErrorName(code) + " (" + cudaGetErrorString(code) + ")";
  throw cuda_error(code, msg);
}

inline std::string format_bytes(std::size_t bytes) {
  constexpr double kib = 1024.0;
  const double b = static_cast<double>(bytes);
  char buf[64];
  if (b >= kib * kib * kib) {
    std::snprintf(buf, sizeof buf, "%zu bytes (%.2f GiB)", bytes, b / (kib * kib * kib));
  } else if (b >= kib * kib) {
    std::snprintf(buf, sizeof buf, "%zu bytes (%.2f MiB)", bytes, b / (kib * kib));
  } else {
    std::snprintf(buf, sizeof buf, "%zu bytes", bytes);
  }
  return buf;
}

}  // namespace detail
}  // namespace spillway

/// Evaluates a CUDA runtime call once; on failure throws spillway::cuda_error naming the call,
/// file:line, the error's name and its text.
#define SPILLWAY_CUDA_TRY(call)                                                      \
  do {                                                                               \
    const cudaError_t spillway_err_ = (call);                                        \
    if (spillway_err_ != cudaSuccess) {                                              \
      ::spillway::detail::throw_cuda_error(spillway_err_, #call, __FILE__, __LINE__); \
    }                                                                                \
  } while (0)

/// Throws spillway::cuda_error (no_gpu_error when there is no GPU or driver) for a failed status
/// `err` that a call already returned; `what` says what was attempted (a string expression),
/// e.g. SPILLWAY_CUDA_CHECK(e, "cudaHostAlloc of " + std::to_string(bytes) + " bytes for pinned_buffer").
#define SPILLWAY_CUDA_CHECK(err, what)                                                                    \
  do {                                                                                                    \
    const cudaError_t spillway_err_ = (err);                                                              \
    if (spillway_err_ != cudaSuccess) {                                                                   \
      ::spillway::detail::throw_cuda_error(spillway_err_, std::string(what).c_str(), __FILE__, __LINE__); \
    }                                                                                                     \
  } while (0)

/// Checks the last kernel launch (configuration errors) without clearing sticky errors' state.
#define SPILLWAY_CHECK_LAUNCH() SPILLWAY_CUDA_TRY(cudaGetLastError())

/// Throws spillway::logic_error with `msg` (a std::string expression) unless `cond` holds.
#define SPILLWAY_EXPECTS(cond, msg)                  \
  do {                                               \
    if (!(cond)) throw ::spillway::logic_error(msg); \
  } while (0)
