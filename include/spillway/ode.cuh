// spillway/ode.cuh — the ODE module: RK4 (fused elementwise steps, coupled systems with per-step
// device reductions and observers, general right-hand sides, ensembles), adaptive Dormand–Prince
// 5(4) ensembles and coupled systems, and the host implementation.
#pragma once

// The core API (streams, buffers, event_timer, budgets, errors) comes with every module.
#include <spillway/core.hpp>

#include <spillway/ode/adaptive.cuh>
#include <spillway/ode/adaptive_coupled.cuh>
#include <spillway/ode/config.hpp>
#include <spillway/ode/dopri5.hpp>
#include <spillway/ode/dopri5_coupled.hpp>
#include <spillway/ode/ensemble.cuh>
#include <spillway/ode/rk4.cuh>
#include <spillway/ode/rk4_element.hpp>
#include <spillway/ode/rk4_host.hpp>
#include <spillway/ode/systems.hpp>
