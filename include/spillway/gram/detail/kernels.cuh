// spillway/gram/detail/kernels.cuh — the dispatch of the bit-matrix product over the Gram tile
// kernels (each built on the tile engine, include/spillway/tile/):
//
//   kernel               file                      runs where (automatic)
//   wgmma                wgmma_kernel.cuh          kernel_path::wgmma: sm_90a code on cc 9.0
//   mma_sync_tma         mma_sync_tma_kernel.cuh   kernel_path::mma_sync where it fits: sm_90+ code,
//                                                  230,472 B of shared memory per block
//   mma_sync_cp_async    mma_sync_kernel.cuh       kernel_path::mma_sync elsewhere (sm_80 to sm_89)
//   popc                 kernel_popc.cuh           kernel_path::popc, and every path with no columns
//
// bit_gemm_async computes count(i, j) = popcount(row i of A & row j of B) for every output tile
// it visits and hands each count to an epilogue functor; the public Gram API composes its
// epilogues (raw counts, Jaccard, cosine, Hamming) and sinks on top of it. Tests and benchmarks
// force one kernel with bit_gemm_forced_async.
#pragma once

#include <spillway/core/enum_name.hpp>
#include <spillway/core/device.hpp>
#include <spillway/core/device_buffer.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/gram/detail/kernel_popc.cuh>
#include <spillway/gram/detail/mma_sync_kernel.cuh>
#include <spillway/gram/detail/mma_sync_tma_kernel.cuh>
#include <spillway/gram/detail/wgmma_kernel.cuh>
#include <spillway/gram/kernel_path.hpp>
#include <spillway/tile/arch.cuh>
#include <spillway/tile/schedule.cuh>
#include <spillway/tile/tensor_map.hpp>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <type_traits>

