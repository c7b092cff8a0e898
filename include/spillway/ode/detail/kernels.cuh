// spillway/ode/detail/kernels.cuh — the RK4 kernels: the fused elementwise step (with the coupling
// reduction and its last-block finish), the stages of the general step, and the ensemble.
#pragma once

#include <spillway/ode/config.hpp>
#include <spillway/ode/rk4_element.hpp>

#include <cuda/std/array>
#include <cuda/std/cstdint>
#include <cuda/std/tuple>
#include <cuda/std/utility>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

namespace spillway::ode::detail {

/// What the fused step kernels keep on the device between steps. The last block of step k writes
/// the parameters and the step count that every block of step k+1 reads at its start; kernel
/// boundaries order the two.
template <class P>
struct control_block {
  P params;
  unsigned long long step;  ///< steps completed since t0
  unsigned int arrived;     ///< blocks of the current step that have published their partial
};

template <class Rhs, class Coupling, class... T>
struct fused_args {
  using param_type = typename Coupling::param_type;
  using accum_type = accum_of_t<Coupling>;
  Rhs rhs;
  Coupling coupling;
  double t0;
  double dt;
  std::uint64_t n;
  cuda::std::tuple<const T*...> in;
  cuda::std::tuple<T*...> out;
  control_block<param_type>* ctl;
  accum_type* partials;
  param_type* trajectory;  ///< may be null
  std::uint64_t trajectory_size;
  cuda::std::tuple<T*...> snapshots;  ///< valid when snapshot_every > 0
  std::uint64_t snapshot_every;
  std::uint64_t snapshot_count;
};

// State traffic is touched once per step: streaming loads and stores (evict-first) keep it from
// displacing the partials and parameters in L2. Other element types fall back to plain accesses.
#ifndef SPILLWAY_ODE_NO_STREAMING_HINTS
__device__ inline float load_stream(const float* p) { return __ldcs(p); }
__device__ inline double load_stream(const double* p) { return __ldcs(p); }
__device__ inline cuda::std::complex<float> load_stream(const cuda::std::complex<float>* p) {
  const float2 v = __ldcs(reinterpret_cast<const float2*>(p));
  return {v.x, v.y};
}
__device__ inline cuda::std::complex<double> load_stream(const cuda::std::complex<double>* p) {
  const double2 v = __ldcs(reinterpret_cast<const double2*>(p));
  return {v.x, v.y};
}
__device__ inline void store_stream(float* p, float v) { __stcs(p, v); }
__device__ inline void store_stream(double* p, double v) { __stcs(p, v); }
__device__ inline void store_stream(cuda::std::complex<float>* p, cuda::std::complex<float> v) {
  __stcs(reinterpret_cast<float2*>(p), make_float2(v.real(), v.imag()));
}
__device__ inline void store_stream(cuda::std::complex<double>* p, cuda::std::complex<double> v) {
  __stcs(reinterpret_cast<double2*>(p), make_double2(v.real(), v.imag()));
}
#else
template <class T>
__device__ inline T load_stream(const T* p) { return *p; }
template <class T>
__device__ inline void store_stream(T* p, const T& v) { *p = v; }
#endif

/// Reads a value written by another block of the same kernel: through L2, never a stale L1 line.
template <class T>
__device__ inline T load_cg(const T* p) {
  static_assert(sizeof(T) % sizeof(unsigned int) == 0, "partials must be a whole number of 32-bit words");
  constexpr int words = sizeof(T) / sizeof(unsigned int);
  unsigned int w[words];
  const auto* src = reinterpret_cast<const unsigned int*>(p);
#pragma unroll
  for (int k = 0; k < words; ++k) w[k] = __ldcg(src + k);
  T out;
  memcpy(&out, w, sizeof(T));
  return out;
}

/// Sums `v` over the block in a fixed tree order (deterministic); the result is valid in thread 0.
template <int Block, class A>
__device__ inline A block_sum(A v, A* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
#pragma unroll
  for (int s = Block / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) sh[threadIdx.x] = sh[threadIdx.x] + sh[threadIdx.x + s];
    __syncthreads();
  }
  return sh[0];
}

/// The same arrays as pointers to const (the sweeps' input view of a state).
template <class... T>
SPILLWAY_HD inline cuda::std::tuple<const T*...> as_const_arrays(const cuda::std::tuple<T*...>& t) {
  return cuda::std::apply([](T*... p) { return cuda::std::tuple<const T*...>(p...); }, t);
}

/// Visits the `n` elements of the arrays `in` grid-stride: each thread first loads `Items`
/// elements of every array (streaming loads, all in flight), then calls f(i, values) on each.
template <int Block, int Items, class... T, class F, cuda::std::size_t... I>
__device__ inline void sweep(std::uint64_t n, const cuda::std::tuple<const T*...>& in, F&& f,
                             cuda::std::index_sequence<I...>) {
  using cuda::std::get;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * Block * Items;
  for (std::uint64_t base = static_cast<std::uint64_t>(blockIdx.x) * Block * Items + threadIdx.x; base < n;
       base += stride) {
    cuda::std::tuple<T...> v[Items];
#pragma unroll
    for (int j = 0; j < Items; ++j) {
      const std::uint64_t i = base + static_cast<std::uint64_t>(j) * Block;
      if (i < n) ((get<I>(v[j]) = load_stream(get<I>(in) + i)), ...);
    }
#pragma unroll
    for (int j = 0; j < Items; ++j) {
      const std::uint64_t i = base + static_cast<std::uint64_t>(j) * Block;
      if (i < n) f(i, v[j]);
    }
  }
}

