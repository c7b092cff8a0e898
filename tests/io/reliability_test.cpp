// What the fuzz targets (tests/fuzz/, scripts/fuzz.sh) found and every refusal docs/reliability.md
// promises for untrusted files and absurd sizes, as plain host tests that run everywhere (the
// inputs the fuzzers found are also replayed by ctest's fuzz_* entries from tests/fuzz/regressions/).
#include <spillway/gram/bit_matrix.hpp>
#include <spillway/io/npy.hpp>
#include <spillway/io/raw.hpp>
#include <spillway/map/shape.hpp>
#include <spillway/map/signature.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

namespace io = spillway::io;

std::string tmp_path(const std::string& name) {
  const char* d = std::getenv("TMPDIR");
  return std::string(d != nullptr ? d : "/tmp") + "/spillway_rel_" + std::to_string(::getpid()) + "_" + name;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  std::fclose(f);
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const spillway::logic_error& e) {
    return e.what();
  }
  return "(no error)";
}

// A header that promises 2^40 doubles in a file of a few hundred bytes: refused with both sizes,
// before 8 TB are allocated (the old reader resized its vector first).
TEST(NpyReliability, HeaderClaimingMoreDataThanTheFileIsRefusedBeforeAllocating) {
  const std::string h = io::make_npy_header(io::npy_dtype::f8, {std::int64_t{1} << 40});
  const std::string bytes = h + std::string(24, '\x01');
  const std::string p = tmp_path("liar.npy");
  write_bytes(p, bytes);
  for (const std::string& msg : {error_of([&] { (void)io::read_npy(p); }), error_of([&] { (void)io::map_npy(p); }),
                                 error_of([&] { (void)io::read_npy_bytes(bytes.data(), bytes.size(), "liar"); })}) {
    EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::to_string((std::int64_t{1} << 40) * 8)), std::string::npos) << msg;  // the promise
    EXPECT_NE(msg.find("holds 24"), std::string::npos) << msg;                                   // the truth
  }
  std::remove(p.c_str());
}

// 2^61 complex128 elements are 2^65 bytes: the old check counted 8 bytes per element.
TEST(NpyReliability, ShapeWhoseByteCountOverflowsIsRefused) {
  const std::string h = io::make_npy_header(io::npy_dtype::c16, {std::int64_t{1} << 31, std::int64_t{1} << 30});
  const std::string msg = error_of([&] { (void)io::read_npy_bytes(h.data(), h.size()); });
  EXPECT_NE(msg.find("overflows 64-bit"), std::string::npos) << msg;
}

// Found by fuzz_npy (tests/fuzz/regressions/npy/huge_extents_before_a_zero_fortran): a header's
// extents may be anything when one of them is 0 (the array is empty), but the element count
// multiplied them first (signed overflow, undefined), in npy_header::count() and in the
// Fortran-to-C reorder. Both now count 0 at the zero extent.
TEST(NpyReliability, HugeExtentsBeforeAZeroAreAnEmptyArray) {
  const std::vector<std::int64_t> shape = {std::int64_t{4000000000000}, std::int64_t{1845565940265939}, 0};
  for (const bool fortran : {false, true}) {
    std::string h = io::make_npy_header(io::npy_dtype::u2, shape);
    if (fortran) {
      const std::size_t at = h.find("'fortran_order': False");
      ASSERT_NE(at, std::string::npos) << h;
      h.replace(at, 22, "'fortran_order': True ");  // the same length: the header keeps its padding
    }
    const io::npy_array a = io::read_npy_bytes(h.data(), h.size(), "empty");
    EXPECT_EQ(a.header.shape, shape);
    EXPECT_EQ(a.header.fortran_order, fortran);
    EXPECT_EQ(a.header.count(), 0);
    EXPECT_EQ(a.header.data_bytes(), 0u);
    EXPECT_TRUE(a.bytes.empty());
  }
  EXPECT_EQ(io::npy_shape_elements({3, 0, std::numeric_limits<std::int64_t>::max()}), 0);
  EXPECT_EQ(io::npy_shape_elements({}), 1);  // a scalar
  EXPECT_EQ(io::npy_shape_elements({2, 3, 7}), 42);
}

TEST(NpyReliability, InMemoryReaderMatchesTheFileReader) {
  const std::vector<std::int32_t> v = {3, -1, 4, -1, 5, -9};
  const std::string p = tmp_path("same.npy");
  io::write_npy(p, v, {2, 3});
  std::FILE* f = std::fopen(p.c_str(), "rb");
  ASSERT_NE(f, nullptr);
  std::string bytes(4096, '\0');
  bytes.resize(std::fread(bytes.data(), 1, bytes.size(), f));
  std::fclose(f);
  const io::npy_array a = io::read_npy(p), b = io::read_npy_bytes(bytes.data(), bytes.size(), p);
  EXPECT_EQ(a.header.shape, b.header.shape);
  EXPECT_EQ(a.bytes, b.bytes);
  EXPECT_EQ(std::vector<std::int32_t>(b.data<std::int32_t>(), b.data<std::int32_t>() + 6), v);
  const std::string cut = error_of([&] { (void)io::read_npy_bytes(bytes.data(), 9); });
  EXPECT_NE(cut.find("truncated header"), std::string::npos) << cut;
  std::remove(p.c_str());
}

