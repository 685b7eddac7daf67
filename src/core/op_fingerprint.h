// OpFingerprint: one rank's call of an op, in 40 bytes that travel with the op's first data (the
// shm slot signature, the shm ring and TCP frame headers, and on GPUs the peer-memory flags), so
// every rank can check, before it combines any data, that its peers issued the same call.
// Layer: core (shared by every backend that moves bytes itself).
#pragma once

#include <cstdint>
#include <string>

#include "commx/backend.h"

namespace commx {

struct OpFingerprint {
  static constexpr uint8_t kNoReduce = 0xff;
  // flags
  static constexpr uint8_t kPremulFactor = 1;  // PREMUL_SUM with its factor
  static constexpr uint8_t kPointToPoint = 2;  // send, recv, batch: matched by size only
  static constexpr uint8_t kLowPrecision = 4;  // FP8 on the wire; `lowp_format` says which

  uint64_t seq = 0;      // the op's number on its comm as issued (names the call; not matched:
                         // ranks may issue different numbers of p2p ops in between)
  int64_t count = 0;     // the count every rank must agree on (0 where counts may differ)
  uint64_t sizes = 0;    // hash of the per-rank sizes every rank must agree on (v ops), else 0
  int32_t root = -1;     // rooted ops only
  uint32_t ordinal = 0;  // collectives the backend ran on this comm before this one (matched)
  uint8_t type = 0;      // OpType
  uint8_t dtype = 0;     // DataType
  uint8_t reduce = kNoReduce;  // ReduceKind of reductions
  uint8_t flags = 0;
  uint8_t lowp_format = 0;  // Fp8Format of low-precision ops
  uint8_t pad[3] = {};

  bool p2p() const { return flags & kPointToPoint; }
};
static_assert(sizeof(OpFingerprint) == 40, "the fingerprint is part of wire formats");

// The fingerprint of `op`, this backend's `ordinal`-th collective on the comm (p2p ops: any).
OpFingerprint fingerprint_of(const OpDesc& op, uint32_t ordinal);

// Whether two ranks' calls may be paired: both p2p, or the same collective with the same
// arguments (everything but `seq`).
bool fingerprints_match(const OpFingerprint& a, const OpFingerprint& b);

// "all_reduce #3 (sum, 16 x float32)", "broadcast #3 (root 1, 16 x float32)".
std::string describe_call(const OpFingerprint& f);

// "rank 0 called broadcast #3 (root 1, 16 x float32) but rank 1 called all_reduce #3 (sum, 16 x
// float32): the ranks' calls do not match" -- the message of the InvalidArgument every rank that
// sees the mismatch raises.
std::string mismatch_message(int my_rank, const OpFingerprint& mine, int peer,
                             const OpFingerprint& theirs);

}  // namespace commx
