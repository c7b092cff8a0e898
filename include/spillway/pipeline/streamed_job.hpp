// spillway/pipeline/streamed_job.hpp — a streamed job: host arrays larger than device memory cut
// into chunks of "units" (elements, rows, dates…), each chunk's slices copied to a device slot,
// the caller's own device work run on them (any number of kernels, library calls, steps), the
// outputs copied back. spillway does the planning, the pinned staging of pageable memory, the
// overlap of copies and compute over a ring of slots, and the scheduling over several GPUs; the
// caller writes only the per-chunk computation.
//
//   spillway::streamed_job job(n_dates);                       // units: dates
//   auto rate = job.input(rates, 1);                           // 1 double per date
//   auto flow = job.input(cash_flows, n_times);                // n_times doubles per date
//   auto tgrid = job.resident(times);                          // whole array, once per slot
//   auto disc = job.scratch<double>(n_times);                  // device only, per chunk
//   auto pv   = job.output(present_values, 1);
//   job.run(options, [&](const spillway::job_chunk& c) {
//     discount<<<g, b, 0, c.stream()>>>(c.data(rate), c.data(tgrid), c.data(disc), c.count(), n_times);
//     price<<<g, b, 0, c.stream()>>>(c.data(disc), c.data(flow), c.data(pv), c.count(), n_times);
//   });
//
// This is the core spillway::transform / streamed_map run on (pipeline/detail/streamed_job.hpp);
// run_tasks (task_pipeline.hpp) stays the lower level, for work that is not "slices in, slices out".
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/core/memory_budget.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/pipeline/detail/streamed_job.hpp>
#include <spillway/pipeline/host_operand.hpp>
#include <spillway/pipeline/job.hpp>
#include <spillway/pipeline/plan.hpp>
#include <spillway/pipeline/task_pipeline.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace spillway {

namespace detail {

/// The options of every streamed job (streamed_job_options, spillway::transform's
/// transform_options): where it runs, its slots and chunks, its progress. `Granularity`: the
/// chunks' default multiple of units.
template <std::size_t Granularity>
struct streamed_options {
  /// Devices to use. Empty: all visible devices, balanced dynamically.
  std::vector<int> devices;
  /// Device memory per device for all slots. Default: memory_budget::default_for_all(devices)
  /// (80% of free).
  std::optional<memory_budget> budget;
  /// Chunks in flight per device (each with its own stream); ≥ 3 overlaps H2D, compute and D2H.
  std::size_t slots_per_device = 4;
  /// Cap on one slot's device bytes (every array's chunk: a transform's inputs and output; a
  /// streamed_job's arrays plus its resident arrays); 0: only the budget limits. Smaller chunks
  /// shorten the pipeline's fill and drain; larger ones amortize per-copy overhead.
  std::size_t max_chunk_bytes = std::size_t{96} << 20;
  /// Chunk lengths are multiples of this many units (a transform's: elements), except the last.
  std::size_t granularity = Granularity;
  /// Optional progress / cancellation (see progress_callback).
  progress_callback progress;
};

}  // namespace detail

/// How a streamed_job runs (chunks of any number of units by default).
struct streamed_job_options : detail::streamed_options<1> {};

/// What an array of a streamed job is.
enum class job_array_kind {
  input,     ///< host → device, chunk by chunk
  output,    ///< device → host, chunk by chunk, after the chunk's computation
  scratch,   ///< device only: per-chunk space for intermediate steps, never copied
  resident,  ///< host → device whole, once per slot before its first chunk, kept there
};

/// A typed handle to one array of a streamed_job (T is const for inputs and resident arrays). Pass
/// it to job_chunk::data / size inside the computation.
template <class T>
class job_array {
 public:
  using value_type = T;
  job_array() = default;
  [[nodiscard]] job_array_kind kind() const noexcept { return kind_; }
  /// Elements per unit (a resident array: its whole length).
  [[nodiscard]] std::size_t per_unit() const noexcept { return per_unit_; }

