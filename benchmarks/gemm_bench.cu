// In-core GEMM, C = A·Bᵀ in the acceptance layout: A row-major m x k, B given as n x k row-major
// (both K-major; spillway gets `b_nk.t()` as its k x n operand), C row-major m x n. spillway's
// GEMM on every type (path `automatic`, then each forced path) against the routes a user would
// otherwise take, all in this one binary and on the same device buffers:
//
//   f32   cublasSgemm                                   (exact FP32, like spillway's simt path)
//   tf32  cublasGemmEx, CUBLAS_COMPUTE_32F_FAST_TF32    (spillway: math_mode::tf32)
//   f64   cublasDgemm
//   c32   cublasCgemm                                   (complex<float>)
//   bf16  cublasGemmEx, bf16 in and out, compute 32F
//   f16   cublasGemmEx, half in and out, compute 32F
//   s8    cublasLtMatmul, int8 -> int32, CUBLAS_COMPUTE_32I (the "TN" form int8 requires)
//   e4m3  cublasLtMatmul, FP8 e4m3 -> bf16, CUBLAS_COMPUTE_32F, per-tensor A/B scales (device
//         floats), CUBLASLT_MATMUL_DESC_FAST_ACCUM = 0 (partial sums promoted to FP32: spillway's
//         fp8_accumulation::promoted, the default)
//   e4m3f the same with FAST_ACCUM = 1 (spillway's fp8_accumulation::fast)
//   f32   naive16: the CUDA C++ Programming Guide's 16 x 16 shared-memory matmul
//
// Layout in cuBLAS's column-major terms: row-major C (m x n, ld n) is column-major Cᵀ (n x m,
// ld n), and Cᵀ = B_nk·Aᵀ. The buffer of B_nk (row-major n x k, ld k) is column-major B_nkᵀ
// (k x n, ld k), so cuBLAS's first operand is that buffer with op T; the buffer of A (row-major
// m x k) is column-major Aᵀ (k x m, ld k), the second operand with op N:
//   cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, α, B, k, A, k, β, C, n).
// Every route's output is checked (after its untimed first run, before timing) on a fixed sample
// of entries — corners and pseudo-random interior positions — against a host double-precision
// reference of the same entries, within a bound derived from k and the type's unit roundoff. All
// routes meet the same reference, so a layout slip in any of them (a transposed C, B read as
// k x n) fails the row instead of producing a fast wrong number.
//
// `--alternations=N` (with `--alternation_size=S`, default 8192) runs instead, per type, N
// alternated pairs of spillway's automatic path and the cuBLAS(Lt) route with the SM clock, power
// and temperature logged (NVML through dlopen; see alternate()).
//
// Counters (per repetition, from the median CUDA-event time of its iterations): `TFLOP/s`
// (2·m·n·k per GEMM, 8·m·n·k for complex; tera-ops for int8), `median_ms`, and for each non-
// baseline row `vs_cublas` = baseline median / this median, the baseline being the cuBLAS(Lt) row
// of the same type and shape in this process (registered first; timed here if filtered out).
// Inputs: uniform in [-1, 1] (int8: integers in [-127, 127]) from a hash of the element index and
// a seed fixed per type and shape, generated on the device. Outputs are poisoned (0xFF bytes: NaN,
// or -1 for int32) before each route's first run, so a route that skips entries cannot pass.
#include "bench_common.cuh"
#include "gpu_sensors.hpp"

#include <spillway/core.hpp>
#include <spillway/gemm.cuh>

#include <benchmark/benchmark.h>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda/std/complex>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

