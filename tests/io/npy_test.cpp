// .npy reader/writer: round trips of every supported dtype, hand-made headers (v1/v2/v3, odd
// spacing), rejection of everything unsupported, and (when SPILLWAY_PYTHON names a Python with
// NumPy) files written by NumPy read back and ours loaded by NumPy.
#include <spillway/io/npy.hpp>

#include <support/gpu_test.hpp>
#include <support/python_script.hpp>

#include <cuda_fp16.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

using namespace spillway::io;

std::string tmp_path(const std::string& name) {
  const char* d = std::getenv("TMPDIR");
  return std::string(d != nullptr ? d : "/tmp") + "/spillway_npy_" + std::to_string(::getpid()) + "_" + name;
}

// __half compares by value (+0 == -0, NaN != NaN); the file must keep the exact bits.
unsigned half_bits(const __half& h) { return static_cast<__half_raw>(h).x; }

template <class T>
void round_trip(const std::vector<std::int64_t>& shape, std::uint64_t seed) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  std::vector<T> v(static_cast<std::size_t>(n));
  std::mt19937_64 g(seed);
  for (auto& x : v) x = static_cast<T>(static_cast<std::int64_t>(g() % 200) - (std::is_signed_v<T> ? 100 : 0));
  const std::string p = tmp_path("rt.npy");
  write_npy(p, v.data(), shape);
  const npy_array a = read_npy(p);
  EXPECT_EQ(a.header.dtype, npy_dtype_of<T>());
  EXPECT_EQ(a.header.shape, shape);
  EXPECT_EQ(a.header.data_offset % 64, 0u);
  ASSERT_EQ(a.header.count(), n);
  const T* d = a.data<T>();
  for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(d[i], v[static_cast<std::size_t>(i)]) << "element " << i;
  std::remove(p.c_str());
}

TEST(Npy, RoundTripEveryDtypeAndShape) {
  const auto s = spillway::test::seed("npy-roundtrip");
  for (const auto& shape : std::vector<std::vector<std::int64_t>>{{}, {0}, {1}, {7}, {3, 5}, {2, 3, 4}, {0, 9}, {13, 1}}) {
    round_trip<std::uint8_t>(shape, s);
    round_trip<std::int8_t>(shape, s + 1);
    round_trip<std::uint16_t>(shape, s + 2);
    round_trip<std::int32_t>(shape, s + 3);
    round_trip<std::int64_t>(shape, s + 4);
    round_trip<float>(shape, s + 5);
    round_trip<double>(shape, s + 6);
  }
}

TEST(Npy, BoolRoundTrip) {
  bool v[6] = {true, false, false, true, true, false};
  const std::string p = tmp_path("b.npy");
  write_npy(p, v, {2, 3});
  const npy_array a = read_npy(p);
  EXPECT_EQ(a.header.dtype, npy_dtype::b1);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(a.data<bool>()[i], v[i]);
  std::remove(p.c_str());
}

TEST(Npy, HeaderMatchesNumPyText) {
  // NumPy 1.x/2.x writes exactly this for np.zeros((3, 4), np.uint8): 128-byte-free v1.0, 64-aligned.
  const std::string h = make_npy_header(npy_dtype::u1, {3, 4});
  ASSERT_EQ(h.size() % 64, 0u);
  EXPECT_EQ(h.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_NE(h.find("{'descr': '|u1', 'fortran_order': False, 'shape': (3, 4), }"), std::string::npos);
  EXPECT_EQ(h.back(), '\n');
  const std::string h1 = make_npy_header(npy_dtype::f8, {5});
  EXPECT_NE(h1.find("'shape': (5,)"), std::string::npos);
  const std::string h0 = make_npy_header(npy_dtype::i4, {});
  EXPECT_NE(h0.find("'shape': ()"), std::string::npos);
}

std::string raw_file(int major, const std::string& dict, const std::string& data) {
  std::string body = dict;
  const std::size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + body.size() + 1) % 16 != 0) body += ' ';
  body += '\n';
  std::string f("\x93NUMPY", 6);
  f += static_cast<char>(major);
  f += '\0';
  f += static_cast<char>(body.size() & 0xFF);
  f += static_cast<char>((body.size() >> 8) & 0xFF);
  if (major != 1) f += std::string(2, '\0');
  return f + body + data;
}

