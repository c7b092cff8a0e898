// Tile kernels of the bit-matrix product: every path, and every tile kernel forced, exact equality
// with a host popcount oracle on random bits (printed seeds), poisoned outputs, edge shapes,
// offsets, streams, bad input; the persistent tile schedule (host).
#include <spillway/gram/detail/kernels.cuh>
#include <spillway/tile/schedule.cuh>

#include "support/gpu_test.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace {

using spillway::gram::kernel_path;
namespace gd = spillway::gram::detail;

// A host bit matrix in the kernels' layout: ld_words a multiple of 32, padding bits zero.
struct host_bits {
  std::int64_t rows = 0, cols = 0, ld_words = 0;
  std::vector<std::uint32_t> w;
  std::uint32_t* row(std::int64_t r) { return w.data() + r * ld_words; }
  const std::uint32_t* row(std::int64_t r) const { return w.data() + r * ld_words; }
};

std::int64_t words_for(std::int64_t cols) { return (cols + 1023) / 1024 * 32; }

// rows x cols zero bits, each row padded to the kernels' pitch.
host_bits zero_bits(std::int64_t rows, std::int64_t cols) {
  host_bits m;
  m.rows = rows;
  m.cols = cols;
  m.ld_words = words_for(cols);
  m.w.assign(static_cast<std::size_t>(rows * m.ld_words), 0u);
  return m;
}

// Random bits of density ~`p`; rows listed in `ones` are all ones, rows in `zeros` all zeros.
host_bits random_bits(std::int64_t rows, std::int64_t cols, std::uint64_t seed, double p = 0.5,
                      const std::vector<std::int64_t>& ones = {}, const std::vector<std::int64_t>& zeros = {}) {
  host_bits m = zero_bits(rows, cols);
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution bit(p);
  for (std::int64_t r = 0; r < rows; ++r) {
    const bool all1 = std::find(ones.begin(), ones.end(), r) != ones.end();
    const bool all0 = std::find(zeros.begin(), zeros.end(), r) != zeros.end();
    for (std::int64_t c = 0; c < cols; ++c) {
      const bool v = all0 ? false : (all1 ? true : bit(rng));
      if (v) m.row(r)[c / 32] |= 1u << (c % 32);
    }
  }
  return m;
}

// Faster generator for large shapes: random words, tail bits of each row cleared.
host_bits random_words(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
  host_bits m = zero_bits(rows, cols);
  std::mt19937_64 rng(seed);
  const std::int64_t full = cols / 32;
  const int tail = static_cast<int>(cols % 32);
  for (std::int64_t r = 0; r < rows; ++r) {
    std::uint32_t* p = m.row(r);
    for (std::int64_t k = 0; k < full; ++k) p[k] = static_cast<std::uint32_t>(rng());
    if (tail) p[full] = static_cast<std::uint32_t>(rng()) & ((1u << tail) - 1u);
  }
  return m;
}

std::int32_t oracle(const host_bits& a, std::int64_t i, const host_bits& b, std::int64_t j) {
  std::int32_t c = 0;
  const std::uint32_t* x = a.row(i);
  const std::uint32_t* y = b.row(j);
  for (std::int64_t k = 0; k < a.ld_words; ++k) c += __builtin_popcount(x[k] & y[k]);
  return c;
}

// Test epilogue: counts how often each (i, j) is delivered and stores the count (upper triangle
// only when asked), so a test sees both the values and the "exactly once" contract.
struct count_and_visit {
  std::int32_t* c;
  std::int32_t* visits;
  std::int64_t ldc, row0, col0;
  bool upper_only;
  __device__ void operator()(std::int64_t i, std::int64_t j, std::int32_t count) const {
    const std::int64_t at = (i - row0) * ldc + (j - col0);
    atomicAdd(visits + at, 1);
    if (!upper_only || i <= j) c[at] = count;
  }
};

struct panel {
  const host_bits* m;
  std::int64_t row0, rows;
};

// A panel's rows on the device (the kernels see panel-relative pointers); never an empty buffer.
spillway::device_buffer<std::uint32_t> upload(panel p, std::int64_t ld, spillway::stream_view s) {
  spillway::device_buffer<std::uint32_t> d(static_cast<std::size_t>(std::max<std::int64_t>(p.rows * ld, 1)), s);
  if (p.rows * ld > 0) d.copy_from_host_async({p.m->row(p.row0), static_cast<std::size_t>(p.rows * ld)}, s);
  return d;
}

// The kernel's arguments for uploaded panels pa (at a) and pb (at b), ld words a row.
gd::bit_gemm_args panel_args(const std::uint32_t* a, panel pa, const std::uint32_t* b, panel pb, std::int64_t ld,
                             bool upper_only) {
  gd::bit_gemm_args g;
  g.a = a;
  g.a_rows = pa.rows;
  g.b = b;
  g.b_rows = pb.rows;
  g.ld_words = ld;
  g.a_row0 = pa.row0;
  g.b_row0 = pb.row0;
  g.upper_only = upper_only;
  return g;
}

// The kernel's arguments for A·Aᵀ of `rows` rows at a, ld words a row.
gd::bit_gemm_args square_args(const std::uint32_t* a, std::int64_t rows, std::int64_t ld, bool upper_only) {
  gd::bit_gemm_args g;
  g.a = g.b = a;
  g.a_rows = g.b_rows = rows;
  g.ld_words = ld;
  g.upper_only = upper_only;
  return g;
}

// What runs a product: a path as callers give it (automatic kernel choice), or one tile kernel forced.
struct route {
  kernel_path path = kernel_path::automatic;
  std::optional<gd::tile_kernel> forced;
  route(kernel_path p) : path(p) {}  // NOLINT: implicit, the common case
  route(gd::tile_kernel k) : forced(k) {}  // NOLINT
  [[nodiscard]] std::string name() const {
    return forced ? std::string("kernel=") + gd::to_string(*forced) : std::string("path=") + spillway::gram::to_string(path);
  }
};