 private:
  friend class streamed_job;
  friend class job_chunk;
  job_array(job_array_kind k, std::size_t ordinal, std::size_t per_unit) : kind_(k), ordinal_(ordinal), per_unit_(per_unit) {}
  job_array_kind kind_ = job_array_kind::input;
  std::size_t ordinal_ = static_cast<std::size_t>(-1);  ///< among streamed (input/output/scratch) or resident arrays
  std::size_t per_unit_ = 0;
};

/// One chunk as its computation sees it: units [begin(), begin() + count()) of the job, the device
/// slices of every array, the slot's stream and device (current while the computation runs).
class job_chunk {
 public:
  [[nodiscard]] std::size_t index() const noexcept { return chunk_.index; }
  [[nodiscard]] std::size_t begin() const noexcept { return chunk_.begin; }
  [[nodiscard]] std::size_t count() const noexcept { return chunk_.count; }
  [[nodiscard]] std::size_t end() const noexcept { return chunk_.end(); }
  /// The stream to enqueue on: the copies in were enqueued on it, the copies out follow.
  [[nodiscard]] stream_view stream() const noexcept { return stream_; }
  [[nodiscard]] int device() const noexcept { return slot_->device(); }
  /// The slot (its index in the device's ring; add_bytes_moved for extra traffic).
  [[nodiscard]] task_slot& slot() const noexcept { return *slot_; }

  /// The device slice of `a` for this chunk: element 0 is unit begin()'s first element (a
  /// resident array: the whole array). 256-byte aligned.
  template <class T>
  [[nodiscard]] T* data(const job_array<T>& a) const {
    return static_cast<T*>((*dev_)[index_of(a.kind_, a.ordinal_)]);
  }
  /// Elements of `a` in this chunk: count() * per_unit (a resident array: its whole length).
  template <class T>
  [[nodiscard]] std::size_t size(const job_array<T>& a) const noexcept {
    return a.kind_ == job_array_kind::resident ? a.per_unit_ : chunk_.count * a.per_unit_;
  }

  job_chunk(const chunk& c, task_slot& slot, stream_view s, const std::vector<void*>& dev, std::size_t n_streamed,
            std::size_t n_resident)
      : chunk_(c), slot_(&slot), stream_(s), dev_(&dev), n_streamed_(n_streamed), n_resident_(n_resident) {}

 private:
  [[nodiscard]] std::size_t index_of(job_array_kind k, std::size_t ordinal) const {
    const bool res = k == job_array_kind::resident;
    if (ordinal >= (res ? n_resident_ : n_streamed_)) {
      throw logic_error("job_chunk::data: the array handle does not belong to this job (or is default-constructed)");
    }
    return res ? n_streamed_ + ordinal : ordinal;
  }
  chunk chunk_;
  task_slot* slot_;
  stream_view stream_;
  const std::vector<void*>* dev_;
  std::size_t n_streamed_;
  std::size_t n_resident_;
};

/// A job over `units` units. Describe its arrays (input / output / scratch / resident; their order
/// is free), then run() it with the per-chunk computation. Host arrays must stay alive and
/// untouched (outputs: unread) until run() returns.
class streamed_job {
 public:
  explicit streamed_job(std::size_t units) : units_(units) {}

  [[nodiscard]] std::size_t units() const noexcept { return units_; }

