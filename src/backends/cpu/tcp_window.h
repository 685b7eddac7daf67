// TcpWindow: the cpu backend's one-sided window (commx/window.h) for comms whose ranks talk over
// TCP (several hosts, or the hint transport=tcp). At creation every rank connects to every other
// (one outgoing link per peer for its puts and signals, one incoming link per peer); a service
// thread per window reads the incoming links in order and lands each put in this rank's buffer,
// then counts each signal, so a target that sees a signal sees every put sent before it. A put
// returns once its bytes are in the kernel's socket buffer. Layer: backends/cpu.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/signal_waits.h"

namespace commx {

class TcpWindow : public SignalWaits {
 public:
  // Collective: listens (address chosen as the TCP transport does, from `hints`), publishes the
  // address under `key`, connects to every peer and accepts every peer, within `timeout`.
  TcpWindow(Store& store, const std::string& key, int rank, int size, int64_t count, DataType dtype,
            Timeout timeout, const Hints& hints, const WaitTuning& tuning, const std::string& where);
  ~TcpWindow() override;

  Tensor local() override;
  Tensor remote(int rank) override;  // only this rank's buffer lives here
  void put(const void* src, size_t bytes, int dst, size_t offset) override;
  void signal(int dst) override;

 private:
  enum Link : int { kOpen, kClosed, kDead };  // state of the link from a peer
  bool alive(int peer) override { return peer == rank_ || in_state_[peer].load() == kOpen; }
  ShmWord& signal_word_from(int src) override { return signals_[src]; }
  std::string loss(int src) override {
    return in_state_[src].load() == kClosed ? " closed its window"
                                            : " failed: its link closed (its process exited?)";
  }
  void send_message(int dst, uint32_t kind, uint64_t offset, const void* data, uint64_t bytes);
  void serve();
  bool serve_one(int src);  // false when the link ended
  void lose(int src, Link why);

  int size_;
  int64_t count_;
  DataType dtype_;
  size_t bytes_;
  Timeout timeout_;
  std::unique_ptr<char[]> buffer_;
  std::unique_ptr<ShmWord[]> signals_;  // signals_[src]: signals received from src
  std::vector<int> out_, in_;
  std::unique_ptr<std::mutex[]> send_mu_;
  std::unique_ptr<std::atomic<int>[]> in_state_;
  int wake_fd_ = -1;
  std::thread server_;
};

}  // namespace commx
