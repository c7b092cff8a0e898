// spillway/dist.hpp — spillway across MPI ranks (the optional component spillway::mpi:
// find_package(spillway COMPONENTS mpi), target spillway::mpi). Not included by spillway.cuh:
// this header needs <mpi.h>.
//
//   communicator, environment, mpi_error, rank_error   dist/communicator.hpp
//   agree / settle: a step that fails on one rank fails on all   dist/agree.hpp
//   run_tasks / run_host_tasks: a task list split across ranks    dist/run_tasks.hpp
//   write_npy_at_all: one .npy from every rank through MPI-IO     dist/npy_file.hpp
//   which rows each rank owns, each share's predicted seconds     dist/gram_split.hpp (MPI-free)
//   merging an owner's per-row top-k lists                       dist/topk_lists.hpp (MPI-free)
//   the Gram product across ranks, host implementation            dist/host_gram.hpp
//   the same, one GPU per rank (compiled by nvcc only)            dist/gram.cuh
//   the fused float top-k (similarity/), one GPU per rank (nvcc)  dist/similarity.cuh
//
// The split planner the jobs use is MPI-free: spillway/pairwise/split_plan.hpp. See docs/distributed.md.
#pragma once

#include <spillway/dist/agree.hpp>
#include <spillway/dist/communicator.hpp>
#include <spillway/dist/gram_split.hpp>
#include <spillway/dist/host_gram.hpp>
#include <spillway/dist/npy_file.hpp>
#include <spillway/dist/run_tasks.hpp>
#include <spillway/dist/topk_lists.hpp>
#include <spillway/pairwise/split_plan.hpp>

#if defined(__CUDACC__)
#include <spillway/dist/gram.cuh>
#include <spillway/dist/similarity.cuh>
#endif
