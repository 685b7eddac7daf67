// SignalWaits: what the cpu backend's windows share on the receiving side of signals: counting
// them, bounded waits for them (a dead or closed source, a stop and the deadline end a wait),
// and stopping every wait when the comm is aborted or finalized. The shared-memory and TCP
// windows (cpu_window.h, tcp_window.h) say where the counters live and how a source is lost.
// Layer: backends/cpu.
#pragma once

#include <atomic>
#include <string>

#include "commx/backend.h"
#include "transport/shm_sync.h"
#include "transport/shm_wait.h"

namespace commx {

class SignalWaits : public WindowImpl, protected PeerWatch {
 public:
  uint64_t signals_from(int src) override;
  std::exception_ptr wait_error(int src, const std::string& where) override;
  void wait_signals(int src, uint64_t target, Timeout timeout, const std::string& where) override;
  // The comm was aborted or finalized (`why`): pending and later waits end with Aborted.
  void stop(const char* why);

 protected:
  SignalWaits(int rank, const WaitTuning& tuning) : rank_(rank), tuning_(tuning) {}
  // The word counting the signals src sent this rank.
  virtual ShmWord& signal_word_from(int src) = 0;
  // Why src can no longer signal, once alive(src) is false (e.g. " died (its process exited)").
  virtual std::string loss(int src) = 0;

  const int rank_;

 private:
  WaitTuning tuning_;
  std::atomic<bool> stopped_{false};
  std::atomic<const char*> why_{"aborted"};
  std::atomic<ShmWord*> sleeping_on_{nullptr};
};

}  // namespace commx
