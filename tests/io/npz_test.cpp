// .npz archives (io/npz.hpp): the zip records, zip64 past the 4 GiB limit (forced on small archives
// through the limit's test parameter), SciPy's CSR layout, refusals, and round trips through the
// real NumPy and SciPy when SPILLWAY_PYTHON names a python3 that has them.
#include <spillway/io/npz.hpp>

#include <support/python_script.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

using namespace spillway::io;

std::string tmp_path(const std::string& name) {
  const char* d = std::getenv("TMPDIR");
  return std::string(d != nullptr ? d : "/tmp") + "/spillway_npz_" + std::to_string(::getpid()) + "_" + name;
}


std::vector<unsigned char> file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::uint64_t le(const std::vector<unsigned char>& b, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | b.at(at + static_cast<std::size_t>(i));
  return v;
}

bool exists(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f != nullptr) std::fclose(f);
  return f != nullptr;
}

TEST(Npz, Crc32KnownValuesAndContinuation) {
  EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u);  // the CRC-32/ISO-HDLC check value
  EXPECT_EQ(crc32("", 0), 0u);
  EXPECT_EQ(crc32("The quick brown fox jumps over the lazy dog", 43), 0x414FA339u);
  EXPECT_EQ(crc32("6789", 4, crc32("12345", 5)), 0xCBF43926u);
}

// The records: a local header per member (name, stored, CRC of the .npy bytes that follow), the
// end record counting them; with the zip64 limit forced low, every member and the end take zip64
// records, and the CRCs are the same.
TEST(Npz, RecordsAndZip64Records) {
  const std::vector<double> a{1.5, -2.0, 3.25, 0.0, 1e300, -7.0};
  const std::vector<std::int32_t> b{4, 5, -6};
  for (const std::uint64_t limit : {detail::npz_zip64_from, std::uint64_t{10}}) {
    SCOPED_TRACE("zip64 from " + std::to_string(limit));
    const std::string p = tmp_path("records.npz");
    detail::write_npz_from(p, {npz_array("a", a, {2, 3}), npz_array("b", b)}, limit);
    const std::vector<unsigned char> f = file_bytes(p);
    ASSERT_GT(f.size(), 100u);
    ASSERT_EQ(le(f, 0, 4), 0x04034b50u);
    const std::size_t name_len = le(f, 26, 2), extra_len = le(f, 28, 2);
    EXPECT_EQ(std::string(f.begin() + 30, f.begin() + 30 + static_cast<std::ptrdiff_t>(name_len)), "a.npy");
    const std::size_t data = 30 + name_len + extra_len;
    const std::string header = make_npy_header(npy_dtype::f8, {2, 3});
    const std::size_t size = header.size() + a.size() * sizeof(double);
    EXPECT_EQ(std::string(f.begin() + static_cast<std::ptrdiff_t>(data),
                          f.begin() + static_cast<std::ptrdiff_t>(data + header.size())),
              header);
    EXPECT_EQ(le(f, 14, 4), crc32(f.data() + data, size)) << "the local header's CRC is the member's";
    const bool zip64 = limit < 1000;
    EXPECT_EQ(le(f, 18, 4), zip64 ? 0xFFFFFFFFu : size);
    EXPECT_EQ(extra_len, zip64 ? 20u : 0u);
    if (zip64) {
      EXPECT_EQ(le(f, 30 + name_len + 4, 8), size);
    }
    const std::size_t end = f.size() - 22;
    ASSERT_EQ(le(f, end, 4), 0x06054b50u);
    EXPECT_EQ(le(f, end + 10, 2), zip64 ? 0xFFFFu : 2u);
    if (zip64) {
      ASSERT_EQ(le(f, end - 20, 4), 0x07064b50u) << "the zip64 locator before the end record";
      const std::size_t rec = le(f, end - 20 + 8, 8);
      ASSERT_EQ(le(f, rec, 4), 0x06064b50u);
      EXPECT_EQ(le(f, rec + 32, 8), 2u) << "entries";
    }
    std::remove(p.c_str());
  }
}