npy_array read_string(const std::string& bytes) {
  const std::string p = tmp_path("raw.npy");
  {
    std::ofstream o(p, std::ios::binary);
    o << bytes;
  }
  try {
    npy_array a = read_npy(p);
    std::remove(p.c_str());
    return a;
  } catch (...) {
    std::remove(p.c_str());
    throw;
  }
}

TEST(Npy, ReadsHandMadeHeadersOfEachVersion) {
  const std::string data("\x01\x00\x01\x01\x00\x00", 6);
  for (int major : {1, 2, 3}) {
    const npy_array a = read_string(raw_file(major, "{\"descr\":'|b1',  'fortran_order' : False, 'shape':(2,3,)}", data));
    EXPECT_EQ(a.header.major_version, major);
    EXPECT_EQ(a.header.dtype, npy_dtype::b1);
    EXPECT_EQ(a.header.shape, (std::vector<std::int64_t>{2, 3}));
    EXPECT_EQ(a.bytes[2], 1);
    EXPECT_EQ(a.bytes[4], 0);
  }
  // '<u1' and a trailing-L shape are accepted too.
  const npy_array b = read_string(raw_file(1, "{'descr': '<u1', 'fortran_order': False, 'shape': (6L,), }", data));
  EXPECT_EQ(b.header.dtype, npy_dtype::u1);
  EXPECT_EQ(b.header.count(), 6);
}

