// python/src/jobs.cu — the CUDA side of the Python binding: every template of spillway that the
// module calls is instantiated here, for int32 and float32 values only (what spillway.gram
// returns), so the extension compiles in one nvcc pass per architecture.
#include "job_support.hpp"
#include "jobs.hpp"

#include <spillway/core/device.hpp>
#include <spillway/core/pinned_buffer.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/gram.cuh>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

namespace spillway::python {
namespace {

using detail::own_vector;

using detail::dense_output;
using detail::forward_progress;
using detail::summarize;
using detail::layout_of;

// ---- the host implementation, in row blocks (the library's host pair job, job_support.hpp) ------

template <class V>
gram_result run_gram_on_host(const gram::bit_matrix_view& a, const gram::bit_matrix_view* b, const gram_request& r,
                             job_progress& p) {
  const detail::host_shape shape{
      r.kind, r.k, r.threshold, r.include_diagonal, r.both_halves, r.host_block_rows, r.csr};
  return detail::run_host_pair_job<V>(gram::host_ops<V>{r.metric, r.scores}, a, b, shape, p, "spillway.gram");
}

// ---- the GPU path: spillway's out-of-core entry points ----------------------------------------

template <class V>
gram_result run_gram_on_gpu(const gram::bit_matrix_view& a, const gram::bit_matrix_view* b, const gram_request& r,
                            job_progress& p) {
  gram::gram_options o;
  o.epilogue = r.metric;
  o.scores = r.scores;
  if (r.budget_bytes > 0) o.budget = memory_budget(r.budget_bytes);
  o.devices = r.devices;
  o.max_panel_rows = r.max_panel_rows;
  o.progress = forward_progress(p);
  gram_result out;
  job_report rep;
  switch (r.kind) {
    case sink::topk: {
      gram::topk_options k{r.k, r.include_diagonal};
      gram::topk_result<V> t;
      gram::gram_report gr;
      o.report = &gr;
      t = b ? gram::gram_topk<V>(a, *b, k, o) : gram::gram_topk<V>(a, k, o);
      rep = gr.job;
      out.values = own_vector(std::move(t.values));
      out.indices = own_vector(std::move(t.indices));
      break;
    }
    case sink::threshold: {
      gram::threshold_options t{r.threshold, r.both_halves, r.include_diagonal};
      gram::gram_report gr;
      o.report = &gr;
      if (r.csr) {  // assembled as CSR: no row vector
        auto c = b ? gram::gram_threshold_csr<V>(a, *b, t, o) : gram::gram_threshold_csr<V>(a, t, o);
        rep = gr.job;
        detail::hand_over(out, std::move(c));
        break;
      }
      auto c = b ? gram::gram_threshold<V>(a, *b, t, o) : gram::gram_threshold<V>(a, t, o);
      rep = gr.job;
      detail::hand_over(out, std::move(c), false, a.rows, b ? b->rows : a.rows);
      break;
    }
    default: {
      if (b != nullptr) {
        out.values = dense_output<V>(static_cast<std::size_t>(a.rows * b->rows), true);
        rep = gram::gram_dense(a, *b, static_cast<V*>(out.values.data), b->rows, o);
      } else {
        const auto lay = layout_of(r.kind);
        out.values = dense_output<V>(static_cast<std::size_t>(gram::layout_size(lay, a.rows)), true);
        rep = gram::gram_dense(a, static_cast<V*>(out.values.data), lay, o);
      }
      break;
    }
  }
  summarize(out.summary, rep);
  return out;
}

template <class V>
gram_result run_typed(const gram::bit_matrix_view& a, const gram::bit_matrix_view* b, const gram_request& r,
                      job_progress& p) {
  if (::spillway::detail::run_on_host_instead(r.host_fallback, r.devices, "spillway.gram", "host_fallback",
                                              "the host Gram")) {
    return run_gram_on_host<V>(a, b, r, p);
  }
  return run_gram_on_gpu<V>(a, b, r, p);
}

cudaStream_t as_stream(std::uintptr_t h) {
  // 0 is how CuPy, PyTorch and Numba name the legacy default stream; stream_view refuses the
  // null handle, so it becomes the runtime's explicit name for the same stream.
  return h == 0 ? cudaStreamLegacy : reinterpret_cast<cudaStream_t>(h);
}

template <class T>
gram::device_bit_matrix pack_on_device(const device_matrix& m, stream_view s, bool nonzero_as_one) {
  const T* src = reinterpret_cast<const T*>(m.ptr);
  if (nonzero_as_one) return gram::pack_bits_async(src, m.rows, m.cols, m.ld, s);
  return gram::pack_bits_device(src, m.rows, m.cols, m.ld, s, false);
}

gram::device_bit_matrix pack_device(const device_matrix& m, stream_view s, bool nonzero_as_one) {
  switch (m.dtype) {
    case 'i': return pack_on_device<std::int8_t>(m, s, nonzero_as_one);
    case 'b': return pack_on_device<bool>(m, s, nonzero_as_one);
    default: return pack_on_device<std::uint8_t>(m, s, nonzero_as_one);
  }
}

template <class V>
void dense_on_device(const gram::device_bit_matrix& a, const gram::device_bit_matrix* b, V* out, const gram_request& r,
                     stream_view s) {
  if (b != nullptr) {
    gram::gram_async(a.view(), b->view(), out, b->rows(), s, r.metric, r.scores);
  } else {
    gram::gram_async(a.view(), out, layout_of(r.kind), s, r.metric, r.scores);
  }
}

}  // namespace

gram_result run_gram(const gram::bit_matrix_view& a, const gram::bit_matrix_view* b, const gram_request& r,
                     job_progress& p) {
  return r.float_values ? run_typed<float>(a, b, r, p) : run_typed<std::int32_t>(a, b, r, p);
}

void gram_device_dense(const device_matrix& a, const device_matrix* b, std::uintptr_t out, const gram_request& r,
                       int device, std::uintptr_t stream, bool nonzero_as_one) {
  device_guard g(device);
  const stream_view s(as_stream(stream));
  const gram::device_bit_matrix pa = pack_device(a, s, nonzero_as_one);
  gram::device_bit_matrix pb;
  if (b != nullptr) pb = pack_device(*b, s, nonzero_as_one);
  if (r.float_values) dense_on_device(pa, b ? &pb : nullptr, reinterpret_cast<float*>(out), r, s);
  else dense_on_device(pa, b ? &pb : nullptr, reinterpret_cast<std::int32_t*>(out), r, s);
  // pa and pb are freed stream-ordered on s: after the product that reads them.
}

gram::bit_matrix pack_device_to_host(const device_matrix& a, int device, std::uintptr_t stream, bool nonzero_as_one) {
  device_guard g(device);
  const stream_view s(as_stream(stream));
  const gram::device_bit_matrix d = pack_device(a, s, nonzero_as_one);
  return gram::download(d, s, host_memory::pinned);
}

void stream_wait(std::uintptr_t producer, std::uintptr_t consumer, int device) {
  if (producer == consumer) return;
  device_guard g(device);
  event e;
  e.record(stream_view(as_stream(producer)));
  stream_view(as_stream(consumer)).wait(e);
}

void stream_synchronize(std::uintptr_t stream, int device) {
  device_guard g(device);
  stream_view(as_stream(stream)).synchronize();
}

int pointer_device(std::uintptr_t ptr) {
  cudaPointerAttributes at{};
  const cudaError_t e = cudaPointerGetAttributes(&at, reinterpret_cast<const void*>(ptr));
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return (at.type == cudaMemoryTypeDevice || at.type == cudaMemoryTypeManaged) ? at.device : -1;
}

std::vector<double> bench_cpp_topk(const gram::bit_matrix_view& a, int k, std::size_t budget, int device, int reps) {
  gram::gram_options o;
  o.budget = memory_budget(budget);
  o.devices = {device};
  const gram::topk_options t{k, false};
  std::vector<double> secs;
  for (int r = -1; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto res = gram::gram_topk<std::int32_t>(a, t, o);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r >= 0) secs.push_back(dt);  // r = -1: the warm-up
  }
  return secs;
}

int device_count() { return ::spillway::device_count(); }
std::string no_gpu_reason() { return ::spillway::no_gpu_reason(); }

}  // namespace spillway::python
