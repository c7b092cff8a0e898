// python/src/jobs.hpp — the seam between the nanobind module (module.cpp, a plain C++ file) and
// the CUDA translation unit that instantiates spillway's templates (jobs.cu). Only host types
// cross it, so nanobind's headers never go through nvcc and the kernels are compiled once, for
// exactly what the binding exposes (int32 and float32 outputs).
#pragma once

#include <spillway/gram/bit_matrix.hpp>
#include <spillway/gram/epilogue.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace spillway::python {

enum class sink { full, triangle, condensed, topk, threshold };

/// Memory handed to Python without a copy: `data` stays valid while the holder lives.
struct owned_buffer {
  std::shared_ptr<void> holder;
  void* data = nullptr;
  std::size_t count = 0;  ///< elements
};

/// What a job reports back (a subset of spillway::job_report, plus the host/GPU choice).
struct job_summary {
  bool on_host = false;
  bool cancelled = false;
  std::size_t tasks_total = 0;
  std::size_t tasks_completed = 0;
  std::vector<bool> completed;
  std::vector<int> devices;
  std::vector<std::size_t> tasks_per_device;
  std::vector<std::size_t> bytes_per_device;
  double elapsed_seconds = 0;
  std::size_t bytes_moved = 0;
};

/// Progress as the worker thread sees it; the waiting thread reads it and may ask to cancel.
struct job_progress {
  std::atomic<std::size_t> done{0};
  std::atomic<std::size_t> total{0};
  std::atomic<bool> cancel{false};
  /// Wakes the waiting thread (set by it before the job starts).
  std::function<void()> changed;

  void update(std::size_t d, std::size_t t) {
    total = t;
    done = d;
    if (changed) changed();
  }
};

struct gram_request {
  gram::metric metric = gram::metric::counts;
  sink kind = sink::full;
  bool float_values = false;  ///< float32 (jaccard, cosine) instead of int32 (counts, hamming)
  int k = 8;
  double threshold = 0;
  bool include_diagonal = false;
  bool both_halves = false;
  gram::score_options scores{};
  std::size_t budget_bytes = 0;  ///< 0: spillway's default (80% of free memory)
  std::vector<int> devices;
  bool host_fallback = false;    ///< with no GPU: run the host implementation in row blocks
  std::int64_t max_panel_rows = 0;
  std::int64_t host_block_rows = 0;  ///< 0: automatic
  /// threshold: the entries as CSR (on the GPU straight from gram_threshold_csr; on the host
  /// pairwise::to_csr of the COO)
  bool csr = false;
};

struct gram_result {
  job_summary summary;
  owned_buffer values;   ///< dense: the layout's elements; top-k: rows x k; threshold: nnz
  owned_buffer indices;  ///< top-k: rows x k int64
  owned_buffer rows, cols;  ///< threshold: int64 each
  bool indptr = false;      ///< threshold: `rows` is the CSR's indptr (rows + 1), not each entry's row
};

/// A·Aᵀ (b null) or A·Bᵀ of host bit matrices, on the GPUs (out of core) or, with no GPU and
/// host_fallback, on the host in row blocks. Runs on the calling thread; `p` is updated as tasks
/// complete and polled for cancellation.
gram_result run_gram(const gram::bit_matrix_view& a, const gram::bit_matrix_view* b, const gram_request& r,
                     job_progress& p);

/// Device input: row-major 0/1 bytes in device memory.
struct device_matrix {
  std::uintptr_t ptr = 0;
  std::int64_t rows = 0, cols = 0, ld = 0;
  char dtype = 'u';  ///< 'u' uint8, 'i' int8, 'b' bool
};

/// In core on `device`, enqueued on `stream` (0 means the legacy default stream): packs A (and B)
/// on the device and writes the dense result to `out` (device memory of layout_size or
/// a.rows x b.rows elements, int32 or float32). Checks 0/1 values (synchronizing `stream` once)
/// unless nonzero_as_one. Returns without waiting for the product.
void gram_device_dense(const device_matrix& a, const device_matrix* b, std::uintptr_t out, const gram_request& r,
                       int device, std::uintptr_t stream, bool nonzero_as_one);

/// Packs device 0/1 bytes on the device and copies the bits to pinned host memory (for the
/// top-k and threshold sinks of device input, which run as host-input jobs).
gram::bit_matrix pack_device_to_host(const device_matrix& a, int device, std::uintptr_t stream, bool nonzero_as_one);

/// Makes `consumer` wait for the work enqueued so far on `producer` (an event, no host block):
/// __cuda_array_interface__ v3's stream contract. 0 is the legacy default stream.
void stream_wait(std::uintptr_t producer, std::uintptr_t consumer, int device);

/// Synchronizes a stream (0: legacy default) on `device`.
void stream_synchronize(std::uintptr_t stream, int device);

/// The device that owns a device pointer (-1 for host memory).
int pointer_device(std::uintptr_t ptr);

/// Pinned (page-locked) host memory, or pageable when pinning fails (no GPU).
gram::bit_matrix make_bit_matrix(std::int64_t rows, std::int64_t cols, bool pinned);

