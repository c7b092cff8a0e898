// spillway/core/enum_name.hpp — an enumerator's name, from the list of names in declaration order.
#pragma once

#include <cstddef>

namespace spillway::detail {

/// names[v] for an enumeration whose enumerators are 0, 1, ... in the order of `names` (each
/// to_string below its enum lists them); "?" for any other value.
template <class E, std::size_t N>
constexpr const char* enum_name(E v, const char* const (&names)[N]) noexcept {
  const auto i = static_cast<std::size_t>(v);
  return i < N ? names[i] : "?";
}

}  // namespace spillway::detail
