// The fused low-precision round kernel (see lowp_kernels.h), included by one translation unit per
// element type (lowp_kernels_<type>.cu) so that the three compile in parallel. Work unit: one warp
// encodes, reduces or decodes a pair of adjacent codec blocks (blocks 2u and 2u+1); block b of
// threads owns units b*kWarps .. b*kWarps+kWarps-1, then every gridDim-th group after that,
// identically on every rank and in every phase, so a per-block barrier orders exactly the units it
// needs. A pair of full 256-value blocks takes the fast path (16 values per lane in groups of 16
// bytes, each group's accesses coalesced across the warp, the next unit's loads in flight:
// fp8_device.cuh "Pairs"); other blocks go one at a time through encode_block_warp. Slot layout
// of one encoded chunk of n values in nb blocks: nb scale words, codes from code_off(nb) (4 * nb
// rounded up to 16, so that codes are 16-byte aligned), a second term (two-term gather) from
// enc_bytes(n), all placed for the op's chunk (the most a round holds), so a short last round
// puts every block where a whole one does. Instantiated per world size 2 and 4 and once for any
// size. Built with --fmad=false: every float step rounds like the host path.
// Layer: backends (cuda).
#pragma once

#include <algorithm>

#include "commx/env.h"
#include "cuda/launch.cuh"
#include "cuda/lowp_kernels.h"
#include "cuda/lowp_lines.cuh"
#include "cuda/sync_device.cuh"
#include "lowp/cuda/fp8_device.cuh"

namespace commx::cuda {
namespace {

namespace g = lowp::gpu;
constexpr int kWarps = kThreads / 32;
static_assert(kMaxRanks == g::kMaxDsts, "one destination per rank");

__device__ __forceinline__ int64_t blocks_of(int64_t n, int64_t b) { return (n + b - 1) / b; }
__device__ __forceinline__ int64_t align16(int64_t x) { return (x + 15) & ~int64_t(15); }
// Where the codes of a chunk of nb blocks start in a slot.
__device__ __forceinline__ int64_t code_off(int64_t nb) { return align16(4 * nb); }
// Bytes of one encoded chunk in a slot (the second term of a two-term gather starts there).
__device__ __forceinline__ int64_t enc_bytes(int64_t n, int64_t b) {
  return code_off(blocks_of(n, b)) + align16(n);
}
// Pairs of full 256-value blocks among the n values of a chunk (the fast path's units).
__device__ __forceinline__ int64_t full_pairs(int64_t n, int64_t block) {
  return block == 256 ? n / 512 : 0;
}
__device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

__device__ __forceinline__ uint8_t* slot(const PeerSet& ps, int r, uint64_t off, uint64_t cap,
                                         int p) {
  return reinterpret_cast<uint8_t*>(ps.data[r]) + off + static_cast<uint64_t>(p) * cap;
}

// The receive slot that `receiver` keeps for what `sender` sends it. all_gather: one per rank (a
// rank decodes its own codes too); the other modes: one per peer, by the sender's distance after
// the receiver (no slot for the rank itself, so the chunk of a round is that much larger).
__device__ __forceinline__ int recv_slot(LowpMode mode, int sender, int receiver, int world) {
  return mode == LowpMode::kAllGather ? sender : (sender - receiver + world) % world - 1;
}

// Units (pairs of codec blocks) of this warp among nu:
// j = (blockIdx.x + t * gridDim.x) * kWarps + warp.
#define FOR_UNITS(j, nb)                                                                      \
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); j < (nb); \
       j += static_cast<int64_t>(gridDim.x) * kWarps)

// This lane's 16 values of pair u of `src`: one load per group where 16-byte aligned (`vec`).
template <typename T>
__device__ __forceinline__ void fetch_values16(const T* src, int64_t u, bool vec,
                                               g::Raw16<T>& raw) {
  const T* p = src + u * 512;
  if (vec) {
    g::fetch16<T>(p, raw);
    return;
  }
  T* h = reinterpret_cast<T*>(raw.q);
#pragma unroll
  for (int j = 0; j < 16; ++j) h[j] = p[g::pair_value_offset<g::kGroupOf<T>>(j)];
}