  /// An input of `per_unit` elements per unit at `data` (units() * per_unit elements).
  template <class T>
  job_array<const T> input(const T* data, std::size_t per_unit, host_memory m = host_memory::detect) {
    return add_streamed<const T>(job_array_kind::input, data, units_ * per_unit, per_unit, m, "input");
  }
  /// From a contiguous range (std::vector, pinned_buffer, span…); its size must be units() * per_unit.
  template <class R, class T = std::remove_cv_t<std::remove_pointer_t<decltype(std::declval<const R&>().data())>>>
  job_array<const T> input(const R& r, std::size_t per_unit = 1, host_memory m = host_memory::detect) {
    detail::require_flat(r, "streamed_job::input");
    return add_streamed<const T>(job_array_kind::input, r.data(), static_cast<std::size_t>(r.size()), per_unit, m, "input");
  }
  /// An output of `per_unit` elements per unit at `data`.
  template <class T>
  job_array<T> output(T* data, std::size_t per_unit, host_memory m = host_memory::detect) {
    static_assert(!std::is_const_v<T>, "streamed_job::output: the destination must be writable");
    return add_streamed<T>(job_array_kind::output, data, units_ * per_unit, per_unit, m, "output");
  }
  template <class R, class T = std::remove_pointer_t<decltype(std::declval<R&>().data())>,
            class = std::enable_if_t<!std::is_const_v<T>>>
  job_array<T> output(R& r, std::size_t per_unit = 1, host_memory m = host_memory::detect) {
    detail::require_flat(r, "streamed_job::output");
    return add_streamed<T>(job_array_kind::output, r.data(), static_cast<std::size_t>(r.size()), per_unit, m, "output");
  }
  /// Device-only space of `per_unit` elements per unit in every chunk, for intermediate results
  /// (uninitialized at the start of each chunk; never copied).
  template <class T>
  job_array<T> scratch(std::size_t per_unit) {
    static_assert(!std::is_const_v<T>, "streamed_job::scratch: scratch space is writable");
    return add_streamed<T>(job_array_kind::scratch, nullptr, units_ * per_unit, per_unit, host_memory::page_locked,
                           "scratch");
  }
  /// An input every chunk needs whole (a table, parameters): copied to each slot once.
  template <class T>
  job_array<const T> resident(const T* data, std::size_t size) {
    if (size == 0 || data == nullptr) {
      throw logic_error("streamed_job::resident: array " + std::to_string(resident_.size()) +
                        (data == nullptr ? " is null" : " is empty"));
    }
    const std::size_t bytes = checked_bytes(size, sizeof(T), "resident");
    resident_.push_back({data, bytes});
    return job_array<const T>(job_array_kind::resident, resident_.size() - 1, size);
  }
  template <class R, class T = std::remove_cv_t<std::remove_pointer_t<decltype(std::declval<const R&>().data())>>>
  job_array<const T> resident(const R& r) {
    detail::require_flat(r, "streamed_job::resident");
    return resident(r.data(), static_cast<std::size_t>(r.size()));
  }

  /// What the chunk plan is made from, for a budget of `budget_bytes` per device (host only).
  [[nodiscard]] plan_request plan_request_for(const streamed_job_options& o, std::size_t budget_bytes) const {
    check(o);
    plan_request pr;
    pr.extent = units_;
    for (const auto& a : streamed_) pr.bytes_per_unit.push_back(a.unit_bytes);
    std::size_t fixed = 0;
    for (const auto& r : resident_) fixed = detail::align_up(fixed + r.bytes, 256, "streamed_job");
    pr.budget_bytes = budget_bytes;
    pr.slots = o.slots_per_device;
    pr.granularity = o.granularity;
    pr.fixed_slot_bytes = fixed;
    // The cap bounds the chunks; resident arrays larger than it leave the chunks uncapped.
    pr.max_slot_bytes = o.max_chunk_bytes > fixed ? o.max_chunk_bytes : 0;
    return pr;
  }
  /// The chunk plan for a budget of `budget_bytes` per device (host only; throws logic_error like
  /// make_chunk_plan when the budget cannot hold one chunk per slot, stating the minimum).
  [[nodiscard]] chunk_plan plan(const streamed_job_options& o, std::size_t budget_bytes) const {
    return make_chunk_plan(plan_request_for(o, budget_bytes));
  }

