// spillway/gemm/detail/simt_kernel.cuh — the register-blocked GEMM on the CUDA cores: the path for
// exact FP32 and complex<float>, and the universal fallback (every element type, every operand
// major, any alignment, every target from sm_75 up: no cp.async, loads are staged through registers).
//
// Block tile bm x bn, k-tile bk, two shared-memory stages. Each k-tile is read from global memory
// into registers while the previous one is multiplied (configurations with split_stage: A's half
// during the first half of the k steps, B's during the second, so only half the staging registers
// are live at once), then stored into the other stage with k as
// the slow index ("M-major": Xs[kk][row]), transposing K-major operands on the way, so that the
// inner loop reads a thread's rows and columns of one k step as 16-byte shared loads. Rows of a
// stage are padded by 16 bytes: the transposing store of K-major tiles hits distinct banks. The
// large float tile loads K-major operands row by row through one pointer each and runs its full
// k-tiles in a loop with no edge handling (the row form; see simt_cfg_real_large).
//
// A warp is 4 x 8 lanes; a lane owns hm x hn sub-blocks of rm x rn outputs, the sub-blocks 4*rm
// rows and 8*rn columns apart, so the warp's 16-byte shared loads of one k step cover 64 (A) and
// 128 (B) contiguous bytes, conflict-free, and a k step costs (hm + hn) LDS.128 for tm*tn
// multiply-adds (float: 8x8 outputs, 4 LDS.128 per 64 FFMA; complex: 8x4 outputs, 6 per 128).
// Shared memory returns 128 bytes per cycle, so an LDS.128 takes 4 cycles of it unless pairs of
// lanes (i and i ^ 1, or i and i ^ 2) read one address, when it takes 2. The lanes are placed so
// that both operands pair: a lane's row group comes from lane bits 1-2 (lanes i, i ^ 1 share A)
// and its column group from bits 0, 3-4 (lanes i, i ^ 2 share B). Row-major placement (ly =
// lane / 8) paired A only: 12 of those cycles per 64 FFMA per warp, 48 per 64 FFMA cycles of an
// SM's four schedulers, about 94% of the shared-memory pipe with the stores and global loads of
// the 128x128 tile; paired, 8 per warp (ncu, 4096^3: L1 throughput 71% -> 56%).
// H200, float TN, same run as cuBLAS SGEMM (51.1 TFLOP/s): 8192^3 45.6 -> 46.8 TFLOP/s (0.892 ->
// 0.915); 64 x 8192 x 8192 (narrow tile, 8 slices + reduce) 32.2 -> 34.9 (0.814 -> 0.882 of 39.5);
// complex 8192^3 48.7 -> 49.0 (0.897 -> 0.902 of CGEMM 54.3).
//
// Operand loads pick one of four modes per launch (uniform branch): K-major or M-major, each either
// vectorised (up to 16 bytes, when pointer, leading dimension and batch stride allow it) or one
// element per load. Tiles are walked in groups of raster_group row-tiles so that concurrently
// resident blocks share A and B panels in L2; batch entries follow one another in the same walk.
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/gemm/detail/problem.hpp>
#include <spillway/gemm/detail/validate.hpp>
#include <spillway/gemm/epilogue.hpp>
#include <spillway/gemm/options.hpp>
#include <spillway/tile/schedule.cuh>

#include <cuda/std/complex>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace spillway::gemm::detail {

// ---- element traits -----------------------------------------------------------------------------

/// How an input type T is held in shared memory and registers (`elem`), and how a product is
/// accumulated. half / bf16 widen to float on the shared-memory store, int8 to int32, complex to
/// float2 (re, im) so the complex product is four plain FFMAs.
template <class T>
struct simt_elem {
  using elem = float;
  static __device__ __forceinline__ float from(T x) { return widen<float>(x); }
};
template <>
struct simt_elem<double> {
  using elem = double;
  static __device__ __forceinline__ double from(double x) { return x; }
};
template <>
struct simt_elem<std::int8_t> {
  using elem = std::int32_t;
  static __device__ __forceinline__ std::int32_t from(std::int8_t x) { return x; }
};
template <>
struct simt_elem<cuda::std::complex<float>> {
  using elem = float2;
  static __device__ __forceinline__ float2 from(cuda::std::complex<float> x) {
    return make_float2(x.real(), x.imag());
  }
};

template <class E>
inline constexpr bool simt_is_complex_v = std::is_same_v<E, float2>;

// ---- tile configuration -------------------------------------------------------------------------

/// WarpsM x WarpsN warps; a lane owns HM x HN sub-blocks of RM x RN outputs (see the file comment).
/// SplitStage: the next k-tile's A is loaded during the first half of the k steps and B during the
/// second (see the main loop).
template <int WarpsM, int WarpsN, int RM, int HM, int RN, int HN, int BK, int MinBlocks, bool SplitStage = false,
          bool Running = false, int RasterGroup = 8, bool RowLoads = false>
struct simt_config {
  static constexpr int raster_group = RasterGroup;
  static constexpr bool row_loads = RowLoads;
  static constexpr bool split_stage = SplitStage;
  static constexpr bool running = Running;
  static constexpr int warps_m = WarpsM, warps_n = WarpsN;
  static constexpr int rm = RM, hm = HM, rn = RN, hn = HN;
  static constexpr int tm = RM * HM, tn = RN * HN;       // outputs per lane
  static constexpr int wm = 4 * tm, wn = 8 * tn;         // outputs per warp
  static constexpr int bm = WarpsM * wm, bn = WarpsN * wn, bk = BK;
  static constexpr int threads = 32 * WarpsM * WarpsN;
  static constexpr int min_blocks = MinBlocks;
};

