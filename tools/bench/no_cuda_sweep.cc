// The GPU sweep in a build without CUDA: refused clearly. Layer: tools/bench.
#include "commx/error.h"
#include "sweep.h"

namespace commx::bench {

bool sweep_available() { return false; }

int run_sweep_rank(const SweepOptions&) {
  throw Error(ErrorCode::kUnsupported,
              "the GPU sweep (--ranks, --ops, --modes, ...) needs a commx-bench built with CUDA");
}

}  // namespace commx::bench
