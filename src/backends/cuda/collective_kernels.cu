// The byte-exchange kernel behind all-gather, all-to-all, broadcast, gather and scatter, and the
// barrier kernel. Layer: backends (cuda). Senders push straight from the user's buffer into region
// `rank` of the receiver's registered buffer; after one per-block barrier receivers copy their
// regions out. One kernel, one barrier per call.
#include "cuda/kernels.h"
#include "cuda/reduce_device.cuh"
#include "cuda/sync_device.cuh"

namespace commx::cuda {
namespace {

using Byte = unsigned char;

__global__ void __launch_bounds__(kThreads) exchange_kernel(PeerSet ps, PtrList src, PtrList dst,
                                                             int64_t n, bool aligned) {
  constexpr int P = kPack<Byte>;
  const unsigned long long epoch = op_epoch(ps);
  const int me = ps.rank, world = ps.world;
  const uint64_t region = (static_cast<uint64_t>(n) + 255) & ~uint64_t(255);
  auto copy = [&](const Byte* from, Byte* to, bool from_aligned, bool to_aligned) {
    for_block_packs<Byte>(
        n,
        [&](int64_t e) {
          Byte v[P];
          load_pack(from + e, from_aligned, v);
          store_pack(to + e, to_aligned, v);
        },
        [&](int64_t e) { to[e] = from[e]; });
  };
  for (int q = 0; q < world; ++q) {
    if (!src.p[q]) continue;
    if (q == me) {
      if (dst.p[me] && dst.p[me] != src.p[me])
        copy(reinterpret_cast<const Byte*>(src.p[me]), reinterpret_cast<Byte*>(dst.p[me]), aligned,
             aligned);
    } else {
      copy(reinterpret_cast<const Byte*>(src.p[q]),
           reinterpret_cast<Byte*>(half_of(ps, q, epoch) + me * region), aligned, true);
    }
  }
  if (!block_barrier(ps, flag_value(epoch, 0))) return finish_op(ps, epoch);
  const char* mine = half_of(ps, me, epoch);
  for (int q = 0; q < world; ++q)
    if (q != me && dst.p[q])
      copy(reinterpret_cast<const Byte*>(mine + q * region), reinterpret_cast<Byte*>(dst.p[q]), true,
           aligned);
  finish_op(ps, epoch);
}

__global__ void barrier_kernel(PeerSet ps) {
  const unsigned long long epoch = op_epoch(ps);
  block_barrier(ps, flag_value(epoch, 0));
  finish_op(ps, epoch);
}

}  // namespace

void launch_exchange(const PeerSet& ps, const PtrList& src, const PtrList& dst, int64_t nbytes,
                     bool aligned, int blocks, cudaStream_t s) {
  exchange_kernel<<<blocks, kThreads, 0, s>>>(ps, src, dst, nbytes, aligned);
}

void launch_barrier(const PeerSet& ps, cudaStream_t s) { barrier_kernel<<<1, 32, 0, s>>>(ps); }

}  // namespace commx::cuda
