// spillway/ode/detail/checks.hpp — argument checks shared by the device API and the host
// implementation, so both reject the same inputs with the same messages.
#pragma once

#include <spillway/core/error.hpp>

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <string>

namespace spillway::ode::detail {

inline std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

inline void check_time(const char* who, double t0, double dt) {
  if (!std::isfinite(t0)) throw logic_error(std::string(who) + ": t0 must be finite, got " + num(t0));
  if (!std::isfinite(dt) || dt == 0.0) {
    throw logic_error(std::string(who) + ": dt must be finite and non-zero, got " + num(dt));
  }
}

inline void check_same_size(const char* who, std::uint64_t expected, std::uint64_t got, std::size_t index) {
  if (got != expected) {
    throw logic_error(std::string(who) + ": state array " + std::to_string(index) + " has " +
                      std::to_string(got) + " elements but array 0 has " + std::to_string(expected));
  }
}

inline void check_snapshots(const char* who, std::uint64_t every, std::uint64_t steps, std::uint64_t n,
                            std::uint64_t capacity_elements, bool given) {
  if (every == 0) {
    if (given) throw logic_error(std::string(who) + ": snapshots given but snapshot_every is 0");
    return;
  }
  const std::uint64_t count = steps / every;
  if (count > 0 && n > 0 && capacity_elements / n < count) {
    throw logic_error(std::string(who) + ": snapshot_every = " + std::to_string(every) + " over " +
                      std::to_string(steps) + " steps needs " + std::to_string(count) + " x " +
                      std::to_string(n) + " elements per array, snapshots hold " +
                      std::to_string(capacity_elements));
  }
}

}  // namespace spillway::ode::detail
