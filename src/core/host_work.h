// Work for ops that run on host threads, and the ordered executor that host backends share:
// ops of one comm run in issue order; a synchronous op runs inline on the caller's thread (no
// thread hand-off, which costs tens of microseconds on small machines) once earlier async ops end.
// Layer: core, used by host backends (cpu, gloo, mpi) and by device backends for host-side ops.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "commx/work.h"

namespace commx {

class HostWork : public WorkState {
 public:
  bool is_completed() override;
  WorkStatus status() override;
  void wait_blocking() override;
  std::exception_ptr error() override;

  void set_started();
  void set_completed();
  // Classifies the exception (Timeout -> kTimedOut, else kError) and wakes waiters.
  void set_failed(std::exception_ptr e);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  WorkStatus status_ = WorkStatus::kNotStarted;
  std::exception_ptr error_;
};

// The Work of an op that already ended well (synchronous ops): shared, so the hot path allocates
// nothing and takes no lock.
Work completed_work();

class OrderedExecutor {
 public:
  OrderedExecutor() = default;
  ~OrderedExecutor();
  OrderedExecutor(const OrderedExecutor&) = delete;
  OrderedExecutor& operator=(const OrderedExecutor&) = delete;

  // async_op=false: runs `fn` on this thread after queued ops finish; rethrows its exception.
  // async_op=true: queues `fn` for the worker thread; errors are kept in the returned Work.
  Work submit(std::function<void()> fn, bool async_op);
  // Fails every queued (not yet started) op with `e`.
  void fail_pending(std::exception_ptr e);
  // Blocks until every queued op has ended.
  void drain();

 private:
  struct Task {
    std::function<void()> fn;
    std::shared_ptr<HostWork> work;
  };
  void worker_loop();

  std::mutex mu_;
  std::condition_variable cv_;       // worker: new task or stop
  std::condition_variable idle_cv_;  // submitters: queue drained
  std::deque<Task> queue_;
  bool running_task_ = false;
  // Async ops queued or running; lets a synchronous op skip the lock when there are none.
  std::atomic<int> outstanding_{0};
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace commx