template <class Epilogue>
void run_route(const route& r, const gd::bit_gemm_args& g, const Epilogue& epi, spillway::stream_view s) {
  if (r.forced) {
    gd::bit_gemm_forced_async(g, epi, *r.forced, s);
  } else {
    gd::bit_gemm_async(g, epi, r.path, s);
  }
}

// The counts of pa·pbᵀ (only i <= j with upper_only) in an output of n_out elements, ldc a row,
// whose window starts row_shift rows and col_shift columns before the panels; -1 elsewhere.
std::vector<std::int32_t> oracle_counts(panel pa, panel pb, bool upper_only, std::size_t n_out, std::int64_t ldc,
                                        std::int64_t row_shift, std::int64_t col_shift) {
  std::vector<std::int32_t> want(n_out, -1);
#pragma omp parallel for schedule(dynamic, 16)
  for (std::int64_t li = 0; li < pa.rows; ++li) {
    for (std::int64_t lj = 0; lj < pb.rows; ++lj) {
      const std::int64_t gi = pa.row0 + li, gj = pb.row0 + lj;
      if (!upper_only || gi <= gj) {
        want[static_cast<std::size_t>((li + row_shift) * ldc + lj + col_shift)] = oracle(*pa.m, gi, *pb.m, gj);
      }
    }
  }
  return want;
}

// Runs one product on the device through `r` and checks every element against the oracle.
// A and B are row ranges of host matrices (the same matrix for A·Aᵀ panels).
void check_product(panel pa, panel pb, bool upper_only, const route& r, spillway::stream_view s,
                   const std::string& what) {
  SCOPED_TRACE(what + " " + r.name());
  ASSERT_EQ(pa.m->ld_words, pb.m->ld_words);
  const std::int64_t ld = pa.m->ld_words;
  const auto da = upload(pa, ld, s);
  const auto db = upload(pb, ld, s);
  const std::size_t n_out = static_cast<std::size_t>(std::max<std::int64_t>(pa.rows * pb.rows, 1));
  spillway::device_buffer<std::int32_t> dc(n_out, s);
  spillway::device_buffer<std::int32_t> dv(n_out, s);
  dc.fill_bytes_async(0xFF, s);  // poison: -1 is never a count
  dv.fill_bytes_async(0x00, s);

  const gd::bit_gemm_args g = panel_args(da.data(), pa, db.data(), pb, ld, upper_only);
  const count_and_visit epi{dc.data(), dv.data(), pb.rows, pa.row0, pb.row0, upper_only};
  run_route(r, g, epi, s);

  std::vector<std::int32_t> c(n_out), v(n_out);
  dc.copy_to_host_async({c.data(), c.size()}, s);
  dv.copy_to_host_async({v.data(), v.size()}, s);
  s.synchronize();

  // The oracle runs in parallel where OpenMP is on; the comparison stays serial.
  const std::vector<std::int32_t> want = oracle_counts(pa, pb, upper_only, n_out, pb.rows, 0, 0);
  std::int64_t bad_values = 0, bad_visits = 0;
  for (std::int64_t li = 0; li < pa.rows; ++li) {
    for (std::int64_t lj = 0; lj < pb.rows; ++lj) {
      const std::int64_t gi = pa.row0 + li, gj = pb.row0 + lj;
      const std::size_t at = static_cast<std::size_t>(li * pb.rows + lj);
      const bool wanted = !upper_only || gi <= gj;
      const std::int32_t expect = want[at];
      if (c[at] != expect && ++bad_values <= 5) {
        ADD_FAILURE() << "C(" << gi << ", " << gj << ") = " << c[at] << ", expected " << expect;
      }
      // Every wanted element exactly once; below the diagonal at most once (diagonal tiles).
      const bool visit_ok = wanted ? v[at] == 1 : (v[at] == 0 || v[at] == 1);
      if (!visit_ok && ++bad_visits <= 5) {
        ADD_FAILURE() << "(" << gi << ", " << gj << ") delivered " << v[at] << " times";
      }
    }
  }
  EXPECT_EQ(bad_values, 0);
  EXPECT_EQ(bad_visits, 0);
}

std::vector<kernel_path> runnable_paths() {
  std::vector<kernel_path> out;
  const int dev = spillway::current_device();
  for (kernel_path p : {kernel_path::popc, kernel_path::mma_sync, kernel_path::wgmma, kernel_path::automatic}) {
    try {
      (void)gd::resolve_path(p, dev);
      out.push_back(p);
    } catch (const spillway::logic_error&) {
    }
  }
  return out;
}

// Every path the device and the code this binary carries for it can run must be offered (on the
// H200 with the project's sm_90a build: all four); what is missing is printed.
void expect_all_paths_runnable(const std::vector<kernel_path>& paths) {
  const int dev = spillway::current_device();
  const int cc = spillway::get_device_properties(dev).compute_capability();
  const int f = gd::build_features(dev);
  std::size_t expected = 2;  // popc, automatic
  if (cc >= 80 && (f & 1) != 0) ++expected;
  if (cc == 90 && (f & 2) != 0) ++expected;
  EXPECT_EQ(paths.size(), expected) << "cc " << cc << ", build features " << f;
  for (auto p : paths) std::cout << "[ path     ] " << spillway::gram::to_string(p) << " runnable (cc " << cc << ")\n";
}

struct shape_case {
  std::int64_t a_rows, b_rows, cols;
};

