// spillway/pairwise/sinks/topk.cuh — per-row top-k: each strip's scores offered to per-row lists
// on the device (one set of lists per slot, so concurrent strips never race; A·Aᵀ also offers each
// strip's mirrored side to its columns' lists, filtered by per-row bars), merged over slots and
// devices at the end; only the lists reach the host, through a pinned block prepared while the
// strips run. The kernels are in pairwise/sink_kernels.cuh.
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/device_buffer.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/fault_hook.hpp>
#include <spillway/core/launch.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/pairwise/plan.hpp>
#include <spillway/pairwise/sink_kernels.cuh>
#include <spillway/pairwise/sinks.hpp>
#include <spillway/pairwise/sinks/sink.cuh>
#include <spillway/pipeline/host_workers.hpp>

#include <cuda_runtime_api.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <future>
#include <vector>

namespace spillway::pairwise::detail {

/// Where a top-k job's lists land on the host: the result's vectors (rows x k values and int64
/// columns, 38 MB at 100,000 x 32) and a pinned block the lists pass through on their way, both
/// made on another thread while the strips run (start_topk_host). The block comes from the
/// pipeline's staging cache; none (a refusal to pin) means copies straight into the vectors.
template <class V>
struct topk_host_side {
  topk_result<V> result;
  ::spillway::detail::staging_block stage;
};

/// The bytes of one half of the collect's pinned block: the lists come back in pieces of this
/// size, one half filling over PCIe while the other is copied into the vectors.
inline constexpr std::size_t topk_stage_half_bytes = std::size_t{8} << 20;

/// `devices`: the devices that will copy lists down at once (each its rows' share, through its own
/// pair of halves of the block).
template <class V>
std::future<topk_host_side<V>> start_topk_host(std::int64_t n, int k, std::size_t devices = 1) {
  return std::async(std::launch::async, [n, k, devices] {
    topk_host_side<V> h;
    h.result = empty_topk<V>(n, k);
    try {
      h.stage =
          ::spillway::detail::staging_block(2 * topk_stage_half_bytes * std::max<std::size_t>(devices, 1));
    } catch (const out_of_memory&) {
      // (no pinned block: the lists are copied straight into the vectors, at the pageable rate)
    }
    return h;
  });
}

/// Device lists (values, int32 columns; `count` entries) into the host vectors (int64 columns,
/// widened on the host). Through `stage` (pinned, two halves of topk_stage_half_bytes, or null)
/// where there is one: a piece of both arrays fills one half over PCIe while the host threads
/// copy the previous piece out of the other. The vectors are pageable, and a straight copy into
/// them ran far below the link's rate; pinned halves fill at the link's rate (docs/gram.md,
/// "copy_lists_to_host"). Returns when every entry is on the host.
template <class V>
void copy_lists_to_host(const V* dv, const std::int32_t* di, std::size_t count, V* hv, std::int64_t* hi,
                        std::byte* stage, stream_view s) {
  constexpr std::size_t entry = sizeof(V) + sizeof(std::int32_t);
  // Entries a half holds: their values, then their columns from the next 8-byte boundary (up to
  // 7 bytes of padding, kept inside the half for any value size).
  const std::size_t piece = (topk_stage_half_bytes - 8) / entry;
  if (stage == nullptr || count <= piece) {
    std::vector<std::int32_t> cols(count);
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(hv, dv, count * sizeof(V), cudaMemcpyDeviceToHost, s.value()));
    SPILLWAY_CUDA_TRY(
        cudaMemcpyAsync(cols.data(), di, count * sizeof(std::int32_t), cudaMemcpyDeviceToHost, s.value()));
    s.synchronize();
    std::copy(cols.begin(), cols.end(), hi);
    return;
  }
  std::byte* base = stage;
  const std::size_t pieces = (count + piece - 1) / piece;
  const std::size_t col_off = (piece * sizeof(V) + 7) / 8 * 8;
  event filled[2];
  const auto enqueue = [&](std::size_t q) {
    const std::size_t e0 = q * piece, m = std::min(piece, count - e0);
    std::byte* h = base + (q % 2) * topk_stage_half_bytes;
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(h, dv + e0, m * sizeof(V), cudaMemcpyDeviceToHost, s.value()));
    SPILLWAY_CUDA_TRY(
        cudaMemcpyAsync(h + col_off, di + e0, m * sizeof(std::int32_t), cudaMemcpyDeviceToHost, s.value()));
    filled[q % 2].record(s);
  };
  // The host copies: a few threads (each piece is 8 MB; more threads gain nothing and would
  // contend with other ranks' threads on a shared host).
