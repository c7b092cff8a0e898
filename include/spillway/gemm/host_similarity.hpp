// spillway/gemm/host_similarity.hpp — forwarding header, kept for one version: the host similarity
// moved to <spillway/similarity/host_similarity.hpp> (namespace spillway::similarity; issue 32).
// Include that instead; the using-directive below keeps `spillway::gemm::host_similarity_*`
// compiling until this header is removed. Nothing in include/ may include it (scripts/check_layers.py).
#pragma once

#include <spillway/similarity/host_similarity.hpp>

namespace spillway::gemm {

// Every public name of the similarity module, as spillway::gemm::name.
using namespace ::spillway::similarity;
// gemm declares to_string overloads of its own, which a qualified gemm::to_string finds first.
using ::spillway::similarity::to_string;

}  // namespace spillway::gemm