/// Counts this block in at `arrived` (its block-summed `v` published in partials[blockIdx.x] when
/// Reduce). Returns true in the last block to arrive, with the grid's total summed in block order
/// (deterministic) in `total` (valid in thread 0) and `arrived` reset for the next kernel.
template <int Block, bool Reduce, class A>
__device__ inline bool last_block_total(const A& v, A* partials, unsigned* arrived, A& total) {
  __shared__ bool last;
  // Two buffers: the grid's sum in the last block never writes where the block's own sum was read.
  __shared__ alignas(A) unsigned char raw[2][Block * sizeof(A)];
  if constexpr (Reduce) {
    const A block_total = block_sum<Block>(v, reinterpret_cast<A*>(raw[0]));
    if (threadIdx.x == 0) partials[blockIdx.x] = block_total;
  }
  if (threadIdx.x == 0) {
    __threadfence();  // publish this block's partial before counting it
    last = atomicAdd(arrived, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return false;
  // The last block: every partial is published. Sum them in block order.
  __threadfence();
  if constexpr (Reduce) {
    A s{};
    for (unsigned b = threadIdx.x; b < gridDim.x; b += Block) s = s + load_cg(partials + b);
    total = block_sum<Block>(s, reinterpret_cast<A*>(raw[1]));
  }
  if (threadIdx.x == 0) *arrived = 0;
  return true;
}

template <int Block, int Items, class Rhs, class Coupling, class... T, cuda::std::size_t... I>
__device__ inline void fused_step(const fused_args<Rhs, Coupling, T...>& a,
                                  cuda::std::index_sequence<I...> seq) {
  using cuda::std::get;
  using P = typename Coupling::param_type;
  using A = accum_of_t<Coupling>;
  constexpr bool reduces = coupling_reduces_v<Coupling>;

  const P p = a.ctl->params;
  const std::uint64_t step = a.ctl->step;
  const double t = a.t0 + static_cast<double>(step) * a.dt;
  std::uint64_t snap_offset = 0;
  bool snap = false;
  if (a.snapshot_every > 0 && (step + 1) % a.snapshot_every == 0) {
    const std::uint64_t slot = (step + 1) / a.snapshot_every - 1;
    snap = slot < a.snapshot_count;
    snap_offset = slot * a.n;
  }

  A acc{};
  sweep<Block, Items>(
      a.n, a.in,
      [&](std::uint64_t i, cuda::std::tuple<T...>& v) {
        rk4_tuple_step(a.rhs, t, a.dt, p, v, seq);
        (store_stream(get<I>(a.out) + i, get<I>(v)), ...);
        if (snap) ((get<I>(a.snapshots)[snap_offset + i] = get<I>(v)), ...);
        if constexpr (reduces) acc = acc + a.coupling.contribution(i, get<I>(v)...);
      },
      seq);
  A total{};
  if (!last_block_total<Block, reduces>(acc, a.partials, &a.ctl->arrived, total)) return;
  if (threadIdx.x == 0) {
    P next = p;
    if constexpr (reduces) next = a.coupling.update(total, p);
    a.ctl->params = next;
    if (a.trajectory != nullptr && step + 1 < a.trajectory_size) a.trajectory[step + 1] = next;
    a.ctl->step = step + 1;
  }
}

template <int Block, int Items, class Rhs, class Coupling, class... T>
__global__ void __launch_bounds__(Block) fused_step_kernel(fused_args<Rhs, Coupling, T...> a) {
  fused_step<Block, Items>(a, cuda::std::index_sequence_for<T...>{});
}

template <class P>
__global__ void init_control_kernel(control_block<P>* ctl, P p0, P* trajectory) {
  ctl->params = p0;
  ctl->step = 0;
  ctl->arrived = 0;
  if (trajectory != nullptr) trajectory[0] = p0;
}

template <int Stage, class Rhs, class P, class... T>
__global__ void general_stage_kernel(Rhs rhs, P p, double t, double dt, std::uint64_t n, cuda::std::tuple<T*...> y,
                                     cuda::std::tuple<T*...> src, cuda::std::tuple<T*...> dst,
                                     cuda::std::tuple<T*...> acc) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    general_stage_element<Stage>(rhs, p, t, dt, i, y, src, dst, acc, cuda::std::index_sequence_for<T...>{});
  }
}

/// One system per thread, its state in registers across every step; the state is written back
/// only at save points and at the end.
template <int Block, class Family, class Real, std::size_t D>
__global__ void __launch_bounds__(Block) ensemble_kernel(Family family, Real t0, Real dt, std::uint64_t steps,
                                                         std::uint64_t save_every, Real* state, Real* saved,
                                                         std::uint64_t n) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * Block;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * Block + threadIdx.x; i < n; i += stride) {
    const auto f = family(i);
    cuda::std::array<Real, D> y;
#pragma unroll
    for (std::size_t d = 0; d < D; ++d) y[d] = state[d * n + i];
    std::uint64_t s = 0;
    if (saved != nullptr && save_every > 0) {
      const std::uint64_t saves = steps / save_every;
      for (std::uint64_t slot = 0; slot < saves; ++slot) {
#pragma unroll 4
        for (std::uint64_t k = 0; k < save_every; ++k, ++s) rk4_step_array(f, t0 + static_cast<Real>(s) * dt, dt, y);
#pragma unroll
        for (std::size_t d = 0; d < D; ++d) saved[(slot * D + d) * n + i] = y[d];
      }
    }
#pragma unroll 4
    for (; s < steps; ++s) rk4_step_array(f, t0 + static_cast<Real>(s) * dt, dt, y);
#pragma unroll
    for (std::size_t d = 0; d < D; ++d) state[d * n + i] = y[d];
  }
}

}  // namespace spillway::ode::detail
