// spillway/pipeline/transform_host.hpp — the host implementation of spillway::transform
// (out[i] = f(in0[i], in1[i], …)): the tests' oracle and the fallback on a machine with no GPU.
#pragma once

#include <spillway/core/error.hpp>
#include <spillway/pipeline/host_workers.hpp>
#include <spillway/pipeline/host_operand.hpp>

#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>

namespace spillway {

namespace detail {

/// Sizes and pointers of a transform's operands; throws logic_error naming the bad one.
template <class Out, class... In>
void check_transform_operands(const char* who, const host_result<Out>& out, const host_operand<In>&... in) {
  if (out.data == nullptr && out.size != 0) {
    throw logic_error(std::string(who) + ": output data is null but its size is " + std::to_string(out.size));
  }
  std::size_t k = 0;
  auto one = [&](const void* data, std::size_t size) {
    if (size != out.size) {
      throw logic_error(std::string(who) + ": input " + std::to_string(k) + " has " + std::to_string(size) +
                        " elements but the output has " + std::to_string(out.size));
    }
    if (data == nullptr && size != 0) {
      throw logic_error(std::string(who) + ": input " + std::to_string(k) + " data is null but its size is " +
                        std::to_string(size));
    }
    ++k;
  };
  (one(in.data, in.size), ...);
}

}  // namespace detail

/// out[i] = f(in[i]...) on the host, split over the pipeline's host worker threads. f must be
/// callable on the host (a plain or __host__ __device__ functor/lambda).
template <class OutR, class F, class... InR>
void transform_on_host(OutR&& out_r, F f, const InR&... in_r) {
  auto out = detail::as_output(out_r);
  detail::check_transform_operands("transform_on_host", out, detail::as_input(in_r)...);
  using Out = typename decltype(out)::value_type;
  const std::size_t n = out.size;
  constexpr std::size_t piece = std::size_t{1} << 16;
  const std::size_t pieces = (n + piece - 1) / piece;
  const std::size_t parts = pieces < detail::staging_workers().size() + 1 ? pieces : detail::staging_workers().size() + 1;
  auto work = [&, ins = std::make_tuple(detail::as_input(in_r)...)](std::size_t part) {
    const std::size_t b = n * part / parts;
    const std::size_t e = n * (part + 1) / parts;
    std::apply(
        [&](const auto&... op) {
          for (std::size_t i = b; i < e; ++i) out.data[i] = static_cast<Out>(f(op.data[i]...));
        },
        ins);
  };
  detail::staging_workers().run_parts(parts, work);
}

}  // namespace spillway
