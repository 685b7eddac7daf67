// SignalWaits (signal_waits.h). Layer: backends/cpu.
#include "backends/cpu/signal_waits.h"

#include "commx/error.h"

namespace commx {

uint64_t SignalWaits::signals_from(int src) { return load_acquire(signal_word_from(src).value); }

std::exception_ptr SignalWaits::wait_error(int src, const std::string& where) {
  if (stopped_.load())
    return std::make_exception_ptr(Error(ErrorCode::kAborted, where + "the comm was " + why_.load() +
                                                                  " while waiting for a signal from rank " +
                                                                  std::to_string(src)));
  if (src == rank_ || alive(src)) return nullptr;
  return std::make_exception_ptr(Error(ErrorCode::kPeerFailure, where + "rank " + std::to_string(src) +
                                                                    loss(src) +
                                                                    " before sending the signal waited for"));
}

void SignalWaits::wait_signals(int src, uint64_t target, Timeout timeout, const std::string& where) {
  ShmWord& w = signal_word_from(src);
  if (load_acquire(w.value) >= target) return;  // landed before the source was lost or a stop
  if (std::exception_ptr e = wait_error(src, where)) std::rethrow_exception(e);
  // stopped_ is part of the predicate: stop() wakes the sleeper, which then leaves the wait.
  WaitScope ws{Clock::now() + timeout, nullptr, this, &tuning_, &sleeping_on_};
  const int peers[1] = {src};
  try {
    shm_wait([&] { return stopped_.load() || load_acquire(w.value) >= target; }, w, peers,
             "a window signal", ws);
  } catch (...) {
    if (load_acquire(w.value) >= target) return;
    // The wait only saw "not alive": say how the source was lost.
    if (std::exception_ptr e = wait_error(src, where)) std::rethrow_exception(e);
    rethrow_with_prefix(where);
  }
  if (load_acquire(w.value) < target)
    if (std::exception_ptr e = wait_error(src, where)) std::rethrow_exception(e);
}

void SignalWaits::stop(const char* why) {
  why_.store(why);
  stopped_.store(true);
  if (ShmWord* w = sleeping_on_.load()) futex_wake_all(*w);
}

}  // namespace commx
