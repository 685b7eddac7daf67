// The byte-exchange kernels behind all-gather, all-to-all, broadcast, gather and scatter: one
// pattern (rank r's src.p[q] lands in rank q's dst.p[r]) serves all five, so they share one kernel
// and its LL variant rather than a file each. Layer: backends (cuda). Senders push straight from
// the user's buffer into region `rank` of the receiver's registered buffer; after one per-block
// barrier receivers copy their regions out. One kernel per call, one barrier per round of one
// buffer half.
#include "cuda/kernels.h"
#include "cuda/launch.cuh"
#include "cuda/protocol_ll.cuh"
#include "cuda/protocol_simple.cuh"
#include "cuda/rounds_device.cuh"
#include "cuda/sync_device.cuh"
#include "cuda/tuning.h"

namespace commx::cuda {
namespace {

using Byte = unsigned char;

// kRounds: the op runs in rounds of `chunk` bytes per pair (the last one shorter), one buffer half
// each, all in this launch (rounds_device.cuh), two blocks per SM (64 registers: the grid is up to
// 2 x SMs blocks); false: one round of all n bytes (chunk unused) and no minimum of blocks (0),
// the code of the kernel of one piece.
template <bool kRounds>
__global__ void __launch_bounds__(kThreads, kRounds ? 2 : 0)
    exchange_kernel(PeerSet ps, PtrList src, PtrList dst, int64_t n, bool aligned, int64_t chunk) {
  const int64_t rounds = kRounds ? (n + chunk - 1) / chunk : 1;
  const Rounds r = begin_rounds(ps, rounds);
  const int me = ps.rank, world = ps.world;
  // Regions sized for a whole round, so a block owns the same bytes of them in every round.
  const uint64_t region = align256(static_cast<uint64_t>(kRounds ? chunk : n));
  for (int64_t i = 0; i < rounds; ++i) {
    const unsigned long long e = r.first + i;
    const int64_t base = kRounds ? i * chunk : 0;
    const int64_t m = kRounds ? min(chunk, n - base) : n;
    auto copy = [&](const Byte* from, Byte* to, bool from_aligned, bool to_aligned) {
      copy_block(from, to, m, from_aligned, to_aligned);
    };
    auto piece = [&](char* p) { return reinterpret_cast<Byte*>(p) + base; };  // this round's bytes
    for (int k = 0; k < world; ++k) {  // next rank first: no rank's links take every push at once
      const int q = (me + k) % world;
      if (!src.p[q]) continue;
      if (q == me) {
        if (dst.p[me] && dst.p[me] != src.p[me])
          copy(piece(src.p[me]), piece(dst.p[me]), aligned, aligned);
      } else {
        copy(piece(src.p[q]), reinterpret_cast<Byte*>(half_of(ps, q, e) + me * region), aligned,
             true);
      }
    }
    if (!block_barrier(ps, flag_value(e, 0))) return finish_op(ps, r.last);
    const char* mine = half_of(ps, me, e);
    for (int q = 0; q < world; ++q)
      if (q != me && dst.p[q])
        copy(reinterpret_cast<const Byte*>(mine + q * region), piece(dst.p[q]), true, aligned);
  }
  finish_op(ps, r.last);
}

// LL exchange: 8 payload bytes per 16-byte line with flags; receivers poll, no barrier.
__global__ void __launch_bounds__(kThreads) exchange_ll_kernel(PeerSet ps, PtrList src, PtrList dst,
                                                                int64_t n) {
  const unsigned long long epoch = begin_op(ps);
  const LLFlags flag = ll_flag(ps, epoch);
  const int me = ps.rank, world = ps.world;
  const int64_t lines = (n + 7) / 8;
  const uint64_t region = align256(static_cast<uint64_t>(lines) * 16);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t l = first; l < lines; l += stride) {
    for (int q = 0; q < world; ++q) {
      if (q == me || !src.p[q]) continue;
      const Byte* from = reinterpret_cast<const Byte*>(src.p[q]) + l * 8;
      uint32_t d[2] = {0, 0};
      if (l * 8 + 8 <= n && (reinterpret_cast<uintptr_t>(from) & 7) == 0) {
        uint2 u = *reinterpret_cast<const uint2*>(from);
        d[0] = u.x;
        d[1] = u.y;
      } else {
        Byte b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int k = 0; k < 8 && l * 8 + k < n; ++k) b[k] = from[k];
        memcpy(d, b, 8);
      }
      st_ll(half_of(ps, q, epoch) + me * region + l * 16, d[0], d[1], flag);
    }
  }
  if (src.p[me] && dst.p[me] && src.p[me] != dst.p[me]) {
    const bool al = ((reinterpret_cast<uintptr_t>(src.p[me]) | reinterpret_cast<uintptr_t>(dst.p[me])) & 15) == 0;
    copy_block(reinterpret_cast<const Byte*>(src.p[me]), reinterpret_cast<Byte*>(dst.p[me]), n, al, al);
  }
  const char* mine = half_of(ps, me, epoch);
  bool ok = true;  // every thread must reach finish_op (it synchronises the block)
  for (int q = 0; q < world && ok; ++q) {
    if (q == me || !dst.p[q]) continue;
    for (int64_t l = first; l < lines; l += stride) {
      uint32_t d[2];
      if (!ld_ll(ps, mine + q * region + l * 16, flag, q, d[0], d[1])) {
        ok = false;
        break;
      }
      Byte* to = reinterpret_cast<Byte*>(dst.p[q]) + l * 8;
      if (l * 8 + 8 <= n && (reinterpret_cast<uintptr_t>(to) & 7) == 0) {
        *reinterpret_cast<uint2*>(to) = make_uint2(d[0], d[1]);
      } else {
        Byte b[8];
        memcpy(b, d, 8);
        for (int k = 0; k < 8 && l * 8 + k < n; ++k) to[k] = b[k];
      }
    }
  }
  finish_op(ps, epoch);
}

}  // namespace

void launch_exchange(const PeerSet& ps, const PtrList& src, const PtrList& dst, int64_t nbytes,
                     int64_t chunk, bool aligned, int blocks, cudaStream_t s) {
  if (nbytes > chunk)
    launch_kernel(exchange_kernel<true>, blocks, kThreads, s, ps, src, dst, nbytes, aligned, chunk);
  else
    launch_kernel(exchange_kernel<false>, blocks, kThreads, s, ps, src, dst, nbytes, aligned, chunk);
}

void launch_exchange_ll(const PeerSet& ps, const PtrList& src, const PtrList& dst, int64_t nbytes,
                        int blocks, cudaStream_t s) {
  launch_kernel(exchange_ll_kernel, blocks, ll_threads(), s, ps, src, dst, nbytes);
}

void preload_exchange_kernels() {
  const PeerSet ps{};
  const PtrList none{};
  launch_exchange(ps, none, none, 0, 0, true, 1, nullptr);  // one round
  launch_exchange(ps, none, none, 2, 1, true, 1, nullptr);  // rounds
  launch_exchange_ll(ps, none, none, 0, 1, nullptr);
}

}  // namespace commx::cuda
