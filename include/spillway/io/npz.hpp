// spillway/io/npz.hpp — NumPy .npz archives (what np.savez writes and np.load reads: a zip of .npy
// members, stored uncompressed) and SciPy's sparse CSR layout in one (what scipy.sparse.save_npz
// writes and scipy.sparse.load_npz reads). Members and offsets past 4 GiB take zip64 records, which
// Python's zipfile reads. Host only.
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/io/npy.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace spillway::io {

/// CRC-32 (ISO-HDLC, the zip and PNG checksum: reflected polynomial 0xEDB88320) of n bytes at p,
/// continuing from `crc` (0 to start).
inline std::uint32_t crc32(const void* p, std::size_t n, std::uint32_t crc = 0) {
  static const std::array<std::uint32_t, 256> table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int b = 0; b < 8; ++b) c = (c & 1u) != 0u ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  const auto* b = static_cast<const unsigned char*>(p);
  crc = ~crc;
  for (std::size_t i = 0; i < n; ++i) crc = table[(crc ^ b[i]) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

/// One array of an .npz archive: `name` (the member is name + ".npy"), NumPy's descr ("<f4",
/// "|S3", ...), the shape (empty: a 0-d array) and its bytes in C order.
struct npz_member {
  std::string name;
  std::string descr;
  std::vector<std::int64_t> shape;
  const void* data = nullptr;
  std::size_t bytes = 0;
};

/// A member holding a vector's elements with `shape` (default: one dimension of its size).
template <class T>
npz_member npz_array(std::string name, const std::vector<T>& v, std::vector<std::int64_t> shape = {}) {
  if (shape.empty()) shape = {static_cast<std::int64_t>(v.size())};
  if (npy_shape_elements(shape) != static_cast<std::int64_t>(v.size())) {
    throw logic_error("npz_array '" + name + "': the shape holds " + std::to_string(npy_shape_elements(shape)) +
                      " elements, the vector " + std::to_string(v.size()));
  }
  return npz_member{std::move(name), npy_descr(npy_dtype_of<T>()), std::move(shape), v.data(), v.size() * sizeof(T)};
}

namespace detail {

/// Bytes per element of a NumPy descr this file writes ("<f4", "|S3", ...); 0 for one it does not know.
inline std::size_t npy_descr_itemsize(const std::string& d) {
  if (d.size() < 3 || (d[0] != '<' && d[0] != '|')) return 0;
  const char kind = d[1];
  if (kind != 'f' && kind != 'i' && kind != 'u' && kind != 'b' && kind != 'c' && kind != 'S') return 0;
  std::size_t n = 0;
  for (std::size_t i = 2; i < d.size(); ++i) {
    if (d[i] < '0' || d[i] > '9') return 0;
    n = n * 10 + static_cast<std::size_t>(d[i] - '0');
  }
  return n;
}

inline void npz_put(std::string& s, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s += static_cast<char>((v >> (8 * i)) & 0xFFu);
}

/// The fields a local header and a central-directory entry share, from "version needed" to the
/// name's length: stored, dated 1980-01-01, sizes 0xFFFFFFFF when they are in zip64 records.
inline void npz_put_entry(std::string& s, bool zip64, std::uint32_t crc, std::uint64_t size, bool big_size,
                          std::size_t name_bytes) {
  npz_put(s, zip64 ? 45 : 20, 2);  // version needed: 4.5 for zip64 records, else 2.0
  npz_put(s, 0, 2);                // flags
  npz_put(s, 0, 2);                // stored
  npz_put(s, 0, 2);                // time
  npz_put(s, 0x21, 2);             // date
  npz_put(s, crc, 4);
  npz_put(s, big_size ? 0xFFFFFFFFu : size, 4);  // compressed
  npz_put(s, big_size ? 0xFFFFFFFFu : size, 4);  // uncompressed
  npz_put(s, name_bytes, 2);
}

struct npz_written {
  std::string name;
  std::uint32_t crc = 0;
  std::uint64_t size = 0, offset = 0;
};

/// Writes `bytes` at p to f (throws naming the archive on a short write).
inline void npz_write(std::FILE* f, const void* p, std::size_t bytes, const std::string& path) {
  if (bytes != 0 && std::fwrite(p, 1, bytes, f) != bytes) {
    throw logic_error("write_npz: writing '" + path + "' failed (disk full?); the partial file was removed");
  }
}

/// Sizes and offsets from `max32` on take zip64 records (0xFFFFFFFF; tests pass less to run the
/// zip64 path on small archives).
inline constexpr std::uint64_t npz_zip64_from = 0xFFFFFFFFu;

/// The central directory and its end records (zip64 ones where an offset or count needs them).
inline std::string npz_central_directory(const std::vector<npz_written>& w, std::uint64_t cd_offset,
                                         std::uint64_t max32) {
  std::string cd;
  for (const npz_written& m : w) {
    const bool big_size = m.size >= max32, big_offset = m.offset >= max32;
    std::string extra;
    if (big_size || big_offset) {
      std::string f;
      if (big_size) {
        npz_put(f, m.size, 8);  // uncompressed, then compressed (the same: stored)
        npz_put(f, m.size, 8);
      }
      if (big_offset) npz_put(f, m.offset, 8);
      npz_put(extra, 0x0001, 2);
      npz_put(extra, f.size(), 2);
      extra += f;
    }
    npz_put(cd, 0x02014b50u, 4);
    npz_put(cd, 45, 2);  // made by: 4.5 (zip64)
    npz_put_entry(cd, !extra.empty(), m.crc, m.size, big_size, m.name.size());
    npz_put(cd, extra.size(), 2);
    npz_put(cd, 0, 2);  // comment
    npz_put(cd, 0, 2);  // disk
    npz_put(cd, 0, 2);  // internal attributes
    npz_put(cd, 0, 4);  // external attributes
    npz_put(cd, big_offset ? 0xFFFFFFFFu : m.offset, 4);
    cd += m.name;
    cd += extra;
  }
  const std::uint64_t cd_size = cd.size(), end64 = cd_offset + cd_size;
  const bool zip64 = cd_offset >= max32 || cd_size >= max32 || w.size() >= 0xFFFFu;
  if (zip64) {
    npz_put(cd, 0x06064b50u, 4);  // zip64 end of central directory
    npz_put(cd, 44, 8);
    npz_put(cd, 45, 2);
    npz_put(cd, 45, 2);
    npz_put(cd, 0, 4);
    npz_put(cd, 0, 4);
    npz_put(cd, w.size(), 8);
    npz_put(cd, w.size(), 8);
    npz_put(cd, cd_size, 8);
    npz_put(cd, cd_offset, 8);
    npz_put(cd, 0x07064b50u, 4);  // its locator
    npz_put(cd, 0, 4);
    npz_put(cd, end64, 8);
    npz_put(cd, 1, 4);
  }
  npz_put(cd, 0x06054b50u, 4);
  npz_put(cd, 0, 2);
  npz_put(cd, 0, 2);
  npz_put(cd, zip64 ? 0xFFFFu : w.size(), 2);
  npz_put(cd, zip64 ? 0xFFFFu : w.size(), 2);
  npz_put(cd, zip64 ? 0xFFFFFFFFu : cd_size, 4);
  npz_put(cd, zip64 ? 0xFFFFFFFFu : cd_offset, 4);
  npz_put(cd, 0, 2);
  return cd;
}

/// The local header of member x (stored; zip64 sizes from `max32` on).
inline std::string npz_local_header(const npz_written& x, std::uint64_t max32) {
  const bool big = x.size >= max32;
  std::string local;
  npz_put(local, 0x04034b50u, 4);
  npz_put_entry(local, big, x.crc, x.size, big, x.name.size());
  npz_put(local, big ? 20 : 0, 2);
  local += x.name;
  if (big) {
    npz_put(local, 0x0001, 2);
    npz_put(local, 16, 2);
    npz_put(local, x.size, 8);
    npz_put(local, x.size, 8);
  }
  return local;
}

/// write_npz with zip64 records from `max32` on.
inline void write_npz_from(const std::string& path, const std::vector<npz_member>& members, std::uint64_t max32) {
  // Every member checked before the file is opened.
  std::vector<std::string> headers;
  for (const npz_member& m : members) {
    const std::string who = "write_npz '" + path + "': member '" + m.name + "'";
    if (m.name.empty()) throw logic_error("write_npz '" + path + "': a member has no name");
    const std::int64_t elements = npy_shape_elements(m.shape);
    const std::size_t item = npy_descr_itemsize(m.descr);
    if (item == 0) throw logic_error(who + ": descr '" + m.descr + "' is not one this writer knows");
    if (m.bytes != static_cast<std::size_t>(elements) * item) {
      throw logic_error(who + " has " + std::to_string(m.bytes) + " bytes; descr '" + m.descr + "' and its shape need " +
                        std::to_string(static_cast<std::size_t>(elements) * item));
    }
    if (m.bytes != 0 && m.data == nullptr) throw logic_error(who + " has no data");
    headers.push_back(make_npy_header_descr(m.descr, m.shape));
  }
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw logic_error("write_npz: cannot open '" + path + "' for writing");
  try {
    std::vector<npz_written> w;
    std::uint64_t at = 0;
    for (std::size_t i = 0; i < members.size(); ++i) {
      const npz_member& m = members[i];
      const std::string& header = headers[i];
      npz_written x;
      x.name = m.name + ".npy";
      x.size = header.size() + m.bytes;
      x.offset = at;
      x.crc = crc32(m.data, m.bytes, crc32(header.data(), header.size()));
      const std::string local = npz_local_header(x, max32);
      npz_write(f, local.data(), local.size(), path);
      npz_write(f, header.data(), header.size(), path);
      npz_write(f, m.data, m.bytes, path);
      at += local.size() + x.size;
      w.push_back(std::move(x));
    }
    const std::string cd = npz_central_directory(w, at, max32);
    npz_write(f, cd.data(), cd.size(), path);
  } catch (...) {
    std::fclose(f);
    std::remove(path.c_str());
    throw;
  }
  if (std::fclose(f) != 0) {
    std::remove(path.c_str());
    throw logic_error("write_npz: closing '" + path + "' failed (disk full?); the partial file was removed");
  }
}

}  // namespace detail

/// Writes the members as an .npz archive at `path` (stored, as np.savez writes it; np.load reads
/// it). Each member's bytes must match its descr and shape (checked). Throws logic_error naming
/// the archive and the member.
inline void write_npz(const std::string& path, const std::vector<npz_member>& members) {
  detail::write_npz_from(path, members, detail::npz_zip64_from);
}

/// A sparse matrix in SciPy's CSR .npz layout (scipy.sparse.save_npz's members: data, indices,
/// indptr, format "csr", shape), which scipy.sparse.load_npz reads as a csr_matrix: row i's
/// entries are [indptr[i], indptr[i + 1]) of `indices` and `data`. Checked first (nothing is
/// written otherwise): indptr has rows + 1 entries from 0, never falling, ending at the size of
/// indices and data; every index in [0, cols).
template <class V, class I>
void write_csr_npz(const std::string& path, std::int64_t rows, std::int64_t cols, const std::vector<std::int64_t>& indptr,
                   const std::vector<I>& indices, const std::vector<V>& data) {
  const std::string who = "write_csr_npz '" + path + "': ";
  if (rows < 0 || cols < 0) throw logic_error(who + "negative shape (" + std::to_string(rows) + ", " + std::to_string(cols) + ")");
  if (indptr.size() != static_cast<std::size_t>(rows) + 1) {
    throw logic_error(who + "indptr has " + std::to_string(indptr.size()) + " entries, rows + 1 = " + std::to_string(rows + 1));
  }
  if (indices.size() != data.size()) {
    throw logic_error(who + "indices has " + std::to_string(indices.size()) + " entries, data " + std::to_string(data.size()));
  }
  if (indptr[0] != 0 || indptr.back() != static_cast<std::int64_t>(indices.size())) {
    throw logic_error(who + "indptr runs from " + std::to_string(indptr[0]) + " to " + std::to_string(indptr.back()) +
                      ", not from 0 to the " + std::to_string(indices.size()) + " entries");
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    if (indptr[static_cast<std::size_t>(r) + 1] < indptr[static_cast<std::size_t>(r)]) {
      throw logic_error(who + "indptr falls at row " + std::to_string(r));
    }
  }
  for (std::size_t e = 0; e < indices.size(); ++e) {
    if (indices[e] < 0 || static_cast<std::int64_t>(indices[e]) >= cols) {
      throw logic_error(who + "index " + std::to_string(indices[e]) + " of entry " + std::to_string(e) +
                        " is outside [0, " + std::to_string(cols) + ")");
    }
  }
  static const char format[3] = {'c', 's', 'r'};
  const std::vector<std::int64_t> shape{rows, cols};
  write_npz(path, {npz_array("indices", indices), npz_array("indptr", indptr),
                   npz_member{"format", "|S3", {}, format, sizeof(format)}, npz_array("shape", shape),
                   npz_array("data", data)});
}

}  // namespace spillway::io
