// spillway/spillway.cuh — the umbrella header: everything spillway offers.
#pragma once

#include <spillway/version.hpp>
#include <spillway/core.hpp>
// Module umbrellas (one line each, added as modules land):
#include <spillway/pipeline.cuh>
#include <spillway/ode.cuh>
#include <spillway/pairwise.cuh>
#include <spillway/gram.cuh>
#include <spillway/gemm.cuh>
#include <spillway/similarity.cuh>
#include <spillway/map.cuh>
#include <spillway/io/npy.hpp>
#include <spillway/io/npz.hpp>
#include <spillway/io/raw.hpp>
