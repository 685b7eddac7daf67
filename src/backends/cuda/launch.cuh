// Kernel launch helper of the cuda backend: programmatic dependent launch (PDL) lets a kernel be
// scheduled while the previous kernel on the stream is still running (each kernel starts with
// griddepcontrol.wait, see begin_op), hiding launch latency between back-to-back ops.
// COMMX_CUDA_PDL=0 turns it off. Layer: backends (cuda).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>

#include "commx/env.h"

namespace commx::cuda {

// Kernel preloading (kernel_preload.cc). While set on this thread, launch_kernel loads the kernel
// (cudaFuncGetAttributes) and notes its local memory instead of launching it.
struct KernelPreload {
  size_t max_local_bytes = 0;
  cudaError_t error = cudaSuccess;
};
inline thread_local KernelPreload* t_kernel_preload = nullptr;

inline bool pdl_enabled() {
  static const bool on = env_bool("COMMX_CUDA_PDL", true);
  return on;
}

// Blocks of `kernel`, at `threads` a block, that fit on the current device at once (1 when the
// runtime cannot tell): a kernel with per-block barriers needs its whole grid resident (a block
// waiting for its twin on a peer must not keep a later block of its own rank from starting).
template <typename Kernel>
int resident_blocks(Kernel kernel, int threads) {
  int dev = 0, sms = 0, per_sm = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0) != cudaSuccess)
    return 1;
  return std::max(1, per_sm * sms);
}

template <typename... KArgs, typename... Args>
void launch_kernel(void (*kernel)(KArgs...), int blocks, int threads, cudaStream_t s,
                   Args&&... args) {
  if (KernelPreload* p = t_kernel_preload) {
    cudaFuncAttributes a{};
    cudaError_t e = cudaFuncGetAttributes(&a, kernel);
    if (e != cudaSuccess)
      p->error = e;
    else
      p->max_local_bytes = std::max(p->max_local_bytes, a.localSizeBytes);
    return;
  }
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