TEST(GramKernelsGpu, EdgeShapesEveryPathAAt) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto paths = runnable_paths();
  expect_all_paths_runnable(paths);
  spillway::stream s;
  const std::vector<shape_case> shapes = {
      {1, 1, 1},     {1, 1, 1024},  {67, 67, 1},    {131, 131, 7},   {97, 97, 257},   {127, 127, 1023},
      {129, 129, 1025}, {257, 257, 2049}, {301, 301, 4095}, {263, 263, 65}, {521, 521, 3000},
  };
  for (const auto& sh : shapes) {
    const std::uint64_t seed = spillway::test::seed("aat " + std::to_string(sh.a_rows) + "x" + std::to_string(sh.cols));
    std::vector<std::int64_t> ones, zeros;
    if (sh.a_rows > 3) {
      ones = {0, sh.a_rows - 1};
      zeros = {1};
    }
    const host_bits m = random_bits(sh.a_rows, sh.cols, seed, 0.5, ones, zeros);
    for (auto p : paths) {
      for (bool upper : {false, true}) {
        check_product({&m, 0, sh.a_rows}, {&m, 0, sh.a_rows}, upper, p, s,
                      std::to_string(sh.a_rows) + "x" + std::to_string(sh.cols) + (upper ? " upper" : " full"));
      }
    }
  }
}

TEST(GramKernelsGpu, ABtDifferentRowCountsEveryPath) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  spillway::stream s;
  const std::vector<shape_case> shapes = {{1, 300, 100}, {300, 1, 100}, {131, 389, 1500}, {400, 129, 33}, {257, 513, 2048}};
  for (const auto& sh : shapes) {
    const std::uint64_t seed = spillway::test::seed("abt " + std::to_string(sh.a_rows) + "x" + std::to_string(sh.b_rows));
    const host_bits a = random_bits(sh.a_rows, sh.cols, seed, 0.3);
    const host_bits b = random_bits(sh.b_rows, sh.cols, seed + 1, 0.7, {0}, {});
    for (auto p : runnable_paths()) {
      check_product({&a, 0, sh.a_rows}, {&b, 0, sh.b_rows}, false, p, s,
                    "abt " + std::to_string(sh.a_rows) + "x" + std::to_string(sh.b_rows) + "x" + std::to_string(sh.cols));
    }
  }
}

TEST(GramKernelsGpu, UpperOnlyWithPanelOffsets) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  spillway::stream s;
  const std::uint64_t seed = spillway::test::seed("offsets");
  const host_bits m = random_bits(1400, 1100, seed);
  // (a_row0, a_rows, b_row0, b_rows): panels above, across and below the diagonal, and panels
  // whose offsets are not multiples of any tile size.
  const std::vector<std::vector<std::int64_t>> cases = {
      {256, 300, 100, 500}, {0, 600, 600, 700}, {700, 300, 0, 650}, {333, 517, 333, 517}, {901, 499, 5, 1395},
      {129, 255, 1, 1}};
  for (const auto& c : cases) {
    for (auto p : runnable_paths()) {
      check_product({&m, c[0], c[1]}, {&m, c[2], c[3]}, true, p, s,
                    "panels a[" + std::to_string(c[0]) + "+" + std::to_string(c[1]) + ") b[" + std::to_string(c[2]) +
                        "+" + std::to_string(c[3]) + ")");
    }
  }
}

TEST(GramKernelsGpu, ManyTilesPerBlockAndDeepK) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  spillway::stream s;
  // More tiles than multiprocessors (each persistent block walks several) and more k-slices
  // than pipeline stages.
  const std::uint64_t seed = spillway::test::seed("many tiles");
  const host_bits m = random_words(2600, 9000, seed);
  for (auto p : runnable_paths()) {
    if (p == kernel_path::automatic) continue;
    check_product({&m, 0, m.rows}, {&m, 0, m.rows}, true, p, s, "2600x9000 upper");
  }
  const host_bits a = random_words(1700, 9000, seed + 7);
  for (auto p : runnable_paths()) {
    if (p == kernel_path::automatic) continue;
    check_product({&a, 0, 1700}, {&m, 0, 2600}, false, p, s, "1700x2600 full (different matrices)");
  }
}

TEST(GramKernelsGpu, ZeroColumnsAndEmptyPanels) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  spillway::stream s;
  const host_bits m = random_bits(70, 0, 1);  // ld_words = 0: every count is 0
  ASSERT_EQ(m.ld_words, 0);
  for (auto p : runnable_paths()) check_product({&m, 0, 70}, {&m, 0, 70}, true, p, s, "zero columns");
  // Empty panels: nothing is called, nothing is written.
  spillway::device_buffer<std::int32_t> dv(1, s);
  dv.fill_bytes_async(0x00, s);
  gd::bit_gemm_args g;
  g.ld_words = 32;
  g.a_rows = 0;
  g.b_rows = 5;
  spillway::device_buffer<std::uint32_t> db(5 * 32, s);
  g.b = db.data();
  for (auto p : runnable_paths()) {
    gd::bit_gemm_async(g, count_and_visit{dv.data(), dv.data(), 0, 0, 0, false}, p, s);
  }
  int v = -1;
  dv.copy_to_host_async({&v, 1}, s);
  s.synchronize();
  EXPECT_EQ(v, 0);
}

