// spillway/dist/npy_file.hpp — one .npy file written by every rank at once through MPI-IO: each
// rank holds a contiguous range of the array's elements (C order), rank 0 writes the header, and
// the data goes out with MPI_File_write_at_all. The header is NumPy's own (io::make_npy_header:
// version 1.0, padded so the data starts at a multiple of 64 bytes), so np.load and
// np.load(mmap_mode='r') open the file as if NumPy had written it.
//
//   // rows [r0, r1) of an n x k array on this rank
//   spillway::dist::write_npy_at_all(comm, "nn.npy", {n, k}, local.data(), r0 * k, (r1 - r0) * k);
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/dist/agree.hpp>
#include <spillway/dist/communicator.hpp>
#include <spillway/io/npy.hpp>

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace spillway::dist {

namespace detail {
/// Bytes per MPI-IO call: counts are int, and 1 GiB keeps each call well inside that.
inline constexpr std::int64_t io_piece_bytes = std::int64_t{1} << 30;
}  // namespace detail

/// Bytes of the header that write_npy_at_all writes for (T, shape): where element 0 starts.
template <class T>
std::int64_t npy_data_offset(const std::vector<std::int64_t>& shape) {
  return static_cast<std::int64_t>(io::make_npy_header(io::npy_dtype_of<T>(), shape).size());
}

/// Collective over `c`: writes the C-order array of `shape` into `path` (created, or truncated to
/// its new size), this rank's `count` elements at `data` going to elements [offset, offset + count).
/// The ranks' ranges must not overlap and their counts must add up to the array's size (checked:
/// every rank throws the same rank_error otherwise, before the file is touched). A failure to
/// open or write on any rank is reported on every rank (rank_error); the file is then incomplete.
/// `sync`: MPI_File_sync before closing, so the call returns when the data is on the storage device
/// (else it may sit in the page cache: what a benchmark of the write must not time).
/// `collective` (default): MPI_File_write_at_all, which lets the MPI-IO layer aggregate; false:
/// each rank writes its range with MPI_File_write_at on its own (no reshuffling between ranks —
/// for large contiguous ranges on a local disk it may be the faster; measure both).
template <class T>
void write_npy_at_all(const communicator& c, const std::string& path, const std::vector<std::int64_t>& shape,
                      const T* data, std::int64_t offset, std::int64_t count, bool sync = false,
                      bool collective = true) {
  std::string header;
  std::int64_t total = 1;
  agree(c, ("checking the .npy layout of '" + path + "'").c_str(), [&] {
    header = io::make_npy_header(io::npy_dtype_of<T>(), shape);
    for (auto d : shape) total *= d;
    if (count < 0 || offset < 0 || offset + count > total) {
      throw logic_error("dist::write_npy_at_all: elements [" + std::to_string(offset) + ", " +
                        std::to_string(offset + count) + ") are outside the array's " +
                        std::to_string(total));
    }
    if (count > 0 && data == nullptr) throw logic_error("dist::write_npy_at_all: data is null");
  });
  std::int64_t sum = 0;
  SPILLWAY_MPI_TRY(MPI_Allreduce(&count, &sum, 1, MPI_INT64_T, MPI_SUM, c.get()));
  agree(c, ("checking the .npy layout of '" + path + "'").c_str(), [&] {
    if (sum != total) {
      throw logic_error("dist::write_npy_at_all: the ranks hold " + std::to_string(sum) +
                        " elements of an array of " + std::to_string(total) + " (" + path + ")");
    }
  });

  MPI_File fh = MPI_FILE_NULL;
  const int orc = MPI_File_open(c.get(), path.c_str(), MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
  local_outcome open_o;
  if (orc != MPI_SUCCESS) {
    open_o.failed = true;
    open_o.message = "MPI_File_open('" + path + "'): " + detail::mpi_error_text(orc);
  }
  // MPI_File_close is collective: after a failed open (OpenMPI fails it on every rank) the
  // handle is not closed here, so that no rank waits for one that never opened the file.
  settle(c, open_o, ("opening '" + path + "'").c_str());

  const auto hbytes = static_cast<std::int64_t>(header.size());
  const std::int64_t bytes = count * static_cast<std::int64_t>(sizeof(T));
  const std::int64_t pieces = (bytes + detail::io_piece_bytes - 1) / detail::io_piece_bytes;
  std::int64_t max_pieces = 0;
  local_outcome w;
  auto note = [&](int rc, const char* what) {
    if (rc != MPI_SUCCESS && !w.failed) {
      w.failed = true;
      w.message = std::string(what) + " of '" + path + "': " + detail::mpi_error_text(rc);
    }
  };
  note(MPI_Allreduce(&pieces, &max_pieces, 1, MPI_INT64_T, MPI_MAX, c.get()), "MPI_Allreduce");
  // A longer file from an earlier run would keep its tail: cut it to the new size.
  note(MPI_File_set_size(fh, static_cast<MPI_Offset>(hbytes + total * static_cast<std::int64_t>(sizeof(T)))),
       "MPI_File_set_size");
  if (c.rank() == 0) {
    note(MPI_File_write_at(fh, 0, header.data(), static_cast<int>(hbytes), MPI_BYTE, MPI_STATUS_IGNORE),
         "writing the header");
  }
  const auto* p = reinterpret_cast<const char*>(data);
  const MPI_Offset base = static_cast<MPI_Offset>(hbytes + offset * static_cast<std::int64_t>(sizeof(T)));
  char dummy = 0;
  for (std::int64_t q = 0; q < (collective ? max_pieces : pieces); ++q) {
    const std::int64_t at = q * detail::io_piece_bytes;
    const std::int64_t n = std::max<std::int64_t>(0, std::min(detail::io_piece_bytes, bytes - at));
    const MPI_Offset where = base + static_cast<MPI_Offset>(n > 0 ? at : 0);
    const char* from = n > 0 ? p + at : &dummy;
    if (collective) {
      note(MPI_File_write_at_all(fh, where, from, static_cast<int>(n), MPI_BYTE, MPI_STATUS_IGNORE),
           "MPI_File_write_at_all");
    } else {
      note(MPI_File_write_at(fh, where, from, static_cast<int>(n), MPI_BYTE, MPI_STATUS_IGNORE),
           "MPI_File_write_at");
    }
  }
  if (sync) note(MPI_File_sync(fh), "MPI_File_sync");
  note(MPI_File_close(&fh), "MPI_File_close");
  settle(c, w, ("writing '" + path + "'").c_str());
}

}  // namespace spillway::dist
