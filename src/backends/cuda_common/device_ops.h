// The skeleton every GPU op runs through, shared by the cuda and nccl backends (as HostBackend is
// for the host backends): abort check, device guard, buffer check, the stream the op runs on,
// ordering after the caller's queued work and after the comm's previous op, CUDA-graph capture,
// and the op's Work. A backend supplies only how to enqueue the op on a stream.
// Layer: backends (GPU).
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "commx/backend.h"
#include "cuda_common/event_work.h"
#include "cuda_common/pointer_check.h"

namespace commx::cuda {

class DeviceOps {
 public:
  // Enqueues the op on `s`. Returns nullopt when it enqueued the op's work on `s` (DeviceOps makes
  // the Work: completion by an event after it), or the Work of a delegate that ran the op itself.
  using Enqueue = std::function<std::optional<Work>(cudaStream_t s)>;

  // Creates the comm's stream and events on `device` (current); throws prefixed by `where`.
  void init(int device, const std::string& where);
  // From now on the Works of earlier ops call no backend hook: they fail with `final_error` if it
  // is set, else complete by their events alone.
  void close_gate(std::exception_ptr final_error) { gate_.close(std::move(final_error)); }
  // Destroys the stream and events (once the backend's kernels ended).
  void release();

  // Runs `op`: async_op=false on the stream its tensors name (else the legacy default stream),
  // async_op=true on the comm's stream after the caller's queued work. Ops of one comm run in
  // issue order across streams. Under graph capture the op is captured on the caller's stream and
  // its Work is complete. `hooks` are gated (a Work may outlive the backend); `host_bound` bounds
  // wait_blocking(). A barrier with async_op=false blocks the host until done.
  Work run(const OpDesc& op, bool async_op, const std::string& where, const Enqueue& enqueue,
           EventWorkHooks hooks, Timeout host_bound);

  // Blocks until the comm's last op ended or `deadline` passed; false at the deadline.
  bool wait_idle(std::chrono::steady_clock::time_point deadline) const;

 private:
  // End of the last op: its Work's event, else last_event_ (recorded after delegated ops).
  cudaEvent_t last_done() const { return last_work_ ? last_work_->event() : last_event_; }

  int device_ = -1;
  cudaStream_t stream_ = nullptr;      // the comm's stream (async_op=true)
  cudaEvent_t ready_event_ = nullptr;  // the caller's queued work before an async op
  cudaEvent_t last_event_ = nullptr;
  std::shared_ptr<EventWork> last_work_;
  cudaStream_t last_stream_ = nullptr;
  bool have_last_ = false;
  HookGate gate_;
  PointerCheck ptr_check_;
};

}  // namespace commx::cuda