#ifdef _OPENMP
  const int threads = std::max(1, std::min(8, omp_get_max_threads()));
#else
  [[maybe_unused]] constexpr int threads = 1;
#endif
  enqueue(0);
  if (pieces > 1) enqueue(1);
  for (std::size_t q = 0; q < pieces; ++q) {
    filled[q % 2].synchronize();
    const std::size_t e0 = q * piece, m = std::min(piece, count - e0);
    const std::byte* h = base + (q % 2) * topk_stage_half_bytes;
    const V* sv = reinterpret_cast<const V*>(h);
    const std::int32_t* sc = reinterpret_cast<const std::int32_t*>(h + col_off);
    constexpr std::int64_t parts = 16;
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static)
#endif
    for (std::int64_t t = 0; t < parts; ++t) {
      const std::size_t a = m * static_cast<std::size_t>(t) / parts,
                        b = m * static_cast<std::size_t>(t + 1) / parts;
      std::memcpy(hv + e0 + a, sv + a, (b - a) * sizeof(V));
      std::copy(sc + a, sc + b, hi + e0 + a);
    }
    if (q + 2 < pieces) enqueue(q + 2);
  }
}

/// Device lists (`count` entries) into the host vectors as copy_lists_to_host brings them: their
/// values and int32 columns written on the device first (topk_export_kernel, on s). Returns when
/// every entry is on the host.
template <class V>
void export_lists_to_host(const topk_entry<V>* lists, std::size_t count, V* hv, std::int64_t* hi,
                          std::byte* stage, stream_view s) {
  device_buffer<V> dv(count, s);
  device_buffer<std::int32_t> di(count, s);
  if (count > 0) {
    topk_export_kernel<V, std::int32_t>
        <<<grid_blocks(static_cast<std::int64_t>(count), 256), 256, 0, s.value()>>>(
            lists, static_cast<std::int64_t>(count), dv.data(), di.data());
    SPILLWAY_CUDA_TRY(cudaGetLastError());
  }
  copy_lists_to_host(dv.data(), di.data(), count, hv, hi, stage, s);
}

/// Merges `lists` lists of `rows` rows of k entries, `stride` entries apart, into the first (in
/// place, on `s`).
template <class V>
void merge_topk_device(topk_entry<V>* st, std::int64_t rows, int k, int lists, std::size_t stride,
                       bool larger, stream_view s) {
  if (lists < 2 || rows == 0) return;
  with_larger(larger, [&](auto L) {
    with_topk_blocks(k, [&](auto B) {
      topk_merge_kernel<V, decltype(L)::value, decltype(B)::value>
          <<<grid_blocks(rows, 8), 256, 0, s.value()>>>(st, rows, k, lists,
                                                        static_cast<std::int64_t>(stride));
    });
  });
  SPILLWAY_CUDA_TRY(cudaGetLastError());
}

template <class V>
struct topk_sink : sink_base {
  topk_options topk{};
  /// A device's lists: slots x rows_a x k entries; A·Aᵀ: a bar key per row over all slots
  /// (topk_mirror) and the count of column groups read in full (topk_cols_kernel).
  struct device_lists {
    device_buffer<std::byte> state;
    device_buffer<std::byte> bar;
    device_buffer<unsigned long long> full;
  };
  std::vector<device_lists> dev;  // per worker
  /// The result's host vectors, allocated while the job runs (start_topk_host).
  std::future<topk_host_side<V>> host;
  /// start() prepares `host` for every row (false: the caller does, e.g. for its own rows only).
  bool start_host = true;

  topk_sink() = default;
  explicit topk_sink(const topk_options& o) : topk(o) {}

  [[nodiscard]] sink_footprint footprint() const {
    sink_footprint f;
    f.mirror_candidates = true;
    f.bytes_per_row_per_slot = static_cast<std::size_t>(topk.k) * topk_entry_size(sizeof(V));
    return f;
  }