namespace {

namespace gemm = spillway::gemm;
using cfloat = cuda::std::complex<float>;
using spillway::index_t;
using spillway::stream_view;

#define GEMM_BENCH_CUBLAS(call)                                                                 \
  do {                                                                                          \
    const cublasStatus_t st_ = (call);                                                          \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                           \
      throw std::runtime_error(std::string(#call) + " failed: status " + std::to_string(int(st_))); \
  } while (0)

// ---------------------------------------------------------------------------------------------
// Types

enum class dtype { f32, tf32, f64, c32, bf16, f16, s8, e4m3, e4m3f };

// T: input element, TC: output element, S: α/β. `storage` names the input buffers: f32 and tf32
// share them. `ref_rate`: the cuBLAS figure measured on the H200 (DESIGN.md), used only to size
// iteration counts.
template <dtype D>
struct traits;
template <>
struct traits<dtype::f32> {
  using T = float;
  using TC = float;
  using S = float;
  static constexpr const char* name = "f32";
  static constexpr const char* storage = "float";
  static constexpr const char* baseline = "cublas_sgemm";
  static constexpr double ops_per_mac = 2, ref_rate = 51.0;
};
template <>
struct traits<dtype::tf32> : traits<dtype::f32> {
  static constexpr const char* name = "tf32";
  static constexpr const char* baseline = "cublas_tf32";
  static constexpr double ref_rate = 400.0;
};
template <>
struct traits<dtype::f64> {
  using T = double;
  using TC = double;
  using S = double;
  static constexpr const char* name = "f64";
  static constexpr const char* storage = "double";
  static constexpr const char* baseline = "cublas_dgemm";
  static constexpr double ops_per_mac = 2, ref_rate = 52.0;
};
template <>
struct traits<dtype::c32> {
  using T = cfloat;
  using TC = cfloat;
  using S = cfloat;
  static constexpr const char* name = "c32";
  static constexpr const char* storage = "complex";
  static constexpr const char* baseline = "cublas_cgemm";
  static constexpr double ops_per_mac = 8, ref_rate = 53.0;
};
template <>
struct traits<dtype::bf16> {
  using T = __nv_bfloat16;
  using TC = __nv_bfloat16;
  using S = float;
  static constexpr const char* name = "bf16";
  static constexpr const char* storage = "bf16";
  static constexpr const char* baseline = "cublas_bf16";
  static constexpr double ops_per_mac = 2, ref_rate = 740.0;
};
template <>
struct traits<dtype::f16> {
  using T = __half;
  using TC = __half;
  using S = float;
  static constexpr const char* name = "f16";
  static constexpr const char* storage = "half";
  static constexpr const char* baseline = "cublas_f16";
  static constexpr double ops_per_mac = 2, ref_rate = 640.0;
};
template <>
struct traits<dtype::s8> {
  using T = std::int8_t;
  using TC = std::int32_t;
  using S = std::int32_t;
  static constexpr const char* name = "s8";
  static constexpr const char* storage = "int8";
  static constexpr const char* baseline = "cublaslt_s8";
  static constexpr double ops_per_mac = 2, ref_rate = 900.0;
};
template <>
struct traits<dtype::e4m3> {
  using T = __nv_fp8_e4m3;
  using TC = __nv_bfloat16;
  using S = float;
  static constexpr const char* name = "e4m3";
  static constexpr const char* storage = "e4m3";
  static constexpr const char* baseline = "cublaslt_e4m3";
  static constexpr double ops_per_mac = 2, ref_rate = 1300.0;
  static constexpr bool fast = false;
};
template <>
struct traits<dtype::e4m3f> : traits<dtype::e4m3> {
  static constexpr const char* name = "e4m3f";
  static constexpr const char* baseline = "cublaslt_e4m3_fast";
  static constexpr bool fast = true;
};

// ---------------------------------------------------------------------------------------------
// Inputs on the device

__device__ std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [-1, 1] from the top 24 bits (every value exact in float).
__device__ float unit_float(std::uint64_t h) {
  return static_cast<float>(h >> 40) * (2.0f / 16777215.0f) - 1.0f;
}

template <class T>
__device__ T random_element(std::uint64_t h) {
  if constexpr (std::is_same_v<T, float>) {
    return unit_float(h);
  } else if constexpr (std::is_same_v<T, double>) {
    return static_cast<double>(h >> 11) * (2.0 / 9007199254740991.0) - 1.0;
  } else if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(unit_float(h));
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(unit_float(h));
  } else if constexpr (std::is_same_v<T, std::int8_t>) {
    return static_cast<std::int8_t>(static_cast<int>(h % 255u) - 127);
  } else if constexpr (std::is_same_v<T, __nv_fp8_e4m3>) {
    return __nv_fp8_e4m3(unit_float(h));  // round to nearest, saturating
  } else {
    return T(unit_float(h), unit_float(splitmix64(h ^ 0xC0FFEEull)));
  }
}

template <class T>
__global__ void fill_random(T* p, std::int64_t count, std::uint64_t seed) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    p[i] = random_element<T>(splitmix64(static_cast<std::uint64_t>(i) ^ seed));
  }
}

// out (cols x rows, row-major) = in (rows x cols, row-major)ᵀ; only the naive kernel needs it.
__global__ void transpose_copy(const float* in, float* out, std::int64_t rows, std::int64_t cols) {
  __shared__ float tile[32][33];
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * 32, c0 = static_cast<std::int64_t>(blockIdx.x) * 32;
  for (int y = threadIdx.y; y < 32; y += blockDim.y) {
    const std::int64_t r = r0 + y, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[y][threadIdx.x] = in[r * cols + c];
  }
  __syncthreads();
  for (int y = threadIdx.y; y < 32; y += blockDim.y) {
    const std::int64_t c = c0 + y, r = r0 + threadIdx.x;
    if (r < rows && c < cols) out[c * rows + r] = tile[threadIdx.x][y];
  }
}

// ---------------------------------------------------------------------------------------------
// The CUDA C++ Programming Guide's shared-memory matrix multiply ("Shared Memory" section), ported
// as the guide writes it: row-major matrices with a stride, 16 x 16 thread blocks, one 16 x 16
// tile of A and one of B in shared memory per step, one output element per thread, dimensions
// multiples of 16. Its B is k x n row-major, so it reads a transposed copy of the same B values
// (made once per shape, untimed): the layout the guide's kernel (and the 6.95 TFLOP/s of the
// issue) assumes.
namespace guide {

constexpr int block_size = 16;

struct matrix {
  int width;
  int height;
  int stride;
  float* elements;
};

__device__ float get_element(const matrix a, int row, int col) { return a.elements[row * a.stride + col]; }

__device__ void set_element(matrix a, int row, int col, float value) { a.elements[row * a.stride + col] = value; }

// The block_size x block_size sub-matrix at tile (row, col) of `a`.
__device__ matrix sub_matrix(matrix a, int row, int col) {
  matrix s;
  s.width = block_size;
  s.height = block_size;
  s.stride = a.stride;
  s.elements = &a.elements[a.stride * block_size * row + block_size * col];
  return s;
}

__global__ void matmul(matrix a, matrix b, matrix c) {
  const int block_row = blockIdx.y, block_col = blockIdx.x;
  matrix c_sub = sub_matrix(c, block_row, block_col);
  float value = 0;
  const int row = threadIdx.y, col = threadIdx.x;
  for (int t = 0; t < a.width / block_size; ++t) {
    matrix a_sub = sub_matrix(a, block_row, t);
    matrix b_sub = sub_matrix(b, t, block_col);
    __shared__ float as[block_size][block_size];
    __shared__ float bs[block_size][block_size];
    as[row][col] = get_element(a_sub, row, col);
    bs[row][col] = get_element(b_sub, row, col);
    __syncthreads();
    for (int e = 0; e < block_size; ++e) value += as[row][e] * bs[e][col];
    __syncthreads();
  }
  set_element(c_sub, row, col, value);
}

}  // namespace guide

