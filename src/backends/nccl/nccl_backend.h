// The nccl backend: a thin wrapper over the system's NCCL (loaded with dlopen), so users can
// switch backends by name and commx-bench can compare the native cuda backend with NCCL in one
// run. Layer: backends (nccl).
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "commx/backend.h"
#include "cuda_common/device_ops.h"
#include "nccl/nccl_api.h"

namespace commx::nccl {

class NcclBackend : public Backend {
 public:
  NcclBackend() = default;
  ~NcclBackend() override;
  std::string name() const override { return "nccl"; }
  void init(const BackendContext& ctx) override;
  Work run(const OpDesc& op, bool async_op) override;
  bool supports(OpType type, DataType dtype, ReduceKind kind) const override;
  void abort() override;
  void finalize() override;
  bool accepts_device(const Device& d) const override {
    return d.is_cuda() && (device_ < 0 || d.index < 0 || d.index == device_);
  }

 private:
  void enqueue(const OpDesc& op, cudaStream_t s);
  void check(ncclResult_t r, const char* what, const OpDesc& op) const;
  void abort_comm();  // idempotent ncclCommAbort

  const Api* api_ = nullptr;
  BackendContext ctx_;
  int device_ = -1;  // set once init found the device usable
  ncclComm_t comm_ = nullptr;
  float* scratch_ = nullptr;       // one float for barrier
  std::mutex abort_mu_;
  cuda::DeviceOps ops_;  // streams, ordering, buffer checks and Works of every op
  std::atomic<bool> aborted_{false};
  bool comm_gone_ = false;  // guarded by abort_mu_
};

}  // namespace commx::nccl
