// Coverage-guided fuzz target for the .npy reader (libFuzzer; see tests/fuzz/README.md).
//
// Each input is a candidate .npy file. Every reader must either refuse it with spillway::logic_error
// or return an array consistent with its header; any other exception, crash, leak, hang or huge
// allocation is a finding. Differential: the in-memory reader, the file reader and the mapping
// must agree byte for byte, and whatever is read must survive write_npy -> read_npy unchanged.
#include <spillway/io/npy.hpp>

#include <cuda_fp16.h>  // write_back<__half> needs the complete type

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>

namespace {

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "npy_fuzz: %s\n", what);
  std::abort();
}

const std::string& scratch(const char* tag) {
  static std::string dir = [] {
    const char* t = std::getenv("TMPDIR");
    return std::string(t != nullptr ? t : "/tmp");
  }();
  static std::string in = dir + "/spillway_npy_fuzz_in_" + std::to_string(::getpid()) + ".npy";
  static std::string out = dir + "/spillway_npy_fuzz_out_" + std::to_string(::getpid()) + ".npy";
  return tag[0] == 'i' ? in : out;
}

void write_file(const std::string& path, const std::uint8_t* d, std::size_t n) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) finding("cannot write the scratch file");
  if (n > 0 && std::fwrite(d, 1, n, f) != n) finding("short write of the scratch file");
  std::fclose(f);
}

template <class T>
void write_back(const spillway::io::npy_array& a) {
  spillway::io::write_npy(scratch("out"), a.data<T>(), a.header.shape);
}

void round_trip(const spillway::io::npy_array& a) {
  using spillway::io::npy_dtype;
  switch (a.header.dtype) {
    case npy_dtype::u1: write_back<std::uint8_t>(a); break;
    case npy_dtype::b1: write_back<bool>(a); break;
    case npy_dtype::i1: write_back<std::int8_t>(a); break;
    case npy_dtype::u2: write_back<std::uint16_t>(a); break;
    case npy_dtype::i4: write_back<std::int32_t>(a); break;
    case npy_dtype::i8: write_back<std::int64_t>(a); break;
    case npy_dtype::f2: write_back<__half>(a); break;
    case npy_dtype::f4: write_back<float>(a); break;
    case npy_dtype::f8: write_back<double>(a); break;
    case npy_dtype::c8: write_back<std::complex<float>>(a); break;
    case npy_dtype::c16: write_back<std::complex<double>>(a); break;
  }
  const spillway::io::npy_array b = spillway::io::read_npy(scratch("out"));
  if (b.header.dtype != a.header.dtype || b.header.shape != a.header.shape || b.bytes != a.bytes || b.header.fortran_order) {
    finding("write_npy -> read_npy changed the array");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace io = spillway::io;
  bool mem_ok = false;
  io::npy_array a;
  try {
    a = io::read_npy_bytes(data, size, "fuzz");
    mem_ok = true;
  } catch (const spillway::logic_error&) {
  }
  if (mem_ok) {
    if (a.bytes.size() != a.header.data_bytes()) finding("bytes.size() != header.data_bytes()");
    if (a.header.data_offset + a.bytes.size() > size) finding("array larger than the input");
  }
  // The same bytes as a file, through read_npy and map_npy: same verdict, same elements.
  write_file(scratch("in"), data, size);
  bool file_ok = false;
  try {
    const io::npy_array f = io::read_npy(scratch("in"));
    file_ok = true;
    if (!mem_ok) finding("read_npy accepted what read_npy_bytes refused");
    if (f.header.dtype != a.header.dtype || f.header.shape != a.header.shape || f.bytes != a.bytes) {
      finding("read_npy and read_npy_bytes disagree");
    }
  } catch (const spillway::logic_error&) {
  }
  if (mem_ok && !file_ok) finding("read_npy refused what read_npy_bytes accepted");
  try {
    const io::npy_mapping m = io::map_npy(scratch("in"));
    if (!mem_ok) finding("map_npy accepted what read_npy_bytes refused");
    if (m.header().fortran_order) finding("map_npy accepted a Fortran-order file");
    const std::size_t n = m.header().data_bytes();
    if (m.header().shape != a.header.shape || m.header().dtype != a.header.dtype || n != a.bytes.size() ||
        (n > 0 && std::memcmp(m.bytes(), a.bytes.data(), n) != 0)) {
      finding("map_npy and read_npy_bytes disagree");
    }
  } catch (const spillway::logic_error&) {
    if (mem_ok && !a.header.fortran_order) finding("map_npy refused a C-order file read_npy_bytes accepted");
  }
  if (mem_ok) round_trip(a);
  return 0;
}
