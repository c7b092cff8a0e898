// spillway/pipeline/detail/kernels.cuh — the streamed transform's kernel.
#pragma once

#include <cstddef>

namespace spillway::detail {

/// out[i] = f(in[i]...) for i < n, grid-stride with 64-bit indices.
template <class F, class Out, class... In>
__global__ void __launch_bounds__(256) transform_kernel(F f, Out* __restrict__ out, std::size_t n,
                                                          const In* __restrict__... in) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = static_cast<Out>(f(in[i]...));
  }
}

}  // namespace spillway::detail
