// spillway/similarity/detail/fused_topk_sink.cuh — the fused top-k as a sink of the pair job: the
// job (pairwise/pair_job.cuh) keeps the rows resident on the device and runs the strips through
// the scheduler (progress, cancel, faults, report, budget); this sink seeds every row's list,
// then runs each strip's chunks: a GEMM whose fragment sink (fused_topk_filter, the device writer)
// drops every score that cannot enter a list, and the merges (topk_fused.cuh has the kernels and
// the job's description).
//
// It follows the contract of pairwise/sinks/sink.cuh, with two differences its product makes: it
// does not call the job's compute (its GEMM reads the resident rows itself and hands the
// accumulators to the filter: a fragment sink of gemm/, a layer above pairwise/, so the sink lives
// here), and its footprint asks for the strips in forward order (a strip's rows have seen every
// earlier strip's columns, so their bars already filter). Per device: a compute stream that runs
// the seeds and every strip one after the other (the lists and buckets are the device's one set),
// an upload stream that brings the rows in block by block while the seeds of the blocks already
// there run.
//
// On several devices (workers) each keeps lists of its own. The seed blocks are dealt round robin
// (block b to worker b mod workers), each worker bringing its blocks' rows in from the host over
// its own link and seeding them into its own lists as they arrive; then every worker takes the
// other blocks' rows from their holders (the job's panel share) and the others' bars of them (the seeds' k-th
// places, true lower bounds of the final ones). Every pair reaches the lists of the one worker that ran its
// strip or seeded its block, so no list holds a pair twice; collect merges the workers' lists of
// a share of the rows on each worker (topk_merge_kernel) and each brings its share to the host
// over its own link. A worker's bars rise only with its own lists.
//
// Across processes (dist/similarity.cuh: MPI ranks, one worker each) the same deal runs over the
// job's global workers (across_processes): this process's worker seeds blocks b ≡ its global index
// (mod all workers), takes every other block's rows from the host (each rank holds all rows), and
// the caller brings the others' bars (set_bars) before the first strip; the lists are merged at
// the rows' owners by the caller.
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/device_buffer.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/memory_budget.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/gemm/fragment_sink.cuh>
#include <spillway/gemm/gemm.cuh>
#include <spillway/gemm/matrix_view.hpp>
#include <spillway/pairwise/pair_job.cuh>
#include <spillway/pairwise/plan.hpp>
#include <spillway/pairwise/sink_kernels.cuh>
#include <spillway/pairwise/sinks.hpp>
#include <spillway/pairwise/sinks/sink.cuh>
#include <spillway/pairwise/sinks/topk.cuh>
#include <spillway/pipeline/plan.hpp>
#include <spillway/similarity/detail/kernels.cuh>
#include <spillway/similarity/detail/topk_fused.cuh>
#include <spillway/similarity/host_similarity.hpp>
#include <spillway/tile/arch.cuh>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace spillway::similarity::detail {

template <class T>
inline constexpr bool fused_topk_type =
    std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half> || std::is_same_v<T, float>;

/// The devices the fused job takes A·Aᵀ top-k of these rows on; empty when it does not. It takes
/// bf16 / half rows, or float rows with math_mode::tf32, on the automatic or wgmma GEMM path; the
/// devices named (none named: the current device; rows in device memory: theirs, read in place, so
/// base and stride on 16 bytes, what the GEMM's tensor maps take), each a valid ordinal running
/// sm_90a code of this build.
template <class T, class Options>
std::vector<int> fused_topk_devices(const matrix_view<const T>& a, const Options& opt, int rows_device) {
  if constexpr (!fused_topk_type<T>) {
    (void)a, (void)opt, (void)rows_device;
    return {};
  } else {
    if (std::is_same_v<T, float> && opt.gemm.math != ::spillway::gemm::math_mode::tf32) return {};
    using ::spillway::gemm::gemm_path;
    if (opt.gemm.path != gemm_path::automatic && opt.gemm.path != gemm_path::wgmma) return {};
    if (a.rows < 2 || a.cols < 1) return {};
    std::vector<int> devs = opt.devices;
    if (rows_device >= 0) {
      // Rows in one device's memory run there; naming another device is the strip path's error.
      if (!devs.empty() && (devs.size() != 1 || devs[0] != rows_device)) return {};
      constexpr auto align = static_cast<std::int64_t>(16 / sizeof(T));
      if (reinterpret_cast<std::uintptr_t>(a.data) % 16 != 0 || a.ld % align != 0) return {};
      devs = {rows_device};
    } else if (devs.empty()) {
      devs = {current_device()};
    }
    for (const int d : devs) {
      // (an invalid ordinal is the strip path's error, with its message)
      if (d < 0 || d >= device_count() || (tile::build_features(d) & tile::feature_wgmma) == 0) return {};
    }
    return devs;
  }
}

/// The fused job's shape for n rows: strips of P rows (the pair job's panels), seed blocks of S,
/// chunks of at most W columns, the buckets' capacities.
struct fused_topk_layout {
  std::int64_t P = 0, S = 0, W = 0;
  std::int64_t blocks = 0;  // seed blocks: S rows each, the last up to 1.5 S
  std::int64_t widest = 0;  // rows of the largest seed block
  std::int32_t cap_a = 0, cap_b = 0;
  std::int64_t exchange_every = 0;  // several workers: a send every this many strips (0: the default)
};

