// The shm wait primitive (see shm_wait.h). Layer: transport.
#include "transport/shm_wait.h"

#include <sched.h>

#include <functional>
#include <string>

#include "commx/error.h"

namespace commx {
namespace {

// How long a peer must sit in an op of the other kind before the calls count as mismatched: a
// p2p op that involves this rank while it is in a collective (or the reverse) finishes within
// microseconds when the ranks' calls agree, so a second is far beyond any scheduling delay.
constexpr std::chrono::milliseconds kCallMismatchGrace{1000};

std::string rank_list(std::span<const int> peers) {
  std::string s;
  for (size_t i = 0; i < peers.size(); ++i) s += (i ? ", " : "") + std::to_string(peers[i]);
  return s;
}

// Throws the error that ends the wait, if any. A peer that left, or the deadline, counts only if
// what this rank waits for has not arrived meanwhile (`pred`, read again after the finding): a
// peer may post its last step and exit, and this rank see the exit before it re-reads the step.
// Returns true when it has arrived after all.
bool check(const std::function<bool()>& pred, std::span<const int> peers, const char* what,
           const WaitScope& sc, Clock::time_point now, Clock::time_point start) {
  if (sc.aborted && sc.aborted->load(std::memory_order_relaxed))
    throw Error(ErrorCode::kAborted, std::string("aborted while waiting for ") + what +
                                         " from rank(s) " + rank_list(peers));
  // A peer that left (died, or gave up on the comm after it lost another rank) is reported by
  // the rank really at fault: its own verdict if it recorded one.
  auto left = [&](int p, bool dead) {
    // A peer that left while in an op of the other kind (it saw the mismatch first): the
    // mismatch, not its leaving, is what this rank reports.
    std::string m = sc.watch->call_mismatch(peers, now, std::chrono::nanoseconds(0));
    if (!m.empty()) return Error(ErrorCode::kInvalidArgument, m);
    bool stalled = false;
    const int c = sc.watch->culprit(p, &stalled);
    sc.watch->record_verdict(c, stalled);
    std::string why = c == p ? std::string(" died (its process exited)")
                             : std::string(stalled ? " stalled" : " died") + " (rank " +
                                   std::to_string(p) + " gave up on the comm for it" +
                                   (dead ? " and exited)" : ")");
    return Error(stalled ? ErrorCode::kTimeout : ErrorCode::kPeerFailure,
                 "rank " + std::to_string(c) + why + " while this rank waited for " + what +
                     " from rank(s) " + rank_list(peers));
  };
  if (sc.watch)
    for (int p : peers) {
      if (!sc.watch->alive(p)) {
        if (pred()) return true;
        throw left(p, true);
      }
      if (sc.watch->verdict_of(p) >= 0) {
        if (pred()) return true;
        throw left(p, false);
      }
    }
  if (sc.watch && sc.whole_group) {
    int d = sc.watch->any_dead();
    if (d >= 0) {
      if (pred()) return true;
      throw left(d, true);
    }
  }
  // A peer stuck in an op of the other kind (p2p against a collective) is a mismatch of calls,
  // not a slow peer: said after a grace that no live exchange takes, or at the deadline.
  if (sc.watch && (now - start >= kCallMismatchGrace || now >= sc.deadline)) {
    std::string m = sc.watch->call_mismatch(
        peers, now, now >= sc.deadline ? std::chrono::nanoseconds(0) : kCallMismatchGrace);
    if (!m.empty()) {
      if (pred()) return true;
      throw Error(ErrorCode::kInvalidArgument, m);
    }
  }
  if (now >= sc.deadline) {
    if (pred()) return true;
    if (sc.watch && !peers.empty()) sc.watch->record_verdict(peers[0], true);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - start).count();
    throw Error(ErrorCode::kTimeout, "timed out after " + std::to_string(ms) + " ms waiting for " +
                                         what + " from rank(s) " + rank_list(peers));
  }
  return false;
}

}  // namespace

void wait_slow(const std::function<bool()>& pred, ShmWord& word, std::span<const int> peers,
               const char* what, const WaitScope& sc) {
  static const WaitTuning kDefault;
  const WaitTuning& t = sc.tuning ? *sc.tuning : kDefault;
  const auto start = Clock::now();
  const auto spin_end = start + std::chrono::nanoseconds(sc.skip_spin ? 0 : t.spin_ns);
  const auto yield_end = spin_end + std::chrono::nanoseconds(t.yield_ns);
  auto next_check = start + std::chrono::milliseconds(1);
  for (unsigned i = 1;; ++i) {
    if (pred()) return;
    if (i % 32 != 0) {
      cpu_relax();
      continue;
    }
    auto now = Clock::now();
    if (now >= next_check) {
      if (check(pred, peers, what, sc, now, start)) return;
      next_check = now + std::chrono::milliseconds(1);
    }
    if (now < spin_end) continue;
    if (now < yield_end) {
      if (sc.skip_spin || t.yield_always) sched_yield();
      continue;
    }
    break;
  }
  // Sleep phase.
  if (sc.sleeping_on) sc.sleeping_on->store(&word);
  struct Clear {
    const WaitScope& sc;
    ~Clear() {
      if (sc.sleeping_on) sc.sleeping_on->store(nullptr);
    }
  } clear{sc};
  while (true) {
    word.waiters.fetch_add(1, std::memory_order_seq_cst);
    uint64_t v = word.value.load(std::memory_order_seq_cst);
    bool ready = pred();
    if (!ready && !(sc.aborted && sc.aborted->load())) {
      auto left =
          std::chrono::duration_cast<std::chrono::nanoseconds>(sc.deadline - Clock::now()).count();
      int64_t ns = left < t.slice_ns ? (left > 0 ? left : 0) : t.slice_ns;
      if (ns > 0) futex_wait(word, static_cast<uint32_t>(v), ns);
    }
    word.waiters.fetch_sub(1, std::memory_order_seq_cst);
    if (ready || pred()) return;
    if (check(pred, peers, what, sc, Clock::now(), start)) return;
  }
}

}  // namespace commx