// ---------------------------------------------------------------------------------------------
// Host-side values

template <class T>
std::complex<double> to_host_value(T x) {
  if constexpr (std::is_same_v<T, __half>) {
    return __half2float(x);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(x);
  } else if constexpr (std::is_same_v<T, cfloat>) {
    return {x.real(), x.imag()};
  } else if constexpr (std::is_same_v<T, __nv_fp8_e4m3>) {
    return static_cast<double>(static_cast<float>(x));
  } else {
    return static_cast<double>(x);
  }
}

// Worst-case error of one computed entry against the exact product of the stored inputs.
// `mag` = Σ|a_kk|·|b_kk|; u = 2^-24 (float accumulation), 2^-53 (double).
//  f32, f64:  k·u·mag (Higham's γ_k, any summation order: split-K and cuBLAS's trees alike).
//  c32:       2·(k+2)·u·mag (each complex product adds two rounded real products).
//  tf32:      (2^-9 + k·u)·mag: each operand loses up to 2^-10 relatively (truncation; cuBLAS
//             rounds, 2^-11), so a product up to ~2^-9.
//  bf16, f16: products of 8/11-bit mantissas are exact in float: k·u·mag, then the rounding to
//             the output type, u_out·(|c| + k·u·mag) with u_out = 2^-8 / 2^-11.
//  s8:        exact (int32 accumulation; |c| <= 8192·127² < 2^31).
//  e4m3:      products of 4-bit mantissas are exact; the tensor cores add them at reduced precision
//             (modelled as u_tc = 2^-12 per addition: docs/gemm.md, "Accuracy"): promoted, 128-long runs at
//             u_tc then FP32 adds, (130·u_tc + (k/128 + 2)·u)·mag; fast, the whole k at u_tc, (k +
//             2)·u_tc·mag; then the rounding to bf16.
template <dtype D>
double error_bound(index_t k, double mag, double ref_abs) {
  const double kd = static_cast<double>(k), u = std::ldexp(1.0, -24);
  switch (D) {
    case dtype::f32: return kd * u * mag;
    case dtype::f64: return kd * std::ldexp(1.0, -53) * mag;
    case dtype::c32: return 2.0 * (kd + 2.0) * u * mag;
    case dtype::tf32: return (std::ldexp(1.0, -9) + kd * u) * mag;
    case dtype::bf16: return kd * u * mag + std::ldexp(1.0, -8) * (ref_abs + kd * u * mag);
    case dtype::f16: return kd * u * mag + std::ldexp(1.0, -11) * (ref_abs + kd * u * mag);
    case dtype::s8: return 0.0;
    case dtype::e4m3:
    case dtype::e4m3f: {
      const double utc = std::ldexp(1.0, -12);
      const double acc =
          D == dtype::e4m3f ? (kd + 2.0) * utc * mag : (130.0 * utc + (kd / 128.0 + 2.0) * u) * mag;
      return acc + std::ldexp(1.0, -8) * (ref_abs + acc);
    }
  }
  return 0.0;
}

struct sample {
  index_t i, j;
  std::complex<double> ref;
  double mag;
};

// ---------------------------------------------------------------------------------------------
// One shape's buffers; one set resident at a time.

spillway::stream& bench_stream() {
  static spillway::stream s;
  return s;
}

struct operands_base {
  virtual ~operands_base() = default;
};

template <class T, class TC>
struct operands : operands_base {
  index_t m, n, k;
  spillway::device_buffer<T> a;   // m x k row-major
  spillway::device_buffer<T> b;   // n x k row-major (B_nk)
  spillway::device_buffer<TC> c;  // m x n row-major
  std::unique_ptr<spillway::device_buffer<T>> b_kn;  // B_nkᵀ, for the guide's kernel only
  std::vector<sample> samples;

  operands(index_t m_, index_t n_, index_t k_, std::uint64_t seed, stream_view s)
      : m(m_), n(n_), k(k_), a(static_cast<std::size_t>(m_ * k_), s), b(static_cast<std::size_t>(n_ * k_), s),
        c(static_cast<std::size_t>(m_ * n_), s) {
    fill_random<T><<<4096, 256, 0, s.value()>>>(a.data(), m * k, seed);
    SPILLWAY_CHECK_LAUNCH();
    fill_random<T><<<4096, 256, 0, s.value()>>>(b.data(), n * k, seed ^ 0xB0B0B0B0B0B0B0B0ull);
    SPILLWAY_CHECK_LAUNCH();
    s.synchronize();
    // Corners, then fixed pseudo-random positions.
    std::vector<std::pair<index_t, index_t>> at = {{0, 0}, {0, n - 1}, {m - 1, 0}, {m - 1, n - 1}};
    std::mt19937_64 rng(seed);
    while (at.size() < 32) {
      at.emplace_back(static_cast<index_t>(rng() % static_cast<std::uint64_t>(m)),
                      static_cast<index_t>(rng() % static_cast<std::uint64_t>(n)));
    }
    std::vector<T> ra(static_cast<std::size_t>(k)), rb(static_cast<std::size_t>(k));
    for (const auto& [i, j] : at) {
      SPILLWAY_CUDA_TRY(cudaMemcpy(ra.data(), a.data() + i * k, ra.size() * sizeof(T), cudaMemcpyDeviceToHost));
      SPILLWAY_CUDA_TRY(cudaMemcpy(rb.data(), b.data() + j * k, rb.size() * sizeof(T), cudaMemcpyDeviceToHost));
      std::complex<double> ref = 0;
      double mag = 0;
      for (index_t q = 0; q < k; ++q) {
        const auto x = to_host_value(ra[static_cast<std::size_t>(q)]), y = to_host_value(rb[static_cast<std::size_t>(q)]);
        ref += x * y;
        mag += std::abs(x) * std::abs(y);
      }
      samples.push_back({i, j, ref, mag});
    }
  }

