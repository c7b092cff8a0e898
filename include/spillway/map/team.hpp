// spillway/map/team.hpp — the group of threads that works on one gufunc core instance.
//
// A gufunc functor may take a gufunc_team first. spillway picks the team by core size: one thread
// for tiny cores, a sub-warp (2..32 lanes) for medium ones, a whole block for large ones; on the
// host target a team is one thread. The functor splits its loop by rank()/size() and combines with
// sum()/reduce(); every member of a team must make the same sum()/reduce()/sync() calls.
#pragma once

#include <spillway/map/config.hpp>

#include <cstring>
#include <type_traits>

namespace spillway {

namespace detail {
#if defined(__CUDA_ARCH__)
template <class T>
__device__ inline T shfl_xor_any(unsigned mask, T v, int lane_mask, int width) {
  if constexpr (std::is_arithmetic_v<T> && sizeof(T) >= 4) {
    return __shfl_xor_sync(mask, v, lane_mask, width);
  } else {
    constexpr int words = static_cast<int>((sizeof(T) + 3) / 4);
    unsigned w[words] = {};
    std::memcpy(w, &v, sizeof(T));
#pragma unroll
    for (int i = 0; i < words; ++i) w[i] = __shfl_xor_sync(mask, w[i], lane_mask, width);
    T r;
    std::memcpy(&r, w, sizeof(T));
    return r;
  }
}
#endif
}  // namespace detail

class gufunc_team {
 public:
  enum class kind : int { thread = 0, subwarp = 1, block = 2 };

  /// A one-thread team (the host target, and tiny cores on the device).
  SPILLWAY_HD gufunc_team() noexcept : size_(1), rank_(0), mask_(0), kind_(kind::thread) {}
  SPILLWAY_HD gufunc_team(int size, int rank, unsigned mask, kind k) noexcept
      : size_(size), rank_(rank), mask_(mask), kind_(k) {}

  /// Members in the team.
  [[nodiscard]] SPILLWAY_HD int size() const noexcept { return size_; }
  /// This member's index, 0..size()-1.
  [[nodiscard]] SPILLWAY_HD int rank() const noexcept { return rank_; }
  /// True on exactly one member (rank 0): the one that writes a scalar output.
  [[nodiscard]] SPILLWAY_HD bool leader() const noexcept { return rank_ == 0; }

  /// Combines every member's `x` with `op` (associative and commutative); all members get it.
  template <class T, class Op>
  SPILLWAY_HD T reduce(T x, Op op) const {
#if defined(__CUDA_ARCH__)
    if (kind_ == kind::subwarp) {
      for (int o = size_ / 2; o > 0; o >>= 1) x = op(x, detail::shfl_xor_any(mask_, x, o, size_));
      return x;
    }
    if (kind_ == kind::block) return block_reduce(x, op);
#else
    (void)op;
#endif
    return x;
  }
  template <class T>
  SPILLWAY_HD T sum(T x) const {
    return reduce(x, [](T a, T b) { return a + b; });
  }
  /// A barrier for the team's members (and a memory fence among them).
  SPILLWAY_HD void sync() const {
#if defined(__CUDA_ARCH__)
    if (kind_ == kind::subwarp) __syncwarp(mask_);
    if (kind_ == kind::block) __syncthreads();
#endif
  }

 private:
#if defined(__CUDA_ARCH__)
  template <class T, class Op>
  __device__ T block_reduce(T x, Op op) const {
    __shared__ alignas(T) unsigned char raw[32 * sizeof(T)];
    T* part = reinterpret_cast<T*>(raw);
    for (int o = 16; o > 0; o >>= 1) x = op(x, detail::shfl_xor_any(0xffffffffu, x, o, 32));
    const int warp = rank_ / 32;
    const int lane = rank_ % 32;
    const int warps = size_ / 32;
    if (lane == 0) part[warp] = x;
    __syncthreads();
    if (rank_ == 0) {
      T y = part[0];
      for (int w = 1; w < warps; ++w) y = op(y, part[w]);
      part[0] = y;
    }
    __syncthreads();
    const T r = part[0];
    __syncthreads();
    return r;
  }
#else
  template <class T, class Op>
  T block_reduce(T x, Op) const {
    return x;
  }
#endif

  int size_;
  int rank_;
  unsigned mask_;
  kind kind_;
};

}  // namespace spillway
