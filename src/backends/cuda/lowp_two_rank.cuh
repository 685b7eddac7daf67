// The FP8 all_reduce of two ranks as line streams (lowp_lines.cuh), a kernel of its own: the
// common case of the general round kernel (lowp_round.cuh) with nothing else in it. Each warp
//   P1  encodes its units of the peer's slice and streams them into the peer's receive slot;
//   P2  takes the peer's stream unit by unit as it lands, sums in rank order, encodes the sum and
//       streams it into the peer's gather slot, and writes its own result from the codes it made;
//   P3  decodes the peer's gather stream into the peer's slice of the output.
// It runs the general kernel's primitives in the same order, so its bits are the same. What it
// leaves out (the other modes, world sizes and rounds, tails, stochastic rounding, the two-term
// gather, the barriers) made the general kernel's 2-rank instance 56k instructions with a 408-byte
// stack frame. Layer: backends (cuda).
#pragma once

#include "cuda/lowp_round.cuh"

namespace commx::cuda {
namespace {

// Elements of range n that a one-round op moves (the general kernel's part(n) at c0 = 0).
__host__ __device__ inline int64_t one_round_part(const LowpRound& r, int64_t n) {
  return n < r.chunk ? n : r.chunk;
}

// Whether an op runs as the two-rank kernel at `grid` blocks: an all_reduce of one round in one
// buffer half with line streams for both pushes, nearest rounding, the one-term gather, 256-value
// codec blocks, every owner's range whole pairs (at least one), and every warp's stream in a slot.
// It reads only settings and sizes every rank shares, and the grid is the same on every rank, so
// both ranks decide alike.
inline bool two_rank_lines_fit(const PeerSet& ps, const LowpRound& r, const lowp::CodecConfig& cfg,
                               int grid) {
  if (ps.world != 2 || r.mode != LowpMode::kAllReduce || !r.lines || !r.lines_p1 || !r.halves ||
      r.rounds != 1 || r.two_term || cfg.block != 256 || cfg.stochastic)
    return false;
  int64_t most = 0;
  for (int q = 0; q < 2; ++q) {
    const int64_t n = one_round_part(r, r.n_out[q]);
    if (n < 512 || n % 512 != 0) return false;
    most = n > most ? n : most;
  }
  const int64_t warps = static_cast<int64_t>(grid) * kWarps;
  const int64_t units = (most / 512 + warps - 1) / warps;
  return static_cast<uint64_t>(stream_lines(units, kTermBytes)) * kLL128Line *
             static_cast<uint64_t>(warps) <=
         r.cap;
}

// P2 over this warp's units of its own slice (npairs pairs at `own`): the peer's term of each
// from its P1 stream `in` as it lands, the sum in rank order (0 + rank 0's + rank 1's, as
// sum_pair), AVG's division, then the sum's codes to the peer's gather slot as this warp's
// stream `ls` (at line_off of `gather`) and their decoded values to `out`. The own and the
// peer's values are picked per element rather than by an index on the rank, which kept the
// general kernel's pair in local memory. False after a timeout, abort or mismatch.
template <typename T, bool kE5>
__device__ __forceinline__ bool two_rank_reduce(const PeerSet& ps, const LowpRound& r,
                                                const T* own, int64_t npairs, InLines& in,
                                                LineStream& ls, const g::EncDstsN<1>& gather,
                                                uint64_t line_off, T* out, g::StatAcc* st) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * kWarps;
  int64_t u = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (u >= npairs) return true;
  const bool vec = aligned16(own), own_first = ps.rank == 0;
  g::Raw16<T> next;
  fetch_values16<T>(own, u, vec, next);
  for (int64_t t = 0;; ++t) {
    if (!recv_lines(in.s, ps, in.src, in.total, (t + 1) * kTermBytes, in.peer)) return false;
    uint2 sb;
    uint4 w;
    take_term(in.s, t * kTermBytes, sb, w);
    float mine[16], theirs[16], v[16];
    g::unpack16<T>(next, mine);
    g::decode16<kE5>(w, sb, theirs);
    const int64_t un = u + step;
    if (un < npairs) fetch_values16<T>(own, un, vec, next);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const float x0 = own_first ? mine[j] : theirs[j], x1 = own_first ? theirs[j] : mine[j];
      v[j] = __fadd_rn(__fadd_rn(0.0f, x0), x1);
    }
    if (r.avg) {
#pragma unroll
      for (int j = 0; j < 16; ++j) v[j] = __fdiv_rn(v[j], 2.0f);
    }
    const g::PairCode c = g::scale_pair<kE5>(v);
    const uint4 q = g::encode16<kE5, false, g::kGroupOf<T>>(
        v, c, r.seed, r.sr2, static_cast<uint64_t>(r.sr_off2 + u * 512), st);
    stage_term(ls, c.words(), q);
    send_lines(ls, gather, line_off, false);
    float o[16];
    g::decode16<kE5>(q, c.words(), o);
    store_values16<T>(out + u * 512, o);
    if (un >= npairs) break;
    u = un;
  }
  send_lines(ls, gather, line_off, true);
  return true;
}