// P1 over the pairs 0..npairs-1 of full blocks of `src` (the units FOR_UNITS gives this warp):
// the next unit's values are loaded before this one is encoded, so a warp keeps its loads in
// flight while it computes. With `ls`, the codes go as the warp's line stream at `line_off` of
// d's slots (lowp_lines.cuh).
template <typename T, bool kE5, bool kSR, typename Dsts>
__device__ __forceinline__ void encode_pairs(const T* src, int64_t npairs, bool vec,
                                             const Dsts& d, const LowpRound& r, int64_t sr_off,
                                             g::StatAcc* st, LineStream* ls = nullptr,
                                             uint64_t line_off = 0) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * kWarps;
  int64_t u = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (u >= npairs) return;
  g::Raw16<T> next;
  fetch_values16<T>(src, u, vec, next);
  for (;;) {
    float v[16];
    g::unpack16<T>(next, v);
    const int64_t un = u + step;
    if (un < npairs) fetch_values16<T>(src, un, vec, next);
    const g::PairCode pc = g::scale_pair<kE5>(v);
    const uint64_t idx = static_cast<uint64_t>(sr_off + u * 512);
    const uint4 w = g::encode16<kE5, kSR, g::kGroupOf<T>>(v, pc, r.seed, r.sr1, idx, st);
    if (ls) {
      stage_term(*ls, pc.words(), w);
      send_lines(*ls, d, line_off, un >= npairs);
    } else {
      g::store_pair<g::kGroupOf<T>>(d, u, pc, w);
    }
    if (un >= npairs) return;
    u = un;
  }
}

// P1 of one destination set: encodes the n elements at `src` into `d` (slots laid out for
// `lay_nb` blocks), pair by pair; `sr_off`: the stochastic-rounding index of element 0.
template <typename T, bool kE5, typename Dsts>
__device__ __forceinline__ void encode_units(const char* src, int64_t n, int64_t block,
                                             int64_t lay_nb, Dsts d, const LowpRound& r,
                                             int64_t sr_off, bool sr, g::StatAcc* st) {
  const int64_t nb = blocks_of(n, block);
  d.code_off = code_off(lay_nb);
  const T* x0 = reinterpret_cast<const T*>(src);
  const int64_t nfp = aligned16(x0) ? full_pairs(n, block) : 0;
  if (sr)
    encode_pairs<T, kE5, true>(x0, nfp, true, d, r, sr_off, st);
  else
    encode_pairs<T, kE5, false>(x0, nfp, true, d, r, sr_off, st);
  FOR_UNITS(u, (nb + 1) / 2) {
    if (u < nfp) continue;
    for (int64_t j = 2 * u; j < nb && j < 2 * u + 2; ++j) {
      const T* x = x0 + j * block;
      const g::BufferSrc<T> in{x, (reinterpret_cast<uintptr_t>(x) % (4 * sizeof(T))) == 0,
                               min(block, n - j * block)};
      const uint64_t idx0 = static_cast<uint64_t>(sr_off + j * block);
      if (sr)
        g::encode_block_warp<kE5, true>(in, in.m, j, nb, block, d, st, r.seed, r.sr1, idx0);
      else
        g::encode_block_warp<kE5, false>(in, in.m, j, nb, block, d, st, r.seed, r.sr1, idx0);
    }
  }
}

// The sources of an owner's pair u: its own 16 values per lane and each peer's 16 codes and the
// pair's two scale words. kW: the world size when known at compile time (0: any, arrays indexed
// at run time).
template <typename T, int kW>
struct PairRaw {
  static constexpr int kN = kW ? kW : kMaxRanks;
  g::Raw16<T> own;
  uint4 c[kN];
  uint2 sb[kN];
};

// Loads pair u's sources (whole warp), a group at a time (g::pair_offset); `own` with one load
// per group where 16-byte aligned.
template <typename T, int kW>
__device__ __forceinline__ void fetch_pair(const g::ReduceSrc& rs, bool own_vec, int64_t u,
                                           PairRaw<T, kW>& raw, bool codes = true) {
  constexpr int kN = kW ? kW : kMaxRanks;
  fetch_values16<T>(static_cast<const T*>(rs.own), u, own_vec, raw.own);
  if (!codes) return;
#pragma unroll (kW ? kW : 1)
  for (int p = 0; p < kN; ++p) {
    if (p >= (kW ? kW : rs.world)) break;
    if (p == rs.rank) continue;
    raw.c[p] = g::load_pair_codes<g::kGroupOf<T>>(rs.recv[p] + rs.code_off, u);
    raw.sb[p] = *reinterpret_cast<const uint2*>(rs.recv[p] + 8 * u);
  }
}