// float / half / bf16 / int8: 8x8 per lane; 128x128 (256 threads, k-tile 16: 1024 FFMA per
// barrier, 33 KiB of shared memory, two blocks per SM at 128 registers) and, for m <= 64, 64x128
// (128 threads, k-tile 16, four blocks per SM, 25 KiB) whose K-major vector loads advance one
// pointer per operand ("running", see simt_operand). Skinny problems reach the device through
// split-K, which plans with this tile and residency (simt_tile_shape): 64 x 8192 x 8192 -> 64 tiles
// x 8 slices on 132 SMs. H200, same processes as cuBLAS SGEMM (38.7-40.5), 64 x 8192 x 8192:
// k-tile 8 with per-row pointers (the compiler rebuilt them every k-tile: ~60 integer instructions
// per 512 FFMA; ncu: 179M warp instructions for 134M FFMA) 34.4-34.7 TFLOP/s (0.867-0.885);
// k-tile 8 running 33.2-33.9; k-tile 16 running (spills 16 bytes) 37.5-37.8 (0.932-0.940).
// Measured slower for m <= 64 (same device, 31.2-33.1 TFLOP/s against 34.3-35.0 for the k-tile-8
// tile): shared tiles kept K-major, filled by 16-byte cp.async rings (k-tile 8/16/32, 2-6 stages)
// and read as k-contiguous fragments (per 4 k: 8 LDS.128 of A, then per column one LDS.128 of B
// and 32 FFMA); 15% fewer instructions, but ncu showed twice the dispatch stalls (likely register
// bank conflicts: a lane's 4 k values of one row alternate banks against a fixed accumulator) and
// more shared-load waits.
// The large tile splits its staging (H200, float TN, same run as cuBLAS SGEMM at 51.2 / 50.2
// TFLOP/s: 8192^3 43.0 -> 45.6, 4096^3 42.2 -> 44.9. The K-major vector instantiation then spilled
// 24 bytes: row pointers of the k-edge path, and one 4-byte store + reload per k-tile of ~1150
// instructions, included in those figures; the row loads below removed it). Measured slower on the same
// device: 128x256 tiles with 16x8 or 8x16 per lane (one block per SM, 2-7%), 128x128 with 16x8 per
// lane (128 threads, 5-7%), k-tile 8 (7%); for m <= 64: 64x256 tiles, a 16-deep k-tile, split
// staging (each spills; none faster at the planned 8 slices of 64 x 8192 x 8192).
// Also measured slower (H200, float TN, same run as cuBLAS SGEMM 51.1): the same 128x128 tile fed
// by a ring of 4-byte cp.async copies transposing into these stages (no staging registers, no
// spill, one barrier per k-tile): 8192^3 k-tile 16 with 4 or 5 stages 43.1, 6 stages 41.7, k-tile
// 32 with 3 stages 40.1 (spills), against 45.6 here; 4096^3 42.7 vs 44.9; 8192x8192x256 37.7 vs
// 41.2. Its 64x128 forms (k-tile 16 or 32, 3 or 4 stages) peaked at 29.0 over 4-32 slices of
// 64 x 8192 x 8192, against 32.7 for the narrow tile at its planned 8 slices.
// With the paired lanes (H200, same run, 8192^3, 46.8 here): a load order giving each warp's
// 16-byte loads 16 rows x 32 bytes (transposing stores then conflict-free) 43.7; shifting k rows
// 8-15 of a stage by 32 bytes (conflict-free stores, same loads) 46.8, no gain; the large tile
// without split staging 46.6. For 64 x 8192 x 8192 a reduce pass with 16-byte loads and 8 slices
// in flight saved 0.8 us of the ~7 between the slices' kernel and C; in a run whose operands had a
// leading dimension of 1024 (a smaller footprint in L2), 16 slices ran 34.3 against 35.6 at 8 and
// a 64x256 tile 33.4. Split-K in one launch, the 8 slices of a tile as one thread-block cluster
// summing their partial tiles through distributed shared memory in slice order (sm_90; no
// workspace, no reduce pass) ran 64 x 8192 x 8192 at 33.8 and 34.5 TFLOP/s in two processes of
// one H200 call against 34.4 for the workspace form: no gain, not kept.
// The large tile's K-major vector loads are the row form (simt_operand::row_*, `RowLoads`): two
// threads per row, one pointer per operand advanced by BK, and a k loop split into a hot loop whose
// next k-tile lies wholly inside k (no edge tests, branches or zero-fills: threads past the tile's
// rows read row 0, whose products land only in outputs that are never written) and a tail. SASS
// (sm_90a): the hot k-tile is 1139 instructions per 1024 FFMA (64 LDS.128, 4 LDG.128, 16 STS,
// 1 BAR, 30 others) and no spill, against 1288 static instructions with 2 LDL.64 + LDL + STL per
// k-tile before (ncu, 4096^3: 2.49e9 warp instructions for 2.15e9 FFMA, issue slots 80% busy).
// H200, float TN, same calls as cuBLAS: 32768^2 in core 1.552 -> 1.464 s (45.3 -> 48.1 TFLOP/s),
// the out-of-core 32768^2 job 1.566 -> 1.481 s; 8192^3 46.7-46.8 either way, 4096^3 46.0-46.2 ->
// 45.9-46.0, 8192 x 8192 x 256 41.4-41.6 -> 41.2-41.7 (benchmarks/results/gemm.md, 2026-11-24).
// The 2048 x 2048 x 32768 problem alone (one wave of 256 tiles) ran 2.7% slower (46.3 -> 45.0),
// the four concurrent ones of the out-of-core job 5.5% faster. Raster groups of 2, 4 or 16
// row-tiles instead of 8: within 0.5% at 8192^3, 4096^3, 2048 x 2048 x 32768 and 32768^2.
// 128 threads with 16x8 or 8x16 per lane at three blocks per SM (170 registers) spill 600-900
// bytes (not run).
using simt_cfg_real_large = simt_config<4, 2, 4, 2, 4, 2, 16, 2, true, false, 8, true>;
using simt_cfg_real_narrow = simt_config<2, 2, 4, 2, 4, 2, 16, 4, false, true>;
// complex<float>: 8x4 per lane (64 float accumulators), 128x64 (256 threads), k-tile 8 (1024
// FFMA per barrier; 16 would need 49 KiB, past the static shared-memory limit). Whole-tile
// staging: split staging measured 11% slower (H200, 8192^3: 43.4 against 49.1 TFLOP/s).
using simt_cfg_complex = simt_config<4, 2, 2, 4, 2, 2, 8, 2>;
// double: 4x4 per lane, 64x64 (the speed path for double is DMMA; this one must be correct).
using simt_cfg_double = simt_config<4, 2, 2, 2, 2, 2, 8, 2>;

