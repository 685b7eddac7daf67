// The fused low-precision round kernel (see lowp_kernels.h), included by one translation unit per
// element type (lowp_kernels_<type>.cu) so that the three compile in parallel. Work unit: one warp
// encodes, reduces or decodes one codec block; block b of threads owns units b*kWarps ..
// b*kWarps+kWarps-1, then every gridDim-th group after that, identically on every rank and in
// every phase, so a per-block barrier orders exactly the units it needs. Instantiated per world
// size 2 and 4 and once for any size. Built with --fmad=false: every float step rounds like the
// host path.
// Layer: backends (cuda).
#pragma once

#include "commx/env.h"
#include "cuda/launch.cuh"
#include "cuda/lowp_kernels.h"
#include "cuda/sync_device.cuh"
#include "lowp/cuda/fp8_device.cuh"

namespace commx::cuda {
namespace {

namespace g = lowp::gpu;
constexpr int kWarps = kThreads / 32;
static_assert(kMaxRanks == g::kMaxDsts, "one destination per rank");

__device__ __forceinline__ int64_t blocks_of(int64_t n, int64_t b) { return (n + b - 1) / b; }
// lowp::encoded_bytes on the device: nb scales, then n codes.
__device__ __forceinline__ int64_t enc_bytes(int64_t n, int64_t b) { return 4 * blocks_of(n, b) + n; }

__device__ __forceinline__ uint8_t* slot(const PeerSet& ps, int r, uint64_t off, uint64_t cap,
                                         int p) {
  return reinterpret_cast<uint8_t*>(ps.data[r]) + off + static_cast<uint64_t>(p) * cap;
}

// Codec blocks of this warp among nb: j = (blockIdx.x + t * gridDim.x) * kWarps + warp.
#define FOR_UNITS(j, nb)                                                                      \
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); j < (nb); \
       j += static_cast<int64_t>(gridDim.x) * kWarps)

