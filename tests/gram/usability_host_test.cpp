// Host tests (issue 16 item 4): the user's own packed bytes in either bit order, NumPy's int64 0/1
// arrays, row ranges of a bit matrix.
#include <spillway/gram/bit_matrix.hpp>
#include <spillway/gram/host_gram.hpp>
#include <support/gpu_test.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

namespace {
using namespace spillway::gram;

std::vector<std::uint8_t> random01(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<std::uint8_t> v(static_cast<std::size_t>(rows * cols));
  for (auto& x : v) x = static_cast<std::uint8_t>(g() & 1u);
  return v;
}

// What np.packbits(a, axis=1, bitorder=...) writes, computed independently bit by bit.
std::vector<std::uint8_t> packbits(const std::vector<std::uint8_t>& a, std::int64_t rows, std::int64_t cols, bool big) {
  const std::int64_t rb = (cols + 7) / 8;
  std::vector<std::uint8_t> out(static_cast<std::size_t>(rows * rb), 0);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      if (a[static_cast<std::size_t>(r * cols + c)]) {
        const int bit = big ? 7 - static_cast<int>(c % 8) : static_cast<int>(c % 8);
        out[static_cast<std::size_t>(r * rb + c / 8)] |= static_cast<std::uint8_t>(1u << bit);
      }
  return out;
}

void expect_same_bits(const bit_matrix& x, const bit_matrix& y) {
  ASSERT_EQ(x.rows(), y.rows());
  ASSERT_EQ(x.cols(), y.cols());
  ASSERT_EQ(x.ld_words(), y.ld_words());
  for (std::int64_t r = 0; r < x.rows(); ++r)
    for (std::int64_t w = 0; w < x.ld_words(); ++w) ASSERT_EQ(x.row(r)[w], y.row(r)[w]) << "row " << r << " word " << w;
}

}  // namespace

TEST(GramUsability, PackedBytesEitherBitOrderMatchPackBits) {
  const auto seed = spillway::test::seed("GramUsability.PackedBytes");
  // Column counts: under a byte, not a multiple of 8, of 32, of 1024, and past one block.
  for (std::int64_t cols : {1, 7, 8, 29, 32, 33, 1023, 1024, 1061}) {
    const std::int64_t rows = 13;
    const auto a = random01(rows, cols, seed + static_cast<std::uint64_t>(cols));
    const auto want = pack_bits(a.data(), rows, cols);
    for (bool big : {true, false}) {
      auto p = packbits(a, rows, cols, big);
      // Junk in the unused low/high bits of each row's last byte must be ignored.
      if (cols % 8 != 0) {
        const std::int64_t rb = (cols + 7) / 8;
        for (std::int64_t r = 0; r < rows; ++r) {
          auto& last = p[static_cast<std::size_t>(r * rb + rb - 1)];
          const int used = static_cast<int>(cols % 8);
          const auto junk = static_cast<std::uint8_t>(big ? (0xFFu >> used) : (0xFFu << used));
          last = static_cast<std::uint8_t>(last | junk);
        }
      }
      const auto got = from_packed_bytes(p.data(), rows, cols, big ? bit_order::big : bit_order::little);
      SCOPED_TRACE("cols " + std::to_string(cols) + (big ? " big" : " little"));
      expect_same_bits(got, want);
      EXPECT_TRUE(padding_is_zero(got.view()));
    }
  }
  // A row stride wider than the packed row (ld_bytes).
  const auto a = random01(5, 20, seed);
  auto p = packbits(a, 5, 20, true);  // 3 bytes per row
  std::vector<std::uint8_t> wide(5 * 8, 0xEE);
  for (int r = 0; r < 5; ++r)
    for (int b = 0; b < 3; ++b) wide[static_cast<std::size_t>(r * 8 + b)] = p[static_cast<std::size_t>(r * 3 + b)];
  for (int r = 0; r < 5; ++r) wide[static_cast<std::size_t>(r * 8 + 2)] &= 0xF0;  // only 4 bits used in byte 2
  expect_same_bits(from_packed_bytes(wide.data(), 5, 20, bit_order::big, 8), pack_bits(a.data(), 5, 20));
  EXPECT_THROW((void)from_packed_bytes(wide.data(), 5, 20, bit_order::big, 2), spillway::logic_error);
}

