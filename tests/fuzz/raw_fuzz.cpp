// Coverage-guided fuzz target for the raw-matrix loader and the packed-bit import behind it
// (libFuzzer; see tests/fuzz/README.md).
//
// Input: 3 x 8 bytes of layout (rows, row_bytes, offset as little-endian int64, any value), one
// flags byte (bit 0 allow_trailing, bit 1 bit order, bits 2-7 a column trim), then the "file".
// read_raw_bytes must refuse a layout that does not fit with spillway::logic_error, or return
// exactly rows * row_bytes bytes from the offset; gram::from_packed_bytes of a small accepted
// matrix must put column c of row r where the source byte's bit says, in both bit orders.
#include <spillway/gram/bit_matrix.hpp>
#include <spillway/io/raw.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {
[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "raw_fuzz: %s\n", what);
  std::abort();
}
std::int64_t le64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  std::int64_t s;
  std::memcpy(&s, &v, 8);
  return s;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace io = spillway::io;
  namespace gram = spillway::gram;
  if (size < 25) return 0;
  io::raw_layout l;
  // Mostly small values (so that layouts are often accepted), sometimes anything.
  const bool wild = (data[24] & 0x80u) != 0;
  l.rows = wild ? le64(data) : static_cast<std::int64_t>(data[0]) - 2;
  l.row_bytes = wild ? le64(data + 8) : static_cast<std::int64_t>(data[8] % 40) - 1;
  l.offset = wild ? le64(data + 16) : static_cast<std::int64_t>(data[16]) - 1;
  l.allow_trailing = (data[24] & 1u) != 0;
  const auto order = (data[24] & 2u) != 0 ? gram::bit_order::big : gram::bit_order::little;
  const int trim = (data[24] >> 2) & 7;
  const std::uint8_t* file = data + 25;
  const std::size_t fsize = size - 25;
  std::vector<unsigned char> m;
  try {
    m = io::read_raw_bytes(file, fsize, l, "fuzz");
  } catch (const spillway::logic_error&) {
    return 0;
  }
  const auto need = static_cast<std::size_t>(l.rows) * static_cast<std::size_t>(l.row_bytes);
  if (m.size() != need) finding("wrong byte count");
  if (l.offset < 0 || static_cast<std::size_t>(l.offset) + need > fsize) finding("accepted a layout past the end");
  if (!l.allow_trailing && static_cast<std::size_t>(l.offset) + need != fsize) finding("accepted trailing bytes");
  if (need > 0 && std::memcmp(m.data(), file + l.offset, need) != 0) finding("bytes differ from the source");
  // The bits as np.packbits rows: columns = 8 * row_bytes - trim (>= 0). A bit_matrix is 128
  // bytes per row at least: a legitimately huge request (millions of empty rows) is skipped,
  // an overflowing one must still be refused by name.
  if (l.row_bytes > (std::int64_t{1} << 40)) return 0;  // more columns than a bit_matrix counts
  const std::int64_t cols = l.row_bytes * 8 - (l.row_bytes > 0 ? trim : 0);
  if (l.rows > (std::int64_t{1} << 16) && l.rows < (std::int64_t{1} << 40)) return 0;
  try {
    const gram::bit_matrix b = gram::from_packed_bytes(m.data(), l.rows, cols, order, l.row_bytes);
    const gram::bit_matrix_view v = b.view();
    if (l.rows * v.ld_words > (std::int64_t{1} << 16)) return 0;  // checked: it was built; too big to walk
    for (std::int64_t r = 0; r < l.rows; ++r) {
      for (std::int64_t c = 0; c < v.ld_words * 32; ++c) {
        const bool got = ((v.row(r)[c / 32] >> (c % 32)) & 1u) != 0;
        bool want = false;
        if (c < cols) {
          const unsigned byte = m[static_cast<std::size_t>(r * l.row_bytes + c / 8)];
          want = ((order == gram::bit_order::big ? byte >> (7 - c % 8) : byte >> (c % 8)) & 1u) != 0;
        }
        if (got != want) finding("from_packed_bytes put a bit in the wrong place (or left padding set)");
      }
    }
  } catch (const spillway::logic_error&) {
    // Only a size that overflows may be refused (e.g. 2^62 rows of 0 columns: each row still
    // takes a 128-byte block); anything smaller is a consistent layout.
    if (l.rows < (std::int64_t{1} << 40)) finding("from_packed_bytes refused a consistent layout");
  } catch (const spillway::out_of_memory&) {
    // a huge row count of empty rows: refused by name, not by a crash (run with
    // ASAN_OPTIONS=allocator_may_return_null=1, as the ctest entries do)
  }
  return 0;
}