// The reduced values of a pair: acc = 0, then every rank's value in rank order (the host path's
// order), AVG divides once.
template <typename T, bool kE5, int kW>
__device__ __forceinline__ void sum_pair(const g::ReduceSrc& rs, const PairRaw<T, kW>& raw,
                                         float v[16]) {
  constexpr int kN = kW ? kW : kMaxRanks;
  const int world = kW ? kW : rs.world;
#pragma unroll
  for (int j = 0; j < 16; ++j) v[j] = 0.0f;
#pragma unroll (kW ? kW : 1)
  for (int p = 0; p < kN; ++p) {
    if (p >= world) break;
    float x[16];
    if (p == rs.rank)
      g::unpack16<T>(raw.own, x);
    else
      g::decode16<kE5>(raw.c[p], raw.sb[p], x);
#pragma unroll
    for (int j = 0; j < 16; ++j) v[j] = __fadd_rn(v[j], x[j]);
  }
  if (rs.avg) {
#pragma unroll
    for (int j = 0; j < 16; ++j) v[j] = __fdiv_rn(v[j], static_cast<float>(world));
  }
}

// Stores this lane's 16 values of the pair at p (its first element): a store per group where
// 16-byte aligned.
template <typename T>
__device__ __forceinline__ void store_values16(T* p, const float v[16]) {
  if (aligned16(p)) {
    g::store16<T>(p, v);
    return;
  }
#pragma unroll
  for (int j = 0; j < 16; ++j) g::store_f<T>(p, g::pair_value_offset<g::kGroupOf<T>>(j), v[j]);
}

// Unit t of this warp from the peer's P1 stream `in` (2 ranks) into raw: false after a timeout,
// abort or mismatch.
template <typename T, int kW>
__device__ __forceinline__ bool take_peer_pair(const PeerSet& ps, InLines& in, int64_t t,
                                               PairRaw<T, kW>& raw) {
  constexpr int kN = kW ? kW : kMaxRanks;
  if (!recv_lines(in.s, ps, in.src, in.total, (t + 1) * kTermBytes, in.peer)) return false;
  uint2 sb;
  uint4 w;
  take_term(in.s, t * kTermBytes, sb, w);
#pragma unroll (kW ? kW : 1)
  for (int p = 0; p < kN; ++p)  // static indices: the arrays stay in registers
    if (p == in.peer) raw.c[p] = w, raw.sb[p] = sb;
  return true;
}

// P2's loop over the owner's full pairs 0..npairs-1 (the units FOR_UNITS gives this warp): each
// pair's sum in rank order goes to body(u, v); the next pair's sources are loaded before the body
// runs, so a warp keeps its loads in flight while it computes. With `in` (2 ranks), the peer's
// codes come from its P1 line stream as they land. False after a timeout, abort or mismatch.
template <typename T, bool kE5, int kW, typename Body>
__device__ __forceinline__ bool for_each_reduced_pair(const PeerSet& ps, const g::ReduceSrc& rs,
                                                      int64_t npairs, InLines* in, Body&& body) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * kWarps;
  int64_t u = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (u >= npairs) return true;
  const bool own_vec = aligned16(rs.own);
  PairRaw<T, kW> raw;
  fetch_pair<T, kW>(rs, own_vec, u, raw, !in);
  for (int64_t t = 0;; ++t) {
    if (in && !take_peer_pair<T, kW>(ps, *in, t, raw)) return false;
    float v[16];
    sum_pair<T, kE5, kW>(rs, raw, v);
    const int64_t un = u + step;
    if (un < npairs) fetch_pair<T, kW>(rs, own_vec, un, raw, !in);
    body(u, v);
    if (un >= npairs) return true;
    u = un;
  }
}

// Whether P2 of an all_reduce finishes unit u of the owner's slice itself (a pair of full
// 256-value blocks: the owner decodes the codes it just made from registers), so P3 skips it.
__device__ __forceinline__ bool owner_finishes(int64_t u, int64_t n, int64_t block) {
  return u < full_pairs(n, block);
}

// Units of this warp among npairs (FOR_UNITS).
__device__ __forceinline__ int64_t warp_units(int64_t npairs) {
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  return first < npairs ? (npairs - first + warps - 1) / warps : 0;
}

// Where a warp's line stream starts in a gather slot (lines mode), and whether every warp's
// fits in a slot: streams are laid out for the round's longest range, of `most` elements.
struct LineLayout {
  uint64_t off, stride;
  bool fits;
};

__device__ __forceinline__ LineLayout line_layout(const LowpRound& r, int64_t most) {
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  const int64_t units = (most / 512 + warps - 1) / warps;
  const uint64_t stride =
      static_cast<uint64_t>(stream_lines(units, (r.two_term ? 2 : 1) * kTermBytes)) * kLL128Line;
  const uint64_t gw = static_cast<uint64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  return LineLayout{gw * stride, stride, stride * static_cast<uint64_t>(warps) <= r.cap};
}

