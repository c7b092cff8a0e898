// spillway/map/detail/kernels.cuh — the map, gufunc and reduction kernels.
//
// Elementwise maps are HBM-bound, so the kernels exist to keep enough bytes in flight: each
// thread issues U vector loads (16 bytes each for the widest operand) per array before it
// computes, and the grid covers the array once (no grid-stride loop: every block is a fixed tile).
// Three loop shapes, picked after collapsing: 1-d (contiguous), 2-d with unit inner strides (rows;
// the broadcast case), and general N-d (any strides, a divmod per dimension).
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/map/config.hpp>
#include <spillway/map/detail/gufunc_invoke.hpp>
#include <spillway/map/detail/gufunc_plan.hpp>
#include <spillway/map/ndview.hpp>
#include <spillway/map/team.hpp>

#include <cuda/std/tuple>
#include <cuda_pipeline_primitives.h>
#include <cuda_runtime_api.h>
#include <cuda/std/utility>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace spillway::detail {

inline constexpr int map_block = 256;

/// A kernel's view of one operand: a base pointer and the collapsed loop strides for arrays, the
/// value for scalars.
template <class T, bool Array>
struct kop;
template <class T>
struct kop<T, true> {
  using value_type = T;
  static constexpr bool is_array = true;
  const T* p;
  index_t s[max_rank];
};
template <class T>
struct kop<T, false> {
  using value_type = T;
  static constexpr bool is_array = false;
  T v;
};

template <class T, int V>
struct alignas(sizeof(T) * V) vec_t {
  T x[V];
};

/// Registers holding V consecutive elements of one operand.
template <class Op, int V>
struct frag;
template <class T, int V>
struct frag<kop<T, true>, V> {
  T x[V];
  /// Loads V elements at p + off (unit stride), or one element replicated when `bcast`.
  __device__ __forceinline__ void load(const kop<T, true>& op, index_t off, bool bcast) {
    if (bcast) {
      const T v = op.p[off];
#pragma unroll
      for (int k = 0; k < V; ++k) x[k] = v;
    } else if constexpr (V > 1) {
      const vec_t<T, V> w = *reinterpret_cast<const vec_t<T, V>*>(op.p + off);
#pragma unroll
      for (int k = 0; k < V; ++k) x[k] = w.x[k];
    } else {
      x[0] = op.p[off];
    }
  }
  __device__ __forceinline__ T get(int k, const kop<T, true>&) const { return x[k]; }
};
template <class T, int V>
struct frag<kop<T, false>, V> {
  __device__ __forceinline__ void load(const kop<T, false>&, index_t, bool) {}
  __device__ __forceinline__ T get(int, const kop<T, false>& op) const { return op.v; }
};

template <class Out, int V>
__device__ __forceinline__ void store_vec(Out* p, const Out (&o)[V]) {
  if constexpr (V > 1) {
    vec_t<Out, V> w;
#pragma unroll
    for (int k = 0; k < V; ++k) w.x[k] = o[k];
    *reinterpret_cast<vec_t<Out, V>*>(p) = w;
  } else {
    p[0] = o[0];
  }
}

template <int V, class Out, class F, class Ops, class Frags, std::size_t... I>
__device__ __forceinline__ void compute(Out (&o)[V], const F& f, const Ops& ops, const Frags& fr,
                                        std::index_sequence<I...>) {
#pragma unroll
  for (int k = 0; k < V; ++k) {
    o[k] = static_cast<Out>(f(cuda::std::get<I>(fr).get(k, cuda::std::get<I>(ops))...));
  }
}

template <class Op, int V>
__device__ __forceinline__ void load_contig(frag<Op, V>& f, const Op& op, index_t vi) {
  if constexpr (Op::is_array) {
    const bool bc = op.s[0] == 0;
    f.load(op, bc ? 0 : vi * V, bc);
  }
}
template <class Op, int V, class Idx>
__device__ __forceinline__ void load_rows(frag<Op, V>& f, const Op& op, Idx r, Idx c) {
  if constexpr (Op::is_array) {
    const bool bc = op.s[1] == 0;
    f.load(op, static_cast<index_t>(r) * op.s[0] + (bc ? 0 : static_cast<index_t>(c) * V), bc);
  }
}
template <class Op, class Idx>
__device__ __forceinline__ void load_nd(frag<Op, 1>& f, const Op& op, const Idx* idx, int rank) {
  if constexpr (Op::is_array) {
    index_t off = 0;
#pragma unroll
    for (int d = 0; d < max_rank; ++d) off += d < rank ? static_cast<index_t>(idx[d]) * op.s[d] : 0;
    f.load(op, off, false);
  }
}

