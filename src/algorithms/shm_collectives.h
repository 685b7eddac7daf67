// Collectives over the shared slots of a ShmGroup (one host). Every rank reads and writes its
// peers' slots directly: a collective costs one copy in and one copy (or reduction) out. Large
// buffers go through the bounded slots in rounds. All ranks execute the same number of steps,
// derived from arguments that every rank knows. Layer: algorithms.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "commx/host_reduce.h"
#include "core/op_fingerprint.h"
#include "transport/shm_group.h"

namespace commx {

inline constexpr size_t kNoCma = ~size_t{0};

struct ShmColl {
  ShmGroup& g;
  WaitScope ws;
  // What every rank writes at the start of an op's first slot: its peers check it against their
  // own before reading any data (another op, dtype, count, root or reduction is a clear error).
  OpFingerprint sig;
  // Bytes per round of the pipelined reduce-scatter + all-gather (0: a whole slot). Rounds that
  // fit in the caches keep a large all_reduce from streaming through DRAM three times.
  size_t chunk_bytes = 0;
  // Data ops whose largest per-rank piece has at least this many bytes read their peers' buffers
  // straight into their outputs with process_vm_readv (one copy instead of two through the
  // slots); kNoCma where cross-memory attach is unavailable or off. Same on every rank.
  size_t cma_min_bytes = kNoCma;
  // Single-copy broadcast from this size on: the root writes a share of every peer's buffer
  // (process_vm_writev) while the peers read the rest, so the root's CPU copies too. Same on
  // every rank.
  size_t root_writes_min_bytes = kNoCma;
};

void shm_all_reduce_dda(ShmColl& c, const void* in, void* out, size_t count, const HostReducer& r);
// Single-copy reduce-scatter + all-gather over process_vm_readv (needs c.cma_min_bytes != kNoCma).
void shm_all_reduce_cma(ShmColl& c, const void* in, void* out, size_t count, const HostReducer& r);
void shm_all_reduce_rsag(ShmColl& c, const void* in, void* out, size_t count, const HostReducer& r);
// `two_step`: reduce-scatter then gather to the root (spreads the reduction work) instead of the
// root reducing everything itself.
void shm_reduce(ShmColl& c, const void* in, void* out, size_t count, int root, const HostReducer& r,
                bool two_step);
void shm_broadcast(ShmColl& c, void* buf, size_t bytes, int root);
// outs[p] receives rank p's input (out_bytes[p] bytes; the same on every rank).
void shm_all_gather(ShmColl& c, const void* in, size_t in_bytes, std::span<void* const> outs,
                    std::span<const size_t> out_bytes);
// ins[d] (counts[d] elements) is this rank's contribution to rank d's output.
void shm_reduce_scatter(ShmColl& c, std::span<const void* const> ins,
                        std::span<const size_t> counts, void* out, const HostReducer& r);
// ins[d] goes to rank d; outs[p] comes from rank p. Sizes are checked across all ranks.
void shm_all_to_all(ShmColl& c, std::span<const void* const> ins, std::span<const size_t> in_bytes,
                    std::span<void* const> outs, std::span<const size_t> out_bytes);
// outs (root only) receives every rank's `bytes`.
void shm_gather(ShmColl& c, const void* in, size_t bytes, std::span<void* const> outs, int root);
void shm_scatter(ShmColl& c, std::span<const void* const> ins, void* out, size_t bytes, int root);
void shm_barrier(ShmColl& c);

}  // namespace commx