// ---- RK4 (jobs_ode.cu) -------------------------------------------------------------------------

/// The Lorenz ensemble: n systems, sigma and beta fixed, rho spread over [rho_lo, rho_hi].
struct lorenz_request {
  std::uint64_t n = 0, steps = 0, save_every = 0;
  double t0 = 0, dt = 0, sigma = 10, beta = 8.0 / 3.0, rho_lo = 20, rho_hi = 30;
  bool dbl = true;  ///< float64 (else float32) state
};

/// In place on device memory (`state`: 3 x n structure of arrays; `saved`: 0 or
/// (steps / save_every) x 3 x n), enqueued on `stream` (0: the legacy default stream).
void lorenz_device(const lorenz_request& r, std::uintptr_t state, std::uintptr_t saved, int device, std::uintptr_t stream);
/// Host arrays: copied to `device` and back (pinned staging is the caller's business), or the
/// host implementation when `on_host`.
void lorenz_host(const lorenz_request& r, void* state, void* saved, bool on_host, int device);

/// The Lorenz ensemble by adaptive Dormand–Prince 5(4) (spillway::ode::dopri5_ensemble): t0 → t1,
/// the step control of spillway::ode::adaptive_options (fields below, same names; `pi_beta` is
/// its `beta`), dense output at the m save times (host memory, the state's type).
struct dopri5_request {
  std::uint64_t n = 0, m = 0, max_steps = 100000;
  double t0 = 0, t1 = 1, sigma = 10, beta = 8.0 / 3.0, rho_lo = 20, rho_hi = 30;
  double rtol = 1e-6, atol = 1e-6, h0 = 0, h_min = 0, h_max = 0, fixed_dt = 0;
  double safety = 0.9, fac_min = 0.2, fac_max = 10, pi_beta = 0.04;
  int estimate = 0;  ///< spillway::ode::dp5_error_estimate (0 dormand_prince, 1 shampine)
  bool dbl = true;  ///< float64 (else float32) state and save times
};
/// Device arrays (`state` 3 x n; `saved` 0 or m x 3 x n; `accepted`, `rejected` uint32 n;
/// `status` uint8 n), enqueued on `stream`; with save times the call waits for `stream` once (the
/// times' check). Host arrays: copied to `device` and back, or the host implementation.
void dopri5_lorenz_device(const dopri5_request& r, std::uintptr_t state, const void* save_times, std::uintptr_t saved,
                          std::uintptr_t accepted, std::uintptr_t rejected, std::uintptr_t status, int device,
                          std::uintptr_t stream);
void dopri5_lorenz_host(const dopri5_request& r, void* state, const void* save_times, void* saved, void* accepted,
                        void* rejected, void* status, bool on_host, int device);

/// The mean-field two-field system (complex64 F and G of n elements), delta <- scale * sum(F)
/// after every step; `trajectory` receives steps + 1 complex64 deltas.
struct mean_field_request {
  std::uint64_t n = 0, steps = 0;
  double t0 = 0, dt = 0, scale = 1;
  float delta_re = 1, delta_im = 0;
};
void mean_field_device(const mean_field_request& r, std::uintptr_t f, std::uintptr_t g, std::uintptr_t trajectory,
                       int device, std::uintptr_t stream);
void mean_field_host(const mean_field_request& r, void* f, void* g, void* trajectory, bool on_host, int device);

/// The mean-field system by adaptive Dormand–Prince 5(4) (spillway::ode::dopri5_integrate_coupled):
/// `control` gives n, t0, t1 and the step control (its Lorenz fields unused); delta <- scale *
/// sum(F) after every accepted step; `capacity` observer entries (times float64, deltas complex64).
struct mean_field_dopri5_request {
  dopri5_request control;
  std::uint64_t capacity = 0;
  double scale = 1;
  float delta_re = 1, delta_im = 0;
};
/// What a coupled integration did (spillway::ode::coupled_stats).
struct coupled_result {
  std::uint64_t accepted = 0, rejected = 0;
  int status = 0;
  double t = 0, h = 0;
};
/// Device arrays (F, G: complex64 n, advanced in place; times, deltas: capacity entries, may be 0),
/// enqueued on `stream`; the call waits for `stream` once at the end, for the statistics. Host
/// arrays: copied to `device` and back, or the host implementation when `on_host`.
coupled_result mean_field_dopri5_device(const mean_field_dopri5_request& r, std::uintptr_t f, std::uintptr_t g,
                                        std::uintptr_t times, std::uintptr_t deltas, int device, std::uintptr_t stream);
coupled_result mean_field_dopri5_host(const mean_field_dopri5_request& r, void* f, void* g, void* times, void* deltas,
                                      bool on_host, int device);

// ---- matmul (jobs_gemm.cu) ---------------------------------------------------------------------

/// A host matrix as the binding hands it over: row-major (element (i, j) at data[i·ld + j]) or
/// column-major (data[i + j·ld]).
struct host_matrix {
  void* data = nullptr;
  std::int64_t rows = 0, cols = 0, ld = 0;
  bool row_major = true;
};

