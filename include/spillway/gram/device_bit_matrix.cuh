// spillway/gram/device_bit_matrix.cuh — a packed bit matrix in device memory, uploads, and
// packing of 0/1 data that already lives on the GPU.
#pragma once

#include <spillway/core/device_buffer.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/gram/bit_matrix.hpp>
#include <spillway/gram/detail/sink_kernels.cuh>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace spillway::gram {

/// An owned packed bit matrix in device memory (spillway's pool), same layout as bit_matrix.
/// Its words are uninitialised until uploaded or packed into.
class device_bit_matrix {
 public:
  device_bit_matrix() = default;
  device_bit_matrix(std::int64_t rows, std::int64_t cols, stream_view s)
      : rows_(rows), cols_(cols), ld_(padded_words(cols)),
        words_(static_cast<std::size_t>(rows < 0 ? 0 : rows) * static_cast<std::size_t>(padded_words(cols)), s) {
    if (rows < 0) throw logic_error("device_bit_matrix: rows must be >= 0, got " + std::to_string(rows));
  }

  [[nodiscard]] std::int64_t rows() const noexcept { return rows_; }
  [[nodiscard]] std::int64_t cols() const noexcept { return cols_; }
  [[nodiscard]] std::int64_t ld_words() const noexcept { return ld_; }
  [[nodiscard]] std::uint32_t* data() noexcept { return words_.data(); }
  [[nodiscard]] const std::uint32_t* data() const noexcept { return words_.data(); }
  [[nodiscard]] std::size_t size_bytes() const noexcept { return words_.size_bytes(); }
  /// A view whose `words` point to device memory.
  [[nodiscard]] bit_matrix_view view() const noexcept { return {words_.data(), rows_, cols_, ld_}; }
  [[nodiscard]] device_buffer<std::uint32_t>& buffer() noexcept { return words_; }

 private:
  std::int64_t rows_ = 0, cols_ = 0, ld_ = 32;
  device_buffer<std::uint32_t> words_;
};

/// Enqueues a copy of a host bit matrix to a new device_bit_matrix on `s` (asynchronous from pinned
/// memory; from pageable memory the runtime stages it).
inline device_bit_matrix upload_async(const bit_matrix_view& h, stream_view s) {
  detail::check_view(h, "upload_async", "h");
  device_bit_matrix d(h.rows, h.cols, s);
  if (h.ld_words == d.ld_words()) {
    if (h.size_bytes() > 0)
      SPILLWAY_CUDA_TRY(cudaMemcpyAsync(d.data(), h.words, h.size_bytes(), cudaMemcpyHostToDevice, s.value()));
  } else if (h.rows > 0) {
    SPILLWAY_CUDA_TRY(cudaMemcpy2DAsync(d.data(), static_cast<std::size_t>(d.ld_words()) * 4u, h.words,
                                        static_cast<std::size_t>(h.ld_words) * 4u,
                                        static_cast<std::size_t>(d.ld_words()) * 4u, static_cast<std::size_t>(h.rows),
                                        cudaMemcpyHostToDevice, s.value()));
  }
  return d;
}

/// Enqueues a copy of a device bit matrix into a new host bit_matrix; synchronizes `s`.
inline bit_matrix download(const device_bit_matrix& d, stream_view s, host_memory mem = host_memory::pageable) {
  bit_matrix h(d.rows(), d.cols(), mem);
  if (h.size_bytes() > 0)
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(h.data(), d.data(), h.size_bytes(), cudaMemcpyDeviceToHost, s.value()));
  s.synchronize();
  return h;
}

