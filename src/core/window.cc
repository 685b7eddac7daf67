// Window (commx/window.h): argument checks and signal bookkeeping over the backend's WindowImpl.
// Layer: core.
#include "commx/window.h"

#include <algorithm>

#include "commx/comm.h"
#include "commx/error.h"
#include "core/comm_impl.h"

namespace commx {

// Signals asked for so far, per source: shared by a Window and its pending waits.
struct SignalCounts {
  std::mutex mu;
  std::vector<uint64_t> awaited;
};

namespace {

// The Work of a wait_signal: complete once src sent `target` signals. Polling (is_completed,
// status) never blocks and sees a dead source, an abort and the deadline too. A wait that timed
// out gives its signal back when no later wait on that source was issued, so a retry waits for
// the same signal.
class SignalWork : public WorkState {
 public:
  SignalWork(std::shared_ptr<WindowImpl> impl, std::shared_ptr<SignalCounts> counts, int src,
             uint64_t target, Timeout timeout, std::string where)
      : impl_(std::move(impl)), counts_(std::move(counts)), src_(src), target_(target),
        deadline_(std::chrono::steady_clock::now() + timeout), timeout_(timeout),
        where_(std::move(where)) {}

  bool is_completed() override {
    std::lock_guard<std::mutex> g(mu_);
    poll();
    return status_ != WorkStatus::kInProgress;
  }
  WorkStatus status() override {
    std::lock_guard<std::mutex> g(mu_);
    poll();
    return status_;
  }
  std::exception_ptr error() override {
    std::lock_guard<std::mutex> g(mu_);
    poll();
    return error_;
  }
  void wait_blocking() override {
    {
      std::lock_guard<std::mutex> g(mu_);
      poll();
      if (error_) std::rethrow_exception(error_);
      if (status_ == WorkStatus::kCompleted) return;
    }
    auto left = std::chrono::duration_cast<Timeout>(deadline_ - std::chrono::steady_clock::now());
    try {
      impl_->wait_signals(src_, target_, std::max(left, Timeout(0)), where_);
      std::lock_guard<std::mutex> g(mu_);
      if (status_ == WorkStatus::kInProgress) status_ = WorkStatus::kCompleted;
    } catch (const Error& e) {
      std::lock_guard<std::mutex> g(mu_);
      fail(std::current_exception(), e.code() == ErrorCode::kTimeout);
    }
    std::lock_guard<std::mutex> g(mu_);
    if (error_) std::rethrow_exception(error_);
  }

 private:
  // Caller holds mu_.
  void poll() {
    if (status_ != WorkStatus::kInProgress) return;
    if (impl_->signals_from(src_) >= target_) {
      status_ = WorkStatus::kCompleted;
    } else if (std::exception_ptr e = impl_->wait_error(src_, where_)) {
      fail(e, false);
    } else if (std::chrono::steady_clock::now() >= deadline_) {
      fail(std::make_exception_ptr(Error(
               ErrorCode::kTimeout, where_ + "timed out after " + std::to_string(timeout_.count()) +
                                        " ms waiting for a window signal from rank(s) " +
                                        std::to_string(src_))),
           true);
    }
  }
  void fail(std::exception_ptr e, bool timed_out) {
    if (status_ != WorkStatus::kInProgress) return;
    error_ = e;
    status_ = timed_out ? WorkStatus::kTimedOut : WorkStatus::kError;
    if (timed_out) {
      std::lock_guard<std::mutex> g(counts_->mu);
      if (counts_->awaited[src_] == target_) --counts_->awaited[src_];
    }
  }

