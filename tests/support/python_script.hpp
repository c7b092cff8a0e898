// The python3 with NumPy that tests/CMakeLists.txt hands the tests in SPILLWAY_PYTHON (empty when
// there is none: interop tests then skip), and a script a test writes and runs with it.
#pragma once

#include <cstdlib>
#include <fstream>
#include <string>

namespace spillway::test {

inline std::string interop_python() {
  const char* p = std::getenv("SPILLWAY_PYTHON");
  return p != nullptr ? p : "";
}

/// Writes `text` to `path` and runs it with `py`, its one argument `arg` (a prefix of the test's
/// files); returns std::system's status.
inline int run_python(const std::string& py, const std::string& path, const std::string& text, const std::string& arg) {
  {
    std::ofstream s(path);
    s << text;
  }
  return std::system((py + " " + path + " " + arg).c_str());
}

}  // namespace spillway::test
