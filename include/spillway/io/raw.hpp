// spillway/io/raw.hpp — reading headerless binary matrices (ndarray.tofile, np.packbits(...).tofile,
// a C program's fwrite): the caller states the shape, the file must hold exactly that many bytes
// after `offset` (or at least that many, when trailing bytes are allowed).
//
// A shape that does not match the file is the common mistake with raw files (a wrong column count,
// bits vs bytes, a forgotten header), so every mismatch is an error that names both sizes, and
// nothing is allocated before the sizes are checked.
#pragma once

#include <spillway/core/error.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

namespace spillway::io {

/// How a raw file is laid out: `rows` rows of `row_bytes` bytes each (C order), starting
/// `offset` bytes into the file.
struct raw_layout {
  std::int64_t rows = 0;
  std::int64_t row_bytes = 0;
  std::int64_t offset = 0;
  /// false (default): the file must end exactly where the matrix does; true: later bytes are
  /// ignored (e.g. a trailer).
  bool allow_trailing = false;
};

namespace detail {
/// Checks `l` against a source of `size` bytes and returns the matrix's byte count.
inline std::size_t raw_check(const raw_layout& l, std::uint64_t size, const std::string& who, const std::string& name) {
  const std::string where = who + (name.empty() ? std::string() : " '" + name + "'");
  if (l.rows < 0) throw logic_error(where + ": rows is negative: " + std::to_string(l.rows));
  if (l.row_bytes < 0) throw logic_error(where + ": row_bytes is negative: " + std::to_string(l.row_bytes));
  if (l.offset < 0) throw logic_error(where + ": offset is negative: " + std::to_string(l.offset));
  if (l.row_bytes > 0 && l.rows > std::numeric_limits<std::int64_t>::max() / l.row_bytes) {
    throw logic_error(where + ": " + std::to_string(l.rows) + " rows x " + std::to_string(l.row_bytes) +
                      " bytes overflows 64-bit sizes");
  }
  const auto need = static_cast<std::uint64_t>(l.rows) * static_cast<std::uint64_t>(l.row_bytes);
  const auto off = static_cast<std::uint64_t>(l.offset);
  if (off > size) {
    throw logic_error(where + ": offset " + std::to_string(l.offset) + " is past the end of the source (" +
                      std::to_string(size) + " bytes)");
  }
  const std::uint64_t have = size > off ? size - off : 0;
  if (have < need || (!l.allow_trailing && have != need)) {
    throw logic_error(where + ": " + std::to_string(l.rows) + " rows x " + std::to_string(l.row_bytes) +
                      " bytes need " + std::to_string(need) + " bytes after offset " + std::to_string(l.offset) +
                      ", the source holds " + std::to_string(have) +
                      (have > need ? " (check the shape, or set allow_trailing)" : " (check the shape and the offset)"));
  }
  if (need > std::numeric_limits<std::size_t>::max()) throw logic_error(where + ": " + std::to_string(need) + " bytes do not fit in memory");
  return static_cast<std::size_t>(need);
}
}  // namespace detail

/// Reads a raw matrix from a file: the bytes of `l.rows` x `l.row_bytes`, C order. For a 0/1
/// matrix of bytes, row_bytes = columns (then gram::pack_bits); for np.packbits output, row_bytes
/// = ceil(columns / 8) (then gram::from_packed_bytes with the bit order it was written in).
inline std::vector<unsigned char> read_raw(const std::string& path, const raw_layout& l) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw logic_error("read_raw: cannot open '" + path + "'");
  in.seekg(0, std::ios::end);
  const auto end = in.tellg();
  if (end < 0) throw logic_error("read_raw: cannot find the size of '" + path + "'");
  const std::size_t n = detail::raw_check(l, static_cast<std::uint64_t>(end), "read_raw", path);
  std::vector<unsigned char> out(n);
  in.seekg(static_cast<std::streamoff>(l.offset), std::ios::beg);
  if (n > 0) in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(n));
  if (n > 0 && (!in || static_cast<std::size_t>(in.gcount()) != n)) {
    throw logic_error("read_raw: reading " + std::to_string(n) + " bytes of '" + path + "' failed");
  }
  return out;
}

/// The same from bytes already in memory (`size` bytes at `data`); `name` only names the source.
inline std::vector<unsigned char> read_raw_bytes(const void* data, std::size_t size, const raw_layout& l,
                                                 const std::string& name = "") {
  if (data == nullptr && size > 0) throw logic_error("read_raw_bytes: data is null for " + std::to_string(size) + " bytes");
  const std::size_t n = detail::raw_check(l, data == nullptr ? 0 : size, "read_raw_bytes", name);
  const auto* p = static_cast<const unsigned char*>(data);
  return n == 0 ? std::vector<unsigned char>{} : std::vector<unsigned char>(p + l.offset, p + l.offset + n);
}

}  // namespace spillway::io
