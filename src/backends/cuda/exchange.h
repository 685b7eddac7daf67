// The per-pair byte exchange behind all_gather, all_to_all, broadcast, gather and scatter, as the
// flat and the hierarchical paths enqueue it: the barrier-free LL kernel when every rank receives
// from every peer and the message is small, else the exchange kernel in rounds of one region of
// the registered buffer, all in one launch. Layer: backends (cuda).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/kernel_params.h"
#include "cuda/tuning.h"

namespace commx::cuda {

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// For each peer q: src.p[q] (if set) goes to q and what q sends lands in dst.p[q] (if set);
// `nbytes` per pair. `every_pair`: every rank receives from every peer (LL is allowed).
void enqueue_exchange(const PeerSet& ps, const Tuning& t, const PtrList& src, const PtrList& dst,
                      uint64_t nbytes, bool every_pair, cudaStream_t s);

}  // namespace commx::cuda
