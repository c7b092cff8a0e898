// Test support: a call that must throw an exception whose message names what was wrong.
#pragma once

#include <spillway/core/error.hpp>

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace spillway::test {

/// Runs `call`, which must throw E with every one of `needles` in its message. A call that returns
/// is a fatal failure of this function: wrap it in ASSERT_NO_FATAL_FAILURE to stop the test there.
template <class E = logic_error, class F>
void expect_throw_naming(F&& call, const std::vector<std::string>& needles) {
  try {
    call();
  } catch (const E& e) {
    const std::string m = e.what();
    for (const auto& n : needles) EXPECT_NE(m.find(n), std::string::npos) << m;
    return;
  }
  FAIL() << "no exception";
}

}  // namespace spillway::test