template <int V, class Ops, class Frags, std::size_t... I>
__device__ __forceinline__ void load_all_contig(Frags& fr, const Ops& ops, index_t vi, std::index_sequence<I...>) {
  (load_contig(cuda::std::get<I>(fr), cuda::std::get<I>(ops), vi), ...);
}
template <int V, class Idx, class Ops, class Frags, std::size_t... I>
__device__ __forceinline__ void load_all_rows(Frags& fr, const Ops& ops, Idx r, Idx c, std::index_sequence<I...>) {
  (load_rows(cuda::std::get<I>(fr), cuda::std::get<I>(ops), r, c), ...);
}
template <class Idx, class Ops, class Frags, std::size_t... I>
__device__ __forceinline__ void load_all_nd(Frags& fr, const Ops& ops, const Idx* idx, int rank,
                                            std::index_sequence<I...>) {
  (load_nd(cuda::std::get<I>(fr), cuda::std::get<I>(ops), idx, rank), ...);
}

/// The output of the N-d kernel: a writable base pointer and collapsed strides.
template <class Out>
struct kout {
  Out* p;
  index_t s[max_rank];
};
/// Collapsed loop extents for the N-d kernel.
struct kextents {
  int rank;
  index_t e[max_rank];
};

/// 1-d loop: every array operand has stride 1 (or 0: one element broadcast); out has stride 1.
/// Vector i covers elements [i*V, i*V + V); tiles of map_block*U vectors are strided over the
/// grid (one tile per block when the grid covers the array); the n % V tail is done by block 0.
/// All U loads of a thread are issued before the first use.
template <int V, int U, class Out, class F, class... Ops>
__global__ void __launch_bounds__(map_block) map_contig_kernel(Out* __restrict__ out, index_t n, F f,
                                                                cuda::std::tuple<Ops...> ops) {
  using seq = std::index_sequence_for<Ops...>;
  const index_t nvec = n / V;
  const index_t tiles = (nvec + map_block * U - 1) / (map_block * U);
  for (index_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const index_t base = tile * (map_block * U) + threadIdx.x;
    cuda::std::tuple<frag<Ops, V>...> fr[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const index_t vi = base + u * map_block;
      if (vi < nvec) load_all_contig<V>(fr[u], ops, vi, seq{});
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const index_t vi = base + u * map_block;
      if (vi < nvec) {
        Out o[V];
        compute<V>(o, f, ops, fr[u], seq{});
        store_vec<Out, V>(out + vi * V, o);
      }
    }
  }
  if constexpr (V > 1) {
    if (blockIdx.x == 0) {
      for (index_t i = nvec * V + threadIdx.x; i < n; i += map_block) {
        cuda::std::tuple<frag<Ops, 1>...> t;
        load_all_contig<1>(t, ops, i, seq{});
        Out o[1];
        compute<1>(o, f, ops, t, seq{});
        out[i] = o[0];
      }
    }
  }
}

/// 2-d loop of `rows` rows of lv vectors (V elements each): every array operand has inner stride
/// 1 (or 0: one element per row, broadcast) and any row stride (0 for an operand broadcast along
/// the rows); the output is out + r*out_rs + c*V. Tiles are strided over the grid as above.
template <int V, int U, class Idx, class Out, class F, class... Ops>
__global__ void __launch_bounds__(map_block) map_rows_kernel(Out* __restrict__ out, index_t out_rs, Idx rows,
                                                             Idx lv, F f, cuda::std::tuple<Ops...> ops) {
  using seq = std::index_sequence_for<Ops...>;
  const Idx total = rows * lv;
  const Idx tiles = (total + static_cast<Idx>(map_block * U - 1)) / static_cast<Idx>(map_block * U);
  for (Idx tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const Idx base = tile * static_cast<Idx>(map_block * U) + static_cast<Idx>(threadIdx.x);
    cuda::std::tuple<frag<Ops, V>...> fr[U];
    Idx rr[U], cc[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const Idx vi = base + static_cast<Idx>(u * map_block);
      rr[u] = vi / lv;
      cc[u] = vi - rr[u] * lv;
      if (vi < total) load_all_rows<V>(fr[u], ops, rr[u], cc[u], seq{});
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const Idx vi = base + static_cast<Idx>(u * map_block);
      if (vi < total) {
        Out o[V];
        compute<V>(o, f, ops, fr[u], seq{});
        store_vec<Out, V>(out + static_cast<index_t>(rr[u]) * out_rs + static_cast<index_t>(cc[u]) * V, o);
      }
    }
  }
}