// The op's phases (see the top of this file); false after a timeout, abort or mismatch.
template <typename T, bool kE5>
__device__ __forceinline__ bool two_rank_body(const PeerSet& ps, const LowpRound& r,
                                              unsigned long long e, g::StatAcc* st) {
  const int me = ps.rank, peer = 1 - me;
  const uint64_t base = (e & 1ull) * ps.half_bytes;
  const int64_t n_peer = one_round_part(r, r.n_out[peer]), n_me = one_round_part(r, r.n_out[me]);
  const LineLayout ll = line_layout(r, max(n_peer, n_me));
  const uint64_t flag = ll128_flag(ps, e);

  // P1 into the peer's receive slot (a rank has one there, for its only peer).
  g::EncDstsN<1> recv{};
  recv.p[0] = slot(ps, peer, base + r.recv_off, r.cap, 0);
  recv.count = 1;
  {
    const T* x = reinterpret_cast<const T*>(r.in[peer]);
    LineStream s = line_stream(flag);
    encode_pairs<T, kE5, false>(x, one_round_part(r, r.n_in[peer]) / 512, aligned16(x), recv, r,
                                r.sr_off1, st, &s, ll.off);
  }

  // P2 from this rank's receive slot into the peer's gather slot for this rank.
  const int64_t n_own = one_round_part(r, r.n_own);
  InLines in{line_stream_in(flag), slot(ps, me, base + r.recv_off, r.cap, 0) + ll.off,
             stream_lines(warp_units(n_own / 512), kTermBytes), peer};
  g::EncDstsN<1> gather{};
  gather.p[0] = slot(ps, peer, base + r.gather_off, r.cap, me);
  gather.count = 1;
  LineStream s = line_stream(flag);
  if (!two_rank_reduce<T, kE5>(ps, r, reinterpret_cast<const T*>(r.own), n_own / 512, in, s,
                               gather, ll.off, reinterpret_cast<T*>(r.out[me]), st))
    return false;

  // P3 from the peer's stream in this rank's gather slot for the peer.
  return decode_lines<T, kE5>(ps, slot(ps, me, base + r.gather_off, r.cap, peer) + ll.off, n_peer,
                              reinterpret_cast<T*>(r.out[peer]), false, peer, flag);
}

template <typename T, bool kE5>
__global__ void __launch_bounds__(kThreads, 1)
    lowp_two_rank_kernel(const __grid_constant__ PeerSet ps, const __grid_constant__ LowpRound r) {
  const unsigned long long epoch = begin_op(ps);
  // The counters always go to acc (a pointer the compiler sees is never null keeps them in
  // registers); finish_round adds them to r.stats where there is one.
  g::StatAcc acc;
  acc.full = r.full_stats;
  if (!two_rank_body<T, kE5>(ps, r, epoch, &acc)) return finish_op(ps, epoch);
  finish_round(ps, r, epoch, acc);
}

// Launches the op as the two-rank kernel where two_rank_lines_fit; false where it does not (the
// caller launches the general kernel). While preloading kernels it loads this one and returns
// false, so that the others are loaded too.
template <typename T, bool kE5>
bool launch_two_rank(const PeerSet& ps, const LowpRound& r, const lowp::CodecConfig& cfg,
                     int blocks, cudaStream_t s) {
  auto* kernel = lowp_two_rank_kernel<T, kE5>;
  static const int fit = resident_blocks(kernel, kThreads);
  const int grid = std::min(blocks, fit);
  if (t_kernel_preload) {
    launch_kernel(kernel, grid, kThreads, s, ps, r);
    return false;
  }
  if (!two_rank_lines_fit(ps, r, cfg, grid)) return false;
  launch_kernel(kernel, grid, kThreads, s, ps, r);
  return true;
}

}  // namespace
}  // namespace commx::cuda
