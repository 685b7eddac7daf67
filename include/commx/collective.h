// The canonical collectives: what a backend executes. The core lowers every user-facing form
// (OpType: list, single-tensor and v variants) into one of these after validating it, so a backend
// has one case per collective, not one per form. Layer: public API for backend authors.
#pragma once

#include <cstdint>

namespace commx {

enum class Collective : uint8_t {
  kAllReduce,
  kReduce,
  kBroadcast,
  kAllGather,      // input -> outputs[r] on every rank
  kReduceScatter,  // inputs[r] reduced over ranks -> output of rank r
  kAllToAll,       // inputs[r] of this rank -> outputs[me] of rank r
  kGather,         // input -> outputs[r] of the root
  kScatter,        // inputs[r] of the root -> output of rank r
  kBarrier,
  kP2P,              // send, recv and batches of them: the list `p2p`
  kAllToAllVDynamic,  // the split counts live in device memory (OpDesc::dynamic)
};
inline constexpr int kNumCollectives = 11;

const char* collective_name(Collective c);

// Whether the collective combines values with a ReduceOp (and so depends on it and the dtype).
inline constexpr bool is_reduction(Collective c) {
  return c == Collective::kAllReduce || c == Collective::kReduce || c == Collective::kReduceScatter;
}

}  // namespace commx
