// The fused low-precision round kernel (see lowp_kernels.h), included by one translation unit per
// element type (lowp_kernels_<type>.cu) so that the three compile in parallel. Work unit: one warp
// encodes, reduces or decodes one codec block; block b of threads owns units b*W .. b*W+W-1, then
// every gridDim-th group after that, identically on every rank, so a per-block barrier orders
// exactly the units it needs. Built with --fmad=false: every float step rounds like the host path.
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

// P1 of one destination set: encodes the n elements at `src` block by block into `d`.
template <typename T, bool kE5>
__device__ __forceinline__ void encode_units(const char* src, int64_t n, int64_t block,
                                             const g::EncDsts& d, const LowpRound& r, bool sr) {
  const int64_t nb = blocks_of(n, block);
  FOR_UNITS(j, nb) {
    const T* x = reinterpret_cast<const T*>(src) + j * block;
    const g::BufferSrc<T> in{x, (reinterpret_cast<uintptr_t>(x) % (4 * sizeof(T))) == 0,
                             min(block, n - j * block)};
    const uint64_t idx0 = static_cast<uint64_t>(r.sr_off1 + j * block);
    if (sr)
      g::encode_block_warp<kE5, true>(in, in.m, j, nb, block, d, r.stats, r.seed, r.sr1, idx0);
    else
      g::encode_block_warp<kE5, false>(in, in.m, j, nb, block, d, r.stats, r.seed, r.sr1, idx0);
  }
}

// P2 for all_reduce: reduce, then encode Q1 (and the residual Q2) into every rank's gather slot.
template <typename T, bool kE5, bool kSR>
__device__ __forceinline__ void reduce_encode_units(const PeerSet& ps, const LowpRound& r,
                                                    const g::ReduceSrc& rs, int64_t block) {
  const int64_t nb = blocks_of(rs.n, block);
  const uint64_t q1 = enc_bytes(rs.n, block);
  g::EncDsts d1{}, d2{};
  for (int q = 0; q < ps.world; ++q) {
    d1.p[q] = slot(ps, q, r.gather_off, r.cap, ps.rank);
    d2.p[q] = d1.p[q] + q1;
  }
  d1.count = d2.count = ps.world;
  FOR_UNITS(j, nb) {
    const g::ReducedSrc<T, kE5> a(&rs, nb, block, j);
    const uint64_t idx0 = static_cast<uint64_t>(r.sr_off2 + j * block);
    const g::BlockCode c1 =
        g::encode_block_warp<kE5, kSR>(a, a.m, j, nb, block, d1, r.stats, r.seed, r.sr2, idx0);
    if (r.two_term) {
      const g::ResidualSrc<T, kE5, kSR> res{a, c1, r.seed, r.sr2, idx0};
      g::encode_block_warp<kE5, kSR>(res, a.m, j, nb, block, d2, r.stats, r.seed, r.sr2b, idx0);
    }
  }
}

