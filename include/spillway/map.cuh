// spillway/map.cuh — elementwise maps with broadcasting, generalized ufuncs, reductions, and
// their host target.
#pragma once

// The core API (streams, buffers, event_timer, budgets, errors) comes with every module.
#include <spillway/core.hpp>

#include <spillway/map/config.hpp>
#include <spillway/map/device_array.hpp>
#include <spillway/map/gufunc.cuh>
#include <spillway/map/host.hpp>
#include <spillway/map/map.cuh>
#include <spillway/map/ndview.hpp>
#include <spillway/map/reduce.cuh>
#include <spillway/map/shape.hpp>
#include <spillway/map/signature.hpp>
#include <spillway/map/streamed.cuh>
#include <spillway/map/team.hpp>
