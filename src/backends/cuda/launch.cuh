// Kernel launch helper of the cuda backend: programmatic dependent launch (PDL) lets a kernel be
// scheduled while the previous kernel on the stream is still running (each kernel starts with
// griddepcontrol.wait, see begin_op), hiding launch latency between back-to-back ops.
// COMMX_CUDA_PDL=0 turns it off. Layer: backends (cuda).
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

namespace commx::cuda {

inline bool pdl_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("COMMX_CUDA_PDL");
    return !(e && (std::strcmp(e, "0") == 0 || std::strcmp(e, "false") == 0));
  }();
  return on;
}

template <typename... KArgs, typename... Args>
void launch_kernel(void (*kernel)(KArgs...), int blocks, int threads, cudaStream_t s,
                   Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace commx::cuda