// P2 of all_reduce over the owner's full pairs: reduce, encode Q1 (and the residual Q2) into the
// peers' gather slots, and write the owner's own result from the codes in registers (what P3
// would decode from its own gather slot: the same bits, one pass less). With `ls`, the codes go
// to the peers as the warp's line stream at `line_off` of their gather slots (d1's).
template <typename T, bool kE5, bool kSR, int kW, typename Dsts>
__device__ __forceinline__ bool reduce_encode_pairs(const PeerSet& ps, const g::ReduceSrc& rs,
                                                    int64_t npairs, const Dsts& d1,
                                                    const Dsts& d2, const LowpRound& r,
                                                    int64_t sr_off, T* out, g::StatAcc* st,
                                                    LineStream* ls, uint64_t line_off,
                                                    InLines* in) {
  auto reduce_encode = [&](int64_t u, float v[16]) {
    const uint64_t idx = static_cast<uint64_t>(sr_off + u * 512);
    const g::PairCode c1 = g::scale_pair<kE5>(v);
    const uint4 w = g::encode16<kE5, kSR, g::kGroupOf<T>>(v, c1, r.seed, r.sr2, idx, st);
    if (ls)
      stage_term(*ls, c1.words(), w);
    else
      g::store_pair<g::kGroupOf<T>>(d1, u, c1, w);
    float o[16];
    g::decode16<kE5>(w, c1.words(), o);
    if (r.two_term) {
      // The residual v - D(Q1) (0 where D(Q1) is not finite), encoded as the second term.
#pragma unroll
      for (int j = 0; j < 16; ++j)
        v[j] = (lowp::f2u(o[j]) & g::kInfBits) != g::kInfBits ? __fsub_rn(v[j], o[j]) : 0.0f;
      const g::PairCode c2 = g::scale_pair<kE5>(v);
      const uint4 w2 = g::encode16<kE5, kSR, g::kGroupOf<T>>(v, c2, r.seed, r.sr2b, idx, st);
      if (ls)
        stage_term(*ls, c2.words(), w2);
      else
        g::store_pair<g::kGroupOf<T>>(d2, u, c2, w2);
      float o2[16];
      g::decode16<kE5>(w2, c2.words(), o2);
#pragma unroll
      for (int j = 0; j < 16; ++j) o[j] = __fadd_rn(o[j], o2[j]);
    }
    if (ls) send_lines(*ls, d1, line_off, false);
    store_values16<T>(out + u * 512, o);
  };
  const bool ok = for_each_reduced_pair<T, kE5, kW>(ps, rs, npairs, in, reduce_encode);
  if (ls) send_lines(*ls, d1, line_off, true);
  return ok;
}

// Where P2 of an all_reduce writes this rank's reduced slice: every rank's gather slot (`all`),
// or every rank but this one, the next first (`peers`: no rank's links take every write at
// once); each with the second term's place (`*2`).
template <int kN>
struct GatherDsts {
  g::EncDstsN<kN> all, all2, peers, peers2;
};

template <int kW>
__device__ __forceinline__ GatherDsts<kW ? kW : kMaxRanks> gather_dsts(const PeerSet& ps,
                                                                        const LowpRound& r,
                                                                        uint64_t base,
                                                                        int64_t code_off,
                                                                        int64_t block) {
  constexpr int kN = kW ? kW : kMaxRanks;
  const int world = kW ? kW : ps.world;
  const uint64_t q1 = enc_bytes(r.chunk, block);
  GatherDsts<kN> d{};
#pragma unroll (kW ? kW : 1)
  for (int q = 0; q < kN; ++q) {
    if (q >= world) break;
    d.all.p[q] = slot(ps, q, base + r.gather_off, r.cap, ps.rank);
    d.all2.p[q] = d.all.p[q] + q1;
    if (q == 0) continue;
    d.peers.p[q - 1] = slot(ps, (ps.rank + q) % world, base + r.gather_off, r.cap, ps.rank);
    d.peers2.p[q - 1] = d.peers.p[q - 1] + q1;
  }
  d.all.count = d.all2.count = world;
  d.peers.count = d.peers2.count = world - 1;
  d.all.code_off = d.all2.code_off = d.peers.code_off = d.peers2.code_off = code_off;
  return d;
}

