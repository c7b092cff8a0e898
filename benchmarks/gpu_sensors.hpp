// benchmarks/gpu_sensors.hpp — the SM clock, board power and temperature of a CUDA device, read
// through NVML loaded at run time (dlopen of the driver's libnvidia-ml.so.1), so a benchmark binary
// needs no NVML to build or to run: where the library or the device is missing, `available()` is
// false and every reading is 0. The CUDA device is matched to its NVML handle by PCI bus id (the
// two orders differ under CUDA_VISIBLE_DEVICES).
#pragma once

#include <cuda_runtime_api.h>
#include <dlfcn.h>

namespace spillway::bench {

class gpu_sensors {
 public:
  struct reading {
    unsigned sm_clock_mhz = 0;
    double power_w = 0;
    unsigned temperature_c = 0;
  };

  explicit gpu_sensors(int cuda_device) {
    lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib_ == nullptr) return;
    init_ = reinterpret_cast<int (*)()>(dlsym(lib_, "nvmlInit_v2"));
    shutdown_ = reinterpret_cast<int (*)()>(dlsym(lib_, "nvmlShutdown"));
    by_bus_ = reinterpret_cast<int (*)(const char*, void**)>(dlsym(lib_, "nvmlDeviceGetHandleByPciBusId_v2"));
    clock_ = reinterpret_cast<int (*)(void*, int, unsigned*)>(dlsym(lib_, "nvmlDeviceGetClockInfo"));
    power_ = reinterpret_cast<int (*)(void*, unsigned*)>(dlsym(lib_, "nvmlDeviceGetPowerUsage"));
    temp_ = reinterpret_cast<int (*)(void*, int, unsigned*)>(dlsym(lib_, "nvmlDeviceGetTemperature"));
    char bus[32] = {};
    if (init_ == nullptr || by_bus_ == nullptr || init_() != 0) return;
    initialised_ = true;
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, cuda_device) != cudaSuccess || by_bus_(bus, &device_) != 0) {
      device_ = nullptr;
    }
  }
  ~gpu_sensors() {
    if (initialised_ && shutdown_ != nullptr) shutdown_();
    if (lib_ != nullptr) dlclose(lib_);
  }
  gpu_sensors(const gpu_sensors&) = delete;
  gpu_sensors& operator=(const gpu_sensors&) = delete;

  bool available() const { return device_ != nullptr; }

  /// Now: the SM clock (NVML_CLOCK_SM), the board power (mW → W) and the GPU temperature.
  reading read() const {
    reading r;
    if (!available()) return r;
    unsigned v = 0;
    if (clock_ != nullptr && clock_(device_, 1 /* NVML_CLOCK_SM */, &v) == 0) r.sm_clock_mhz = v;
    if (power_ != nullptr && power_(device_, &v) == 0) r.power_w = v * 1e-3;
    if (temp_ != nullptr && temp_(device_, 0 /* NVML_TEMPERATURE_GPU */, &v) == 0) r.temperature_c = v;
    return r;
  }

 private:
  void* lib_ = nullptr;
  void* device_ = nullptr;
  bool initialised_ = false;
  int (*init_)() = nullptr;
  int (*shutdown_)() = nullptr;
  int (*by_bus_)(const char*, void**) = nullptr;
  int (*clock_)(void*, int, unsigned*) = nullptr;
  int (*power_)(void*, unsigned*) = nullptr;
  int (*temp_)(void*, int, unsigned*) = nullptr;
};

}  // namespace spillway::bench
