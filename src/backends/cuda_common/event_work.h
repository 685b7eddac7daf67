// Work of a GPU op: completion is a CUDA event recorded after the op on its stream.
// Layer: backends (GPU), shared by the cuda and nccl backends.
// is_completed() polls the event; wait() makes the legacy default stream wait for it and
// wait_stream(s) the stream s (no host block);
// wait_blocking() polls until the event fires or the op's deadline passes, then calls the
// backend's on_timeout (ncclCommAbort, or the cuda backend's abort) and throws kTimeout.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "commx/options.h"
#include "commx/work.h"

namespace commx::cuda {

struct EventWorkHooks {
  // Polled while waiting and once the event fired: an error the device or library reported for
  // this op (e.g. a device-side timeout), else null.
  std::function<std::exception_ptr()> poll_error;
  // Called once when wait_blocking() gives up at the deadline.
  std::function<void()> on_timeout;
};

// Lets a backend's Works outlive the backend (Python may drop a Work after its comm): hooks
// wrapped by guard() run only while the gate is open; close() (at finalize) waits for a hook in
// progress. From then on a Work completes by its event alone, or fails with `final_error` (what
// the backend last reported, e.g. a device-side timeout), so no failure turns into a success.
class HookGate {
 public:
  EventWorkHooks guard(EventWorkHooks h) const;
  void close(std::exception_ptr final_error = nullptr);

 private:
  struct State {
    std::mutex mu;
    bool open = true;
    std::exception_ptr final_error;
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

class EventWork : public WorkState {
 public:
  // Records a new event on `stream` (the device must be current). `context` prefixes errors.
  EventWork(cudaStream_t stream, int device, Timeout timeout, std::string context,
            EventWorkHooks hooks);
  ~EventWork() override;

  bool is_completed() override;
  WorkStatus status() override;
  void wait_blocking() override;
  void wait() override { wait_stream(nullptr); }
  void wait_stream(void* stream) override;
  std::exception_ptr error() override;
  // The completion event (recorded at construction); valid while this Work lives.
  cudaEvent_t event() const { return event_; }

 private:
  void fail(std::exception_ptr e, WorkStatus s);
  void poll();

  std::mutex mu_;
  cudaEvent_t event_ = nullptr;
  int device_;
  Timeout timeout_;
  std::chrono::steady_clock::time_point start_;
  std::string context_;
  EventWorkHooks hooks_;
  WorkStatus status_ = WorkStatus::kInProgress;
  std::exception_ptr error_;
};

// A Work that is already complete (ops captured into a CUDA graph, empty ops).
class DoneWork : public WorkState {
 public:
  bool is_completed() override { return true; }
  WorkStatus status() override { return WorkStatus::kCompleted; }
  void wait_blocking() override {}
  void wait() override {}
  void wait_stream(void*) override {}
  std::exception_ptr error() override { return nullptr; }
};

}  // namespace commx::cuda
