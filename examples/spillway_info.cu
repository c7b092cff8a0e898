// spillway-info: lists the visible GPUs with their memory and measures pinned copy bandwidth.
// On a machine with no GPU it says so plainly and exits 0.
#include <spillway/spillway.cuh>

#include <cstdio>
#include <cstring>
#include <vector>

namespace {

// Median GB/s of `reps` copies of `bytes` in the given direction between pinned host and device.
double copy_gbps(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, spillway::stream_view s) {
  const auto samples = spillway::time_on_stream(
      s, [&](spillway::stream_view st) { SPILLWAY_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, kind, st.value())); },
      /*warmup=*/2, /*repetitions=*/9);
  return static_cast<double>(bytes) / (spillway::median(samples) * 1e-3) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const bool help = std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0;
    if (!help) std::fprintf(stderr, "spillway-info: error: unknown argument %s\n\n", argv[i]);
    std::fprintf(help ? stdout : stderr,
                 "spillway-info: lists the visible GPUs (name, compute capability, SMs, L2, copy engines,\n"
                 "free and total memory, the default memory budget) and measures pinned host<->device copy\n"
                 "bandwidth of 256 MiB (median of 9, CUDA events). With no GPU or driver it says so and\n"
                 "exits 0.\n\n"
                 "usage: spillway-info [-h|--help]\n\n"
                 "example:\n  spillway-info\n");
    return help ? 0 : 2;
  }
  std::printf("spillway %s\n", spillway::version_string);
  const int n = spillway::device_count();
  if (n == 0) {
    std::printf("No GPU on this machine (%s).\n", spillway::no_gpu_reason().c_str());
    std::printf("spillway's host implementations still work here; GPU tests will skip.\n");
    return 0;
  }
  for (int d = 0; d < n; ++d) {
    const auto p = spillway::get_device_properties(d);
    const auto m = spillway::get_memory_info(d);
    std::printf("device %d: %s, compute capability %d.%d, %d SMs, L2 %.0f MB, %d copy engines\n", d,
                p.name.c_str(), p.cc_major, p.cc_minor, p.multiprocessors, p.l2_bytes / 1e6, p.copy_engines);
    std::printf("  memory: %.1f GiB free of %.1f GiB; default budget (%.0f%% of free): %.1f GiB\n",
                m.free_bytes / double(1ull << 30), m.total_bytes / double(1ull << 30),
                spillway::memory_budget::default_fraction * 100.0,
                spillway::memory_budget::default_for(d).bytes() / double(1ull << 30));
    spillway::device_guard g(d);
    spillway::stream s;
    const std::size_t bytes = std::size_t{256} << 20;
    spillway::pinned_buffer<unsigned char> host(bytes);
    std::memset(host.data(), 0x5a, bytes);
    spillway::device_buffer<unsigned char> dev(bytes, s);
    const double h2d = copy_gbps(dev.data(), host.data(), bytes, cudaMemcpyHostToDevice, s);
    const double d2h = copy_gbps(host.data(), dev.data(), bytes, cudaMemcpyDeviceToHost, s);
    std::printf("  pinned copies of 256 MiB (median of 9, CUDA events): H2D %.1f GB/s, D2H %.1f GB/s\n", h2d, d2h);
  }
  return 0;
}
