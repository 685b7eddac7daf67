// DeviceCall, RecentCalls and the mismatch message (see call_stamp.h). Layer: backends (cuda).
#include "cuda/call_stamp.h"

#include <cstdio>
#include <cstring>

namespace commx::cuda {

static_assert(sizeof(OpFingerprint) == sizeof(DeviceCall::words),
              "a DeviceCall carries the whole fingerprint");

DeviceCall device_call(const OpFingerprint& f) {
  DeviceCall c{};
  std::memcpy(c.words, &f, sizeof(c.words));
  c.hash = call_hash(c.words);
  return c;
}

OpFingerprint fingerprint_of_words(const unsigned long long (&words)[5]) {
  OpFingerprint f;
  std::memcpy(&f, words, sizeof(f));
  return f;
}

namespace {

// The same call but for the op number and the ordinal.
bool same_call(OpFingerprint a, OpFingerprint b) {
  a.seq = b.seq = 0;
  a.ordinal = b.ordinal = 0;
  return std::memcmp(&a, &b, sizeof(a)) == 0;
}

}  // namespace

void RecentCalls::note(const OpFingerprint& f) {
  if (any_ && same_call(f, last_)) return;
  last_ = f;
  any_ = true;
  std::lock_guard<std::mutex> g(mu_);
  ring_[next_] = f;
  next_ = (next_ + 1) % kSize;
  if (count_ < kSize) ++count_;
}

std::optional<OpFingerprint> RecentCalls::find(unsigned long long hash, uint32_t ordinal,
                                               unsigned long long check_value) const {
  std::lock_guard<std::mutex> g(mu_);
  for (size_t i = 1; i <= count_; ++i) {
    OpFingerprint f = ring_[(next_ + kSize - i) % kSize];
    f.ordinal = ordinal;
    const unsigned long long h = device_call(f).hash;
    if (check_value ? flag_check(h, check_value) == hash : h == hash) return f;
  }
  return std::nullopt;
}

std::string call_mismatch_message(const CallMismatch& m, int my_rank, int peer,
                                  const RecentCalls& recent) {
  const OpFingerprint mine = fingerprint_of_words(m.mine);
  std::optional<OpFingerprint> theirs;
  if (m.theirs_known)
    theirs = fingerprint_of_words(m.theirs);
  else
    theirs = recent.find(m.their_hash, mine.ordinal, m.check_value);  // at the same op counter
  if (theirs) {
    // The peer's op number is its own; a call looked up here carries this rank's number of it.
    if (!m.theirs_known) theirs->seq = mine.seq;
    return mismatch_message(my_rank, mine, peer, *theirs);
  }
  char known[64];
  if (m.check_value)
    std::snprintf(known, sizeof(known), "flag check %05llx at flag %llu", m.their_hash,
                  m.check_value);
  else
    std::snprintf(known, sizeof(known), "call hash %016llx", m.their_hash);
  return "rank " + std::to_string(my_rank) + " called " + describe_call(mine) + " but rank " +
         std::to_string(peer) + " called another collective (" + known +
         ", none this rank issued lately): the ranks' calls do not match";
}

}  // namespace commx::cuda
