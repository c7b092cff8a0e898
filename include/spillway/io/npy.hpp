// spillway/io/npy.hpp — reading and writing NumPy .npy files (host only, no NumPy needed).
//
// Supported: arrays of uint8 ('|u1'), bool ('|b1'), int8 ('|i1'), uint16 ('<u2'), int32 ('<i4'),
// int64 ('<i8'), float16 ('<f2': __half), float32 ('<f4'), float64 ('<f8'), complex64 ('<c8':
// std::complex<float> or cuda::std::complex<float>) and complex128 ('<c16'); header versions 1.0,
// 2.0 and 3.0. C order is read as is; a Fortran-order file (np.asfortranarray, MATLAB exports) is
// read and transposed into C order by read_npy. Anything else (big-endian data, object arrays,
// structured dtypes) is a spillway::logic_error that says what was found.
#pragma once

#include <spillway/core/error.hpp>

#include <cuda/std/complex>

#include <complex>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

// Declared as cuda_fp16.h declares it: __half names the float16 dtype even where CUDA's half
// header is absent (CCCL's complex brings it in unless CCCL_DISABLE_FP16_SUPPORT), since reading a
// '<f2' file does no arithmetic on the elements. Writing __half values needs the complete type.
struct __half;

namespace spillway::io {

/// The element types a .npy file may hold here.
enum class npy_dtype { u1, b1, i1, u2, i4, i8, f2, f4, f8, c8, c16 };

/// NumPy's descr string for a dtype ("|u1", "<f4", ...).
inline const char* npy_descr(npy_dtype t) noexcept {
  switch (t) {
    case npy_dtype::u1: return "|u1";
    case npy_dtype::b1: return "|b1";
    case npy_dtype::i1: return "|i1";
    case npy_dtype::u2: return "<u2";
    case npy_dtype::i4: return "<i4";
    case npy_dtype::i8: return "<i8";
    case npy_dtype::f2: return "<f2";
    case npy_dtype::f4: return "<f4";
    case npy_dtype::f8: return "<f8";
    case npy_dtype::c8: return "<c8";
    case npy_dtype::c16: return "<c16";
  }
  return "?";
}

/// Bytes per element.
inline std::size_t npy_itemsize(npy_dtype t) noexcept {
  switch (t) {
    case npy_dtype::u1:
    case npy_dtype::b1:
    case npy_dtype::i1: return 1;
    case npy_dtype::u2:
    case npy_dtype::f2: return 2;
    case npy_dtype::i4:
    case npy_dtype::f4: return 4;
    case npy_dtype::i8:
    case npy_dtype::f8:
    case npy_dtype::c8: return 8;
    case npy_dtype::c16: return 16;
  }
  return 0;
}

/// The dtype that stores a C++ type T.
template <class T>
constexpr npy_dtype npy_dtype_of() {
  if constexpr (std::is_same_v<T, bool>) return npy_dtype::b1;
  else if constexpr (std::is_same_v<T, std::uint8_t>) return npy_dtype::u1;
  else if constexpr (std::is_same_v<T, std::int8_t>) return npy_dtype::i1;
  else if constexpr (std::is_same_v<T, std::uint16_t>) return npy_dtype::u2;
  else if constexpr (std::is_same_v<T, std::int32_t>) return npy_dtype::i4;
  else if constexpr (std::is_same_v<T, std::int64_t>) return npy_dtype::i8;
  else if constexpr (std::is_same_v<T, ::__half>) return npy_dtype::f2;
  else if constexpr (std::is_same_v<T, float>) return npy_dtype::f4;
  else if constexpr (std::is_same_v<T, std::complex<float>> || std::is_same_v<T, cuda::std::complex<float>>)
    return npy_dtype::c8;
  else if constexpr (std::is_same_v<T, std::complex<double>> || std::is_same_v<T, cuda::std::complex<double>>)
    return npy_dtype::c16;
  else {
    static_assert(std::is_same_v<T, double>, "npy: unsupported element type");
    return npy_dtype::f8;
  }
}

/// Elements of a shape: 0 where any extent is 0 (a header may then give the other extents any
/// size: they are never multiplied), else the product of the extents.
inline std::int64_t npy_shape_elements(const std::vector<std::int64_t>& shape) noexcept {
  for (auto d : shape)
    if (d == 0) return 0;
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

/// What a .npy header says.
struct npy_header {
  npy_dtype dtype = npy_dtype::u1;
  std::vector<std::int64_t> shape;  ///< () for a scalar
  std::size_t data_offset = 0;      ///< bytes from the start of the file to the first element
  int major_version = 1;
  bool fortran_order = false;  ///< the file's layout (read_npy always returns C order)

  /// Number of elements (1 for a scalar).
  [[nodiscard]] std::int64_t count() const noexcept { return npy_shape_elements(shape); }
  [[nodiscard]] std::size_t data_bytes() const noexcept {
    return static_cast<std::size_t>(count()) * npy_itemsize(dtype);
  }
};

/// A whole .npy array in host memory.
struct npy_array {
  npy_header header;
  std::vector<unsigned char> bytes;  ///< the raw elements, C order, little-endian

  /// The elements as T; throws logic_error when T is not the file's dtype.
  template <class T>
  [[nodiscard]] const T* data() const {
    if (npy_dtype_of<T>() != header.dtype) {
      throw logic_error(std::string("npy_array::data: the array holds ") + npy_descr(header.dtype) +
                        ", not " + npy_descr(npy_dtype_of<T>()));
    }
    return reinterpret_cast<const T*>(bytes.data());
  }
};

namespace detail {

inline const char npy_magic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

inline std::string npy_where(const std::string& path) { return path.empty() ? "npy" : "npy '" + path + "'"; }

// Finds `'key':` in a header dict and returns the position just after the colon.
inline std::size_t npy_find_key(const std::string& h, const char* key, const std::string& path) {
  const std::string k1 = std::string("'") + key + "'";
  const std::string k2 = std::string("\"") + key + "\"";
  std::size_t p = h.find(k1);
  std::size_t len = k1.size();
  if (p == std::string::npos) {
    p = h.find(k2);
    len = k2.size();
  }
  if (p == std::string::npos) {
    throw logic_error(npy_where(path) + ": header has no '" + key + "' entry: " + h);
  }
  p += len;
  while (p < h.size() && (h[p] == ' ')) ++p;
  if (p >= h.size() || h[p] != ':') throw logic_error(npy_where(path) + ": malformed header near '" + key + "': " + h);
  ++p;
  while (p < h.size() && h[p] == ' ') ++p;
  return p;
}

inline npy_header parse_npy_dict(const std::string& h, const std::string& path) {
  npy_header r;
  // descr
  {
    std::size_t p = npy_find_key(h, "descr", path);
    if (p >= h.size() || (h[p] != '\'' && h[p] != '"')) {
      throw logic_error(npy_where(path) + ": unsupported dtype (structured or not a string): " + h);
    }
    const char q = h[p];
    const std::size_t e = h.find(q, p + 1);
    if (e == std::string::npos) throw logic_error(npy_where(path) + ": malformed descr in header: " + h);
    std::string d = h.substr(p + 1, e - p - 1);
    // One-byte types may be written with '|', '<', '>' or '='; wider ones must be little-endian.
    auto one_byte = [&](const char* base) {
      return d == std::string("|") + base || d == std::string("<") + base || d == std::string(">") + base ||
             d == std::string("=") + base;
    };
    if (one_byte("u1")) r.dtype = npy_dtype::u1;
    else if (one_byte("b1") || d == "?") r.dtype = npy_dtype::b1;
    else if (one_byte("i1")) r.dtype = npy_dtype::i1;
    else if (d == "<u2") r.dtype = npy_dtype::u2;
    else if (d == "<i4") r.dtype = npy_dtype::i4;
    else if (d == "<i8") r.dtype = npy_dtype::i8;
    else if (d == "<f2") r.dtype = npy_dtype::f2;
    else if (d == "<f4") r.dtype = npy_dtype::f4;
    else if (d == "<f8") r.dtype = npy_dtype::f8;
    else if (d == "<c8") r.dtype = npy_dtype::c8;
    else if (d == "<c16") r.dtype = npy_dtype::c16;
    else {
      throw logic_error(npy_where(path) + ": unsupported dtype '" + d +
                        "' (supported: |u1 |b1 |i1 <u2 <i4 <i8 <f2 <f4 <f8 <c8 <c16; big-endian data is not)");
    }
  }
  // fortran_order
  {
    const std::size_t p = npy_find_key(h, "fortran_order", path);
    if (h.compare(p, 4, "True") == 0) r.fortran_order = true;
    else if (h.compare(p, 5, "False") != 0) throw logic_error(npy_where(path) + ": malformed fortran_order: " + h);
  }
  // shape
  {
    std::size_t p = npy_find_key(h, "shape", path);
    if (p >= h.size() || h[p] != '(') throw logic_error(npy_where(path) + ": malformed shape: " + h);
    ++p;
    const std::size_t e = h.find(')', p);
    if (e == std::string::npos) throw logic_error(npy_where(path) + ": malformed shape: " + h);
    std::size_t q = p;
    while (q < e) {
      while (q < e && (h[q] == ' ' || h[q] == ',')) ++q;
      if (q >= e) break;
      std::size_t z = q;
      while (z < e && h[z] >= '0' && h[z] <= '9') ++z;
      if (z == q) throw logic_error(npy_where(path) + ": malformed shape entry: " + h);
      // Allow a trailing 'L' (Python 2 longs).
      std::int64_t v = 0;
      for (std::size_t t = q; t < z; ++t) {
        if (v > (std::numeric_limits<std::int64_t>::max() - 9) / 10) {
          throw logic_error(npy_where(path) + ": shape entry too large: " + h);
        }
        v = v * 10 + (h[t] - '0');
      }
      r.shape.push_back(v);
      q = z;
      if (q < e && h[q] == 'L') ++q;
    }
  }
  // Element count and bytes must fit in 64 bits (a zero extent makes any shape empty).
  bool empty = false;
  for (auto d : r.shape) empty = empty || d == 0;
  if (!empty) {
    const auto item = static_cast<std::int64_t>(npy_itemsize(r.dtype));
    std::int64_t n = 1;
    for (auto d : r.shape) {
      if (n > std::numeric_limits<std::int64_t>::max() / item / d) {
        throw logic_error(npy_where(path) + ": shape overflows 64-bit byte counts: " + h);
      }
      n *= d;
    }
  }
  return r;
}

/// Header prefix (magic, version, header length) and dict from the first `size` bytes at `p`.
inline npy_header parse_npy_header_bytes(const unsigned char* p, std::size_t size, const std::string& path) {
  if (size < 8 || std::memcmp(p, npy_magic, 6) != 0) {
    throw logic_error(npy_where(path) + ": not a .npy file (missing \\x93NUMPY magic)");
  }
  const int major = p[6];
  std::size_t hlen = 0;
  std::size_t prefix = 0;
  if (major == 1) {
    prefix = 10;
    if (size < prefix) throw logic_error(npy_where(path) + ": truncated header");
    hlen = static_cast<std::size_t>(p[8]) | (static_cast<std::size_t>(p[9]) << 8);
  } else if (major == 2 || major == 3) {
    prefix = 12;
    if (size < prefix) throw logic_error(npy_where(path) + ": truncated header");
    hlen = static_cast<std::size_t>(p[8]) | (static_cast<std::size_t>(p[9]) << 8) |
           (static_cast<std::size_t>(p[10]) << 16) | (static_cast<std::size_t>(p[11]) << 24);
  } else {
    throw logic_error(npy_where(path) + ": unsupported .npy format version " + std::to_string(major) + "." +
                      std::to_string(static_cast<unsigned>(p[7])) + " (supported: 1.0, 2.0, 3.0)");
  }
  if (hlen > (std::size_t{1} << 24)) {
    throw logic_error(npy_where(path) + ": header length " + std::to_string(hlen) + " is implausible");
  }
  if (size - prefix < hlen) {
    throw logic_error(npy_where(path) + ": truncated header: it claims " + std::to_string(hlen) + " bytes, " +
                      std::to_string(size - prefix) + " follow");
  }
  npy_header r = parse_npy_dict(std::string(reinterpret_cast<const char*>(p) + prefix, hlen), path);
  r.data_offset = prefix + hlen;
  r.major_version = major;
  return r;
}

/// Throws unless `available` bytes (the file's size) hold the data the header promises; checked
/// before anything is allocated, so a lying header costs nothing.
inline void npy_check_size(const npy_header& h, std::size_t available, const std::string& who, const std::string& path) {
  const std::size_t need = h.data_bytes();
  if (available < h.data_offset || available - h.data_offset < need) {
    const std::size_t have = available < h.data_offset ? 0 : available - h.data_offset;
    throw logic_error(who + ": " + npy_where(path) + " is truncated: the header promises " + std::to_string(need) +
                      " data bytes, the file holds " + std::to_string(have));
  }
}

}  // namespace detail

/// Reads and checks a .npy header from `in` (positioned at the file's start). Leaves `in` at the
/// first element. `path` only names the file in messages.
inline npy_header read_npy_header(std::istream& in, const std::string& path = "") {
  unsigned char pre[12] = {};
  in.read(reinterpret_cast<char*>(pre), 8);
  if (!in || std::memcmp(pre, detail::npy_magic, 6) != 0) {
    throw logic_error(detail::npy_where(path) + ": not a .npy file (missing \\x93NUMPY magic)");
  }
  const std::size_t prefix = pre[6] == 1 ? 10 : (pre[6] == 2 || pre[6] == 3) ? 12 : 8;
  if (prefix > 8) in.read(reinterpret_cast<char*>(pre) + 8, static_cast<std::streamsize>(prefix - 8));
  if (!in) throw logic_error(detail::npy_where(path) + ": truncated header");
  // Parse the prefix alone first (it checks the version and bounds the header's length).
  std::size_t hlen = 0;
  if (prefix == 10) hlen = static_cast<std::size_t>(pre[8]) | (static_cast<std::size_t>(pre[9]) << 8);
  if (prefix == 12) {
    hlen = static_cast<std::size_t>(pre[8]) | (static_cast<std::size_t>(pre[9]) << 8) |
           (static_cast<std::size_t>(pre[10]) << 16) | (static_cast<std::size_t>(pre[11]) << 24);
  }
  if (prefix == 8 || hlen > (std::size_t{1} << 24)) return detail::parse_npy_header_bytes(pre, prefix, path);  // throws
  std::string whole(reinterpret_cast<const char*>(pre), prefix);
  whole.resize(prefix + hlen);
  in.read(whole.data() + prefix, static_cast<std::streamsize>(hlen));
  if (!in) throw logic_error(detail::npy_where(path) + ": truncated header");
  return detail::parse_npy_header_bytes(reinterpret_cast<const unsigned char*>(whole.data()), whole.size(), path);
}

namespace detail {
/// Fortran-order elements (first index fastest) to C order (last index fastest), any rank.
inline std::vector<unsigned char> npy_fortran_to_c(const std::vector<unsigned char>& f,
                                                   const std::vector<std::int64_t>& shape, std::size_t item) {
  std::vector<unsigned char> c(f.size());
  const std::size_t rank = shape.size();
  const std::int64_t n = npy_shape_elements(shape);
  if (n == 0 || rank < 2) return f;
  std::vector<std::int64_t> fstride(rank), idx(rank, 0);
  std::int64_t s = 1;
  for (std::size_t d = 0; d < rank; ++d) {
    fstride[d] = s;
    s *= shape[d];
  }
  // Walk the output in C order, carrying the Fortran offset along with the index.
  std::int64_t off = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    std::memcpy(c.data() + static_cast<std::size_t>(i) * item, f.data() + static_cast<std::size_t>(off) * item, item);
    for (std::size_t d = rank; d-- > 0;) {
      if (++idx[d] < shape[d]) {
        off += fstride[d];
        break;
      }
      off -= fstride[d] * (shape[d] - 1);
      idx[d] = 0;
    }
  }
  return c;
}
}  // namespace detail

/// Reads a whole .npy file; a Fortran-order file comes back in C order (header.fortran_order
/// says what the file held). A header that promises more data than the file holds is refused
/// before anything is allocated.
inline npy_array read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw logic_error("read_npy: cannot open '" + path + "'");
  in.seekg(0, std::ios::end);
  const auto end = in.tellg();
  in.seekg(0, std::ios::beg);
  if (end < 0) throw logic_error("read_npy: cannot find the size of '" + path + "'");
  npy_array a;
  a.header = read_npy_header(in, path);
  detail::npy_check_size(a.header, static_cast<std::size_t>(end), "read_npy", path);
  const std::size_t n = a.header.data_bytes();
  a.bytes.resize(n);
  if (n > 0) in.read(reinterpret_cast<char*>(a.bytes.data()), static_cast<std::streamsize>(n));
  if (n > 0 && (!in || static_cast<std::size_t>(in.gcount()) != n)) {
    throw logic_error("read_npy: '" + path + "' is truncated: the header promises " + std::to_string(n) +
                      " data bytes");
  }
  if (a.header.fortran_order) a.bytes = detail::npy_fortran_to_c(a.bytes, a.header.shape, npy_itemsize(a.header.dtype));
  return a;
}

