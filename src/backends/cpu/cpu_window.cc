// CpuWindow (cpu_window.h). Layer: backends/cpu.
#include "backends/cpu/cpu_window.h"

#include <unistd.h>

#include <cstring>
#include <sstream>

#include "commx/error.h"

namespace commx {

CpuWindow::CpuWindow(Store& store, const std::string& key, int rank, int size, int64_t count,
                     DataType dtype, Timeout timeout, const WaitTuning& tuning,
                     const std::string& where)
    : SignalWaits(rank, tuning),
      count_(count),
      dtype_(dtype),
      header_bytes_((static_cast<size_t>(size) * sizeof(ShmWord) + 4095) / 4096 * 4096),
      peers_(size),
      bases_(size, nullptr),
      watches_(size) {
  const size_t es = dtype_size(dtype);
  if (count < 0 || static_cast<uint64_t>(count) > (SIZE_MAX / 2 - header_bytes_) / es)
    throw Error(ErrorCode::kInvalidArgument, where + std::to_string(count) + " elements do not fit memory");
  const size_t total = header_bytes_ + static_cast<size_t>(count) * es;
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
      watches_[r] = ProcessWatch(pid);  // while the peer is surely alive
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
  if (bytes) std::memmove(data(dst) + offset, src, bytes);  // src may be a window buffer itself
}

void CpuWindow::signal(int dst) {
  // Sequentially consistent: the puts above are visible to whoever sees the new count.
  ring_bell(signal_word(dst, rank_));
}

}  // namespace commx