// P2 for all_reduce: reduce, then encode Q1 (and the residual Q2) into every rank's gather slot
// (`gd`); full pairs go to the peers only (see reduce_encode_pairs). The owner's result goes to
// `out`.
template <typename T, bool kE5, bool kSR, int kW, typename Gather>
__device__ __forceinline__ bool reduce_encode_units(const PeerSet& ps, const LowpRound& r,
                                                    const Gather& gd, const g::ReduceSrc& rs,
                                                    int64_t block, int64_t sr_off, T* out,
                                                    g::StatAcc* st, LineStream* ls,
                                                    uint64_t line_off, InLines* in) {
  const auto& all = gd.all;
  const auto& all2 = gd.all2;
  const int64_t nb = blocks_of(rs.n, block);
  const int64_t nfp = full_pairs(rs.n, block);
  if (!reduce_encode_pairs<T, kE5, kSR, kW>(ps, rs, nfp, gd.peers, gd.peers2, r, sr_off, out, st,
                                            ls, line_off, in))
    return false;
  FOR_UNITS(u, (nb + 1) / 2) {
    if (owner_finishes(u, rs.n, block)) continue;
    for (int64_t j = 2 * u; j < nb && j < 2 * u + 2; ++j) {
      const g::ReducedSrc<T, kE5, kW> a(rs, nb, block, j);
      const uint64_t idx0 = static_cast<uint64_t>(sr_off + j * block);
      const g::BlockCode c1 =
          g::encode_block_warp<kE5, kSR>(a, a.m, j, nb, block, all, st, r.seed, r.sr2, idx0);
      if (r.two_term) {
        const g::ResidualSrc<T, kE5, kSR, kW> res{a, c1, r.seed, r.sr2, idx0};
        g::encode_block_warp<kE5, kSR>(res, a.m, j, nb, block, all2, st, r.seed, r.sr2b, idx0);
      }
    }
  }
  return true;
}

// P2 for reduce_scatter: reduce and round into out.
template <typename T, bool kE5, int kW>
__device__ __forceinline__ void reduce_store_units(const PeerSet& ps, const g::ReduceSrc& rs,
                                                   int64_t block, T* out) {
  const int64_t nb = blocks_of(rs.n, block);
  const int lane = threadIdx.x & 31;
  const int64_t nfp = full_pairs(rs.n, block);
  for_each_reduced_pair<T, kE5, kW>(ps, rs, nfp, nullptr, [&](int64_t u, const float v[16]) {
    store_values16<T>(out + u * 512, v);
  });
  FOR_UNITS(u, (nb + 1) / 2) {
    if (u < nfp) continue;
    for (int64_t j = 2 * u; j < nb && j < 2 * u + 2; ++j) {
      const g::ReducedSrc<T, kE5, kW> a(rs, nb, block, j);
      T* o = out + j * block;
      for (int64_t i = 4 * lane; i < a.m; i += 128) {
        float v[4];
        a.load4(i, i + 4 <= a.m, v);
        for (int k = 0; k < 4 && i + k < a.m; ++k) g::store_f<T>(o, i + k, v[k]);
      }
    }
  }
}

// P3: decodes the n elements encoded at `enc` (two-term: Q1 then Q2; a slot laid out for `lay`
// elements) into `out`; with `skip_owned`, not the units the owner finished in P2.
template <typename T, bool kE5>
__device__ __forceinline__ void decode_units(const uint8_t* enc, int64_t n, int64_t lay,
                                             int64_t block, T* out, bool two_term,
                                             bool skip_owned) {
  const int64_t nb = blocks_of(n, block), lay_codes = code_off(blocks_of(lay, block));
  const uint8_t* codes = enc + lay_codes;
  const uint8_t* enc2 = enc + enc_bytes(lay, block);
  const uint8_t* codes2 = enc2 + lay_codes;
  const int lane = threadIdx.x & 31;
  const int64_t nfp = full_pairs(n, block);
  FOR_UNITS(u, (nb + 1) / 2) {
    if (skip_owned && owner_finishes(u, n, block)) continue;
    if (u < nfp) {  // 16 values per lane in groups (g::pair_offset), coalesced
      const uint4 w = g::load_pair_codes<g::kGroupOf<T>>(codes, u);
      const uint2 sb = *reinterpret_cast<const uint2*>(enc + 8 * u);
      float v[16];
      g::decode16<kE5>(w, sb, v);
      if (two_term) {
        const uint4 w2 = g::load_pair_codes<g::kGroupOf<T>>(codes2, u);
        const uint2 sb2 = *reinterpret_cast<const uint2*>(enc2 + 8 * u);
        float v2[16];
        g::decode16<kE5>(w2, sb2, v2);
#pragma unroll
        for (int k = 0; k < 16; ++k) v[k] = __fadd_rn(v[k], v2[k]);
      }
      store_values16<T>(out + u * 512, v);
      continue;
    }
    for (int64_t j = 2 * u; j < nb && j < 2 * u + 2; ++j) {
      const int64_t off = j * block, m = min(block, n - off);
      const uint32_t sb = g::load_scale(enc, j);
      const uint32_t sb2 = two_term ? g::load_scale(enc2, j) : 0u;
      for (int64_t i = 4 * lane; i < m; i += 128) {
        uint8_t c[4] = {0, 0, 0, 0}, c2[4] = {0, 0, 0, 0};
        if (i + 4 <= m) {  // codes of a slot are 16-byte aligned, blocks multiples of 16
          const uint32_t w = *reinterpret_cast<const uint32_t*>(codes + off + i);
          const uint32_t w2 = two_term ? *reinterpret_cast<const uint32_t*>(codes2 + off + i) : 0u;
          for (int k = 0; k < 4; ++k) c[k] = g::code_of(w, k), c2[k] = g::code_of(w2, k);
        } else {
          for (int k = 0; k < 4 && i + k < m; ++k) {
            c[k] = codes[off + i + k];
            if (two_term) c2[k] = codes2[off + i + k];
          }
        }
        for (int k = 0; k < 4 && i + k < m; ++k) {
          float v = g::decode_one<kE5>(c[k], sb);
          if (two_term) v = __fadd_rn(v, g::decode_one<kE5>(c2[k], sb2));
          g::store_f<T>(out, off + i + k, v);
        }
      }
    }
  }
}

