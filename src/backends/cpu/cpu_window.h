// CpuWindow: the cpu backend's one-sided window (commx/window.h) over shared memory. Each rank's
// segment holds one signal word per source rank, then its buffer; every rank maps every segment
// of the host, so a put is a copy into the target's buffer and a signal one atomic add on the
// target's word for this rank (which a waiting target sleeps on). Layer: backends/cpu.
//
// It owns everything its waits use (the peers' process watches; the stop flag and wait tuning in
// SignalWaits), so a wait still pending when the comm is finalized or destroyed ends (Aborted).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/signal_waits.h"
#include "transport/shm_segment.h"

namespace commx {

class CpuWindow : public SignalWaits {
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

 private:
  bool alive(int peer) override { return peer == rank_ || !watches_[peer].exited(); }
  ShmWord& signal_word_from(int src) override { return signal_word(rank_, src); }
  std::string loss(int) override { return " died (its process exited)"; }
  ShmWord& signal_word(int owner, int src) { return reinterpret_cast<ShmWord*>(bases_[owner])[src]; }
  char* data(int r) { return bases_[r] + header_bytes_; }

  int64_t count_;
  DataType dtype_;
  size_t header_bytes_;
  ShmSegment own_;
  std::vector<std::unique_ptr<ShmSegment>> peers_;
  std::vector<char*> bases_;
  std::vector<ProcessWatch> watches_;
};

}  // namespace commx
