// Work of a GPU op, completed by a CUDA event. Layer: backends (GPU).
#include "cuda_common/event_work.h"

#include <map>
#include <thread>
#include <vector>

#include "commx/error.h"
#include "cuda_common/cuda_util.h"

namespace commx::cuda {
namespace {

// Completion events are recycled per device: creating and destroying one per op costs more host
// time than the smallest collectives take on the GPU.
struct EventPool {
  std::mutex mu;
  std::map<int, std::vector<cudaEvent_t>> free;
};

EventPool& pool() {
  static EventPool* p = new EventPool();  // never destroyed: events may outlive static teardown
  return *p;
}

cudaEvent_t acquire_event(int device, const std::string& context) {
  {
    std::lock_guard<std::mutex> g(pool().mu);
    auto& v = pool().free[device];
    if (!v.empty()) {
      cudaEvent_t e = v.back();
      v.pop_back();
      return e;
    }
  }
  cudaEvent_t e = nullptr;
  COMMX_CUDA_CHECK_CTX(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), context);
  return e;
}

void release_event(int device, cudaEvent_t e) {
  std::lock_guard<std::mutex> g(pool().mu);
  pool().free[device].push_back(e);
}

}  // namespace

EventWorkHooks HookGate::guard(EventWorkHooks h) const {
  EventWorkHooks g;
  if (h.poll_error)
    g.poll_error = [s = state_, f = std::move(h.poll_error)]() -> std::exception_ptr {
      std::lock_guard<std::mutex> lk(s->mu);
      return s->open ? f() : s->final_error;
    };
  if (h.on_timeout)
    g.on_timeout = [s = state_, f = std::move(h.on_timeout)] {
      std::lock_guard<std::mutex> lk(s->mu);
      if (s->open) f();
    };
  return g;
}

void HookGate::close(std::exception_ptr final_error) {
  std::lock_guard<std::mutex> lk(state_->mu);
  if (state_->open) state_->final_error = std::move(final_error);
  state_->open = false;
}

EventWork::EventWork(cudaStream_t stream, int device, Timeout timeout, std::string context,
                     EventWorkHooks hooks)
    : device_(device),
      timeout_(timeout),
      start_(std::chrono::steady_clock::now()),
      context_(std::move(context)),
      hooks_(std::move(hooks)) {
  event_ = acquire_event(device, context_);
  cudaError_t err = cudaEventRecord(event_, stream);
  if (err != cudaSuccess) {
    release_event(device_, event_);
    event_ = nullptr;
    throw_cuda_error(err, "cudaEventRecord", __FILE__, __LINE__, context_);
  }
}

EventWork::~EventWork() {
  // A recorded event may be re-recorded once the Work is gone: later waits use the new record.
  if (event_) release_event(device_, event_);
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
    fail(e, failed_status(e));
    return;
  }
  cudaError_t q;
  {
    RelaxedCaptureMode relaxed;  // a Work may be polled or dropped while a graph is captured
    q = cudaEventQuery(event_);
  }
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

void EventWork::wait_stream(void* stream) {
  std::exception_ptr e = error();
  if (e) std::rethrow_exception(e);
  DeviceGuard g(device_);
  COMMX_CUDA_CHECK_CTX(cudaStreamWaitEvent(caller_stream(stream), event_, 0), context_);
}

}  // namespace commx::cuda
