// spillway/gram/kernel_path.hpp — which tile kernel computes the bit-matrix products.
#pragma once

#include <spillway/core/enum_name.hpp>

namespace spillway::gram {

/// The tile kernel that computes popcount(a_i & b_j) for the Gram products.
///
/// - `automatic`: the fastest path this build and device can run: `wgmma` on an sm_90a build
///   running on a compute-capability 9.0 device, else `mma_sync` from compute capability 8.0 up,
///   else `popc`.
/// - `wgmma`: Hopper b1 warpgroup MMA (`wgmma.mma_async ... .b1.b1.and.popc`, BGMMA in SASS), with
///   tiles brought into shared memory by the tensor copy engine. Needs an sm_90a build.
/// - `mma_sync`: b1 warp MMA (`mma.sync.aligned.m16n8k256 ... .and.popc`, BMMA in SASS) with
///   cp.async multi-stage tiles; every target from sm_80 up.
/// - `popc`: `__popc(a & b)` on the CUDA cores; every target (the sm_75 path, and a cross-check).
enum class kernel_path { automatic, wgmma, mma_sync, popc };

/// "automatic", "wgmma", "mma_sync" or "popc".
inline const char* to_string(kernel_path p) noexcept {
  return ::spillway::detail::enum_name(p, {"automatic", "wgmma", "mma_sync", "popc"});
}

/// The path `requested` runs as, given a device's compute capability (major * 10 + minor) and
/// whether the code this build carries for that device holds b1 warp MMAs (sm_80+) and b1
/// warpgroup MMAs (sm_90a). Returns false when a forced path cannot run there (the GPU dispatch
/// turns that into a logic_error naming the path and the compute capability).
inline bool resolve_kernel_path(kernel_path requested, int cc, bool has_bmma_code, bool has_bgmma_code,
                                kernel_path& out) {
  const bool wgmma_ok = cc == 90 && has_bgmma_code;
  const bool mma_ok = cc >= 80 && has_bmma_code;
  switch (requested) {
    case kernel_path::automatic:
      out = wgmma_ok ? kernel_path::wgmma : (mma_ok ? kernel_path::mma_sync : kernel_path::popc);
      return true;
    case kernel_path::wgmma:
      out = requested;
      return wgmma_ok;
    case kernel_path::mma_sync:
      out = requested;
      return mma_ok;
    case kernel_path::popc:
      out = requested;
      return true;
  }
  return false;
}

}  // namespace spillway::gram
