// CpuWindow: the cpu backend's one-sided window (commx/window.h) over shared memory. Each rank's
// segment holds one signal word per source rank, then its buffer; every rank maps every segment
// of the host, so a put is a copy into the target's buffer and a signal one atomic add on the
// target's word for this rank (which a waiting target sleeps on). Layer: backends/cpu.
//
// It owns everything its waits use (the peers' process watches, its abort flag, its wait tuning),
// so a wait still pending when the comm is finalized or destroyed ends cleanly (Aborted).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "commx/backend.h"
#include "transport/shm_segment.h"
#include "transport/shm_sync.h"
#include "transport/shm_wait.h"

namespace commx {

class CpuWindow : public WindowImpl, private PeerWatch {
 public:
  // Collective: creates this rank's segment, publishes it under `key` in `store`, maps every
  // peer's, and returns once every rank mapped all (so none unmaps under another). Errors start
  // with `where`.
  CpuWindow(Store& store, const std::string& key, int rank, int size, int64_t count, DataType dtype,
            Timeout timeout, const WaitTuning& tuning, const std::string& where);

  Tensor local() override { return remote(rank_); }
  Tensor remote(int rank) override;
  void put(const void* src, size_t bytes, int dst, size_t offset) override;
  void signal(int dst) override;
  uint64_t signals_from(int src) override;
  std::exception_ptr wait_error(int src, const std::string& where) override;
  void wait_signals(int src, uint64_t target, Timeout timeout, const std::string& where) override;
  // The comm was aborted (`why` "aborted") or finalized: pending and later waits end, Aborted.
  void stop(const char* why);

 private:
  bool alive(int peer) override { return peer == rank_ || !watches_[peer].exited(); }
  ShmWord& signal_word(int owner, int src) { return reinterpret_cast<ShmWord*>(bases_[owner])[src]; }
  char* data(int r) { return bases_[r] + header_bytes_; }

  int rank_;
  int64_t count_;
  DataType dtype_;
  size_t header_bytes_;
  WaitTuning tuning_;
  ShmSegment own_;
  std::vector<std::unique_ptr<ShmSegment>> peers_;
  std::vector<char*> bases_;
  std::vector<ProcessWatch> watches_;
  std::atomic<bool> stopped_{false};
  std::atomic<const char*> why_{"aborted"};
  std::atomic<ShmWord*> sleeping_on_{nullptr};
};

}  // namespace commx
