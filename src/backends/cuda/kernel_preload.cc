// Loads every kernel of the cuda backend at comm creation. Layer: backends (cuda).
//
// CUDA loads a kernel at its first launch (lazy loading, the default since CUDA 12.2), and that
// load, like growing the per-thread local memory a kernel needs, may wait for the whole device to
// go idle. A first launch queued behind a kernel that waits for a peer that never comes (the
// hierarchical path's NCCL step) then blocks the host inside cudaLaunchKernelEx, outside every
// timeout: seen on 2 H200s, where such a rank never returned from its op. So each device loads
// every kernel once, while nothing of ours runs, and raises the stack limit to the largest local
// memory need, as NCCL does for its kernels.
#include <iostream>
#include <mutex>
#include <set>

#include "cuda/all_to_all_v_dynamic.h"
#include "cuda/kernels.h"
#include "cuda/launch.cuh"
#include "cuda/lowp_kernels.h"
#include "cuda_common/cuda_util.h"

namespace commx::cuda {

void preload_kernels(int device, const std::string& where) {
  static std::mutex mu;
  static std::set<int> done;
  std::lock_guard<std::mutex> g(mu);
  if (done.count(device)) return;
  DeviceGuard dg(device);
  KernelPreload p;
  // Reset on every exit: a launcher that throws (a bad COMMX_* value) must not leave later
  // launches on this thread in preload mode.
  struct Scope {
    explicit Scope(KernelPreload* p) { t_kernel_preload = p; }
    ~Scope() { t_kernel_preload = nullptr; }
  } scope(&p);
  preload_allreduce_kernels();
  preload_reduce_scatter_kernels();
  preload_exchange_kernels();
  preload_barrier_kernel();
  preload_all_to_all_v_dynamic_kernels();
  for (DataType t : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16})
    for (lowp::Fp8Format f : {lowp::Fp8Format::kE4M3, lowp::Fp8Format::kE5M2}) {
      lowp::CodecConfig cfg;
      cfg.format = f;
      launch_lowp_round(PeerSet{}, LowpRound{}, t, cfg, 1, nullptr);
    }
  COMMX_CUDA_CHECK_CTX(p.error, where + "loading the kernels: ");
  // Best effort: the limit reserves memory for every resident thread, which a full GPU may not
  // have; without it a first launch may still wait to grow local memory.
  size_t stack = 0;
  if (cudaDeviceGetLimit(&stack, cudaLimitStackSize) == cudaSuccess && p.max_local_bytes > stack) {
    cudaError_t e = cudaDeviceSetLimit(cudaLimitStackSize, p.max_local_bytes);
    if (e != cudaSuccess)
      std::cerr << "commx cuda: could not raise the stack limit of cuda:" << device << " to "
                << p.max_local_bytes << " bytes (" << cudaGetErrorString(e) << ")\n";
  }
  cudaGetLastError();
  done.insert(device);
}

}  // namespace commx::cuda
