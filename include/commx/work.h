// Work: the handle of an issued op. Backends implement WorkState; users hold Work.
// Layer: public API.
#pragma once

#include <chrono>
#include <exception>
#include <memory>

namespace commx {

enum class WorkStatus { kNotStarted, kInProgress, kCompleted, kTimedOut, kError };
const char* work_status_name(WorkStatus s);
// The status of an op that failed with `e`: kTimedOut for an Error of code kTimeout, else kError.
WorkStatus failed_status(const std::exception_ptr& e);

// What a backend implements for each op it issues.
class WorkState {
 public:
  virtual ~WorkState() = default;
  // Non-blocking: has the op finished (successfully or not)?
  virtual bool is_completed() = 0;
  virtual WorkStatus status() = 0;
  // Blocks the calling thread until the op ends; throws the op's error if it failed.
  virtual void wait_blocking() = 0;
  // GPU: makes the caller's current stream wait for the op; CPU: same as wait_blocking.
  virtual void wait() { wait_blocking(); }
  // GPU: makes `stream` (a cudaStream_t; null: the legacy default stream) wait for the op, for
  // callers whose current stream is not the default one (PyTorch side streams); CPU: wait().
  virtual void wait_stream(void* stream) {
    (void)stream;
    wait();
  }
  // The error of a failed op, else null.
  virtual std::exception_ptr error() = 0;
};

class Work {
 public:
  Work() = default;
  explicit Work(std::shared_ptr<WorkState> s) : state_(std::move(s)) {}

  void wait() const { if (state_) state_->wait(); }
  void wait_blocking() const { if (state_) state_->wait_blocking(); }
  void wait_stream(void* stream) const { if (state_) state_->wait_stream(stream); }
  bool is_completed() const { return !state_ || state_->is_completed(); }
  WorkStatus status() const { return state_ ? state_->status() : WorkStatus::kCompleted; }
  std::exception_ptr error() const { return state_ ? state_->error() : nullptr; }
  const std::shared_ptr<WorkState>& state() const { return state_; }

 private:
  std::shared_ptr<WorkState> state_;
};

}  // namespace commx
