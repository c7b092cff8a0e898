// python/src/jobs.cu — the CUDA side of the Python binding: every template of spillway that the
// module calls is instantiated here, for int32 and float32 values only (what spillway.gram
// returns), so the extension compiles in one nvcc pass per architecture.
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

template <class T>
owned_buffer own_vector(std::vector<T>&& v) {
  auto h = std::make_shared<std::vector<T>>(std::move(v));
  owned_buffer b;
  b.data = h->data();
  b.count = h->size();
  b.holder = std::move(h);
  return b;
}

// Dense results: pinned when a GPU writes them (the device-to-host copies then overlap compute
// and run at full rate), ordinary heap memory for the host implementation.
template <class V>
owned_buffer dense_output(std::size_t n, bool pinned) {
  owned_buffer b;
  b.count = n;
  if (pinned) {
    auto h = std::make_shared<pinned_buffer<V>>(n);
    b.data = h->data();
    b.holder = std::move(h);
  } else {
    auto h = std::make_shared<std::vector<V>>(n);
    b.data = h->data();
    b.holder = std::move(h);
  }
  return b;
}

gram::triangle_layout layout_of(sink k) {
  return k == sink::full ? gram::triangle_layout::full
                         : (k == sink::triangle ? gram::triangle_layout::upper_packed : gram::triangle_layout::condensed);
}

void summarize(job_summary& s, const job_report& r) {
  s.cancelled = r.cancelled;
  s.tasks_total = r.tasks_total;
  s.tasks_completed = r.tasks_completed;
  s.completed = r.completed;
  s.devices = r.devices;
  s.elapsed_seconds = r.elapsed_seconds;
  s.bytes_moved = r.bytes_moved;
}

// ---- the host implementation, in row blocks so that progress and Ctrl-C reach Python ----------
//
// Each block of rows [i0, i1) is one A·Bᵀ call of the host Gram against the columns it needs
// (from i0 on for the symmetric upper triangle): the library's host functions, unchanged, on
// sub-views. The block's lower-left corner (j < i inside the diagonal block) is computed and
// discarded: (block rows / n) of the work, a small price for interruptibility.

template <class V>
struct host_job {
  const gram::bit_matrix_view& a;
  const gram::bit_matrix_view* b;
  const gram_request& r;
  job_progress& p;
  gram_result out;
  std::int64_t n = 0, m = 0, block = 0;

  host_job(const gram::bit_matrix_view& a_, const gram::bit_matrix_view* b_, const gram_request& r_, job_progress& p_)
      : a(a_), b(b_), r(r_), p(p_) {
    n = a.rows;
    m = b ? b->rows : n;
    // About 64 blocks per job, at least 64 rows each: progress every ~1.5%, and the per-block
    // popcount pass over the column operand stays under 2% of the block's work.
    block = r.host_block_rows > 0 ? r.host_block_rows : std::max<std::int64_t>(64, (n + 63) / 64);
  }

  template <class Body>
  void blocks(Body&& body) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::size_t total = static_cast<std::size_t>((n + block - 1) / block);
    std::size_t done = 0;
    p.update(0, total);
    out.summary.completed.assign(total, false);
    for (std::int64_t i0 = 0; i0 < n; i0 += block) {
      if (p.cancel.load()) {
        out.summary.cancelled = true;
        break;
      }
      body(i0, std::min(n, i0 + block));
      out.summary.completed[done] = true;
      p.update(++done, total);
    }
    out.summary.on_host = true;
    out.summary.tasks_total = total;
    out.summary.tasks_completed = done;
    out.summary.elapsed_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  void dense() {
    const gram::metric mt = r.metric;
    if (b != nullptr) {
      out.values = dense_output<V>(static_cast<std::size_t>(n * m), false);
      V* o = static_cast<V*>(out.values.data);
      blocks([&](std::int64_t i0, std::int64_t i1) {
        gram::host_gram_dense(gram::row_range(a, i0, i1 - i0), *b, o + i0 * m, m, mt, r.scores);
      });
      return;
    }
    const gram::triangle_layout lay = layout_of(r.kind);
    out.values = dense_output<V>(static_cast<std::size_t>(gram::layout_size(lay, n)), false);
    V* o = static_cast<V*>(out.values.data);
    std::vector<V> strip;
    blocks([&](std::int64_t i0, std::int64_t i1) {
      const std::int64_t w = n - i0;
      const auto cols = gram::row_range(a, i0, w);
      if (lay == gram::triangle_layout::full) {
        gram::host_gram_dense(gram::row_range(a, i0, i1 - i0), cols, o + i0 * n + i0, n, mt, r.scores);
        for (std::int64_t i = i0; i < i1; ++i)  // mirror below the diagonal block
          for (std::int64_t j = i1; j < n; ++j) o[j * n + i] = o[i * n + j];
        return;
      }
      strip.resize(static_cast<std::size_t>((i1 - i0) * w));
      gram::host_gram_dense(gram::row_range(a, i0, i1 - i0), cols, strip.data(), w, mt, r.scores);
      const bool wd = lay == gram::triangle_layout::upper_packed;
      for (std::int64_t i = i0; i < i1; ++i) {
        const std::int64_t j0 = wd ? i : i + 1;
        V* dst = o + (wd ? gram::packed_row_offset(n, i) : gram::condensed_row_offset(n, i));
        const V* src = strip.data() + (i - i0) * w + (j0 - i0);
        std::copy(src, src + (n - j0), dst);
      }
    });
  }

