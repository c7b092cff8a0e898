// python/src/module.cpp — spillway._core: the nanobind module. Plain C++ (no nvcc): it converts
// Python arguments, releases the GIL around every wait, and runs long jobs on a worker thread
// while the calling thread polls for Ctrl-C (PyErr_CheckSignals) and feeds the progress bar.
// The CUDA templates live behind jobs.hpp.
#include "jobs.hpp"

#include <spillway/core/device.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/memory_budget.hpp>
#include <spillway/core/pinned_buffer.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/gemm/types.hpp>
#include <spillway/gram/bit_matrix.hpp>
#include <spillway/pipeline/job.hpp>
#include <spillway/pipeline/streamed_job.hpp>
#include <spillway/version.hpp>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <complex>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace nb = nanobind;
using namespace nb::literals;
namespace sg = spillway::gram;
namespace sgm = spillway::gemm;
namespace sp = spillway::python;

namespace {

using host_array = nb::ndarray<nb::ro, nb::ndim<2>, nb::device::cpu>;
using sp_logic = spillway::logic_error;

/// A bad argument that is a wrong dtype: raised in Python as spillway.DTypeError (a TypeError, and
/// for this version also a ValueError, which these errors were before).
struct dtype_error : spillway::logic_error {
  using spillway::logic_error::logic_error;
};

// ---- results to NumPy without a copy ------------------------------------------------------------

template <class T>
nb::ndarray<nb::numpy, T> to_numpy(sp::owned_buffer b, std::size_t ndim, const std::size_t* shape) {
  static T empty_place{};
  void* data = b.data != nullptr ? b.data : &empty_place;
  auto* keep = new std::shared_ptr<void>(std::move(b.holder));
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<std::shared_ptr<void>*>(p); });
  return nb::ndarray<nb::numpy, T>(data, ndim, shape, owner);
}

template <class T>
nb::object numpy_1d(sp::owned_buffer b) {
  const std::size_t shape[1] = {b.count};
  return nb::cast(to_numpy<T>(std::move(b), 1, shape));
}

template <class T>
nb::object numpy_2d(sp::owned_buffer b, std::size_t r, std::size_t c) {
  const std::size_t shape[2] = {r, c};
  return nb::cast(to_numpy<T>(std::move(b), 2, shape));
}

nb::dict summary_dict(const sp::job_summary& s) {
  nb::dict d;
  d["on_host"] = s.on_host;
  d["cancelled"] = s.cancelled;
  d["tasks_total"] = s.tasks_total;
  d["tasks_completed"] = s.tasks_completed;
  nb::list done;
  for (std::size_t i = 0; i < s.completed.size(); ++i)
    if (s.completed[i]) done.append(i);
  d["completed_tasks"] = done;
  d["devices"] = s.devices;
  d["tasks_per_device"] = s.tasks_per_device;
  d["bytes_per_device"] = s.bytes_per_device;
  d["elapsed_seconds"] = s.elapsed_seconds;
  d["bytes_moved"] = s.bytes_moved;
  return d;
}

// ---- a job on a worker thread, the caller polling signals and progress --------------------------

/// Runs `job` on a new thread with the GIL released. Every 50 ms, and at once when the job
/// reports progress, the calling thread takes the GIL, checks for signals and calls
/// `progress(done, total)` (first with 0 done, as the job starts). Ctrl-C (or an exception from
/// `progress`) asks the job to cancel: spillway stops handing out tasks and drains those in
/// flight. Returns true when a signal interrupted the job (the caller raises KeyboardInterrupt
/// with the partial report).
bool run_polled(const std::function<void()>& job, sp::job_progress& p, const nb::object& progress) {
  std::exception_ptr failure;
  std::mutex m;
  std::condition_variable cv;
  bool finished = false, interrupted = false, changed = false;
  std::optional<nb::python_error> callback_error;
  p.changed = [&] {
    std::lock_guard<std::mutex> l(m);
    changed = true;
    cv.notify_all();
  };
  {
    nb::gil_scoped_release unlocked;
    std::thread worker([&] {
      try {
        job();
      } catch (...) {
        failure = std::current_exception();
      }
      std::lock_guard<std::mutex> l(m);
      finished = true;
      cv.notify_all();
    });
    std::size_t shown = static_cast<std::size_t>(-1);
    for (;;) {
      {
        std::unique_lock<std::mutex> l(m);
        cv.wait_for(l, std::chrono::milliseconds(50), [&] { return finished || changed; });
        if (finished) break;
        changed = false;
      }
      nb::gil_scoped_acquire locked;
      if (!interrupted && PyErr_CheckSignals() != 0) {
        PyErr_Clear();  // re-raised below as KeyboardInterrupt carrying the partial report
        interrupted = true;
        p.cancel = true;
      }
      const std::size_t done = p.done.load();
      if (!progress.is_none() && !p.cancel.load() && done != shown) {
        shown = done;
        try {
          progress(done, p.total.load());
        } catch (nb::python_error& e) {
          // Ctrl-C that lands while the callback's Python code runs is raised there: the same
          // cancel as one seen by PyErr_CheckSignals.
          if (e.matches(PyExc_KeyboardInterrupt)) interrupted = true;
          else callback_error.emplace(std::move(e));
          p.cancel = true;
        }
      }
    }
    worker.join();
  }
  p.changed = nullptr;
  if (failure) std::rethrow_exception(failure);
  if (callback_error) throw std::move(*callback_error);
  if (!progress.is_none() && !interrupted && !p.cancel.load()) {
    try {
      progress(p.done.load(), p.total.load());
    } catch (nb::python_error& e) {
      if (!e.matches(PyExc_KeyboardInterrupt)) throw;
      interrupted = true;  // Ctrl-C as the job finished: the report is whole
    }
  }
  if (!interrupted && PyErr_CheckSignals() != 0) {
    PyErr_Clear();
    interrupted = true;
  }
  return interrupted;
}

// ---- packing ------------------------------------------------------------------------------------

std::int64_t row_stride(const host_array& a, const char* who) {
  if (a.shape(1) > 1 && a.stride(1) != 1) {
    throw sp_logic(std::string(who) + ": the rows must be contiguous (column stride 1); got a column stride of " +
                   std::to_string(a.stride(1)) + " elements: pass np.ascontiguousarray(a)");
  }
  if (a.shape(0) > 1 && a.stride(0) < static_cast<std::int64_t>(a.shape(1))) {
    throw sp_logic(std::string(who) + ": rows must not overlap or run backwards (row stride " +
                   std::to_string(a.stride(0)) + " for " + std::to_string(a.shape(1)) + " columns)");
  }
  return a.shape(0) > 1 ? a.stride(0) : static_cast<std::int64_t>(a.shape(1));
}

template <class T>
[[noreturn]] void throw_first_bad(const T* data, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                                  std::int64_t first_row) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      long long v = 0;
      if constexpr (std::is_same_v<T, bool>) {
        unsigned char b;
        std::memcpy(&b, data + r * ld + c, 1);
        v = b;
      } else {
        v = static_cast<long long>(data[r * ld + c]);
      }
      if (v != 0 && v != 1) {
        throw sp_logic("pack_bits: value " + std::to_string(v) + " at (row " + std::to_string(first_row + r) +
                       ", column " + std::to_string(c) + ") is not 0 or 1 (pass nonzero_as_one=True to treat nonzero as 1)");
      }
    }
  throw sp_logic("pack_bits: a value is not 0 or 1");
}

