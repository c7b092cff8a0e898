// spillway/version.hpp — the library's version, written by hand so that the headers work by include
// path alone (no CMake step). CMakeLists.txt fails the configure if these numbers and project(VERSION)
// disagree, so a release bumps both or neither.
#pragma once

#define SPILLWAY_VERSION_MAJOR 0
#define SPILLWAY_VERSION_MINOR 1
#define SPILLWAY_VERSION_PATCH 0
#define SPILLWAY_VERSION_STRING "0.1.0"

namespace spillway {
inline constexpr int version_major = SPILLWAY_VERSION_MAJOR;
inline constexpr int version_minor = SPILLWAY_VERSION_MINOR;
inline constexpr int version_patch = SPILLWAY_VERSION_PATCH;
inline constexpr const char* version_string = SPILLWAY_VERSION_STRING;
}  // namespace spillway
