// spillway/gram/detail/kernels.cuh — the bit-matrix product tile kernels and their dispatch.
//
// bit_gemm_async computes count(i, j) = popcount(row i of A & row j of B) for every output tile
// it visits and hands each count to an epilogue functor; the public Gram API composes its
// epilogues (raw counts, Jaccard, cosine, Hamming) and sinks on top of it.
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/device_buffer.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/gram/detail/kernel_popc.cuh>
#include <spillway/gram/detail/kernel_schedule.cuh>
#include <spillway/gram/detail/mma_sync_kernel.cuh>
#include <spillway/gram/detail/mma_sync_v4_kernel.cuh>
#include <spillway/gram/detail/wgmma_kernel.cuh>
#include <spillway/gram/detail/wgmma_v2_kernel.cuh>
#include <spillway/gram/kernel_path.hpp>
#include <spillway/tile/arch.cuh>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

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

/// Which kernels this build carries for the code the device actually runs: bit 0 = BMMA
/// (sm_80+), bit 1 = BGMMA (sm_90a), bit 2 = the tensor copy engine (sm_90+) — the tile engine's
/// probe (its feature bits are these).
inline int build_features(int device) { return ::spillway::tile::build_features(device); }

/// What `requested` runs as on `device`: automatic becomes wgmma on an sm_90a build running on
/// compute capability 9.0, else mma_sync from 8.0 up, else popc. A forced path the device or the
/// build cannot run throws logic_error naming the path and the device's compute capability.
inline kernel_path resolve_path(kernel_path requested, int device) {
  ::spillway::detail::check_device_ordinal(device, "gram::resolve_path");
  int major = 0, minor = 0;
  SPILLWAY_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  SPILLWAY_CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  const int cc = major * 10 + minor;
  const std::string where = "device " + std::to_string(device) + " has compute capability " +
                            std::to_string(major) + "." + std::to_string(minor);
  const bool known = requested == kernel_path::automatic || requested == kernel_path::wgmma ||
                     requested == kernel_path::mma_sync || requested == kernel_path::popc;
  if (!known) throw logic_error("gram: unknown kernel_path value " + std::to_string(static_cast<int>(requested)));
  // Only probe the build when a tensor-core path is in question (the probe launches a kernel).
  const int features = (requested == kernel_path::popc || cc < 80) ? 0 : build_features(device);
  kernel_path out = kernel_path::popc;
  if (resolve_kernel_path(requested, cc, (features & 1) != 0, (features & 2) != 0, out)) return out;
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

inline int multiprocessors(int device) {
  int n = 0;
  SPILLWAY_CUDA_TRY(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
  return n;
}

inline int max_block_smem(int device) {
  int n = 0;
  SPILLWAY_CUDA_TRY(cudaDeviceGetAttribute(&n, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return n;
}

/// Whether the mma_sync v2 tile (4 stages of 192 + 256 rows, 224 KiB) fits the device's
/// per-block shared memory: sm_90 and sm_100 yes; sm_80 (164 KiB) and sm_86/89/120 no.
inline bool mma_v2_fits(int device) { return max_block_smem(device) >= mma_v2_config::smem_bytes; }

/// Whether the mma_sync v4 kernel runs on `device`: compute capability 9.0 or newer, a build whose
/// code for it has the tensor copy engine (sm_90+), and 230,448 bytes of shared memory per block.
inline bool mma_v4_fits(int device) {
  int major = 0;
  SPILLWAY_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major >= 9 && (build_features(device) & 4) != 0 && max_block_smem(device) >= mma_v4_config::smem_bytes_v4;
}
inline std::int64_t persistent_grid(std::int64_t slots, std::int64_t max_blocks) {
  return slots < max_blocks ? slots : max_blocks;
}

template <class Cfg, class Epilogue>
void mma_sync_launch(const bit_gemm_args& args, Epilogue epi, int sms, stream_view s, int band = 8) {
  const tile_schedule sch = make_tile_schedule(args.a_rows, args.b_rows, args.a_row0, args.b_row0,
                                               args.upper_only, Cfg::bm, Cfg::bn, band);
  if (sch.total == 0) return;
  SPILLWAY_CUDA_TRY(cudaFuncSetAttribute(mma_sync_gemm_kernel<Cfg, Epilogue>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::smem_bytes));
  const auto grid = persistent_grid(sch.total, sms);
  mma_sync_gemm_kernel<Cfg, Epilogue><<<static_cast<unsigned>(grid), Cfg::threads, Cfg::smem_bytes, s.value()>>>(
      args.a, args.b, args.ld_words, sch, epi);
  SPILLWAY_CHECK_LAUNCH();
}

template <class Epilogue>
void mma_sync_v4_launch(const bit_gemm_args& args, Epilogue epi, int sms, stream_view s, int band = 8) {
  using Cfg = mma_v4_config;
  const tile_schedule sch = make_tile_schedule(args.a_rows, args.b_rows, args.a_row0, args.b_row0,
                                               args.upper_only, Cfg::bm, Cfg::bn, band);
  if (sch.total == 0) return;
  const CUtensorMap map_a = make_bit_tensor_map(args.a, args.a_rows, args.ld_words, Cfg::bm);
  const CUtensorMap map_b = make_bit_tensor_map(args.b, args.b_rows, args.ld_words, Cfg::bn);
  SPILLWAY_CUDA_TRY(cudaFuncSetAttribute(mma_sync_v4_gemm_kernel<Cfg, Epilogue>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::smem_bytes_v4));
  const auto grid = persistent_grid(sch.total, sms);
  mma_sync_v4_gemm_kernel<Cfg, Epilogue><<<static_cast<unsigned>(grid), Cfg::threads, Cfg::smem_bytes_v4,
                                           s.value()>>>(map_a, map_b, args.ld_words, sch, epi);
  SPILLWAY_CHECK_LAUNCH();
}
// Column tiles per band of the wgmma schedule (kernel_schedule.cuh). Measured on the H200, upper
// triangle: 8192 x 32768 ran at 3.78 / 4.19 / 3.16 P bit-MAC/s with bands of 8 / 4 / 16,
// 32768 x 65536 at 5.39 / 5.04 / 4.92: narrow bands for narrow products.
inline int wgmma_band(std::int64_t b_rows) { return b_rows <= 32 * wg_bn ? 4 : 8; }

/// Tile-kernel variant inside a path. `automatic` (what every caller gets) is the fastest measured
/// on the H200 (benchmarks/results/gram.md): `v2` for wgmma; for mma_sync `v4` from compute
/// capability 9.0, else `v2` where a block can have its 224 KiB of shared memory, else `standard`.
/// Tests and benchmarks force the others:
/// - `standard`: wgmma with every epilogue per element (through shared-memory staging; the TMA
///   store of v2 off); mma_sync with 12 warps of 64 x 32 output tiles (block tile 128 x 192).
/// - `v2`, wgmma: the int32 raw-count epilogue (`store_counts<std::int32_t>`) written by TMA bulk
///   stores from shared memory for blocks wholly inside the output (wgmma_v2_kernel.cuh); other
///   epilogues and edge blocks run per element. mma_sync: 12 warps of 64 x 64 output tiles, block
///   tile 192 x 256 (`mma_v2_config`), stages by cp.async.
/// - `v4`, mma_sync: the v2 tile fed by the tensor copy engine (mma_sync_v4_kernel.cuh), from
///   compute capability 9.0 where a block can have 230,448 bytes of shared memory; wgmma runs as v2.
/// Removed after measurement: a first wgmma kernel (4.84 P; the same main loop as v2, whose
/// per-element epilogue is now `standard`), mma_sync `v3` (v2 with cp.async completion on
/// mbarriers: 3.08 P against v2's 3.06 P; v4 3.76 P) and a register double-buffered mma_sync loop.
/// - popc: no variant; every variant runs the one kernel.
enum class kernel_variant { automatic, standard, v2, v4 };

inline const char* to_string(kernel_variant v) {
  switch (v) {
    case kernel_variant::automatic: return "automatic";
    case kernel_variant::standard: return "standard";
    case kernel_variant::v2: return "v2";
    case kernel_variant::v4: return "v4";
  }
  return "?";
}

template <class Epilogue>
struct is_int32_count_store : std::false_type {};
template <>
struct is_int32_count_store<store_counts<std::int32_t>> : std::true_type {};

/// Whether an int32 count store can go through the TMA-store epilogue: 16-byte aligned base and
/// row pitch, the panel inside the output's index space (row0 <= a_row0, col0 <= b_row0, the last
/// column of the panel inside the pitch) and coordinates that fit the copy engine's int32.
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

/// The wgmma kernel (wgmma_v2_kernel.cuh). `tma_store`: let an int32 count store go through the
/// copy engine where tma_store_fits (else, and for every other epilogue, per element).
template <class Epilogue>
void wgmma_v2_launch(const bit_gemm_args& args, Epilogue epi, int sms, stream_view s, bool tma_store = true, int band = 0) {
  if (band <= 0) band = wgmma_band(args.b_rows);
  const tile_schedule sch = make_tile_schedule(args.a_rows, args.b_rows, args.a_row0, args.b_row0,
                                               args.upper_only, wg_bm, wg_bn, band);
  if (sch.total == 0) return;
  const CUtensorMap map_a = make_bit_tensor_map(args.a, args.a_rows, args.ld_words, wg_bm);
  const CUtensorMap map_b = make_bit_tensor_map(args.b, args.b_rows, args.ld_words, wg_bn);
  const auto grid = static_cast<unsigned>(persistent_grid(sch.total, sms));
  bool bulk = false;
  if constexpr (is_int32_count_store<Epilogue>::value) bulk = tma_store && tma_store_fits(args, epi);
  if (bulk) {
    if constexpr (is_int32_count_store<Epilogue>::value) {
      const CUtensorMap map_c = make_count_tensor_map(epi.c, args.a_row0 + args.a_rows - epi.row0,
                                                      args.b_row0 + args.b_rows - epi.col0, epi.ldc);
      SPILLWAY_CUDA_TRY(cudaFuncSetAttribute(wgmma_v2_gemm_kernel<Epilogue, true>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, wg2_smem_bytes));
      wgmma_v2_gemm_kernel<Epilogue, true><<<grid, wg_threads, wg2_smem_bytes, s.value()>>>(
          map_a, map_b, map_c, args.ld_words, sch, epi);
      SPILLWAY_CHECK_LAUNCH();
    }
    return;
  }
  SPILLWAY_CUDA_TRY(cudaFuncSetAttribute(wgmma_v2_gemm_kernel<Epilogue, false>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, wg2_smem_bytes));
  wgmma_v2_gemm_kernel<Epilogue, false><<<grid, wg_threads, wg2_smem_bytes, s.value()>>>(
      map_a, map_b, map_a, args.ld_words, sch, epi);
  SPILLWAY_CHECK_LAUNCH();
}

/// Enqueues C = A·Bᵀ tile by tile on `s`, calling `epi(i, j, count)` (global indices) exactly once
/// for every (i, j) of every computed tile inside [a_row0, a_row0 + a_rows) x [b_row0, b_row0 +
/// b_rows). `path` forces a kernel (see kernel_path); automatic picks the fastest available.
/// Runs on the current device; A, B and whatever the epilogue writes must live there.
/// `Variant` forces a kernel variant inside the path (kernel_variant; tests and benchmarks:
/// `bit_gemm_async<kernel_variant::standard>(...)`); the default, automatic, is the fastest measured.
template <kernel_variant Variant = kernel_variant::automatic, class Epilogue>
void bit_gemm_async(const bit_gemm_args& args, Epilogue epi, kernel_path path, stream_view s) {
  static_assert(Variant == kernel_variant::automatic || Variant == kernel_variant::standard ||
                    Variant == kernel_variant::v2 || Variant == kernel_variant::v4,
                "unknown kernel_variant");
  check_bit_gemm_args(args);
  const int device = current_device();
  const kernel_path p = resolve_path(path, device);
  if (args.a_rows == 0 || args.b_rows == 0) return;
  const int sms = multiprocessors(device);

  // With no columns every count is 0; the tensor-core kernels need at least one k-slice for
  // their tensor maps and pipelines, so the (trivially exact) CUDA-core kernel delivers the zeros.
  if (p == kernel_path::popc || args.ld_words == 0) {
    const tile_schedule sch = make_tile_schedule(args.a_rows, args.b_rows, args.a_row0, args.b_row0,
                                                 args.upper_only, popc_tile, popc_tile, 8);
    if (sch.total == 0) return;
    int per_sm = 0;
    SPILLWAY_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, popc_gemm_kernel<Epilogue>,
                                                                    popc_threads, 0));
    const auto grid = persistent_grid(sch.total, static_cast<std::int64_t>(sms) * (per_sm > 0 ? per_sm : 1));
    popc_gemm_kernel<Epilogue><<<static_cast<unsigned>(grid), popc_threads, 0, s.value()>>>(
        args.a, args.b, args.ld_words, sch, epi);
    SPILLWAY_CHECK_LAUNCH();
    return;
  }
  if (p == kernel_path::mma_sync) {
    if constexpr (Variant == kernel_variant::automatic) {
      if (mma_v4_fits(device)) {
        mma_sync_v4_launch(args, epi, sms, s);
      } else if (mma_v2_fits(device)) {
        mma_sync_launch<mma_v2_config>(args, epi, sms, s);
      } else {
        mma_sync_launch<mma_default_config>(args, epi, sms, s);
      }
    } else if constexpr (Variant == kernel_variant::v2) {
      if (!mma_v2_fits(device)) {
        throw logic_error("gram: kernel_variant v2 of kernel_path mma_sync needs " +
                          std::to_string(mma_v2_config::smem_bytes) +
                          " bytes of shared memory per block; device " + std::to_string(device) + " offers " +
                          std::to_string(max_block_smem(device)));
      }
      mma_sync_launch<mma_v2_config>(args, epi, sms, s);
    } else if constexpr (Variant == kernel_variant::v4) {
      if (!mma_v4_fits(device)) {
        throw logic_error("gram: kernel_variant v4 of kernel_path mma_sync needs compute capability 9.0+, a "
                          "build with sm_90+ code and " + std::to_string(mma_v4_config::smem_bytes_v4) +
                          " bytes of shared memory per block; device " + std::to_string(device) + " offers " +
                          std::to_string(max_block_smem(device)) + " bytes");
      }
      mma_sync_v4_launch(args, epi, sms, s);
    } else {
      mma_sync_launch<mma_default_config>(args, epi, sms, s);
    }
    return;
  }
  wgmma_v2_launch(args, epi, sms, s, Variant != kernel_variant::standard);
}

}  // namespace spillway::gram::detail
