// DeviceBackend: the base of the GPU backends (cuda, nccl), as HostBackend is of the host ones.
// It owns the op skeleton -- the abort check, then DeviceOps (device guard, buffer check, the
// stream the op runs on and its ordering, CUDA-graph capture, the op's EventWork) -- so a GPU
// backend supplies only how to enqueue an op on a stream and how its Works learn of errors.
// Layer: backends (GPU).
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <optional>
#include <string>

#include "commx/backend.h"
#include "cuda_common/device_ops.h"
#include "cuda_common/event_work.h"

namespace commx::cuda {

class DeviceBackend : public Backend {
 public:
  // Fails fast once aborted; else runs the op through DeviceOps with the hooks below.
  Work run(const OpDesc& op, bool async_op) final;
  bool accepts_device(const Device& d) const final {
    return d.is_cuda() && (device_ < 0 || d.index < 0 || d.index == device_);
  }

 protected:
  // Throws when the comm cannot take another op (an earlier device error); `where` names the op.
  virtual void check_runnable(const std::string& where) { (void)where; }
  // Enqueues `op` on `s` (DeviceOps makes its Work), or returns the Work of a delegate that ran
  // it itself.
  virtual std::optional<Work> enqueue(const OpDesc& op, cudaStream_t s, const std::string& where) = 0;
  // How the op's Work polls for errors and what it does at its timeout.
  virtual EventWorkHooks work_hooks(const OpDesc& op, const std::string& where) = 0;
  // How long wait_blocking() may wait for the op on the host.
  virtual Timeout host_bound(const OpDesc& op) const { return op.timeout; }

  BackendContext ctx_;
  int device_ = -1;  // set once init found the device usable
  DeviceOps ops_;    // streams, ordering, buffer checks and Works of every op
  std::atomic<bool> aborted_{false};
};

}  // namespace commx::cuda