  float* guide_b() {
    static_assert(std::is_same_v<T, float>);
    if (!b_kn) {
      stream_view s = bench_stream();
      b_kn = std::make_unique<spillway::device_buffer<T>>(static_cast<std::size_t>(n * k), s);
      transpose_copy<<<dim3(static_cast<unsigned>((k + 31) / 32), static_cast<unsigned>((n + 31) / 32)), dim3(32, 8), 0,
                       s.value()>>>(b.data(), b_kn->data(), n, k);
      SPILLWAY_CHECK_LAUNCH();
      s.synchronize();
    }
    return b_kn->data();
  }
};

std::string shape_name(index_t m, index_t n, index_t k) {
  return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
}

// The resident operands and their key (storage type and shape), shared by every type: f32 and
// tf32 rows read the same buffers.
struct operands_slot {
  std::unique_ptr<operands_base> current;
  std::string key;
};
operands_slot& resident() {
  static operands_slot slot;
  return slot;
}

template <dtype D>
auto& get_operands(index_t m, index_t n, index_t k) {
  using ops = operands<typename traits<D>::T, typename traits<D>::TC>;
  operands_slot& slot = resident();
  const std::string key = std::string(traits<D>::storage) + " " + shape_name(m, n, k);
  if (!slot.current || key != slot.key) {
    slot.current.reset();  // free the previous shape first
    slot.key.clear();
    // Fixed per storage type and shape (FNV-1a of the key: the same on every run and machine).
    std::uint64_t seed = 0xcbf29ce484222325ull;
    for (const char ch : key) seed = (seed ^ static_cast<unsigned char>(ch)) * 0x100000001b3ull;
    slot.current = std::make_unique<ops>(m, n, k, seed, bench_stream());
    slot.key = key;
  }
  return static_cast<ops&>(*slot.current);
}

// Checks the sampled entries of C. Returns "" when all lie within their bounds, else the first
// mismatch; `worst` gets the largest error/bound ratio seen (0 for exact types that match).
template <dtype D, class T, class TC>
std::string check_output(const operands<T, TC>& op, double& worst) {
  worst = 0;
  for (const sample& q : op.samples) {
    TC got_raw;
    SPILLWAY_CUDA_TRY(cudaMemcpy(&got_raw, op.c.data() + q.i * op.n + q.j, sizeof(TC), cudaMemcpyDeviceToHost));
    const std::complex<double> got = to_host_value(got_raw);
    const double err = std::abs(got - q.ref);
    const double bound = error_bound<D>(op.k, q.mag, std::abs(q.ref));
    if (!(err <= bound)) {  // NaN (unwritten poison) fails too
      char msg[256];
      std::snprintf(msg, sizeof msg, "result mismatch at C(%lld, %lld): got %.9g%+.9gi, host reference %.9g%+.9gi, bound %.3g",
                    static_cast<long long>(q.i), static_cast<long long>(q.j), got.real(), got.imag(), q.ref.real(),
                    q.ref.imag(), bound);
      return msg;
    }
    if (bound > 0) worst = std::max(worst, err / bound);
  }
  return {};
}

// ---------------------------------------------------------------------------------------------
// Baselines

// Created after the first GPU check, destroyed in main() before the runtime tears down.
struct blas_handles {
  cublasHandle_t blas = nullptr;
  cublasLtHandle_t lt = nullptr;
  spillway::device_buffer<unsigned char> lt_workspace;
  static constexpr std::size_t lt_workspace_bytes = 32ull << 20;
  blas_handles() : lt_workspace(lt_workspace_bytes, bench_stream()) {
    GEMM_BENCH_CUBLAS(cublasCreate(&blas));
    GEMM_BENCH_CUBLAS(cublasSetStream(blas, bench_stream().value()));
    // FP32 stays FP32: TF32 only where a row asks for it through its compute type.
    GEMM_BENCH_CUBLAS(cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH));
    GEMM_BENCH_CUBLAS(cublasLtCreate(&lt));
  }
  ~blas_handles() {
    if (lt) cublasLtDestroy(lt);
    if (blas) cublasDestroy(blas);
  }
  blas_handles(const blas_handles&) = delete;
  blas_handles& operator=(const blas_handles&) = delete;
};

std::unique_ptr<blas_handles>& handles_slot() {
  static std::unique_ptr<blas_handles> h;
  return h;
}
blas_handles& handles() {
  auto& h = handles_slot();
  if (!h) h = std::make_unique<blas_handles>();
  return *h;
}

// A cuBLASLt matmul in the TN form every narrow type requires: column-major A' = B_nk's buffer
// (k x n, ld k) with op T, B' = A's buffer (k x m, ld k) with op N, C' = Cᵀ (n x m, ld n).
//   int8 -> int32: compute 32I, scale type 32I.
//   FP8 e4m3 -> bf16: compute 32F, scale type 32F, the A and B scales as device floats (1.0:
//   spillway folds its scales into alpha) 16 bytes apart (cublasLtMatmul refuses, with
//   CUBLAS_STATUS_NOT_SUPPORTED, a scale pointer that is not 16-byte aligned: H200, cuBLAS 13,
//   2026-11-29), CUBLASLT_MATMUL_DESC_FAST_ACCUM as asked.
struct cublaslt_tn {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo{};
  std::unique_ptr<spillway::device_buffer<float>> scales;

