// An op in rounds within one kernel launch: the protocol that lets a collective larger than a
// buffer half run through the registered buffer without a kernel per piece. Layer: backends (cuda).
//
// Round i of an op that starts at op counter E is op counter E + i: its flags are
// flag_value(E + i, ..) and its buffer half half_of(.., E + i), so round i + 1 fills one half
// while the peers still read round i from the other. Blocks move through the rounds on their
// own, with only their per-block barriers; no grid-wide drain between rounds. That is safe when
// the round body keeps two rules:
//  - every block touches the same bytes of every buffer region in every round (regions sized for
//    a whole round, packs split by grid stride and the tail of a range given to the block that
//    would own its pack: for_block_packs, copy_block and owns_tail in protocol_simple.cuh);
//  - each round has a per-block barrier between its writes into the peers' halves and its reads
//    of its own half.
// Then block b of a rank writes a half again (round i + 2) only after its barrier of round
// i + 1, which block b of each peer reaches only after it finished reading round i. Round 0 and 1
// reuse halves of the comm's previous op, which every peer block ended before its first barrier
// here (griddepcontrol.wait: a kernel starts after its rank's previous one completed). The op
// takes the op counters E .. E + rounds - 1, as a kernel per round would, so the next op's flags
// and half follow on. Every wait is the barrier's bounded PollWait.
// Kernels: the exchange and the reduce-scatter (begin_rounds); the two-shot all_reduce and the
// FP8 round (lowp_round.cuh, its `halves` mode) follow the same protocol with counters of their
// own, as they were tuned and measured.
#pragma once

#include <cstdint>

#include "cuda/sync_device.cuh"

namespace commx::cuda {

// The op counters of an op in rounds: round i runs at first + i; the op ends with
// finish_op(ps, last), on success and on a failed barrier alike. The kernels loop over the rounds
// themselves: a helper that took the round as a lambda (or computed the count of rounds) changed
// the machine code of the one-round instances (22 more registers for the exchange), whose
// registers and scheduling are what small ops pay for. With the count a literal 1 (a kernel's
// one-round template instance), the loop compiles away.
struct Rounds {
  unsigned long long first;
  unsigned long long last;
};

// Starts the kernel of an op of `count` rounds (>= 1): begin_op, which reads the op counter.
__device__ __forceinline__ Rounds begin_rounds(const PeerSet& ps, int64_t count) {
  const unsigned long long first = begin_op(ps);
  return {first, first + count - 1};
}

}  // namespace commx::cuda
