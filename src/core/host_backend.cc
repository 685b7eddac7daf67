// HostBackend (commx/backend_util.h). Layer: core.
#include "commx/backend_util.h"

#include "commx/error.h"
#include "core/host_work.h"

namespace commx {

HostBackend::HostBackend() : exec_(std::make_unique<OrderedExecutor>()) {}
HostBackend::~HostBackend() = default;

Work HostBackend::run(const OpDesc& op, bool async_op) {
  check_open(op);
  // A synchronous op runs inline before submit returns: its description need not be copied.
  if (!async_op) return exec_->submit([this, &op] { execute(op); }, false);
  return exec_->submit([this, op] { execute(op); }, true);
}

void HostBackend::fail_queued(const BackendContext& ctx, const std::string& what) {
  exec_->fail_pending(std::make_exception_ptr(
      Error(ErrorCode::kAborted, comm_context(ctx) + what)));
}

void HostBackend::drain() { exec_->drain(); }

}  // namespace commx