  struct fp8_setup {
    bool fast = false;
  };

  cublaslt_tn(index_t m, index_t n, index_t k, cublasComputeType_t compute, cudaDataType_t scale,
              cudaDataType_t ab, cudaDataType_t c, const fp8_setup* fp8 = nullptr) {
    blas_handles& h = handles();
    GEMM_BENCH_CUBLAS(cublasLtMatmulDescCreate(&op, compute, scale));
    const cublasOperation_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N;
    GEMM_BENCH_CUBLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
    GEMM_BENCH_CUBLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof nn));
    if (fp8 != nullptr) {
      scales = std::make_unique<spillway::device_buffer<float>>(8, bench_stream());
      const float ones[8] = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
      SPILLWAY_CUDA_TRY(cudaMemcpy(scales->data(), ones, sizeof ones, cudaMemcpyHostToDevice));
      const std::int8_t fast_accum = fp8->fast ? 1 : 0;
      GEMM_BENCH_CUBLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accum,
                                                       sizeof fast_accum));
      const float* sa = scales->data();
      const float* sb = scales->data() + 4;
      GEMM_BENCH_CUBLAS(
          cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa));
      GEMM_BENCH_CUBLAS(
          cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb));
    }
    const auto u = [](index_t x) { return static_cast<std::uint64_t>(x); };
    GEMM_BENCH_CUBLAS(cublasLtMatrixLayoutCreate(&la, ab, u(k), u(n), k));
    GEMM_BENCH_CUBLAS(cublasLtMatrixLayoutCreate(&lb, ab, u(k), u(m), k));
    GEMM_BENCH_CUBLAS(cublasLtMatrixLayoutCreate(&lc, c, u(n), u(m), n));
    cublasLtMatmulPreference_t pref = nullptr;
    GEMM_BENCH_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
    std::size_t ws = blas_handles::lt_workspace_bytes;
    const cublasStatus_t st =
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t st2 =
        st == CUBLAS_STATUS_SUCCESS
            ? cublasLtMatmulAlgoGetHeuristic(h.lt, op, la, lb, lc, lc, pref, 1, &result, &found)
            : st;
    cublasLtMatmulPreferenceDestroy(pref);
    GEMM_BENCH_CUBLAS(st2);
    if (found == 0) throw std::runtime_error("cuBLASLt offers no algorithm for " + shape_name(m, n, k));
    algo = result.algo;
  }
  ~cublaslt_tn() {
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (op) cublasLtMatmulDescDestroy(op);
  }
  cublaslt_tn(const cublaslt_tn&) = delete;
  cublaslt_tn& operator=(const cublaslt_tn&) = delete;

  /// The matmul on `s`: C = alpha·op(B_nk)·A (alpha, beta of the scale type).
  template <class S>
  void run(stream_view s, S alpha, S beta, const void* a, const void* b, void* c) const {
    blas_handles& hs = handles();
    GEMM_BENCH_CUBLAS(cublasLtMatmul(hs.lt, op, &alpha, b, la, a, lb, &beta, c, lc, c, lc, &algo,
                                     hs.lt_workspace.data(), blas_handles::lt_workspace_bytes, s.value()));
  }
};

using work_fn = std::function<void(stream_view)>;

