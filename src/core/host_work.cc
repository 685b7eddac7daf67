// HostWork and OrderedExecutor (see host_work.h).
// Layer: core.
#include "core/host_work.h"


namespace commx {

bool HostWork::is_completed() {
  std::lock_guard<std::mutex> g(mu_);
  return status_ == WorkStatus::kCompleted || status_ == WorkStatus::kTimedOut ||
         status_ == WorkStatus::kError;
}

WorkStatus HostWork::status() {
  std::lock_guard<std::mutex> g(mu_);
  return status_;
}

void HostWork::wait_blocking() {
  std::unique_lock<std::mutex> g(mu_);
  // Every op enforces its own deadline, so this wait ends when the op does.
  cv_.wait(g, [&] {
    return status_ == WorkStatus::kCompleted || status_ == WorkStatus::kTimedOut ||
           status_ == WorkStatus::kError;
  });
  if (error_) std::rethrow_exception(error_);
}

std::exception_ptr HostWork::error() {
  std::lock_guard<std::mutex> g(mu_);
  return error_;
}

void HostWork::set_started() {
  std::lock_guard<std::mutex> g(mu_);
  if (status_ == WorkStatus::kNotStarted) status_ = WorkStatus::kInProgress;
}

void HostWork::set_completed() {
  {
    std::lock_guard<std::mutex> g(mu_);
    status_ = WorkStatus::kCompleted;
  }
  cv_.notify_all();
}

void HostWork::set_failed(std::exception_ptr e) {
  const WorkStatus s = failed_status(e);
  {
    std::lock_guard<std::mutex> g(mu_);
    status_ = s;
    error_ = e;
  }
  cv_.notify_all();
}

namespace {
class CompletedWork : public WorkState {
 public:
  bool is_completed() override { return true; }
  WorkStatus status() override { return WorkStatus::kCompleted; }
  void wait_blocking() override {}
  std::exception_ptr error() override { return nullptr; }
};
}  // namespace

Work completed_work() {
  static const std::shared_ptr<WorkState> done = std::make_shared<CompletedWork>();
  return Work(done);
}

OrderedExecutor::~OrderedExecutor() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

Work OrderedExecutor::submit(std::function<void()> fn, bool async_op) {
  if (!async_op) {
    drain();
    fn();  // an exception propagates to the caller; there is no Work to keep it
    return completed_work();
  }
  auto work = std::make_shared<HostWork>();
  {
    std::lock_guard<std::mutex> g(mu_);
    outstanding_.fetch_add(1, std::memory_order_relaxed);
    queue_.push_back(Task{std::move(fn), work});
    if (!worker_.joinable()) worker_ = std::thread([this] { worker_loop(); });
  }
  cv_.notify_one();
  return Work(work);
}

void OrderedExecutor::drain() {
  if (outstanding_.load(std::memory_order_acquire) == 0) return;
  std::unique_lock<std::mutex> g(mu_);
  idle_cv_.wait(g, [&] { return queue_.empty() && !running_task_; });
}

void OrderedExecutor::fail_pending(std::exception_ptr e) {
  std::deque<Task> dropped;
  {
    std::lock_guard<std::mutex> g(mu_);
    dropped.swap(queue_);
    outstanding_.fetch_sub(static_cast<int>(dropped.size()), std::memory_order_release);
  }
  for (auto& t : dropped) t.work->set_failed(e);
  idle_cv_.notify_all();
}

void OrderedExecutor::worker_loop() {
  std::unique_lock<std::mutex> g(mu_);
  while (true) {
    cv_.wait(g, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) {
      if (stop_) return;
      continue;
    }
    Task t = std::move(queue_.front());
    queue_.pop_front();
    running_task_ = true;
    g.unlock();
    t.work->set_started();
    try {
      t.fn();
      t.work->set_completed();
    } catch (...) {
      t.work->set_failed(std::current_exception());
    }
    g.lock();
    running_task_ = false;
    outstanding_.fetch_sub(1, std::memory_order_release);
    if (queue_.empty()) idle_cv_.notify_all();
  }
}

}  // namespace commx