/// `widest_chunk`: W before the test hook's sizes (which take precedence).
inline fused_topk_layout fused_topk_shape(std::int64_t n, int k, std::int64_t max_panel_rows,
                                          std::int64_t widest_chunk) {
  const fused_topk_sizes& z = fused_topk_hook().sizes;
  fused_topk_layout L;
  std::int64_t P = z.strip_rows > 0 ? z.strip_rows : 2048;
  if (max_panel_rows > 0) P = std::min(P, max_panel_rows);
  P = std::max<std::int64_t>(128, P / 128 * 128);
  L.P = P;
  L.S = z.seed_rows > 0 ? std::max(P, z.seed_rows / P * P) : 4 * P;
  L.blocks = std::max<std::int64_t>(1, n / L.S);
  if (n - L.blocks * L.S >= L.S / 2) ++L.blocks;
  L.widest = std::max(std::min(L.S, n), n - (L.blocks - 1) * L.S);
  L.cap_a = z.row_capacity > 0 ? z.row_capacity : 32 * k;
  L.cap_b = z.col_capacity > 0 ? z.col_capacity : 2 * k;
  const std::int64_t W = z.chunk_cols > 0 ? z.chunk_cols : widest_chunk;
  L.W = std::max<std::int64_t>(256, std::min(W, n));
  L.exchange_every = std::max<std::int64_t>(0, z.exchange_every);
  return L;
}

/// Whether a worker of `workers` (several in one process) sends its lists to the next at its c-th
/// strip (c from 1; fused_topk_sink::exchange_bars): every L.exchange_every strips where the layout
/// sets it (tests), else at its strips 2, 4, 8, … — the bars rise fastest early — and every
/// max(16, strips / (16 · workers)).
inline bool fused_exchange_due(std::int64_t c, const fused_topk_layout& L, std::int64_t n,
                               std::size_t workers) {
  if (c < 1 || workers < 2) return false;
  if (L.exchange_every > 0) return c % L.exchange_every == 0;
  const std::int64_t strips = (n + L.P - 1) / L.P;
  const std::int64_t every = std::max<std::int64_t>(16, strips / (16 * static_cast<std::int64_t>(workers)));
  return (c >= 2 && (c & (c - 1)) == 0) || c % every == 0;
}

/// The seed blocks: blocks of S rows; a remainder under S/2 joins the last block (a small block's
/// rows would start with poor bars and flood their buckets in the first strip). End of block b.
inline std::int64_t fused_block_end(const fused_topk_layout& L, std::int64_t n, std::int64_t b) {
  return b == L.blocks - 1 ? n : (b + 1) * L.S;
}

/// The chunks of the strip whose first row is r0: the columns of the blocks after its own, in
/// chunks whose width is the number of columns the strip's rows have seen (doubling from their
/// block's end), capped at W; f(c0, w) for each, in order.
template <class F>
void for_each_fused_chunk(const fused_topk_layout& L, std::int64_t n, std::int64_t r0, F&& f) {
  std::int64_t c0 = fused_block_end(L, n, std::min(r0 / L.S, L.blocks - 1));
  std::int64_t seen = c0;
  while (c0 < n) {
    const std::int64_t w = std::min({seen, L.W, n - c0});
    f(c0, w);
    seen += w;
    c0 += w;
  }
}

/// Profile events of a fused job (fused_topk_hook().profile): start, seeds done, then per chunk
/// GEMM start, GEMM end, merges end, then the end.
struct fused_topk_marks {
  bool on = false;
  std::vector<event> marks;
  void mark(stream_view s) {
    if (!on) return;
    marks.emplace_back(event::timing::enabled);
    marks.back().record(s);
  }
  /// The hook's seed, GEMM, merge and device times from the events (after the stream finished).
  void publish() const {
    if (!on || marks.size() < 3) return;
    const auto ms = [&](std::size_t x, std::size_t y) {
      float v = 0;
      SPILLWAY_CUDA_TRY(cudaEventElapsedTime(&v, marks[x].value(), marks[y].value()));
      return v;
    };
    auto& hk = fused_topk_hook();
    hk.seed_ms = ms(0, 1);
    hk.gemm_ms = hk.merge_ms = 0;
    for (std::size_t c = 2; c + 3 <= marks.size() - 1; c += 3) {
      hk.gemm_ms += ms(c, c + 1);
      hk.merge_ms += ms(c + 1, c + 2);
    }
    hk.device_ms = ms(0, marks.size() - 1);
  }
  /// First mark to last (milliseconds), after the stream finished; 0 without two marks.
  [[nodiscard]] float span_ms() const {
    if (!on || marks.size() < 2) return 0.0f;
    float v = 0;
    SPILLWAY_CUDA_TRY(cudaEventElapsedTime(&v, marks.front().value(), marks.back().value()));
    return v;
  }
};