// The baseline GEMM of type D on `op`'s buffers (C^T = B_nk·Aᵀ in column-major terms, see top).
template <dtype D, class Ops>
work_fn make_baseline(Ops& op) {
  cublasHandle_t h = handles().blas;
  const int m = static_cast<int>(op.m), n = static_cast<int>(op.n), k = static_cast<int>(op.k);
  auto* A = op.a.data();
  auto* B = op.b.data();
  auto* C = op.c.data();
  if constexpr (D == dtype::f32) {
    return [=](stream_view) {
      const float alpha = 1.0f, beta = 0.0f;
      GEMM_BENCH_CUBLAS(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, B, k, A, k, &beta, C, n));
    };
  } else if constexpr (D == dtype::tf32) {
    return [=](stream_view) {
      const float alpha = 1.0f, beta = 0.0f;
      GEMM_BENCH_CUBLAS(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, B, CUDA_R_32F, k, A, CUDA_R_32F, k,
                                     &beta, C, CUDA_R_32F, n, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
    };
  } else if constexpr (D == dtype::f64) {
    return [=](stream_view) {
      const double alpha = 1.0, beta = 0.0;
      GEMM_BENCH_CUBLAS(cublasDgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, B, k, A, k, &beta, C, n));
    };
  } else if constexpr (D == dtype::c32) {
    static_assert(sizeof(cfloat) == sizeof(cuComplex) && alignof(cfloat) == alignof(cuComplex));
    return [=](stream_view) {
      const cuComplex alpha = make_cuComplex(1.0f, 0.0f), beta = make_cuComplex(0.0f, 0.0f);
      GEMM_BENCH_CUBLAS(cublasCgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, reinterpret_cast<const cuComplex*>(B), k,
                                    reinterpret_cast<const cuComplex*>(A), k, &beta, reinterpret_cast<cuComplex*>(C), n));
    };
  } else if constexpr (D == dtype::bf16 || D == dtype::f16) {
    constexpr cudaDataType_t t = D == dtype::bf16 ? CUDA_R_16BF : CUDA_R_16F;
    return [=](stream_view) {
      const float alpha = 1.0f, beta = 0.0f;
      GEMM_BENCH_CUBLAS(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, B, t, k, A, t, k, &beta, C, t, n,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
  } else if constexpr (D == dtype::e4m3 || D == dtype::e4m3f) {
    const cublaslt_tn::fp8_setup fp8{traits<D>::fast};
    auto lt = std::make_shared<cublaslt_tn>(op.m, op.n, op.k, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_8F_E4M3,
                                            CUDA_R_16BF, &fp8);
    return [lt, A, B, C](stream_view s) { lt->run(s, 1.0f, 0.0f, A, B, C); };
  } else {
    static_assert(D == dtype::s8);
    auto lt = std::make_shared<cublaslt_tn>(op.m, op.n, op.k, CUBLAS_COMPUTE_32I, CUDA_R_32I, CUDA_R_8I,
                                            CUDA_R_32I);
    return [lt, A, B, C](stream_view s) { lt->run(s, std::int32_t{1}, std::int32_t{0}, A, B, C); };
  }
}

// The options a type's rows run spillway with: TF32 math, FP8's accumulation mode.
template <dtype D>
void set_type_options(gemm::gemm_options& opt) {
  if (D == dtype::tf32) opt.math = gemm::math_mode::tf32;
  if (D == dtype::e4m3f) opt.fp8_accumulate = gemm::fp8_accumulation::fast;
}

// spillway's GEMM of type D under `opt` on `op`'s buffers (C = A·Bᵀ, see top).
template <dtype D, class Ops>
work_fn make_spillway(Ops& op, const gemm::gemm_options& opt) {
  using S = typename traits<D>::S;
  const auto av = gemm::row_major(op.a.data(), op.m, op.k);
  const auto bv = gemm::row_major(op.b.data(), op.n, op.k).t();
  const auto cv = gemm::row_major(op.c.data(), op.m, op.n);
  return [=](stream_view st) { gemm::gemm_async(st, S(1), av, bv, S(0), cv, opt); };
}

// Baseline iteration times (ms) per (type, shape), over every repetition of the baseline row.
std::map<std::string, std::vector<double>>& baseline_samples() {
  static std::map<std::string, std::vector<double>> m;
  return m;
}

// The baseline's median for a spillway row: from its own row when that ran earlier in this
// process, else timed here (a filter left its row out).
template <dtype D, class Ops>
double baseline_median(Ops& op) {
  const std::string key = std::string(traits<D>::name) + " " + shape_name(op.m, op.n, op.k);
  auto& v = baseline_samples()[key];
  if (v.empty()) {
    work_fn w = make_baseline<D>(op);
    v = spillway::time_on_stream(bench_stream(), w, 2, 10);
  }
  return spillway::median(v);
}

// ---------------------------------------------------------------------------------------------
// Rows

enum class route { baseline, naive16, automatic, simt, mma_sync, wgmma };

gemm::gemm_path to_path(route r) {
  switch (r) {
    case route::simt: return gemm::gemm_path::simt;
    case route::mma_sync: return gemm::gemm_path::mma_sync;
    case route::wgmma: return gemm::gemm_path::wgmma;
    default: return gemm::gemm_path::automatic;
  }
}

template <dtype D>
std::string route_name(route r) {
  switch (r) {
    case route::baseline: return traits<D>::baseline;
    case route::naive16: return "guide16x16";
    case route::automatic: return "spillway_auto";
    case route::simt: return "spillway_simt";
    case route::mma_sync: return "spillway_mma_sync";
    case route::wgmma: return "spillway_wgmma";
  }
  return "?";
}

template <dtype D>
void bm_row(benchmark::State& state, route r, index_t m, index_t n, index_t k) {
  using tr = traits<D>;
  using T = typename tr::T;
  if (spillway::bench::skip_without_gpu(state)) return;
  try {
    auto& op = get_operands<D>(m, n, k);
    stream_view s = bench_stream();
    std::string label;
    work_fn work;
    double base_ms = 0;
    if (r == route::baseline) {
      work = make_baseline<D>(op);
    } else if (r == route::naive16) {
      if constexpr (std::is_same_v<T, float>) {
        if (m % guide::block_size || n % guide::block_size || k % guide::block_size || m * k >= (index_t{1} << 31) ||
            n * k >= (index_t{1} << 31) || m * n >= (index_t{1} << 31)) {
          state.SkipWithError("the guide's kernel needs multiples of 16 and int offsets");
          return;
        }
        const guide::matrix a{static_cast<int>(k), static_cast<int>(m), static_cast<int>(k), op.a.data()};
        const guide::matrix b{static_cast<int>(n), static_cast<int>(k), static_cast<int>(n), op.guide_b()};
        const guide::matrix c{static_cast<int>(n), static_cast<int>(m), static_cast<int>(n), op.c.data()};
        const dim3 block(guide::block_size, guide::block_size);
        const dim3 grid(static_cast<unsigned>(n / guide::block_size), static_cast<unsigned>(m / guide::block_size));
        work = [=](stream_view st) {
          guide::matmul<<<grid, block, 0, st.value()>>>(a, b, c);
          SPILLWAY_CHECK_LAUNCH();
        };
      }
      if (!work) {
        state.SkipWithError("the guide's kernel is a float kernel");
        return;
      }
      base_ms = baseline_median<D>(op);
    } else {
      gemm::gemm_options opt;
      opt.path = to_path(r);
      set_type_options<D>(opt);
      gemm::gemm_path resolved;
      try {
        resolved = gemm::resolve_path<T>(opt, spillway::current_device());
      } catch (const std::exception& e) {
        state.SkipWithError(e.what());
        return;
      }
      if (opt.path != gemm::gemm_path::automatic && resolved != opt.path) {
        state.SkipWithError((std::string("resolve_path turned forced ") + gemm::to_string(opt.path) + " into " +
                             gemm::to_string(resolved))
                                .c_str());
        return;
      }
      label = std::string("path=") + gemm::to_string(resolved);
      try {
        base_ms = baseline_median<D>(op);
      } catch (const std::exception& e) {  // spillway's row still runs: no vs_cublas
        label += std::string(", baseline failed: ") + e.what();
      }
      work = make_spillway<D>(op, opt);
    }

    // First run on a poisoned C, checked against the host reference before any timing.
    op.c.fill_bytes_async(0xFF, s);
    work(s);
    s.synchronize();
    double worst = 0;
    const std::string bad = check_output<D>(op, worst);
    if (!bad.empty()) {
      state.SkipWithError((route_name<D>(r) + ": " + bad).c_str());
      return;
    }

    const std::vector<double> ms = spillway::bench::run_timed(state, s, work);
    const double med = spillway::median(ms);
    const double ops = tr::ops_per_mac * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    state.counters["TFLOP/s"] = ops / (med * 1e-3) / 1e12;
    state.counters["median_ms"] = med;
    if (r == route::baseline) {
      auto& v = baseline_samples()[std::string(tr::name) + " " + shape_name(m, n, k)];
      v.insert(v.end(), ms.begin(), ms.end());
    } else if (base_ms > 0) {
      state.counters["vs_cublas"] = base_ms / med;
    }
    char chk[64];
    std::snprintf(chk, sizeof chk, "check: 32 entries, worst err/bound %.2g", worst);
    state.SetLabel(label.empty() ? chk : label + ", " + chk);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// Fixed iteration counts sized from the expected time (the cuBLAS figure of the type), so each
// repetition of a row takes ~150 ms of GEMMs when spillway is at cuBLAS speed.
int iterations_for(double ops, double rate_tflops) {
  const double ms = ops / (rate_tflops * 1e12) * 1e3;
  return static_cast<int>(std::clamp(150.0 / ms, 3.0, 300.0));
}

template <dtype D>
void add_row(route r, index_t m, index_t n, index_t k) {
  const std::string name = std::string("gemm/") + traits<D>::name + "/" + route_name<D>(r) + "/" + shape_name(m, n, k);
  const double ops = traits<D>::ops_per_mac * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const double rate = r == route::naive16 ? 6.95 : traits<D>::ref_rate;
  benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) { bm_row<D>(st, r, m, n, k); })
      ->UseManualTime()
      ->Iterations(iterations_for(ops, rate))
      ->Unit(benchmark::kMillisecond);
}

void register_rows() {
  const index_t square[] = {4096, 8192};
  for (const index_t s : square) {
    // Per shape: each type's baseline first (the vs_cublas ratios read it), then spillway.
    add_row<dtype::f32>(route::baseline, s, s, s);
    add_row<dtype::f32>(route::automatic, s, s, s);
    add_row<dtype::f32>(route::simt, s, s, s);
    constexpr route tensor_routes[] = {route::baseline, route::automatic, route::wgmma, route::mma_sync};
    for (const route r : tensor_routes) add_row<dtype::tf32>(r, s, s, s);
    for (const route r : tensor_routes) add_row<dtype::bf16>(r, s, s, s);
    for (const route r : tensor_routes) add_row<dtype::f16>(r, s, s, s);
    for (const route r : tensor_routes) add_row<dtype::s8>(r, s, s, s);
    for (const route r : {route::baseline, route::automatic}) add_row<dtype::e4m3>(r, s, s, s);
    for (const route r : {route::baseline, route::automatic}) add_row<dtype::e4m3f>(r, s, s, s);
    add_row<dtype::f64>(route::baseline, s, s, s);
    add_row<dtype::f64>(route::automatic, s, s, s);
    add_row<dtype::f64>(route::mma_sync, s, s, s);
    // FP64 on the CUDA cores (half the DMMA peak): a cross-check of the DMMA path, at 4096³ only.
    if (s == 4096) add_row<dtype::f64>(route::simt, s, s, s);
    add_row<dtype::c32>(route::baseline, s, s, s);
    add_row<dtype::c32>(route::automatic, s, s, s);
    add_row<dtype::c32>(route::simt, s, s, s);
  }
  // Skinny float shapes, where split-K must fill the GPU.
  const std::tuple<index_t, index_t, index_t> skinny[] = {{8192, 8192, 256}, {64, 8192, 8192}};
  for (const auto& [m, n, k] : skinny) {
    for (const route r : {route::baseline, route::automatic, route::simt}) add_row<dtype::f32>(r, m, n, k);
  }
  // The guide's kernel last: 160 ms per GEMM at 8192³ of full power, kept away from the others.
  for (const index_t s : square) add_row<dtype::f32>(route::naive16, s, s, s);
}

// ---------------------------------------------------------------------------------------------
// Alternated pairs (--alternations=N): spillway's automatic path and the type's cuBLAS(Lt) route,
// timed turn about N times (ABBA order, so a drift of the clocks weighs on both alike), each turn
// the median of its iterations after one warm-up launch; then the medians of both, the median and
// the spread of the per-pair ratios, and the SM clock, board power and temperature read after each
// pair (NVML, where the driver has it). Both outputs are checked first, as the rows check theirs.

struct pair_stats {
  double median, lo, hi;
};

pair_stats stats_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {spillway::median(v), v.front(), v.back()};
}