// P3 in lines mode: decodes this warp's units of owner `from`'s n elements (full pairs only) from
// its line stream at `src` into `out`; false after a timeout, abort or mismatch.
template <typename T, bool kE5>
__device__ __forceinline__ bool decode_lines(const PeerSet& ps, const uint8_t* src, int64_t n,
                                             T* out, bool two_term, int from, uint64_t flag) {
  const int64_t npairs = n / 512, warps = static_cast<int64_t>(gridDim.x) * kWarps;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (first >= npairs) return true;
  const int unit = (two_term ? 2 : 1) * kTermBytes;
  const int64_t total = stream_lines(warp_units(npairs), unit);
  LineStream s = line_stream(flag);
  int64_t at = 0;
  for (int64_t u = first; u < npairs; u += warps, at += unit) {
    if (!recv_lines(s, ps, src, total, at + unit, from)) return false;
    uint2 sb;
    uint4 w;
    take_term(s, at, sb, w);
    float v[16];
    g::decode16<kE5>(w, sb, v);
    if (two_term) {
      take_term(s, at + kTermBytes, sb, w);
      float v2[16];
      g::decode16<kE5>(w, sb, v2);
#pragma unroll
      for (int k = 0; k < 16; ++k) v[k] = __fadd_rn(v[k], v2[k]);
    }
    store_values16<T>(out + u * 512, v);
  }
  return true;
}

// The kernel's end: the warp's codec counters, then the op counter.
__device__ __forceinline__ void finish_round(const PeerSet& ps, const LowpRound& r,
                                             unsigned long long epoch, const g::StatAcc& st) {
  if (r.stats) g::flush_stats(r.stats, st);
  finish_op(ps, epoch);
}