TEST(GramKernelsGpu, StoreCountsUint16AndPerThreadStream) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  const auto s = spillway::stream_view::per_thread();
  const std::uint64_t seed = spillway::test::seed("store_counts u16");
  const host_bits m = random_words(333, 5000, seed);
  spillway::device_buffer<std::uint32_t> da(static_cast<std::size_t>(m.rows * m.ld_words), s);
  da.copy_from_host_async({m.w.data(), m.w.size()}, s);
  for (auto p : runnable_paths()) {
    SCOPED_TRACE(spillway::gram::to_string(p));
    spillway::device_buffer<std::uint16_t> dc(static_cast<std::size_t>(m.rows * m.rows), s);
    dc.fill_bytes_async(0xFF, s);
    const gd::bit_gemm_args g = square_args(da.data(), m.rows, m.ld_words, true);
    gd::bit_gemm_async(g, gd::store_counts<std::uint16_t>{dc.data(), m.rows, 0, 0, true}, p, s);
    std::vector<std::uint16_t> c(dc.size());
    dc.copy_to_host_async({c.data(), c.size()}, s);
    s.synchronize();
    std::int64_t bad = 0;
    for (std::int64_t i = 0; i < m.rows; ++i)
      for (std::int64_t j = 0; j < m.rows; ++j) {
        const std::uint16_t expect = i <= j ? static_cast<std::uint16_t>(oracle(m, i, m, j)) : 0xFFFF;
        if (c[static_cast<std::size_t>(i * m.rows + j)] != expect && ++bad <= 5) {
          ADD_FAILURE() << "C(" << i << ", " << j << ") = " << c[static_cast<std::size_t>(i * m.rows + j)]
                        << ", expected " << expect;
        }
      }
    EXPECT_EQ(bad, 0);
  }
}