/// Operand load modes (per launch, per operand).
enum simt_load_mode : int { simt_k_scalar = 0, simt_k_vector = 1, simt_m_scalar = 2, simt_m_vector = 3 };

constexpr int simt_pow2_floor(int x) {
  int p = 1;
  while (p * 2 <= x) p *= 2;
  return p;
}

// ---- small device helpers ------------------------------------------------------------------------

template <int Bytes>
struct simt_raw;
template <>
struct simt_raw<1> {
  using type = std::uint8_t;
};
template <>
struct simt_raw<2> {
  using type = std::uint16_t;
};
template <>
struct simt_raw<4> {
  using type = std::uint32_t;
};
template <>
struct simt_raw<8> {
  using type = uint2;
};
template <>
struct simt_raw<16> {
  using type = uint4;
};

/// V consecutive elements at `p` (aligned to V * sizeof(T)) in one load.
template <int V, class T>
__device__ __forceinline__ void simt_load_vec(const T* p, T (&out)[V]) {
  using raw_t = typename simt_raw<V * sizeof(T)>::type;
  const raw_t r = *reinterpret_cast<const raw_t*>(p);
  std::memcpy(&out[0], &r, sizeof(r));
}

template <int V, class T>
__device__ __forceinline__ void simt_store_vec(T* p, const T (&in)[V]) {
  using raw_t = typename simt_raw<V * sizeof(T)>::type;
  raw_t r;
  std::memcpy(&r, &in[0], sizeof(r));
  *reinterpret_cast<raw_t*>(p) = r;
}

/// 16 bytes of shared memory as N elements (N * sizeof(E) == 16): one LDS.128.
template <int N, class E>
__device__ __forceinline__ void simt_lds16(const E* p, E (&out)[N]) {
  static_assert(N * sizeof(E) == 16, "16-byte shared loads");
  const uint4 r = *reinterpret_cast<const uint4*>(p);
  std::memcpy(&out[0], &r, 16);
}

// ---- operand tile: global -> registers -> shared -------------------------------------------------

/// One operand's k-tile: R rows (of A: rows of C; of B: columns of C) by BK, NT threads.
template <class T, int R, int BK, int NT>
struct simt_operand {
  using E = typename simt_elem<T>::elem;
  static constexpr int ept = R * BK / NT;  // elements per thread per k-tile
  static_assert(ept >= 1 && R * BK == ept * NT, "tile elements must split evenly over the threads");
  // Vector width in elements: at most 16 bytes and the thread's share, dividing BK and R.
  static constexpr int vw = simt_pow2_floor(ept < int(16 / sizeof(T)) ? ept : int(16 / sizeof(T)));
  static_assert(BK % vw == 0 && R % vw == 0 && ept % vw == 0, "vector width must divide the tile");
  static constexpr int nv = ept / vw;
  static constexpr int pad = 16 / int(sizeof(E)) > 0 ? 16 / int(sizeof(E)) : 1;
  static constexpr int ld_s = R + pad;  // shared row length (elements): rows stay 16-byte aligned
  static_assert((ld_s * sizeof(E)) % 16 == 0, "shared rows must stay 16-byte aligned");

  E reg[ept];

  /// Where vector v of thread `tid` lies in the tile in vector mode `Mode` (its first row r and k
  /// offset kk): vw consecutive k of one row (simt_k_vector) or vw consecutive rows of one k
  /// (simt_m_vector). full_init, load and store agree through it.
  struct place {
    int r, kk;
  };
  template <int Mode>
  __device__ __forceinline__ static place vector_place(int tid, int v) {
    static_assert(Mode == simt_k_vector || Mode == simt_m_vector, "a vector load mode");
    const int linear = tid + v * NT;
    if constexpr (Mode == simt_k_vector) {
      return {linear / (BK / vw), (linear % (BK / vw)) * vw};
    } else {
      return {(linear % (R / vw)) * vw, linear / (R / vw)};
    }
  }

  // The K-major vector mode's per-thread state for k-tiles that lie wholly inside k: a pointer to
  // the thread's first vector of each row it loads and whether that row exists. The k loop then
  // costs one predicated 16-byte load per vector, no 64-bit index arithmetic.
  const T* row_ptr[nv];
  bool row_ok[nv];

  __device__ __forceinline__ void full_init(const T* __restrict__ base, index_t ld, int rows, int tid) {
#pragma unroll
    for (int v = 0; v < nv; ++v) {
      const place p = vector_place<simt_k_vector>(tid, v);
      row_ptr[v] = base + p.r * ld + p.kk;
      row_ok[v] = p.r < rows;
    }
  }
  // The running form of the same (configurations with `running`): one pointer to the thread's first
  // vector, advanced by BK with every k-tile loaded, the other vectors a uniform row step further.
  // The row-pointer form above leaves the compiler to rebuild nv 64-bit pointers from the tile's
  // indices every k-tile when registers are short (the narrow tile: ~60 integer instructions per
  // 512 FFMA); a loop-carried pointer cannot be rebuilt, so it stays in two registers.
  const T* run_ptr;
  index_t run_step;
  unsigned run_ok;