template <class T>
void pack_block(sg::bit_matrix& dst, const void* src, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                std::int64_t first_row, bool nonzero_as_one) {
  const T* data = static_cast<const T*>(src);
  if constexpr (sizeof(T) == 1) {
    // Bytes pack straight into the destination rows (pack_bits's own row packer): no temporary,
    // so packing a file block by block holds only the bits and the block being read.
    const auto* bytes = reinterpret_cast<const unsigned char*>(data);
    const std::int64_t ldw = dst.ld_words();
    std::int64_t first_bad = rows;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) reduction(min : first_bad)
#endif
    for (std::int64_t r = 0; r < rows; ++r) {
      if (sg::detail::pack_row(bytes + r * ld, cols, dst.row(first_row + r), ldw, nonzero_as_one) != 0 && r < first_bad)
        first_bad = r;
    }
    if (first_bad < rows) throw_first_bad(data + first_bad * ld, rows - first_bad, cols, ld, first_row + first_bad);
    return;
  }
  sg::bit_matrix part;
  try {
    sg::pack_options o;
    o.nonzero_as_one = nonzero_as_one;
    part = sg::pack_bits(data, rows, cols, ld, o);
  } catch (const spillway::logic_error&) {
    throw_first_bad(data, rows, cols, ld, first_row);  // the same message, with the array's row
  }
  if (part.size_bytes() > 0) std::memcpy(dst.row(first_row), part.data(), part.size_bytes());
}

/// Packs rows [first_row, first_row + a.rows) of `dst` from the 0/1 array `a` (any integer dtype
/// or bool; rows contiguous). Called per row block, so an mmap'd file is read once, in order.
void pack_rows(sg::bit_matrix& dst, const host_array& a, std::int64_t first_row, bool nonzero_as_one) {
  const auto rows = static_cast<std::int64_t>(a.shape(0)), cols = static_cast<std::int64_t>(a.shape(1));
  if (cols != dst.cols()) {
    throw sp_logic("pack_bits: the block has " + std::to_string(cols) + " columns, the bit matrix " +
                   std::to_string(dst.cols()));
  }
  if (first_row < 0 || first_row + rows > dst.rows()) {
    throw sp_logic("pack_bits: rows [" + std::to_string(first_row) + ", " + std::to_string(first_row + rows) +
                   ") are outside the bit matrix's " + std::to_string(dst.rows()));
  }
  if (rows == 0 || cols == 0) return;
  const std::int64_t ld = row_stride(a, "pack_bits");
  const nb::dlpack::dtype t = a.dtype();
  const void* p = a.data();
  nb::gil_scoped_release unlocked;
  if (t == nb::dtype<bool>()) return pack_block<bool>(dst, p, rows, cols, ld, first_row, nonzero_as_one);
  if (t == nb::dtype<std::uint8_t>()) return pack_block<std::uint8_t>(dst, p, rows, cols, ld, first_row, nonzero_as_one);
  if (t == nb::dtype<std::int8_t>()) return pack_block<std::int8_t>(dst, p, rows, cols, ld, first_row, nonzero_as_one);
  if (t == nb::dtype<std::int16_t>()) return pack_block<std::int16_t>(dst, p, rows, cols, ld, first_row, nonzero_as_one);
  if (t == nb::dtype<std::uint16_t>()) return pack_block<std::uint16_t>(dst, p, rows, cols, ld, first_row, nonzero_as_one);
  if (t == nb::dtype<std::int32_t>()) return pack_block<std::int32_t>(dst, p, rows, cols, ld, first_row, nonzero_as_one);
  if (t == nb::dtype<std::uint32_t>()) return pack_block<std::uint32_t>(dst, p, rows, cols, ld, first_row, nonzero_as_one);
  if (t == nb::dtype<std::int64_t>()) return pack_block<std::int64_t>(dst, p, rows, cols, ld, first_row, nonzero_as_one);
  if (t == nb::dtype<std::uint64_t>()) return pack_block<std::uint64_t>(dst, p, rows, cols, ld, first_row, nonzero_as_one);
  throw dtype_error("pack_bits: the array's dtype is not bool or an integer type (0/1 data); convert it first, "
                 "e.g. (a != 0).astype(np.uint8)");
}

sg::bit_matrix new_bit_matrix(std::int64_t rows, std::int64_t cols, bool pinned) {
  if (rows < 0 || cols < 0) {
    throw sp_logic("BitMatrix: shape (" + std::to_string(rows) + ", " + std::to_string(cols) + ") is negative");
  }
  return sg::bit_matrix(rows, cols, pinned ? spillway::host_memory::pinned : spillway::host_memory::pageable);
}

// ---- gram ---------------------------------------------------------------------------------------

sp::sink parse_sink(const std::string& s) {
  if (s == "full") return sp::sink::full;
  if (s == "triangle") return sp::sink::triangle;
  if (s == "condensed") return sp::sink::condensed;
  if (s == "topk") return sp::sink::topk;
  if (s == "threshold") return sp::sink::threshold;
  throw sp_logic("gram: sink must be 'full', 'triangle', 'condensed', 'topk' or 'threshold', got '" + s + "'");
}

sg::metric parse_metric(const std::string& s) {
  if (s == "counts") return sg::metric::counts;
  if (s == "jaccard") return sg::metric::jaccard;
  if (s == "cosine") return sg::metric::cosine;
  if (s == "hamming") return sg::metric::hamming;
  throw sp_logic("gram: metric must be 'counts', 'jaccard', 'cosine' or 'hamming', got '" + s + "'");
}

sp::gram_request make_request(const std::string& metric, const std::string& sink, int k, double threshold,
                              bool include_diagonal, bool both_halves, std::size_t budget,
                              const std::vector<int>& devices, bool host_fallback, std::int64_t max_panel_rows,
                              std::int64_t host_block_rows, float jaccard_empty, float cosine_zero) {
  sp::gram_request r;
  r.metric = parse_metric(metric);
  r.kind = parse_sink(sink);
  r.float_values = r.metric == sg::metric::jaccard || r.metric == sg::metric::cosine;
  r.k = k;
  r.threshold = threshold;
  r.include_diagonal = include_diagonal;
  r.both_halves = both_halves;
  r.budget_bytes = budget;
  r.devices = devices;
  r.host_fallback = host_fallback;
  r.max_panel_rows = max_panel_rows;
  r.host_block_rows = host_block_rows;
  r.scores.jaccard_empty = jaccard_empty;
  r.scores.cosine_zero = cosine_zero;
  return r;
}

/// A pairwise job's result as {"values", ["indices" | "rows" | "indptr", "cols"], "report",
/// "interrupted"}: dense layouts, top-k lists (n x k) or the threshold entries as COO (rows) or,
/// where the job handed over CSR (gram_result::indptr), CSR (indptr); values float32 or int32.
nb::dict result_dict(sp::sink kind, bool float_values, sp::gram_result& res, std::size_t n, std::size_t m,
                     int k, bool interrupted) {
  const auto v1 = [&](sp::owned_buffer b) {
    return float_values ? numpy_1d<float>(std::move(b)) : numpy_1d<std::int32_t>(std::move(b));
  };
  const auto v2 = [&](sp::owned_buffer b, std::size_t r, std::size_t c) {
    return float_values ? numpy_2d<float>(std::move(b), r, c) : numpy_2d<std::int32_t>(std::move(b), r, c);
  };
  nb::dict d;
  switch (kind) {
    case sp::sink::full: d["values"] = v2(std::move(res.values), n, m); break;
    case sp::sink::triangle:
    case sp::sink::condensed: d["values"] = v1(std::move(res.values)); break;
    case sp::sink::topk: {
      const auto kk = static_cast<std::size_t>(k);
      d["values"] = v2(std::move(res.values), n, kk);
      d["indices"] = numpy_2d<std::int64_t>(std::move(res.indices), n, kk);
      break;
    }
    case sp::sink::threshold:
      d["values"] = v1(std::move(res.values));
      d[res.indptr ? "indptr" : "rows"] = numpy_1d<std::int64_t>(std::move(res.rows));
      d["cols"] = numpy_1d<std::int64_t>(std::move(res.cols));
      break;
  }
  d["report"] = summary_dict(res.summary);
  d["interrupted"] = interrupted;
  return d;
}

