// GPU buffers, stream syncs and CUDA graph capture for commx-bench (see memory.h). Compiled only
// when the CUDA toolkit is found (COMMX_BENCH_HAS_CUDA); the CPU build never includes it.
// Layer: tools/bench.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "commx/error.h"
#include "core/env.h"
#include "cuda_check.h"
#include "memory.h"

namespace commx::bench {
namespace {

class CudaMemory : public Memory {
 public:
  explicit CudaMemory(int index) {
    if (index >= 0) cuda_check(cudaSetDevice(index), "cudaSetDevice");
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~CudaMemory() override {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
    cudaStreamDestroy(stream_);
  }
  void* alloc(size_t bytes) override {
    void* p = nullptr;
    cuda_check(cudaMalloc(&p, bytes + 64), "cudaMalloc");
    return p;
  }
  void release(void* p) override { cudaFree(p); }
  void to_device(void* dst, const void* src, size_t n) override {
    cuda_check(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream_), "cudaMemcpy H2D");
    sync();
  }
  void to_host(void* dst, const void* src, size_t n) override {
    cuda_check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, stream_), "cudaMemcpy D2H");
    sync();
  }
  void sync() override { cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }
  void* stream() override { return stream_; }
  std::function<void()> capture(const std::function<void()>& fn) override {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
    exec_ = nullptr;
    graph_ = nullptr;
    cuda_check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "begin capture");
    try {
      fn();
    } catch (...) {
      cudaGraph_t g = nullptr;
      cudaStreamEndCapture(stream_, &g);
      if (g) cudaGraphDestroy(g);
      throw;
    }
    cuda_check(cudaStreamEndCapture(stream_, &graph_), "end capture");
    cuda_check(cudaGraphInstantiate(&exec_, graph_, 0), "cudaGraphInstantiate");
    cudaGraphExec_t exec = exec_;
    cudaStream_t s = stream_;
    return [exec, s] { cuda_check(cudaGraphLaunch(exec, s), "cudaGraphLaunch"); };
  }

 private:
  cudaStream_t stream_ = nullptr;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace

std::unique_ptr<Memory> make_memory(const Device& d) {
  if (d.is_cpu()) return make_host_memory();
  return std::make_unique<CudaMemory>(d.index);
}

Device resolve_device(Device d) {
  if (!d.is_cuda() || d.index >= 0) return d;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
    throw Error(ErrorCode::kCuda, "--device cuda: no GPU is visible to this process");
  auto r = rank_from_env();  // validated, in the library's discovery order
  int local = r ? r->local_rank : 0;
  return Device::cuda(local % n);
}

std::vector<std::string> gpu_names() {
  std::vector<std::string> names;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return names;
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) == cudaSuccess) names.push_back(p.name);
  }
  return names;
}

std::string gpu_description(int index) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, index) != cudaSuccess) return "?";
  char b[300];
  std::snprintf(b, sizeof b, "[0x%02x] %s", p.pciBusID, p.name);
  return b;
}

}  // namespace commx::bench