/// One device's state of a fused job: per-row lists and bars, the buckets of a strip's rows (a)
/// and of a chunk's columns (b), the seeds' scratch scores, two counters; a compute and an upload
/// stream. The last member drains both streams first on destruction, so an exception leaves no
/// copy or kernel running on memory being freed.
struct fused_topk_device_state {
  using entry = pairwise::detail::topk_entry<float>;
  stream cs, us;  // compute; upload
  device_buffer<entry> state;
  device_buffer<topk_bar> bars;  // + 1: the filter's paired loads
  device_buffer<unsigned> cnt_a, cnt_b;
  device_buffer<entry> buck_a, buck_b;
  device_buffer<float> scratch;
  device_buffer<unsigned long long> counters, bad_row;  // counters: recomputed rows, candidates merged
  fused_topk_marks marks;
  event seeded;              // this worker's seed blocks are done and their bars set
  std::size_t bytes_in = 0;  // the rows' upload, counted with the device's first strip
  std::int64_t chunks = 0;
  // The bar exchange (several workers in one process; fused_topk_sink::exchange_bars): `snap` holds
  // this worker's lists as of its last send, `recv` the previous worker's last send to it; `sent`
  // marks the end of the copy into the next worker's recv (upload stream), `recv_free` the end of
  // the last read of recv (compute stream). mail_full (under mail): recv holds a send not yet read.
  device_buffer<entry> snap, recv;
  event snapped, sent, recv_free;
  std::mutex mail;
  bool mail_full = false;
  std::int64_t strips = 0, exchanges = 0;  // strips begun; sends read (this worker's thread only)
  struct drain {
    const stream& a;
    const stream& b;
    ~drain() {
      (void)cudaStreamSynchronize(a.view().value());
      (void)cudaStreamSynchronize(b.view().value());
    }
  } drain_on_exit{us, cs};

  /// Allocated on `s` (the job's setup stream; both streams wait for it before any use).
  /// `seeds`: this worker seeds blocks (the others need no seed scores); `exchange`: it takes part
  /// in a bar exchange (snap and recv allocated).
  fused_topk_device_state(int dev, const fused_topk_layout& L, std::int64_t n, int k, stream_view s,
                          bool seeds, bool exchange)
      : cs(dev),
        us(dev),
        state(static_cast<std::size_t>(n) * static_cast<std::size_t>(k), s),
        bars(static_cast<std::size_t>(n) + 1, s),
        cnt_a(static_cast<std::size_t>(L.P), s),
        cnt_b(static_cast<std::size_t>(L.W), s),
        buck_a(static_cast<std::size_t>(L.P) * static_cast<std::size_t>(L.cap_a), s),
        buck_b(static_cast<std::size_t>(L.W) * static_cast<std::size_t>(L.cap_b), s),
        scratch(seeds ? static_cast<std::size_t>(L.widest * L.widest) : 0u, s),
        counters(2, s),
        bad_row(1, s),
        snap(exchange ? static_cast<std::size_t>(n) * static_cast<std::size_t>(k) : 0u, s),
        recv(exchange ? static_cast<std::size_t>(n) * static_cast<std::size_t>(k) : 0u, s) {}
};

/// The workers' device states. Every stream of every worker is drained before any state is freed:
/// a worker's upload stream writes into the next worker's recv (the bar exchange).
struct fused_topk_workers : std::vector<std::unique_ptr<fused_topk_device_state>> {
  using base = std::vector<std::unique_ptr<fused_topk_device_state>>;
  fused_topk_workers() = default;
  fused_topk_workers(const fused_topk_workers&) = delete;
  fused_topk_workers& operator=(const fused_topk_workers&) = delete;
  fused_topk_workers(fused_topk_workers&&) noexcept = default;
  fused_topk_workers& operator=(fused_topk_workers&& o) noexcept {
    drain();
    base::operator=(std::move(o));
    return *this;
  }
  ~fused_topk_workers() { drain(); }
  void drain() noexcept {
    for (auto& d : *this) {
      if (!d) continue;
      (void)cudaStreamSynchronize(d->us.view().value());
      (void)cudaStreamSynchronize(d->cs.view().value());
    }
  }
};

/// Merges the buckets of local rows [0, rows) = global row0 + r into their lists (recomputing the
/// pairs with global rows [other0, other1) of an overflowed bucket).
template <class T>
void fused_topk_merge(fused_merge_args<T> m, similarity_metric metric, std::int64_t rows, std::int64_t row0,
                      unsigned* cnt, const pairwise::detail::topk_entry<float>* buck, std::int32_t cap,
                      std::int64_t other0, std::int64_t other1, stream_view s) {
  m.rows = rows;
  m.row0 = row0;
  m.cnt = cnt;
  m.buck = buck;
  m.cap = cap;
  m.other0 = other0;
  m.other1 = other1;
  const unsigned grid = grid_blocks((m.rows + m.rows_per_warp - 1) / m.rows_per_warp, 8);
  pairwise::detail::with_topk_blocks(m.k, [&](auto B) {
    constexpr int b = decltype(B)::value;
    if constexpr (std::is_same_v<T, std::uint32_t>) {  // rows of bits (binary_topk.cuh): one metric
      if (metric != fused_hamming) throw logic_error("fused_topk_merge: rows of bits take fused_hamming");
      fused_merge_kernel<T, static_cast<int>(fused_hamming), b><<<grid, 256, 0, s.value()>>>(m);
    } else {
      switch (metric) {
        case similarity_metric::cosine:
          fused_merge_kernel<T, static_cast<int>(similarity_metric::cosine), b>
              <<<grid, 256, 0, s.value()>>>(m);
          break;
        case similarity_metric::inner_product:
          fused_merge_kernel<T, static_cast<int>(similarity_metric::inner_product), b>
              <<<grid, 256, 0, s.value()>>>(m);
          break;
        default:
          fused_merge_kernel<T, static_cast<int>(similarity_metric::euclidean), b>
              <<<grid, 256, 0, s.value()>>>(m);
          break;
      }
    }
  });
  SPILLWAY_CHECK_LAUNCH();
}