/// The host-input Gram job (see result_dict).
nb::dict gram_host_input(const sg::bit_matrix& a, const sg::bit_matrix* b, const std::string& metric,
                         const std::string& sink, int k, double threshold, bool include_diagonal,
                         bool both_halves, std::size_t budget, const std::vector<int>& devices,
                         bool host_fallback, std::int64_t max_panel_rows, std::int64_t host_block_rows,
                         float jaccard_empty, float cosine_zero, const nb::object& progress, bool csr) {
  sp::gram_request r =
      make_request(metric, sink, k, threshold, include_diagonal, both_halves, budget, devices, host_fallback,
                   max_panel_rows, host_block_rows, jaccard_empty, cosine_zero);
  r.csr = csr && r.kind == sp::sink::threshold;
  if (b != nullptr && (r.kind == sp::sink::triangle || r.kind == sp::sink::condensed)) {
    throw sp_logic("gram: sink '" + sink + "' is a layout of the symmetric A·Aᵀ; with b given use 'full', 'topk' or 'threshold'");
  }
  const sg::bit_matrix_view av = a.view();
  const sg::bit_matrix_view bv = b ? b->view() : sg::bit_matrix_view{};
  sp::job_progress p;
  sp::gram_result res;
  const bool interrupted = run_polled([&] { res = sp::run_gram(av, b ? &bv : nullptr, r, p); }, p, progress);
  return result_dict(r.kind, r.float_values, res, static_cast<std::size_t>(a.rows()),
                     static_cast<std::size_t>(b ? b->rows() : a.rows()), r.k, interrupted);
}

// ---- similarity ----------------------------------------------------------------------------------

char similarity_metric_code(const std::string& s) {
  if (s == "ip") return 'i';
  if (s == "cosine") return 'c';
  if (s == "euclidean") return 'e';
  throw sp_logic("similarity: metric must be 'cosine', 'ip' or 'euclidean', got '" + s + "'");
}

/// A·Aᵀ (b == 0) or A·Bᵀ similarities of row-major rows at the given addresses (host memory, or
/// `device`'s memory with device >= 0; the Python side keeps the arrays alive and checks shapes).
nb::dict similarity_job(std::uintptr_t a, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                        std::uintptr_t b, std::int64_t b_rows, std::int64_t b_ld, const std::string& dtype,
                        const std::string& metric, const std::string& sink, int k, double threshold,
                        bool include_diagonal, bool both_halves, float cosine_zero, bool tf32,
                        bool check_finite, std::size_t budget, const std::vector<int>& devices,
                        bool host_fallback, std::int64_t max_panel_rows, std::int64_t host_block_rows,
                        bool register_host, int device, std::uintptr_t stream, const nb::object& progress,
                        bool csr, int binary) {
  sp::similarity_request r;
  if (dtype != "f" && dtype != "h" && dtype != "b") throw dtype_error("similarity: element type code must be f, h or b");
  r.dtype = dtype[0];
  r.metric = similarity_metric_code(metric);
  r.kind = parse_sink(sink);
  r.k = k;
  r.threshold = threshold;
  r.include_diagonal = include_diagonal;
  r.both_halves = both_halves;
  r.cosine_zero = cosine_zero;
  r.tf32 = tf32;
  r.check_finite = check_finite;
  r.budget_bytes = budget;
  r.devices = devices;
  r.host_fallback = host_fallback;
  r.max_panel_rows = max_panel_rows;
  r.host_block_rows = host_block_rows;
  r.register_host = register_host;
  r.csr = csr && r.kind == sp::sink::threshold;
  r.binary_candidates = r.kind == sp::sink::topk && b == 0 ? binary : 0;
  if (b != 0 && (r.kind == sp::sink::triangle || r.kind == sp::sink::condensed)) {
    throw sp_logic("similarity: sink '" + sink + "' is a layout of the symmetric A·Aᵀ; with b given use 'full', 'topk' or 'threshold'");
  }
  const sp::rows_matrix ma{a, rows, cols, ld};
  const sp::rows_matrix mb{b, b_rows, cols, b_ld};
  sp::job_progress p;
  sp::gram_result res;
  const bool interrupted = run_polled(
      [&] { res = sp::run_similarity(ma, b != 0 ? &mb : nullptr, r, p, device, stream); }, p, progress);
  return result_dict(r.kind, true, res, static_cast<std::size_t>(rows),
                     static_cast<std::size_t>(b != 0 ? b_rows : rows), r.k, interrupted);
}

// ---- matmul --------------------------------------------------------------------------------------

/// The GEMM type table's row of a code matmul_code / matmul_code_of returned.
const sgm::gemm_type_info& gemm_info(char code) {
  for (const sgm::gemm_type_info& t : sgm::gemm_type_table) {
    if (t.code == code) return t;
  }
  throw sp_logic(std::string("matmul: unknown element type code '") + code + "'");
}

/// The element type code of an array for spillway.matmul ('f', 'd', 'h', 'b', 'c' complex64, 'B'
/// bf16 — uint16 bit patterns, as spillway.matmul passes ml_dtypes.bfloat16, when `bf16`; the FP8
/// rows' codes for uint8 bit patterns when `fp8` names an FP8 dtype of the table; 0 when
/// unsupported).
char matmul_code(const nb::dlpack::dtype& t, bool bf16, const std::string& fp8 = "") {
  const auto fl = static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float);
  const auto in = static_cast<std::uint8_t>(nb::dlpack::dtype_code::Int);
  const auto ui = static_cast<std::uint8_t>(nb::dlpack::dtype_code::UInt);
  const auto bfl = static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bfloat);
  const auto cx = static_cast<std::uint8_t>(nb::dlpack::dtype_code::Complex);
  if (t.lanes != 1) return 0;
  if (bf16) return ((t.code == ui || t.code == bfl) && t.bits == 16) ? 'B' : 0;
  if (!fp8.empty()) {
    for (const sgm::gemm_type_info& row : sgm::gemm_type_table) {
      if (row.scaled && fp8 == row.numpy) return (t.code == ui && t.bits == 8) ? row.code : 0;
    }
    return 0;
  }
  if (t.code == fl && t.bits == 32) return 'f';
  if (t.code == fl && t.bits == 64) return 'd';
  if (t.code == fl && t.bits == 16) return 'h';
  if (t.code == in && t.bits == 8) return 'b';
  if (t.code == cx && t.bits == 64) return 'c';
  return 0;
}

