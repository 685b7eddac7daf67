// Window (commx/window.h): argument checks and signal bookkeeping over the backend's WindowImpl.
// Layer: core.
#include "commx/window.h"

#include "commx/comm.h"
#include "commx/error.h"
#include "core/comm_impl.h"

namespace commx {
namespace {

// The Work of an async wait_signal: complete once src sent `target` signals.
class SignalWork : public WorkState {
 public:
  SignalWork(std::shared_ptr<WindowImpl> impl, int src, uint64_t target, Timeout timeout,
             std::string where)
      : impl_(std::move(impl)), src_(src), target_(target), timeout_(timeout), where_(std::move(where)) {}
  bool is_completed() override {
    std::lock_guard<std::mutex> g(mu_);
    if (status_ == WorkStatus::kInProgress && impl_->signals_from(src_) >= target_)
      status_ = WorkStatus::kCompleted;
    return status_ != WorkStatus::kInProgress;
  }
  WorkStatus status() override {
    is_completed();
    std::lock_guard<std::mutex> g(mu_);
    return status_;
  }
  void wait_blocking() override {
    std::lock_guard<std::mutex> g(mu_);
    if (error_) std::rethrow_exception(error_);
    if (status_ == WorkStatus::kCompleted) return;
    try {
      impl_->wait_signals(src_, target_, timeout_, where_);
      status_ = WorkStatus::kCompleted;
    } catch (const Error& e) {
      error_ = std::current_exception();
      status_ = e.code() == ErrorCode::kTimeout ? WorkStatus::kTimedOut : WorkStatus::kError;
      throw;
    }
  }
  std::exception_ptr error() override {
    std::lock_guard<std::mutex> g(mu_);
    return error_;
  }

 private:
  std::shared_ptr<WindowImpl> impl_;
  int src_;
  uint64_t target_;
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
      awaited_(comm_->size(), 0) {}

std::string Window::where(const char* op) const {
  return "[comm '" + comm_->name() + "' rank " + std::to_string(comm_->rank()) + "/" +
         std::to_string(comm_->size()) + "] window " + op + ": ";
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
  impl_->put(t.data, static_cast<size_t>(t.count) * es, dst, static_cast<size_t>(target_offset) * es);
  return Work();
}

Work Window::signal(int dst, bool async_op) {
  (void)async_op;  // a signal is one store into dst's memory
  check_rank(dst, "signal", "dst");
  impl_->signal(dst);
  return Work();
}

Work Window::wait_signal(int src, bool async_op, std::optional<Timeout> timeout) {
  check_rank(src, "wait_signal", "src");
  uint64_t target;
  {
    std::lock_guard<std::mutex> g(mu_);
    target = ++awaited_[src];
  }
  auto work = std::make_shared<SignalWork>(impl_, src, target, timeout.value_or(comm_->timeout()),
                                           where("wait_signal"));
  if (!async_op) work->wait_blocking();
  return Work(work);
}

std::shared_ptr<WindowImpl> Backend::new_window(int64_t count, DataType dtype, const std::string& where) {
  (void)count;
  (void)dtype;
  throw Error(ErrorCode::kUnsupported, where + "backend '" + name() + "' has no one-sided windows");
}

std::shared_ptr<Window> Comm::new_window(int64_t count, DataType dtype) {
  const std::string w = "[comm '" + name() + "' rank " + std::to_string(rank()) + "/" +
                        std::to_string(size()) + "] new_window: ";
  if (is_aborted()) throw Error(ErrorCode::kAborted, w + "the comm was aborted");
  if (count < 0) throw Error(ErrorCode::kInvalidArgument, w + "negative count " + std::to_string(count));
  auto impl = impl_->backend->new_window(count, dtype, w);
  return std::make_shared<Window>(shared_from_this(), std::move(impl), count, dtype);
}

}  // namespace commx
