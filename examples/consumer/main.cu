// Uses an installed spillway through find_package: allocates, copies and checks a round trip on
// the first GPU, or says plainly that there is none.
#include <spillway/spillway.cuh>
#include <spillway/version.hpp>

#include <cstdio>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>
#include <vector>

namespace {
// Records which threads run it: how many threads spillway's host map used in this consumer.
struct count_threads {
  std::mutex* m;
  std::set<std::thread::id>* seen;
  double operator()(double x) const {
    std::lock_guard<std::mutex> g(*m);
    seen->insert(std::this_thread::get_id());
    return 2 * x;
  }
};
}  // namespace

int main() {
  std::printf("spillway %s\n", spillway::version_string);
  {
    std::vector<double> x(std::size_t{1} << 20, 1.0);
    std::mutex m;
    std::set<std::thread::id> seen;
    const auto y = spillway::map_host(count_threads{&m, &seen}, spillway::make_view(x.data(), {static_cast<spillway::index_t>(x.size())}));
    if (y.data[12345] != 2.0) {
      std::printf("host map FAILED\n");
      return 1;
    }
    std::printf("host map threads used: %zu\n", seen.size());
  }
  if (!spillway::gpu_available()) {
    std::printf("no GPU here (%s); nothing to run on the device\n", spillway::no_gpu_reason().c_str());
    return 0;
  }
  spillway::stream s;
  std::vector<int> in(1000), out(1000, -1);
  std::iota(in.begin(), in.end(), 7);
  spillway::device_buffer<int> d(in.size(), s);
  d.copy_from_host_async(cuda::std::span<const int>(in.data(), in.size()), s);
  d.copy_to_host_async(cuda::std::span<int>(out.data(), out.size()), s);
  s.synchronize();
  if (in != out) {
    std::printf("round trip FAILED\n");
    return 1;
  }
  std::printf("round trip of %zu ints through device %d: ok\n", in.size(), spillway::current_device());
  return 0;
}
