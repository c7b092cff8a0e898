// The GEMM's element-type table (gemm/types.hpp): what it says of each type, and docs/gemm.md's
// copy of it, row by row.
#include <spillway/gemm/types.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace {

namespace sg = spillway::gemm;

// The C++ spellings docs/gemm.md uses for every type a row names (input, accumulator, C).
template <class T>
std::string name_of() {
  if constexpr (std::is_same_v<T, float>) return "float";
  else if constexpr (std::is_same_v<T, double>) return "double";
  else if constexpr (std::is_same_v<T, __half>) return "__half";
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return "__nv_bfloat16";
  else if constexpr (std::is_same_v<T, std::int8_t>) return "int8_t";
  else if constexpr (std::is_same_v<T, std::int32_t>) return "int32_t";
  else if constexpr (std::is_same_v<T, __nv_fp8_e4m3>)
    return "__nv_fp8_e4m3";
  else if constexpr (std::is_same_v<T, __nv_fp8_e5m2>)
    return "__nv_fp8_e5m2";
  else return "cuda::std::complex<float>";
}
using candidates = std::tuple<float, double, __half, __nv_bfloat16, std::int8_t, std::int32_t,
                              cuda::std::complex<float>, __nv_fp8_e4m3, __nv_fp8_e5m2>;

struct doc_row {
  std::string accumulator;
  std::set<std::string> c;
};

template <class Row, class... C>
std::set<std::string> c_names(std::tuple<C...>) {
  std::set<std::string> s;
  ((Row::template writes<C> ? (void)s.insert(name_of<C>()) : (void)0), ...);
  return s;
}

std::string trim(std::string s) {
  const char* ws = " `";
  s.erase(0, s.find_first_not_of(ws));
  s.erase(s.find_last_not_of(ws) + 1);
  return s;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, sep)) out.push_back(part);
  return out;
}

// docs/gemm.md's "| T | accumulator | C |" table, keyed by T.
std::map<std::string, doc_row> read_doc_table() {
  const std::string here = __FILE__;
  const std::string path = here.substr(0, here.rfind("tests/gemm/")) + "docs/gemm.md";
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "cannot read " << path;
  std::map<std::string, doc_row> rows;
  std::string line;
  bool in_table = false;
  while (std::getline(f, line)) {
    if (line == "| T | accumulator | C |") {
      in_table = true;
      std::getline(f, line);  // | --- | --- | --- |
      continue;
    }
    if (!in_table) continue;
    if (line.empty() || line[0] != '|') break;
    const std::vector<std::string> cells = split(line.substr(1), '|');
    EXPECT_EQ(cells.size(), 3u) << line;
    if (cells.size() != 3) continue;
    doc_row r;
    r.accumulator = trim(cells[1]);
    for (const std::string& c : split(cells[2], ',')) r.c.insert(trim(c));
    rows[trim(cells[0])] = r;
  }
  return rows;
}

template <std::size_t... I>
void expect_doc_rows(const std::map<std::string, doc_row>& doc, std::index_sequence<I...>) {
  auto one = [&](auto row, std::size_t i) {
    using R = decltype(row);
    const std::string t = sg::gemm_type_table[i].name;
    EXPECT_EQ(t, name_of<typename R::input>());
    const auto it = doc.find(t);
    if (it == doc.end()) {
      ADD_FAILURE() << "docs/gemm.md's type table has no row for " << t;
      return;
    }
    EXPECT_EQ(it->second.accumulator, name_of<typename R::accumulator>()) << t;
    EXPECT_EQ(it->second.c, c_names<R>(candidates{})) << t;
  };
  (one(std::tuple_element_t<I, sg::gemm_types>{}, I), ...);
}

TEST(GemmTypes, TheDocsTableIsTheTable) {
  const auto doc = read_doc_table();
  EXPECT_EQ(doc.size(), sg::gemm_type_count) << "docs/gemm.md lists another set of element types";
  expect_doc_rows(doc, std::make_index_sequence<sg::gemm_type_count>{});
}

TEST(GemmTypes, EachRowSaysItsTypes) {
  static_assert(std::is_same_v<sg::accumulator_t<const __half>, float>);
  static_assert(std::is_same_v<sg::accumulator_t<std::int8_t>, std::int32_t>);
  static_assert(sg::is_gemm_input_v<const double> && !sg::is_gemm_input_v<int> && !sg::is_gemm_input_v<std::int32_t>);
  static_assert(sg::gemm_type_row_t<std::int8_t>::writes<float> && !sg::gemm_type_row_t<double>::writes<float>);
  std::set<char> codes;
  std::set<std::string> numpy;
  for (const sg::gemm_type_info& t : sg::gemm_type_table) {
    EXPECT_TRUE(codes.insert(t.code).second) << "code " << t.code << " twice";
    EXPECT_TRUE(numpy.insert(t.numpy).second) << t.numpy << " twice";
  }
  EXPECT_EQ(sg::gemm_type_info_of<__nv_bfloat16>().numpy, std::string("bfloat16"));
  EXPECT_TRUE(sg::gemm_type_info_of<double>().dmma && !sg::gemm_type_info_of<double>().mma_sync &&
              !sg::gemm_type_info_of<double>().wgmma);
  // FP8: wgmma (and simt) only, per-tensor scales, float accumulation.
  static_assert(std::is_same_v<sg::accumulator_t<__nv_fp8_e5m2>, float>);
  EXPECT_TRUE(sg::gemm_type_info_of<__nv_fp8_e4m3>().wgmma &&
              !sg::gemm_type_info_of<__nv_fp8_e4m3>().mma_sync);
  for (const sg::gemm_type_info& t : sg::gemm_type_table) {
    EXPECT_EQ(t.scaled, t.arith == sg::element_arith::fp8) << t.name;
  }
  EXPECT_EQ(sg::gemm_numpy_types(),
            "float32, float64, float16, bfloat16, int8, complex64, float8_e4m3fn or float8_e5m2");
}

TEST(GemmTypes, ACodeDispatchesToItsRow) {
  for (const sg::gemm_type_info& t : sg::gemm_type_table) {
    std::string seen;
    EXPECT_TRUE(sg::visit_gemm_type(t.code, [&](auto row) { seen = name_of<typename decltype(row)::input>(); }));
    EXPECT_EQ(seen, t.name);
  }
  EXPECT_FALSE(sg::visit_gemm_type('x', [](auto) { ADD_FAILURE() << "no row has code x"; }));
}

}  // namespace
