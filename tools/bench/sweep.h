// The GPU sweep of commx-bench (the options in sweep_args.h): each backend on the same ranks,
// every op, dtype, mode and size timed with CUDA events. cuda_sweep.cc implements it in a CUDA
// build; no_cuda_sweep.cc refuses it. Layer: tools/bench.
#pragma once

#include "sweep_args.h"

namespace commx::bench {

// Whether this build can run the sweep (it was built with the CUDA toolkit).
bool sweep_available();
// Runs this process's rank of the sweep (rank, world and store from the launcher's environment,
// as spawn_local_ranks sets it); rank 0 prints the rows and writes --json and --md. Returns 0 on
// success.
int run_sweep_rank(const SweepOptions& o);

}  // namespace commx::bench