  template <class Job>
  void setup(Job& job, std::size_t w, stream_view s) {
    const pair_plan& p = job.plan;
    device_lists& d = per_worker(dev, w);
    const std::size_t n =
        p.slots * static_cast<std::size_t>(job.prod.rows(false)) * static_cast<std::size_t>(topk.k);
    d.state = device_buffer<std::byte>(n * sizeof(topk_entry<V>), s);
    if (n > 0) {
      with_larger(job.prod.larger(), [&](auto L) {
        topk_init_kernel<V, decltype(L)::value>
            <<<grid_blocks(static_cast<std::int64_t>(n) / 8 + 1, 8), 256, 0, s.value()>>>(
                reinterpret_cast<topk_entry<V>*>(d.state.data()), static_cast<std::int64_t>(n));
      });
      SPILLWAY_CUDA_TRY(cudaGetLastError());
    }
    if (job.symmetric) {  // only A·Aᵀ's columns kernel counts the groups it reads in full
      d.full = device_buffer<unsigned long long>(1, s);
      SPILLWAY_CUDA_TRY(cudaMemsetAsync(d.full.data(), 0, 8u, s.value()));
    }
    static_assert(sizeof(topk_key<V>) == topk_key_size(sizeof(V)),
                  "the plan sizes the bars by topk_key_size");
    if (p.topk_bar_bytes > 0) {
      d.bar = device_buffer<std::byte>(p.topk_bar_bytes, s);
      SPILLWAY_CUDA_TRY(cudaMemsetAsync(d.bar.data(), 0, p.topk_bar_bytes, s.value()));
    }
  }

  /// rows x k values and indices (38 MB for 100,000 x 32): allocated and filled on another thread
  /// while the strips run, not after them.
  template <class Job>
  void start(Job& job) {
    if (start_host) host = start_topk_host<V>(job.prod.rows(false), topk.k, job.ctx.size());
  }

  /// The mirrored side of a top-k strip of PI rows and W columns (pairwise/sink_kernels.cuh:
  /// topk_mirror) in the slot's candidate area, its counts zeroed on `s`; empty where the strip is not
  /// symmetric or the plan has no candidate area (every column group then read in full).
  template <class Job>
  topk_mirror<V> mirror_of(Job& job, task_slot& slot, bool sym, std::int64_t PI, std::int64_t W,
                           stream_view s) {
    const pair_plan& p = job.plan;
    const std::int64_t n = job.prod.rows(false);
    topk_mirror<V> m;
    if (!sym || p.buf_cand == pair_plan::none) return m;
    std::byte* area = slot.device<std::byte>(p.buf_cand);
    std::vector<std::size_t> at;  // counts, places, hit masks: as the plan laid them out
    (void)topk_mirror_bytes(static_cast<std::size_t>(p.panel_rows), static_cast<std::size_t>(n), sizeof(V),
                            &at);
    m.bar = reinterpret_cast<topk_key<V>*>(dev[slot.worker()].bar.data());
    m.x_begin = PI;
    m.count = reinterpret_cast<int*>(area + at[0]);
    m.cand = reinterpret_cast<topk_entry<V>*>(area + at[1]);
    m.cap = topk_mirror_cap;
    m.hits = reinterpret_cast<unsigned*>(area + at[2]);
    m.hit_words = static_cast<std::int64_t>(topk_mirror_hit_words(static_cast<std::size_t>(W)));
    // The other workers' bars, where this device reaches them (pool peer access).
    const std::size_t w = slot.worker();
    for (std::size_t h = 0; h < dev.size() && m.n_peers < topk_max_peer_bars; ++h) {
      if (h == w || !job.share->reaches(w, h)) continue;
      m.peers[m.n_peers++] = reinterpret_cast<topk_key<V>*>(dev[h].bar.data());
    }
    if (W > PI) {
      SPILLWAY_CUDA_TRY(
          SPILLWAY_FAULT_CALL(cudaMemsetAsync(m.count, 0, static_cast<std::size_t>(W - PI) * 4u, s.value())));
    }
    return m;
  }