/// A 2-D array as a row- or column-major matrix: one of its strides must be 1 (element units)
/// and the other at least the extent it steps over.
sp::host_matrix matrix_of(void* data, std::int64_t rows, std::int64_t cols, std::int64_t s0, std::int64_t s1,
                          const char* name) {
  sp::host_matrix m;
  m.data = data;
  m.rows = rows;
  m.cols = cols;
  if (rows == 0 || cols == 0) {  // no elements: any layout (NumPy gives such arrays zero strides)
    m.ld = std::max<std::int64_t>(cols, 1);
    return m;
  }
  if ((s1 == 1 || cols <= 1) && (rows <= 1 || s0 >= std::max<std::int64_t>(cols, 1))) {
    m.row_major = true;
    m.ld = rows > 1 ? s0 : std::max<std::int64_t>(cols, 1);
    return m;
  }
  if ((s0 == 1 || rows <= 1) && (cols <= 1 || s1 >= std::max<std::int64_t>(rows, 1))) {
    m.row_major = false;
    m.ld = cols > 1 ? s1 : std::max<std::int64_t>(rows, 1);
    return m;
  }
  throw sp_logic(std::string("matmul: ") + name + " must be C- or Fortran-ordered in one of its dimensions (strides " +
                 std::to_string(s0) + ", " + std::to_string(s1) + " elements for shape (" + std::to_string(rows) +
                 ", " + std::to_string(cols) + ")): pass np.ascontiguousarray(" + name + ")");
}

/// The FP8 arguments of spillway.matmul into a request (checked again by the GEMM itself).
void set_fp8(sp::matmul_request& r, double scale_a, double scale_b, bool fp8_fast) {
  r.scale_a = static_cast<float>(scale_a);
  r.scale_b = static_cast<float>(scale_b);
  r.fp8_fast = fp8_fast;
}

/// C = α·A·B + β·C into `c` (float32 for float32, float16, bf16 and FP8 inputs, float64, int32
/// for int8). FP8 (`fp8` = "float8_e4m3fn" or "float8_e5m2") arrives as uint8 bit patterns.
/// Returns {"report", "interrupted"}.
nb::dict matmul_host(const host_array& a, const host_array& b, nb::ndarray<nb::ndim<2>, nb::device::cpu>& c,
                     double alpha, double beta, bool tf32, std::size_t budget,
                     const std::vector<int>& devices, bool host_fallback, unsigned register_mask,
                     const nb::object& progress, bool bf16, const std::string& fp8, double scale_a,
                     double scale_b, bool fp8_fast) {
  sp::matmul_request r;
  r.dtype = matmul_code(a.dtype(), bf16, fp8);
  set_fp8(r, scale_a, scale_b, fp8_fast);
  if (r.dtype == 0 || matmul_code(b.dtype(), bf16, fp8) != r.dtype) {
    throw dtype_error("matmul: a and b must both be " + sgm::gemm_numpy_types() + " (the same type)");
  }
  const std::string want = gemm_info(r.dtype).numpy_c;
  const auto want_dtype = want == "float64"   ? nb::dtype<double>()
                          : want == "int32"   ? nb::dtype<std::int32_t>()
                          : want == "complex64" ? nb::dtype<std::complex<float>>()
                                                : nb::dtype<float>();
  if (c.dtype() != want_dtype) throw dtype_error("matmul: out has the wrong dtype for these inputs (want " + want + ")");
  const auto m = static_cast<std::int64_t>(a.shape(0)), k = static_cast<std::int64_t>(a.shape(1)),
             n = static_cast<std::int64_t>(b.shape(1));
  if (static_cast<std::int64_t>(b.shape(0)) != k || static_cast<std::int64_t>(c.shape(0)) != m ||
      static_cast<std::int64_t>(c.shape(1)) != n) {
    throw sp_logic("matmul: shapes (" + std::to_string(m) + ", " + std::to_string(k) + ") @ (" +
                   std::to_string(b.shape(0)) + ", " + std::to_string(n) + ") into (" + std::to_string(c.shape(0)) +
                   ", " + std::to_string(c.shape(1)) + ") do not match");
  }
  const sp::host_matrix ha = matrix_of(const_cast<void*>(a.data()), m, k, a.stride(0), a.stride(1), "a");
  const sp::host_matrix hb = matrix_of(const_cast<void*>(b.data()), k, n, b.stride(0), b.stride(1), "b");
  const sp::host_matrix hc = matrix_of(c.data(), m, n, c.stride(0), c.stride(1), "out");
  r.tf32 = tf32;
  r.alpha = alpha;
  r.beta = beta;
  r.budget_bytes = budget;
  r.devices = devices;
  r.host_fallback = host_fallback;
  r.register_mask = register_mask;
  sp::job_progress p;
  sp::job_summary s;
  const bool interrupted = run_polled([&] { s = sp::run_matmul(ha, hb, hc, r, p); }, p, progress);
  nb::dict d;
  d["report"] = summary_dict(s);
  d["interrupted"] = interrupted;
  return d;
}

/// The element type code of a NumPy dtype name for spillway.matmul of device arrays (the GEMM's
/// type table; 0: unsupported).
char matmul_code_of(const std::string& dtype) {
  for (const sgm::gemm_type_info& t : sgm::gemm_type_table) {
    if (dtype == t.numpy) return t.code;
  }
  return 0;
}

/// C = α·A·B + β·C of device arrays of one device (pointers, shapes, element strides), enqueued on
/// `stream`; returns without waiting (the caller's arrays order later work on that stream).
void matmul_device(std::uintptr_t a, std::uintptr_t b, std::uintptr_t c, std::int64_t m, std::int64_t k,
                   std::int64_t n, const std::vector<std::int64_t>& strides, const std::string& dtype,
                   const std::string& out_dtype, double alpha, double beta, bool tf32, int device,
                   std::uintptr_t stream, double scale_a, double scale_b, bool fp8_fast) {
  sp::matmul_request r;
  r.dtype = matmul_code_of(dtype);
  set_fp8(r, scale_a, scale_b, fp8_fast);
  if (r.dtype == 0) {
    throw dtype_error("matmul: device arrays must be " + sgm::gemm_numpy_types() + ", got " + dtype);
  }
  const std::string want = gemm_info(r.dtype).numpy_c;
  if (out_dtype != want) {
    throw dtype_error("matmul: out has dtype " + out_dtype + "; " + dtype + " inputs give " + want);
  }
  if (strides.size() != 6) throw sp_logic("matmul: six strides expected, got " + std::to_string(strides.size()));
  const sp::host_matrix ha = matrix_of(reinterpret_cast<void*>(a), m, k, strides[0], strides[1], "a");
  const sp::host_matrix hb = matrix_of(reinterpret_cast<void*>(b), k, n, strides[2], strides[3], "b");
  const sp::host_matrix hc = matrix_of(reinterpret_cast<void*>(c), m, n, strides[4], strides[5], "out");
  r.tf32 = tf32;
  r.alpha = alpha;
  r.beta = beta;
  nb::gil_scoped_release unlocked;
  sp::run_matmul_device(ha, hb, hc, r, device, stream);
}

sp::device_matrix device_matrix_of(std::uintptr_t ptr, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                                   const std::string& dtype) {
  sp::device_matrix m;
  m.ptr = ptr;
  m.rows = rows;
  m.cols = cols;
  m.ld = ld;
  if (dtype == "uint8") m.dtype = 'u';
  else if (dtype == "int8") m.dtype = 'i';
  else if (dtype == "bool") m.dtype = 'b';
  else throw dtype_error("gram: device input must be bool, uint8 or int8 0/1 data, got dtype " + dtype);
  return m;
}

// ---- spillway.stream: a Python callable per chunk ------------------------------------------------