// P1 over the full 256-element blocks 0..nfull-1 of `src` (the units FOR_UNITS gives this
// warp): the next unit's values are loaded before this one is encoded, so a warp keeps a load
// in flight while it computes.
template <typename T, bool kE5, bool kSR, typename Dsts>
__device__ __forceinline__ void encode_full_units(const T* src, int64_t nfull, int64_t nb,
                                                  const Dsts& d, const LowpRound& r,
                                                  g::StatAcc* st) {
  const int64_t i0 = 8 * (threadIdx.x & 31);
  const int64_t step = static_cast<int64_t>(gridDim.x) * kWarps;
  int64_t j = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (j >= nfull) return;
  const bool vec = (reinterpret_cast<uintptr_t>(src) % (4 * sizeof(T))) == 0;
  float next[8];
  g::load8v<T>(src + j * 256 + i0, vec, next);
  for (;;) {
    float v[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = next[k];
    const int64_t jn = j + step;
    if (jn < nfull) g::load8v<T>(src + jn * 256 + i0, vec, next);
    const g::BlockCode bc = g::scale_full256<kE5>(v);
    uint32_t w[2];
    g::encode8<kE5, kSR>(v, bc, r.seed, r.sr1, static_cast<uint64_t>(r.sr_off1 + j * 256 + i0), w,
                         st);
    g::store_full256(d, j, nb, bc.sb, w);
    if (jn >= nfull) return;
    j = jn;
  }
}

// P1 of one destination set: encodes the n elements at `src` block by block into `d`.
template <typename T, bool kE5, typename Dsts>
__device__ __forceinline__ void encode_units(const char* src, int64_t n, int64_t block,
                                             const Dsts& d, const LowpRound& r, bool sr,
                                             g::StatAcc* st) {
  const int64_t nb = blocks_of(n, block);
  // Full blocks of the default size take the pipelined path (the codes of a slot are 4-byte
  // aligned: slots start at multiples of 256 bytes and 4 * nb is a multiple of 4).
  const int64_t nfull = block == 256 ? n / 256 : 0;
  const T* x0 = reinterpret_cast<const T*>(src);
  if (sr)
    encode_full_units<T, kE5, true>(x0, nfull, nb, d, r, st);
  else
    encode_full_units<T, kE5, false>(x0, nfull, nb, d, r, st);
  FOR_UNITS(j, nb) {
    if (j < nfull) continue;
    const T* x = x0 + j * block;
    const g::BufferSrc<T> in{x, (reinterpret_cast<uintptr_t>(x) % (4 * sizeof(T))) == 0,
                             min(block, n - j * block)};
    const uint64_t idx0 = static_cast<uint64_t>(r.sr_off1 + j * block);
    if (sr)
      g::encode_block_warp<kE5, true>(in, in.m, j, nb, block, d, st, r.seed, r.sr1, idx0);
    else
      g::encode_block_warp<kE5, false>(in, in.m, j, nb, block, d, st, r.seed, r.sr1, idx0);
  }
}

// Stores 8 values at p (16-byte aligned when `vec`, p being 8 elements into an aligned run).
template <typename T>
__device__ __forceinline__ void store8(T* p, const float v[8], bool vec) {
  if constexpr (sizeof(T) == 4) {
    if (vec) {
      reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
      reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
      return;
    }
  } else {
    if (vec) {
      T h[8];
      for (int k = 0; k < 8; ++k) g::store_f<T>(h, k, v[k]);
      *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(h);
      return;
    }
  }
  for (int k = 0; k < 8; ++k) g::store_f<T>(p, k, v[k]);
}

// Whether P2 of an all_reduce finishes unit j of the owner's slice itself (a full 256-element
// block: the owner decodes the codes it just made from registers), so P3 skips it.
__device__ __forceinline__ bool owner_finishes(int64_t j, int64_t n, int64_t block) {
  return block == 256 && (j + 1) * 256 <= n;
}

// P2 of a full block of an all_reduce from its reduced values v: encode Q1 (and the residual
// Q2) into the peers' gather slots, and write the owner's own result from the codes in registers
// (what P3 would decode from its own gather slot: the same bits, one pass less).
template <typename T, bool kE5, bool kSR, typename Dsts>
__device__ __forceinline__ void encode_finish_full256(const float v[8], int64_t blk, int64_t nb,
                                                      const Dsts& d1, const Dsts& d2,
                                                      const LowpRound& r, uint64_t idx, T* out,
                                                      g::StatAcc* st) {
  const g::BlockCode c1 = g::scale_full256<kE5>(v);
  uint32_t w[2];
  g::encode8<kE5, kSR>(v, c1, r.seed, r.sr2, idx, w, st);
  g::store_full256(d1, blk, nb, c1.sb, w);
  float o[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) o[k] = g::decode_one<kE5>(g::code_of(w[k / 4], k % 4), c1.sb);
  if (r.two_term) {
    float res[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) res[k] = g::residual_of<kE5>(v[k], g::code_of(w[k / 4], k % 4), c1);
    const g::BlockCode c2 = g::scale_full256<kE5>(res);
    uint32_t w2[2];
    g::encode8<kE5, kSR>(res, c2, r.seed, r.sr2b, idx, w2, st);
    g::store_full256(d2, blk, nb, c2.sb, w2);
#pragma unroll
    for (int k = 0; k < 8; ++k)
      o[k] = __fadd_rn(o[k], g::decode_one<kE5>(g::code_of(w2[k / 4], k % 4), c2.sb));
  }
  T* p = out + blk * 256 + 8 * (threadIdx.x & 31);
  store8<T>(p, o, (reinterpret_cast<uintptr_t>(p) % 16) == 0);
}

// P2 over the owner's full blocks 0..nfull-1 (the units FOR_UNITS gives this warp), the next
// block's loads issued before this one is reduced and encoded.
template <typename T, bool kE5, bool kSR, int kW, typename Dsts>
__device__ __forceinline__ void reduce_encode_full_units(const g::ReduceSrc& rs, int64_t nfull,
                                                         int64_t nb, const Dsts& d1,
                                                         const Dsts& d2, const LowpRound& r,
                                                         T* out, g::StatAcc* st) {
  using Src = g::ReducedSrc<T, kE5, kW>;
  const int64_t i0 = 8 * (threadIdx.x & 31);
  const int64_t step = static_cast<int64_t>(gridDim.x) * kWarps;
  int64_t j = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (j >= nfull) return;
  Src a(rs, nb, 256, j);
  typename Src::Raw raw;
  if (a.can_fetch()) a.fetch8(i0, raw);
  for (;;) {
    const int64_t jn = j + step;
    const bool more = jn < nfull;
    Src an = more ? Src(rs, nb, 256, jn) : a;
    typename Src::Raw rawn;
    if (more && an.can_fetch()) an.fetch8(i0, rawn);
    float v[8];
    if (a.can_fetch())
      a.sum8(raw, v);
    else
      a.load8(i0, v);
    encode_finish_full256<T, kE5, kSR>(v, j, nb, d1, d2, r,
                                       static_cast<uint64_t>(r.sr_off2 + j * 256 + i0), out, st);
    if (!more) return;
    a = an, raw = rawn, j = jn;
  }
}

// P2 for all_reduce: reduce, then encode Q1 (and the residual Q2) into every rank's gather slot;
// full blocks go to the peers only (see encode_finish_full256).
template <typename T, bool kE5, bool kSR, int kW>
__device__ __forceinline__ void reduce_encode_units(const PeerSet& ps, const LowpRound& r,
                                                    const g::ReduceSrc& rs, int64_t block,
                                                    g::StatAcc* st) {
  constexpr int kN = kW ? kW : kMaxRanks;
  const int world = kW ? kW : ps.world;
  const int64_t nb = blocks_of(rs.n, block);
  const uint64_t q1 = enc_bytes(rs.n, block);
  g::EncDstsN<kN> all{}, all2{}, peers{}, peers2{};
#pragma unroll (kW ? kW : 1)
  for (int q = 0; q < kN; ++q) {
    if (q >= world) break;
    all.p[q] = slot(ps, q, r.gather_off, r.cap, ps.rank);
    all2.p[q] = all.p[q] + q1;
    // peers: every rank but this one, the next first (no rank's links take every write at once).
    if (q == 0) continue;
    peers.p[q - 1] = slot(ps, (ps.rank + q) % world, r.gather_off, r.cap, ps.rank);
    peers2.p[q - 1] = peers.p[q - 1] + q1;
  }
  all.count = all2.count = world;
  peers.count = peers2.count = world - 1;
  T* out = reinterpret_cast<T*>(r.out[ps.rank]);
  if (block == 256) {
    if constexpr (kW != 0) {
      reduce_encode_full_units<T, kE5, kSR, kW>(rs, rs.n / 256, nb, peers, peers2, r, out, st);
    } else {  // no prefetch: copies of the generic source would go through local memory
      FOR_UNITS(j, nb) {
        if (!owner_finishes(j, rs.n, block)) continue;
        const g::ReducedSrc<T, kE5, kW> a(rs, nb, block, j);
        float v[8];
        a.load8(8 * (threadIdx.x & 31), v);
        encode_finish_full256<T, kE5, kSR>(
            v, j, nb, peers, peers2, r,
            static_cast<uint64_t>(r.sr_off2 + j * 256 + 8 * (threadIdx.x & 31)), out, st);
      }
    }
  }
  FOR_UNITS(j, nb) {
    if (owner_finishes(j, rs.n, block)) continue;
    const g::ReducedSrc<T, kE5, kW> a(rs, nb, block, j);
    const uint64_t idx0 = static_cast<uint64_t>(r.sr_off2 + j * block);
    const g::BlockCode c1 =
        g::encode_block_warp<kE5, kSR>(a, a.m, j, nb, block, all, st, r.seed, r.sr2, idx0);
    if (r.two_term) {
      const g::ResidualSrc<T, kE5, kSR, kW> res{a, c1, r.seed, r.sr2, idx0};
      g::encode_block_warp<kE5, kSR>(res, a.m, j, nb, block, all2, st, r.seed, r.sr2b, idx0);
    }
  }
}

// P2 for reduce_scatter: reduce and round into out.
template <typename T, bool kE5, int kW>
__device__ __forceinline__ void reduce_store_units(const g::ReduceSrc& rs, int64_t block, T* out) {
  const int64_t nb = blocks_of(rs.n, block);
  const int lane = threadIdx.x & 31;
  FOR_UNITS(j, nb) {
    const g::ReducedSrc<T, kE5, kW> a(rs, nb, block, j);
    T* o = out + j * block;
    if (block == 256 && a.m == 256) {
      float v[8];
      a.load8(8 * lane, v);
      store8<T>(o + 8 * lane, v, (reinterpret_cast<uintptr_t>(o + 8 * lane) % 16) == 0);
      continue;
    }
    for (int64_t i = 4 * lane; i < a.m; i += 128) {
      float v[4];
      a.load4(i, i + 4 <= a.m, v);
      for (int k = 0; k < 4 && i + k < a.m; ++k) g::store_f<T>(o, i + k, v[k]);
    }
  }
}

// P3: decodes the n elements encoded at `enc` (two-term: Q1 then Q2) into `out`; with
// `skip_owned`, not the units the owner finished in P2.
template <typename T, bool kE5>
__device__ __forceinline__ void decode_units(const uint8_t* enc, int64_t n, int64_t block, T* out,
                                             bool two_term, bool skip_owned) {
  const int64_t nb = blocks_of(n, block);
  const uint8_t* codes = enc + nb * 4;
  const uint8_t* enc2 = enc + enc_bytes(n, block);
  const uint8_t* codes2 = enc2 + nb * 4;
  const bool vec = (reinterpret_cast<uintptr_t>(codes) % 4) == 0 &&
                   (!two_term || (reinterpret_cast<uintptr_t>(codes2) % 4) == 0);
  const int lane = threadIdx.x & 31;
  const bool vec_out = (reinterpret_cast<uintptr_t>(out) % 16) == 0;
  FOR_UNITS(j, nb) {
    if (skip_owned && owner_finishes(j, n, block)) continue;
    const int64_t off = j * block, m = min(block, n - off);
    const uint32_t sb = g::load_scale(enc, j);
    const uint32_t sb2 = two_term ? g::load_scale(enc2, j) : 0u;
    if (block == 256 && m == 256 && vec) {  // common case: 8 values per lane, wide accesses
      const int64_t i0 = off + 8 * lane;
      const uint32_t* cw = reinterpret_cast<const uint32_t*>(codes + i0);
      const uint32_t* cw2 = reinterpret_cast<const uint32_t*>(codes2 + i0);
      uint32_t w[2] = {cw[0], cw[1]}, w2[2] = {0u, 0u};
      if (two_term) w2[0] = cw2[0], w2[1] = cw2[1];
      float v[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        v[k] = g::decode_one<kE5>(g::code_of(w[k / 4], k % 4), sb);
        if (two_term) v[k] = __fadd_rn(v[k], g::decode_one<kE5>(g::code_of(w2[k / 4], k % 4), sb2));
      }
      store8<T>(out + i0, v, vec_out);
      continue;
    }
    for (int64_t i = 4 * lane; i < m; i += 128) {
      uint8_t c[4] = {0, 0, 0, 0}, c2[4] = {0, 0, 0, 0};
      if (vec && i + 4 <= m) {
        uint32_t w = *reinterpret_cast<const uint32_t*>(codes + off + i);
        uint32_t w2 = two_term ? *reinterpret_cast<const uint32_t*>(codes2 + off + i) : 0u;
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

// The kernel's end: the warp's codec counters, then the op counter.
__device__ __forceinline__ void finish_round(const PeerSet& ps, const LowpRound& r,
                                             unsigned long long epoch, const g::StatAcc& st) {
  if (r.stats) g::flush_stats(r.stats, st);
  finish_op(ps, epoch);
}

// kW: the world size when known at compile time (2, 4), 0 for any: the peers' pointers and scale
// words then live in registers. kMinBlocks: resident blocks per SM the compiler must allow (2:
// 64 registers, twice the warps to hide latency; 1: more registers, fewer warps).
// COMMX_CUDA_LOWP_BLOCKS_PER_SM picks for the generic kernel.
template <typename T, bool kE5, int kW, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    lowp_round_kernel(const __grid_constant__ PeerSet ps, const __grid_constant__ LowpRound r,
                      int64_t block, bool sr) {
  constexpr int kN = kW ? kW : kMaxRanks;
  const unsigned long long epoch = begin_op(ps);
  const int me = ps.rank, world = kW ? kW : ps.world;
  g::StatAcc acc;
  g::StatAcc* st = r.stats ? &acc : nullptr;
  // The first round's barrier: every peer's previous kernels have ended (a block can only arrive
  // once its rank's whole previous kernel completed), so their buffers are free.
  if (r.leading && !block_barrier(ps, flag_value(epoch, 0))) return finish_op(ps, epoch);

  // P1: the next rank first (no rank's links take every write at once).
  if (r.mode == LowpMode::kAllGather) {
    g::EncDstsN<kN> d{};
#pragma unroll (kW ? kW : 1)
    for (int q = 0; q < kN; ++q)
      if (q < world) d.p[q] = slot(ps, (me + q) % world, r.recv_off, r.cap, me);
    d.count = world;
    encode_units<T, kE5>(r.in[0], r.n_in[0], block, d, r, sr, st);
  } else {
    for (int k = 1; k < world; ++k) {
      const int q = (me + k) % world;
      g::EncDstsN<1> d{};
      d.p[0] = slot(ps, q, r.recv_off, r.cap, me);
      d.count = 1;
      encode_units<T, kE5>(r.in[q], r.n_in[q], block, d, r, sr, st);
    }
  }
  if (!block_barrier(ps, flag_value(epoch, 1))) return finish_op(ps, epoch);

  if (r.mode == LowpMode::kAllReduce || r.mode == LowpMode::kReduceScatter) {
    g::ReduceSrc rs{};
    rs.own = r.own;
#pragma unroll (kW ? kW : 1)
    for (int p = 0; p < kN; ++p)
      if (p < world) rs.recv[p] = slot(ps, me, r.recv_off, r.cap, p);
    rs.rank = me;
    rs.world = world;
    rs.n = r.n_own;
    rs.avg = r.avg;
    if (r.mode == LowpMode::kReduceScatter) {
      reduce_store_units<T, kE5, kW>(rs, block, reinterpret_cast<T*>(r.out[me]));
    } else if (sr) {
      reduce_encode_units<T, kE5, true, kW>(ps, r, rs, block, st);
    } else {
      reduce_encode_units<T, kE5, false, kW>(ps, r, rs, block, st);
    }
    if (!block_barrier(ps, flag_value(epoch, 2))) return finish_op(ps, epoch);
  }

  if (r.mode != LowpMode::kReduceScatter) {
    const bool all_reduce = r.mode == LowpMode::kAllReduce;
    const uint64_t area = all_reduce ? r.gather_off : r.recv_off;
    for (int k = 0; k < world; ++k) {
      const int q = (me + k) % world;
      if (q == me && r.mode == LowpMode::kAllToAll) continue;  // copied by the host side
      decode_units<T, kE5>(slot(ps, me, area, r.cap, q), r.n_out[q], block,
                           reinterpret_cast<T*>(r.out[q]), all_reduce && r.two_term,
                           all_reduce && q == me);
    }
    // Peers may write these slots again in the next round: all_reduce's next writes follow a
    // barrier that needs this block's arrival; the others need one here.
    if (!all_reduce && !block_barrier(ps, flag_value(epoch, 2))) return finish_op(ps, epoch);
  }
  // all_reduce's last round: peers may still decode their gather slots, which the next op's
  // kernels (buffer halves by op counter) may overwrite.
  if (r.trailing && r.mode == LowpMode::kAllReduce) block_barrier(ps, flag_value(epoch, 3));
  finish_round(ps, r, epoch, acc);
}

template <typename T, int kW, int kMinBlocks>
void launch_shape(const PeerSet& ps, const LowpRound& r, const lowp::CodecConfig& cfg, int blocks,
                  cudaStream_t s) {
  if (cfg.format == lowp::Fp8Format::kE5M2)
    launch_kernel(lowp_round_kernel<T, true, kW, kMinBlocks>, blocks, kThreads, s, ps, r, cfg.block,
                  cfg.stochastic);
  else
    launch_kernel(lowp_round_kernel<T, false, kW, kMinBlocks>, blocks, kThreads, s, ps, r,
                  cfg.block, cfg.stochastic);
}

// The kernel for the comm's world size: 2 and 4 ranks have their own (COMMX_CUDA_LOWP_KERNEL=
// generic runs the one for any size, for comparisons).
template <typename T>
cudaError_t launch_typed(const PeerSet& ps, const LowpRound& r, const lowp::CodecConfig& cfg,
                         int blocks, cudaStream_t s) {
  static const bool one = env_int("COMMX_CUDA_LOWP_BLOCKS_PER_SM", 2) == 1;
  static const bool generic = env_str("COMMX_CUDA_LOWP_KERNEL").value_or("auto") == "generic";
  if (!generic && ps.world == 2)
    launch_shape<T, 2, 2>(ps, r, cfg, blocks, s);
  else if (!generic && ps.world == 4)
    launch_shape<T, 4, 2>(ps, r, cfg, blocks, s);
  else if (one)
    launch_shape<T, 0, 1>(ps, r, cfg, blocks, s);
  else
    launch_shape<T, 0, 2>(ps, r, cfg, blocks, s);
  return cudaGetLastError();
}

}  // namespace

}  // namespace commx::cuda
