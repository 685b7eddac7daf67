// CUDA runtime return codes as commx errors, for the GPU parts of commx-bench.
// Layer: tools/bench (CUDA builds only).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "commx/error.h"

namespace commx::bench {

inline void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw Error(ErrorCode::kCuda, std::string("commx-bench: ") + what + ": " + cudaGetErrorString(e));
}

}  // namespace commx::bench
