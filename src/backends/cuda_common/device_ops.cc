// DeviceOps (see device_ops.h). Layer: backends (GPU).
#include "cuda_common/device_ops.h"

#include <thread>

#include "cuda_common/cuda_util.h"

namespace commx::cuda {

void DeviceOps::init(int device, const std::string& where) {
  device_ = device;
  ptr_check_.bind(device);
  COMMX_CUDA_CHECK_CTX(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), where);
  COMMX_CUDA_CHECK_CTX(cudaEventCreateWithFlags(&last_event_, cudaEventDisableTiming), where);
  COMMX_CUDA_CHECK_CTX(cudaEventCreateWithFlags(&ready_event_, cudaEventDisableTiming), where);
}

void DeviceOps::release() {
  last_work_.reset();
  have_last_ = false;
  if (last_event_) cudaEventDestroy(last_event_);
  last_event_ = nullptr;
  if (ready_event_) cudaEventDestroy(ready_event_);
  ready_event_ = nullptr;
  if (stream_) cudaStreamDestroy(stream_);
  stream_ = nullptr;
}

Work DeviceOps::run(const OpDesc& op, bool async_op, const std::string& where,
                    const Enqueue& enqueue, EventWorkHooks hooks, Timeout host_bound) {
  DeviceGuard g(device_);
  ptr_check_.check(op, where);
  const cudaStream_t caller = caller_stream(op_stream(op));
  const bool capturing = is_capturing(caller);
  cudaStream_t s = caller;
  if (async_op && !capturing) {
    // The comm's stream starts after the caller's queued work and after the previous op.
    if (have_last_ && last_stream_ != stream_)
      COMMX_CUDA_CHECK_CTX(cudaStreamWaitEvent(stream_, last_done(), 0), where);
    COMMX_CUDA_CHECK_CTX(cudaEventRecord(ready_event_, caller), where);
    COMMX_CUDA_CHECK_CTX(cudaStreamWaitEvent(stream_, ready_event_, 0), where);
    s = stream_;
  } else if (!capturing && have_last_ && last_stream_ != s) {
    // Ops of one comm run in issue order even when issued on different streams.
    COMMX_CUDA_CHECK_CTX(cudaStreamWaitEvent(s, last_done(), 0), where);
  }
  std::optional<Work> delegated = enqueue(s);
  Work w;
  if (delegated) {
    w = std::move(*delegated);
    if (!capturing) {
      last_work_.reset();
      COMMX_CUDA_CHECK_CTX(cudaEventRecord(last_event_, s), where);
    }
  } else if (capturing) {
    w = Work(std::make_shared<DoneWork>());
  } else {
    auto ew = std::make_shared<EventWork>(s, device_, host_bound, where, gate_.guard(std::move(hooks)));
    last_work_ = ew;  // later ops on other streams wait for this op's own completion event
    w = Work(std::move(ew));
  }
  if (!capturing) {
    last_stream_ = s;
    have_last_ = true;
  }
  if (op.collective == Collective::kBarrier && !async_op && !capturing) w.wait_blocking();
  return w;
}

bool DeviceOps::wait_idle(std::chrono::steady_clock::time_point deadline) const {
  if (!have_last_) return true;
  RelaxedCaptureMode relaxed;  // a comm may be dropped while another stream captures
  while (cudaEventQuery(last_done()) == cudaErrorNotReady) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  cudaGetLastError();
  return true;
}

}  // namespace commx::cuda
