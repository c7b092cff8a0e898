// spillway/pairwise.cuh — the pairwise layer: what every all-pairs job shares once its scores
// exist, whether they came from bit rows (gram) or float rows (similarity/): the triangle
// layouts, the top-k and threshold sinks with their host implementations, the one planner of pair
// jobs, the out-of-core pair job that runs a Producer's strips through the scheduler, and its host
// counterpart that runs a module's host functions in row blocks (host_job.hpp). See
// docs/similarity.md and docs/gram.md ("Out of core").
#pragma once

#include <spillway/pairwise/host_job.hpp>
#include <spillway/pairwise/layout.hpp>
#include <spillway/pairwise/pair_job.cuh>
#include <spillway/pairwise/plan.hpp>
#include <spillway/pairwise/sinks.hpp>