/// The fused top-k of A·Aᵀ over rows of T, as the pair job's sink (see the top of this file).
/// Reads the job's producer (similarity's float_producer: metric, cosine_zero, GEMM options, row
/// stride) and its per-device context (resident rows, per-row values).
template <class T>
class fused_topk_sink : public pairwise::detail::sink_base {
 public:
  using entry = pairwise::detail::topk_entry<float>;

  fused_topk_sink() = default;
  /// `workers`: the entries of the job's device list (each keeps lists of its own).
  fused_topk_sink(const fused_topk_layout& L, const pairwise::topk_options& tk, bool check_finite,
                  const char* who, std::size_t workers = 1)
      : L_(L), tk_(tk), check_finite_(check_finite), who_(who), workers_(workers) {}

  [[nodiscard]] const fused_topk_layout& layout() const noexcept { return L_; }

  /// This process's workers are global workers [first, first + workers) of `all` (other processes
  /// run the rest: dist/similarity.cuh). One worker per process: the blocks the others seeded
  /// come from the host, their bars through set_bars.
  void across_processes(std::size_t first, std::size_t all) {
    if (workers_ != 1 || first >= all) {
      throw logic_error(std::string(who_) +
                        ": across processes the fused top-k runs one worker per process (" +
                        std::to_string(workers_) + " here, global worker " + std::to_string(first) + " of " +
                        std::to_string(all) + ")");
    }
    first_worker_ = first;
    all_workers_ = all;
  }
  /// Global workers over all processes (this process's alone when not across_processes).
  [[nodiscard]] std::size_t all_workers() const noexcept {
    return all_workers_ > 0 ? all_workers_ : workers_;
  }
  /// Several workers in this process exchange their lists for their bars (exchange_bars).
  [[nodiscard]] bool exchanges_bars() const noexcept { return workers_ > 1 && all_workers_ == 0; }
  /// Worker w's device state (its lists, bars, streams, the `seeded` event), after setup.
  [[nodiscard]] fused_topk_device_state& device_state(std::size_t w) { return *dev_.at(w); }

  /// Nothing per slot (the strips write no scores); per device the lists, the bars, the lists'
  /// export (values and int64 columns), with several workers every worker's lists side by side
  /// for the merge, and the buckets and seed scores, each rounded as a slot buffer is.
  [[nodiscard]] pairwise::sink_footprint footprint() const {
    pairwise::sink_footprint f;
    f.strip_output = false;
    f.forward_order = true;
    const auto k = static_cast<std::size_t>(tk_.k);
    f.bytes_per_row = k * sizeof(entry) + sizeof(topk_bar) + k * (sizeof(float) + sizeof(std::int64_t));
    if (workers_ > 1) f.bytes_per_row += workers_ * k * sizeof(entry);
    if (exchanges_bars()) f.bytes_per_row += 2 * k * sizeof(entry);  // the bar exchange's snap and recv
    const auto r = [](std::size_t b) { return ::spillway::detail::slot_device_bytes({b}); };
    const auto P = static_cast<std::size_t>(L_.P), W = static_cast<std::size_t>(L_.W);
    f.bytes_fixed = r(P * 4) + r(P * static_cast<std::size_t>(L_.cap_a) * sizeof(entry)) + r(W * 4) +
                    r(W * static_cast<std::size_t>(L_.cap_b) * sizeof(entry)) +
                    r(static_cast<std::size_t>(L_.widest * L_.widest) * 4) + 6 * r(16);
    return f;
  }

  /// Worker w's state, then its rows in block by block (upload stream) and each of its seed blocks'
  /// finiteness scan and seed on the compute stream as soon as the block's rows are there, then
  /// the bars of its lists; start() hands each worker the others' bars. Nothing here waits for the
  /// device.
  template <class Job>
  void setup(Job& job, std::size_t w, stream_view s) {
    auto& c = *job.ctx[w];
    const std::int64_t n = job.prod.rows(false);
    const auto nw = static_cast<std::int64_t>(all_workers());
    const auto gw = static_cast<std::int64_t>(first_worker_ + w);  // the global worker
    const bool seeds = gw < L_.blocks;
    auto& slot = pairwise::detail::per_worker(dev_, w);
    slot = std::make_unique<fused_topk_device_state>(c.device, L_, n, tk_.k, s, seeds, exchanges_bars());
    fused_topk_device_state& D = *slot;
    D.marks.on = fused_topk_hook().profile;
    event allocated;
    allocated.record(s);  // the buffers, and the aux values of rows already in device memory
    D.cs.view().wait(allocated);
    D.us.view().wait(allocated);
    D.marks.mark(D.cs.view());
    init_state(job, D);
    // The per-row values' entry past the last row (loaded in pairs, never used): set, not left
    // uninitialized.
    SPILLWAY_CUDA_TRY(cudaMemsetAsync(c.aux_a.data() + n, 0, sizeof(float), D.cs.view().value()));
    // This worker's seed blocks' rows from the host (no other worker holds them: each uploads its
    // own over its own link), each block seeded as soon as it is here; the other blocks' rows come
    // from their holders in start().
    const std::int64_t P = job.plan.panel_rows;
    for (std::int64_t b = gw; b < L_.blocks; b += nw) {
      const std::int64_t b0 = b * L_.S, b1 = fused_block_end(L_, n, b);
      D.bytes_in += pairwise::detail::ensure_panels(job, w, b0 / P, (b1 + P - 1) / P, D.us.view());
      event arrived;
      arrived.record(D.us.view());
      D.cs.view().wait(arrived);
      seed_block(job, D, c, b0, b1);
    }
    if (seeds) {
      pairwise::detail::with_larger(job.prod.larger(), [&](auto Lg) {
        fused_bars_kernel<decltype(Lg)::value>
            <<<grid_blocks(n, 256), 256, 0, D.cs.view().value()>>>(D.state.data(), n, tk_.k, D.bars.data());
      });
      SPILLWAY_CHECK_LAUNCH();
    }
    D.seeded.record(D.cs.view());
    D.marks.mark(D.cs.view());
  }