// One round of the op: op counter e, elements [c0, c0 + chunk) of every range; false when a
// barrier timed out. kW: the world size when known at compile time (2, 4), 0 for any: the
// peers' pointers and scale words then live in registers.
template <typename T, bool kE5, int kW>
__device__ __forceinline__ bool round_body(const PeerSet& ps, const LowpRound& r, int64_t block,
                                           bool sr, unsigned long long e, int64_t c0,
                                           g::StatAcc* st) {
  constexpr int kN = kW ? kW : kMaxRanks;
  const int me = ps.rank, world = kW ? kW : ps.world;
  const int64_t lay_nb = blocks_of(r.chunk, block);
  auto part = [&](int64_t n) { return max(int64_t(0), min(r.chunk, n - c0)); };
  auto at = [&](const char* p) { return p + c0 * static_cast<int64_t>(sizeof(T)); };
  // Slots in one buffer half per round (r.halves, by op counter e, as the two-shot all_reduce):
  // a block writes into a peer's half of e only once the peer is done with it at e - 2. In this
  // kernel: its barrier of e - 1 met the peer's twin block, which had left e - 2 (the peer's
  // other blocks use other bytes of the slots: each owns the same units in every round). In the
  // first round: this rank's previous kernel, ended before this one started, met every block of
  // the peer at e - 1. No barrier at the op's ends is then needed. Slots over both halves (twice
  // the chunk, one round per launch) need them.
  const uint64_t base = r.halves ? (e & 1ull) * ps.half_bytes : 0;
  // The first round's barrier: every peer's previous kernels have ended (a block can only
  // arrive once its rank's whole previous kernel completed), so their buffers are free.
  if (!r.halves && r.leading && !block_barrier(ps, flag_value(e, 0))) return false;

  // Lines mode (lowp_lines.cuh): all_reduce's gather as line streams, where the op is one round
  // in one buffer half, every owner's range is whole pairs of full blocks and the streams fit; at
  // 2 ranks with r.lines_p1 P1's codes too, and the kernel has no barrier. The same verdict on
  // every rank. One round only: a block's streams cover bytes that other blocks' units take in
  // the slot layout, and blocks of one rank may be a round apart. One half: a round's P1 (the
  // next op's) then writes receive slots no peer still reduces from without barrier 2.
  bool lines = r.lines && r.halves && r.rounds == 1 && r.mode == LowpMode::kAllReduce &&
               block == 256;
  int64_t most = 0;
#pragma unroll (kW ? kW : 1)
  for (int q = 0; q < kN; ++q) {
    if (q >= world) break;
    lines = lines && part(r.n_out[q]) % 512 == 0;
    most = max(most, part(r.n_out[q]));
  }
  const LineLayout ll = line_layout(r, most);
  lines = lines && ll.fits;
  // Without barriers, each op must still wait for its peer (a later op's writes rely on the
  // peer's earlier op having ended): every owner then has at least one pair.
  bool lines1 = lines && r.lines_p1 && world == 2;
#pragma unroll (kW ? kW : 1)
  for (int q = 0; q < kN; ++q)
    if (q < world) lines1 = lines1 && part(r.n_out[q]) >= 512;
  const uint64_t lflag = ll128_flag(ps, e);

  // P1: the next rank first (no rank's links take every write at once).
  if (r.mode == LowpMode::kAllGather) {
    g::EncDstsN<kN> d{};
#pragma unroll (kW ? kW : 1)
    for (int q = 0; q < kN; ++q)
      if (q < world) d.p[q] = slot(ps, (me + q) % world, base + r.recv_off, r.cap, me);
    d.count = world;
    encode_units<T, kE5>(at(r.in[0]), part(r.n_in[0]), block, lay_nb, d, r, r.sr_off1 + c0, sr,
                         st);
  } else {
    for (int k = 1; k < world; ++k) {
      const int q = (me + k) % world;
      g::EncDstsN<1> d{};
      d.p[0] = slot(ps, q, base + r.recv_off, r.cap, recv_slot(r.mode, me, q, world));
      d.count = 1;
      if (lines1) {
        const T* x = reinterpret_cast<const T*>(at(r.in[q]));
        const int64_t np = part(r.n_in[q]) / 512;
        LineStream s = line_stream(lflag);
        if (sr)
          encode_pairs<T, kE5, true>(x, np, aligned16(x), d, r, r.sr_off1 + c0, st, &s, ll.off);
        else
          encode_pairs<T, kE5, false>(x, np, aligned16(x), d, r, r.sr_off1 + c0, st, &s, ll.off);
        continue;
      }
      encode_units<T, kE5>(at(r.in[q]), part(r.n_in[q]), block, lay_nb, d, r, r.sr_off1 + c0,
                           sr, st);
    }
  }
  // P2's sources and destinations are set up before the barrier, so that the first reads of the
  // parameters they come from overlap the wait rather than follow it.
  const bool reduces = r.mode == LowpMode::kAllReduce || r.mode == LowpMode::kReduceScatter;
  g::ReduceSrc rs;  // rs and gd are set (and zeroed) only where used, not in the other modes
  GatherDsts<kN> gd;
  T* out = nullptr;
  if (reduces) {
    rs = g::ReduceSrc{};
    rs.own = at(r.own);
#pragma unroll (kW ? kW : 1)
    for (int p = 0; p < kN; ++p)
      if (p < world && p != me)
        rs.recv[p] = slot(ps, me, base + r.recv_off, r.cap, recv_slot(r.mode, p, me, world));
    rs.rank = me;
    rs.world = world;
    rs.n = part(r.n_own);
    rs.code_off = code_off(lay_nb);
    rs.avg = r.avg;
    out = reinterpret_cast<T*>(const_cast<char*>(at(r.out[me])));
    if (r.mode == LowpMode::kAllReduce) gd = gather_dsts<kW>(ps, r, base, rs.code_off, block);
  }
  if (!lines1 && !block_barrier(ps, flag_value(e, 1))) return false;

  if (reduces) {
    if (r.mode == LowpMode::kReduceScatter) {
      reduce_store_units<T, kE5, kW>(ps, rs, block, out);
    } else {
      LineStream s = line_stream(lflag);
      LineStream* ls = lines ? &s : nullptr;
      InLines in{line_stream_in(lflag), nullptr, 0, 1 - me};  // lines1: 2 ranks
      if (lines1) {
        in.src = slot(ps, me, base + r.recv_off, r.cap, recv_slot(r.mode, in.peer, me, world)) +
                 ll.off;
        in.total = stream_lines(warp_units(rs.n / 512), kTermBytes);
      }
      bool ok;
      if (sr)
        ok = reduce_encode_units<T, kE5, true, kW>(ps, r, gd, rs, block, r.sr_off2 + c0, out, st,
                                                   ls, ll.off, lines1 ? &in : nullptr);
      else
        ok = reduce_encode_units<T, kE5, false, kW>(ps, r, gd, rs, block, r.sr_off2 + c0, out, st,
                                                    ls, ll.off, lines1 ? &in : nullptr);
      if (!ok) return false;
    }
    if (!lines && !block_barrier(ps, flag_value(e, 2))) return false;
  }

  if (r.mode != LowpMode::kReduceScatter) {
    const bool all_reduce = r.mode == LowpMode::kAllReduce;
    const uint64_t area = base + (all_reduce ? r.gather_off : r.recv_off);
    if (lines) {  // the peers' streams (the owner finished its own range in P2)
      for (int k = 1; k < world; ++k) {
        const int q = (me + k) % world;
        if (!decode_lines<T, kE5>(ps, slot(ps, me, area, r.cap, q) + ll.off, part(r.n_out[q]),
                                  reinterpret_cast<T*>(const_cast<char*>(at(r.out[q]))),
                                  r.two_term, q, lflag))
          return false;
      }
    }
    for (int k = 0; k < (lines ? 0 : world); ++k) {
      const int q = (me + k) % world;
      if (q == me && r.mode == LowpMode::kAllToAll) continue;  // copied by the host side
      const int from = all_reduce ? q : recv_slot(r.mode, q, me, world);  // gather slots by owner
      decode_units<T, kE5>(slot(ps, me, area, r.cap, from), part(r.n_out[q]), r.chunk, block,
                           reinterpret_cast<T*>(const_cast<char*>(at(r.out[q]))),
                           all_reduce && r.two_term, all_reduce && q == me);
    }
    // Peers may write these slots again in the next round: all_reduce's next writes follow a
    // barrier that needs this block's arrival; the others need one here.
    if (!r.halves && !all_reduce && !block_barrier(ps, flag_value(e, 2))) return false;
  }
  // all_reduce's last round: peers may still decode their gather slots, which the next op's
  // kernels (buffer halves by op counter) may overwrite.
  if (!r.halves && r.trailing && r.mode == LowpMode::kAllReduce)
    block_barrier(ps, flag_value(e, 3));
  return true;
}