// An output of more than 2^31 elements: the epilogue's 64-bit index arithmetic is exercised by
// the last rows; checked on those rows in full and on a random sample of others.
TEST(GramKernelsGpu, OutputBeyond2To31Elements) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  spillway::stream s;
  const std::int64_t n = 48000;  // n*n = 2.3e9 > 2^31
  const std::uint64_t seed = spillway::test::seed("beyond 2^31");
  const host_bits m = random_words(n, 40, seed);
  spillway::device_buffer<std::uint32_t> da(static_cast<std::size_t>(n * m.ld_words), s);
  da.copy_from_host_async({m.w.data(), m.w.size()}, s);
  spillway::device_buffer<std::uint16_t> dc(static_cast<std::size_t>(n * n), s);
  dc.fill_bytes_async(0xFF, s);
  const gd::bit_gemm_args g = square_args(da.data(), n, m.ld_words, true);
  gd::bit_gemm_async(g, gd::store_counts<std::uint16_t>{dc.data(), n, 0, 0, true}, kernel_path::automatic, s);
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> rows;
  for (std::int64_t r = n - 40; r < n; ++r) rows.push_back(r);
  for (int k = 0; k < 60; ++k) rows.push_back(static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(n)));
  std::vector<std::uint16_t> line(static_cast<std::size_t>(n));
  std::int64_t bad = 0;
  for (std::int64_t r : rows) {
    dc.copy_to_host_async({line.data(), line.size()}, s, static_cast<std::size_t>(r * n));
    s.synchronize();
    for (std::int64_t j = 0; j < n; ++j) {
      const std::uint16_t expect = r <= j ? static_cast<std::uint16_t>(oracle(m, r, m, j)) : 0xFFFF;
      if (line[static_cast<std::size_t>(j)] != expect && ++bad <= 5) {
        ADD_FAILURE() << "C(" << r << ", " << j << ") = " << line[static_cast<std::size_t>(j)] << ", expected " << expect;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(GramKernelsGpu, BadInputsThrowAndWriteNothing) {
  SPILLWAY_GPU_TEST_OR_SKIP();
  spillway::stream s;
  spillway::device_buffer<std::uint32_t> da(64 * 40, s);
  spillway::device_buffer<std::int32_t> dc(64, s);
  dc.fill_bytes_async(0xFF, s);
  gd::bit_gemm_args g;
  g.a = g.b = da.data();
  g.a_rows = g.b_rows = 8;
  const gd::store_counts<std::int32_t> epi{dc.data(), 8, 0, 0, false};
  auto expect_throw = [&](gd::bit_gemm_args bad, kernel_path p, const std::string& needle) {
    try {
      gd::bit_gemm_async(bad, epi, p, s);
      ADD_FAILURE() << "no logic_error for " << needle;
    } catch (const spillway::logic_error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  g.ld_words = 33;
  expect_throw(g, kernel_path::automatic, "ld_words");
  expect_throw(g, kernel_path::automatic, "33");
  g.ld_words = 16;
  expect_throw(g, kernel_path::popc, "16");
  g.ld_words = 32;
  gd::bit_gemm_args m = g;
  m.a_rows = -1;
  expect_throw(m, kernel_path::popc, "a_rows");
  m = g;
  m.b_row0 = -3;
  expect_throw(m, kernel_path::popc, "b_row0");
  m = g;
  m.a = da.data() + 1;  // 4-byte offset: not 128-byte aligned
  expect_throw(m, kernel_path::mma_sync, "aligned");
  m = g;
  m.b = nullptr;
  expect_throw(m, kernel_path::popc, "null");
  expect_throw(g, static_cast<kernel_path>(17), "17");

  const auto props = spillway::get_device_properties(spillway::current_device());
  const int f = gd::build_features(spillway::current_device());
  const bool wgmma_ok = props.compute_capability() == 90 && (f & 2) != 0;
  if (!wgmma_ok) {
    expect_throw(g, kernel_path::wgmma, "wgmma");
    expect_throw(g, kernel_path::wgmma, std::to_string(props.cc_major) + "." + std::to_string(props.cc_minor));
  } else {
    EXPECT_EQ(gd::resolve_path(kernel_path::wgmma, spillway::current_device()), kernel_path::wgmma);
    EXPECT_EQ(gd::resolve_path(kernel_path::automatic, spillway::current_device()), kernel_path::wgmma);
  }
  // Nothing was written by any rejected call.
  std::vector<std::int32_t> c(64);
  dc.copy_to_host_async({c.data(), c.size()}, s);
  s.synchronize();
  for (auto x : c) EXPECT_EQ(x, -1);
}

// ---------------------------------------------------------------------------------------------
// store_counts<int32_t> into an output whose window starts `row_shift` rows and `col_shift`
// columns before the panels and has `pad` extra columns per row: inside the window every wanted
// element holds its count, everything else (below the diagonal, the margins, the padding) keeps
// the poison. `bulk` is whether the wgmma kernel's epilogue can use bulk tensor stores here.
void check_store_i32(panel pa, panel pb, bool upper_only, const route& r, std::int64_t row_shift,
                     std::int64_t col_shift, std::int64_t pad, bool bulk, spillway::stream_view s,
                     const std::string& what) {
  SCOPED_TRACE(what + " " + r.name() + " shift=(" + std::to_string(row_shift) + "," + std::to_string(col_shift) + ") pad=" +
               std::to_string(pad));
  ASSERT_EQ(pa.m->ld_words, pb.m->ld_words);
  const std::int64_t ld = pa.m->ld_words;
  const auto da = upload(pa, ld, s);
  const auto db = upload(pb, ld, s);
  const std::int64_t out_rows = pa.rows + row_shift;
  const std::int64_t ldc = pb.rows + col_shift + pad;
  const std::size_t n_out = static_cast<std::size_t>(out_rows * ldc);
  spillway::device_buffer<std::int32_t> dc(n_out, s);
  dc.fill_bytes_async(0xFF, s);

  const gd::bit_gemm_args g = panel_args(da.data(), pa, db.data(), pb, ld, upper_only);
  const gd::store_counts<std::int32_t> epi{dc.data(), ldc, pa.row0 - row_shift, pb.row0 - col_shift, upper_only};
  EXPECT_EQ(gd::tma_store_fits(g, epi), bulk);
  run_route(r, g, epi, s);
  std::vector<std::int32_t> c(n_out);
  dc.copy_to_host_async({c.data(), c.size()}, s);
  s.synchronize();

  const std::vector<std::int32_t> want = oracle_counts(pa, pb, upper_only, n_out, ldc, row_shift, col_shift);
  std::int64_t bad = 0;
  for (std::size_t at = 0; at < n_out; ++at) {
    if (c[at] != want[at] && ++bad <= 5) {
      ADD_FAILURE() << "out[" << static_cast<std::int64_t>(at) / ldc << ", " << static_cast<std::int64_t>(at) % ldc
                    << "] = " << c[at] << ", expected " << want[at];
    }
  }
  EXPECT_EQ(bad, 0);
}

// Host logic only (runs without a GPU): when the wgmma kernel's epilogue may use bulk tensor stores.
TEST(GramWgmmaBulkStore, FitsConditions) {
  alignas(256) static std::int32_t storage[64];
  gd::bit_gemm_args g;
  g.a_rows = 100;
  g.b_rows = 200;
  g.a_row0 = 40;
  g.b_row0 = 60;
  g.ld_words = 32;
  auto fits = [&](std::int32_t* c, std::int64_t ldc, std::int64_t row0, std::int64_t col0) {
    return gd::tma_store_fits(g, gd::store_counts<std::int32_t>{c, ldc, row0, col0, true});
  };
  EXPECT_TRUE(fits(storage, 200, 40, 60));   // the panel exactly
  EXPECT_TRUE(fits(storage, 260, 0, 0));     // global indices, pitch = last column + 1
  EXPECT_TRUE(fits(storage, 204, 38, 56));   // margins before the panel (4 columns: 16 bytes)
  EXPECT_FALSE(fits(storage, 204, 38, 58));  // a 2-column margin: blocks off the 16-byte grid
  EXPECT_FALSE(fits(storage, 201, 40, 60));  // pitch not a multiple of 16 bytes
  EXPECT_FALSE(fits(storage, 202, 40, 60));
  EXPECT_FALSE(fits(storage + 1, 200, 40, 60));  // base not 16-byte aligned
  EXPECT_FALSE(fits(nullptr, 200, 40, 60));
  EXPECT_FALSE(fits(storage, 196, 40, 60));  // the panel's last column past the pitch
  EXPECT_FALSE(fits(storage, 200, 41, 60));  // panel starts before the output's first row
  EXPECT_FALSE(fits(storage, 200, 40, 61));  // ... or first column
  EXPECT_FALSE(fits(storage, 0, 40, 60));
  g.a_rows = (std::int64_t{1} << 31);  // rows past the copy engine's int32 coordinates
  EXPECT_FALSE(fits(storage, 200, 40, 60));
}

// ---------------------------------------------------------------------------------------------
// The persistent tile schedule (host logic, runs without a GPU): the slots a grid walks visit
// every tile a product needs exactly once, and in upper-only mode no tile that lies wholly below
// the diagonal.
TEST(GramTileSchedule, VisitsEveryNeededTileOnce) {
  struct sched_case {
    std::int64_t a_rows, b_rows, a_row0, b_row0;
    bool upper;
    std::int64_t bm, bn, band;
  };
  const std::vector<sched_case> cases = {
      {1000, 1000, 0, 0, true, 128, 256, 8},   {1000, 1000, 0, 0, false, 128, 256, 4},
      {700, 3000, 1300, 0, true, 192, 256, 8}, {517, 517, 333, 333, true, 64, 64, 8},
      {1, 5000, 4999, 0, true, 128, 256, 3},   {300, 300, 5000, 0, true, 128, 256, 8},
      {2600, 2600, 0, 0, true, 192, 256, 8},   {999, 1, 0, 998, true, 128, 192, 8}};
  for (const auto& c : cases) {
    const auto s = spillway::tile::make_tile_schedule(c.a_rows, c.b_rows, c.a_row0, c.b_row0, c.upper, c.bm, c.bn,
                                                      c.band);
    std::vector<int> seen(static_cast<std::size_t>(s.num_ti * s.num_tj), 0);
    for (const std::int64_t grid : {std::int64_t{1}, std::int64_t{7}, std::int64_t{132}}) {
      std::fill(seen.begin(), seen.end(), 0);
      for (std::int64_t blk = 0; blk < grid; ++blk) {
        spillway::tile::tile_cursor cur;
        for (std::int64_t t = blk; t < s.total; t += grid) {
          std::int64_t ti = 0, tj = 0;
          if (cur.locate(s, t, ti, tj)) ++seen[static_cast<std::size_t>(ti * s.num_tj + tj)];
        }
      }
      for (std::int64_t ti = 0; ti < s.num_ti; ++ti) {
        for (std::int64_t tj = 0; tj < s.num_tj; ++tj) {
          // Needed: some (i, j) of the tile with i <= j (global indices), or every tile when full.
          const std::int64_t first_row = c.a_row0 + ti * c.bm;
          const std::int64_t last_col = c.b_row0 + std::min((tj + 1) * c.bn, c.b_rows) - 1;
          const bool needed = !c.upper || first_row <= last_col;
          EXPECT_EQ(seen[static_cast<std::size_t>(ti * s.num_tj + tj)], needed ? 1 : 0)
              << "tile (" << ti << ", " << tj << ") of " << c.a_rows << " x " << c.b_rows << " grid " << grid;
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Each tile kernel forced (bit_gemm_forced_async), in suites of their own so that they can run in
// a separate process: the BGMMA kernel (wgmma, with its bulk-store epilogue), the TMA-fed BMMA
// kernel (what mma_sync runs from compute capability 9.0) and the cp.async-fed BMMA kernel (what
// sm_80 to sm_89 run; forced here so that every device from 8.0 up tests it). Where a kernel cannot
// run, its suite checks the refusal instead (the sm_80 test binary on an H200 runs only the
// cp.async one).

struct kernel_suite {
  gd::tile_kernel kernel;
  const char* label;
  [[nodiscard]] std::uint64_t seed(const std::string& what) const {
    return spillway::test::seed(std::string(label) + " " + what);
  }
  [[nodiscard]] bool runs() const { return gd::kernel_refusal(kernel, spillway::current_device()).empty(); }
};
const kernel_suite wgmma_suite{gd::tile_kernel::wgmma, "wgmma"};
const kernel_suite tma_suite{gd::tile_kernel::mma_sync_tma, "mma_sync_tma"};
const kernel_suite cp_async_suite{gd::tile_kernel::mma_sync_cp_async, "mma_sync_cp_async"};

/// Whether the suite's kernel runs here (printed); where it does not, forcing it throws a
/// logic_error naming the kernel and the device's compute capability (and, for the BMMA kernels,
/// the shared memory needed and offered), and nothing is written.
bool kernel_runs_or_is_refused(const kernel_suite& v) {
  const int dev = spillway::current_device();
  const int cc = spillway::get_device_properties(dev).compute_capability();
  const int f = gd::build_features(dev);
  const bool runs = v.runs();
  std::cout << "[ kernel   ] " << v.label << (runs ? " runs" : " refused") << " (cc " << cc << ", build features "
            << f << ", " << gd::max_block_smem(dev) << " bytes of shared memory per block)\n";
  // What this device and build must run: the sm_90a binary on an H200 runs all three.
  if (v.kernel == gd::tile_kernel::wgmma) EXPECT_EQ(runs, cc == 90 && (f & 2) != 0);
  if (v.kernel == gd::tile_kernel::mma_sync_tma) {
    EXPECT_EQ(runs, cc >= 90 && (f & 4) != 0 && gd::max_block_smem(dev) >= gd::bmma_tma_config::smem_bytes);
  }
  if (v.kernel == gd::tile_kernel::mma_sync_cp_async) {
    EXPECT_EQ(runs, cc >= 80 && (f & 1) != 0 && gd::max_block_smem(dev) >= gd::bmma_cp_async_config::smem_bytes);
  }
  if (runs) return true;
  spillway::stream s;
  spillway::device_buffer<std::uint32_t> da(32, s);
  spillway::device_buffer<std::int32_t> dc(1, s);
  dc.fill_bytes_async(0xFF, s);
  const gd::bit_gemm_args g = square_args(da.data(), 1, 32, false);
  try {
    gd::bit_gemm_forced_async(g, gd::store_counts<std::int32_t>{dc.data(), 1, 0, 0, false}, v.kernel, s);
    ADD_FAILURE() << v.label << " ran on a device that cannot run it";
  } catch (const spillway::logic_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(v.label), std::string::npos) << msg;
    EXPECT_NE(msg.find("compute capability " + std::to_string(cc / 10) + "." + std::to_string(cc % 10)),
              std::string::npos)
        << msg;
    if (v.kernel != gd::tile_kernel::wgmma) {
      EXPECT_NE(msg.find("shared memory"), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::to_string(gd::max_block_smem(dev))), std::string::npos) << msg;
    }
  }
  std::int32_t h = 0;
  dc.copy_to_host_async({&h, 1}, s);
  s.synchronize();
  EXPECT_EQ(h, -1);
  return false;
}

void suite_edge_shapes_aat(const kernel_suite& v) {
  if (!kernel_runs_or_is_refused(v)) return;
  spillway::stream s;
  const std::vector<shape_case> shapes = {
      {1, 1, 1},     {1, 1, 1024},  {67, 67, 1},    {131, 131, 7},   {97, 97, 257},   {127, 127, 1023},
      {129, 129, 1025}, {257, 257, 2049}, {301, 301, 4095}, {263, 263, 65}, {521, 521, 3000},
  };
  for (const auto& sh : shapes) {
    const std::uint64_t seed = v.seed("aat " + std::to_string(sh.a_rows) + "x" + std::to_string(sh.cols));
    std::vector<std::int64_t> ones, zeros;
    if (sh.a_rows > 3) {
      ones = {0, sh.a_rows - 1};
      zeros = {1};
    }
    const host_bits m = random_bits(sh.a_rows, sh.cols, seed, 0.5, ones, zeros);
    for (bool upper : {false, true}) {
      check_product({&m, 0, sh.a_rows}, {&m, 0, sh.a_rows}, upper, v.kernel, s,
                    std::to_string(sh.a_rows) + "x" + std::to_string(sh.cols) + (upper ? " upper" : " full"));
    }
  }
}

void suite_abt_different_row_counts(const kernel_suite& v) {
  if (!v.runs()) return;
  spillway::stream s;
  const std::vector<shape_case> shapes = {{1, 300, 100}, {300, 1, 100}, {131, 389, 1500}, {400, 129, 33}, {257, 513, 2048}};
  for (const auto& sh : shapes) {
    const std::uint64_t seed = v.seed("abt " + std::to_string(sh.a_rows) + "x" + std::to_string(sh.b_rows));
    const host_bits a = random_bits(sh.a_rows, sh.cols, seed, 0.3);
    const host_bits b = random_bits(sh.b_rows, sh.cols, seed + 1, 0.7, {0}, {});
    check_product({&a, 0, sh.a_rows}, {&b, 0, sh.b_rows}, false, v.kernel, s,
                  "abt " + std::to_string(sh.a_rows) + "x" + std::to_string(sh.b_rows) + "x" + std::to_string(sh.cols));
  }
}

// Panels of one matrix (a_row0, a_rows, b_row0, b_rows), upper-only.
const std::vector<std::vector<std::int64_t>> panel_cases = {
    {256, 300, 100, 500}, {0, 600, 600, 700}, {700, 300, 0, 650}, {333, 517, 333, 517}, {901, 499, 5, 1395},
    {129, 255, 1, 1}};

std::string panel_name(const std::vector<std::int64_t>& c) {
  return "panels a[" + std::to_string(c[0]) + "+" + std::to_string(c[1]) + ") b[" + std::to_string(c[2]) + "+" +
         std::to_string(c[3]) + ")";
}

void suite_upper_only_with_panel_offsets(const kernel_suite& v) {
  if (!v.runs()) return;
  spillway::stream s;
  const host_bits m = random_bits(1400, 1100, v.seed("offsets"));
  for (const auto& c : panel_cases) check_product({&m, c[0], c[1]}, {&m, c[2], c[3]}, true, v.kernel, s, panel_name(c));
}

void suite_many_tiles_per_block_and_deep_k(const kernel_suite& v) {
  if (!v.runs()) return;
  spillway::stream s;
  const std::uint64_t seed = v.seed("many tiles");
  const host_bits m = random_words(2600, 9000, seed);
  const host_bits a = random_words(1700, 9000, seed + 7);
  check_product({&m, 0, m.rows}, {&m, 0, m.rows}, true, v.kernel, s, "2600x9000 upper");
  check_product({&a, 0, 1700}, {&m, 0, 2600}, false, v.kernel, s, "1700x2600 full (different matrices)");
}

// The raw int32 count store (bulk tensor stores in the wgmma kernel; per element in the others):
// outputs with and without a 16-byte row pitch, margins before the panels, padding columns.
void suite_int32_count_store_edge_shapes(const kernel_suite& v) {
  if (!v.runs()) return;
  spillway::stream s;
  const std::vector<shape_case> shapes = {{1, 1, 1},       {67, 67, 1},     {131, 131, 7},   {129, 129, 1025},
                                          {257, 257, 2049}, {263, 263, 65}, {300, 300, 1500}, {521, 521, 3000}};
  for (const auto& sh : shapes) {
    const std::uint64_t seed = v.seed("store " + std::to_string(sh.a_rows) + "x" + std::to_string(sh.cols));
    const host_bits m = random_bits(sh.a_rows, sh.cols, seed, 0.5, sh.a_rows > 3 ? std::vector<std::int64_t>{0} : std::vector<std::int64_t>{},
                                    sh.a_rows > 3 ? std::vector<std::int64_t>{2} : std::vector<std::int64_t>{});
    const std::int64_t n = sh.a_rows;
    const std::int64_t pad16 = (4 - n % 4) % 4 + 4;  // ldc a multiple of 4 with 4+ spare columns
    for (bool upper : {false, true}) {
      const std::string what = std::to_string(n) + "x" + std::to_string(sh.cols) + (upper ? " upper" : " full");
      check_store_i32({&m, 0, n}, {&m, 0, n}, upper, v.kernel, 0, 0, 0, n % 4 == 0, s, what);
      check_store_i32({&m, 0, n}, {&m, 0, n}, upper, v.kernel, 0, 0, pad16, true, s, what);
      check_store_i32({&m, 0, n}, {&m, 0, n}, upper, v.kernel, 3, 4, pad16, true, s, what);
    }
  }
}

void suite_int32_count_store_panels_and_many_tiles(const kernel_suite& v) {
  if (!v.runs()) return;
  spillway::stream s;
  const std::uint64_t seed = v.seed("store panels");
  const host_bits m = random_bits(1400, 1100, seed);
  for (const auto& c : panel_cases) {
    // A column margin of 4 keeps every block on a 16-byte boundary (bulk stores); a margin of 1
    // does not, and the wgmma kernel must fall back to per-element stores.
    for (const std::int64_t col_shift : {std::int64_t{4}, std::int64_t{1}}) {
      const std::int64_t pad = (4 - (c[3] + col_shift) % 4) % 4;  // ldc = b_rows + shift + pad, a multiple of 4
      check_store_i32({&m, c[0], c[1]}, {&m, c[2], c[3]}, true, v.kernel, 2, col_shift, pad, col_shift % 4 == 0, s,
                      panel_name(c));
    }
  }
  // Several tiles per persistent block and deep k: stages and staging buffers are reused across
  // tiles while earlier copies or bulk stores may still be in flight.
  const host_bits big = random_words(2600, 9000, seed + 3);
  const host_bits other = random_words(1700, 9000, seed + 4);
  check_store_i32({&big, 0, 2600}, {&big, 0, 2600}, true, v.kernel, 0, 0, 0, true, s, "2600x9000 upper");
  check_store_i32({&other, 0, 1700}, {&big, 0, 2600}, false, v.kernel, 0, 0, 0, true, s, "1700x2600 full");
  // The same through the per-thread default stream.
  const auto pts = spillway::stream_view::per_thread();
  check_store_i32({&big, 100, 1000}, {&big, 100, 2500}, true, v.kernel, 0, 0, 0, true, pts, "per-thread stream");
}

// 5000 x 6000 full products: hundreds of tiles, several per block of a 132-SM grid, with 1, 2 and
// 5 k-slices per tile (fewer than the 4 stages a tile's prologue fills, and a count that is not a
// multiple of 4), so the TMA-fed kernels' mbarrier phases (and the BMMA kernel's release
// counters) run on across tiles.
void suite_mbarrier_phases_across_tiles(const kernel_suite& v) {
  if (!v.runs()) return;
  spillway::stream s;
  for (const std::int64_t cols : {std::int64_t{1000}, std::int64_t{1500}, std::int64_t{4500}}) {
    const std::uint64_t seed = v.seed("phases " + std::to_string(cols));
    const host_bits a = random_bits(5000, cols, seed, 0.5);
    const host_bits b = random_bits(6000, cols, seed + 1, 0.4, {5, 5999}, {0});
    check_store_i32({&a, 0, 5000}, {&b, 0, 6000}, false, v.kernel, 0, 0, 0, true, s,
                    "5000x6000x" + std::to_string(cols) + " full");
  }
  const host_bits m = random_bits(6000, 2500, v.seed("phases upper"));
  check_product({&m, 0, 6000}, {&m, 0, 6000}, true, v.kernel, s, "6000x2500 upper");
}

void suite_zero_columns_and_empty_panels(const kernel_suite& v) {
  if (!v.runs()) return;
  spillway::stream s;
  const host_bits m = random_bits(70, 0, 1);
  check_product({&m, 0, 70}, {&m, 0, 70}, true, v.kernel, s, "zero columns");
  check_store_i32({&m, 0, 70}, {&m, 0, 70}, true, v.kernel, 0, 0, 2, true, s, "zero columns");
  // Empty panel: nothing written.
  spillway::device_buffer<std::int32_t> dc(16, s);
  dc.fill_bytes_async(0xFF, s);
  spillway::device_buffer<std::uint32_t> da(8 * 32, s);
  gd::bit_gemm_args g;
  g.a = g.b = da.data();
  g.a_rows = 0;
  g.b_rows = 4;
  g.ld_words = 32;
  run_route(v.kernel, g, gd::store_counts<std::int32_t>{dc.data(), 4, 0, 0, false}, s);
  std::vector<std::int32_t> c(16);
  dc.copy_to_host_async({c.data(), c.size()}, s);
  s.synchronize();
  for (auto x : c) EXPECT_EQ(x, -1);
}

// One TEST of a forced route: skips without a GPU, then runs the shared body on route v.
#define SPILLWAY_GRAM_KERNEL_TEST(Suite, Name, body, v) \
  TEST(Suite, Name) {                                    \
    SPILLWAY_GPU_TEST_OR_SKIP();                         \
    body(v);                                             \
  }
#define SPILLWAY_GRAM_KERNEL_SUITE(Suite, v)                                                                            \
  SPILLWAY_GRAM_KERNEL_TEST(Suite, EdgeShapesAAt, suite_edge_shapes_aat, v)                                             \
  SPILLWAY_GRAM_KERNEL_TEST(Suite, ABtDifferentRowCounts, suite_abt_different_row_counts, v)                            \
  SPILLWAY_GRAM_KERNEL_TEST(Suite, UpperOnlyWithPanelOffsets, suite_upper_only_with_panel_offsets, v)                   \
  SPILLWAY_GRAM_KERNEL_TEST(Suite, ManyTilesPerBlockAndDeepK, suite_many_tiles_per_block_and_deep_k, v)                 \
  SPILLWAY_GRAM_KERNEL_TEST(Suite, Int32CountStoreEdgeShapes, suite_int32_count_store_edge_shapes, v)                   \
  SPILLWAY_GRAM_KERNEL_TEST(Suite, Int32CountStorePanelsAndManyTiles, suite_int32_count_store_panels_and_many_tiles, v) \
  SPILLWAY_GRAM_KERNEL_TEST(Suite, MbarrierPhasesAcrossTiles, suite_mbarrier_phases_across_tiles, v)                    \
  SPILLWAY_GRAM_KERNEL_TEST(Suite, ZeroColumnsAndEmptyPanels, suite_zero_columns_and_empty_panels, v)

SPILLWAY_GRAM_KERNEL_SUITE(GramForcedWgmmaGpu, wgmma_suite)
SPILLWAY_GRAM_KERNEL_SUITE(GramForcedMmaSyncTmaGpu, tma_suite)
SPILLWAY_GRAM_KERNEL_SUITE(GramForcedMmaSyncCpAsyncGpu, cp_async_suite)

#undef SPILLWAY_GRAM_KERNEL_SUITE
#undef SPILLWAY_GRAM_KERNEL_TEST

}  // namespace