  std::shared_ptr<WindowImpl> impl_;
  std::shared_ptr<SignalCounts> counts_;
  int src_;
  uint64_t target_;
  std::chrono::steady_clock::time_point deadline_;
  Timeout timeout_;
  std::string where_;
  std::mutex mu_;
  WorkStatus status_ = WorkStatus::kInProgress;
  std::exception_ptr error_;
};

}  // namespace

Window::Window(std::shared_ptr<Comm> comm, std::shared_ptr<WindowImpl> impl, int64_t count,
               DataType dtype)
    : comm_(std::move(comm)), impl_(std::move(impl)), count_(count), dtype_(dtype),
      counts_(std::make_shared<SignalCounts>()) {
  counts_->awaited.assign(comm_->size(), 0);
}

std::string Window::where(const char* op) const {
  return comm_context(comm_->name(), comm_->rank(), comm_->size()) + "window " + op + ": ";
}

void Window::check_rank(int r, const char* op, const char* role) const {
  if (comm_->is_aborted()) throw Error(ErrorCode::kAborted, where(op) + "the comm was aborted");
  if (comm_->impl().finalized.load())
    throw Error(ErrorCode::kInvalidArgument, where(op) + "the comm was finalized");
  if (r < 0 || r >= comm_->size())
    throw Error(ErrorCode::kInvalidArgument, where(op) + role + " " + std::to_string(r) +
                                                 " is out of range [0, " +
                                                 std::to_string(comm_->size()) + ")");
}

Tensor Window::local() const { return impl_->local(); }

Tensor Window::remote(int rank) const {
  check_rank(rank, "remote", "rank");
  return impl_->remote(rank);
}

Work Window::put(const Tensor& t, int dst, int64_t target_offset, bool async_op) {
  (void)async_op;  // the copy is complete on return either way
  check_rank(dst, "put", "dst");
  const std::string w = where("put");
  if (t.dtype != dtype_)
    throw Error(ErrorCode::kInvalidArgument, w + "the tensor has dtype " + dtype_name(t.dtype) +
                                                 " but the window holds " + dtype_name(dtype_));
  if (t.device.type != comm_->device().type)
    throw Error(ErrorCode::kInvalidArgument, w + "the tensor is on " + t.device.str() +
                                                 " but the comm is bound to " + comm_->device().str());
  if (t.count < 0 || (t.count > 0 && !t.data))
    throw Error(ErrorCode::kInvalidArgument, w + "the tensor has no data");
  if (target_offset < 0 || target_offset > count_ || t.count > count_ - target_offset)
    throw Error(ErrorCode::kInvalidArgument,
                w + std::to_string(t.count) + " elements at offset " + std::to_string(target_offset) +
                    " do not fit rank " + std::to_string(dst) + "'s window of " +
                    std::to_string(count_) + " elements");
  const size_t es = dtype_size(dtype_);
  try {
    impl_->put(t.data, static_cast<size_t>(t.count) * es, dst, static_cast<size_t>(target_offset) * es);
  } catch (const Error&) {
    rethrow_with_prefix(w);
  }
  return Work();
}

Work Window::signal(int dst, bool async_op) {
  (void)async_op;  // a signal is one store into dst's memory
  check_rank(dst, "signal", "dst");
  try {
    impl_->signal(dst);
  } catch (const Error&) {
    rethrow_with_prefix(where("signal"));
  }
  return Work();
}

Work Window::wait_signal(int src, bool async_op, std::optional<Timeout> timeout) {
  check_rank(src, "wait_signal", "src");
  uint64_t target;
  {
    std::lock_guard<std::mutex> g(counts_->mu);
    target = ++counts_->awaited[src];
  }
  auto work = std::make_shared<SignalWork>(impl_, counts_, src, target,
                                           timeout.value_or(comm_->timeout()), where("wait_signal"));
  if (!async_op) work->wait_blocking();
  return Work(work);
}

std::shared_ptr<WindowImpl> Backend::new_window(int64_t count, DataType dtype, const std::string& where) {
  (void)count;
  (void)dtype;
  throw Error(ErrorCode::kUnsupported, where + "backend '" + name() + "' has no one-sided windows");
}

std::shared_ptr<Window> Comm::new_window(int64_t count, DataType dtype) {
  const std::string w = comm_context(name(), rank(), size()) + "new_window: ";
  if (is_aborted()) throw Error(ErrorCode::kAborted, w + "the comm was aborted");
  if (impl_->finalized.load()) throw Error(ErrorCode::kInvalidArgument, w + "the comm was finalized");
  if (count < 0) throw Error(ErrorCode::kInvalidArgument, w + "negative count " + std::to_string(count));
  auto impl = impl_->backend->new_window(count, dtype, w);
  return std::make_shared<Window>(shared_from_this(), std::move(impl), count, dtype);
}

}  // namespace commx