TEST(Npz, RefusalsWriteNothing) {
  const std::string p = tmp_path("refused.npz");
  std::remove(p.c_str());
  const std::vector<float> v{1, 2, 3};
  npz_member wrong{"v", "<f4", {4}, v.data(), v.size() * sizeof(float)};
  try {
    write_npz(p, {npz_array("ok", v), wrong});
    FAIL() << "a member whose bytes do not match its shape must be refused";
  } catch (const spillway::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("member 'v' has 12 bytes"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(exists(p)) << "nothing is written when a member is refused";
  npz_member odd{"w", "<x9", {3}, v.data(), 12};
  EXPECT_THROW(write_npz(p, {odd}), spillway::logic_error);
  EXPECT_THROW((void)npz_array("v", v, {2, 2}), spillway::logic_error);

  const std::vector<std::int64_t> indices{1, 3, 0};
  const std::vector<float> data{0.5f, 0.7f, 1.0f};
  auto refused = [&](const std::vector<std::int64_t>& indptr, std::int64_t cols, const char* says) {
    try {
      write_csr_npz(p, 4, cols, indptr, indices, data);
      ADD_FAILURE() << "accepted: " << says;
    } catch (const spillway::logic_error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
    EXPECT_FALSE(exists(p)) << says;
  };
  refused({0, 2, 2, 3}, 5, "indptr has 4 entries, rows + 1 = 5");
  refused({0, 2, 1, 3, 3}, 5, "indptr falls at row 1");
  refused({0, 2, 2, 3, 4}, 5, "not from 0 to the 3 entries");
  refused({0, 2, 2, 3, 3}, 3, "index 3 of entry 1 is outside [0, 3)");
}

// np.load reads what write_npz writes, with and without zip64 records, and zipfile finds every
// CRC right; scipy.sparse.load_npz reads write_csr_npz's CSR (empty rows, an empty matrix).
TEST(NpzNumPy, NumPyAndSciPyReadWhatWeWrite) {
  const std::string py = spillway::test::interop_python();
  if (py.empty()) GTEST_SKIP() << "set SPILLWAY_PYTHON to a python3 with numpy and scipy to run the interop check";
  const std::string dir = tmp_path("interop");
  const std::vector<double> a{1.5, -2.0, 3.25, 0.0, 1e300, -7.0};
  const std::vector<std::int32_t> b{4, 5, -6};
  const std::vector<std::uint8_t> scalar{42};
  write_npz(dir + "_plain.npz", {npz_array("a", a, {2, 3}), npz_array("b", b), npz_array("s", scalar, {1})});
  detail::write_npz_from(dir + "_zip64.npz", {npz_array("a", a, {2, 3}), npz_array("b", b)}, 10);
  const std::vector<std::int64_t> indptr{0, 2, 2, 3, 3}, indices{1, 3, 0};
  const std::vector<float> data{0.5f, 0.7f, 1.0f};
  write_csr_npz(dir + "_csr.npz", 4, 5, indptr, indices, data);
  write_csr_npz(dir + "_empty.npz", 0, 7, std::vector<std::int64_t>{0}, std::vector<std::int32_t>{},
                std::vector<double>{});
  const int rc = spillway::test::run_python(py, dir + "_check.py",
                                            "import sys, zipfile\n"
                                            "import numpy as np\n"
                                            "try:\n"
                                            "    import scipy.sparse as sp\n"
                                            "except ImportError:\n"
                                            "    sys.exit(77)\n"
                                            "d = sys.argv[1]\n"
                                            "for name in ('_plain', '_zip64'):\n"
                                            "    assert zipfile.ZipFile(d + name + '.npz').testzip() is None, name\n"
                                            "    z = np.load(d + name + '.npz')\n"
                                            "    assert z['a'].dtype == np.float64 and z['a'].shape == (2, 3), name\n"
                                            "    assert (z['a'] == np.array([[1.5, -2.0, 3.25], [0.0, 1e300, -7.0]])).all(), name\n"
                                            "    assert z['b'].dtype == np.int32 and list(z['b']) == [4, 5, -6], name\n"
                                            "assert list(np.load(d + '_plain.npz')['s']) == [42]\n"
                                            "m = sp.load_npz(d + '_csr.npz')\n"
                                            "want = np.zeros((4, 5), np.float32)\n"
                                            "want[0, 1], want[0, 3], want[2, 0] = 0.5, 0.7, 1.0\n"
                                            "assert m.format == 'csr' and m.shape == (4, 5) and m.dtype == np.float32, (m.format, m.shape, m.dtype)\n"
                                            "assert (m.toarray() == want).all()\n"
                                            "e = sp.load_npz(d + '_empty.npz')\n"
                                            "assert e.shape == (0, 7) and e.nnz == 0 and e.dtype == np.float64\n"
                                            "print('numpy and scipy read spillway .npz: ok')\n",
                                            dir);
  for (const char* f : {"_plain.npz", "_zip64.npz", "_csr.npz", "_empty.npz", "_check.py"}) std::remove((dir + f).c_str());
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77) GTEST_SKIP() << py << " has no scipy";
  EXPECT_EQ(rc, 0) << "the NumPy / SciPy check failed (its output is above)";
}

}  // namespace
