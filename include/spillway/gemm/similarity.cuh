// spillway/gemm/similarity.cuh — forwarding header, kept for one version: float similarity moved
// to its own module, <spillway/similarity/similarity.cuh> (namespace spillway::similarity; issue
// 32). Include that instead; the using-directive below keeps `spillway::gemm::similarity_*`
// compiling until this header is removed. Nothing in include/ may include it (scripts/check_layers.py).
#pragma once

#include <spillway/gemm/host_similarity.hpp>
#include <spillway/similarity/similarity.cuh>

namespace spillway::gemm {

// Every public name of the similarity module, as spillway::gemm::name.
using namespace ::spillway::similarity;

}  // namespace spillway::gemm