  __device__ __forceinline__ void running_init(const T* __restrict__ base, index_t ld, int rows, int tid) {
    static_assert(NT % (BK / vw) == 0, "every vector of a thread on the same k columns");
    constexpr int rows_per_v = NT / (BK / vw);
    const int r = tid / (BK / vw);
    run_ptr = base + (r < rows ? r : 0) * ld + (tid % (BK / vw)) * vw;
    run_step = index_t(rows_per_v) * ld;
    run_ok = 0;
#pragma unroll
    for (int v = 0; v < nv; ++v) run_ok |= (r + v * rows_per_v < rows ? 1u : 0u) << v;
  }
  /// The next k-tile [k0, k0 + BK); `edge`: it crosses k (element by element).
  __device__ __forceinline__ void running_load(index_t k0, index_t k, bool edge, int tid) {
    if (!edge) {
#pragma unroll
      for (int v = 0; v < nv; ++v) {
        T x[vw];
#pragma unroll
        for (int j = 0; j < vw; ++j) x[j] = T{};
        if ((run_ok >> v) & 1u) simt_load_vec<vw>(run_ptr + v * run_step, x);
#pragma unroll
        for (int j = 0; j < vw; ++j) reg[v * vw + j] = simt_elem<T>::from(x[j]);
      }
    } else {
      const index_t kk = k0 + (tid % (BK / vw)) * vw;
#pragma unroll
      for (int v = 0; v < nv; ++v)
#pragma unroll
        for (int j = 0; j < vw; ++j)
          reg[v * vw + j] =
              (((run_ok >> v) & 1u) && kk + j < k) ? simt_elem<T>::from(run_ptr[v * run_step + j]) : E{};
    }
    run_ptr += BK;
  }

  // The row form (configurations with `row_loads`, K-major vector mode): each thread loads all its
  // elements from one row, tpr threads per row, its vectors tpr * vw elements apart, so that a
  // warp's vector load of one index covers whole 32-byte sectors of 16 rows, and the transposing
  // stores (element k = v * tpr * vw + c * vw + j of row r) fall on 32 distinct banks for the float
  // large tile (bank 16 * c + 4 * j + r mod 32, c < 2, r over 16 rows). One pointer per operand,
  // advanced by BK with every k-tile loaded: no per-vector 64-bit pointers to keep or rebuild.
  static constexpr int tpr = BK / ept > 0 ? BK / ept : 1;
  const T* row_run;
  bool row_in;

  __device__ __forceinline__ void row_init(const T* __restrict__ base, index_t ld, int rows, int tid) {
    static_assert(BK % ept == 0 && tpr * vw * nv == BK && R * tpr == NT, "one row per thread group");
    const int r = tid / tpr;
    row_in = r < rows;
    row_run = base + index_t(row_in ? r : 0) * ld + (tid % tpr) * vw;
  }
  /// The next k-tile [k0, k0 + BK); `edge`: it crosses k (element by element).
  __device__ __forceinline__ void row_load(index_t k0, index_t k, bool edge, int tid) {
    if (!edge) {
      // A thread past the tile's rows reads row 0 (row_init) and stores what it read: those
      // shared rows feed only outputs past m or n, which are never written.
#pragma unroll
      for (int v = 0; v < nv; ++v) {
        T x[vw];
        simt_load_vec<vw>(row_run + v * tpr * vw, x);
#pragma unroll
        for (int j = 0; j < vw; ++j) reg[v * vw + j] = simt_elem<T>::from(x[j]);
      }
    } else {
      const index_t kk = k0 + (tid % tpr) * vw;
#pragma unroll
      for (int v = 0; v < nv; ++v)
#pragma unroll
        for (int j = 0; j < vw; ++j)
          reg[v * vw + j] = (row_in && kk + v * tpr * vw + j < k) ? simt_elem<T>::from(row_run[v * tpr * vw + j]) : E{};
    }
    row_run += BK;
  }
  __device__ __forceinline__ void row_store(E* s, int tid) const {
    const int r = tid / tpr, c = tid % tpr;
#pragma unroll
    for (int v = 0; v < nv; ++v)
#pragma unroll
      for (int j = 0; j < vw; ++j) s[(v * tpr * vw + c * vw + j) * ld_s + r] = reg[v * vw + j];
  }

  /// K-major vector mode, the k-tile [k0, k0 + BK) that crosses k: element by element.
  __device__ __forceinline__ void load_edge(index_t k0, index_t k, int tid) {
#pragma unroll
    for (int v = 0; v < nv; ++v) {
      const index_t kk = k0 + ((tid + v * NT) % (BK / vw)) * vw;
#pragma unroll
      for (int j = 0; j < vw; ++j)
        reg[v * vw + j] = (row_ok[v] && kk + j < k) ? simt_elem<T>::from(row_ptr[v][k0 + j]) : E{};
    }
  }
  /// K-major vector mode, k-tile [k0, k0 + BK) inside k.
  __device__ __forceinline__ void load_full(index_t k0) {
#pragma unroll
    for (int v = 0; v < nv; ++v) {
      T x[vw];
#pragma unroll
      for (int j = 0; j < vw; ++j) x[j] = T{};
      if (row_ok[v]) simt_load_vec<vw>(row_ptr[v] + k0, x);
#pragma unroll
      for (int j = 0; j < vw; ++j) reg[v * vw + j] = simt_elem<T>::from(x[j]);
    }
  }

  /// Registers [v·vw, v·vw + vw) from `p`: one vector load when `whole`, else element by element
  /// where in(j) (zero elsewhere).
  template <class In>
  __device__ __forceinline__ void load_vw(int v, const T* p, bool whole, In in) {
    if (whole) {
      T x[vw];
      simt_load_vec<vw>(p, x);
#pragma unroll
      for (int j = 0; j < vw; ++j) reg[v * vw + j] = simt_elem<T>::from(x[j]);
    } else {
#pragma unroll
      for (int j = 0; j < vw; ++j) reg[v * vw + j] = in(j) ? simt_elem<T>::from(p[j]) : E{};
    }
  }