  /// Every worker takes the rows and the bars of the blocks the others seeded (once they have),
  /// then the host result is allocated on another thread while the device works. With
  /// check_finite a non-finite row is refused here, once the seeds have scanned every block,
  /// before any strip.
  template <class Job>
  void start(Job& job) {
    take_rows(job);
    start_host(job);
    if (check_finite_) refuse_nonfinite(first_bad_row(job), who_, "A");
  }

  /// start()'s steps, which a job across processes runs apart (its bars and the refusal of a
  /// non-finite row agreed between them): every worker's rows of the blocks it did not seed (with
  /// the other local workers' bars; across processes the rows from the host, the bars from set_bars).
  template <class Job>
  void take_rows(Job& job) {
    if (all_workers_ > 0) {
      device_guard g(job.ctx[0]->device);
      fused_topk_device_state& D = *dev_[0];
      D.bytes_in += pairwise::detail::ensure_panels(job, 0, 0, job.plan.b_panels, D.us.view());
      event arrived;
      arrived.record(D.us.view());
      D.cs.view().wait(arrived);
      return;
    }
    for (std::size_t w = 0; w < dev_.size() && dev_.size() > 1; ++w) take_others_blocks(job, w);
  }
  /// The host result (and a pinned block per worker for the lists' way down) made on another
  /// thread while the device works.
  template <class Job>
  void start_host(Job& job) {
    host_ = pairwise::detail::start_topk_host<float>(job.prod.rows(false), tk_.k, dev_.size());
  }
  /// The first non-finite row this process's workers' seeds scanned (waits for them), or −1. With
  /// check_finite off: −1.
  template <class Job>
  std::int64_t first_bad_row(Job& job) {
    std::int64_t bad = -1;
    for (std::size_t w = 0; w < dev_.size() && check_finite_; ++w) {
      device_guard g(job.ctx[w]->device);
      const std::vector<unsigned long long> h = dev_[w]->bad_row.to_host(dev_[w]->cs.view());
      if (h[0] != ~0ULL && (bad < 0 || static_cast<std::int64_t>(h[0]) < bad))
        bad = static_cast<std::int64_t>(h[0]);
    }
    return bad;
  }
  /// Across processes: worker 0's bars of rows [0, n) from `host` (n entries; what every process's
  /// seeds gave for the blocks it seeded), on its compute stream after its seeds. Returns once
  /// copied (the host vector may go).
  template <class Job>
  void set_bars(Job& job, const std::vector<topk_bar>& host) {
    device_guard g(job.ctx[0]->device);
    fused_topk_device_state& D = *dev_[0];
    const std::size_t n = static_cast<std::size_t>(job.prod.rows(false));
    if (host.size() != n)
      throw logic_error(std::string(who_) + ": set_bars got " + std::to_string(host.size()) + " bars for " +
                        std::to_string(n) + " rows");
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(D.bars.data(), host.data(), n * sizeof(topk_bar),
                                      cudaMemcpyHostToDevice, D.cs.view().value()));
    D.cs.view().synchronize();
  }
  /// Worker 0's bars of rows [0, n) to the host once its seeds are done.
  template <class Job>
  std::vector<topk_bar> bars_to_host(Job& job) {
    device_guard g(job.ctx[0]->device);
    fused_topk_device_state& D = *dev_[0];
    std::vector<topk_bar> h(static_cast<std::size_t>(job.prod.rows(false)));
    D.seeded.synchronize();
    SPILLWAY_CUDA_TRY(
        cudaMemcpy(h.data(), D.bars.data(), h.size() * sizeof(topk_bar), cudaMemcpyDeviceToHost));
    return h;
  }

  /// Strip st's chunks on the device's compute stream, which the slot's stream then waits for.
  template <class Job, class Compute>
  std::size_t enqueue(Job& job, const pairwise::strip_span& st, task_slot& slot, stream_view s, Compute&&) {
    fused_topk_device_state& D = *dev_[slot.worker()];
    exchange_bars(job, slot.worker());
    run_strip(job, D, *job.ctx[slot.worker()], st);
    event done;
    done.record(D.cs.view());
    s.wait(done);
    const std::size_t moved = D.bytes_in;
    D.bytes_in = 0;
    return moved;
  }

  /// The lists out, the hook's counts. Worker w brings rows [n·w/W, n·(w+1)/W) to the host: the
  /// other workers' lists of those rows over the peer links, merged on its GPU, exported as float
  /// and int32 and copied down through its own halves of a pinned block (copy_lists_to_host), the
  /// workers at once over their own links.
  template <class Job>
  pairwise::topk_result<float> collect(Job& job) {
    wait_for_workers(job);
    const auto collect_start = std::chrono::steady_clock::now();
    pairwise::detail::topk_host_side<float> h = host_.get();
    const std::int64_t n = job.prod.rows(false);
    const auto nw = static_cast<std::int64_t>(dev_.size());
    std::vector<std::future<void>> parts;
    for (std::int64_t w = 1; w < nw; ++w) {
      parts.push_back(std::async(std::launch::async, [this, &job, &h, w, n, nw] {
        collect_rows(job, static_cast<std::size_t>(w), n * w / nw, n * (w + 1) / nw, h);
      }));
    }
    std::exception_ptr err;
    try {
      collect_rows(job, 0, 0, n / nw, h);
    } catch (...) {
      err = std::current_exception();
    }
    for (auto& f : parts) {
      try {
        f.get();
      } catch (...) {
        if (!err) err = std::current_exception();
      }
    }
    if (err) std::rethrow_exception(err);
    std::uint64_t recomputed = 0, candidates = 0;
    std::int64_t chunks = 0, exchanges = 0;
    for (std::size_t w = 0; w < dev_.size(); ++w) {
      device_guard gw(job.ctx[w]->device);
      const auto c = dev_[w]->counters.to_host(dev_[w]->cs.view());
      recomputed += c[0];
      candidates += c[1];
      chunks += dev_[w]->chunks;
      exchanges += dev_[w]->exchanges;
    }
    auto& hk = fused_topk_hook();
    if (hk.profile) {
      hk.collect_ms =
          std::chrono::duration<float, std::milli>(std::chrono::steady_clock::now() - collect_start).count();
    }
    hk.last_recomputed_rows = recomputed;
    hk.last_candidates = candidates;
    hk.last_chunks = chunks;
    hk.last_exchanges = exchanges;
    hk.last_ran = true;
    return std::move(h.result);
  }

 private:
  fused_topk_layout L_{};
  pairwise::topk_options tk_{};
  bool check_finite_ = true;
  const char* who_ = "similarity_topk";
  std::size_t workers_ = 1;
  std::size_t first_worker_ = 0, all_workers_ = 0;  // across_processes (0: this process alone)
  fused_topk_workers dev_;
  std::future<pairwise::detail::topk_host_side<float>> host_;

  /// Several workers in one process keep lists of their own, and a worker's bars rise only with
  /// its own: each would filter with about half of what the job has seen. So each worker sends its
  /// lists to the next (w + 1 mod workers) now and then, and the receiver raises its bars to the
  /// k-th place of the union of its lists and the copy (fused_union_bars_kernel: the two hold
  /// disjoint pairs, so that place is a true lower bound). Nothing waits across workers on the
  /// host or in a compute stream: the sender snapshots its lists in its compute stream's order (a
  /// device copy), its upload stream copies the snapshot into the receiver's recv once the
  /// receiver has read the last one, and the receiver, at the start of one of its strips, reads a
  /// send whose copy has finished; a send finding the last one unread is skipped. Called by worker
  /// w's thread before each of its strips.
  template <class Job>
  void exchange_bars(Job& job, std::size_t w) {
    if (!exchanges_bars()) return;
    fused_topk_device_state& D = *dev_[w];
    const std::size_t nw = dev_.size(), prev = (w + nw - 1) % nw, next = (w + 1) % nw;
    const stream_view cs = D.cs.view();
    const std::int64_t n = job.prod.rows(false);
    const std::size_t bytes = static_cast<std::size_t>(n) * static_cast<std::size_t>(tk_.k) * sizeof(entry);
    const std::int64_t c = ++D.strips;
    {
      std::lock_guard<std::mutex> l(D.mail);
      if (D.mail_full) {
        const cudaError_t e = cudaEventQuery(dev_[prev]->sent.value());
        if (e != cudaErrorNotReady) {
          SPILLWAY_CUDA_TRY(e);
          pairwise::detail::with_larger(job.prod.larger(), [&](auto Lg) {
            fused_union_bars_kernel<decltype(Lg)::value><<<grid_blocks(n, 256), 256, 0, cs.value()>>>(
                D.state.data(), D.recv.data(), n, tk_.k, D.bars.data());
          });
          SPILLWAY_CHECK_LAUNCH();
          D.recv_free.record(cs);
          D.mail_full = false;
          ++D.exchanges;
        }
      }
    }
    if (!fused_exchange_due(c, L_, n, nw)) return;
    fused_topk_device_state& R = *dev_[next];
    std::lock_guard<std::mutex> l(R.mail);
    if (R.mail_full) return;
    cs.wait(D.sent);  // the last send's copy has read snap
    SPILLWAY_CUDA_TRY(
        cudaMemcpyAsync(D.snap.data(), D.state.data(), bytes, cudaMemcpyDeviceToDevice, cs.value()));
    D.snapped.record(cs);
    D.us.view().wait(D.snapped);
    D.us.view().wait(R.recv_free);  // the receiver has read the last send
    SPILLWAY_CUDA_TRY(cudaMemcpyPeerAsync(R.recv.data(), job.ctx[next]->device, D.snap.data(),
                                          job.ctx[w]->device, bytes, D.us.view().value()));
    D.sent.record(D.us.view());
    R.mail_full = true;
  }

  /// Every worker's streams finished. Profiling: each worker's end marked and its device time
  /// (first mark to end) in the hook.
  template <class Job>
  void wait_for_workers(Job& job) {
    const bool profile = fused_topk_hook().profile;
    for (std::size_t w = 0; w < dev_.size() && profile; ++w) {
      device_guard g(job.ctx[w]->device);
      dev_[w]->marks.mark(dev_[w]->cs.view());
    }
    for (auto& x : dev_) {
      x->us.view().synchronize();  // the bar exchange's last copies
      x->cs.view().synchronize();
    }
    if (!profile) return;
    dev_[0]->marks.publish();
    auto& hk = fused_topk_hook();
    hk.worker_ms.assign(dev_.size(), 0.0f);
    for (std::size_t w = 0; w < dev_.size(); ++w) hk.worker_ms[w] = dev_[w]->marks.span_ms();
  }

  /// Rows [r0, r1) of the final lists into the host result, on worker w (collect).
  template <class Job>
  void collect_rows(Job& job, std::size_t w, std::int64_t r0, std::int64_t r1,
                    pairwise::detail::topk_host_side<float>& h) {
    namespace pd = pairwise::detail;
    device_guard g(job.ctx[w]->device);
    const stream_view s = dev_[w]->cs.view();
    const auto k = static_cast<std::size_t>(tk_.k);
    const std::size_t cnt = static_cast<std::size_t>(r1 - r0) * k;
    const entry* lists = dev_[w]->state.data() + static_cast<std::size_t>(r0) * k;
    device_buffer<entry> gathered;
    if (dev_.size() > 1 && cnt > 0) {
      // Every worker's lists of these rows side by side on worker w, merged into the first.
      gathered = device_buffer<entry>(dev_.size() * cnt, s);
      for (std::size_t v = 0; v < dev_.size(); ++v) {
        SPILLWAY_CUDA_TRY(cudaMemcpyPeerAsync(gathered.data() + v * cnt, job.ctx[w]->device,
                                              dev_[v]->state.data() + static_cast<std::size_t>(r0) * k,
                                              job.ctx[v]->device, cnt * sizeof(entry), s.value()));
      }
      pd::merge_topk_device(gathered.data(), r1 - r0, tk_.k, static_cast<int>(dev_.size()), cnt,
                            job.prod.larger(), s);
      lists = gathered.data();
    }
    auto* stage = static_cast<std::byte*>(h.stage.data());
    if (stage != nullptr) stage += w * 2 * pd::topk_stage_half_bytes;
    pd::export_lists_to_host(lists, cnt, h.result.values.data() + static_cast<std::size_t>(r0) * k,
                             h.result.indices.data() + static_cast<std::size_t>(r0) * k, stage, s);
  }

  /// Worker w (of several) before its first strip: every row (one worker seeded, so holds, them
  /// all) — the other workers' blocks from their holders (panel_share: over NVLink where the pools
  /// reach each other, else from the host) — then those blocks' bars once their seeds are done.
  template <class Job>
  void take_others_blocks(Job& job, std::size_t w) {
    const std::int64_t n = job.prod.rows(false);
    device_guard g(job.ctx[w]->device);
    fused_topk_device_state& D = *dev_[w];
    const stream_view cs = D.cs.view();
    D.bytes_in += pairwise::detail::ensure_panels(job, w, 0, job.plan.b_panels, D.us.view());
    event arrived;
    arrived.record(D.us.view());
    cs.wait(arrived);
    const auto nw = static_cast<std::int64_t>(dev_.size());
    for (std::size_t v = 0; v < dev_.size(); ++v) {
      if (v == w || static_cast<std::int64_t>(v) >= L_.blocks) continue;
      cs.wait(dev_[v]->seeded);
      for (auto b = static_cast<std::int64_t>(v); b < L_.blocks; b += nw) {
        const std::int64_t b0 = b * L_.S, b1 = fused_block_end(L_, n, b);
        SPILLWAY_CUDA_TRY(cudaMemcpyPeerAsync(
            D.bars.data() + b0, job.ctx[w]->device, dev_[v]->bars.data() + b0, job.ctx[v]->device,
            static_cast<std::size_t>(b1 - b0) * sizeof(topk_bar), cs.value()));
      }
    }
  }

  /// Counters zeroed, the lists empty, the bad-row flag at "none".
  template <class Job>
  void init_state(const Job& job, fused_topk_device_state& D) const {
    const stream_view s = D.cs.view();
    const std::int64_t n = job.prod.rows(false);
    D.bars.fill_bytes_async(0, s);
    D.cnt_a.fill_bytes_async(0, s);
    D.cnt_b.fill_bytes_async(0, s);
    D.counters.fill_bytes_async(0, s);
    D.bad_row.fill_bytes_async(0xFF, s);
    pairwise::detail::with_larger(job.prod.larger(), [&](auto Lg) {
      pairwise::detail::topk_init_kernel<float, decltype(Lg)::value>
          <<<grid_blocks(n * tk_.k, 256), 256, 0, s.value()>>>(D.state.data(), n * tk_.k);
    });
    SPILLWAY_CHECK_LAUNCH();
  }

  /// Block [b0, b1)'s own pairs, dense, through the strip path's GEMM and selection: every row
  /// starts with the exact top-k of its block, a true lower bound of its final k-th place.
  template <class Job, class Ctx>
  void seed_block(const Job& job, fused_topk_device_state& D, const Ctx& c, std::int64_t b0,
                  std::int64_t b1) const {
    namespace pd = ::spillway::pairwise::detail;
    const stream_view s = D.cs.view();
    const auto& p = job.prod;
    const std::int64_t bn = b1 - b0, d = p.a.cols, ld = p.stride(false);
    const T* br = reinterpret_cast<const T*>(c.resident_rows) + b0 * ld;
    const float* aux = c.aux_a.data();
    if (check_finite_) {
      first_nonfinite_row_kernel<T>
          <<<grid_blocks(bn * d, 256), 256, 0, s.value()>>>(br, bn, d, ld, D.bad_row.data(), b0);
      SPILLWAY_CHECK_LAUNCH();
    }
    const auto A = row_major(br, bn, d, ld);
    const similarity_epilogue epi{p.m, aux + b0, aux + b0, p.cosine_zero};
    ::spillway::gemm::gemm_async(s, 1.0f, A, A.t(), 0.0f, row_major(D.scratch.data(), bn, bn, bn), p.go, epi);
    pd::with_larger(p.larger(), [&](auto Lg) {
      pd::with_topk_blocks(tk_.k, [&](auto B) {
        pd::topk_rows_kernel<float, decltype(Lg)::value, decltype(B)::value>
            <<<grid_blocks(bn, 8), 256, 0, s.value()>>>(D.scratch.data(), bn, bn, b0, b0,
                                                        !tk_.include_diagonal, D.state.data(), tk_.k);
      });
    });
    SPILLWAY_CHECK_LAUNCH();
  }

  /// Strip st's rows against every column of the LATER blocks, in chunks whose width is the number
  /// of columns those rows have already seen (doubling), capped at W: per chunk one GEMM whose
  /// filter fills the buckets, then the strip's rows and the chunk's columns merge theirs.
  template <class Job, class Ctx>
  void run_strip(const Job& job, fused_topk_device_state& D, const Ctx& c, const pairwise::strip_span& st) {
    const stream_view s = D.cs.view();
    const auto& p = job.prod;
    const std::int64_t n = st.n, d = p.a.cols, ld = p.stride(false);
    const T* rows = reinterpret_cast<const T*>(c.resident_rows);
    const float* aux = c.aux_a.data();
    const std::int64_t r0 = st.first_row, rn = st.rows;
    fused_merge_args<T> ma;
    ma.state = D.state.data();
    ma.bars = D.bars.data();
    ma.k = tk_.k;
    ma.data = rows;
    ma.ld = ld;
    ma.d = d;
    ma.aux = aux;
    ma.cosine_zero = p.cosine_zero;
    ma.recomputed = D.counters.data();
    // Counted only when profiling (one atomic per merge warp on one address: ~1% of a 10^6 job).
    ma.candidates = fused_topk_hook().profile ? D.counters.data() + 1 : nullptr;
    for_each_fused_chunk(L_, n, r0, [&](std::int64_t c0, std::int64_t w) {
      fused_topk_filter f;
      f.metric = p.m;
      f.cosine_zero = p.cosine_zero;
      f.aux_a = aux + r0;
      f.aux_b = aux + c0;
      f.bar_a = D.bars.data() + r0;
      f.bar_b = D.bars.data() + c0;
      f.a_row0 = static_cast<std::int32_t>(r0);
      f.b_row0 = static_cast<std::int32_t>(c0);
      f.cnt_a = D.cnt_a.data();
      f.buck_a = D.buck_a.data();
      f.cap_a = L_.cap_a;
      f.cnt_b = D.cnt_b.data();
      f.buck_b = D.buck_b.data();
      f.cap_b = L_.cap_b;
      D.marks.mark(s);
      ::spillway::gemm::fragment_sink_gemm_async(s, row_major(rows + r0 * ld, rn, d, ld),
                                                 row_major(rows + c0 * ld, w, d, ld), f);
      D.marks.mark(s);
      // The strip's rows, then the chunk's columns as rows (up to 524,288, a few candidates each:
      // a warp serves 8 consecutive ones, as in the binary mode).
      fused_topk_merge(ma, p.m, rn, r0, D.cnt_a.data(), D.buck_a.data(), L_.cap_a, c0, c0 + w, s);
      fused_merge_args<T> mb = ma;
      mb.rows_per_warp = 8;
      fused_topk_merge(mb, p.m, w, c0, D.cnt_b.data(), D.buck_b.data(), L_.cap_b, r0, r0 + rn, s);
      D.marks.mark(s);
      ++D.chunks;
    });
  }
};