/// General N-d loop (any strides, rank <= max_rank): one element per step, U steps per thread.
template <int U, class Idx, class Out, class F, class... Ops>
__global__ void __launch_bounds__(map_block) map_nd_kernel(kout<Out> out, kextents ext, Idx n, F f,
                                                           cuda::std::tuple<Ops...> ops) {
  using seq = std::index_sequence_for<Ops...>;
  const Idx base = static_cast<Idx>(blockIdx.x) * static_cast<Idx>(map_block * U) + static_cast<Idx>(threadIdx.x);
  cuda::std::tuple<frag<Ops, 1>...> fr[U];
  index_t ooff[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    Idx i = base + static_cast<Idx>(u * map_block);
    if (i < n) {
      Idx idx[max_rank];
#pragma unroll
      for (int d = max_rank - 1; d >= 0; --d) {  // unrolled with a guard: idx stays in registers
        if (d < ext.rank) {
          const Idx e = static_cast<Idx>(ext.e[d]);
          const Idx q = i / e;
          idx[d] = i - q * e;
          i = q;
        } else {
          idx[d] = 0;
        }
      }
      index_t o = 0;
#pragma unroll
      for (int d = 0; d < max_rank; ++d) o += d < ext.rank ? static_cast<index_t>(idx[d]) * out.s[d] : 0;
      ooff[u] = o;
      load_all_nd(fr[u], ops, idx, ext.rank, seq{});
    }
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    if (base + static_cast<Idx>(u * map_block) < n) {
      Out o[1];
      compute<1>(o, f, ops, fr[u], seq{});
      out.p[ooff[u]] = o[0];
    }
  }
}

// ---- generalized ufuncs ------------------------------------------------------------------------

/// Everything a gufunc kernel needs about the loop: K operands (output first).
template <std::size_t K>
struct gufunc_kernel_plan {
  int loop_rank;
  index_t loop_extents[max_rank];
  index_t instances;
  gufunc_operand_plan ops[K];
};

/// One team of `team` threads (1, a power of two up to 32, or the whole block when block_team)
/// per core instance; instances are strided over the grid's teams. Idx is 32-bit when the
/// instance count allows it (cheaper divisions).
template <class Idx, class R, class F, class Args, std::size_t K, std::size_t... I>
__device__ __forceinline__ void gufunc_run(R* out, const F& f, const gufunc_kernel_plan<K>& plan, const Args& args,
                                           int team, bool block_team, std::index_sequence<I...> seq) {
  const Idx instances = static_cast<Idx>(plan.instances);
  if (block_team) {
    const gufunc_team t(static_cast<int>(blockDim.x), static_cast<int>(threadIdx.x), 0xffffffffu,
                        gufunc_team::kind::block);
    for (Idx inst = blockIdx.x; inst < instances; inst += gridDim.x) {
      gufunc_instance(f, t, out, plan.ops, plan.loop_extents, plan.loop_rank, inst, args, seq);
    }
    return;
  }
  const Idx tid = static_cast<Idx>(blockIdx.x) * blockDim.x + threadIdx.x;
  const Idx teams = static_cast<Idx>(gridDim.x) * blockDim.x / static_cast<Idx>(team);
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int rank = lane % team;
  const unsigned mask = team == 32 ? 0xffffffffu : (((1u << team) - 1u) << (lane - rank));
  const gufunc_team t(team, rank, mask, team == 1 ? gufunc_team::kind::thread : gufunc_team::kind::subwarp);
  for (Idx inst = tid / static_cast<Idx>(team); inst < instances; inst += teams) {
    gufunc_instance(f, t, out, plan.ops, plan.loop_extents, plan.loop_rank, inst, args, seq);
  }
}

