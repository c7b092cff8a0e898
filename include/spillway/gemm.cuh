// spillway/gemm.cuh — the GEMM module: C = epi(α·op(A)·op(B) + β·C) for float (exact FP32 or
// TF32 tensor cores), double (FP64 tensor cores), half / bf16 (float accumulation), int8 (int32
// accumulation) and complex<float>, any layouts, strided batches, epilogues; the kernel family
// chosen by type and architecture (wgmma, mma_sync, SIMT) or forced; a host implementation of the
// same function. See docs/gemm.md.
#pragma once

#include <spillway/gemm/epilogue.hpp>
#include <spillway/gemm/gemm.cuh>
#include <spillway/gemm/host_gemm.hpp>
#include <spillway/gemm/matrix_view.hpp>
#include <spillway/gemm/options.hpp>
