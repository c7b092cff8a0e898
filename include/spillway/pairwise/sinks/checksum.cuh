// spillway/pairwise/sinks/checksum.cuh — nothing kept: every score reduced to a sum on the device
// (checksum_writer). A job's bare compute: the same strips and tile schedule as any sink, which
// the benchmarks time the other sinks against, and a result checked against the host.
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/device_buffer.hpp>
#include <spillway/core/error.hpp>
#include <spillway/pairwise/sink_kernels.cuh>
#include <spillway/pairwise/sinks/sink.cuh>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

namespace spillway::pairwise::detail {

template <class V>
struct checksum_sink : sink_base {
  static constexpr std::size_t partial_sums = 1024;
  std::vector<device_buffer<unsigned long long>> sums;  // per worker: the partial sums

  [[nodiscard]] sink_footprint footprint() const {
    sink_footprint f;
    f.strip_output = false;
    f.bytes_fixed = partial_sums * sizeof(unsigned long long);
    return f;
  }
  template <class Job>
  void setup(Job&, std::size_t w, stream_view s) {
    auto& b = per_worker(sums, w);
    b = device_buffer<unsigned long long>(partial_sums, s);
    SPILLWAY_CUDA_TRY(cudaMemsetAsync(b.data(), 0, partial_sums * sizeof(unsigned long long), s.value()));
  }
  template <class Job, class Compute>
  std::size_t enqueue(Job&, const strip_span& st, task_slot& slot, stream_view, Compute&& compute) {
    compute(checksum_writer<V>{sums[slot.worker()].data(), st.symmetric});
    return 0;
  }
  /// Over every device, the sum (mod 2^64) of the per-call warp sums of the scores' bits (see
  /// checksum_writer): for int32 counts, the sum of the counts kept.
  template <class Job>
  unsigned long long collect(Job& job) {
    unsigned long long sum = 0;
    for (std::size_t w = 0; w < sums.size(); ++w) {
      device_guard g(job.ctx[w]->device);
      for (unsigned long long x : sums[w].to_host(job.ctx[w]->setup->view())) sum += x;
    }
    return sum;
  }
};

}  // namespace spillway::pairwise::detail
