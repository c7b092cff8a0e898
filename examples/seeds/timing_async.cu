// Seed 5: timing asynchronous launches (the seed timed 1000 launches with a host clock and saw the
// following copy "take" as long as all the kernels). Written from README.md ("Timing done right").
//
//   spillway-seed-timing-async [--iterations N]
//
// Times a loop of launches with event_timer (events stamped by the GPU) and one launch with
// time_on_stream + median (warm-up, repetitions). Checks that the events tell the truth: the loop
// takes about `iterations` times one launch, and the result is right. With no GPU it says so.
#include <spillway/spillway.cuh>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

__global__ void saxpy_repeat(float* y, const float* x, std::size_t n, int reps) {
  const std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
  if (i < n) {
    float v = y[i];
    for (int r = 0; r < reps; ++r) v = 0.5f * v + x[i];  // a few microseconds of work per launch
    y[i] = v;
  }
}

int main(int argc, char** argv) {
  int iterations = 500;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("spillway-seed-timing-async: times a loop of kernel launches with event_timer (CUDA events, not a\n"
                  "host clock) and one launch with time_on_stream + median, and checks that the loop's time is\n"
                  "about iterations x one launch and the result is right. Needs a GPU (says so without one).\n\n"
                  "usage: spillway-seed-timing-async [--iterations N]\n"
                  "  --iterations N   launches in the timed loop (default 500)\n\n"
                  "example:\n  spillway-seed-timing-async --iterations 1000\n");
      return 0;
    }
    if (a == "--iterations" && i + 1 < argc) iterations = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "error: unknown or incomplete argument %s (see --help)\n", a.c_str());
      return 2;
    }
  }
  if (iterations < 1) return 2;
  if (!spillway::gpu_available()) {
    std::printf("no GPU here (%s): nothing to time\n", spillway::no_gpu_reason().c_str());
    return 0;
  }
  const std::size_t n = std::size_t{1} << 22;
  spillway::stream s;
  auto x = spillway::device_buffer<float>::from_host(std::vector<float>(n, 1.0f), s);
  auto y = spillway::device_buffer<float>::from_host(std::vector<float>(n, 0.0f), s);
  const unsigned grid = static_cast<unsigned>((n + 255) / 256);
  const auto launch = [&](spillway::stream_view st) { saxpy_repeat<<<grid, 256, 0, st>>>(y.data(), x.data(), n, 64); };

  // One launch: warm-up, then 21 repetitions each between two events; the median.
  const double one = spillway::median(spillway::time_on_stream(s, launch, 3, 21));
  // The loop: one pair of events around all launches.
  spillway::event_timer t(s);
  for (int k = 0; k < iterations; ++k) launch(s);
  const double loop = t.stop();
  SPILLWAY_CUDA_TRY(cudaGetLastError());
  std::printf("one launch %.4f ms (median); %d launches %.3f ms = %.4f ms each\n", one, iterations, loop, loop / iterations);
  // y <- y/2 + 1 from 0 reaches its fixed point 2 exactly in float within the first launches.
  const auto h = y.to_host(s);
  bool right = true;
  for (float v : h) right = right && v == 2.0f;
  // Back-to-back launches overlap their tails a little; allow 0.5x..1.5x of the single-launch time.
  const double ratio = loop / (iterations * one);
  const bool ok = right && ratio > 0.5 && ratio < 1.5;
  std::printf("loop / (iterations x one launch) = %.2f; result %s\n%s\n", ratio, right ? "right" : "WRONG", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}