void expect_rejects(const std::string& bytes, const std::string& needle) {
  try {
    (void)read_string(bytes);
    FAIL() << "accepted a file that should be rejected (" << needle << ")";
  } catch (const spillway::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Npy, RejectsUnsupportedWithClearErrors) {
  const std::string d8(8, '\0');
  expect_rejects(raw_file(1, "{'descr': '>i4', 'fortran_order': False, 'shape': (2,), }", d8), ">i4");
  expect_rejects(raw_file(1, "{'descr': '<c32', 'fortran_order': False, 'shape': (1,), }", d8), "<c32");
  expect_rejects(raw_file(1, "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", d8), "|O");
  expect_rejects(raw_file(1, "{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (1,), }", d8), "structured");
  expect_rejects(raw_file(1, "{'descr': '<i4', 'fortran_order': Maybe, 'shape': (2,), }", d8), "fortran_order");
  expect_rejects(raw_file(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", d8), "truncated");
  expect_rejects(raw_file(1, "{'descr': '<i4', 'fortran_order': False}", d8), "shape");
  expect_rejects(raw_file(4, "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", d8), "version 4");
  expect_rejects(std::string("PK\x03\x04 not npy at all"), "magic");
  EXPECT_THROW((void)read_npy(tmp_path("does_not_exist.npy")), spillway::logic_error);
  std::vector<std::int32_t> w(3);
  EXPECT_THROW(write_npy(tmp_path("x.npy"), w, {2, 2}), spillway::logic_error);
  const npy_array a = read_string(raw_file(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", d8));
  EXPECT_THROW((void)a.data<float>(), spillway::logic_error);
}

TEST(NpyHalf, Float16RoundTripsBitExactAndReadsHandMadeFiles) {
  // Every one of the 65,536 bit patterns (NaNs, infinities, -0, subnormals included) survives
  // write -> read unchanged: the reader and writer move bytes, they never convert.
  std::vector<__half> all(65536);
  for (std::size_t i = 0; i < all.size(); ++i) {
    __half_raw r;
    r.x = static_cast<unsigned short>(i);
    all[i] = r;
  }
  const std::string p = tmp_path("f2.npy");
  write_npy(p, all, {256, 256});
  const npy_array a = read_npy(p);
  EXPECT_EQ(a.header.dtype, npy_dtype::f2);
  EXPECT_EQ(npy_itemsize(a.header.dtype), 2u);
  EXPECT_EQ(a.header.shape, (std::vector<std::int64_t>{256, 256}));
  ASSERT_EQ(a.bytes.size(), 2u * 65536u);
  for (std::size_t i = 0; i < all.size(); ++i) ASSERT_EQ(half_bits(a.data<__half>()[i]), i) << "pattern " << i;
  // The mapping agrees, and float16 is not uint16 (nor the reverse).
  {
    const npy_mapping m = map_npy(p);
    EXPECT_EQ(half_bits(m.data<__half>()[12345]), 12345u);
    EXPECT_THROW((void)m.data<std::uint16_t>(), spillway::logic_error);
  }
  EXPECT_THROW((void)a.data<std::uint16_t>(), spillway::logic_error);
  // Scalars and empty shapes, as for the other dtypes.
  for (const auto& shape : std::vector<std::vector<std::int64_t>>{{}, {0}, {0, 9}, {7}}) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    write_npy(p, all.data() + 1000, shape);
    const npy_array s = read_npy(p);
    EXPECT_EQ(s.header.shape, shape);
    ASSERT_EQ(s.header.count(), n);
    for (std::int64_t i = 0; i < n; ++i) EXPECT_EQ(half_bits(s.data<__half>()[i]), 1000u + static_cast<unsigned>(i));
  }
  std::remove(p.c_str());
  EXPECT_NE(make_npy_header(npy_dtype::f2, {4}).find("{'descr': '<f2', 'fortran_order': False, 'shape': (4,), }"),
            std::string::npos);
  const npy_array u =
      read_string(raw_file(1, "{'descr': '<u2', 'fortran_order': False, 'shape': (1,), }", std::string(2, '\0')));
  EXPECT_THROW((void)u.data<__half>(), spillway::logic_error);

  // Hand-made: values from random floats rounded by __float2half_rn, Fortran order (2, 3).
  std::mt19937_64 g(spillway::test::seed("NpyHalf"));
  std::uniform_real_distribution<float> dist(-100.0f, 100.0f);
  __half c_order[6];
  for (auto& h : c_order) h = __float2half_rn(dist(g));
  std::string fbytes;
  for (int j = 0; j < 3; ++j)
    for (int i = 0; i < 2; ++i) fbytes.append(reinterpret_cast<const char*>(&c_order[i * 3 + j]), 2);
  const npy_array f = read_string(raw_file(2, "{'descr': '<f2', 'fortran_order': True, 'shape': (2, 3), }", fbytes));
  EXPECT_TRUE(f.header.fortran_order);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(half_bits(f.data<__half>()[i]), half_bits(c_order[i])) << i;
  // Big-endian float16 is refused like every big-endian type.
  expect_rejects(raw_file(1, "{'descr': '>f2', 'fortran_order': False, 'shape': (1,), }", std::string(2, '\0')), ">f2");
}

// ---- NumPy interop (runs when SPILLWAY_PYTHON names a python3 that can import numpy) -------------

std::string python() {
  return spillway::test::interop_python();
}

TEST(NpyNumPy, NumPyWritesWeReadAndWeWriteNumPyReads) {
  const std::string py = python();
  if (py.empty()) GTEST_SKIP() << "set SPILLWAY_PYTHON to a python3 with numpy to run the interop check";
  const std::string dir = tmp_path("interop");
  const std::string script = dir + "_w.py";
  ASSERT_EQ(
      spillway::test::run_python(
          py, script,
          "import numpy as np, sys\n"
          "d = sys.argv[1]\n"
          "rng = np.random.default_rng(7)\n"
          "np.save(d + '_u1.npy', (rng.random((37, 131)) < 0.3).astype(np.uint8))\n"
          "np.save(d + '_b1.npy', rng.random((5, 9)) < 0.5)\n"
          "np.save(d + '_f8.npy', np.arange(12, dtype=np.float64).reshape(3, 4) / 7)\n"
          "np.save(d + '_i4.npy', np.arange(-5, 5, dtype=np.int32))\n"
          "np.save(d + '_fortran.npy', np.asfortranarray(np.arange(24, dtype=np.int32).reshape(2, 3, 4)))\n"
          "np.save(d + '_c8.npy', (np.arange(6) + 1j * (np.arange(6) - 2.5)).astype(np.complex64).reshape(2, "
          "3))\n"
          "np.save(d + '_c16.npy', np.array([1 / 3 - 1j / 7, -2.0 + 0.5j]))\n"
          "np.save(d + '_f2.npy', np.array([[1 / 3, -2.5, 65504], [6e-8, -0.0, np.inf]], np.float16))\n"
          "np.savetxt(d + '_u1.txt', np.load(d + '_u1.npy').reshape(-1), fmt='%d')\n",
          dir),
      0);
  const npy_array u = read_npy(dir + "_u1.npy");
  ASSERT_EQ(u.header.shape, (std::vector<std::int64_t>{37, 131}));
  std::ifstream txt(dir + "_u1.txt");
  for (std::int64_t i = 0; i < 37 * 131; ++i) {
    int x = -1;
    txt >> x;
    ASSERT_EQ(u.data<std::uint8_t>()[i], x) << "element " << i;
  }
  EXPECT_EQ(read_npy(dir + "_b1.npy").header.dtype, npy_dtype::b1);
  const npy_array f = read_npy(dir + "_f8.npy");
  for (int i = 0; i < 12; ++i) EXPECT_EQ(f.data<double>()[i], i / 7.0);
  const npy_array k = read_npy(dir + "_i4.npy");
  for (int i = 0; i < 10; ++i) EXPECT_EQ(k.data<std::int32_t>()[i], i - 5);
  // Fortran order is read and transposed: element (i, j, k) of arange(24).reshape(2, 3, 4).
  const npy_array fo = read_npy(dir + "_fortran.npy");
  EXPECT_TRUE(fo.header.fortran_order);
  ASSERT_EQ(fo.header.shape, (std::vector<std::int64_t>{2, 3, 4}));
  for (int i = 0; i < 24; ++i) EXPECT_EQ(fo.data<std::int32_t>()[i], i);
  const npy_array c8 = read_npy(dir + "_c8.npy");
  ASSERT_EQ(c8.header.dtype, npy_dtype::c8);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(c8.data<cuda::std::complex<float>>()[i], cuda::std::complex<float>(float(i), float(i - 2.5)));
  }
  const npy_array c16 = read_npy(dir + "_c16.npy");
  EXPECT_EQ(c16.data<std::complex<double>>()[0], std::complex<double>(1.0 / 3, -1.0 / 7));
  EXPECT_EQ(c16.data<std::complex<double>>()[1], std::complex<double>(-2.0, 0.5));
  // float16: NumPy rounds to nearest even, as __float2half_rn does, so the bits must match.
  const npy_array f2 = read_npy(dir + "_f2.npy");
  ASSERT_EQ(f2.header.dtype, npy_dtype::f2);
  ASSERT_EQ(f2.header.shape, (std::vector<std::int64_t>{2, 3}));
  const float f2_want[6] = {1.0f / 3.0f, -2.5f, 65504.0f, 6e-8f, -0.0f, INFINITY};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(half_bits(f2.data<__half>()[i]), half_bits(__float2half_rn(f2_want[i]))) << i;

  // Ours → NumPy.
  std::vector<std::int64_t> idx = {0, -1, 1LL << 40, 7};
  std::vector<float> fl = {0.5f, 1.0f / 3.0f, -2.0f, 1e-20f, 0.0f, 3.0f};
  std::vector<std::uint16_t> us = {0, 65535, 17};
  write_npy(dir + "_o_i8.npy", idx, {2, 2});
  write_npy(dir + "_o_f4.npy", fl, {6});
  write_npy(dir + "_o_u2.npy", us, {3, 1});
  std::vector<cuda::std::complex<float>> cf = {{1.5f, -2.0f}, {0.0f, 1e-3f}};
  write_npy(dir + "_o_c8.npy", cf, {2});
  std::vector<std::complex<double>> cd = {{1.0 / 3, 2.0 / 3}};
  write_npy(dir + "_o_c16.npy", cd, {1, 1});
  std::vector<__half> hf = {__float2half_rn(0.5f), __float2half_rn(-1e-3f), __float2half_rn(1024.0f)};
  write_npy(dir + "_o_f2.npy", hf, {3});
  const std::string check = dir + "_r.py";
  EXPECT_EQ(spillway::test::run_python(
                py, check,
                "import numpy as np, sys\n"
                "d = sys.argv[1]\n"
                "a = np.load(d + '_o_i8.npy'); assert a.dtype == np.int64 and a.shape == (2, 2), a\n"
                "assert a.tolist() == [[0, -1], [1 << 40, 7]], a\n"
                "b = np.load(d + '_o_f4.npy'); assert b.dtype == np.float32 and b.shape == (6,)\n"
                "assert (b == np.array([0.5, 1/3, -2, 1e-20, 0, 3], np.float32)).all(), b\n"
                "c = np.load(d + '_o_u2.npy'); assert c.dtype == np.uint16 and c.shape == (3, 1) and c[1, 0] "
                "== 65535\n"
                "e = np.load(d + '_o_c8.npy'); assert e.dtype == np.complex64 and (e == np.array([1.5 - 2j, "
                "1e-3j], np.complex64)).all(), e\n"
                "f = np.load(d + '_o_c16.npy'); assert f.dtype == np.complex128 and f.shape == (1, 1) and "
                "f[0, 0] == 1 / 3 + 2j / 3, f\n"
                "h = np.load(d + '_o_f2.npy'); assert h.dtype == np.float16 and h.shape == (3,), h\n"
                "assert (h == np.array([0.5, -1e-3, 1024], np.float16)).all(), h\n"
                "print('numpy read spillway output: ok')\n",
                dir),
            0);
  for (const char* suf : {"_u1.npy", "_b1.npy", "_f8.npy", "_i4.npy", "_fortran.npy", "_c8.npy", "_c16.npy", "_f2.npy",
                          "_u1.txt", "_o_i8.npy", "_o_f4.npy", "_o_u2.npy", "_o_c8.npy", "_o_c16.npy", "_o_f2.npy"}) {
    std::remove((dir + suf).c_str());
  }
  std::remove(script.c_str());
  std::remove(check.c_str());
}

TEST(NpyComplex, RoundTripsAndFortranOrderWithoutNumPy) {
  std::mt19937_64 g(spillway::test::seed("NpyComplex"));
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<cuda::std::complex<float>> a(3 * 5);
  for (auto& z : a) z = {static_cast<float>(u(g)), static_cast<float>(u(g))};
  const std::string p = tmp_path("c8.npy");
  write_npy(p, a, {3, 5});
  const npy_array r = read_npy(p);
  EXPECT_EQ(r.header.dtype, npy_dtype::c8);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(r.data<cuda::std::complex<float>>()[i], a[i]);
  // std::complex<float> is the same dtype: either type reads the file.
  EXPECT_EQ(r.data<std::complex<float>>()[4], std::complex<float>(a[4].real(), a[4].imag()));
  EXPECT_THROW((void)r.data<std::complex<double>>(), spillway::logic_error);
  std::vector<std::complex<double>> b(7);
  for (auto& z : b) z = {u(g), u(g)};
  write_npy(p, b, {7});
  const npy_array s = read_npy(p);
  EXPECT_EQ(s.header.dtype, npy_dtype::c16);
  for (std::size_t i = 0; i < b.size(); ++i) EXPECT_EQ(s.data<std::complex<double>>()[i], b[i]);
  std::remove(p.c_str());
  // A hand-made Fortran-order (2, 3) int32 file: memory order 0 3 1 4 2 5 is C order 0..5.
  const std::vector<std::int32_t> fdata = {0, 3, 1, 4, 2, 5};
  std::string bytes(reinterpret_cast<const char*>(fdata.data()), fdata.size() * 4);
  const npy_array f = read_string(raw_file(1, "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }", bytes));
  EXPECT_TRUE(f.header.fortran_order);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(f.data<std::int32_t>()[i], i);
}

}  // namespace

namespace {
TEST(NpyMapping, MapsWithoutReadingAndChecksLikeRead) {
  std::mt19937_64 g(spillway::test::seed("NpyMapping"));
  std::vector<double> v(3 * 1000 + 7);
  for (auto& x : v) x = static_cast<double>(g() % 100000) / 7.0;
  const std::string p = tmp_path("map.npy");
  write_npy(p, v, {static_cast<std::int64_t>(v.size())});
  {
    npy_mapping m = map_npy(p);
    EXPECT_EQ(m.header().shape, (std::vector<std::int64_t>{static_cast<std::int64_t>(v.size())}));
    const double* d = m.data<double>();
    for (std::size_t i = 0; i < v.size(); ++i) ASSERT_EQ(d[i], v[i]) << i;
    EXPECT_THROW((void)m.data<float>(), spillway::logic_error);
    npy_mapping moved = std::move(m);
    EXPECT_EQ(moved.data<double>()[5], v[5]);
  }
  // Truncated: the header promises more than the file holds.
  ASSERT_EQ(::truncate(p.c_str(), 200), 0);
  EXPECT_THROW((void)map_npy(p), spillway::logic_error);
  std::remove(p.c_str());
  EXPECT_THROW((void)map_npy(p), spillway::logic_error);  // missing
}
}  // namespace
