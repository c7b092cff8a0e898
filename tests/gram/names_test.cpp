// Host test (issue 16 item 6): spillway::host_memory and spillway::gram::host_memory are one enum,
// so code that brings both namespaces in with `using namespace` compiles and means one thing.
#include <spillway/gram/bit_matrix.hpp>
#include <spillway/pipeline/host_operand.hpp>

#include <gtest/gtest.h>

#include <type_traits>

namespace both {
using namespace spillway;
using namespace spillway::gram;
// Unqualified: would be ambiguous if the two namespaces declared two enums.
static_assert(std::is_same_v<host_memory, spillway::host_memory>);
static_assert(std::is_same_v<spillway::gram::host_memory, spillway::host_memory>);
static_assert(host_memory::pinned == host_memory::page_locked);
}  // namespace both

TEST(GramNames, OneHostMemoryEnumForBitMatricesAndOperands) {
  using namespace spillway;
  using namespace spillway::gram;
  const bit_matrix a(3, 70, host_memory::pageable);
  EXPECT_EQ(a.memory(), host_memory::pageable);
  const bit_matrix d(3, 70, host_memory::detect);  // nothing to detect for memory spillway allocates
  EXPECT_EQ(d.memory(), host_memory::pageable);
  EXPECT_STREQ(to_string(host_memory::pinned), "page-locked");
}