namespace spillway::gram::detail {

/// One bit-matrix product C = A·Bᵀ over panels of two bit matrices with the same word layout:
/// row-major, `ld_words` 32-bit words per row (a multiple of 32), padding bits zero, bit c of a
/// row is bit (c % 32) of word (c / 32); base pointers 128-byte aligned.
struct bit_gemm_args {
  const std::uint32_t* a = nullptr;
  std::int64_t a_rows = 0;  ///< panel of A: global rows [a_row0, a_row0 + a_rows)
  const std::uint32_t* b = nullptr;
  std::int64_t b_rows = 0;  ///< panel of B: global rows [b_row0, b_row0 + b_rows)
  std::int64_t ld_words = 0;
  std::int64_t a_row0 = 0, b_row0 = 0;
  /// A·Aᵀ: skip every tile whose global rows all exceed its global columns. Elements below the
  /// diagonal inside a tile that crosses it are still delivered; the epilogue decides.
  bool upper_only = false;
};

/// Writes C[(i - row0) * ldc + (j - col0)] = OutT(count); with upper_only, only where i <= j.
template <class OutT>
struct store_counts {
  OutT* c;
  std::int64_t ldc;
  std::int64_t row0, col0;
  bool upper_only;
  __device__ void operator()(std::int64_t i, std::int64_t j, std::int32_t count) const {
    if (upper_only && i > j) return;
    c[(i - row0) * ldc + (j - col0)] = static_cast<OutT>(count);
  }
};

/// Which kernels this build carries for the code the device actually runs (tile::feature_* bits).
inline int build_features(int device) { return ::spillway::tile::build_features(device); }

/// What `requested` runs as on `device`: automatic becomes wgmma on an sm_90a build running on
/// compute capability 9.0, else mma_sync from 8.0 up, else popc. A forced path the device or the
/// build cannot run throws logic_error naming the path and the device's compute capability.
inline kernel_path resolve_path(kernel_path requested, int device) {
  ::spillway::detail::check_device_ordinal(device, "gram::resolve_path");
  const bool known = requested == kernel_path::automatic || requested == kernel_path::wgmma ||
                     requested == kernel_path::mma_sync || requested == kernel_path::popc;
  if (!known) throw logic_error("gram: unknown kernel_path value " + std::to_string(static_cast<int>(requested)));
  const int cc = ::spillway::tile::compute_capability(device);
  const std::string where = ::spillway::tile::describe_device(device);
  // Only probe the build when a tensor-core path is in question (the probe launches a kernel).
  const int features = (requested == kernel_path::popc || cc < 80) ? 0 : build_features(device);
  kernel_path out = kernel_path::popc;
  if (resolve_kernel_path(requested, cc, (features & ::spillway::tile::feature_mma) != 0,
                          (features & ::spillway::tile::feature_wgmma) != 0, out)) {
    return out;
  }
  if (requested == kernel_path::mma_sync) {
    throw logic_error("gram: kernel_path mma_sync needs compute capability 8.0 or newer and a build with "
                      "sm_80+ code; " + where);
  }
  throw logic_error("gram: kernel_path wgmma needs a build with sm_90a code running on compute capability "
                    "9.0; " + where +
                    (cc == 90 ? " but this build carries no sm_90a code (build for CUDA architecture 90a)" : ""));
}

inline void check_bit_gemm_args(const bit_gemm_args& g) {
  auto fail = [](const std::string& m) { throw logic_error("gram::bit_gemm_async: " + m); };
  if (g.ld_words < 0 || g.ld_words % 32 != 0) {
    fail("ld_words must be a non-negative multiple of 32 (1024 bits per row block), got " +
         std::to_string(g.ld_words));
  }
  if (g.a_rows < 0) fail("a_rows must be >= 0, got " + std::to_string(g.a_rows));
  if (g.b_rows < 0) fail("b_rows must be >= 0, got " + std::to_string(g.b_rows));
  if (g.a_row0 < 0) fail("a_row0 must be >= 0, got " + std::to_string(g.a_row0));
  if (g.b_row0 < 0) fail("b_row0 must be >= 0, got " + std::to_string(g.b_row0));
  constexpr std::int64_t max_rows = std::numeric_limits<std::int32_t>::max() - 1024;
  if (g.a_rows > max_rows) fail("a_rows must be < 2^31 - 1024 per panel, got " + std::to_string(g.a_rows));
  if (g.b_rows > max_rows) fail("b_rows must be < 2^31 - 1024 per panel, got " + std::to_string(g.b_rows));
  if (g.ld_words > 0) {
    if (g.a_rows > 0 && g.a == nullptr) fail("a is null with a_rows = " + std::to_string(g.a_rows));
    if (g.b_rows > 0 && g.b == nullptr) fail("b is null with b_rows = " + std::to_string(g.b_rows));
    if (reinterpret_cast<std::uintptr_t>(g.a) % 128 != 0) fail("a must be 128-byte aligned");
    if (reinterpret_cast<std::uintptr_t>(g.b) % 128 != 0) fail("b must be 128-byte aligned");
  }
}

using ::spillway::tile::max_block_smem;

/// The Gram tile kernels by what they are (see the table at the top of this file).
enum class tile_kernel { wgmma, mma_sync_tma, mma_sync_cp_async, popc };

inline const char* to_string(tile_kernel k) noexcept {
  return ::spillway::detail::enum_name(k, {"wgmma", "mma_sync_tma", "mma_sync_cp_async", "popc"});
}

/// Why `k` cannot run on `device` (build code, compute capability, shared memory), or "" when it can.
inline std::string kernel_refusal(tile_kernel k, int device) {
  const int cc = ::spillway::tile::compute_capability(device);
  const std::string where = ::spillway::tile::describe_device(device);
  const int features = cc >= 80 && k != tile_kernel::popc ? build_features(device) : 0;
  // The mma.sync kernels: compute capability `min_cc`, the build's `feature` code, `smem` bytes.
  const auto mma_sync_refusal = [&](int min_cc, int feature, int smem) -> std::string {
    if (cc >= min_cc && (features & feature) != 0 && max_block_smem(device) >= smem) return "";
    return std::string("gram: tile kernel ") + to_string(k) + " needs compute capability " + std::to_string(min_cc / 10) +
           ".0+, a build with sm_" + std::to_string(min_cc) + "+ code and " + std::to_string(smem) +
           " bytes of shared memory per block; " + where + " and offers " + std::to_string(max_block_smem(device)) +
           " bytes";
  };
  switch (k) {
    case tile_kernel::popc:
      return "";
    case tile_kernel::wgmma:
      if (cc == 90 && (features & ::spillway::tile::feature_wgmma) != 0) return "";
      return "gram: tile kernel wgmma needs a build with sm_90a code running on compute capability 9.0; " + where;
    case tile_kernel::mma_sync_cp_async:
      return mma_sync_refusal(80, ::spillway::tile::feature_mma, bmma_cp_async_config::smem_bytes);
    case tile_kernel::mma_sync_tma:
      return mma_sync_refusal(90, ::spillway::tile::feature_tma, bmma_tma_config::smem_bytes);
  }
  return "gram: unknown tile kernel " + std::to_string(static_cast<int>(k));
}

/// The kernel a resolved path runs on `device`.
inline tile_kernel kernel_for(kernel_path resolved, int device) {
  switch (resolved) {
    case kernel_path::wgmma: return tile_kernel::wgmma;
    case kernel_path::mma_sync:
      return kernel_refusal(tile_kernel::mma_sync_tma, device).empty() ? tile_kernel::mma_sync_tma
                                                                          : tile_kernel::mma_sync_cp_async;
    default: return tile_kernel::popc;
  }
}

// Column tiles per band of the wgmma schedule (tile/schedule.cuh): narrow bands for narrow
// products, as measured (docs/gram_kernels.md, "wgmma band").
inline int wgmma_band(std::int64_t b_rows) { return b_rows <= 32 * wg_bn ? 4 : 8; }

template <class Epilogue>
struct is_int32_count_store : std::false_type {};
template <>
struct is_int32_count_store<store_counts<std::int32_t>> : std::true_type {};

/// Whether an int32 count store can go through the wgmma kernel's bulk-store epilogue: 16-byte
/// aligned base and row pitch, the panel inside the output's index space (row0 <= a_row0, col0 <=
/// b_row0, the last column of the panel inside the pitch) and coordinates that fit the copy
/// engine's int32.
inline bool tma_store_fits(const bit_gemm_args& args, const store_counts<std::int32_t>& epi) {
  if (epi.c == nullptr || reinterpret_cast<std::uintptr_t>(epi.c) % 16 != 0) return false;
  if (epi.ldc <= 0 || (epi.ldc * 4) % 16 != 0 || epi.ldc >= (std::int64_t{1} << 36)) return false;
  if (epi.row0 > args.a_row0 || epi.col0 > args.b_row0) return false;
  // A bulk tensor store must start on a 16-byte column boundary (the H200 faults with an illegal
  // instruction otherwise): blocks start at multiples of 256 columns past b_row0 - col0.
  if ((args.b_row0 - epi.col0) % 4 != 0) return false;
  const std::int64_t cols = args.b_row0 + args.b_rows - epi.col0;
  const std::int64_t rows = args.a_row0 + args.a_rows - epi.row0;
  constexpr std::int64_t coord_limit = (std::int64_t{1} << 31) - 2 * wg_bn;
  return cols <= epi.ldc && cols < coord_limit && rows < coord_limit;
}

/// What the claimed tile schedules draw their slots from: word 0 the slot counter, zeroed on the
/// launch's stream just before the kernel, then two tile-ring entries per block pair of the wgmma
/// kernel (written before they are read). The records are static device memory (64 per device),
/// so a launch allocates nothing — under memory pressure the job's budget may leave no byte free
/// (FaultGramPressureGpu) — and each record carries an event recorded after the kernel that used it
/// last: a launch takes a record whose event has completed, and when all 64 are still in use
/// (launches queued on many streams at once) its stream waits for the next one's event, so no two
/// kernels in flight ever share a counter. A lock per device is held from the choice of the record
/// to the event's record after the launch.
inline constexpr int slot_records = 64;
inline constexpr int slot_record_max_pairs = 128;
inline constexpr int slot_record_words = 1 + 2 * slot_record_max_pairs;
static __device__ unsigned long long gram_slot_records[slot_records * slot_record_words];

struct slot_ring {
  std::mutex m;
  unsigned long long* base = nullptr;
  cudaEvent_t done[slot_records] = {};
  int next = 0;
};

class slot_record {
 public:
  explicit slot_record(stream_view s) : ring_(ring_of(current_device())), lock_(ring_.m), stream_(s.value()) {
    if (ring_.base == nullptr) {
      void* p = nullptr;
      SPILLWAY_CUDA_TRY(cudaGetSymbolAddress(&p, gram_slot_records));
      for (auto& e : ring_.done) SPILLWAY_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      ring_.base = static_cast<unsigned long long*>(p);
    }
    for (int t = 0; t < slot_records && index_ < 0; ++t) {
      const int i = (ring_.next + t) % slot_records;
      const cudaError_t q = cudaEventQuery(ring_.done[i]);  // never recorded: cudaSuccess
      if (q == cudaSuccess) index_ = i;
      else if (q != cudaErrorNotReady) SPILLWAY_CUDA_TRY(q);
    }
    if (index_ < 0) {  // every record in use: wait, in stream order, for the least recently taken
      index_ = ring_.next % slot_records;
      SPILLWAY_CUDA_TRY(cudaStreamWaitEvent(stream_, ring_.done[index_], 0));
    }
    ring_.next = (index_ + 1) % slot_records;
    SPILLWAY_CUDA_TRY(cudaMemsetAsync(get(), 0, sizeof(unsigned long long), stream_));
  }
  slot_record(const slot_record&) = delete;
  slot_record& operator=(const slot_record&) = delete;
  /// After the launch (or its failure): the record is free once this stream passes this point.
  ~slot_record() { (void)cudaEventRecord(ring_.done[index_], stream_); }
  [[nodiscard]] unsigned long long* get() const noexcept {
    return ring_.base + static_cast<std::size_t>(index_) * slot_record_words;
  }

