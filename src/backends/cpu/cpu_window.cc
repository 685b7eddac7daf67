// CpuWindow (cpu_window.h). Layer: backends/cpu.
#include "backends/cpu/cpu_window.h"

#include <unistd.h>

#include <cstring>
#include <sstream>

#include "commx/error.h"

namespace commx {

CpuWindow::CpuWindow(Store& store, const std::string& key, int rank, int size, int64_t count,
                     DataType dtype, Timeout timeout, PeerWatch* watch,
                     const std::atomic<bool>* aborted, const WaitTuning* tuning,
                     const std::string& where)
    : rank_(rank),
      count_(count),
      dtype_(dtype),
      header_bytes_((static_cast<size_t>(size) * sizeof(ShmWord) + 4095) / 4096 * 4096),
      watch_(watch),
      aborted_(aborted),
      tuning_(tuning),
      peers_(size),
      bases_(size, nullptr) {
  const size_t total = header_bytes_ + static_cast<size_t>(count) * dtype_size(dtype);
  try {
    own_.create(key, total);  // zero-filled: no signals, a zeroed buffer
    bases_[rank] = own_.base();
    store.set_str(key + "/" + std::to_string(rank), std::to_string(getpid()) + " " +
                                                        std::to_string(own_.fd()) + " " +
                                                        std::to_string(total));
    std::vector<std::string> keys;
    for (int r = 0; r < size; ++r) keys.push_back(key + "/" + std::to_string(r));
    store.wait(keys, timeout);
    for (int r = 0; r < size; ++r) {
      if (r == rank) continue;
      std::istringstream in(store.get_str(keys[r]));
      int pid = -1, fd = -1;
      size_t bytes = 0;
      in >> pid >> fd >> bytes;
      if (bytes != total)
        throw Error(ErrorCode::kInvalidArgument,
                    "rank " + std::to_string(r) + " made a window of " + std::to_string(bytes) +
                        " bytes, this rank " + std::to_string(total) +
                        " (every rank must pass the same count and dtype)");
      peers_[r] = std::make_unique<ShmSegment>();
      peers_[r]->open(pid, fd, total, "rank " + std::to_string(r));
      bases_[r] = peers_[r]->base();
    }
    // The owners keep their descriptors open until every rank has mapped every segment.
    if (size > 1) {
      if (store.add(key + "/mapped", 1) == size) store.set_str(key + "/all", "1");
      store.wait({key + "/all"}, timeout);
    }
  } catch (...) {
    rethrow_with_prefix(where);
  }
}

Tensor CpuWindow::remote(int rank) { return Tensor(data(rank), count_, dtype_, Device::cpu()); }

void CpuWindow::put(const void* src, size_t bytes, int dst, size_t offset) {
  if (bytes) std::memcpy(data(dst) + offset, src, bytes);
}

void CpuWindow::signal(int dst) {
  // Sequentially consistent: the puts above are visible to whoever sees the new count.
  ring_bell(signal_word(dst, rank_));
}

uint64_t CpuWindow::signals_from(int src) { return load_acquire(signal_word(rank_, src).value); }

void CpuWindow::wait_signals(int src, uint64_t target, Timeout timeout, const std::string& where) {
  if (closed_.load())
    throw Error(ErrorCode::kAborted, where + "the comm was finalized while this wait was pending");
  ShmWord& w = signal_word(rank_, src);
  WaitScope ws{Clock::now() + timeout, aborted_, watch_, tuning_, &sleeping_on_};
  const int peers[1] = {src};
  try {
    shm_wait([&] { return load_acquire(w.value) >= target; }, w, peers, "a window signal", ws);
  } catch (...) {
    rethrow_with_prefix(where);
  }
}

void CpuWindow::wake() {
  if (ShmWord* w = sleeping_on_.load()) futex_wake_all(*w);
}

void CpuWindow::close() {
  closed_.store(true);
  wake();
}

}  // namespace commx