  void topk() {
    const gram::bit_matrix_view& cols = b ? *b : a;
    const int k = r.k;
    std::vector<V> vals(static_cast<std::size_t>(n * k), V{});
    std::vector<std::int64_t> idx(static_cast<std::size_t>(n * k), -1);
    // Symmetric without the diagonal: the block's top-(k+1) against all rows holds the top-k of
    // the others (removing one candidate keeps the order of the rest).
    const bool drop_self = b == nullptr && !r.include_diagonal;
    const int kk = std::min(drop_self ? k + 1 : k, static_cast<int>(gram::max_top_k));
    if (drop_self && kk == k) {  // k == max_top_k: one call of the symmetric form, no blocks
      auto t = gram::host_gram_topk<V>(a, gram::topk_options{k, false}, r.metric, r.scores);
      blocks([](std::int64_t, std::int64_t) {});
      out.values = own_vector(std::move(t.values));
      out.indices = own_vector(std::move(t.indices));
      return;
    }
    blocks([&](std::int64_t i0, std::int64_t i1) {
      auto t = gram::host_gram_topk<V>(gram::row_range(a, i0, i1 - i0), cols, gram::topk_options{kk, false}, r.metric,
                                       r.scores);
      for (std::int64_t i = i0; i < i1; ++i) {
        int put = 0;
        for (int s = 0; s < kk && put < k; ++s) {
          const std::int64_t j = t.index(i - i0, s);
          if (j < 0) break;
          if (drop_self && j == i) continue;
          vals[static_cast<std::size_t>(i * k + put)] = t.value(i - i0, s);
          idx[static_cast<std::size_t>(i * k + put)] = j;
          ++put;
        }
      }
    });
    out.values = own_vector(std::move(vals));
    out.indices = own_vector(std::move(idx));
  }

  void threshold() {
    std::vector<std::int64_t> ro, co;
    std::vector<V> va;
    const bool sym = b == nullptr;
    blocks([&](std::int64_t i0, std::int64_t i1) {
      // Symmetric, upper half only: columns from i0 on suffice; both halves need them all.
      const std::int64_t c0 = sym && !r.both_halves ? i0 : 0;
      const gram::bit_matrix_view cols = sym ? gram::row_range(a, c0, n - c0) : *b;
      gram::threshold_options o{r.threshold, false, false};
      auto c = gram::host_gram_threshold<V>(gram::row_range(a, i0, i1 - i0), cols, o, r.metric, r.scores);
      for (std::size_t e = 0; e < c.size(); ++e) {
        const std::int64_t i = c.row[e] + i0, j = c.col[e] + c0;
        if (sym) {
          if (j == i && !r.include_diagonal) continue;
          if (j < i && !r.both_halves) continue;
        }
        ro.push_back(i);
        co.push_back(j);
        va.push_back(c.value[e]);
      }
    });
    out.values = own_vector(std::move(va));
    out.rows = own_vector(std::move(ro));
    out.cols = own_vector(std::move(co));
  }
};

template <class V>
gram_result run_gram_on_host(const gram::bit_matrix_view& a, const gram::bit_matrix_view* b, const gram_request& r,
                             job_progress& p) {
  host_job<V> j(a, b, r, p);
  switch (r.kind) {
    case sink::topk: j.topk(); break;
    case sink::threshold: j.threshold(); break;
    default: j.dense(); break;
  }
  return std::move(j.out);
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
  o.progress = [&p](const progress_info& i) {
    p.update(i.tasks_done, i.tasks_total);
    return !p.cancel.load();
  };
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
      auto c = b ? gram::gram_threshold<V>(a, *b, t, o) : gram::gram_threshold<V>(a, t, o);
      rep = gr.job;
      out.values = own_vector(std::move(c.value));
      out.rows = own_vector(std::move(c.row));
      out.cols = own_vector(std::move(c.col));
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
