// DeviceBackend (see device_backend.h). Layer: backends (GPU).
#include "cuda_common/device_backend.h"

#include "commx/error.h"

namespace commx::cuda {

Work DeviceBackend::run(const OpDesc& op, bool async_op) {
  const std::string where = op_context(ctx_, op);
  if (aborted_.load()) throw Error(ErrorCode::kAborted, where + "the " + name() + " comm was aborted");
  check_runnable(where);
  auto enqueue_on = [&](cudaStream_t s) { return enqueue(op, s, where); };
  return ops_.run(op, async_op, where, enqueue_on, work_hooks(op, where), host_bound(op));
}

}  // namespace commx::cuda
