// See recorded_work.h. Layer: core (observability).
#include "core/recorded_work.h"

namespace commx {
namespace {

std::string message_of(const std::exception_ptr& ep) {
  try {
    std::rethrow_exception(ep);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

class RecordedWork : public WorkState {
 public:
  RecordedWork(std::shared_ptr<WorkState> inner, RecorderRef ref, uint64_t id)
      : inner_(std::move(inner)), ref_(std::move(ref)), id_(id) {}

  bool is_completed() override { return inner_->is_completed(); }

  WorkStatus status() override {
    WorkStatus s = inner_->status();
    if (s == WorkStatus::kError || s == WorkStatus::kTimedOut) note_failure();
    return s;
  }

  void wait_blocking() override { observe([&] { inner_->wait_blocking(); }); }
  void wait() override { observe([&] { inner_->wait(); }); }
  void wait_stream(void* stream) override { observe([&] { inner_->wait_stream(stream); }); }

  std::exception_ptr error() override {
    auto ep = inner_->error();
    if (ep) note_failure();
    return ep;
  }

 private:
  template <typename F>
  void observe(F&& f) {
    try {
      f();
    } catch (...) {
      note_failure();
      throw;
    }
  }

  // Once per op, whichever call saw the failure first.
  void note_failure() {
    std::call_once(dumped_, [&] {
      auto ep = inner_->error();
      ref_.fail_and_dump(id_, ep ? message_of(ep) : std::string("the op failed"));
    });
  }

  std::shared_ptr<WorkState> inner_;
  RecorderRef ref_;
  uint64_t id_;
  std::once_flag dumped_;
};

}  // namespace

void RecorderRef::fail_and_dump(uint64_t id, const std::string& error) const {
  recorder->record_failed(id, error);
  write_trace_file(comm, rank, recorder->dump_json(comm, rank, size, backend, world_ranks));
}

Work recorded_work(Work inner, RecorderRef ref, uint64_t id) {
  if (!inner.state()) return inner;
  return Work(std::make_shared<RecordedWork>(inner.state(), std::move(ref), id));
}

}  // namespace commx