// Found by fuzz_raw (tests/fuzz/regressions/raw/zero_bytes_offset_past_end): a 0-byte matrix at
// an offset past the end of the file was accepted.
TEST(RawReliability, OffsetPastTheEndIsRefusedEvenForAnEmptyMatrix) {
  const std::string bytes(3, '\x07');
  const std::string msg = error_of([&] { (void)io::read_raw_bytes(bytes.data(), bytes.size(), io::raw_layout{1, 0, 200}); });
  EXPECT_NE(msg.find("offset 200 is past the end"), std::string::npos) << msg;
}

TEST(RawReliability, ShapeMismatchesNameBothSizes) {
  const std::string bytes(100, '\x01');
  std::string msg = error_of([&] { (void)io::read_raw_bytes(bytes.data(), bytes.size(), io::raw_layout{10, 11, 0}); });
  EXPECT_NE(msg.find("need 110 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("holds 100"), std::string::npos) << msg;
  msg = error_of([&] { (void)io::read_raw_bytes(bytes.data(), bytes.size(), io::raw_layout{9, 11, 0}); });
  EXPECT_NE(msg.find("allow_trailing"), std::string::npos) << msg;
  EXPECT_EQ(io::read_raw_bytes(bytes.data(), bytes.size(), io::raw_layout{9, 11, 0, true}).size(), 99u);
  msg = error_of([&] {
    (void)io::read_raw_bytes(bytes.data(), bytes.size(), io::raw_layout{std::int64_t{1} << 62, 8, 0});
  });
  EXPECT_NE(msg.find("overflows 64-bit"), std::string::npos) << msg;
  msg = error_of([&] { (void)io::read_raw_bytes(bytes.data(), bytes.size(), io::raw_layout{-3, 8, 0}); });
  EXPECT_NE(msg.find("rows is negative: -3"), std::string::npos) << msg;
}

TEST(RawReliability, FileReaderChecksTheSizeFirst) {
  const std::string p = tmp_path("m.raw");
  write_bytes(p, "HDR" + std::string("\x01\x00\x01\x01\x00\x00", 6));
  const std::vector<unsigned char> m = io::read_raw(p, io::raw_layout{2, 3, 3});
  EXPECT_EQ(m, (std::vector<unsigned char>{1, 0, 1, 1, 0, 0}));
  const std::string msg = error_of([&] { (void)io::read_raw(p, io::raw_layout{std::int64_t{1} << 40, 1 << 20, 0}); });
  EXPECT_NE(msg.find("need 1152921504606846976 bytes"), std::string::npos) << msg;  // 2^60: refused, not allocated
  EXPECT_NE(msg.find("holds 9"), std::string::npos) << msg;
  std::remove(p.c_str());
}

// Found by fuzz_raw (tests/fuzz/regressions/raw/huge_rows_zero_columns): 2^62 empty rows made
// bit_matrix multiply past 64 bits and ask operator new for the wrapped size.
TEST(BitMatrixReliability, RowCountWhoseBytesOverflowIsRefusedByName) {
  const std::string msg = error_of([] { spillway::gram::bit_matrix m(std::int64_t{1} << 62, 0); });
  EXPECT_NE(msg.find("overflow 64-bit"), std::string::npos) << msg;
}

// Found by fuzz_map_shapes (tests/fuzz/regressions/map_shapes/negative_core_extent): a negative
// extent in a core dimension was bound as the dimension's size.
TEST(MapShapesReliability, NegativeCoreExtentIsRefused) {
  const auto sig = spillway::parse_signature("(n,n)->()");
  const std::string msg = error_of([&] { (void)spillway::bind_signature(sig, {{4, -6, -6}}); });
  EXPECT_NE(msg.find("negative extent -6 in core dimension 0"), std::string::npos) << msg;
}

TEST(MapShapesReliability, BroadcastShapeBeyond2To63ElementsIsRefused) {
  const std::int64_t big = std::int64_t{1} << 40;
  const std::string msg = error_of([&] { (void)spillway::broadcast_shapes({{big, 1}, {1, big}}); });
  EXPECT_NE(msg.find("more than 2^63 elements"), std::string::npos) << msg;
  // A zero extent makes any product empty, however large the others.
  EXPECT_EQ(spillway::broadcast_shapes({{big, 0}, {1, 1}}), (std::vector<spillway::index_t>{big, 0}));
}

}  // namespace