template <class Idx, class R, class F, class Args, std::size_t K>
__global__ void __launch_bounds__(map_block) gufunc_kernel(R* out, F f, gufunc_kernel_plan<K> plan, Args args,
                                                           int team, bool block_team) {
  gufunc_run<Idx>(out, f, plan, args, team, block_team, std::make_index_sequence<K - 1>{});
}

/// The staged path's per-call constants (see plan_gufunc_stage).
template <std::size_t K>
struct gufunc_stage_kplan {
  int per_block;
  int team;
  index_t smem_bytes;  ///< bytes of one tile buffer
  gufunc_stage_operand ops[K];
};

/// Issues the asynchronous copies of one instance's core of input `a` into shared memory `s`
/// (team member `rank` of `team`): 16-byte pieces when aligned, element-sized ones otherwise.
template <class T>
__device__ __forceinline__ void stage_core(T* s, const T* g, int n, bool vec16, int rank, int team) {
  int done = 0;
  if (vec16) {
    constexpr int V = static_cast<int>(16 / sizeof(T));
    const int nv = n / V;
    for (int v = rank; v < nv; v += team) __pipeline_memcpy_async(s + v * V, g + v * V, 16);
    done = nv * V;
  }
  for (int e = done + rank; e < n; e += team) __pipeline_memcpy_async(s + e, g + e, sizeof(T));
}

template <class T>
__device__ __forceinline__ void stage_arg(const core_arg<T, false>&, const gufunc_operand_plan&, const gufunc_stage_operand&,
                                          index_t, unsigned char*, int, int, int) {}
template <class T>
__device__ __forceinline__ void stage_arg(const core_arg<T, true>& a, const gufunc_operand_plan& o,
                                          const gufunc_stage_operand& so, index_t off, unsigned char* smem, int slot,
                                          int rank, int team) {
  T* s = reinterpret_cast<T*>(smem + so.offset) + static_cast<index_t>(slot) * so.pitch;
  stage_core(s, a.p + off, static_cast<int>(o.core_size), so.vec16, rank, team);
}

template <class T>
__device__ __forceinline__ T staged_view(const core_arg<T, false>& a, const gufunc_operand_plan& o,
                                         const gufunc_stage_operand&, unsigned char*, int) {
  return a.get(0, o);
}
template <class T>
__device__ __forceinline__ ndview<const T> staged_view(const core_arg<T, true>&, const gufunc_operand_plan& o,
                                                       const gufunc_stage_operand& so, unsigned char* smem, int slot) {
  // The shared copy keeps the core's (dense) extents and strides.
  const T* s = reinterpret_cast<const T*>(smem + so.offset) + static_cast<index_t>(slot) * so.pitch;
  return ndview<const T>::from_parts(s, o.core_rank, o.core_extents, o.core_strides);
}

