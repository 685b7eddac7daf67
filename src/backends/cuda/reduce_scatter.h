// reduce_scatter as the flat and the hierarchical paths enqueue it: the barrier-free LL kernel for
// small messages that fit the buffer, else the push-then-reduce kernel in chunks of one region
// of the registered buffer per source. Layer: backends (cuda).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/kernel_params.h"
#include "cuda/kernels.h"
#include "cuda/tuning.h"

namespace commx::cuda {

// ins.p[q]: the `n` elements this rank contributes to rank q's result (ps.world ranks); `out`:
// this rank's reduced `n` elements.
void enqueue_reduce_scatter(const PeerSet& ps, const Tuning& t, const PtrList& ins, void* out,
                            int64_t n, const ReduceSpec& rs, cudaStream_t s);

}  // namespace commx::cuda
