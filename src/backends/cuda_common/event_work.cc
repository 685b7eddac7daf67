// Work of a GPU op, completed by a CUDA event. Layer: backends (GPU).
#include "cuda_common/event_work.h"

#include <thread>

#include "commx/error.h"
#include "cuda_common/cuda_util.h"

namespace commx::cuda {

EventWork::EventWork(cudaStream_t stream, int device, Timeout timeout, std::string context,
                     EventWorkHooks hooks)
    : device_(device),
      timeout_(timeout),
      start_(std::chrono::steady_clock::now()),
      context_(std::move(context)),
      hooks_(std::move(hooks)) {
  COMMX_CUDA_CHECK_CTX(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), context_);
  COMMX_CUDA_CHECK_CTX(cudaEventRecord(event_, stream), context_);
}

EventWork::~EventWork() {
  if (event_) cudaEventDestroy(event_);
}

void EventWork::fail(std::exception_ptr e, WorkStatus s) {
  if (!error_) {
    error_ = e;
    status_ = s;
  }
}

// Caller holds mu_. Moves kInProgress to a final state when the event fired or an error showed.
void EventWork::poll() {
  if (status_ != WorkStatus::kInProgress) return;
  std::exception_ptr e = hooks_.poll_error ? hooks_.poll_error() : nullptr;
  if (e) {
    WorkStatus s = WorkStatus::kError;
    try {
      std::rethrow_exception(e);
    } catch (const Error& err) {
      if (err.code() == ErrorCode::kTimeout) s = WorkStatus::kTimedOut;
    } catch (...) {
    }
    fail(e, s);
    return;
  }
  cudaError_t q = cudaEventQuery(event_);
  if (q == cudaSuccess) {
    // The op may have reported its error just before finishing.
    std::exception_ptr late = hooks_.poll_error ? hooks_.poll_error() : nullptr;
    if (late)
      fail(late, WorkStatus::kError);
    else
      status_ = WorkStatus::kCompleted;
  } else if (q != cudaErrorNotReady) {
    cudaGetLastError();
    try {
      throw_cuda_error(q, "cudaEventQuery", __FILE__, __LINE__, context_);
    } catch (...) {
      fail(std::current_exception(), WorkStatus::kError);
    }
  }
}

bool EventWork::is_completed() {
  std::lock_guard<std::mutex> g(mu_);
  poll();
  return status_ != WorkStatus::kInProgress;
}

WorkStatus EventWork::status() {
  std::lock_guard<std::mutex> g(mu_);
  poll();
  return status_;
}

std::exception_ptr EventWork::error() {
  std::lock_guard<std::mutex> g(mu_);
  poll();
  return error_;
}

void EventWork::wait_blocking() {
  auto deadline = start_ + timeout_;
  int spins = 0;
  for (;;) {
    {
      std::lock_guard<std::mutex> g(mu_);
      poll();
      if (status_ == WorkStatus::kCompleted) return;
      if (error_) std::rethrow_exception(error_);
      if (std::chrono::steady_clock::now() >= deadline) {
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout_).count();
        fail(std::make_exception_ptr(Error(
                 ErrorCode::kTimeout, context_ + "did not complete within " + std::to_string(ms) +
                                          " ms (the comm is aborted)")),
             WorkStatus::kTimedOut);
      }
      if (error_) {
        std::exception_ptr e = error_;
        if (hooks_.on_timeout) hooks_.on_timeout();
        std::rethrow_exception(e);
      }
    }
    // Spin briefly (GPU ops are often microseconds), then sleep so idle waits cost no core.
    if (++spins < 2000)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void EventWork::wait() {
  std::exception_ptr e = error();
  if (e) std::rethrow_exception(e);
  DeviceGuard g(device_);
  COMMX_CUDA_CHECK_CTX(cudaStreamWaitEvent(cudaStreamLegacy, event_, 0), context_);
}

}  // namespace commx::cuda
