// spillway/gram/bit_matrix.hpp — a 0/1 matrix packed 32 columns per word, and host packing.
//
// Layout (shared with the tile kernels): row-major; each row is `ld_words` 32-bit words with
// ld_words a multiple of 32 (1024 bits = 128 bytes per row block); bit c of a row is bit (c % 32)
// of word (c / 32), least significant first; every padding bit is zero; the base pointer is
// 128-byte aligned. Zero padding is what lets the kernels run whole 1024-bit blocks: a padding
// bit never adds to a popcount.
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/core/host_memory.hpp>
#include <spillway/core/pinned_buffer.hpp>

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace spillway::gram {

/// Bits per word and words per 1024-bit row block.
inline constexpr std::int64_t bits_per_word = 32;
inline constexpr std::int64_t words_per_block = 32;

/// Words per row for `cols` columns: a multiple of 32, at least 32 (a zero-column matrix still has
/// one all-zero block so every operand pointer is valid).
inline std::int64_t padded_words(std::int64_t cols) {
  if (cols < 0) throw logic_error("padded_words: cols must be >= 0, got " + std::to_string(cols));
  const std::int64_t blocks = (cols + 1023) / 1024;
  return (blocks == 0 ? 1 : blocks) * words_per_block;
}

/// A non-owning view of a packed bit matrix (host or device memory, as the owner says).
struct bit_matrix_view {
  const std::uint32_t* words = nullptr;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t ld_words = 0;

  [[nodiscard]] std::int64_t size_words() const noexcept { return rows * ld_words; }
  [[nodiscard]] std::size_t size_bytes() const noexcept { return static_cast<std::size_t>(size_words()) * 4u; }
  [[nodiscard]] const std::uint32_t* row(std::int64_t r) const noexcept { return words + r * ld_words; }
  /// Bit (r, c) (host memory only).
  [[nodiscard]] bool get(std::int64_t r, std::int64_t c) const noexcept {
    return ((row(r)[c >> 5] >> (c & 31)) & 1u) != 0u;
  }
};

namespace detail {
inline void check_view(const bit_matrix_view& v, const char* who, const char* name) {
  if (v.rows < 0 || v.cols < 0) {
    throw logic_error(std::string(who) + ": " + name + " has negative shape " + std::to_string(v.rows) + " x " +
                      std::to_string(v.cols));
  }
  if (v.ld_words < padded_words(v.cols) || v.ld_words % words_per_block != 0) {
    throw logic_error(std::string(who) + ": " + name + ".ld_words is " + std::to_string(v.ld_words) +
                      "; it must be a multiple of 32 and at least " + std::to_string(padded_words(v.cols)) +
                      " for " + std::to_string(v.cols) + " columns");
  }
  if (v.rows > 0 && v.words == nullptr) throw logic_error(std::string(who) + ": " + name + ".words is null");
  if ((reinterpret_cast<std::uintptr_t>(v.words) & 127u) != 0u) {
    throw logic_error(std::string(who) + ": " + name + ".words is not 128-byte aligned");
  }
}

struct aligned_free {
  void operator()(std::uint32_t* p) const noexcept { ::operator delete(p, std::align_val_t(128)); }
};
}  // namespace detail

/// Where a host bit_matrix keeps its words: host_memory::pageable (ordinary 128-byte-aligned heap
/// memory; also for `detect`) or host_memory::pinned (page-locked by cudaHostAlloc: H2D copies run
/// at full rate and overlap compute). The library's one enum (core/host_memory.hpp), declared here
/// too so that gram::host_memory keeps working and never collides with spillway::host_memory.
using ::spillway::host_memory;

/// An owned packed bit matrix in host memory (zero-initialised, so padding is zero).
class bit_matrix {
 public:
  bit_matrix() = default;
  bit_matrix(std::int64_t rows, std::int64_t cols, host_memory mem = host_memory::pageable)
      : rows_(rows), cols_(cols), mem_(mem == host_memory::detect ? host_memory::pageable : mem) {
    if (rows < 0) throw logic_error("bit_matrix: rows must be >= 0, got " + std::to_string(rows));
    ld_ = padded_words(cols);
    if (rows > 0 && rows > std::numeric_limits<std::int64_t>::max() / 4 / ld_) {
      throw logic_error("bit_matrix: " + std::to_string(rows) + " rows x " + std::to_string(ld_) +
                        " words overflow 64-bit byte counts");
    }
    const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(ld_);
    if (n == 0) return;
    if (mem_ == host_memory::pinned) {
      pinned_ = pinned_buffer<std::uint32_t>(n);
      data_ = pinned_.data();
    } else {
      void* p = ::operator new(n * 4u, std::align_val_t(128), std::nothrow);
      if (p == nullptr) {
        throw out_of_memory("bit_matrix: cannot allocate " + std::to_string(n * 4u) + " bytes of host memory for " +
                                std::to_string(rows) + " x " + std::to_string(cols) + " bits",
                            n * 4u, 0);
      }
      heap_.reset(static_cast<std::uint32_t*>(p));
      data_ = heap_.get();
    }
    std::memset(data_, 0, n * 4u);
  }

  [[nodiscard]] std::int64_t rows() const noexcept { return rows_; }
  [[nodiscard]] std::int64_t cols() const noexcept { return cols_; }
  [[nodiscard]] std::int64_t ld_words() const noexcept { return ld_; }
  [[nodiscard]] host_memory memory() const noexcept { return mem_; }
  [[nodiscard]] std::uint32_t* data() noexcept { return data_; }
  [[nodiscard]] const std::uint32_t* data() const noexcept { return data_; }
  [[nodiscard]] std::uint32_t* row(std::int64_t r) noexcept { return data_ + r * ld_; }
  [[nodiscard]] const std::uint32_t* row(std::int64_t r) const noexcept { return data_ + r * ld_; }
  [[nodiscard]] std::size_t size_bytes() const noexcept {
    return static_cast<std::size_t>(rows_) * static_cast<std::size_t>(ld_) * 4u;
  }
  [[nodiscard]] bit_matrix_view view() const noexcept { return {data_, rows_, cols_, ld_}; }
  operator bit_matrix_view() const noexcept { return view(); }  // NOLINT: a view of what it owns
  [[nodiscard]] bool get(std::int64_t r, std::int64_t c) const noexcept { return view().get(r, c); }
  /// Sets bit (r, c) to v (c < cols()).
  void set(std::int64_t r, std::int64_t c, bool v) noexcept {
    std::uint32_t& w = row(r)[c >> 5];
    const std::uint32_t m = 1u << (c & 31);
    w = v ? (w | m) : (w & ~m);
  }

 private:
  std::int64_t rows_ = 0, cols_ = 0, ld_ = 32;
  host_memory mem_ = host_memory::pageable;
  std::unique_ptr<std::uint32_t, detail::aligned_free> heap_;
  pinned_buffer<std::uint32_t> pinned_;
  std::uint32_t* data_ = nullptr;
};

/// How pack_bits treats values other than 0 and 1.
struct pack_options {
  bool nonzero_as_one = false;  ///< false: any value other than 0/1 is a logic_error
  host_memory memory = host_memory::pageable;
};

namespace detail {

inline constexpr std::uint64_t low_bits = 0x0101010101010101ULL;

// 8 bytes (each 0 or 1, column c+k in byte k, little-endian) -> 8 bits, column c+k in bit k. The
// multiply moves byte k's bit 0 (position 8k) to position 56 + k; no two partial products share
// a position, so no carry disturbs the top byte. Plain 64-bit integer code the compiler
// vectorises, no pext needed.
inline std::uint32_t gather8(std::uint64_t x) noexcept {
  return static_cast<std::uint32_t>(((x & low_bits) * 0x0102040810204080ULL) >> 56);
}

// OR of all bits of each byte, into that byte's bit 0 (the other bits are junk, masked later).
inline std::uint64_t any_bit_per_byte(std::uint64_t x) noexcept {
  x |= x >> 4;
  x |= x >> 2;
  x |= x >> 1;
  return x & low_bits;
}

template <class T>
inline int value_as_int(const T* p) {
  if constexpr (std::is_same_v<T, bool>) {
    unsigned char b;
    std::memcpy(&b, p, 1);
    return b;
  } else {
    return static_cast<int>(*p);
  }
}

// Packs one row; returns the OR of the "not 0/1" bits seen (0 when every byte was 0 or 1).
inline std::uint64_t pack_row(const unsigned char* src, std::int64_t cols, std::uint32_t* dst, std::int64_t ld,
                              bool nonzero_as_one) {
  std::uint64_t bad = 0;
  // 32 bytes (columns) into one word, bit k of byte k.
  const auto pack32 = [&](const unsigned char* p) {
    std::uint64_t x[4];
    std::memcpy(x, p, 32);
    std::uint32_t word = 0;
    for (int k = 0; k < 4; ++k) {
      std::uint64_t v = x[k];
      if (nonzero_as_one) v = any_bit_per_byte(v);
      else bad |= v & ~low_bits;
      word |= gather8(v) << (8 * k);
    }
    return word;
  };
  const std::int64_t full = cols / 32;
  for (std::int64_t w = 0; w < full; ++w) dst[w] = pack32(src + w * 32);
  const std::int64_t rem = cols - full * 32;
  std::int64_t w = full;
  if (rem > 0) {
    unsigned char tail[32] = {};
    std::memcpy(tail, src + full * 32, static_cast<std::size_t>(rem));
    dst[w++] = pack32(tail);
  }
  for (; w < ld; ++w) dst[w] = 0u;
  return bad;
}

template <class T>
bit_matrix pack_wide_bits(const T* data, std::int64_t rows, std::int64_t cols, std::int64_t ld, pack_options opt);

}  // namespace detail

/// Packs a row-major 0/1 matrix (`ld` elements between row starts, default `cols`) into a
/// bit_matrix. Any column count; tail and padding bits are zero. Rows are packed in parallel
/// (OpenMP when available). Unless `opt.nonzero_as_one`, a value other than 0 or 1 throws
/// logic_error naming the first bad (row, column) in row-major order and its value.
///
/// Element types: uint8, int8 and bool are packed straight from memory. Any wider integer type
/// (NumPy's default int64 for an array of Python ints, int32, uint16, ...) is converted row by row
/// into bytes first (a copy of one row per thread, never of the whole matrix), with the same 0/1
/// check: `np.load` of such a file goes through io::read_npy and pack_bits<std::int64_t>.
template <class T>
bit_matrix pack_bits(const T* data, std::int64_t rows, std::int64_t cols, std::int64_t ld = -1,
                     pack_options opt = {}) {
  static_assert(std::is_integral_v<T>, "pack_bits: the input must be bool or an integer type (0/1 values)");
  if constexpr (sizeof(T) > 1) {
    return detail::pack_wide_bits(data, rows, cols, ld < 0 ? cols : ld, opt);
  }
  if (ld < 0) ld = cols;
  if (rows < 0) throw logic_error("pack_bits: rows must be >= 0, got " + std::to_string(rows));
  if (cols < 0) throw logic_error("pack_bits: cols must be >= 0, got " + std::to_string(cols));
  if (ld < cols) throw logic_error("pack_bits: ld (" + std::to_string(ld) + ") is smaller than cols (" + std::to_string(cols) + ")");
  if (rows > 0 && cols > 0 && data == nullptr) throw logic_error("pack_bits: data is null");
  bit_matrix out(rows, cols, opt.memory);
  const auto* bytes = reinterpret_cast<const unsigned char*>(data);
  const std::int64_t ldw = out.ld_words();
  std::int64_t first_bad_row = rows;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) reduction(min : first_bad_row)
#endif
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::uint64_t bad = detail::pack_row(bytes + r * ld, cols, out.row(r), ldw, opt.nonzero_as_one);
    if (bad != 0 && r < first_bad_row) first_bad_row = r;
  }
  if (first_bad_row < rows) {
    const T* row = data + first_bad_row * ld;
    for (std::int64_t c = 0; c < cols; ++c) {
      const int v = detail::value_as_int(row + c);
      if (v != 0 && v != 1) {
        throw logic_error("pack_bits: value " + std::to_string(v) + " at (row " + std::to_string(first_bad_row) +
                          ", column " + std::to_string(c) +
                          ") is not 0 or 1 (set pack_options::nonzero_as_one to treat nonzero as 1)");
      }
    }
  }
  return out;
}