TEST(GramUsability, WideIntegerZeroOneArraysPack) {
  const auto a = random01(9, 333, spillway::test::seed("GramUsability.WideIntegers"));
  const auto want = pack_bits(a.data(), 9, 333);
  const std::vector<std::int64_t> i64(a.begin(), a.end());  // NumPy's default integer dtype
  const std::vector<std::int32_t> i32(a.begin(), a.end());
  const std::vector<std::uint16_t> u16(a.begin(), a.end());
  expect_same_bits(pack_bits(i64, 9, 333), want);
  expect_same_bits(pack_bits(i32.data(), 9, 333), want);
  expect_same_bits(pack_bits(u16.data(), 9, 333), want);
  auto bad = i64;
  bad[static_cast<std::size_t>(4 * 333 + 17)] = 2;
  try {
    (void)pack_bits(bad, 9, 333);
    FAIL() << "no throw";
  } catch (const spillway::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("value 2 at (row 4, column 17)"), std::string::npos) << e.what();
  }
  pack_options o;
  o.nonzero_as_one = true;
  const auto ones = pack_bits(bad, 9, 333, o);
  EXPECT_TRUE(ones.get(4, 17));
}

TEST(GramUsability, RowRangeIsASubMatrix) {
  const auto a = random01(50, 70, spillway::test::seed("GramUsability.RowRange"));
  const auto m = pack_bits(a.data(), 50, 70);
  const auto v = row_range(m.view(), 10, 25);
  EXPECT_EQ(v.rows, 25);
  EXPECT_EQ(v.row(0), m.row(10));
  EXPECT_THROW((void)row_range(m.view(), 40, 11), spillway::logic_error);
  // A strip of A against A on the host equals those rows of the full product.
  std::vector<std::int32_t> full(50 * 50), strip(25 * 50);
  host_gram_dense(m.view(), full.data(), triangle_layout::full);
  host_gram_dense(v, m.view(), strip.data(), 50);
  for (int i = 0; i < 25; ++i)
    for (int j = 0; j < 50; ++j) ASSERT_EQ(strip[static_cast<std::size_t>(i * 50 + j)], full[static_cast<std::size_t>((i + 10) * 50 + j)]);
}

// np.packbits output, both bit orders, read as NumPy wrote it (runs when SPILLWAY_PYTHON is set).
TEST(GramUsability, NumPyPackbitsImport) {
  const char* py = std::getenv("SPILLWAY_PYTHON");
  if (py == nullptr || *py == '\0') GTEST_SKIP() << "set SPILLWAY_PYTHON to a python3 with numpy to run the interop check";
  const std::string dir = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/spillway_packbits_" +
                          std::to_string(::getpid());
  {
    std::ofstream s(dir + ".py");
    s << "import numpy as np, sys\n"
         "d = sys.argv[1]\n"
         "a = (np.random.default_rng(3).random((11, 45)) < 0.4).astype(np.uint8)\n"
         "a.tofile(d + '_a.bin')\n"
         "np.packbits(a, axis=1).tofile(d + '_big.bin')\n"
         "np.packbits(a, axis=1, bitorder='little').tofile(d + '_little.bin')\n";
  }
  ASSERT_EQ(std::system((std::string(py) + " " + dir + ".py " + dir).c_str()), 0);
  auto slurp = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::vector<std::uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  const auto a = slurp(dir + "_a.bin");
  ASSERT_EQ(a.size(), 11u * 45u);
  const auto want = pack_bits(a.data(), 11, 45);
  expect_same_bits(from_packed_bytes(slurp(dir + "_big.bin").data(), 11, 45, bit_order::big), want);
  expect_same_bits(from_packed_bytes(slurp(dir + "_little.bin").data(), 11, 45, bit_order::little), want);
  for (const char* suf : {".py", "_a.bin", "_big.bin", "_little.bin"}) std::remove((dir + suf).c_str());
}

TEST(GramUsability, TrianglesUnpackToTheSquare) {
  const std::int64_t n = 37;
  const auto a = random01(n, 90, spillway::test::seed("GramUsability.Triangles"));
  const auto m = pack_bits(a.data(), n, 90);
  std::vector<std::int32_t> full(static_cast<std::size_t>(n * n)), packed(static_cast<std::size_t>(layout_size(triangle_layout::upper_packed, n))),
      cond(static_cast<std::size_t>(layout_size(triangle_layout::condensed, n)));
  host_gram_dense(m.view(), full.data(), triangle_layout::full);
  host_gram_dense(m.view(), packed.data(), triangle_layout::upper_packed);
  host_gram_dense(m.view(), cond.data(), triangle_layout::condensed);
  EXPECT_EQ(triangle_to_square(packed.data(), n, triangle_layout::upper_packed), full);
  auto sq = triangle_to_square(cond.data(), n, triangle_layout::condensed, -5);
  for (std::int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(sq[static_cast<std::size_t>(i * n + i)], -5);
    sq[static_cast<std::size_t>(i * n + i)] = full[static_cast<std::size_t>(i * n + i)];
  }
  EXPECT_EQ(sq, full);
  EXPECT_EQ(triangle_to_square(full.data(), n, triangle_layout::full), full);
  EXPECT_TRUE(triangle_to_square<std::int32_t>(nullptr, 0, triangle_layout::condensed).empty());
}
