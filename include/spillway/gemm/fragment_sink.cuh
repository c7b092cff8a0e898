// spillway/gemm/fragment_sink.cuh — the Hopper GEMM's fragment-level extension point: A·Bᵀ of two
// row matrices whose raw accumulators go to the caller's sink, tile by tile in registers, instead
// of through an epilogue into C (no C is read or written). A module above gemm that consumes
// scores without storing them reaches the wgmma kernel here, not through gemm/detail/: the
// similarity top-k filters its scores this way (similarity/detail/topk_fused.cuh).
//
// The sink contract (a type that declares `using fragment_sink_tag = void;`): after each tile the
// consumer warpgroup calls, per thread,
//   sink.consume(d, row0, col0, m, n, stage)   (const Acc (&d)[128], row0/col0/m/n std::int64_t)
// where d[4 j + 2 h + e] is the raw sum (no alpha, no beta) of (row0 + 8 h, col0 + 8 j + e),
// j < 32, h, e < 2 — a row of A against a row of B; rows ≥ m and columns ≥ n are padding (their sums
// are 0). `stage` is the shared-memory address of the thread's first of 16 private 8-byte slots,
// slot q at stage + 1024 q. Acc is float for half, bf16 and TF32 rows, std::int32_t for rows of
// bits (fragment_sink_bit_gemm_async: d = popc(a AND b), exact). The two consumer
// warpgroups call their sinks at different times (they own different tiles: wgmma_sink_kernel.cuh),
// so a sink may synchronize its warp but never the block.
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/launch.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/gemm/detail/problem.hpp>
#include <spillway/gemm/detail/wgmma_sink_kernel.cuh>
#include <spillway/gemm/matrix_view.hpp>
#include <spillway/tile/arch.cuh>
#include <spillway/tile/wgmma.cuh>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string>
#include <type_traits>

namespace spillway::gemm {

/// True for a type that declares `using fragment_sink_tag = void;` (the contract above).
template <class Sink>
inline constexpr bool is_fragment_sink_v = detail::is_fragment_sink<Sink>::value;

/// Whether this build can run fragment_sink_gemm_async on `device`: it holds sm_90a code and the
/// device runs it (compute capability 9.0).
inline bool has_fragment_sink_gemm(int device) {
  return (tile::build_features(device) & tile::feature_wgmma) != 0;
}

namespace detail {

/// The checks and the launch of both entry points below (`who` names the caller in messages).
template <class T, class Op, class Sink>
void fragment_sink_launch(stream_view s, matrix_view<const T> a, matrix_view<const T> b, const Sink& sink,
                          const char* who) {
  static_assert(is_fragment_sink_v<Sink>, "a fragment sink declares `using fragment_sink_tag = void;`");
  const auto check = [who](const matrix_view<const T>& v, const char* name) {
    const std::string w = std::string(who) + ": " + name;
    if (v.order != layout::row_major) throw logic_error(w + " must be row-major, got " + v.describe());
    if (v.rows < 0 || v.cols < 0 || v.ld < v.cols) throw logic_error(w + " has bad extents: " + v.describe());
    if (reinterpret_cast<std::uintptr_t>(v.data) % 16 != 0 ||
        (v.ld * static_cast<index_t>(sizeof(T))) % 16 != 0) {
      throw logic_error(w + ": the base and ld must be 16-byte aligned, got " + v.describe());
    }
  };
  check(a, "a");
  check(b, "b");
  if (a.cols != b.cols) {
    throw logic_error(std::string(who) + ": a has " + std::to_string(a.cols) + " columns but b has " +
                      std::to_string(b.cols));
  }
  if (a.rows == 0 || b.rows == 0 || a.cols == 0) return;
  problem<T, T, float, float, Sink> p;
  p.m = a.rows;
  p.n = b.rows;
  p.k = a.cols;
  p.a = a.data;
  p.lda = a.ld;
  p.b = b.data;
  p.ldb = b.ld;
  p.c = nullptr;  // a fragment sink: C is neither read nor written
  p.ldc = b.rows;
  p.alpha = 1.0f;
  p.beta = 0.0f;
  p.epi = sink;
  // Refuses (logic_error) where this build has no sm_90a code for the device.
  launch_wgmma_sink<T, Sink, Op>(p, s);
}

}  // namespace detail

/// Enqueues on `s` (the current device's) the products of every row of `a` (m x k) with every row of
/// `b` (n x k), handed to `sink` as accumulators (the contract above). T: __half, __nv_bfloat16 or
/// float (computed as TF32); float accumulation. Both views row-major in device memory, 16-byte
/// aligned, with ld a multiple of 16 bytes; m, n or k = 0 enqueues nothing. Throws logic_error for
/// other views and where the current device cannot run it (has_fragment_sink_gemm).
template <class T, class Sink>
void fragment_sink_gemm_async(stream_view s, matrix_view<const T> a, matrix_view<const T> b,
                              const Sink& sink) {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, float>,
                "fragment_sink_gemm_async: rows of half, bf16 or float (as TF32)");
  detail::fragment_sink_launch<T, T>(s, a, b, sink, "fragment_sink_gemm_async");
}

/// The same over rows of bits: `a` and `b` hold rows of 32-bit words (bit c of a row is bit c % 32
/// of its word c / 32, as gram::bit_matrix packs them; `cols` counts words), and the sink's
/// accumulators are std::int32_t counts popc(a_i AND b_j) over the rows' words (the 1-bit tensor
/// cores; exact). Words past a row's last bit must be zero: they are counted. The same views and
/// refusals as fragment_sink_gemm_async, named fragment_sink_bit_gemm_async.
template <class Sink>
void fragment_sink_bit_gemm_async(stream_view s, matrix_view<const std::uint32_t> a,
                                  matrix_view<const std::uint32_t> b, const Sink& sink) {
  detail::fragment_sink_launch<std::uint32_t, tile::b1_and_popc>(s, a, b, sink,
                                                                 "fragment_sink_bit_gemm_async");
}

}  // namespace spillway::gemm