  /// Loads k-tile [k0, k0 + BK) of rows [0, rows) from `base` (the tile's first row, batch
  /// applied). Out-of-range elements are zero.
  __device__ __forceinline__ void load(const T* __restrict__ base, index_t ld, int rows, index_t k0,
                                       index_t k, int mode, int tid) {
    if (mode == simt_k_vector) {
#pragma unroll
      for (int v = 0; v < nv; ++v) {
        const place p = vector_place<simt_k_vector>(tid, v);
        const index_t kg = k0 + p.kk;
        load_vw(v, base + p.r * ld + kg, p.r < rows && kg + vw <= k,
                [&](int j) { return p.r < rows && kg + j < k; });
      }
    } else if (mode == simt_k_scalar) {
#pragma unroll
      for (int e = 0; e < ept; ++e) {
        const int linear = tid + e * NT;
        const int r = linear / BK;
        const int kk = linear % BK;
        reg[e] = (r < rows && k0 + kk < k) ? simt_elem<T>::from(base[r * ld + k0 + kk]) : E{};
      }
    } else if (mode == simt_m_vector) {
#pragma unroll
      for (int v = 0; v < nv; ++v) {
        const place p = vector_place<simt_m_vector>(tid, v);
        const bool kin = k0 + p.kk < k;
        load_vw(v, base + (k0 + p.kk) * ld + p.r, kin && p.r + vw <= rows,
                [&](int j) { return kin && p.r + j < rows; });
      }
    } else {
#pragma unroll
      for (int e = 0; e < ept; ++e) {
        const int linear = tid + e * NT;
        const int r = linear % R;
        const int kk = linear / R;
        reg[e] = (r < rows && k0 + kk < k) ? simt_elem<T>::from(base[(k0 + kk) * ld + r]) : E{};
      }
    }
  }

  /// Stores the registers of `load` into a stage laid out as s[kk * ld_s + row].
  __device__ __forceinline__ void store(E* s, int mode, int tid) const {
    if (mode == simt_k_vector) {
#pragma unroll
      for (int v = 0; v < nv; ++v) {
        const place p = vector_place<simt_k_vector>(tid, v);
#pragma unroll
        for (int j = 0; j < vw; ++j) s[(p.kk + j) * ld_s + p.r] = reg[v * vw + j];
      }
    } else if (mode == simt_k_scalar) {
#pragma unroll
      for (int e = 0; e < ept; ++e) {
        const int linear = tid + e * NT;
        s[(linear % BK) * ld_s + linear / BK] = reg[e];
      }
    } else if (mode == simt_m_vector) {
#pragma unroll
      for (int v = 0; v < nv; ++v) {
        const place p = vector_place<simt_m_vector>(tid, v);
#pragma unroll
        for (int j = 0; j < vw; ++j) s[p.kk * ld_s + p.r + j] = reg[v * vw + j];
      }
    } else {
#pragma unroll
      for (int e = 0; e < ept; ++e) {
        const int linear = tid + e * NT;
        s[(linear / R) * ld_s + linear % R] = reg[e];
      }
    }
  }
};

// ---- multiply-accumulate -------------------------------------------------------------------------

/// acc += a * b: one rounding for float and double (an explicit FMA, whatever -fmad says), the
/// plain product and sum otherwise (integers).
__device__ __forceinline__ void mac_into(float& acc, float a, float b) { acc = fmaf(a, b, acc); }
__device__ __forceinline__ void mac_into(double& acc, double a, double b) { acc = fma(a, b, acc); }
template <class E>
__device__ __forceinline__ void mac_into(E& acc, E a, E b) {
  acc += a * b;
}

template <class E, int TM, int TN>
struct simt_accum {
  E v[TM][TN];
  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) v[i][j] = E{};
  }
  __device__ __forceinline__ void mac(const E (&a)[TM], const E (&b)[TN]) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) mac_into(v[i][j], a[i], b[j]);
  }
  template <class S>
  __device__ __forceinline__ S value(int i, int j) const {
    return static_cast<S>(v[i][j]);
  }
};

// The complex product as four FFMAs on split real / imaginary accumulators (re -= a.im * b.im is an
// FFMA with a negated operand).
template <int TM, int TN>
struct simt_accum<float2, TM, TN> {
  float re[TM][TN], im[TM][TN];
  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) re[i][j] = im[i][j] = 0.0f;
  }
  __device__ __forceinline__ void mac(const float2 (&a)[TM], const float2 (&b)[TN]) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        re[i][j] = fmaf(a[i].x, b[j].x, re[i][j]);
        im[i][j] = fmaf(a[i].x, b[j].y, im[i][j]);
        re[i][j] = fmaf(-a[i].y, b[j].y, re[i][j]);
        im[i][j] = fmaf(a[i].y, b[j].x, im[i][j]);
      }
  }
  template <class S>
  __device__ __forceinline__ S value(int i, int j) const {
    return S(re[i][j], im[i][j]);
  }
};

// ---- kernel --------------------------------------------------------------------------------------

/// A loop flag known at compile time (simt_flag) or at run time (simt_flag_rt), read as `.value`:
/// the hot k loop's body is instantiated with its flags as constants.
template <bool B>
struct simt_flag {
  static constexpr bool value = B;
};
struct simt_flag_rt {
  bool value;
};

struct simt_modes {
  int a;           // simt_load_mode of A
  int b;           // simt_load_mode of B
  bool c_vector;   // C rows can be written rn elements at a time (alignment and ldc allow it)
};

/// One operand's fragment of a k step from shared memory: H groups of G elements (one 16-byte
/// load each), `Step` elements apart from `s` on, into f[0, H·G).
template <int H, int G, int Step, class E>
__device__ __forceinline__ void simt_fragment(const E* s, E* f) {
#pragma unroll
  for (int h = 0; h < H; ++h) {
    E x[G];
    simt_lds16<G>(s + h * Step, x);
#pragma unroll
    for (int i = 0; i < G; ++i) f[h * G + i] = x[i];
  }
}

/// The k steps [KB, KE) of one staged k-tile: each step's A and B fragments of the lane from
/// shared memory (`as`, `bs`: the stage at the lane's first row and column), then its TM x TN
/// multiply-adds into `acc`.
template <class Cfg, class OpA, class OpB, int KB, int KE, class E, class Acc>
__device__ __forceinline__ void simt_k_steps(Acc& acc, const E* as, const E* bs) {
  constexpr int TM = Cfg::tm, TN = Cfg::tn, RM = Cfg::rm, RN = Cfg::rn, HM = Cfg::hm, HN = Cfg::hn;
#pragma unroll
  for (int kk = KB; kk < KE; ++kk) {
    E af[TM], bf[TN];
    simt_fragment<HM, RM, 4 * RM>(as + kk * OpA::ld_s, af);
    simt_fragment<HN, RN, 8 * RN>(bs + kk * OpB::ld_s, bf);
    acc.mac(af, bf);
  }
}

