// Transport: ordered byte messages between the ranks of one comm (shared memory or TCP).
// Layer: transport. Knows nothing of collectives; algorithms are written over exchange().
#pragma once

#include <chrono>
#include <cstddef>
#include <span>
#include <string>

#include "core/op_fingerprint.h"

namespace commx {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

struct SendReq {
  int peer;
  const void* data;
  size_t bytes;
};

struct RecvReq {
  int peer;
  void* data;
  size_t bytes;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string name() const = 0;
  // Progresses every send and receive together until all complete. Messages between a pair of
  // ranks match in issue order (FIFO per direction), so a ring step is one exchange() with one
  // send and one recv. A receive whose size differs from the matching send's is an
  // InvalidArgument error naming both sizes; a deadline passed is a Timeout naming the peers
  // still pending; a peer that died is a PeerFailure naming it; after abort(), Aborted.
  virtual void exchange(std::span<const SendReq> sends, std::span<const RecvReq> recvs,
                        Deadline deadline) = 0;
  // Non-blocking; wakes any exchange() in progress, which then throws Aborted.
  virtual void abort() = 0;

  // The call the messages of the following exchanges belong to. Every message carries it and
  // its receiver compares it with its own before taking any byte: a mismatch is an
  // InvalidArgument naming both calls (mismatch_message) instead of data paired with another op.
  void set_call(const OpFingerprint& f) { call_ = f; }
  OpFingerprint& call() { return call_; }

 protected:
  OpFingerprint call_{};
};

}  // namespace commx