namespace detail {
// Wider integers: each row narrowed to 0/1 bytes in a per-thread buffer, then packed as bytes.
template <class T>
bit_matrix pack_wide_bits(const T* data, std::int64_t rows, std::int64_t cols, std::int64_t ld, pack_options opt) {
  if (rows < 0) throw logic_error("pack_bits: rows must be >= 0, got " + std::to_string(rows));
  if (cols < 0) throw logic_error("pack_bits: cols must be >= 0, got " + std::to_string(cols));
  if (ld < cols) throw logic_error("pack_bits: ld (" + std::to_string(ld) + ") is smaller than cols (" + std::to_string(cols) + ")");
  if (rows > 0 && cols > 0 && data == nullptr) throw logic_error("pack_bits: data is null");
  bit_matrix out(rows, cols, opt.memory);
  const std::int64_t ldw = out.ld_words();
  std::int64_t first_bad_row = rows;
#ifdef _OPENMP
#pragma omp parallel reduction(min : first_bad_row)
#endif
  {
    std::vector<unsigned char> row_bytes(static_cast<std::size_t>(cols));
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* src = data + r * ld;
      bool bad = false;
      for (std::int64_t c = 0; c < cols; ++c) {
        const T v = src[c];
        bad |= !(v == T(0) || v == T(1));
        row_bytes[static_cast<std::size_t>(c)] = v != T(0) ? 1 : 0;
      }
      if (bad && !opt.nonzero_as_one && r < first_bad_row) first_bad_row = r;
      pack_row(row_bytes.data(), cols, out.row(r), ldw, false);
    }
  }
  if (first_bad_row < rows) {
    const T* row = data + first_bad_row * ld;
    for (std::int64_t c = 0; c < cols; ++c) {
      if (!(row[c] == T(0) || row[c] == T(1))) {
        throw logic_error("pack_bits: value " + std::to_string(row[c]) + " at (row " + std::to_string(first_bad_row) +
                          ", column " + std::to_string(c) +
                          ") is not 0 or 1 (set pack_options::nonzero_as_one to treat nonzero as 1)");
      }
    }
  }
  return out;
}
}  // namespace detail