/// One operand's k-tile kt (split staging): `g` is the kernel's A or B operand, with its tile base,
/// ld, rows and load mode; `Lean`: the compiled-in K-major vector loads (k-tiles before k_full lie
/// wholly inside k).
template <bool Lean, int BK, class Op, class T>
__device__ __forceinline__ void simt_load_one(Op& g, const T* base, index_t ld, int rows, int mode,
                                              index_t kt, index_t k_full, index_t k, int tid) {
  if constexpr (Lean) {
    if (kt < k_full) {
      g.load_full(kt * BK);
    } else {
      g.load_edge(kt * BK, k, tid);
    }
  } else {
    g.load(base, ld, rows, kt * BK, k, mode, tid);
  }
}

/// Both operands' k-tile kt into their staging registers (whole-tile staging and the first
/// k-tile): the running loads (`Lean && Running`), the K-major vector loads (`Lean`; k-tiles before
/// k_full lie wholly inside k) or the loads of the run-time modes. The parameters are references,
/// as the kernel's lambda captured them: by-value parameters changed the generated code.
template <bool Lean, bool Running, int BK, class OpA, class OpB, class T>
__device__ __forceinline__ void simt_load_tile(OpA& ga, OpB& gb, const index_t& kt, const index_t& k_full,
                                               const index_t& k, const T* const& a_base,
                                               const T* const& b_base, const index_t& lda, const index_t& ldb,
                                               const int& rows_a, const int& rows_b, const int& mode_a,
                                               const int& mode_b, const int& tid) {
  if constexpr (Lean && Running) {
    ga.running_load(kt * BK, k, kt >= k_full, tid);
    gb.running_load(kt * BK, k, kt >= k_full, tid);
  } else if constexpr (Lean) {
    if (kt < k_full) {
      ga.load_full(kt * BK);
      gb.load_full(kt * BK);
    } else {
      ga.load_edge(kt * BK, k, tid);
      gb.load_edge(kt * BK, k, tid);
    }
  } else {
    ga.load(a_base, lda, rows_a, kt * BK, k, mode_a, tid);
    gb.load(b_base, ldb, rows_b, kt * BK, k, mode_b, tid);
  }
}

/// The per-tile state of the compiled-in K-major vector loads (`Lean`; see the kernel): the running
/// pointers (`Running`), the row form (`RowForm`) or the per-row pointers. Nothing otherwise.
template <bool Lean, bool Running, bool RowForm, class OpA, class OpB, class T>
__device__ __forceinline__ void simt_init_loads(OpA& ga, OpB& gb, const T* a_base, index_t lda, int rows_a,
                                                const T* b_base, index_t ldb, int rows_b, int tid) {
  if constexpr (Lean && Running) {
    ga.running_init(a_base, lda, rows_a, tid);
    gb.running_init(b_base, ldb, rows_b, tid);
  } else if constexpr (RowForm) {
    ga.row_init(a_base, lda, rows_a, tid);
    gb.row_init(b_base, ldb, rows_b, tid);
  } else if constexpr (Lean) {
    ga.full_init(a_base, lda, rows_a, tid);
    gb.full_init(b_base, ldb, rows_b, tid);
  }
}