// kMinBlocks: resident blocks per SM the compiler must allow (2: 64 registers, twice the warps to
// hide latency, but the 16 values per lane spill; 1: up to 128 registers, fewer warps).
// COMMX_CUDA_LOWP_BLOCKS_PER_SM picks (default 1). kOneRound: the op is one round (r.rounds ==
// 1); the loop's counters then fold away, leaving the registers that the round's work needs (the
// loop over rounds kept live values that made ops of one round 1-2 us slower). The round stays
// inlined in the loop: as a call of its own it read the kernel's parameters through a pointer,
// into registers, where inlined they are operands of the constant bank (bf16, 2 ranks: 596 / 1184
// bytes of spill stores / loads as a call, 360 / 736 inlined).
template <typename T, bool kE5, int kW, int kMinBlocks, bool kOneRound>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    lowp_round_kernel(const __grid_constant__ PeerSet ps, const __grid_constant__ LowpRound r,
                      int64_t block, bool sr) {
  const unsigned long long epoch = begin_op(ps);
  const int64_t rounds = kOneRound ? 1 : r.rounds;
  const unsigned long long last = epoch + rounds - 1;
  g::StatAcc acc;
  acc.full = r.full_stats;
  g::StatAcc* st = r.stats ? &acc : nullptr;
  if constexpr (kOneRound) {
    if (!round_body<T, kE5, kW>(ps, r, block, sr, epoch, 0, st)) return finish_op(ps, last);
  } else {
    for (int64_t i = 0; i < rounds; ++i)
      if (!round_body<T, kE5, kW>(ps, r, block, sr, epoch + i, i * r.chunk, st))
        return finish_op(ps, last);
  }
  finish_round(ps, r, last, acc);
}

}  // namespace

}  // namespace commx::cuda