  template <class Job, class Compute>
  std::size_t enqueue(Job& job, const strip_span& st, task_slot& slot, stream_view s, Compute&& compute) {
    V* sc_buf = slot.device<V>(0);
    const bool sym = st.symmetric;
    const std::int64_t PI = st.rows, W = st.cols, I0 = st.first_row, col0 = st.first_col;
    compute(score_writer<V>{sc_buf, I0, st.end_row, W, col0, sym});
    auto* lists = reinterpret_cast<topk_entry<V>*>(dev[slot.worker()].state.data()) +
                  slot.index() * static_cast<std::size_t>(st.n) * static_cast<std::size_t>(topk.k);
    const bool skip_diag = sym && !topk.include_diagonal;
    // A·Aᵀ: the rows kernel also marks each column's mirrored candidates (those reaching the
    // column's bar), the append kernel appends them to the columns' candidates, and the columns
    // kernel offers them, reading in full only the column groups whose bars are too low to filter.
    const topk_mirror<V> m = mirror_of(job, slot, sym, PI, W, s);
    with_larger(job.prod.larger(), [&](auto L) {
      with_topk_blocks(topk.k, [&](auto B) {
        constexpr bool larger = decltype(L)::value;
        constexpr int blocks = decltype(B)::value;
        topk_rows_kernel<V, larger, blocks>
            <<<grid_blocks(PI, 8), 256, 0, s.value()>>>(sc_buf, PI, W, I0, col0, skip_diag, lists, topk.k, m);
        SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaGetLastError()));
        if (sym && W > PI) {
          if (m.hits != nullptr) {
            topk_append_kernel<V>
                <<<grid_blocks(PI * m.hit_words, 256), 256, 0, s.value()>>>(sc_buf, PI, W, I0, m);
            SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaGetLastError()));
          }
          const std::int64_t groups = (W - PI + 31) / 32;
          topk_cols_kernel<V, larger, blocks>
              <<<static_cast<unsigned>(std::min<std::int64_t>(groups, 528)), 1024, 0, s.value()>>>(
                  sc_buf, PI, W, I0, PI, lists, topk.k, m, dev[slot.worker()].full.data());
          SPILLWAY_CUDA_TRY(SPILLWAY_FAULT_CALL(cudaGetLastError()));
        }
      });
    });
    return 0;
  }

  /// Every device merges its slots' lists into its first (n x k entries at the start of its
  /// state), on its setup stream; one event per device, recorded after it. Once only: merging
  /// again would take the other slots' entries twice.
  template <class Job>
  std::vector<event> merge_slots(Job& job) {
    const std::int64_t n = job.prod.rows(false);
    const std::size_t per_slot = static_cast<std::size_t>(n) * static_cast<std::size_t>(topk.k);
    std::vector<event> merged;  // each made on its own device
    merged.reserve(dev.size());
    for (std::size_t w = 0; w < dev.size(); ++w) {
      auto& c = *job.ctx[w];
      device_guard g(c.device);
      const int slots =
          per_slot == 0 ? 0 : static_cast<int>(dev[w].state.size() / sizeof(topk_entry<V>) / per_slot);
      merge_topk_device(reinterpret_cast<topk_entry<V>*>(dev[w].state.data()), n, topk.k, slots, per_slot,
                        job.prod.larger(), c.setup->view());
      merged.emplace_back().record(c.setup->view());
    }
    return merged;
  }

  /// The final lists, sorted as the host sorts them (see the steps below).
  template <class Job>
  topk_result<V> collect(Job& job) {
    const std::int64_t n = job.prod.rows(false);
    const int k = topk.k;
    const bool larger = job.prod.larger();
    const std::size_t per_slot = static_cast<std::size_t>(n) * static_cast<std::size_t>(k);
    topk_host_side<V> hs = host.valid() ? host.get() : topk_host_side<V>{empty_topk<V>(n, k), {}};
    topk_result<V>& r = hs.result;
    using entry = topk_entry<V>;
    const auto merge_lists = [&](entry* st, std::int64_t rows, int lists, std::size_t stride, stream_view s) {
      merge_topk_device(st, rows, k, lists, stride, larger, s);
    };
    const auto slots_of = [&](std::size_t w) {
      return static_cast<int>(dev[w].state.size() / sizeof(entry) / per_slot);
    };
    if (job.symmetric && job.opt.report != nullptr) {
      std::int64_t full = 0;
      for (std::size_t w = 0; w < dev.size(); ++w) {
        device_guard g(job.ctx[w]->device);
        full += static_cast<std::int64_t>(dev[w].full.to_host(job.ctx[w]->setup->view())[0]);
      }
      job.opt.report->topk_full_column_groups = full;
    }
    // Every device merges its slots' lists into its first. Then device e owns rows
    // [n e / nd, n (e + 1) / nd): it pulls the other devices' merged lists of those rows (peer
    // copies, 12 bytes x k per row) into its freed slot lists at the same rows (or a buffer of its
    // own when it has fewer slots than there are devices), merges them, writes them out as values
    // and indices and copies them into the result's vectors through its own link and its own
    // halves of the pinned block, all devices at once. The result is sorted as the host sorts it.
    const std::size_t nd = job.ctx.size();
    std::vector<event> merged = merge_slots(job);
    const std::size_t stage_pairs = hs.stage.size() / (2 * topk_stage_half_bytes);
    struct owned {
      std::int64_t r0 = 0, rows = 0;
      device_buffer<std::byte> gathered;
      device_buffer<V> dv;
      device_buffer<std::int32_t> di;
    };
    std::vector<owned> own(nd);
    for (std::size_t e = 0; e < nd; ++e) {
      auto& c = *job.ctx[e];
      device_guard g(c.device);
      const stream_view s = c.setup->view();
      owned& o = own[e];
      o.r0 = n * static_cast<std::int64_t>(e) / static_cast<std::int64_t>(nd);
      o.rows = n * static_cast<std::int64_t>(e + 1) / static_cast<std::int64_t>(nd) - o.r0;
      const std::size_t cnt = static_cast<std::size_t>(o.rows) * static_cast<std::size_t>(k);
      const std::size_t at = static_cast<std::size_t>(o.r0) * static_cast<std::size_t>(k);
      entry* st = reinterpret_cast<entry*>(dev[e].state.data()) + at;
      std::size_t stride = per_slot;
      if (nd > 1 && static_cast<std::size_t>(slots_of(e)) < nd) {
        o.gathered = device_buffer<std::byte>(nd * cnt * sizeof(entry), s);
        SPILLWAY_CUDA_TRY(
            cudaMemcpyAsync(o.gathered.data(), st, cnt * sizeof(entry), cudaMemcpyDeviceToDevice, s.value()));
        st = reinterpret_cast<entry*>(o.gathered.data());
        stride = cnt;
      }
      std::size_t q = 1;
      for (std::size_t d = 0; d < nd; ++d) {
        if (d == e || cnt == 0) continue;
        auto& cd = *job.ctx[d];
        s.wait(merged[d]);
        SPILLWAY_CUDA_TRY(cudaMemcpyPeerAsync(st + q * stride, c.device,
                                              reinterpret_cast<const entry*>(dev[d].state.data()) + at,
                                              cd.device, cnt * sizeof(entry), s.value()));
        ++q;
      }
      merge_lists(st, o.rows, static_cast<int>(nd), stride, s);
      o.dv = device_buffer<V>(cnt, s);
      o.di = device_buffer<std::int32_t>(cnt, s);
      if (cnt > 0) {
        topk_export_kernel<V, std::int32_t>
            <<<grid_blocks(static_cast<std::int64_t>(cnt), 256), 256, 0, s.value()>>>(
                st, static_cast<std::int64_t>(cnt), o.dv.data(), o.di.data());
        SPILLWAY_CUDA_TRY(cudaGetLastError());
      }
    }
    // The copies down, one part per device on the staging workers (the first on
    // this thread; a part that throws is rethrown here once all have ended); devices past the pinned
    // block's pairs of halves copy straight into the vectors.
    const auto copy_down = [&](std::size_t e) {
      auto& c = *job.ctx[e];
      device_guard g(c.device);
      const owned& o = own[e];
      const std::size_t at = static_cast<std::size_t>(o.r0) * static_cast<std::size_t>(k);
      std::byte* stage = e < stage_pairs
                             ? static_cast<std::byte*>(hs.stage.data()) + e * 2 * topk_stage_half_bytes
                             : nullptr;
      copy_lists_to_host(o.dv.data(), o.di.data(),
                         static_cast<std::size_t>(o.rows) * static_cast<std::size_t>(k), r.values.data() + at,
                         r.indices.data() + at, stage, c.setup->view());
    };
    ::spillway::detail::staging_workers().run_parts(nd, copy_down);
    return std::move(hs.result);
  }
};

}  // namespace spillway::pairwise::detail