/// FixedA / FixedB: the load modes compiled in (the fast layouts), or -1 for the mode read from
/// `modes` at run time (every other layout; more registers, so fewer blocks per SM are asked).
///
/// The lane's place in the warp's 4 x 8 grid is "paired" (see the file comment): ly from lane bits
/// 1 and 2, lx from bits 0, 3 and 4, so lanes 2i and 2i + 1 read one A fragment and lanes i and
/// i ^ 2 one B fragment. Compiled-in K-major vector modes ("lean"): per-thread row pointers set
/// once per tile; k-tiles wholly inside k are one predicated vector load each, the one crossing k
/// goes element-wise. Split staging: A's next k-tile is in flight during the first half of the k
/// steps and stored halfway, B's during the second half: half the staging registers are live at a
/// time, which leaves the 128-register budget room to schedule the shared loads ahead (float
/// 128x128: 43.0 -> 45.6 TFLOP/s on the H200 at 8192^3; complex lost 11%, so it keeps the
/// whole-tile order). In its k loop, `more`: a next k-tile exists; `edge`: it crosses k (the row
/// form; the other loads test k themselves). The row form's hot loop has both compiled in (the
/// next tile lies wholly inside k), so its k-tile costs no edge tests and no branches. The
/// epilogue: alpha * acc (+ beta * C), the functor, the conversion; rn columns at a time.
template <class Cfg, class T, class TC, class S, class Epi, int FixedA, int FixedB>
__global__ void __launch_bounds__(Cfg::threads, (FixedA >= 0 && FixedB >= 0) ? Cfg::min_blocks : 1)
    simt_gemm_kernel(problem<T, T, TC, S, Epi> p, simt_modes modes, index_t tiles_m, index_t tiles_n) {
  using E = typename simt_elem<T>::elem;
  using opa_t = simt_operand<T, Cfg::bm, Cfg::bk, Cfg::threads>;
  using opb_t = simt_operand<T, Cfg::bn, Cfg::bk, Cfg::threads>;
  constexpr int HN = Cfg::hn, BK = Cfg::bk, TM = Cfg::tm, TN = Cfg::tn, RM = Cfg::rm, RN = Cfg::rn;
  static_assert(RM * sizeof(E) == 16 && RN * sizeof(E) == 16, "lane fragments are 16-byte shared loads");
  static_assert(!(Cfg::running && Cfg::split_stage), "the running loads feed whole-tile staging only");

  __shared__ __align__(16) E a_s[2][BK * opa_t::ld_s];
  __shared__ __align__(16) E b_s[2][BK * opb_t::ld_s];

  const int mode_a = FixedA >= 0 ? FixedA : modes.a;
  const int mode_b = FixedB >= 0 ? FixedB : modes.b;
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32, lane = tid % 32;
  const int ly = ((lane >> 1) & 1) | ((lane >> 1) & 2);
  const int lx = (lane & 1) | ((lane >> 2) & 6);
  const int row_l = (warp / Cfg::warps_n) * Cfg::wm + ly * RM;  // first row of the lane in the tile
  const int col_l = (warp % Cfg::warps_n) * Cfg::wn + lx * RN;  // first column

  const index_t tiles = tiles_m * tiles_n;
  const index_t total = tiles * p.batch;
  const index_t k_tiles = (p.k + BK - 1) / BK;
  const bool beta_zero = p.beta == S(0);

  for (index_t work = blockIdx.x; work < total; work += gridDim.x) {
    const index_t q = work / tiles;
    index_t tm, tn;
    tile::grouped_raster(work - q * tiles, tiles_m, tiles_n, Cfg::raster_group, tm, tn);
    const index_t row0 = tm * Cfg::bm, col0 = tn * Cfg::bn;
    // Rows left in this tile, clamped to the tile: 32-bit compares in the loads.
    const int rows_a = static_cast<int>(p.m - row0 < Cfg::bm ? p.m - row0 : index_t(Cfg::bm));
    const int rows_b = static_cast<int>(p.n - col0 < Cfg::bn ? p.n - col0 : index_t(Cfg::bn));
    const T* a_base = p.a + q * p.stride_a + (mode_a < simt_m_scalar ? row0 * p.lda : row0);
    const T* b_base = p.b + q * p.stride_b + (mode_b < simt_m_scalar ? col0 * p.ldb : col0);

    opa_t ga;
    opb_t gb;
    simt_accum<E, TM, TN> acc;
    acc.zero();

    constexpr bool lean = FixedA == simt_k_vector && FixedB == simt_k_vector;
    const index_t k_full = p.k / BK;
    auto load_tile = [&](index_t kt) {
      simt_load_tile<lean, Cfg::running, BK>(ga, gb, kt, k_full, p.k, a_base, b_base, p.lda, p.ldb, rows_a,
                                             rows_b, mode_a, mode_b, tid);
    };
    constexpr bool row_form = lean && Cfg::row_loads;
    static_assert(!Cfg::row_loads || Cfg::split_stage, "the row loads feed split staging only");
    simt_init_loads<lean, Cfg::running, row_form>(ga, gb, a_base, p.lda, rows_a, b_base, p.ldb, rows_b, tid);

    __syncthreads();  // the previous tile's last reads of stage 0 / 1 are done
    if constexpr (row_form) {
      ga.row_load(0, p.k, k_full == 0, tid);
      gb.row_load(0, p.k, k_full == 0, tid);
      ga.row_store(a_s[0], tid);
      gb.row_store(b_s[0], tid);
    } else {
      load_tile(0);
      ga.store(a_s[0], mode_a, tid);
      gb.store(b_s[0], mode_b, tid);
    }
    __syncthreads();

    int stage = 0;
    if constexpr (Cfg::split_stage) {
      auto load_a = [&](index_t kt) {
        simt_load_one<lean, BK>(ga, a_base, p.lda, rows_a, mode_a, kt, k_full, p.k, tid);
      };
      auto load_b = [&](index_t kt) {
        simt_load_one<lean, BK>(gb, b_base, p.ldb, rows_b, mode_b, kt, k_full, p.k, tid);
      };
      auto iter = [&](index_t kt, auto more_c, auto edge_c) {
        const bool more = more_c.value, edge = edge_c.value;
        const E* as = a_s[stage] + row_l;
        const E* bs = b_s[stage] + col_l;
        // Stage ^ 1 was last read in iteration kt - 1, before that iteration's barrier.
        if (more) {
          if constexpr (row_form) ga.row_load((kt + 1) * BK, p.k, edge, tid);
          else load_a(kt + 1);
        }
        simt_k_steps<Cfg, opa_t, opb_t, 0, BK / 2>(acc, as, bs);
        if (more) {
          if constexpr (row_form) {
            ga.row_store(a_s[stage ^ 1], tid);
            gb.row_load((kt + 1) * BK, p.k, edge, tid);
          } else {
            ga.store(a_s[stage ^ 1], mode_a, tid);
            load_b(kt + 1);
          }
        }
        simt_k_steps<Cfg, opa_t, opb_t, BK / 2, BK>(acc, as, bs);
        if (more) {
          if constexpr (row_form) gb.row_store(b_s[stage ^ 1], tid);
          else gb.store(b_s[stage ^ 1], mode_b, tid);
          __syncthreads();
          stage ^= 1;
        }
      };
      index_t kt = 0;
      if constexpr (row_form)
        for (; kt + 1 < k_full; ++kt) iter(kt, simt_flag<true>{}, simt_flag<false>{});
      for (; kt < k_tiles; ++kt) iter(kt, simt_flag_rt{kt + 1 < k_tiles}, simt_flag_rt{kt + 1 >= k_full});
    } else {
      for (index_t kt = 0; kt < k_tiles; ++kt) {
        const bool more = kt + 1 < k_tiles;
        if (more) load_tile(kt + 1);
        simt_k_steps<Cfg, opa_t, opb_t, 0, BK>(acc, a_s[stage] + row_l, b_s[stage] + col_l);
        if (more) {
          // Stage ^ 1 was last read in iteration kt - 1, before that iteration's barrier.
          ga.store(a_s[stage ^ 1], mode_a, tid);
          gb.store(b_s[stage ^ 1], mode_b, tid);
          __syncthreads();
          stage ^= 1;
        }
      }
    }

    TC* c_base = p.c + q * p.stride_c;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const index_t row = row0 + row_l + (i / RM) * 4 * RM + i % RM;
      if (row >= p.m) continue;
      TC* c_row = c_base + row * p.ldc;
#pragma unroll
      for (int h = 0; h < HN; ++h) {
        const index_t col = col0 + col_l + h * 8 * RN;
        TC out[RN];
#pragma unroll
        for (int j = 0; j < RN; ++j) {
          const index_t cj = col + j;
          if (cj >= p.n) continue;  // the functor may index per-column data: never past n
          S v = p.alpha * acc.template value<S>(i, h * RN + j);
          if (!beta_zero) v = v + p.beta * load_output<S>(c_row[cj]);
          out[j] = convert_output<TC>(p.epi(v, row, cj));
        }
        if (modes.c_vector && col + RN <= p.n) {
          simt_store_vec<RN>(c_row + col, out);
        } else {
#pragma unroll
          for (int j = 0; j < RN; ++j)
            if (col + j < p.n) c_row[col + j] = out[j];
        }
      }
    }
  }
}

