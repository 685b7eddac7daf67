// The FP8 all_reduce of two ranks as line streams (lowp_lines.cuh), a kernel of its own: the
// common case of the general round kernel (lowp_round.cuh) with nothing else in it. In each
// round, each warp
//   P1  encodes its units of the peer's slice and streams them into the peer's receive area;
//   P2  takes the peer's stream unit by unit as it lands, sums in rank order, encodes the sum and
//       streams it into the peer's gather area, and writes its own result from the codes it made;
//   P3  decodes the peer's gather stream into the peer's slice of the output.
// It runs the general kernel's primitives in the same order, so its bits are the same. What it
// leaves out (the other modes and world sizes, tails, stochastic rounding, the two-term gather,
// the slot layout and its barriers) made the general kernel's 2-rank instance 56k instructions
// with a 408-byte stack frame; this one has about 5k and none.
//
// Layout: round i of an op on op counter e takes the buffer half of e + i, as the round kernel's
// rounds do: its first half receives the peer's P1 streams, its second the peer's gather streams,
// warp gw's stream at gw * stride in each. A round holds at most r.line_units units a warp, so an
// op of more takes several rounds in one launch, balanced so that every warp has units in every
// round. A warp meets only its twin warp on the peer: it writes a half again two rounds on, once
// the twin has sent its P1 stream of the round between, hence read everything of the round
// before. Every warp meeting its twin in the last round also means that when a rank's kernel
// has ended, every warp of the peer is past the round before it, whose half the next op writes
// first. (An op of one round needs no such rule: the next op takes the other half, and the one
// after starts only once a kernel that heard from the peer's next kernel has ended.)
// Layer: backends (cuda).
#pragma once

#include "cuda/lowp_round.cuh"

namespace commx::cuda {
namespace {

// Bytes of each of the two areas of a buffer half.
__host__ __device__ inline uint64_t two_rank_area(const PeerSet& ps) {
  return (ps.half_bytes / 2) & ~static_cast<uint64_t>(kLL128Line - 1);
}

// Bytes between two warps' streams when a warp streams up to `units` units.
__host__ __device__ inline uint64_t two_rank_stride(int64_t units) {
  return static_cast<uint64_t>(stream_lines(units, kTermBytes)) * kLL128Line;
}

// The rounds of an op in the two-rank kernel at `grid` blocks: sets r.chunk (the most elements of
// an owner's slice a round moves) and r.rounds, or returns false where the kernel does not take
// the op: an all_reduce in one launch at 2 ranks, line streams allowed, nearest rounding, the
// one-term gather, 256-value codec blocks, both owners' slices whole pairs (at least one), and in
// an op of several rounds a unit of both slices for every warp in every round (see the top of
// this file). It reads only settings and sizes every rank shares, and the grid is the same on
// every rank, so both ranks decide alike.
inline bool two_rank_rounds(const PeerSet& ps, const lowp::CodecConfig& cfg, int grid,
                            LowpRound& r) {
  if (ps.world != 2 || r.mode != LowpMode::kAllReduce || r.line_units <= 0 || !r.leading ||
      !r.trailing || r.two_term || cfg.block != 256 || cfg.stochastic)
    return false;
  const int64_t n0 = r.n_out[0], n1 = r.n_out[1];
  const int64_t most = std::max(n0, n1), least = std::min(n0, n1);
  if (n0 % 512 != 0 || n1 % 512 != 0 || least < 512) return false;
  const int64_t warps = static_cast<int64_t>(grid) * kWarps;
  const int64_t needed = (most / 512 + warps - 1) / warps;  // units a warp in one round
  int64_t units = std::min(needed, r.line_units);
  while (units > 0 && two_rank_stride(units) * static_cast<uint64_t>(warps) > two_rank_area(ps))
    --units;
  if (units == 0) return false;
  if (units == needed) {
    r.chunk = most;
    r.rounds = 1;
    return true;
  }
  // Rounds of equal length in whole pairs (at most `units` a warp); the last is shorter by the
  // rounding, less than a pair for each round before it.
  r.rounds = (most + units * warps * 512 - 1) / (units * warps * 512);
  r.chunk = ((most + r.rounds - 1) / r.rounds + 511) / 512 * 512;
  return least - (r.rounds - 1) * r.chunk >= warps * 512;
}

// P2 over this warp's units of its own slice (npairs pairs at `own`): the peer's term of each
// from its P1 stream `in` as it lands, the sum in rank order (0 + rank 0's + rank 1's, as
// sum_pair), AVG's division, then the sum's codes to the peer's gather area as this warp's
// stream `ls` (at line_off of `gather`) and their decoded values to `out`. The own and the
// peer's values are picked per element rather than by an index on the rank, which kept the
// general kernel's pair in local memory. False after a timeout, abort or mismatch.
template <typename T, bool kE5>
__device__ __forceinline__ bool two_rank_reduce(const PeerSet& ps, const LowpRound& r,
                                                const T* own, int64_t npairs, int64_t sr_off,
                                                InLines& in, LineStream& ls,
                                                const g::EncDstsN<1>& gather, uint64_t line_off,
                                                T* out, g::StatAcc* st) {
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
        v, c, r.seed, r.sr2, static_cast<uint64_t>(sr_off + u * 512), st);
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

// Round `i` of the op (op counter e, elements [c0, c0 + r.chunk) of each slice); false after a
// timeout, abort or mismatch.
template <typename T, bool kE5>
__device__ __forceinline__ bool two_rank_round(const PeerSet& ps, const LowpRound& r,
                                               unsigned long long e, int64_t c0, g::StatAcc* st) {
  const int me = ps.rank, peer = 1 - me;
  auto part = [&](int64_t n) { return max(int64_t(0), min(r.chunk, n - c0)); };
  auto at = [&](const char* p) { return p + c0 * static_cast<int64_t>(sizeof(T)); };
  const uint64_t base = (e & 1ull) * ps.half_bytes, area = two_rank_area(ps);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  const uint64_t off = (static_cast<uint64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5)) *
                       two_rank_stride((r.chunk / 512 + warps - 1) / warps);
  const uint64_t flag = ll128_flag(ps, e);