 private:
  static slot_ring& ring_of(int device) {
    static slot_ring rings[64];
    if (device < 0 || device >= 64) {
      throw logic_error("gram: device " + std::to_string(device) + " is beyond the 64 devices the tile-claim records serve");
    }
    return rings[device];
  }
  slot_ring& ring_;
  std::unique_lock<std::mutex> lock_;
  cudaStream_t stream_;
  int index_ = -1;
};

/// The tile schedule of a launch over `args`: tiles of bm rows of A by bn rows of B, walked in bands
/// of `band` row tiles.
inline tile_schedule launch_schedule(const bit_gemm_args& args, std::int64_t bm, std::int64_t bn,
                                     std::int64_t band) {
  return ::spillway::tile::make_tile_schedule(args.a_rows, args.b_rows, args.a_row0, args.b_row0,
                                              args.upper_only, bm, bn, band);
}

/// Launches the wgmma kernel on a persistent grid of as many block pairs (2-block clusters) as
/// can be resident at once.
template <class Epilogue, bool TmaStore>
void launch_wgmma_kernel(const CUtensorMap& map_a, const CUtensorMap& map_b, const CUtensorMap& map_c,
                         std::int64_t ld_words, const tile_schedule& sch, Epilogue epi, stream_view s) {
  ::spillway::tile::raise_smem_limit<wgmma_gram_kernel<Epilogue, TmaStore>>(current_device(), wg_smem_bytes);
  const slot_record record(s);
  unsigned long long* const counter = record.get();
  cudaLaunchConfig_t cfg;
  cudaLaunchAttribute attr;
  const int pairs = ::spillway::tile::resident_cluster_config<wgmma_gram_kernel<Epilogue, TmaStore>>(
      cfg, attr, wg_config::cluster, wg_config::threads, wg_smem_bytes, s, slot_record_max_pairs);
  cfg.gridDim = dim3(grid_blocks(sch.total, 1, pairs) * wg_config::cluster, 1, 1);
  SPILLWAY_CUDA_TRY(cudaLaunchKernelEx(&cfg, &wgmma_gram_kernel<Epilogue, TmaStore>, map_a, map_b, map_c,
                                       ld_words, sch, epi, counter));
}

template <class Epilogue>
void launch_wgmma_gram(const bit_gemm_args& args, Epilogue epi, stream_view s) {
  using Cfg = wg_config;
  // The schedule walks pair row tiles (2 x 128 rows); each block of a pair takes its half.
  const tile_schedule sch = launch_schedule(args, Cfg::bm * Cfg::cluster, Cfg::bn, wgmma_band(args.b_rows));
  if (sch.total == 0) return;
  const CUtensorMap map_a = make_bit_tensor_map(args.a, args.a_rows, args.ld_words, Cfg::bm, "gram wgmma: A panel");
  // Each block of a pair loads half of the B tile for both.
  const CUtensorMap map_b =
      make_bit_tensor_map(args.b, args.b_rows, args.ld_words, Cfg::bn / Cfg::cluster, "gram wgmma: B panel");
  if constexpr (is_int32_count_store<Epilogue>::value) {
    if (tma_store_fits(args, epi)) {
      const CUtensorMap map_c = make_count_tensor_map(epi.c, args.a_row0 + args.a_rows - epi.row0,
                                                      args.b_row0 + args.b_rows - epi.col0, epi.ldc);
      launch_wgmma_kernel<Epilogue, true>(map_a, map_b, map_c, args.ld_words, sch, epi, s);
      return;
    }
  }
  launch_wgmma_kernel<Epilogue, false>(map_a, map_b, map_a, args.ld_words, sch, epi, s);
}

/// Launches the TMA-fed mma.sync kernel (DirectStore: int32 counts stored from the accumulators).
template <class Cfg, class Epilogue, bool DirectStore>
void launch_mma_sync_tma_kernel(const CUtensorMap& map_a, const CUtensorMap& map_b, std::int64_t ld_words,
                                const tile_schedule& sch, Epilogue epi, unsigned grid,
                                unsigned long long* counter, stream_view s) {
  ::spillway::tile::raise_smem_limit<mma_sync_tma_gram_kernel<Cfg, Epilogue, DirectStore>>(current_device(),
                                                                                           Cfg::smem_bytes);
  mma_sync_tma_gram_kernel<Cfg, Epilogue, DirectStore>
      <<<grid, Cfg::threads, Cfg::smem_bytes, s.value()>>>(map_a, map_b, ld_words, sch, epi, counter);
  SPILLWAY_CHECK_LAUNCH();
}

template <class Epilogue>
void launch_mma_sync_tma_gram(const bit_gemm_args& args, Epilogue epi, int sms, stream_view s) {
  using Cfg = bmma_tma_config;
  const tile_schedule sch = launch_schedule(args, Cfg::bm, Cfg::bn, 8);
  if (sch.total == 0) return;
  const CUtensorMap map_a = make_bit_tensor_map(args.a, args.a_rows, args.ld_words, Cfg::bm, "gram mma_sync: A panel");
  const CUtensorMap map_b = make_bit_tensor_map(args.b, args.b_rows, args.ld_words, Cfg::bn, "gram mma_sync: B panel");
  const unsigned grid = grid_blocks(sch.total, 1, sms);
  const slot_record record(s);
  unsigned long long* const counter = record.get();  // the kernel claims its tiles from it
  if constexpr (is_int32_count_store<Epilogue>::value) {
    // Counts stored from the accumulators (8-byte stores): the alignment the tensor stores needed
    // covers them.
    if (tma_store_fits(args, epi)) {
      launch_mma_sync_tma_kernel<Cfg, Epilogue, true>(map_a, map_b, args.ld_words, sch, epi, grid, counter,
                                                      s);
      return;
    }
  }
  launch_mma_sync_tma_kernel<Cfg, Epilogue, false>(map_a, map_b, args.ld_words, sch, epi, grid, counter, s);
}

template <class Epilogue>
void launch_mma_sync_cp_async_gram(const bit_gemm_args& args, Epilogue epi, int sms, stream_view s) {
  using Cfg = bmma_cp_async_config;
  const tile_schedule sch = launch_schedule(args, Cfg::bm, Cfg::bn, 8);
  if (sch.total == 0) return;
  ::spillway::tile::raise_smem_limit<mma_sync_gram_kernel<Cfg, Epilogue>>(current_device(), Cfg::smem_bytes);
  const unsigned grid = grid_blocks(sch.total, 1, sms);
  mma_sync_gram_kernel<Cfg, Epilogue><<<grid, Cfg::threads, Cfg::smem_bytes, s.value()>>>(args.a, args.b,
                                                                                        args.ld_words, sch, epi);
  SPILLWAY_CHECK_LAUNCH();
}

template <class Epilogue>
void launch_popc_gram(const bit_gemm_args& args, Epilogue epi, stream_view s) {
  const tile_schedule sch = launch_schedule(args, popc_tile, popc_tile, 8);
  if (sch.total == 0) return;
  const unsigned grid =
      grid_blocks(sch.total, 1, resident_blocks(popc_gemm_kernel<Epilogue>, popc_threads, 0, current_device()));
  popc_gemm_kernel<Epilogue><<<grid, popc_threads, 0, s.value()>>>(args.a, args.b,
                                                                                         args.ld_words, sch, epi);
  SPILLWAY_CHECK_LAUNCH();
}

/// Runs kernel `k` (already known to run on the current device `device`).
template <class Epilogue>
void run_tile_kernel(tile_kernel k, const bit_gemm_args& args, Epilogue epi, int device, stream_view s) {
  if (args.a_rows == 0 || args.b_rows == 0) return;
  const int sms = ::spillway::tile::multiprocessor_count(device);
  // With no columns every count is 0; the tensor-core kernels need at least one k-slice for
  // their tensor maps and pipelines, so the (trivially exact) CUDA-core kernel delivers the zeros.
  if (k == tile_kernel::popc || args.ld_words == 0) {
    launch_popc_gram(args, epi, s);
  } else if (k == tile_kernel::wgmma) {
    launch_wgmma_gram(args, epi, s);
  } else if (k == tile_kernel::mma_sync_tma) {
    launch_mma_sync_tma_gram(args, epi, sms, s);
  } else {
    launch_mma_sync_cp_async_gram(args, epi, sms, s);
  }
}

/// Enqueues C = A·Bᵀ tile by tile on `s`, calling `epi(i, j, count)` (global indices) exactly once
/// for every (i, j) of every computed tile inside [a_row0, a_row0 + a_rows) x [b_row0, b_row0 +
/// b_rows). `path` forces a path (see kernel_path); automatic picks the fastest available, and
/// each path runs the fastest of its kernels that the device can run (kernel_for).
/// Runs on the current device; A, B and whatever the epilogue writes must live there.
template <class Epilogue>
void bit_gemm_async(const bit_gemm_args& args, Epilogue epi, kernel_path path, stream_view s) {
  check_bit_gemm_args(args);
  const int device = current_device();
  const kernel_path p = resolve_path(path, device);
  if (args.a_rows == 0 || args.b_rows == 0) return;
  const tile_kernel k = kernel_for(p, device);
  if (k == tile_kernel::mma_sync_cp_async && args.ld_words > 0) {
    // The 128 x 192 tile needs 160 KiB of shared memory per block: devices that offer less
    // (sm_86/89/120: 99 KiB) get a logic_error that says so, not a failed launch.
    const std::string refusal = kernel_refusal(k, device);
    if (!refusal.empty()) throw logic_error(refusal);
  }
  run_tile_kernel(k, args, epi, device, s);
}

/// bit_gemm_async with tile kernel `k` forced (tests and benchmarks: e.g. the cp.async-fed BMMA
/// kernel that sm_80 to sm_89 run, on an sm_90 device). Throws logic_error, naming what `k` needs
/// and what the device offers, where `k` cannot run; nothing is enqueued then.
template <class Epilogue>
void bit_gemm_forced_async(const bit_gemm_args& args, Epilogue epi, tile_kernel k, stream_view s) {
  check_bit_gemm_args(args);
  const int device = current_device();
  const std::string refusal = kernel_refusal(k, device);
  if (!refusal.empty()) throw logic_error(refusal);
  run_tile_kernel(k, args, epi, device, s);
}

}  // namespace spillway::gram::detail
