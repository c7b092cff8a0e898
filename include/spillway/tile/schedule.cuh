// spillway/tile/schedule.cuh — the orders in which the tile kernels visit their output tiles: the
// GEMM kernels' grouped raster, and the Gram kernels' banded schedule of a product C = A·Bᵀ over
// two row panels, with the symmetric case (A·Aᵀ, upper triangle only) skipping tiles that lie
// entirely below the diagonal.
//
// Output tiles are BM rows (of A) by BN rows (of B). Column tiles are grouped into bands of `band`
// tiles; inside a band the grid walks row tile by row tile, so the tiles that run at the same time
// cover a squarish block of the output and their A and B k-slices are shared in L2 (walking one
// whole tile column at a time would stream every A tile from HBM once per column). In upper-only
// mode tile column tj needs only the row tiles whose first global row is not greater than the
// column tile's last global column; that count never decreases with tj, so a band is the rectangle
// [0, count(last tj of the band)) x band, and the few tiles of that rectangle that lie below the
// diagonal are reported as empty by the cursor. No tile list is built or copied.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace spillway::tile {

/// The GEMM kernels' tile order (wgmma, mma.sync and SIMT): tile `linear` of a tiles_m x tiles_n
/// grid of output tiles, walked in groups of `group` tile rows, down the group's rows first, then
/// across its columns, so the tiles in flight at once share a few A panels and B panels in L2
/// (walking whole rows would stream every B panel from HBM once per tile row). The last group may
/// hold fewer rows.
__host__ __device__ __forceinline__ void grouped_raster(std::int64_t linear, std::int64_t tiles_m,
                                                        std::int64_t tiles_n, std::int64_t group,
                                                        std::int64_t& tm, std::int64_t& tn) {
  const std::int64_t per_group = group * tiles_n;
  const std::int64_t g = linear / per_group;
  const std::int64_t first = g * group;
  const std::int64_t rows = tiles_m - first < group ? tiles_m - first : group;
  const std::int64_t in = linear - g * per_group;
  tm = first + in % rows;
  tn = in / rows;
}

// The Gram kernels' order: claimed tiles of bands of column tiles, upper-only products skipping
// the tiles below the diagonal.

struct tile_schedule {
  std::int64_t a_rows = 0, b_rows = 0;  ///< panel rows of A (output rows) and of B (output columns)
  std::int64_t a_row0 = 0, b_row0 = 0;  ///< global index of each panel's first row
  std::int64_t bm = 1, bn = 1;
  std::int64_t num_ti = 0, num_tj = 0;
  std::int64_t band = 8;
  std::int64_t total = 0;  ///< linear slots over all bands (skipped tiles included)
  bool upper_only = false;

  /// Row tiles that tile column `tj` needs.
  __host__ __device__ std::int64_t rows_needed(std::int64_t tj) const {
    if (!upper_only) return num_ti;
    const std::int64_t last_col_local = ((tj + 1) * bn < b_rows ? (tj + 1) * bn : b_rows) - 1;
    const std::int64_t cmax = b_row0 + last_col_local;  // last global column of the tile
    if (cmax < a_row0) return 0;
    const std::int64_t need = (cmax - a_row0) / bm + 1;
    return need < num_ti ? need : num_ti;
  }
  __host__ __device__ std::int64_t band_width(std::int64_t b) const {
    const std::int64_t first = b * band;
    return (num_tj - first) < band ? (num_tj - first) : band;
  }
  __host__ __device__ std::int64_t band_slots(std::int64_t b) const {
    const std::int64_t w = band_width(b);
    return rows_needed(b * band + w - 1) * w;
  }
};

inline tile_schedule make_tile_schedule(std::int64_t a_rows, std::int64_t b_rows, std::int64_t a_row0,
                                        std::int64_t b_row0, bool upper_only, std::int64_t bm, std::int64_t bn,
                                        std::int64_t band) {
  tile_schedule s;
  s.a_rows = a_rows;
  s.b_rows = b_rows;
  s.a_row0 = a_row0;
  s.b_row0 = b_row0;
  s.bm = bm;
  s.bn = bn;
  s.band = band;
  s.upper_only = upper_only;
  s.num_ti = (a_rows + bm - 1) / bm;
  s.num_tj = (b_rows + bn - 1) / bn;
  s.total = 0;
  const std::int64_t bands = (s.num_tj + band - 1) / band;
  for (std::int64_t b = 0; b < bands; ++b) s.total += s.band_slots(b);
  return s;
}

/// Walks the linear slots of a schedule in increasing order (each block of a persistent grid owns
/// one cursor and asks for slots blockIdx.x, blockIdx.x + gridDim.x, ...): O(1) amortised per slot.
struct tile_cursor {
  std::int64_t band = 0;
  std::int64_t band_start = 0;

  /// Maps slot `t` (non-decreasing across calls) to a tile; false when the slot is a tile that
  /// lies entirely below the diagonal (nothing to compute).
  __host__ __device__ bool locate(const tile_schedule& s, std::int64_t t, std::int64_t& ti, std::int64_t& tj) {
    for (;;) {
      const std::int64_t n = s.band_slots(band);
      if (t < band_start + n) break;
      band_start += n;
      ++band;
    }
    const std::int64_t w = s.band_width(band);
    const std::int64_t local = t - band_start;
    ti = local / w;
    tj = band * s.band + local % w;
    return ti < s.rows_needed(tj);
  }
};

}  // namespace spillway::tile
