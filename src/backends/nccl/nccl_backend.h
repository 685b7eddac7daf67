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
#include "cuda_common/device_backend.h"
#include "nccl/nccl_api.h"

namespace commx::nccl {

class NcclBackend : public cuda::DeviceBackend {
 public:
  NcclBackend() = default;
  ~NcclBackend() override;
  std::string name() const override { return "nccl"; }
  void init(const BackendContext& ctx) override;
  bool supports(Collective c, DataType dtype, ReduceKind kind) const override;
  void abort() override;
  void finalize() override;

 private:
  std::optional<Work> enqueue(const OpDesc& op, cudaStream_t s, const std::string& where) override;
  cuda::EventWorkHooks work_hooks(const std::string& where) override;
  void abort_comm();  // idempotent ncclCommAbort

  const Api* api_ = nullptr;
  ncclComm_t comm_ = nullptr;
  float* scratch_ = nullptr;       // one float for barrier
  std::mutex abort_mu_;
  bool comm_gone_ = false;  // guarded by abort_mu_
};

}  // namespace commx::nccl
