// Device-side pieces of the block-scaled FP8 codec shared by the codec kernels
// (fp8_codec_cuda.cu) and the cuda backend's fused collective kernel (lowp_kernels.cu): element
// loads and stores, the FP8 conversions, and the per-block encoder that takes its values from any
// source (a buffer, an FP32 sum computed on the fly, or its residual). Same bits as the CPU
// reference.
// Layer: algorithms (low-precision codec, GPU).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "lowp/cuda/fp8_codec_cuda.h"
#include "lowp/fp8_bits.h"

namespace commx::lowp::gpu {

constexpr int kWarpsPerCta = 8;
constexpr int kThreads = 256;
constexpr uint32_t kAbsMask = 0x7fffffffu;
constexpr uint32_t kInfBits = 0x7f800000u;

template <typename T>
__device__ __forceinline__ float load_f(const T* p, int64_t i);
template <>
__device__ __forceinline__ float load_f<float>(const float* p, int64_t i) {
  return p[i];
}
template <>
__device__ __forceinline__ float load_f<__nv_bfloat16>(const __nv_bfloat16* p, int64_t i) {
  return __bfloat162float(p[i]);
}
template <>
__device__ __forceinline__ float load_f<__half>(const __half* p, int64_t i) {
  return __half2float(p[i]);
}

template <typename T>
__device__ __forceinline__ void store_f(T* p, int64_t i, float v);
template <>
__device__ __forceinline__ void store_f<float>(float* p, int64_t i, float v) {
  p[i] = v;
}
template <>
__device__ __forceinline__ void store_f<__nv_bfloat16>(__nv_bfloat16* p, int64_t i, float v) {
  p[i] = __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ void store_f<__half>(__half* p, int64_t i, float v) {
  p[i] = __float2half_rn(v);
}

// Four consecutive elements as floats; a 16-byte (f32) or 8-byte (16-bit types) load when `vec`.
template <typename T>
__device__ __forceinline__ void load4v(const T* p, int64_t i, bool vec, float v[4]) {
  if constexpr (sizeof(T) == 4) {
    if (vec) {
      float4 f = *reinterpret_cast<const float4*>(p + i);
      v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
      return;
    }
  } else {
    if (vec) {
      uint2 u = *reinterpret_cast<const uint2*>(p + i);
      const T* h = reinterpret_cast<const T*>(&u);
      for (int j = 0; j < 4; ++j) v[j] = load_f<T>(h, j);
      return;
    }
  }
  for (int j = 0; j < 4; ++j) v[j] = load_f<T>(p, i + j);
}

template <bool kE5>
__device__ __forceinline__ uint8_t cvt_rne(float q) {
  return static_cast<uint8_t>(
      __nv_cvt_float_to_fp8(q, __NV_SATFINITE, kE5 ? __NV_E5M2 : __NV_E4M3));
}

template <bool kE5>
__device__ __forceinline__ float fp8_value(uint8_t c) {
  __half_raw h = __nv_cvt_fp8_to_halfraw(c, kE5 ? __NV_E5M2 : __NV_E4M3);
  return __half2float(__half(h));
}

// Encodes one code; `flagged` blocks map NaN/Inf to their codes (see lowp/fp8_codec.h).
template <bool kE5, bool kSR>
__device__ __forceinline__ uint8_t encode_one(float x, float inv, bool flagged, uint64_t seed,
                                              uint64_t stream, uint64_t index) {
  constexpr Fp8Traits t = kE5 ? e5m2_traits() : e4m3_traits();
  if (flagged) {
    uint32_t u = f2u(x);
    uint32_t a = u & kAbsMask;
    uint8_t s = static_cast<uint8_t>((u >> 24) & 0x80u);
    if (a > kInfBits) return s | t.nan_code;
    if (a == kInfBits) return s | t.inf_code;
  }
  float q = __fmul_rn(x, inv);
  if constexpr (kSR) {
    return fp8_sr(q, sr_random(seed, stream, index), t);
  } else {
    return cvt_rne<kE5>(q);
  }
}

// The decoded value of code `c` under a block scale word `sb` (sign bit = flagged block).
template <bool kE5>
__device__ __forceinline__ float decode_one(uint8_t c, uint32_t sb) {
  constexpr Fp8Traits t = kE5 ? e5m2_traits() : e4m3_traits();
  float v = fp8_value<kE5>(c);
  if (sb & 0x80000000u) {
    if (!kE5 && (c & 0x7fu) == t.inf_code) return (c & 0x80u) ? -INFINITY : INFINITY;
    if ((f2u(v) & kAbsMask) >= kInfBits) return v;
    return __fmul_rn(v, __uint_as_float(sb & kAbsMask));
  }
  return __fmul_rn(v, __uint_as_float(sb));
}

__device__ __forceinline__ uint32_t load_scale(const uint8_t* enc, int64_t k) {
  const uint8_t* p = enc + 4 * k;
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

// Where one encoded block goes: up to kMaxDsts encoded chunks of the same n elements (the scale of
// block `blk` at dst + 4 * blk, its codes at dst + 4 * nb + blk * block).
constexpr int kMaxDsts = 8;
struct EncDsts {
  uint8_t* p[kMaxDsts];
  int count;
};


// Adds one block's counters (each lane's share) to the device counters; whole warp.
__device__ __forceinline__ void add_block_stats(unsigned long long* stats, int64_t m,
                                                uint32_t under, uint32_t sat, uint32_t nonfinite) {
  under = __reduce_add_sync(0xffffffffu, under);
  sat = __reduce_add_sync(0xffffffffu, sat);
  nonfinite = __reduce_add_sync(0xffffffffu, nonfinite);
  if ((threadIdx.x & 31) != 0) return;
  atomicAdd(&stats[kStatElements], static_cast<unsigned long long>(m));
  if (sat) atomicAdd(&stats[kStatSaturated], static_cast<unsigned long long>(sat));
  if (under) atomicAdd(&stats[kStatUnderflow], static_cast<unsigned long long>(under));
  if (nonfinite) {
    atomicAdd(&stats[kStatNonfiniteValues], static_cast<unsigned long long>(nonfinite));
    atomicAdd(&stats[kStatNonfiniteBlocks], 1ull);
  }
}

// The scale of an encoded block, as encode_block_warp chose it.
struct BlockCode {
  float inv;       // values are multiplied by this before the FP8 conversion
  bool flagged;    // the block holds NaN/Inf
  uint32_t sb;     // the scale word written (sign bit = flagged)
};

// The common case of encode_block_warp: a full block of 256 values, 8 consecutive ones per lane
// kept in registers, so the source is read (or the sum computed) once. Same bits.
template <bool kE5, bool kSR, typename Src>
__device__ __forceinline__ BlockCode encode_full256(const Src& src, int64_t blk, int64_t nb,
                                                    const EncDsts& dsts, unsigned long long* stats,
                                                    uint64_t seed, uint64_t stream, uint64_t idx0) {
  constexpr Fp8Traits t = kE5 ? e5m2_traits() : e4m3_traits();
  const int lane = threadIdx.x & 31;
  const int64_t i0 = 8 * lane;
  float v[8];
  src.load4(i0, true, v);
  src.load4(i0 + 4, true, v + 4);
  uint32_t amax = 0, amax_finite = 0;
  for (int j = 0; j < 8; ++j) {
    const uint32_t a = f2u(v[j]) & kAbsMask;
    amax = max(amax, a);
    if (a < kInfBits) amax_finite = max(amax_finite, a);
  }
  amax = __reduce_max_sync(0xffffffffu, amax);
  const bool flagged = amax >= kInfBits;
  if (flagged) amax = __reduce_max_sync(0xffffffffu, amax_finite);
  const BlockScale bs = block_scale(u2f(amax), flagged ? t.flagged_target : t.max);
  const uint32_t sb = flagged ? (f2u(bs.scale) | 0x80000000u) : f2u(bs.scale);
  if (lane < dsts.count) {
    uint8_t* sp = dsts.p[lane] + blk * 4;
    sp[0] = sb & 0xff, sp[1] = (sb >> 8) & 0xff, sp[2] = (sb >> 16) & 0xff, sp[3] = sb >> 24;
  }
  uint32_t w[2] = {0, 0};
  uint32_t under = 0, sat = 0, nonfinite = 0;
  for (int j = 0; j < 8; ++j) {
    const uint8_t c = encode_one<kE5, kSR>(v[j], bs.inv, flagged, seed, stream, idx0 + i0 + j);
    w[j / 4] |= static_cast<uint32_t>(c) << (8 * (j % 4));
    if (stats) {
      const uint32_t a = f2u(v[j]) & kAbsMask;
      const uint32_t qa = f2u(__fmul_rn(v[j], bs.inv)) & kAbsMask;
      under += (a != 0) & (a < kInfBits) & ((c & 0x7fu) == 0);
      sat += (a < kInfBits) & (qa > f2u(t.sat_mid));
      nonfinite += a >= kInfBits;
    }
  }
  for (int d = 0; d < dsts.count; ++d) {
    uint32_t* codes = reinterpret_cast<uint32_t*>(dsts.p[d] + nb * 4 + blk * 256 + i0);
    codes[0] = w[0];
    codes[1] = w[1];
  }
  if (stats) add_block_stats(stats, 256, under, sat, nonfinite);
  return BlockCode{bs.inv, flagged, sb};
}

// One warp encodes block `blk` (m <= block elements) of a chunk of nb blocks. `src` gives the
// values: src.load4(i, full, v) fills v[0..3] with elements i..i+3 of the block (when !full only
// those below m, the rest 0); src.load1(i) one element. Writes the scale and the codes to every
// destination, adds the counters to `stats` (nullable) and returns the block's scale.
template <bool kE5, bool kSR, typename Src>
__device__ __forceinline__ BlockCode encode_block_warp(const Src& src, int64_t m, int64_t blk,
                                                  int64_t nb, int64_t block, const EncDsts& dsts,
                                                  unsigned long long* stats, uint64_t seed,
                                                  uint64_t stream, uint64_t idx0) {
  constexpr Fp8Traits t = kE5 ? e5m2_traits() : e4m3_traits();
  const int lane = threadIdx.x & 31;
  const int64_t off = blk * block;
  bool vec_out = true;
  for (int d = 0; d < dsts.count; ++d)
    vec_out = vec_out && (reinterpret_cast<uintptr_t>(dsts.p[d] + nb * 4 + off) % 4) == 0;
  if (block == 256 && m == 256 && vec_out) return encode_full256<kE5, kSR>(src, blk, nb, dsts,
                                                                          stats, seed, stream, idx0);

  // Pass 1: amax over |x| as bits (integer order equals float order for non-negative floats).
  uint32_t amax = 0;
  for (int64_t i = 4 * lane; i < m; i += 128) {
    float v[4];
    src.load4(i, i + 4 <= m, v);
    for (int j = 0; j < 4; ++j) amax = max(amax, f2u(v[j]) & kAbsMask);
  }
  amax = __reduce_max_sync(0xffffffffu, amax);
  const bool flagged = amax >= kInfBits;
  if (flagged) {  // the finite amax of a block with NaN/Inf
    amax = 0;
    for (int64_t i = lane; i < m; i += 32) {
      uint32_t a = f2u(src.load1(i)) & kAbsMask;
      if (a < kInfBits) amax = max(amax, a);
    }
    amax = __reduce_max_sync(0xffffffffu, amax);
  }
  const BlockScale bs = block_scale(u2f(amax), flagged ? t.flagged_target : t.max);
  const uint32_t sb = flagged ? (f2u(bs.scale) | 0x80000000u) : f2u(bs.scale);
  if (lane < dsts.count) {
    uint8_t* sp = dsts.p[lane] + blk * 4;  // byte stores: the scales need no alignment
    sp[0] = sb & 0xff, sp[1] = (sb >> 8) & 0xff, sp[2] = (sb >> 16) & 0xff, sp[3] = sb >> 24;
  }

  // Pass 2: codes (and counters).
  uint32_t under = 0, sat = 0, nonfinite = 0;
  for (int64_t i = 4 * lane; i < m; i += 128) {
    float v[4];
    const bool full = i + 4 <= m;
    src.load4(i, full, v);
    uint8_t c[4];
    for (int j = 0; j < 4; ++j) {
      c[j] = encode_one<kE5, kSR>(v[j], bs.inv, flagged, seed, stream, idx0 + i + j);
      if (stats && i + j < m) {
        uint32_t a = f2u(v[j]) & kAbsMask;
        uint32_t qa = f2u(__fmul_rn(v[j], bs.inv)) & kAbsMask;
        under += (a != 0) & (a < kInfBits) & ((c[j] & 0x7fu) == 0);
        sat += (a < kInfBits) & (qa > f2u(t.sat_mid));
        nonfinite += a >= kInfBits;
      }
    }
    for (int d = 0; d < dsts.count; ++d) {
      uint8_t* codes = dsts.p[d] + nb * 4 + off;
      if (full && vec_out) {
        *reinterpret_cast<uint32_t*>(codes + i) =
            static_cast<uint32_t>(c[0]) | (static_cast<uint32_t>(c[1]) << 8) |
            (static_cast<uint32_t>(c[2]) << 16) | (static_cast<uint32_t>(c[3]) << 24);
      } else {
        for (int j = 0; j < 4; ++j)
          if (i + j < m) codes[i + j] = c[j];
      }
    }
  }
  if (stats) add_block_stats(stats, m, under, sat, nonfinite);
  return BlockCode{bs.inv, flagged, sb};
}

// The values of one block of a buffer of T (f32/bf16/f16) for encode_block_warp.
template <typename T>
struct BufferSrc {
  const T* x;  // first element of the block
  bool vec;    // x is aligned for 4-element loads
  __device__ __forceinline__ void load4(int64_t i, bool full, float v[4]) const {
    if (full) {
      load4v<T>(x, i, vec, v);
    } else {
      for (int j = 0; j < 4; ++j) v[j] = 0.0f;
      for (int j = 0; j < 4 && i + j < m; ++j) v[j] = load_f<T>(x, i + j);
    }
  }
  __device__ __forceinline__ float load1(int64_t i) const { return load_f<T>(x, i); }
  int64_t m;
};

// The sources of an owner's reduction: acc = 0; for p = 0..world-1 in order: acc +=
// (p == rank ? float(own[i]) : decode(recv[p])[i]); AVG: acc /= world (the host path's order).
struct ReduceSrc {
  const void* own;                 // this rank's own n elements
  const uint8_t* recv[kMaxDsts];   // encoded n elements from each peer (recv[rank] unused)
  int rank;
  int world;
  int64_t n;
  bool avg;
};

// Values of block `blk` of the reduced slice for encode_block_warp: the peers' scale words of the
// block are loaded once; full groups of 4 use one load per source.
template <typename T, bool kE5>
struct ReducedSrc {
  const ReduceSrc* r;
  int64_t nb, block, off, m;
  uint32_t sb[kMaxDsts];
  bool vec;  // own and codes aligned for 4-element loads

  __device__ __forceinline__ ReducedSrc(const ReduceSrc* rs, int64_t nb_, int64_t block_,
                                        int64_t blk)
      : r(rs), nb(nb_), block(block_), off(blk * block_), m(min(block_, rs->n - blk * block_)) {
    vec = (reinterpret_cast<uintptr_t>(static_cast<const T*>(r->own) + off) % (4 * sizeof(T))) == 0;
    for (int p = 0; p < r->world; ++p) {
      sb[p] = p == r->rank ? 0u : load_scale(r->recv[p], blk);
      if (p != r->rank) vec = vec && (reinterpret_cast<uintptr_t>(r->recv[p] + nb * 4 + off) % 4) == 0;
    }
  }
  __device__ __forceinline__ float finish(float acc) const {
    return r->avg ? __fdiv_rn(acc, static_cast<float>(r->world)) : acc;
  }
  __device__ __forceinline__ float load1(int64_t i) const {
    float acc = 0.0f;
    for (int p = 0; p < r->world; ++p) {
      float x = p == r->rank ? load_f<T>(static_cast<const T*>(r->own), off + i)
                             : decode_one<kE5>(r->recv[p][nb * 4 + off + i], sb[p]);
      acc = __fadd_rn(acc, x);
    }
    return finish(acc);
  }
  __device__ __forceinline__ void load4(int64_t i, bool full, float v[4]) const {
    if (!full || !vec) {
      for (int j = 0; j < 4; ++j) v[j] = i + j < m ? load1(i + j) : 0.0f;
      return;
    }
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int p = 0; p < r->world; ++p) {
      float x[4];
      if (p == r->rank) {
        load4v<T>(static_cast<const T*>(r->own) + off, i, true, x);
      } else {
        uint32_t w = *reinterpret_cast<const uint32_t*>(r->recv[p] + nb * 4 + off + i);
        for (int j = 0; j < 4; ++j) x[j] = decode_one<kE5>((w >> (8 * j)) & 0xff, sb[p]);
      }
      for (int j = 0; j < 4; ++j) acc[j] = __fadd_rn(acc[j], x[j]);
    }
    for (int j = 0; j < 4; ++j) v[j] = finish(acc[j]);
  }
};

// The residual acc - D(Q1) of the same block (0 where D(Q1) is not finite), Q1 recomputed from
// the block's code `c1`.
template <typename T, bool kE5, bool kSR>
struct ResidualSrc {
  ReducedSrc<T, kE5> a;
  BlockCode c1;
  uint64_t seed, stream, idx0;
  __device__ __forceinline__ float residual(float x, int64_t i) const {
    const float d = decode_one<kE5>(
        encode_one<kE5, kSR>(x, c1.inv, c1.flagged, seed, stream, idx0 + i), c1.sb);
    return (f2u(d) & kInfBits) != kInfBits ? __fsub_rn(x, d) : 0.0f;
  }
  __device__ __forceinline__ void load4(int64_t i, bool full, float v[4]) const {
    a.load4(i, full, v);
    for (int j = 0; j < 4; ++j) v[j] = i + j < a.m ? residual(v[j], i + j) : 0.0f;
  }
  __device__ __forceinline__ float load1(int64_t i) const { return residual(a.load1(i), i); }
};

}  // namespace commx::lowp::gpu