template <dtype D>
void alternate(index_t m, index_t n, index_t k, int pairs, const spillway::bench::gpu_sensors& sensors) {
  using tr = traits<D>;
  using T = typename tr::T;
  auto& op = get_operands<D>(m, n, k);
  stream_view s = bench_stream();
  gemm::gemm_options opt;
  set_type_options<D>(opt);
  const gemm::gemm_path path = gemm::resolve_path<T>(opt, spillway::current_device());
  work_fn ours = make_spillway<D>(op, opt);
  work_fn base = make_baseline<D>(op);
  for (work_fn* w : {&ours, &base}) {
    op.c.fill_bytes_async(0xFF, s);
    (*w)(s);
    s.synchronize();
    double worst = 0;
    const std::string bad = check_output<D>(op, worst);
    if (!bad.empty()) {
      std::printf("%-5s %s: %s: %s\n", tr::name, shape_name(m, n, k).c_str(), w == &ours ? "spillway" : tr::baseline,
                  bad.c_str());
      return;
    }
  }
  const double ops = tr::ops_per_mac * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const int iters = std::clamp(static_cast<int>(60.0 / (ops / (tr::ref_rate * 1e12) * 1e3)), 3, 100);
  const auto turn = [&](work_fn& w) { return spillway::median(spillway::time_on_stream(s, w, 1, iters)); };
  std::vector<double> ts, tb, ratio, clock, power, temp;
  for (int i = 0; i < pairs; ++i) {
    double a = 0, b = 0;
    if (i % 2 == 0) {
      a = turn(ours);
      b = turn(base);
    } else {
      b = turn(base);
      a = turn(ours);
    }
    const auto r = sensors.read();
    ts.push_back(a);
    tb.push_back(b);
    ratio.push_back(b / a);
    clock.push_back(r.sm_clock_mhz);
    power.push_back(r.power_w);
    temp.push_back(r.temperature_c);
  }
  const pair_stats sa = stats_of(ts), sb = stats_of(tb), q = stats_of(ratio), c = stats_of(clock), pw = stats_of(power),
                   tc = stats_of(temp);
  const double rate = ops / (sa.median * 1e-3) / 1e12, base_rate = ops / (sb.median * 1e-3) / 1e12;
  std::printf("%-5s %-15s %-9s %8.3f ms [%7.3f, %7.3f] %7.1f T | %-13s %8.3f ms [%7.3f, %7.3f] %7.1f T | ratio %.3f "
              "[%.3f, %.3f] | SM %4.0f MHz [%4.0f, %4.0f] %3.0f W [%3.0f, %3.0f] %2.0f C\n",
              tr::name, shape_name(m, n, k).c_str(), gemm::to_string(path), sa.median, sa.lo, sa.hi, rate, tr::baseline,
              sb.median, sb.lo, sb.hi, base_rate, q.median, q.lo, q.hi, c.median, c.lo, c.hi, pw.median, pw.lo, pw.hi,
              tc.median);
  std::fflush(stdout);
}

