// The reduce_scatter algorithms of the cuda backend as one table (commx/algorithm.h), as
// allreduce_algorithms.h is for all_reduce: "ll", the barrier-free LL kernel for small messages
// that fit the buffer; "chunked", the push-then-reduce kernel in rounds of one region of the
// registered buffer per source, all in one launch (always fits); "nccl", the op handed to NCCL (the kernels lack
// the reduction). The hierarchical path's local step runs the same rows. Layer: backends (cuda).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <string>

#include "commx/algorithm.h"
#include "cuda/kernel_params.h"
#include "cuda/kernels.h"
#include "cuda/tuning.h"

namespace commx::cuda {

// What an algorithm needs to know of one reduce_scatter.
struct ReduceScatterShape {
  PtrList ins;  // ins.p[q]: the n elements this rank contributes to rank q's result
  void* out;    // this rank's n reduced elements
  int64_t n;
  ReduceSpec rs;
  int world;
};

// How a row runs: `fits` says whether the op fits the registered buffer (null: always), else the
// row's fallback takes it; `enqueue` is null for "nccl", whose ops the backend delegates.
struct ReduceScatterRun {
  bool (*fits)(const ReduceScatterShape& a, const Tuning& t) = nullptr;
  void (*enqueue)(const PeerSet& ps, const ReduceScatterShape& a, const Tuning& t,
                  cudaStream_t s) = nullptr;
};
using ReduceScatterAlgorithm = Algorithm<ReduceScatterRun>;

std::span<const ReduceScatterAlgorithm> reduce_scatter_algorithms();
// The row for a reduce_scatter with equal pieces: its hint "algorithm", else `table`'s row, else
// "ll" up to the LL threshold, "chunked" above it, "nccl" for a reduction the kernels lack.
// Throws InvalidArgument for a hint that names no cuda algorithm.
const ReduceScatterAlgorithm& select_reduce_scatter(const Tuning& t, const OpDesc& op,
                                                    const Topology& topo,
                                                    const TuningTable* table,
                                                    const std::string& where);
// Enqueues `a` with `preferred`, or its fallback where it does not fit (kernel errors are
// checked by the caller); `preferred` null: the choice by size.
void enqueue_reduce_scatter(const PeerSet& ps, const Tuning& t, const ReduceScatterShape& a,
                            cudaStream_t s, const ReduceScatterAlgorithm* preferred = nullptr);

}  // namespace commx::cuda