/// Bit order of bytes that already hold 8 columns each.
enum class bit_order {
  big,    ///< column 8j in the byte's most significant bit: np.packbits' default (bitorder='big')
  little  ///< column 8j in the least significant bit: np.packbits(..., bitorder='little')
};

/// A bit_matrix from bytes that are already packed, 8 columns per byte, as np.packbits(a, axis=1)
/// writes them: `rows` rows of `ld_bytes` bytes each (default ceil(cols / 8)), in either bit order.
/// Bits past `cols` in a row's last byte are ignored (cleared), so any column count works.
inline bit_matrix from_packed_bytes(const std::uint8_t* bytes, std::int64_t rows, std::int64_t cols, bit_order order,
                                    std::int64_t ld_bytes = -1, host_memory memory = host_memory::pageable) {
  const std::int64_t row_bytes = (cols + 7) / 8;
  if (ld_bytes < 0) ld_bytes = row_bytes;
  if (rows < 0 || cols < 0) {
    throw logic_error("from_packed_bytes: shape " + std::to_string(rows) + " x " + std::to_string(cols) + " is negative");
  }
  if (ld_bytes < row_bytes) {
    throw logic_error("from_packed_bytes: ld_bytes (" + std::to_string(ld_bytes) + ") is smaller than ceil(cols / 8) = " +
                      std::to_string(row_bytes));
  }
  if (rows > 0 && cols > 0 && bytes == nullptr) throw logic_error("from_packed_bytes: bytes is null");
  bit_matrix out(rows, cols, memory);
  const std::int64_t full_words = cols / 32;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::uint8_t* src = bytes + r * ld_bytes;
    std::uint32_t* dst = out.row(r);
    // spillway's layout is column c in bit c % 32 of word c / 32: little bit order within bytes,
    // little-endian bytes within words.
    for (std::int64_t w = 0; w * 32 < cols; ++w) {
      std::uint32_t word = 0;
      for (int k = 0; k < 4; ++k) {
        const std::int64_t b = w * 4 + k;
        if (b >= row_bytes) break;
        std::uint32_t v = src[b];
        if (order == bit_order::big) {
          v = ((v & 0xF0u) >> 4) | ((v & 0x0Fu) << 4);
          v = ((v & 0xCCu) >> 2) | ((v & 0x33u) << 2);
          v = ((v & 0xAAu) >> 1) | ((v & 0x55u) << 1);
        }
        word |= v << (8 * k);
      }
      if (w == full_words) word &= (1u << (cols % 32)) - 1u;  // the partial last word
      dst[w] = word;
    }
  }
  return out;
}