// P2 for reduce_scatter: reduce and round into out.
template <typename T, bool kE5>
__device__ __forceinline__ void reduce_store_units(const g::ReduceSrc& rs, int64_t block, T* out) {
  const int64_t nb = blocks_of(rs.n, block);
  const int lane = threadIdx.x & 31;
  FOR_UNITS(j, nb) {
    const g::ReducedSrc<T, kE5> a(&rs, nb, block, j);
    T* o = out + j * block;
    for (int64_t i = 4 * lane; i < a.m; i += 128) {
      float v[4];
      a.load4(i, i + 4 <= a.m, v);
      for (int k = 0; k < 4 && i + k < a.m; ++k) g::store_f<T>(o, i + k, v[k]);
    }
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

// P3: decodes the n elements encoded at `enc` (two-term: Q1 then Q2) into `out`.
template <typename T, bool kE5>
__device__ __forceinline__ void decode_units(const uint8_t* enc, int64_t n, int64_t block, T* out,
                                             bool two_term) {
  const int64_t nb = blocks_of(n, block);
  const uint8_t* codes = enc + nb * 4;
  const uint8_t* enc2 = enc + enc_bytes(n, block);
  const uint8_t* codes2 = enc2 + nb * 4;
  const bool vec = (reinterpret_cast<uintptr_t>(codes) % 4) == 0 &&
                   (!two_term || (reinterpret_cast<uintptr_t>(codes2) % 4) == 0);
  const int lane = threadIdx.x & 31;
  const bool vec_out = (reinterpret_cast<uintptr_t>(out) % 16) == 0;
  FOR_UNITS(j, nb) {
    const int64_t off = j * block, m = min(block, n - off);
    const uint32_t sb = g::load_scale(enc, j);
    const uint32_t sb2 = two_term ? g::load_scale(enc2, j) : 0u;
    if (block == 256 && m == 256 && vec) {  // common case: 8 values per lane, wide accesses
      const int64_t i0 = off + 8 * lane;
      const uint32_t* cw = reinterpret_cast<const uint32_t*>(codes + i0);
      const uint32_t* cw2 = reinterpret_cast<const uint32_t*>(codes2 + i0);
      float v[8];
      for (int k = 0; k < 8; ++k) {
        v[k] = g::decode_one<kE5>((cw[k / 4] >> (8 * (k % 4))) & 0xff, sb);
        if (two_term) v[k] = __fadd_rn(v[k], g::decode_one<kE5>((cw2[k / 4] >> (8 * (k % 4))) & 0xff, sb2));
      }
      store8<T>(out + i0, v, vec_out);
      continue;
    }
    for (int64_t i = 4 * lane; i < m; i += 128) {
      uint8_t c[4] = {0, 0, 0, 0}, c2[4] = {0, 0, 0, 0};
      if (vec && i + 4 <= m) {
        uint32_t w = *reinterpret_cast<const uint32_t*>(codes + off + i);
        uint32_t w2 = two_term ? *reinterpret_cast<const uint32_t*>(codes2 + off + i) : 0u;
        for (int k = 0; k < 4; ++k) c[k] = (w >> (8 * k)) & 0xff, c2[k] = (w2 >> (8 * k)) & 0xff;
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

// kMinBlocks: resident blocks per SM the compiler must allow (2: 64 registers, a few spills, twice
// the warps to hide latency; 1: 114 registers, no spills). COMMX_CUDA_LOWP_BLOCKS_PER_SM picks.
template <typename T, bool kE5, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    lowp_round_kernel(const __grid_constant__ PeerSet ps, const __grid_constant__ LowpRound r,
                      int64_t block, bool sr) {
  const unsigned long long epoch = begin_op(ps);
  const int me = ps.rank, world = ps.world;
  // The first round's barrier: every peer's previous kernels have ended (a block can only arrive
  // once its rank's whole previous kernel completed), so their buffers are free.
  if (r.leading && !block_barrier(ps, flag_value(epoch, 0))) return finish_op(ps, epoch);

  // P1: the next rank first (no rank's links take every write at once).
  if (r.mode == LowpMode::kAllGather) {
    g::EncDsts d{};
    for (int q = 0; q < world; ++q) d.p[q] = slot(ps, (me + q) % world, r.recv_off, r.cap, me);
    d.count = world;
    encode_units<T, kE5>(r.in[0], r.n_in[0], block, d, r, sr);
  } else {
    for (int k = 1; k < world; ++k) {
      const int q = (me + k) % world;
      g::EncDsts d{};
      d.p[0] = slot(ps, q, r.recv_off, r.cap, me);
      d.count = 1;
      encode_units<T, kE5>(r.in[q], r.n_in[q], block, d, r, sr);
    }
  }
  if (!block_barrier(ps, flag_value(epoch, 1))) return finish_op(ps, epoch);

  if (r.mode == LowpMode::kAllReduce || r.mode == LowpMode::kReduceScatter) {
    g::ReduceSrc rs{};
    rs.own = r.own;
    for (int p = 0; p < world; ++p) rs.recv[p] = slot(ps, me, r.recv_off, r.cap, p);
    rs.rank = me;
    rs.world = world;
    rs.n = r.n_own;
    rs.avg = r.avg;
    if (r.mode == LowpMode::kReduceScatter) {
      reduce_store_units<T, kE5>(rs, block, reinterpret_cast<T*>(r.out[me]));
    } else if (sr) {
      reduce_encode_units<T, kE5, true>(ps, r, rs, block);
    } else {
      reduce_encode_units<T, kE5, false>(ps, r, rs, block);
    }
    if (!block_barrier(ps, flag_value(epoch, 2))) return finish_op(ps, epoch);
  }

  if (r.mode != LowpMode::kReduceScatter) {
    const uint64_t area = r.mode == LowpMode::kAllReduce ? r.gather_off : r.recv_off;
    for (int k = 0; k < world; ++k) {
      const int q = (me + k) % world;
      if (q == me && r.mode == LowpMode::kAllToAll) continue;  // copied by the host side
      decode_units<T, kE5>(slot(ps, me, area, r.cap, q), r.n_out[q], block,
                           reinterpret_cast<T*>(r.out[q]),
                           r.mode == LowpMode::kAllReduce && r.two_term);
    }
    // Peers may write these slots again in the next round: all_reduce's next writes follow a
    // barrier that needs this block's arrival; the others need one here.
    if (r.mode != LowpMode::kAllReduce && !block_barrier(ps, flag_value(epoch, 2))) {
      return finish_op(ps, epoch);
    }
  }
  // all_reduce's last round: peers may still decode their gather slots, which the next op's
  // kernels (buffer halves by op counter) may overwrite.
  if (r.trailing && r.mode == LowpMode::kAllReduce) block_barrier(ps, flag_value(epoch, 3));
  finish_op(ps, epoch);
}

template <typename T, int kMinBlocks>
void launch_occupancy(const PeerSet& ps, const LowpRound& r, const lowp::CodecConfig& cfg,
                      int blocks, cudaStream_t s) {
  if (cfg.format == lowp::Fp8Format::kE5M2)
    launch_kernel(lowp_round_kernel<T, true, kMinBlocks>, blocks, kThreads, s, ps, r, cfg.block,
                  cfg.stochastic);
  else
    launch_kernel(lowp_round_kernel<T, false, kMinBlocks>, blocks, kThreads, s, ps, r, cfg.block,
                  cfg.stochastic);
}

template <typename T>
cudaError_t launch_typed(const PeerSet& ps, const LowpRound& r, const lowp::CodecConfig& cfg,
                         int blocks, cudaStream_t s) {
  static const bool one = env_int("COMMX_CUDA_LOWP_BLOCKS_PER_SM", 2) == 1;
  if (one)
    launch_occupancy<T, 1>(ps, r, cfg, blocks, s);
  else
    launch_occupancy<T, 2>(ps, r, cfg, blocks, s);
  return cudaGetLastError();
}

}  // namespace

}  // namespace commx::cuda
