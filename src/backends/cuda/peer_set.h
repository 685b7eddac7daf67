// Builds the PeerSet a kernel launch carries: every rank's signal pad and data area in the
// registered buffer (pad first, then the two data halves), the device state and the op's
// timeout and identity for error reports. Shared by the flat and the hierarchical paths.
// Layer: backends (cuda).
#pragma once

#include "commx/backend.h"
#include "cuda/kernel_params.h"
#include "cuda/peer_memory.h"
#include "cuda/tuning.h"

namespace commx::cuda {

// `pm` may be null (a world of one rank: no peers to reach). From `t`: the buffer half and the
// waits' poll backoff.
PeerSet make_peer_set(const PeerMemory* pm, int rank, int world, const Tuning& t,
                      DevState* state, HostCtl* ctl, const OpDesc& op);

}  // namespace commx::cuda