struct matmul_request {
  /// The inputs' element type: 'f' float32 (C float32), 'd' float64 (C float64), 'h' float16
  /// (C float32), 'B' bf16 (C float32), 'c' complex64 (C complex64), 'b' int8 (C int32), 'e' FP8
  /// e4m3 and 'E' FP8 e5m2 (C float32): gemm/types.hpp's codes.
  char dtype = 'f';
  bool tf32 = false;  ///< float32 on the TF32 tensor cores (else exact FP32)
  float scale_a = 1, scale_b = 1;  ///< FP8 only: per-tensor scales (gemm_options::scale_a / scale_b)
  bool fp8_fast = false;           ///< FP8 only: fp8_accumulation::fast (else promoted)
  double alpha = 1, beta = 0;
  std::size_t budget_bytes = 0;  ///< 0: spillway's default (80% of free memory)
  std::vector<int> devices;
  bool host_fallback = false;  ///< with no GPU: the host GEMM, in row blocks
  /// Which of A (bit 0), B (bit 1) and C (bit 2) to page-lock (cudaHostRegister) for the job
  /// where they are not page-locked, so their blocks move by DMA; the others stay pageable
  /// (staged by host threads).
  unsigned register_mask = 7;
};

/// C = α·A·B + β·C of host matrices: gemm_out_of_core on the GPUs, or with no GPU and
/// host_fallback the host GEMM in row blocks (TF32 there is exact FP32). Runs on the calling
/// thread; `p` is updated as blocks complete and polled for cancellation.
job_summary run_matmul(const host_matrix& a, const host_matrix& b, const host_matrix& c, const matmul_request& r,
                       job_progress& p);

/// C = α·A·B + β·C of matrices in device memory of `device` (host_matrix's fields describe them),
/// enqueued on `stream` (0: the legacy default stream) with spillway's in-core GEMM; returns
/// without waiting. r.tf32, r.alpha, r.beta and r.dtype are read.
void run_matmul_device(const host_matrix& a, const host_matrix& b, const host_matrix& c, const matmul_request& r,
                       int device, std::uintptr_t stream);

// ---- similarity (jobs_similarity.cu) -------------------------------------------------------------

/// Row-major rows (element (i, j) at data[i·ld + j]) in host memory or in one device's memory.
struct rows_matrix {
  std::uintptr_t data = 0;
  std::int64_t rows = 0, cols = 0, ld = 0;
};

struct similarity_request {
  /// The rows' element type: 'f' float32, 'h' float16, 'b' bf16.
  char dtype = 'f';
  /// 'i' inner product, 'c' cosine, 'e' Euclidean distance.
  char metric = 'c';
  sink kind = sink::full;
  int k = 8;
  double threshold = 0;
  bool include_diagonal = false;
  bool both_halves = false;
  float cosine_zero = 0;
  bool tf32 = false;         ///< float32 rows on the TF32 tensor cores (else exact FP32)
  bool check_finite = true;  ///< refuse NaN / infinite rows, naming the first
  std::size_t budget_bytes = 0;  ///< 0: spillway's default (80% of free memory)
  std::vector<int> devices;
  bool host_fallback = false;  ///< with no GPU: the host implementation (double), in row blocks
  std::int64_t max_panel_rows = 0;
  std::int64_t host_block_rows = 0;  ///< 0: automatic
  /// Host rows not page-locked: page-lock them (cudaHostRegister) for the job where the GPU runs
  /// it, so their copies run by DMA; false copies them from pageable memory.
  bool register_host = true;
  bool csr = false;  ///< threshold: the entries as CSR (pairwise::to_csr of the COO)
  /// topk of A·Aᵀ: > 0 runs the binary-quantized approximate mode with this many sign-bit candidates a
  /// row (similarity_topk_binary; one GPU, cosine)
  int binary_candidates = 0;
};

/// Similarities of A·Aᵀ (b null) or A·Bᵀ, values float32: spillway::similarity::similarity_* on the GPUs
/// (host rows out of core; device rows in core on their device, after `stream` (0: legacy
/// default) is synchronized), or with no GPU and host_fallback the host implementation in row
/// blocks. Runs on the calling thread; `p` is updated as strips complete and polled for
/// cancellation.
gram_result run_similarity(const rows_matrix& a, const rows_matrix* b, const similarity_request& r, job_progress& p,
                           int device = -1, std::uintptr_t stream = 0);

/// The C++ side of the Python similarity benchmark: similarity_topk (cosine, diagonal excluded)
/// of host rows `a` under `budget` on `device`, called straight from C++ `reps` times after one
/// warm-up; the wall seconds of each call.
std::vector<double> bench_cpp_similarity_topk(const rows_matrix& a, char dtype, int k, std::size_t budget, int device,
                                              int reps);

/// The C++ side of the binding-overhead benchmark: gram_topk<int32> (counts, diagonal excluded)
/// of `a` on `device` under `budget`, called straight from C++ `reps` times after one warm-up;
/// the wall seconds of each call (the job is synchronous: it returns with the lists on the host).
std::vector<double> bench_cpp_topk(const gram::bit_matrix_view& a, int k, std::size_t budget, int device, int reps);

int device_count();
std::string no_gpu_reason();

}  // namespace spillway::python
