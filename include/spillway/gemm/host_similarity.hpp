// spillway/gemm/host_similarity.hpp — forwarding header, kept for one version: the host similarity
// moved to <spillway/similarity/host_similarity.hpp> (namespace spillway::similarity; issue 32).
// Include that instead; the names below keep `spillway::gemm::host_similarity_*` compiling until
// this header is removed. Nothing in include/ may include it (scripts/check_layers.py).
#pragma once

#include <spillway/similarity/host_similarity.hpp>

namespace spillway::gemm {

using ::spillway::similarity::host_similarity_dense;
using ::spillway::similarity::host_similarity_neighbour_counts;
using ::spillway::similarity::host_similarity_score;
using ::spillway::similarity::host_similarity_threshold;
using ::spillway::similarity::host_similarity_topk;
using ::spillway::similarity::is_similarity;
using ::spillway::similarity::is_similarity_input_v;
using ::spillway::similarity::similarity_metric;
using ::spillway::similarity::to_string;

}  // namespace spillway::gemm