  // P1 into the peer's receive area.
  g::EncDstsN<1> recv{};
  recv.p[0] = reinterpret_cast<uint8_t*>(ps.data[peer]) + base;
  recv.count = 1;
  {
    const T* x = reinterpret_cast<const T*>(at(r.in[peer]));
    LineStream s = line_stream(flag);
    encode_pairs<T, kE5, false>(x, part(r.n_in[peer]) / 512, aligned16(x), recv, r,
                                r.sr_off1 + c0, st, &s, off);
  }

  // P2 from this rank's receive area into the peer's gather area.
  const int64_t n_own = part(r.n_own);
  InLines in{line_stream_in(flag), reinterpret_cast<const uint8_t*>(ps.data[me]) + base + off,
             stream_lines(warp_units(n_own / 512), kTermBytes), peer};
  g::EncDstsN<1> gather{};
  gather.p[0] = reinterpret_cast<uint8_t*>(ps.data[peer]) + base + area;
  gather.count = 1;
  LineStream s = line_stream(flag);
  if (!two_rank_reduce<T, kE5>(ps, r, reinterpret_cast<const T*>(at(r.own)), n_own / 512,
                               r.sr_off2 + c0, in, s, gather, off,
                               reinterpret_cast<T*>(const_cast<char*>(at(r.out[me]))), st))
    return false;

  // P3 from the peer's stream in this rank's gather area.
  return decode_lines<T, kE5>(
      ps, reinterpret_cast<const uint8_t*>(ps.data[me]) + base + area + off, part(r.n_out[peer]),
      reinterpret_cast<T*>(const_cast<char*>(at(r.out[peer]))), false, peer, flag);
}

// kOneRound: the op is one round (the loop's counters fold away).
template <typename T, bool kE5, bool kOneRound>
__global__ void __launch_bounds__(kThreads, 1)
    lowp_two_rank_kernel(const __grid_constant__ PeerSet ps, const __grid_constant__ LowpRound r) {
  const unsigned long long epoch = begin_op(ps);
  const int64_t rounds = kOneRound ? 1 : r.rounds;
  const unsigned long long last = epoch + rounds - 1;
  // The counters always go to acc (a pointer the compiler sees is never null keeps them in
  // registers); finish_round adds them to r.stats where there is one.
  g::StatAcc acc;
  acc.full = r.full_stats;
  for (int64_t i = 0; i < rounds; ++i)
    if (!two_rank_round<T, kE5>(ps, r, epoch + i, i * r.chunk, &acc)) return finish_op(ps, last);
  finish_round(ps, r, last, acc);
}

// Launches the op as the two-rank kernel where two_rank_rounds takes it; false where it does not
// (the caller launches the round kernel). While preloading kernels it loads these and returns
// false, so that the others are loaded too.
template <typename T, bool kE5>
bool launch_two_rank(const PeerSet& ps, const LowpRound& r, const lowp::CodecConfig& cfg,
                     int blocks, cudaStream_t s) {
  auto* one = lowp_two_rank_kernel<T, kE5, true>;
  auto* many = lowp_two_rank_kernel<T, kE5, false>;
  static const int fit = resident_blocks(one, kThreads);
  const int grid = std::min(blocks, fit);
  if (t_kernel_preload) {
    launch_kernel(one, grid, kThreads, s, ps, r);
    launch_kernel(many, grid, kThreads, s, ps, r);
    return false;
  }
  LowpRound x = r;
  if (!two_rank_rounds(ps, cfg, grid, x)) return false;
  launch_kernel(x.rounds == 1 ? one : many, grid, kThreads, s, ps, x);
  return true;
}

}  // namespace
}  // namespace commx::cuda
