// spillway/gemm/similarity.cuh — forwarding header, kept for one version: float similarity moved
// to its own module, <spillway/similarity/similarity.cuh> (namespace spillway::similarity; issue
// 32). Include that instead; the names below keep `spillway::gemm::similarity_*` compiling until
// this header is removed. Nothing in include/ may include it (scripts/check_layers.py).
#pragma once

#include <spillway/gemm/host_similarity.hpp>
#include <spillway/similarity/similarity.cuh>

namespace spillway::gemm {

using ::spillway::similarity::coo_result;
using ::spillway::similarity::layout_size;
using ::spillway::similarity::pair_report;
using ::spillway::similarity::threshold_options;
using ::spillway::similarity::topk_options;
using ::spillway::similarity::topk_result;
using ::spillway::similarity::triangle_layout;

using ::spillway::similarity::similarity_dense;
using ::spillway::similarity::similarity_device_strip;
using ::spillway::similarity::similarity_device_strips;
using ::spillway::similarity::similarity_neighbour_counts;
using ::spillway::similarity::similarity_options;
using ::spillway::similarity::similarity_strip;
using ::spillway::similarity::similarity_strips;
using ::spillway::similarity::similarity_threshold;
using ::spillway::similarity::similarity_topk;

}  // namespace spillway::gemm