using any_host_array = nb::ndarray<nb::ro, nb::device::cpu>;
using any_host_output = nb::ndarray<nb::device::cpu>;

/// Runs a streamed_job over host arrays whose chunked axis is their outermost in memory (the first
/// axis of a C-contiguous array, the last of an F-contiguous one: either way a unit's bytes are
/// contiguous and unit u starts u * nbytes / units bytes in; the Python side checks shapes and
/// contiguity). Each chunk's slices are copied to a device slot, the `residents` (contiguous host
/// arrays every chunk gets whole) to each slot once, then `fn(index, begin, count, device, stream,
/// pointers)` runs under the GIL on the device's worker thread (one per device) with the device
/// pointers (inputs, outputs, then residents) and enqueues its own GPU work on `stream`; the
/// outputs' slices are copied back after it. Returns {"report", "interrupted"}.
nb::dict stream_job(std::size_t units, const std::vector<any_host_array>& inputs, const std::vector<any_host_output>& outputs,
                    const std::vector<any_host_array>& residents, const nb::object& fn, std::size_t budget,
                    const std::vector<int>& devices, std::size_t slots, std::size_t max_chunk_bytes,
                    const nb::object& progress) {
  spillway::streamed_job job(units);
  std::vector<spillway::job_array<const std::byte>> ins;
  std::vector<spillway::job_array<std::byte>> outs;
  std::vector<spillway::job_array<const std::byte>> res;
  for (const auto& a : inputs) ins.push_back(job.input(static_cast<const std::byte*>(a.data()), a.nbytes() / units));
  for (auto& a : outputs) outs.push_back(job.output(static_cast<std::byte*>(a.data()), a.nbytes() / units));
  for (const auto& a : residents) res.push_back(job.resident(static_cast<const std::byte*>(a.data()), a.nbytes()));
  spillway::streamed_job_options o;
  o.devices = devices;
  if (budget > 0) o.budget = spillway::memory_budget(budget);
  if (slots > 0) o.slots_per_device = slots;
  if (max_chunk_bytes > 0) o.max_chunk_bytes = max_chunk_bytes;
  sp::job_progress p;
  o.progress = [&p](const spillway::progress_info& i) {
    p.update(i.tasks_done, i.tasks_total);
    return !p.cancel.load();
  };
  spillway::job_report rep;
  const bool interrupted = run_polled(
      [&] {
        rep = job.run(o, [&](const spillway::job_chunk& c) {
          nb::gil_scoped_acquire locked;
          nb::list ptrs;
          for (const auto& a : ins) ptrs.append(reinterpret_cast<std::uintptr_t>(c.data(a)));
          for (const auto& a : outs) ptrs.append(reinterpret_cast<std::uintptr_t>(c.data(a)));
          for (const auto& a : res) ptrs.append(reinterpret_cast<std::uintptr_t>(c.data(a)));
          fn(c.index(), c.begin(), c.count(), c.device(), reinterpret_cast<std::uintptr_t>(c.stream().value()), ptrs);
        });
      },
      p, progress);
  sp::job_summary sum;
  sum.cancelled = rep.cancelled;
  sum.tasks_total = rep.tasks_total;
  sum.tasks_completed = rep.tasks_completed;
  sum.completed = rep.completed;
  sum.devices = rep.devices;
  sum.tasks_per_device = rep.tasks_per_device;
  sum.bytes_per_device = rep.bytes_per_device;
  sum.elapsed_seconds = rep.elapsed_seconds;
  sum.bytes_moved = rep.bytes_moved;
  nb::dict d;
  d["report"] = summary_dict(sum);
  d["interrupted"] = interrupted;
  return d;
}

// ---- spillway.timer: a pair of timing events on a stream ------------------------------------------

/// A CUDA stream handle as CuPy, PyTorch, Numba and the CUDA stream protocol give it: 0 and 1
/// name the legacy default stream (stream_view refuses the null handle: the runtime's explicit
/// name instead), 2 the per-thread default stream.
cudaStream_t stream_of(std::uintptr_t h) {
  if (h == 0 || h == 1) return cudaStreamLegacy;
  if (h == 2) return cudaStreamPerThread;
  return reinterpret_cast<cudaStream_t>(h);
}

/// The device a stream belongs to (the current device for the legacy and per-thread defaults).
int stream_device(std::uintptr_t h) {
  if (h <= 2) return spillway::current_device();
  int d = -1;
  SPILLWAY_CUDA_TRY(cudaStreamGetDevice(stream_of(h), &d));
  return d;
}

/// Two timing events of one device (spillway.timer's and spillway.time's engine). The events
/// are recorded where the stream has got to, so their difference is what the GPU took for the
/// work enqueued between them, whatever the host did meanwhile (event_timer.hpp's rule; the
/// Python side records many pairs without waiting between them, which event_timer's stop()
/// would).
class timing_events {
 public:
  explicit timing_events(int device) : device_(device) {
    spillway::device_guard g(device);
    start_ = std::make_unique<spillway::event>(spillway::event::timing::enabled);
    stop_ = std::make_unique<spillway::event>(spillway::event::timing::enabled);
  }
  void record_start(std::uintptr_t s) {
    spillway::device_guard g(device_);
    start_->record(spillway::stream_view(stream_of(s)));
    started_ = true;
    stopped_ = false;
  }
  void record_stop(std::uintptr_t s) {
    if (!started_) throw sp_logic("timer: stop() before start()");
    spillway::device_guard g(device_);
    stop_->record(spillway::stream_view(stream_of(s)));
    stopped_ = true;
  }
  /// True once the GPU has passed the stop event (never blocks).
  bool ready() const {
    if (!stopped_) return false;
    spillway::device_guard g(device_);
    return stop_->is_complete();
  }
  /// Waits (GIL released) for the stop event, then the milliseconds between the two events.
  double elapsed_ms() const {
    if (!started_ || !stopped_) throw sp_logic("timer: elapsed time read before start() and stop() were recorded");
    float ms = 0.0f;
    {
      nb::gil_scoped_release unlocked;
      spillway::device_guard g(device_);
      stop_->synchronize();
      SPILLWAY_CUDA_TRY(cudaEventElapsedTime(&ms, start_->value(), stop_->value()));
    }
    return static_cast<double>(ms);
  }
  int device() const { return device_; }

 private:
  int device_;
  std::unique_ptr<spillway::event> start_, stop_;
  bool started_ = false, stopped_ = false;
};

// ---- exceptions ---------------------------------------------------------------------------------

void set_error(PyObject* type, const std::exception& e) { PyErr_SetString(type, e.what()); }

/// One of the exception classes spillway/_errors.py defines (DTypeError, BudgetError): looked up
/// when an error is raised, so the classes are Python's (docstrings, spillway's module name).
PyObject* spillway_error(const char* name) {
  static nb::object* errors = nullptr;  // kept for the process: the module outlives every call
  if (errors == nullptr) errors = new nb::object(nb::module_::import_("spillway._errors"));
  return errors->attr(name).ptr();
}

/// The C++ side says "the budget is too small for this job" with a logic_error (pairwise, chunk,
/// GEMM and task plans); the Python rule is MemoryError for budgets. Recognised by the words those
/// planners use (include/spillway/{pairwise,pipeline,gemm}/*plan*.hpp, task_pipeline.hpp).
bool is_budget_error(const std::exception& e) {
  const std::string m = e.what();
  return m.find("budget") != std::string::npos &&
         (m.find("too small") != std::string::npos || m.find("below the minimum") != std::string::npos);
}

