// spillway/core/memory_budget.hpp — how much device memory an algorithm may use, per device.
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/memory_pool.hpp>

#include <cstddef>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace spillway {

/// Bytes of device memory an algorithm may allocate on each device it uses. Out-of-core algorithms
/// plan their chunks to fit inside it, so an 80 GB card can be made to behave like an 8 GB one.
class memory_budget {
 public:
  /// The documented default: this fraction of the device's free memory at the time of the call.
  static constexpr double default_fraction = 0.80;

  explicit memory_budget(std::size_t bytes_per_device) : bytes_(bytes_per_device) {
    if (bytes_per_device == 0) throw logic_error("memory_budget: bytes_per_device must be > 0, got 0");
  }

  /// `fraction` (0 < fraction ≤ 1) of the free memory on `device` now, counting what spillway's
  /// pool holds idle (an earlier job's buffers, kept for reuse) as free: a job repeated in a loop
  /// gets the budget of its first call.
  static memory_budget fraction_of_free(double fraction, int device) {
    if (!(fraction > 0.0 && fraction <= 1.0)) {
      throw logic_error("memory_budget::fraction_of_free: fraction must be in (0, 1], got " +
                        std::to_string(fraction));
    }
    const memory_info m = get_memory_info(device);
    const auto b =
        static_cast<std::size_t>(static_cast<double>(m.free_bytes + pool_idle_bytes(device)) * fraction);
    if (b == 0) throw out_of_memory("memory_budget: device " + std::to_string(device) + " has no free memory", 1, 0);
    return memory_budget(b);
  }

  /// default_fraction (80%) of the free memory on `device` now.
  static memory_budget default_for(int device) { return fraction_of_free(default_fraction, device); }

  /// One budget per entry of a job's device list that fits every entry: the smallest default_for()
  /// over the devices, each divided by how often its device is listed ({0, 0}: two workers on
  /// device 0 share its default, 40% of its free memory each).
  template <class Devices>
  static memory_budget default_for_all(const Devices& devices) {
    std::size_t b = 0;
    bool first = true;
    for (int d : devices) {
      std::size_t times = 0;
      for (int e : devices) times += e == d ? 1u : 0u;
      const std::size_t x = default_for(d).bytes() / times;
      b = first ? x : (x < b ? x : b);
      first = false;
    }
    if (first) throw logic_error("memory_budget::default_for_all: no devices given");
    return memory_budget(b);
  }

  /// Every job's budget rule: `given` where the caller set one, else default_for_all(devices) —
  /// the default, 80% of the least free memory over the job's devices (so never more than a
  /// device has), shared between the entries that name one device.
  template <class Devices>
  static memory_budget or_default(const std::optional<memory_budget>& given, const Devices& devices) {
    return given ? *given : default_for_all(devices);
  }

  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }

 private:
  std::size_t bytes_;
};

/// What every job resolves before it plans: its devices (resolve_devices) and its budget per
/// device entry (memory_budget::or_default over them).
struct job_devices {
  std::vector<int> devices;
  memory_budget budget;
};

/// The one prologue of a job: `devices` (empty: every visible device; each checked, repeats
/// allowed) and `budget` (unset: the default over those devices). Throws no_gpu_error naming
/// `who` when no device is left.
inline job_devices resolve_job_devices(const std::vector<int>& devices, const std::optional<memory_budget>& budget,
                                       const char* who) {
  std::vector<int> d = resolve_devices(devices, who);
  const memory_budget b = memory_budget::or_default(budget, d);
  return job_devices{std::move(d), b};
}

/// Parses a byte count as the examples' `--budget` takes it: a number with an optional unit,
/// binary `KiB` `MiB` `GiB` `TiB` (also `K` `M` `G` `T`) or decimal `kB` `MB` `GB` `TB`, e.g. "4GiB",
/// "512MiB", "1.5GiB", "8000000000". Throws logic_error naming the text when it is not one (or 0).
inline std::size_t parse_byte_size(const std::string& text) {
  const auto bad = [&](const char* why) {
    return logic_error("'" + text + "' is not a byte size (" + why + "; e.g. 4GiB, 512MiB, 1.5GiB or 8000000000)");
  };
  std::size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (const std::exception&) {
    throw bad("no number");
  }
  std::string unit = text.substr(pos);
  while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  double mul = 1;
  if (unit.empty() || unit == "B") mul = 1;
  else if (unit == "KiB" || unit == "K") mul = 1024.0;
  else if (unit == "MiB" || unit == "M") mul = 1024.0 * 1024;
  else if (unit == "GiB" || unit == "G") mul = 1024.0 * 1024 * 1024;
  else if (unit == "TiB" || unit == "T") mul = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "kB" || unit == "KB") mul = 1e3;
  else if (unit == "MB") mul = 1e6;
  else if (unit == "GB") mul = 1e9;
  else if (unit == "TB") mul = 1e12;
  else throw bad("unknown unit");
  const double bytes = v * mul;
  if (!(bytes >= 1) || bytes > 1.8e19) throw bad("must be at least 1 byte");
  return static_cast<std::size_t>(bytes);
}

/// Byte-count literals: `memory_budget(8_GiB)`. Bring them into scope with
/// `using namespace spillway::literals;` (or `using namespace spillway;`, which includes them).
inline namespace literals {
inline constexpr std::size_t operator""_KiB(unsigned long long v) { return static_cast<std::size_t>(v) << 10; }
inline constexpr std::size_t operator""_MiB(unsigned long long v) { return static_cast<std::size_t>(v) << 20; }
inline constexpr std::size_t operator""_GiB(unsigned long long v) { return static_cast<std::size_t>(v) << 30; }
}  // namespace literals

}  // namespace spillway