// ---- launch --------------------------------------------------------------------------------------

template <class T>
inline bool simt_aligned(const T* p, index_t ld, index_t stride, index_t batch, int v) {
  if (v <= 1) return false;
  const auto bytes = static_cast<std::uintptr_t>(v) * sizeof(T);
  return reinterpret_cast<std::uintptr_t>(p) % bytes == 0 && ld % v == 0 && (batch == 1 || stride % v == 0);
}

/// Whether the fast instantiation (both operands K-major and vector-loaded, modes compiled in)
/// exists for this element type: float (and the types that share its tile) and complex<float>.
template <class T>
inline constexpr bool simt_has_fast_kk_v = std::is_same_v<T, float> || std::is_same_v<T, cuda::std::complex<float>>;

template <class Cfg, class T, class TC, class S, class Epi>
void simt_launch_cfg(const problem<T, T, TC, S, Epi>& p, stream_view s) {
  using opa_t = simt_operand<T, Cfg::bm, Cfg::bk, Cfg::threads>;
  using opb_t = simt_operand<T, Cfg::bn, Cfg::bk, Cfg::threads>;
  simt_modes modes{};
  const bool va = simt_aligned(p.a, p.lda, p.stride_a, p.batch, opa_t::vw);
  const bool vb = simt_aligned(p.b, p.ldb, p.stride_b, p.batch, opb_t::vw);
  modes.a = p.a_kmajor ? (va ? simt_k_vector : simt_k_scalar) : (va ? simt_m_vector : simt_m_scalar);
  modes.b = p.b_kmajor ? (vb ? simt_k_vector : simt_k_scalar) : (vb ? simt_m_vector : simt_m_scalar);
  constexpr int rn = Cfg::rn;
  constexpr bool c_vec_ok = rn * sizeof(TC) == 4 || rn * sizeof(TC) == 8 || rn * sizeof(TC) == 16;
  modes.c_vector = c_vec_ok && simt_aligned(p.c, p.ldc, p.stride_c, p.batch, rn);

  const index_t tiles_m = (p.m + Cfg::bm - 1) / Cfg::bm;
  const index_t tiles_n = (p.n + Cfg::bn - 1) / Cfg::bn;
  const index_t total = tiles_m * tiles_n * p.batch;
  const unsigned grid = grid_blocks(total, 1, max_grid_blocks);
  if constexpr (simt_has_fast_kk_v<T>) {
    if (modes.a == simt_k_vector && modes.b == simt_k_vector) {
      simt_gemm_kernel<Cfg, T, TC, S, Epi, simt_k_vector, simt_k_vector>
          <<<grid, Cfg::threads, 0, s.value()>>>(p, modes, tiles_m, tiles_n);
      SPILLWAY_CHECK_LAUNCH();
      return;
    }
  }
  simt_gemm_kernel<Cfg, T, TC, S, Epi, -1, -1><<<grid, Cfg::threads, 0, s.value()>>>(p, modes, tiles_m, tiles_n);
  SPILLWAY_CHECK_LAUNCH();
}

/// The tile launch_simt runs element type T with for m rows, and the blocks per SM its launch
/// bounds ask for: what the dispatcher's automatic split-K plans with.
template <class T>
split_tile_shape simt_tile_shape(index_t m) {
  auto of = [](auto cfg) {
    using C = decltype(cfg);
    return split_tile_shape{C::bm, C::bn, C::min_blocks};
  };
  if constexpr (std::is_same_v<T, double>) {
    return of(simt_cfg_double{});
  } else if constexpr (std::is_same_v<T, cuda::std::complex<float>>) {
    return of(simt_cfg_complex{});
  } else {
    return m <= simt_cfg_real_narrow::bm ? of(simt_cfg_real_narrow{}) : of(simt_cfg_real_large{});
  }
}

/// C = epi(alpha * A * B^T + beta * C) for problem `p` (see problem.hpp), on the CUDA cores.
/// Enqueues on `s` only.
template <class TA, class TB, class TC, class S, class Epi>
void launch_simt(const problem<TA, TB, TC, S, Epi>& p, stream_view s) {
  static_assert(std::is_same_v<TA, TB>, "the SIMT GEMM takes A and B of one element type");
  static_assert(is_gemm_input_v<TA>, "unsupported GEMM element type");
  static_assert(std::is_same_v<S, accumulator_t<TA>>, "the scalar type is the accumulator type");
  if (p.m <= 0 || p.n <= 0 || p.batch <= 0) return;
  if constexpr (std::is_same_v<TA, double>) {
    simt_launch_cfg<simt_cfg_double>(p, s);
  } else if constexpr (std::is_same_v<TA, cuda::std::complex<float>>) {
    simt_launch_cfg<simt_cfg_complex>(p, s);
  } else {
    if (p.m <= simt_cfg_real_narrow::bm) {
      simt_launch_cfg<simt_cfg_real_narrow>(p, s);
    } else {
      simt_launch_cfg<simt_cfg_real_large>(p, s);
    }
  }
}

}  // namespace spillway::gemm::detail