/// Reads a .npy file that is already in memory (`size` bytes at `data`: a file's contents, a
/// member of an archive, a network message); the same checks and result as read_npy. `name` only
/// names the source in messages.
inline npy_array read_npy_bytes(const void* data, std::size_t size, const std::string& name = "") {
  if (data == nullptr && size > 0) throw logic_error("read_npy_bytes: data is null for " + std::to_string(size) + " bytes");
  const auto* p = static_cast<const unsigned char*>(data);
  npy_array a;
  a.header = detail::parse_npy_header_bytes(p, p == nullptr ? 0 : size, name);
  detail::npy_check_size(a.header, size, "read_npy_bytes", name);
  const std::size_t n = a.header.data_bytes();
  a.bytes.assign(p + a.header.data_offset, p + a.header.data_offset + n);
  if (a.header.fortran_order) a.bytes = detail::npy_fortran_to_c(a.bytes, a.header.shape, npy_itemsize(a.header.dtype));
  return a;
}

/// A .npy file mapped read-only into memory (POSIX mmap) instead of read: for files larger than
/// RAM, or to read a few rows of a big one. Pages are read from disk as they are touched; the
/// mapping (and every pointer from data()) lives as long as this object. C order only (a
/// Fortran-order file needs read_npy, which transposes it). Host memory that is not page-locked:
/// spillway's streamed jobs stage it like any pageable array.
class npy_mapping {
 public:
  explicit npy_mapping(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw logic_error("map_npy: cannot open '" + path + "'");
    header_ = read_npy_header(in, path);
    if (header_.fortran_order) {
      throw logic_error("map_npy: '" + path + "' is in Fortran order; read_npy transposes it, a mapping cannot");
    }
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) throw logic_error("map_npy: cannot open '" + path + "'");
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      ::close(fd);
      throw logic_error("map_npy: cannot stat '" + path + "'");
    }
    size_ = static_cast<std::size_t>(st.st_size);
    try {
      detail::npy_check_size(header_, size_, "map_npy", path);
    } catch (...) {
      ::close(fd);
      throw;
    }
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        ::close(fd);
        throw logic_error("map_npy: cannot map '" + path + "' (" + std::to_string(size_) + " bytes)");
      }
      base_ = static_cast<const unsigned char*>(p);
    }
    ::close(fd);  // the mapping keeps the file
  }
  ~npy_mapping() {
    if (base_ != nullptr) ::munmap(const_cast<unsigned char*>(base_), size_);
  }
  npy_mapping(const npy_mapping&) = delete;
  npy_mapping& operator=(const npy_mapping&) = delete;
  npy_mapping(npy_mapping&& o) noexcept
      : header_(std::move(o.header_)), base_(std::exchange(o.base_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  npy_mapping& operator=(npy_mapping&& o) noexcept {
    if (this != &o) {
      if (base_ != nullptr) ::munmap(const_cast<unsigned char*>(base_), size_);
      header_ = std::move(o.header_);
      base_ = std::exchange(o.base_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }

  [[nodiscard]] const npy_header& header() const noexcept { return header_; }
  /// The elements as T (C order); throws logic_error when T is not the file's dtype.
  template <class T>
  [[nodiscard]] const T* data() const {
    if (npy_dtype_of<T>() != header_.dtype) {
      throw logic_error(std::string("npy_mapping::data: the file holds ") + npy_descr(header_.dtype) + ", not " +
                        npy_descr(npy_dtype_of<T>()));
    }
    return reinterpret_cast<const T*>(base_ + header_.data_offset);
  }
  /// The elements' bytes, whatever the dtype (header().data_bytes() of them).
  [[nodiscard]] const unsigned char* bytes() const noexcept { return base_ == nullptr ? nullptr : base_ + header_.data_offset; }

 private:
  npy_header header_;
  const unsigned char* base_ = nullptr;
  std::size_t size_ = 0;
};

/// Maps a .npy file read-only (see npy_mapping).
inline npy_mapping map_npy(const std::string& path) { return npy_mapping(path); }

namespace detail {

/// The header bytes (magic through padding) for an array of NumPy descr `descr` (any, e.g. "|S3"
/// for the .npz format string); version 1.0 when it fits, else 2.0.
inline std::string make_npy_header_descr(const std::string& descr, const std::vector<std::int64_t>& shape) {
  std::string dict = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) throw logic_error("write_npy: shape[" + std::to_string(i) + "] is negative: " + std::to_string(shape[i]));
    dict += std::to_string(shape[i]);
    if (shape.size() == 1 || i + 1 < shape.size()) dict += ", ";
  }
  if (shape.size() == 1) dict.pop_back();  // "(5,)"
  dict += "), }";
  // Total header (prefix + dict + padding + '\n') is a multiple of 64, as NumPy writes it.
  auto build = [&](int major) {
    const std::size_t prefix = major == 1 ? 10 : 12;
    std::size_t total = prefix + dict.size() + 1;
    const std::size_t padded = (total + 63) / 64 * 64;
    std::string body = dict + std::string(padded - total, ' ') + "\n";
    std::string out(detail::npy_magic, 6);
    out += static_cast<char>(major);
    out += '\0';
    const std::size_t hl = body.size();
    out += static_cast<char>(hl & 0xFF);
    out += static_cast<char>((hl >> 8) & 0xFF);
    if (major != 1) {
      out += static_cast<char>((hl >> 16) & 0xFF);
      out += static_cast<char>((hl >> 24) & 0xFF);
    }
    return out + body;
  };
  std::string v1 = build(1);
  if (v1.size() - 10 <= 0xFFFF) return v1;
  return build(2);
}

}  // namespace detail

/// The header bytes (magic through padding) for an array; version 1.0 when it fits, else 2.0.
inline std::string make_npy_header(npy_dtype dtype, const std::vector<std::int64_t>& shape) {
  return detail::make_npy_header_descr(npy_descr(dtype), shape);
}

/// Writes `count = prod(shape)` elements of T from `data` as a C-order .npy file.
template <class T>
void write_npy(const std::string& path, const T* data, const std::vector<std::int64_t>& shape) {
  const std::string header = make_npy_header(npy_dtype_of<T>(), shape);
  const std::int64_t n = npy_shape_elements(shape);
  if (n > 0 && data == nullptr) throw logic_error("write_npy: data is null for " + std::to_string(n) + " elements");
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw logic_error("write_npy: cannot open '" + path + "' for writing");
  bool ok = std::fwrite(header.data(), 1, header.size(), f) == header.size();
  if (ok && n > 0) {
    const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(T);
    ok = std::fwrite(data, 1, bytes, f) == bytes;
  }
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) throw logic_error("write_npy: writing '" + path + "' failed (disk full?)");
}

template <class T>
void write_npy(const std::string& path, const std::vector<T>& v, const std::vector<std::int64_t>& shape) {
  const std::int64_t n = npy_shape_elements(shape);
  if (static_cast<std::int64_t>(v.size()) != n) {
    throw logic_error("write_npy: vector has " + std::to_string(v.size()) + " elements but the shape holds " +
                      std::to_string(n));
  }
  write_npy(path, v.data(), shape);
}

}  // namespace spillway::io
