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

// Set by the build where nvcc compiled the backend's kernels (all_to_all_v_dynamic).
#ifndef COMMX_NCCL_DYNAMIC
#define COMMX_NCCL_DYNAMIC 0
#endif
#if COMMX_NCCL_DYNAMIC
#include "nccl/all_to_all_v_dynamic.h"
#endif

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
  cuda::EventWorkHooks work_hooks(const OpDesc& op, const std::string& where) override;
  void check(ncclResult_t r, const char* what, const OpDesc& op) const;
  void abort_comm();  // idempotent ncclCommAbort

  const Api* api_ = nullptr;
  ncclComm_t comm_ = nullptr;
  float* scratch_ = nullptr;       // one float for barrier
  std::mutex abort_mu_;
  bool comm_gone_ = false;  // guarded by abort_mu_
#if COMMX_NCCL_DYNAMIC
  // all_to_all_v_dynamic (all_to_all_v_dynamic.cc): its device state, allocated at its first op.
  void enqueue_all_to_all_v_dynamic(const OpDesc& op, cudaStream_t s, const std::string& where);
  DynamicA2AState dyn_;
  std::mutex dyn_mu_;     // guards dyn_'s pointers (set at the first op, freed at finalize)
  std::mutex report_mu_;  // one Work at a time takes dyn_.report_host
#endif
};

}  // namespace commx::nccl