/// --alternations=N [--alternation_size=S] [--alternation_types=a,b]: the listed types (default all)
/// at S³ (default 8192), N pairs each.
void run_alternations(int pairs, index_t size, const std::string& types) {
  const spillway::bench::gpu_sensors sensors(spillway::current_device());
  std::printf("alternated pairs: %d per type, %lld^3, spillway automatic against cuBLAS(Lt); medians [min, max] of "
              "each turn's median; ratio = cuBLAS time / spillway time per pair; NVML %s\n",
              pairs, static_cast<long long>(size), sensors.available() ? "read after each pair" : "not available");
  const auto wanted = [&](const char* name) {
    return types.empty() || ("," + types + ",").find(std::string(",") + name + ",") != std::string::npos;
  };
  const auto one = [&](auto tag) {
    constexpr dtype D = decltype(tag)::value;
    if (wanted(traits<D>::name)) alternate<D>(size, size, size, pairs, sensors);
  };
  one(std::integral_constant<dtype, dtype::bf16>{});
  one(std::integral_constant<dtype, dtype::f16>{});
  one(std::integral_constant<dtype, dtype::s8>{});
  one(std::integral_constant<dtype, dtype::e4m3>{});
  one(std::integral_constant<dtype, dtype::e4m3f>{});
  one(std::integral_constant<dtype, dtype::tf32>{});
  one(std::integral_constant<dtype, dtype::f32>{});
  one(std::integral_constant<dtype, dtype::f64>{});
  one(std::integral_constant<dtype, dtype::c32>{});
}

/// Takes `--name=value` (a string) out of argv; `fallback` when absent.
std::string take_string_flag(int& argc, char** argv, const char* name, const std::string& fallback) {
  const std::string prefix = std::string("--") + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]).rfind(prefix, 0) == 0) {
      const std::string v = argv[i] + prefix.size();
      for (int j = i; j + 1 < argc; ++j) argv[j] = argv[j + 1];
      --argc;
      return v;
    }
  }
  return fallback;
}

/// Takes `--name=value` (a number) out of argv (Google Benchmark refuses flags it does not know).
long long take_flag(int& argc, char** argv, const char* name, long long fallback) {
  const std::string v = take_string_flag(argc, argv, name, "");
  return v.empty() ? fallback : std::stoll(v);
}

}  // namespace

int main(int argc, char** argv) {
  const long long pairs = take_flag(argc, argv, "alternations", 0);
  const long long size = take_flag(argc, argv, "alternation_size", 8192);
  const std::string types = take_string_flag(argc, argv, "alternation_types", "");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (pairs > 0) {
    if (spillway::device_count() == 0) {
      std::printf("--alternations: no GPU (%s)\n", spillway::no_gpu_reason().c_str());
      return 1;
    }
    run_alternations(static_cast<int>(pairs), static_cast<index_t>(size), types);
    resident().current.reset();
    handles_slot().reset();
    return 0;
  }
  register_rows();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  // Device memory and cuBLAS handles go while the stream and the runtime still exist (function
  // statics would be torn down in the reverse order of their first use).
  resident().current.reset();
  handles_slot().reset();
  return 0;
}
