// spillway/core.hpp — the core host API: errors, streams, events, buffers, devices, budgets, timing.
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/device_buffer.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/event_timer.hpp>
#include <spillway/core/host_memory.hpp>
#include <spillway/core/host_registration.hpp>
#include <spillway/core/launch.hpp>
#include <spillway/core/memory_budget.hpp>
#include <spillway/core/memory_pool.hpp>
#include <spillway/core/pinned_buffer.hpp>
#include <spillway/core/stream.hpp>
