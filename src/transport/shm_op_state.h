// ShmOpState: the op a rank is in, published in its shm segment header so that a peer waiting for
// it can tell a point-to-point op on one rank against a collective on the other (which never meet:
// p2p travels in the rings, collectives in the slots) from a rank that is merely slow, and raise
// the calls' mismatch instead of waiting for the timeout. Layer: transport.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <string>

#include "core/op_fingerprint.h"

namespace commx {

struct ShmOpState {
  // Odd while the owner is in an op, even between ops: a sequence lock over the fields below,
  // which the owner writes only while it is even.
  std::atomic<uint64_t> seq;
  OpFingerprint call;
  uint64_t peers;  // a p2p op's peers: bit r for rank r < 63; bit 63: some rank >= 63
  int64_t began_ns;  // CLOCK_MONOTONIC (steady_clock), the same clock for every process of a host
};

// The owner's side: entering (the peers of a p2p op, ignored for a collective; when it began, on
// the steady clock) and leaving an op.
void shm_op_begin(ShmOpState& s, const OpFingerprint& call, std::span<const int> p2p_peers,
                  int64_t began_ns);
void shm_op_end(ShmOpState& s);

// A 64-bit note of `call` made at `step`: a hash of the call (everything fingerprints_match
// compares) in the high half, the step's low 32 bits in the low half, so a note left from an older
// step never passes for the current one. Equal notes: the calls match (a 2^-32 chance aside,
// which only skips the full check that a differing note triggers).
uint64_t call_note(const OpFingerprint& call, uint64_t step);

// A waiter's side: whether the owner of `theirs`, whose process has exited, had finished the
// collective that the owner of `mine` is in: it left between ops, after a collective numbered at or
// past this one among the comm's collectives (`ordinal`). Such a rank blocks nobody in this op (it
// posted every step of it); a rank that left inside an op, or before this one, does.
bool shm_op_finished(const ShmOpState& theirs, const ShmOpState& mine);

// A waiter's side: the mismatch message when `peer` sits in an op of the other kind than this
// rank's own that involves this rank (a collective always does; a p2p op when this rank is one of
// its peers) since at least `grace` ago; else empty. Both ops are then stuck on each other.
std::string shm_op_mismatch(const ShmOpState& mine, int my_rank, const ShmOpState& theirs,
                            int peer, int64_t now_ns, int64_t grace_ns);

}  // namespace commx
