// The all_reduce (and reduce) algorithms of the cuda backend as one table: each row says whether
// it can run an op of a given shape in the registered buffer, how to enqueue it, and which row
// takes over when it cannot. The selector (choose_allreduce, tuning.h) names the preferred row; a
// new algorithm is its kernel plus one row here. Layer: backends (cuda).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "commx/backend.h"
#include "cuda/kernel_params.h"
#include "cuda/tuning.h"

namespace commx::cuda {

// What an algorithm needs to know of one op.
struct AllReduceShape {
  const void* in;
  void* out;
  int64_t n;          // elements
  size_t elem;        // bytes per element
  int world;
  int out_rank;       // -1: every rank receives (all_reduce); else reduce's root
  uint64_t half;      // bytes of one buffer half
};

struct AllReduceAlgorithm {
  AllReduceAlgo id;
  // Whether the op fits this algorithm (its buffer need, and LL/LL128 need every rank to receive).
  bool (*fits)(const AllReduceShape& a);
  // Enqueues the op on `s` (kernel errors are checked by the caller).
  void (*enqueue)(const PeerSet& ps, const AllReduceShape& a, const OpDesc& op, const Tuning& t,
                  cudaStream_t s);
  AllReduceAlgo fallback;  // taken when `fits` is false (the last row always fits)
};

// The row of `id` (kNccl has none: the backend delegates such ops).
const AllReduceAlgorithm& allreduce_algorithm(AllReduceAlgo id);
// The preferred row for `preferred`, following fallbacks until one fits.
const AllReduceAlgorithm& fitting_allreduce(AllReduceAlgo preferred, const AllReduceShape& a);

}  // namespace commx::cuda
