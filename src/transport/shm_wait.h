// The one wait primitive of the shm paths: spin briefly, yield, then sleep on a futex in short
// slices. Every slice checks the deadline (-> Timeout naming the peers waited for), the abort
// flag (-> Aborted) and whether the peers waited for are alive (-> PeerFailure naming the dead
// one), so a dead rank is reported within milliseconds. Layer: transport.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <span>
#include <string>

#include "transport/shm_sync.h"
#include "transport/transport.h"

namespace commx {

struct WaitTuning {
  int64_t spin_ns = 2000;      // busy-wait with pause first (a handoff costs ~0.1 us)
  int64_t yield_ns = 50000;    // then sched_yield (lets an oversubscribed peer run here)
  int64_t slice_ns = 2000000;  // then futex sleeps of this length between checks
  // Yield in that phase even when the awaited peer runs on another CPU (more ranks than CPUs:
  // the thread that gets this CPU is likely a peer). Otherwise the phase yields only to a peer
  // that shares this CPU and spins else: yielding to an unrelated busy process (a build on the
  // same core) gives it a whole time slice, 3-4 ms, before this rank runs again.
  bool yield_always = false;
};

// Tells whether the process of a peer rank is still running.
class PeerWatch {
 public:
  virtual ~PeerWatch() = default;
  virtual bool alive(int peer) = 0;
  // Some rank whose process exited, or -1; while this rank is in a collective, one that exited
  // without finishing it (a rank done with its part of the op blocks nobody in it).
  virtual int any_dead() { return -1; }
  // Who is to blame for `peer` leaving the comm: the rank it recorded as its own verdict when it
  // gave up (it is not at fault then), else `peer`. *stalled: that rank stalled (else it died).
  virtual int culprit(int peer, bool* stalled) {
    *stalled = false;
    return peer;
  }
  // The verdict `peer` recorded (encoded as culprit * 2 + stalled) if it gave up on the comm,
  // else -1: a waiter fails at once instead of waiting for a rank that left.
  virtual int verdict_of(int /*peer*/) { return -1; }
  // Records this rank's verdict before it leaves an op with a failure (the first one stays).
  virtual void record_verdict(int /*rank*/, bool /*stalled*/) {}
  // The mismatch message when one of `peers` has been in an op of another kind (p2p against a
  // collective) that needs this rank for at least `grace`, so the two can never meet; else "".
  virtual std::string call_mismatch(std::span<const int> /*peers*/, Clock::time_point /*now*/,
                                    std::chrono::nanoseconds /*grace*/) {
    return {};
  }
};

struct WaitScope {
  Deadline deadline;
  const std::atomic<bool>* aborted = nullptr;
  PeerWatch* watch = nullptr;
  const WaitTuning* tuning = nullptr;
  // Where the waiting thread sleeps right now, so abort() can wake it.
  std::atomic<ShmWord*>* sleeping_on = nullptr;
  bool skip_spin = false;  // the awaited peer shares this CPU: go straight to yielding
  // A collective of the whole group: any rank that died before finishing the op fails the wait,
  // not only the awaited ones (a live peer that left the op after seeing the death would
  // otherwise never arrive); one that finished its part and exited blocks nobody.
  bool whole_group = false;
};

// Slow path: runs until pred() holds or throws Timeout/Aborted/PeerFailure. `what` says what was
// awaited (for the message); `peers` are the ranks whose progress pred() depends on.
void wait_slow(const std::function<bool()>& pred, ShmWord& word, std::span<const int> peers,
               const char* what, const WaitScope& scope);

// Fast path inline: one look before the slow path.
template <class Pred>
inline void shm_wait(Pred&& pred, ShmWord& word, std::span<const int> peers, const char* what,
                     const WaitScope& scope) {
  if (pred()) return;
  wait_slow(std::function<bool()>(pred), word, peers, what, scope);
}

}  // namespace commx