/// The widest chunk of the fused job: 524,288 columns (at 10⁷ rows on two H200s 75.38 s against
/// 75.60 s with 262,144: half the chunks, so half the row merges and kernel boundaries; the same at
/// 10⁶ rows; docs/similarity.md).
inline constexpr std::int64_t fused_widest_chunk = 524288;

/// Sets `job`'s fused sink (`workers` workers in this process) to the layout of the widest chunk
/// whose plan fits `budget` — halving from fused_widest_chunk down to 16,384 columns — and its
/// strip height; false where none fits (the strip path's turn).
template <class Job>
bool fit_fused_layout(Job& job, const pairwise::topk_options& tk, std::int64_t max_panel_rows,
                      bool check_finite, const char* who, std::size_t workers, const memory_budget& budget) {
  using sink_t = std::decay_t<decltype(job.sink)>;
  for (std::int64_t w = fused_widest_chunk;; w /= 2) {
    const fused_topk_layout L = fused_topk_shape(job.prod.rows(false), tk.k, max_panel_rows, w);
    job.sink = sink_t(L, tk, check_finite, who, workers);
    job.opt.max_panel_rows = L.P;
    const auto r = pairwise::detail::plan_request_of(job, budget);
    if (pairwise::detail::plan_for(r, L.P, true).total_bytes() <= budget.bytes()) return true;
    if (w <= 16384) return false;
  }
}

}  // namespace spillway::similarity::detail
