// enqueue_exchange (see exchange.h). Layer: backends (cuda).
#include "cuda/exchange.h"

#include <algorithm>

#include "cuda/kernels.h"

namespace commx::cuda {

void enqueue_exchange(const PeerSet& ps, const Tuning& t, const PtrList& src, const PtrList& dst,
                      uint64_t nbytes, bool every_pair, cudaStream_t s) {
  const int world = ps.world;
  const uint64_t half = t.buffer_bytes;
  if (every_pair && nbytes <= t.ll_max_bytes &&
      world * region_bytes((nbytes + 7) / 8 * 16) <= half) {
    launch_exchange_ll(ps, src, dst, static_cast<int64_t>(nbytes), ll_blocks(nbytes, t.max_blocks),
                       s);
    return;
  }
  if (nbytes == 0) return;
  bool al = true;
  for (int q = 0; q < world; ++q) al = al && aligned16(src.p[q]) && aligned16(dst.p[q]);
  // Rounds of one region per pair, all in one launch (rounds_device.cuh).
  const uint64_t cap = (half / world) & ~uint64_t(255);
  launch_exchange(ps, src, dst, static_cast<int64_t>(nbytes), static_cast<int64_t>(cap), al,
                  blocks_for(std::min(cap, nbytes), t.max_blocks_large), s);
}

}  // namespace commx::cuda
