// ShmOpState (shm_op_state.h). Layer: transport.
#include "transport/shm_op_state.h"

#include <cstddef>
#include <cstring>
#include <iterator>

namespace commx {
namespace {

constexpr uint64_t kManyRanks = uint64_t{1} << 63;

struct Snapshot {
  bool in_op = false;
  OpFingerprint call;
  uint64_t peers = 0;
  int64_t began_ns = 0;
};

// A consistent copy of `s`, or none when it is between ops or changed while read.
Snapshot read(const ShmOpState& s) {
  Snapshot out;
  const uint64_t before = s.seq.load(std::memory_order_acquire);
  if ((before & 1) == 0) return out;
  std::memcpy(&out.call, &s.call, sizeof(out.call));
  out.peers = s.peers;
  out.began_ns = s.began_ns;
  std::atomic_thread_fence(std::memory_order_acquire);
  out.in_op = s.seq.load(std::memory_order_relaxed) == before;
  return out;
}

bool involves(const Snapshot& s, int rank) {
  if (!s.call.p2p()) return true;
  if (rank >= 63) return (s.peers & kManyRanks) != 0;
  return (s.peers >> rank) & 1;
}

}  // namespace

uint64_t call_note(const OpFingerprint& call, uint64_t step) {
  // Word by word (a byte loop cost ~500 instructions per op): every word but the first, `seq`,
  // which is not matched.
  static_assert(offsetof(OpFingerprint, seq) == 0 && sizeof(OpFingerprint) % 8 == 0);
  uint64_t w[sizeof(OpFingerprint) / 8];
  std::memcpy(w, &call, sizeof(w));
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (size_t i = 1; i < std::size(w); ++i) {
    h = (h ^ w[i]) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
  }
  return (h & ~uint64_t{0xffffffff}) | (step & 0xffffffff);
}

void shm_op_begin(ShmOpState& s, const OpFingerprint& call, std::span<const int> p2p_peers,
                  int64_t began_ns) {
  uint64_t seq = s.seq.load(std::memory_order_relaxed);
  if (seq & 1) s.seq.store(++seq, std::memory_order_release);  // the last op failed inside
  s.call = call;
  uint64_t peers = 0;
  for (int p : p2p_peers) peers |= p < 63 ? uint64_t{1} << p : kManyRanks;
  s.peers = peers;
  s.began_ns = began_ns;
  s.seq.store(seq + 1, std::memory_order_release);
}

void shm_op_end(ShmOpState& s) {
  s.seq.store(s.seq.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

bool shm_op_finished(const ShmOpState& theirs, const ShmOpState& mine) {
  // The owner of `theirs` is gone, so its fields no longer change: plain reads are stable.
  const uint64_t t = theirs.seq.load(std::memory_order_acquire);
  if (t == 0 || (t & 1)) return false;  // no op yet, or it exited inside one
  const Snapshot me = read(mine);
  if (!me.in_op || me.call.p2p() || theirs.call.p2p()) return false;
  return theirs.call.ordinal >= me.call.ordinal;
}

std::string shm_op_mismatch(const ShmOpState& mine, int my_rank, const ShmOpState& theirs,
                            int peer, int64_t now_ns, int64_t grace_ns) {
  const Snapshot me = read(mine);
  const Snapshot them = read(theirs);
  if (!me.in_op || !them.in_op || me.call.p2p() == them.call.p2p()) return {};
  // My op must need the peer, and the peer's op must need me: then neither can finish.
  if (!involves(me, peer) || !involves(them, my_rank)) return {};
  if (now_ns - them.began_ns < grace_ns || now_ns - me.began_ns < grace_ns) return {};
  return mismatch_message(my_rank, me.call, peer, them.call) +
         " (a point-to-point op on one rank against a collective on the other)";
}

}  // namespace commx
