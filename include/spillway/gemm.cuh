// spillway/gemm.cuh — the GEMM module: C = epi(α·op(A)·op(B) + β·C) for float (exact FP32 or
// TF32 tensor cores), double (FP64 tensor cores), half / bf16 (float accumulation), int8 (int32
// accumulation) and complex<float>, any layouts, strided batches, epilogues; the kernel family
// chosen by type and architecture (wgmma, mma_sync, SIMT) or forced; a host implementation of the
// same function; gemm_out_of_core for host matrices larger than the device (blocks streamed through
// the pipeline's scheduler, one or several GPUs); the Hopper GEMM's fragment-sink extension point
// (fragment_sink.cuh). See docs/gemm.md.
#pragma once

#include <spillway/gemm/epilogue.hpp>
#include <spillway/gemm/fragment_sink.cuh>
#include <spillway/gemm/gemm.cuh>
#include <spillway/gemm/host_gemm.hpp>
#include <spillway/gemm/matrix_view.hpp>
#include <spillway/gemm/ooc_plan.hpp>
#include <spillway/gemm/options.hpp>
#include <spillway/gemm/out_of_core.cuh>
// Kept for one version: float similarity is its own module now (<spillway/similarity.cuh>,
// spillway::similarity); these forwarding headers keep spillway::gemm::similarity_* compiling.
#include <spillway/gemm/host_similarity.hpp>
#include <spillway/gemm/similarity.cuh>