namespace detail {
template <class T>
void check_pack_args(const T* src, std::int64_t rows, std::int64_t cols, std::int64_t ld, const char* who) {
  static_assert(std::is_same_v<T, std::uint8_t> || std::is_same_v<T, std::int8_t> || std::is_same_v<T, bool>,
                "pack_bits: the input must be uint8, int8 or bool");
  if (rows < 0) throw logic_error(std::string(who) + ": rows must be >= 0, got " + std::to_string(rows));
  if (cols < 0) throw logic_error(std::string(who) + ": cols must be >= 0, got " + std::to_string(cols));
  if (ld < cols) throw logic_error(std::string(who) + ": ld (" + std::to_string(ld) + ") is smaller than cols (" + std::to_string(cols) + ")");
  if (rows > 0 && cols > 0 && src == nullptr) throw logic_error(std::string(who) + ": src is null");
}

template <class T>
void launch_pack(const T* src, std::int64_t rows, std::int64_t cols, std::int64_t ld, device_bit_matrix& out,
                 bool nonzero_as_one, unsigned long long* first_bad, stream_view s) {
  const std::int64_t words = rows * out.ld_words();
  if (words == 0) return;
  pack_bits_kernel<T><<<grid_blocks(words, 8), 256, 0, s.value()>>>(
      src, rows, cols, ld, out.data(), out.ld_words(), nonzero_as_one, first_bad);
  SPILLWAY_CUDA_TRY(cudaGetLastError());
}
}  // namespace detail

/// Packs row-major 0/1 data already in device memory (`ld` elements between rows) on `s`, one
/// __ballot_sync per 32 columns. Nonzero values count as 1: the asynchronous form cannot report
/// a bad value without waiting; use pack_bits_device to have them rejected.
template <class T>
device_bit_matrix pack_bits_async(const T* src, std::int64_t rows, std::int64_t cols, std::int64_t ld, stream_view s) {
  detail::check_pack_args(src, rows, cols, ld, "pack_bits_async");
  device_bit_matrix out(rows, cols, s);
  detail::launch_pack(src, rows, cols, ld, out, true, nullptr, s);
  return out;
}

/// Packs row-major 0/1 device data on `s` and waits; a value other than 0/1 throws logic_error
/// naming the first bad (row, column) and its value, unless `nonzero_as_one`.
template <class T>
device_bit_matrix pack_bits_device(const T* src, std::int64_t rows, std::int64_t cols, std::int64_t ld, stream_view s,
                                   bool nonzero_as_one = false) {
  detail::check_pack_args(src, rows, cols, ld, "pack_bits_device");
  device_bit_matrix out(rows, cols, s);
  device_buffer<unsigned long long> bad(1, s);
  SPILLWAY_CUDA_TRY(cudaMemsetAsync(bad.data(), 0xFF, sizeof(unsigned long long), s.value()));
  detail::launch_pack(src, rows, cols, ld, out, nonzero_as_one, bad.data(), s);
  unsigned long long first = 0;
  SPILLWAY_CUDA_TRY(cudaMemcpyAsync(&first, bad.data(), sizeof first, cudaMemcpyDeviceToHost, s.value()));
  s.synchronize();
  if (!nonzero_as_one && first != ~0ULL) {
    const auto r = static_cast<std::int64_t>(first / static_cast<unsigned long long>(cols));
    const auto c = static_cast<std::int64_t>(first % static_cast<unsigned long long>(cols));
    T v{};
    SPILLWAY_CUDA_TRY(cudaMemcpy(&v, src + r * ld + c, sizeof(T), cudaMemcpyDeviceToHost));
    int iv = 0;
    if constexpr (std::is_same_v<T, bool>) {
      unsigned char b;
      std::memcpy(&b, &v, 1);
      iv = b;
    } else {
      iv = static_cast<int>(v);
    }
    throw logic_error("pack_bits_device: value " + std::to_string(iv) + " at (row " + std::to_string(r) + ", column " +
                      std::to_string(c) + ") is not 0 or 1 (pass nonzero_as_one = true to treat nonzero as 1)");
  }
  return out;
}

/// Row popcounts of a device bit matrix into device memory `out` (rows elements), on `s`.
inline void row_popcounts_async(const bit_matrix_view& d, std::int32_t* out, stream_view s) {
  if (d.rows == 0) return;
  detail::row_popcount_kernel<<<grid_blocks(d.rows, 8), 256, 0, s.value()>>>(d.words, d.rows, d.ld_words,
                                                                             out);
  SPILLWAY_CUDA_TRY(cudaGetLastError());
}

}  // namespace spillway::gram