  /// Runs the job: for each chunk, on a free slot of some device, the inputs' slices are copied in,
  /// the resident arrays too if the slot lacks them, then `compute(const job_chunk&)` enqueues the
  /// device work on chunk.stream() (it must only enqueue: no synchronization needed or wanted),
  /// then the outputs' slices are copied back. Returns when every output is complete on the host,
  /// or with report.cancelled set (report.completed[i]: chunk i of the plan was written). Throws
  /// logic_error for bad arguments (before touching any data), no_gpu_error without a GPU, and
  /// pipeline_error when the job fails (naming the chunk; nesting the cause).
  template <class Compute>
  job_report run(const streamed_job_options& o, Compute compute) const {
    static_assert(std::is_invocable_v<Compute&, const job_chunk&>,
                  "streamed_job::run: compute must be callable as compute(const spillway::job_chunk&)");
    check(o);
    if (units_ == 0) return job_report{};
    const job_devices jd = resolve_job_devices(o.devices, o.budget, "streamed_job::run");
    const std::vector<int>& devices = jd.devices;
    const memory_budget& budget = jd.budget;
    const chunk_plan p = plan(o, budget.bytes());
    std::vector<detail::streamed_array> arrays = streamed_;
    for (auto& a : arrays) {
      if (!a.scratch) a.memory = detail::resolve_memory(a.memory, a.host, units_ * a.unit_bytes);
    }
    const std::size_t ns = arrays.size(), nr = resident_.size();
    auto step = [&](const chunk& c, task_slot& slot, stream_view s, const std::vector<void*>& dev) {
      compute(job_chunk(c, slot, s, dev, ns, nr));
    };
    return detail::run_streamed_job(devices, budget, o.progress, p, arrays, resident_, step);
  }

 private:
  static std::size_t checked_bytes(std::size_t n, std::size_t elem, const char* who) {
    if (detail::mul_overflows(n, elem)) {
      throw logic_error(std::string("streamed_job::") + who + ": " + std::to_string(n) + " elements overflow size_t bytes");
    }
    return n * elem;
  }

  template <class T>
  job_array<T> add_streamed(job_array_kind k, const void* data, std::size_t size, std::size_t per_unit, host_memory m,
                            const char* who) {
    const std::string name = std::string("streamed_job::") + who + " (array " + std::to_string(streamed_.size()) + ")";
    if (per_unit == 0) throw logic_error(name + ": per_unit must be at least 1, got 0");
    if (detail::mul_overflows(units_, per_unit)) throw logic_error(name + ": units * per_unit overflows size_t");
    if (size != units_ * per_unit) {
      throw logic_error(name + ": has " + std::to_string(size) + " elements, the job needs units * per_unit = " +
                        std::to_string(units_) + " * " + std::to_string(per_unit) + " = " +
                        std::to_string(units_ * per_unit));
    }
    if (k != job_array_kind::scratch && data == nullptr && units_ > 0) throw logic_error(name + ": the host pointer is null");
    const std::size_t unit_bytes = checked_bytes(per_unit, sizeof(T), who);
    (void)checked_bytes(units_, unit_bytes, who);
    detail::streamed_array a;
    a.host = data;
    a.unit_bytes = unit_bytes;
    a.memory = m;
    a.output = k == job_array_kind::output;
    a.scratch = k == job_array_kind::scratch;
    streamed_.push_back(a);
    return job_array<T>(k, streamed_.size() - 1, per_unit);
  }

  void check(const streamed_job_options& o) const {
    if (o.slots_per_device == 0) throw logic_error("streamed_job: slots_per_device must be at least 1, got 0");
    if (o.granularity == 0) throw logic_error("streamed_job: granularity must be at least 1, got 0");
    if (streamed_.empty()) {
      throw logic_error("streamed_job: the job has no input, output or scratch array (resident arrays alone "
                        "give a chunk no size)");
    }
  }

  std::size_t units_;
  std::vector<detail::streamed_array> streamed_;
  std::vector<detail::resident_array> resident_;
};

}  // namespace spillway
