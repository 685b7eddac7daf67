// enqueue_reduce_scatter (see reduce_scatter.h). Layer: backends (cuda).
#include "cuda/reduce_scatter.h"

#include <algorithm>

#include "commx/types.h"
#include "cuda/exchange.h"

namespace commx::cuda {

void enqueue_reduce_scatter(const PeerSet& ps, const Tuning& t, const PtrList& ins, void* out,
                            int64_t n, const ReduceSpec& rs, cudaStream_t s) {
  const int world = ps.world;
  const int64_t es = static_cast<int64_t>(dtype_size(rs.dtype));
  const uint64_t half = t.buffer_bytes;
  if (static_cast<uint64_t>(n * es) <= t.ll_max_bytes && ll_bytes_needed(n, es, world) <= half) {
    launch_reduce_scatter_ll(ps, ins, out, n, rs, ll_blocks(n * es, t.max_blocks), s);
    return;
  }
  // Each source's chunk takes one 256-byte aligned region of a buffer half, in whole packs.
  const int64_t pack = 16 / es;
  const int64_t cap = static_cast<int64_t>(((half / world) & ~uint64_t(255)) / es) / pack * pack;
  for (int64_t off = 0; off < n; off += cap) {
    const int64_t len = std::min(cap, n - off);
    PtrList part{};
    for (int q = 0; q < world; ++q) part.p[q] = at(ins.p[q], off * es);
    launch_reduce_scatter(ps, part, at(out, off * es), len, rs,
                          blocks_for(len * es, t.max_blocks_large), s);
  }
}

}  // namespace commx::cuda
