// What the GPU tests need inside their rank processes beyond the reference of the C++ tests
// (conformance/reference.h: data, expected results, comparison; collective_checks.h applies it
// to device buffers): a comm on the rank's GPU, device buffers, copies to and from them, graph
// capture. It leaves the reference out: the FP8 tests include this header next to
// lowp/lowp_test_util.h, whose Buf is another type. Layer: tests.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "commx/comm.h"
#include "cuda/gpu_ranks.h"

namespace commx::testing {

#define CU(EXPR)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (EXPR);                                                                  \
    RANK_CHECK(e_ == cudaSuccess, std::string(#EXPR) + ": " + cudaGetErrorString(e_));        \
  } while (0)

// A comm of `backend` for this rank on its GPU.
inline std::shared_ptr<Comm> make_comm(RankCtx& ctx, const std::string& backend,
                                       const std::string& name, Hints hints = {},
                                       Timeout timeout = std::chrono::seconds(60)) {
  CU(cudaSetDevice(ctx.device));
  CommOptions o;
  o.store = ctx.store;
  o.rank = ctx.rank;
  o.size = ctx.world;
  o.timeout = timeout;
  o.hints = std::move(hints);
  return Comm::create(backend, Device::cuda(ctx.device), name, o);
}

struct DevBuf {
  void* p = nullptr;
  explicit DevBuf(size_t bytes) { CU(cudaMalloc(&p, bytes < 256 ? 256 : bytes)); }
  ~DevBuf() { cudaFree(p); }
  char* c() const { return static_cast<char*>(p); }
};

inline void to_dev(void* dst, const void* src, size_t bytes) {
  cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
  RANK_CHECK(e == cudaSuccess, std::string("cudaMemcpy of ") + std::to_string(bytes) +
                                   " bytes to the device: " + cudaGetErrorName(e) + ": " +
                                   cudaGetErrorString(e));
}
inline void to_dev(void* dst, const std::vector<uint8_t>& b) { to_dev(dst, b.data(), b.size()); }
inline std::vector<uint8_t> from_dev(const void* src, size_t bytes) {
  std::vector<uint8_t> b(bytes);
  CU(cudaMemcpy(b.data(), src, bytes, cudaMemcpyDeviceToHost));
  return b;
}

// What `issue()` enqueues on `s`, captured (this thread's capture mode) into an executable graph.
template <typename F>
cudaGraphExec_t capture_graph(cudaStream_t s, F&& issue) {
  cudaGraph_t g;
  cudaGraphExec_t exec = nullptr;
  CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  issue();
  CU(cudaStreamEndCapture(s, &g));
  CU(cudaGraphInstantiate(&exec, g, 0));
  cudaGraphDestroy(g);
  return exec;
}

}  // namespace commx::testing