/// A view of rows [first, first + count) of a bit matrix (host or device memory alike): rows are
/// ld_words apart, so the sub-view keeps the layout every function needs.
inline bit_matrix_view row_range(const bit_matrix_view& m, std::int64_t first, std::int64_t count) {
  if (first < 0 || count < 0 || first + count > m.rows) {
    throw logic_error("row_range: rows [" + std::to_string(first) + ", " + std::to_string(first + count) +
                      ") are not inside the matrix's " + std::to_string(m.rows) + " rows");
  }
  return {m.words + first * m.ld_words, count, m.cols, m.ld_words};
}

template <class T>
bit_matrix pack_bits(const std::vector<T>& data, std::int64_t rows, std::int64_t cols, pack_options opt = {}) {
  if (static_cast<std::int64_t>(data.size()) != rows * cols) {
    throw logic_error("pack_bits: the vector has " + std::to_string(data.size()) + " elements, not rows*cols = " +
                      std::to_string(rows * cols));
  }
  return pack_bits(data.data(), rows, cols, cols, opt);
}

/// The 0/1 bytes of a host bit matrix, row-major rows x cols (for checks).
inline std::vector<std::uint8_t> unpack_bits(const bit_matrix_view& m) {
  detail::check_view(m, "unpack_bits", "m");
  std::vector<std::uint8_t> out(static_cast<std::size_t>(m.rows * m.cols));
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
  for (std::int64_t r = 0; r < m.rows; ++r) {
    const std::uint32_t* w = m.row(r);
    std::uint8_t* o = out.data() + r * m.cols;
    for (std::int64_t c = 0; c < m.cols; ++c) o[c] = static_cast<std::uint8_t>((w[c >> 5] >> (c & 31)) & 1u);
  }
  return out;
}

/// The number of set bits in each row (host).
inline std::vector<std::int32_t> row_popcounts(const bit_matrix_view& m) {
  detail::check_view(m, "row_popcounts", "m");
  std::vector<std::int32_t> out(static_cast<std::size_t>(m.rows));
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
  for (std::int64_t r = 0; r < m.rows; ++r) {
    const std::uint32_t* w = m.row(r);
    std::int64_t s = 0;
    for (std::int64_t k = 0; k < m.ld_words; ++k) s += __builtin_popcount(w[k]);
    out[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(s);
  }
  return out;
}

/// True when every padding bit (columns >= cols, words >= cols/32) is zero.
inline bool padding_is_zero(const bit_matrix_view& m) {
  for (std::int64_t r = 0; r < m.rows; ++r) {
    const std::uint32_t* w = m.row(r);
    for (std::int64_t c = m.cols; c < m.ld_words * 32; ++c) {
      if ((w[c >> 5] >> (c & 31)) & 1u) return false;
    }
  }
  return true;
}

}  // namespace spillway::gram
