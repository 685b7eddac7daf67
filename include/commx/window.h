// Window: one-sided communication, shaped after torchcomms' TorchCommWindow. Every rank of a comm
// owns a buffer of the same size; any rank may put data into any rank's buffer without that rank
// taking part, then signal it; the target waits for the signal and reads its buffer.
// Layer: public API. Made by Comm::new_window (collective).
//
//   auto win = comm->new_window(1024, DataType::kFloat32);
//   win->put(t, /*dst=*/1, /*target_offset=*/0);   // t lands in rank 1's buffer
//   win->signal(1);                                 // rank 1 may read it
//   ... on rank 1: win->wait_signal(/*src=*/0); read win->local().
//
// After put returns, `t` may be reused; the data is in the target's buffer before the target
// sees the sender's next signal (over shared memory already on return). A signal counts every
// put its sender issued to that target before it; wait_signal(src) waits for the next signal from src (the k-th
// call returns once src sent k signals; a wait that timed out gives its turn back unless a later
// wait on src was issued meanwhile). Waits are bounded by the comm's timeout (or the one given):
// Timeout, PeerFailure (src died) and Aborted (abort or finalize) name the rank waited for.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "commx/backend.h"
#include "commx/tensor.h"
#include "commx/work.h"

namespace commx {

class Comm;
struct SignalCounts;

class Window {
 public:
  // For Comm::new_window.
  Window(std::shared_ptr<Comm> comm, std::shared_ptr<WindowImpl> impl, int64_t count, DataType dtype);

  int64_t count() const { return count_; }
  DataType dtype() const { return dtype_; }
  // This rank's buffer.
  Tensor local() const;
  // Rank r's buffer, loaded and stored directly (the cpu backend over shared memory maps every
  // buffer of the host; over TCP only this rank's: an empty tensor for the others).
  Tensor remote(int rank) const;
  // Copies `t` (the window's dtype, on the comm's device) into rank dst's buffer at element
  // `target_offset`. async_op only changes the return: `t` may be reused when put returns.
  Work put(const Tensor& t, int dst, int64_t target_offset, bool async_op = false);
  // Tells dst that this rank's earlier puts to it have landed.
  Work signal(int dst, bool async_op = false);
  // Waits for the next signal from src. async_op=true returns at once; the Work completes when
  // the signal arrives (wait() blocks, bounded by the timeout).
  Work wait_signal(int src, bool async_op = false, std::optional<Timeout> timeout = std::nullopt);

 private:
  std::string where(const char* op) const;
  void check_rank(int r, const char* op, const char* role) const;

  std::shared_ptr<Comm> comm_;  // keeps the backend (and the buffers) alive
  std::shared_ptr<WindowImpl> impl_;
  int64_t count_;
  DataType dtype_;
  std::shared_ptr<SignalCounts> counts_;  // signals asked for so far, per source
};

}  // namespace commx
