// spillway/similarity.cuh — the float similarity module (spillway::similarity): all-pairs inner
// product, cosine or Euclidean distance of float, bf16 and half rows, A·Aᵀ or A·Bᵀ, each strip a
// GEMM into the pairwise sinks (dense, top-k, threshold → COO, neighbour counts, strip callbacks),
// host rows streamed out of core or device rows in place; on Hopper a top-k that filters the scores
// inside the GEMM; a host implementation of the same functions. See docs/similarity.md.
#pragma once

#include <spillway/similarity/host_similarity.hpp>
#include <spillway/similarity/similarity.cuh>
