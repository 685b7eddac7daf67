// Collectives over any Transport (TCP between hosts, or the shm rings when asked for): ring and
// recursive doubling all_reduce, ring all_gather / reduce_scatter, direct all-to-all, binomial-tree
// broadcast / reduce, direct gather / scatter, dissemination barrier. Layer: algorithms.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "commx/host_reduce.h"
#include "transport/transport.h"

namespace commx {

struct GenericColl {
  Transport& t;
  int rank;
  int size;
  Deadline deadline;
  std::vector<char>& scratch;  // reused across ops, grown on demand
};

void gen_all_reduce_recursive_doubling(GenericColl& c, const void* in, void* out, size_t count,
                                       const HostReducer& r);
void gen_all_reduce_ring(GenericColl& c, const void* in, void* out, size_t count,
                         const HostReducer& r);
void gen_reduce_tree(GenericColl& c, const void* in, void* out, size_t count, int root,
                     const HostReducer& r);
void gen_broadcast_tree(GenericColl& c, void* buf, size_t bytes, int root);
void gen_all_gather_ring(GenericColl& c, const void* in, size_t in_bytes,
                         std::span<void* const> outs, std::span<const size_t> out_bytes);
void gen_reduce_scatter_ring(GenericColl& c, std::span<const void* const> ins,
                             std::span<const size_t> counts, void* out, const HostReducer& r);
void gen_all_to_all(GenericColl& c, std::span<const void* const> ins,
                    std::span<const size_t> in_bytes, std::span<void* const> outs,
                    std::span<const size_t> out_bytes);
void gen_gather(GenericColl& c, const void* in, size_t bytes, std::span<void* const> outs,
                int root);
void gen_scatter(GenericColl& c, std::span<const void* const> ins, void* out, size_t bytes,
                 int root);
void gen_barrier(GenericColl& c);

}  // namespace commx