/// The staged path. A resident grid of blocks of gufunc_stage_block threads; a block holds
/// sp.per_block teams of sp.team threads, and team `slot` of block b takes instances
/// b * per_block + slot, then + gridDim.x * per_block, and so on. Each team owns `Buffers` shared
/// slots (one instance's staged input cores each; buffer u of team `slot` is at
/// u * sp.smem_bytes + the operand's offset + slot * pitch) and runs on its own: it issues the
/// 16-byte asynchronous copies of an instance (with Buffers = 2, of the next instance before it
/// computes the current one), waits for them (cp.async.wait_group, per thread) and a __syncwarp
/// among its members, then calls the functor on views of the copies. No block-wide barrier: a team
/// whose copies have landed computes while the other teams' copies are in flight, so the SM keeps
/// loads outstanding all the time. (Tiles loaded and computed block by block behind __syncthreads,
/// single- or double-buffered, were slower: docs/map.md, "The staged path".)
template <int Buffers, class Idx, class R, class F, class Args, std::size_t K, std::size_t... I>
__device__ __forceinline__ void gufunc_staged_run(R* out, const F& f, const gufunc_kernel_plan<K>& plan,
                                                  const gufunc_stage_kplan<K>& sp, const Args& args,
                                                  std::index_sequence<I...>) {
  static_assert(Buffers >= 1 && Buffers <= 2, "one or two shared slots per team");
  extern __shared__ __align__(16) unsigned char gufunc_smem[];
  const int team = sp.team;
  const int slot = static_cast<int>(threadIdx.x) / team;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int rank = lane % team;
  const unsigned mask = team >= 32 ? 0xffffffffu : (((1u << team) - 1u) << (lane - rank));
  const gufunc_team t(team, rank, mask, team == 1 ? gufunc_team::kind::thread : gufunc_team::kind::subwarp);
  const Idx instances = static_cast<Idx>(plan.instances);
  const Idx step = static_cast<Idx>(gridDim.x) * static_cast<Idx>(sp.per_block);
  const index_t buf_bytes = sp.smem_bytes;
  // Issues instance `inst`'s copies into buffer `buf` (nothing past the end), then commits a
  // group either way so that every thread's group count stays in step with the loop. Returns the
  // instance's output offset (computed here once, with the input offsets).
  auto issue = [&](Idx inst, int buf) -> index_t {
    index_t off[K] = {};
    if (inst < instances) {
      loop_offsets(inst, plan.loop_rank, plan.loop_extents, plan.ops, off);
      unsigned char* smem = gufunc_smem + buf * buf_bytes;
      (stage_arg(cuda::std::get<I>(args), plan.ops[I + 1], sp.ops[I + 1], off[I + 1], smem, slot, rank, team), ...);
    }
    __pipeline_commit();
    return off[0];
  };
  Idx inst = static_cast<Idx>(blockIdx.x) * static_cast<Idx>(sp.per_block) + static_cast<Idx>(slot);
  index_t out_off = 0;
  if constexpr (Buffers == 2) out_off = issue(inst, 0);
  for (int buf = 0; inst < instances; inst += step) {
    index_t next_off = 0;
    if constexpr (Buffers == 2) {
      next_off = issue(inst + step, buf ^ 1);
      __pipeline_wait_prior(1);
    } else {
      out_off = issue(inst, 0);
      __pipeline_wait_prior(0);
    }
    __syncwarp(mask);  // the team's copies of `inst` have landed and are visible to all of it
    unsigned char* smem = gufunc_smem + buf * buf_bytes;
    const ndview<R> o = ndview<R>::from_parts(out + out_off, plan.ops[0].core_rank, plan.ops[0].core_extents,
                                              plan.ops[0].core_strides);
    invoke_gufunc(f, t, o, staged_view(cuda::std::get<I>(args), plan.ops[I + 1], sp.ops[I + 1], smem, slot)...);
    __syncwarp(mask);  // every member is done reading `buf` before the team's next copies go there
    if constexpr (Buffers == 2) {
      buf ^= 1;
      out_off = next_off;
    }
  }
  __pipeline_wait_prior(0);  // no copy outlives the block
}

template <int Buffers, class Idx, class R, class F, class Args, std::size_t K>
__global__ void __launch_bounds__(gufunc_stage_block) gufunc_staged_kernel(R* out, F f, gufunc_kernel_plan<K> plan,
                                                                            gufunc_stage_kplan<K> sp, Args args) {
  gufunc_staged_run<Buffers, Idx>(out, f, plan, sp, args, std::make_index_sequence<K - 1>{});
}

// ---- reductions --------------------------------------------------------------------------------

/// Element i of the (kept, reduced) ordering of a strided input: i = o * reduced + r.
template <class T>
struct strided_reader {
  const T* p;
  int keep_rank;
  int red_rank;
  index_t reduced;
  index_t keep_e[max_rank], keep_s[max_rank];
  index_t red_e[max_rank], red_s[max_rank];
  __host__ __device__ T operator()(index_t i) const {
    index_t o = reduced > 0 ? i / reduced : 0;
    index_t r = i - o * reduced;
    index_t off = 0;
    for (int d = max_rank - 1; d >= 0; --d) {
      if (d < red_rank) {
        const index_t q = r / red_e[d];
        off += (r - q * red_e[d]) * red_s[d];
        r = q;
      }
    }
    for (int d = max_rank - 1; d >= 0; --d) {
      if (d < keep_rank) {
        const index_t q = o / keep_e[d];
        off += (o - q * keep_e[d]) * keep_s[d];
        o = q;
      }
    }
    return p[off];
  }
};

/// i -> i * step (+ shift): segment offsets of equal-length segments.
struct scaled_index {
  index_t step;
  index_t shift;
  __host__ __device__ index_t operator()(index_t i) const { return i * step + shift; }
};

/// Fills n elements with a value (the reduction of an empty axis).
template <class R>
__global__ void fill_kernel(R* out, index_t n, R v) {
  const index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = v;
}

}  // namespace spillway::detail
