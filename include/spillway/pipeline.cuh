// spillway/pipeline.cuh — the out-of-core scheduler: chunk plans, the task pipeline (rings of
// reusable device slots over one or several GPUs), the streamed job (the caller's per-chunk device
// work on host arrays moved chunk by chunk) and the streamed elementwise map.
#pragma once

// The core API (streams, buffers, event_timer, budgets, errors) comes with every module.
#include <spillway/core.hpp>

#include <spillway/pipeline/host_operand.hpp>
#include <spillway/pipeline/job.hpp>
#include <spillway/pipeline/plan.hpp>
#include <spillway/pipeline/streamed_job.hpp>
#include <spillway/pipeline/task_pipeline.hpp>
#include <spillway/pipeline/transform.cuh>
#include <spillway/pipeline/transform_host.hpp>