/// The Python type of a spillway::logic_error: DTypeError (TypeError + ValueError) for dtypes,
/// BudgetError (MemoryError + ValueError) for budgets too small, ValueError for other values.
PyObject* logic_error_type(const spillway::logic_error& e) {
  if (dynamic_cast<const dtype_error*>(&e) != nullptr) return spillway_error("DTypeError");
  if (is_budget_error(e)) return spillway_error("BudgetError");
  return PyExc_ValueError;
}

// The C++ exception a pipeline_error nests decides the Python type (the message stays the
// pipeline's, which names the failed task and the original error).
PyObject* python_type_of(const std::exception_ptr& p) {
  try {
    std::rethrow_exception(p);
  } catch (const spillway::logic_error& e) {
    return logic_error_type(e);
  } catch (const spillway::out_of_memory&) {
    return PyExc_MemoryError;
  } catch (const std::bad_alloc&) {
    return PyExc_MemoryError;
  } catch (const spillway::pipeline_error& e) {
    return e.cause() ? python_type_of(e.cause()) : PyExc_RuntimeError;
  } catch (...) {
    return PyExc_RuntimeError;
  }
}

/// The step control of an adaptive request from spillway.ode's options dict (adaptive_options'
/// names; `pi_beta` is its `beta`; the Python side fills every key).
void step_control(const nb::dict& opt, sp::dopri5_request& r) {
  const auto num = [&](const char* k) { return nb::cast<double>(opt[k]); };
  r.rtol = num("rtol");
  r.atol = num("atol");
  r.h0 = num("h0");
  r.h_min = num("h_min");
  r.h_max = num("h_max");
  r.fixed_dt = num("fixed_dt");
  r.safety = num("safety");
  r.fac_min = num("fac_min");
  r.fac_max = num("fac_max");
  r.pi_beta = num("pi_beta");
  r.estimate = nb::cast<int>(opt["estimate"]);
  r.max_steps = nb::cast<std::uint64_t>(opt["max_steps"]);
}

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "spillway's C++ core (nanobind); use the spillway package, not this module";
  m.attr("__version__") = SPILLWAY_VERSION_STRING;

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const spillway::pipeline_error& e) {
      // A Python callable (spillway.stream's fn) that raised: its own exception, unchanged.
      if (e.cause()) {
        try {
          std::rethrow_exception(e.cause());
        } catch (nb::python_error& pe) {
          pe.restore();
          return;
        } catch (...) {
        }
      }
      set_error(python_type_of(std::current_exception()), e);
    } catch (const spillway::logic_error& e) {
      set_error(logic_error_type(e), e);
    } catch (const spillway::out_of_memory& e) {
      set_error(PyExc_MemoryError, e);
    } catch (const spillway::cuda_error& e) {
      set_error(PyExc_RuntimeError, e);
    }
  });

  m.def("device_count", &sp::device_count, "Usable CUDA devices (0 on a machine with no GPU or driver).");
  m.def("no_gpu_reason", &sp::no_gpu_reason, "Why no GPU is usable, in words ('' when one is).");
  // spillway.show_config's facts. What the build chose comes from python/CMakeLists.txt (compile
  // definitions); what the machine has is asked now, and a machine with no driver or GPU answers
  // zeros and an empty list rather than raising.
  m.def("_build_config", [] {
    nb::dict d;
    d["version"] = SPILLWAY_VERSION_STRING;
#ifdef SPILLWAY_PY_CUDA_ARCHITECTURES
    d["cuda_architectures"] = SPILLWAY_PY_CUDA_ARCHITECTURES;
#else
    d["cuda_architectures"] = "";
#endif
#ifdef SPILLWAY_PY_CUDA_COMPILER_VERSION
    d["cuda_toolkit_built_with"] = SPILLWAY_PY_CUDA_COMPILER_VERSION;
#else
    d["cuda_toolkit_built_with"] = "";
#endif
    int runtime = 0, driver = 0;
    if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
    if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
    d["cuda_runtime"] = runtime;
    d["cuda_driver"] = driver;
    nb::list devices;
    const int n = sp::device_count();
    for (int i = 0; i < n; ++i) {
      const auto p = spillway::get_device_properties(i);
      nb::dict g;
      g["ordinal"] = i;
      g["name"] = p.name;
      g["compute_capability"] = nb::make_tuple(p.cc_major, p.cc_minor);
      g["total_memory"] = p.total_memory;
      devices.append(g);
    }
    d["devices"] = devices;
    d["no_gpu_reason"] = sp::no_gpu_reason();
    return d;
  });

  nb::class_<sg::bit_matrix>(m, "BitMatrix",
                             "A 0/1 matrix packed 32 columns per word (spillway's layout: rows of ld_words "
                             "uint32 words, ld_words a multiple of 32, padding zero, 128-byte aligned).")
      .def(nb::new_(&new_bit_matrix), "rows"_a, "cols"_a, "pinned"_a = false,
           "An all-zero bit matrix; pinned=True page-locks it (GPU copies then run at full rate).")
      .def_prop_ro("rows", &sg::bit_matrix::rows)
      .def_prop_ro("cols", &sg::bit_matrix::cols)
      .def_prop_ro("ld_words", &sg::bit_matrix::ld_words)
      .def_prop_ro("shape", [](const sg::bit_matrix& b) { return nb::make_tuple(b.rows(), b.cols()); })
      .def_prop_ro("nbytes", &sg::bit_matrix::size_bytes)
      .def_prop_ro("pinned", [](const sg::bit_matrix& b) { return b.memory() == spillway::host_memory::pinned; })
      .def_prop_ro(
          "words",
          [](sg::bit_matrix& b) {
            const std::size_t shape[2] = {static_cast<std::size_t>(b.rows()), static_cast<std::size_t>(b.ld_words())};
            static std::uint32_t empty_place = 0;
            return nb::ndarray<nb::numpy, std::uint32_t, nb::ndim<2>>(b.data() ? b.data() : &empty_place, 2, shape,
                                                                       nb::handle());
          },
          nb::rv_policy::reference_internal, "The packed words as a (rows, ld_words) uint32 view (no copy).")
      .def(
          "unpack",
          [](const sg::bit_matrix& b) {
            std::vector<std::uint8_t> v;
            {
              nb::gil_scoped_release unlocked;
              v = sg::unpack_bits(b.view());
            }
            sp::owned_buffer o;
            auto h = std::make_shared<std::vector<std::uint8_t>>(std::move(v));
            o.data = h->data();
            o.count = h->size();
            o.holder = h;
            return numpy_2d<std::uint8_t>(std::move(o), static_cast<std::size_t>(b.rows()),
                                          static_cast<std::size_t>(b.cols()));
          },
          "The 0/1 matrix as a (rows, cols) uint8 array.")
      .def(
          "row_popcounts",
          [](const sg::bit_matrix& b) {
            sp::owned_buffer o;
            auto h = std::make_shared<std::vector<std::int32_t>>(sg::row_popcounts(b.view()));
            o.data = h->data();
            o.count = h->size();
            o.holder = h;
            return numpy_1d<std::int32_t>(std::move(o));
          },
          "The number of ones in each row (int32).")
      .def("__repr__", [](const sg::bit_matrix& b) {
        return "BitMatrix(rows=" + std::to_string(b.rows()) + ", cols=" + std::to_string(b.cols()) +
               (b.memory() == spillway::host_memory::pinned ? ", pinned=True)" : ")");
      });

  m.def(
      "_host_bytes",
      [](std::size_t nbytes, bool pinned) {
        sp::owned_buffer o;
        const std::size_t n = std::max<std::size_t>(nbytes, 1);
        if (pinned) {
          auto h = std::make_shared<spillway::pinned_buffer<std::uint8_t>>(n);
          o.data = h->data();
          o.holder = h;
        } else {
          auto h = std::make_shared<std::vector<std::uint8_t>>(n);
          o.data = h->data();
          o.holder = h;
        }
        o.count = nbytes;
        return numpy_1d<std::uint8_t>(std::move(o));
      },
      "nbytes"_a, "pinned"_a, "A uint8 array of nbytes, page-locked (cudaHostAlloc) or ordinary memory.");
  m.def("_matmul", &matmul_host, "a"_a, "b"_a, "c"_a, "alpha"_a, "beta"_a, "tf32"_a, "budget"_a, "devices"_a,
        "host_fallback"_a, "register_mask"_a, "progress"_a.none(), "bf16"_a = false, "fp8"_a = "",
        "scale_a"_a = 1.0, "scale_b"_a = 1.0, "fp8_fast"_a = false);
  m.def("_matmul_device", &matmul_device, "a"_a, "b"_a, "c"_a, "m"_a, "k"_a, "n"_a, "strides"_a, "dtype"_a,
        "out_dtype"_a, "alpha"_a, "beta"_a, "tf32"_a, "device"_a, "stream"_a, "scale_a"_a = 1.0,
        "scale_b"_a = 1.0, "fp8_fast"_a = false);
  m.def("_similarity", &similarity_job, "a"_a, "rows"_a, "cols"_a, "ld"_a, "b"_a, "b_rows"_a, "b_ld"_a,
        "dtype"_a, "metric"_a, "sink"_a, "k"_a, "threshold"_a, "include_diagonal"_a, "both_halves"_a,
        "cosine_zero"_a, "tf32"_a, "check_finite"_a, "budget"_a, "devices"_a, "host_fallback"_a,
        "max_panel_rows"_a, "host_block_rows"_a, "register_host"_a, "device"_a, "stream"_a,
        "progress"_a.none(), "csr"_a = false, "binary"_a = 0);
  m.def(
      "_bench_cpp_similarity_topk",
      [](std::uintptr_t a, std::int64_t rows, std::int64_t cols, std::int64_t ld, const std::string& dtype, int k,
         std::size_t budget, int device, int reps) {
        if (dtype != "f" && dtype != "h" && dtype != "b") throw dtype_error("element type code must be f, h or b");
        nb::gil_scoped_release unlocked;
        return sp::bench_cpp_similarity_topk(sp::rows_matrix{a, rows, cols, ld}, dtype[0], k, budget, device, reps);
      },
      "a"_a, "rows"_a, "cols"_a, "ld"_a, "dtype"_a, "k"_a, "budget"_a, "device"_a, "reps"_a);
  m.def("_parse_byte_size", [](const std::string& t) { return spillway::parse_byte_size(t); });
  m.def("_pack_rows", &pack_rows, "dst"_a, "a"_a, "first_row"_a, "nonzero_as_one"_a);
  m.def(
      "_from_packed_bytes",
      [](const nb::ndarray<nb::ro, nb::ndim<2>, nb::device::cpu, std::uint8_t>& bytes, std::int64_t cols,
         const std::string& order, bool pinned) {
        if (bytes.shape(1) > 1 && bytes.stride(1) != 1) throw sp_logic("from_packed_bytes: the rows must be contiguous");
        const sg::bit_order o = order == "big" ? sg::bit_order::big
                                : order == "little"
                                    ? sg::bit_order::little
                                    : throw sp_logic("from_packed_bytes: bitorder must be 'big' or 'little', got '" + order + "'");
        const auto rows = static_cast<std::int64_t>(bytes.shape(0));
        const std::int64_t ld = rows > 1 ? bytes.stride(0) : static_cast<std::int64_t>(bytes.shape(1));
        if (static_cast<std::int64_t>(bytes.shape(1)) < (cols + 7) / 8) {
          throw sp_logic("from_packed_bytes: " + std::to_string(cols) + " columns need " + std::to_string((cols + 7) / 8) +
                         " bytes per row; the array has " + std::to_string(bytes.shape(1)));
        }
        const std::uint8_t* p = bytes.data();
        nb::gil_scoped_release unlocked;
        return sg::from_packed_bytes(p, rows, cols, o, ld,
                                     pinned ? spillway::host_memory::pinned : spillway::host_memory::pageable);
      },
      "bytes"_a, "cols"_a, "bitorder"_a, "pinned"_a);

  m.def(
      "_gram",
      [](const sg::bit_matrix& a, const sg::bit_matrix* b, const std::string& metric, const std::string& sink,
         int k, double threshold, bool include_diagonal, bool both_halves, std::size_t budget,
         const std::vector<int>& devices, bool host_fallback, std::int64_t max_panel_rows,
         std::int64_t host_block_rows, float jaccard_empty, float cosine_zero, const nb::object& progress,
         bool csr) {
        return gram_host_input(a, b, metric, sink, k, threshold, include_diagonal, both_halves, budget,
                               devices, host_fallback, max_panel_rows, host_block_rows, jaccard_empty,
                               cosine_zero, progress, csr);
      },
      "a"_a, "b"_a.none(), "metric"_a, "sink"_a, "k"_a, "threshold"_a, "include_diagonal"_a, "both_halves"_a,
      "budget"_a, "devices"_a, "host_fallback"_a, "max_panel_rows"_a, "host_block_rows"_a, "jaccard_empty"_a,
      "cosine_zero"_a, "progress"_a.none(), "csr"_a = false);

  m.def(
      "_gram_device",
      [](std::uintptr_t a, std::int64_t rows, std::int64_t cols, std::int64_t ld, std::uintptr_t b, std::int64_t b_rows,
         std::int64_t b_ld, const std::string& dtype, std::uintptr_t out, const std::string& metric,
         const std::string& sink, float jaccard_empty, float cosine_zero, int device, std::uintptr_t stream,
         bool nonzero_as_one) {
        sp::gram_request r = make_request(metric, sink, 1, 0, false, false, 0, {}, false, 0, 0, jaccard_empty, cosine_zero);
        const sp::device_matrix da = device_matrix_of(a, rows, cols, ld, dtype);
        sp::device_matrix db;
        if (b != 0) db = device_matrix_of(b, b_rows, cols, b_ld, dtype);
        nb::gil_scoped_release unlocked;
        sp::gram_device_dense(da, b != 0 ? &db : nullptr, out, r, device, stream, nonzero_as_one);
      },
      "a"_a, "rows"_a, "cols"_a, "ld"_a, "b"_a, "b_rows"_a, "b_ld"_a, "dtype"_a, "out"_a, "metric"_a, "sink"_a,
      "jaccard_empty"_a, "cosine_zero"_a, "device"_a, "stream"_a, "nonzero_as_one"_a);

  m.def(
      "_pack_device_to_host",
      [](std::uintptr_t a, std::int64_t rows, std::int64_t cols, std::int64_t ld, const std::string& dtype, int device,
         std::uintptr_t stream, bool nonzero_as_one) {
        const sp::device_matrix da = device_matrix_of(a, rows, cols, ld, dtype);
        nb::gil_scoped_release unlocked;
        return sp::pack_device_to_host(da, device, stream, nonzero_as_one);
      },
      "a"_a, "rows"_a, "cols"_a, "ld"_a, "dtype"_a, "device"_a, "stream"_a, "nonzero_as_one"_a);

  m.def("_stream_job", &stream_job, "units"_a, "inputs"_a, "outputs"_a, "residents"_a, "fn"_a, "budget"_a, "devices"_a, "slots"_a,
        "max_chunk_bytes"_a, "progress"_a.none());

  m.def(
      "_bench_cpp_topk",
      [](const sg::bit_matrix& a, int k, std::size_t budget, int device, int reps) {
        nb::gil_scoped_release unlocked;
        return sp::bench_cpp_topk(a.view(), k, budget, device, reps);
      },
      "a"_a, "k"_a, "budget"_a, "device"_a, "reps"_a);

  m.def(
      "_lorenz",
      [](std::uint64_t n, double t0, double dt, std::uint64_t steps, std::uint64_t save_every, double sigma, double beta,
         double rho_lo, double rho_hi, bool dbl, std::uintptr_t state, std::uintptr_t saved, bool on_device,
         bool on_host, int device, std::uintptr_t stream) {
        sp::lorenz_request r;
        r.n = n;
        r.t0 = t0;
        r.dt = dt;
        r.steps = steps;
        r.save_every = save_every;
        r.sigma = sigma;
        r.beta = beta;
        r.rho_lo = rho_lo;
        r.rho_hi = rho_hi;
        r.dbl = dbl;
        nb::gil_scoped_release unlocked;
        if (on_device) sp::lorenz_device(r, state, saved, device, stream);
        else sp::lorenz_host(r, reinterpret_cast<void*>(state), reinterpret_cast<void*>(saved), on_host, device);
      });
  m.def(
      "_dopri5_lorenz",
      [](std::uint64_t n, double t0, double t1, const nb::dict& opt, double sigma, double beta, double rho_lo,
         double rho_hi, bool dbl, std::uintptr_t state, std::uintptr_t save_times, std::uint64_t m, std::uintptr_t saved,
         std::uintptr_t accepted, std::uintptr_t rejected, std::uintptr_t status, bool on_device, bool on_host,
         int device, std::uintptr_t stream) {
        sp::dopri5_request r;
        r.n = n;
        r.m = m;
        r.t0 = t0;
        r.t1 = t1;
        r.sigma = sigma;
        r.beta = beta;
        r.rho_lo = rho_lo;
        r.rho_hi = rho_hi;
        r.dbl = dbl;
        step_control(opt, r);
        const void* times = reinterpret_cast<const void*>(save_times);
        nb::gil_scoped_release unlocked;
        if (on_device) sp::dopri5_lorenz_device(r, state, times, saved, accepted, rejected, status, device, stream);
        else
          sp::dopri5_lorenz_host(r, reinterpret_cast<void*>(state), times, reinterpret_cast<void*>(saved),
                                 reinterpret_cast<void*>(accepted), reinterpret_cast<void*>(rejected),
                                 reinterpret_cast<void*>(status), on_host, device);
      });
  m.def(
      "_mean_field_dopri5",
      [](std::uint64_t n, double t0, double t1, const nb::dict& opt, double scale, float dre, float dim, std::uintptr_t f,
         std::uintptr_t g, std::uintptr_t times, std::uintptr_t deltas, std::uint64_t capacity, bool on_device,
         bool on_host, int device, std::uintptr_t stream) {
        sp::mean_field_dopri5_request r;
        r.control.n = n;
        r.control.t0 = t0;
        r.control.t1 = t1;
        step_control(opt, r.control);
        r.capacity = capacity;
        r.scale = scale;
        r.delta_re = dre;
        r.delta_im = dim;
        sp::coupled_result out;
        {
          nb::gil_scoped_release unlocked;
          out = on_device ? sp::mean_field_dopri5_device(r, f, g, times, deltas, device, stream)
                          : sp::mean_field_dopri5_host(r, reinterpret_cast<void*>(f), reinterpret_cast<void*>(g),
                                                       reinterpret_cast<void*>(times), reinterpret_cast<void*>(deltas),
                                                       on_host, device);
        }
        return nb::make_tuple(out.accepted, out.rejected, out.status, out.t, out.h);
      });
  m.def("_mean_field", [](std::uint64_t n, double t0, double dt, std::uint64_t steps, double scale, float dre, float dim,
                          std::uintptr_t f, std::uintptr_t g, std::uintptr_t traj, bool on_device, bool on_host, int device,
                          std::uintptr_t stream) {
    sp::mean_field_request r;
    r.n = n;
    r.t0 = t0;
    r.dt = dt;
    r.steps = steps;
    r.scale = scale;
    r.delta_re = dre;
    r.delta_im = dim;
    nb::gil_scoped_release unlocked;
    if (on_device) sp::mean_field_device(r, f, g, traj, device, stream);
    else sp::mean_field_host(r, reinterpret_cast<void*>(f), reinterpret_cast<void*>(g), reinterpret_cast<void*>(traj),
                             on_host, device);
  });

  m.def("_stream_wait", [](std::uintptr_t producer, std::uintptr_t consumer, int device) {
    sp::stream_wait(producer, consumer, device);
  });
  m.def("_stream_synchronize", [](std::uintptr_t s, int device) {
    nb::gil_scoped_release unlocked;
    sp::stream_synchronize(s, device);
  });
  // Device bytes copied into host memory on `stream` of `device` and waited for, GIL released
  // (spillway.stream: a device-resident operand's copy for the job's other GPUs).
  m.def(
      "_copy_to_host",
      [](std::uintptr_t dst, std::uintptr_t src, std::size_t bytes, int device, std::uintptr_t stream) {
        nb::gil_scoped_release unlocked;
        spillway::device_guard g(device);
        const cudaStream_t s = stream_of(stream);
        SPILLWAY_CUDA_TRY(cudaMemcpyAsync(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes,
                                          cudaMemcpyDeviceToHost, s));
        SPILLWAY_CUDA_TRY(cudaStreamSynchronize(s));
      },
      "dst"_a, "src"_a, "bytes"_a, "device"_a, "stream"_a);
  m.def("_pointer_device", &sp::pointer_device);
  m.def("_stream_device", &stream_device, "stream"_a, "The device of a stream handle (0, 1, 2: the current device).");

  nb::class_<timing_events>(m, "_TimingEvents", "Two timing CUDA events of one device (spillway.timer's engine).")
      .def(nb::init<int>(), "device"_a)
      .def("record_start", &timing_events::record_start, "stream"_a)
      .def("record_stop", &timing_events::record_stop, "stream"_a)
      .def("ready", &timing_events::ready)
      .def("elapsed_ms", &timing_events::elapsed_ms)
      .def_prop_ro("device", &timing_events::device);

  // What a DLPack producer (or capsule) describes: pointer, shape, strides (elements), dtype
  // (kind code, bits), device type and id. Used for device arrays, whose memory nanobind does
  // not touch; the caller keeps the producer alive.
  m.def("_dlpack_info", [](const nb::ndarray<nb::ro>& a) {
    nb::list shape, strides;
    for (std::size_t i = 0; i < a.ndim(); ++i) {
      shape.append(a.shape(i));
      strides.append(a.stride(i));
    }
    return nb::make_tuple(reinterpret_cast<std::uintptr_t>(a.data()), shape, strides,
                          static_cast<int>(a.dtype().code), static_cast<int>(a.dtype().bits), a.device_type(),
                          a.device_id());
  });
}
