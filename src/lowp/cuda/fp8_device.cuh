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

// A block's scale word at enc + 4 * k: one 32-bit access where aligned (the scales of a slot
// are), bytes otherwise (the second term of a two-term gather may start at any byte).
__device__ __forceinline__ uint32_t load_scale(const uint8_t* enc, int64_t k) {
  const uint8_t* p = enc + 4 * k;
  if ((reinterpret_cast<uintptr_t>(p) & 3) == 0) return *reinterpret_cast<const uint32_t*>(p);
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

__device__ __forceinline__ void store_scale(uint8_t* p, uint32_t sb) {
  if ((reinterpret_cast<uintptr_t>(p) & 3) == 0) {
    *reinterpret_cast<uint32_t*>(p) = sb;
    return;
  }
  p[0] = sb & 0xff, p[1] = (sb >> 8) & 0xff, p[2] = (sb >> 16) & 0xff, p[3] = sb >> 24;
}

// Four codes packed little-endian into one word, and back.
__device__ __forceinline__ uint32_t pack4(const uint8_t c[4]) {
  return static_cast<uint32_t>(c[0]) | (static_cast<uint32_t>(c[1]) << 8) |
         (static_cast<uint32_t>(c[2]) << 16) | (static_cast<uint32_t>(c[3]) << 24);
}
__device__ __forceinline__ uint8_t code_of(uint32_t w, int k) { return (w >> (8 * k)) & 0xffu; }

// Where one encoded block goes: up to N encoded chunks of the same n elements (the scale of
// block `blk` at dst + 4 * blk, its codes at dst + code_off + blk * block; code_off is 4 * nb in
// the host codec's layout, rounded up to 16 in the cuda backend's slots). Loops over the
// destinations are unrolled to N so that the pointers stay in registers.
constexpr int kMaxDsts = 8;
template <int N>
struct EncDstsN {
  static constexpr int kCap = N;
  uint8_t* p[N];
  int count;
  int64_t code_off;
};
using EncDsts = EncDstsN<kMaxDsts>;

// Codec counters of one lane, summed into the device counters once per warp (flush_stats) rather
// than once per block: every warp adding to the same counters after each block serialised at the
// L2 (one atomic per 256 elements on one address).
// `full` false: saturation only (the pair path's check is one multiply per block; the other
// counters cost the cuda backend's FP8 kernels 0-4%).
struct StatAcc {
  uint32_t elements = 0, under = 0, sat = 0, nonfinite = 0, nonfinite_blocks = 0;
  bool full = true;
};

// Adds the warp's counters to `stats`; whole warp, convergent.
__device__ __forceinline__ void flush_stats(unsigned long long* stats, const StatAcc& a) {
  const uint32_t el = __reduce_add_sync(0xffffffffu, a.elements);
  const uint32_t under = __reduce_add_sync(0xffffffffu, a.under);
  const uint32_t sat = __reduce_add_sync(0xffffffffu, a.sat);
  const uint32_t nonfinite = __reduce_add_sync(0xffffffffu, a.nonfinite);
  const uint32_t nfb = __reduce_add_sync(0xffffffffu, a.nonfinite_blocks);
  if ((threadIdx.x & 31) != 0) return;
  if (el) atomicAdd(&stats[kStatElements], static_cast<unsigned long long>(el));
  if (sat) atomicAdd(&stats[kStatSaturated], static_cast<unsigned long long>(sat));
  if (under) atomicAdd(&stats[kStatUnderflow], static_cast<unsigned long long>(under));
  if (nonfinite) atomicAdd(&stats[kStatNonfiniteValues], static_cast<unsigned long long>(nonfinite));
  if (nfb) atomicAdd(&stats[kStatNonfiniteBlocks], static_cast<unsigned long long>(nfb));
}

// The scale of an encoded block, as encode_block_warp chose it.
struct BlockCode {
  float inv;       // values are multiplied by this before the FP8 conversion
  bool flagged;    // the block holds NaN/Inf
  uint32_t sb;     // the scale word written (sign bit = flagged)
};

// The scale of a full block of 256 values, 8 consecutive ones per lane (whole warp).
template <bool kE5>
__device__ __forceinline__ BlockCode scale_full256(const float v[8]) {
  constexpr Fp8Traits t = kE5 ? e5m2_traits() : e4m3_traits();
  uint32_t amax = 0, amax_finite = 0;
#pragma unroll
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
  return BlockCode{bs.inv, flagged, sb};
}

// The codes of this lane's 8 values of a full block (packed in w[0..1]), counted into `st`
// (nullable). idx: stochastic-rounding index of v[0].
template <bool kE5, bool kSR>
__device__ __forceinline__ void encode8(const float v[8], const BlockCode& bc, uint64_t seed,
                                        uint64_t stream, uint64_t idx, uint32_t w[2],
                                        StatAcc* st) {
  constexpr Fp8Traits t = kE5 ? e5m2_traits() : e4m3_traits();
  w[0] = w[1] = 0;
  uint32_t under = 0, sat = 0, nonfinite = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const uint8_t c = encode_one<kE5, kSR>(v[j], bc.inv, bc.flagged, seed, stream, idx + j);
    w[j / 4] |= static_cast<uint32_t>(c) << (8 * (j % 4));
    if (st) {
      const uint32_t a = f2u(v[j]) & kAbsMask;
      const uint32_t qa = f2u(__fmul_rn(v[j], bc.inv)) & kAbsMask;
      under += (a != 0) & (a < kInfBits) & ((c & 0x7fu) == 0);
      sat += (a < kInfBits) & (qa > f2u(t.sat_mid));
      nonfinite += a >= kInfBits;
    }
  }
  if (st) {
    st->sat += sat;
    if (!st->full) return;
    st->under += under, st->nonfinite += nonfinite;
    if ((threadIdx.x & 31) == 0) st->elements += 256, st->nonfinite_blocks += bc.flagged;
  }
}

// Writes a full block's scale (lane d for destination d) and this lane's 8 codes (at byte 8 *
// lane of the block) to every destination.
template <typename Dsts>
__device__ __forceinline__ void store_full256(const Dsts& dsts, int64_t blk, int64_t nb,
                                              uint32_t sb, const uint32_t w[2]) {
  const int lane = threadIdx.x & 31;
#pragma unroll (Dsts::kCap <= 4 ? Dsts::kCap : 1)
  for (int d = 0; d < Dsts::kCap; ++d) {
    if (d >= dsts.count) break;
    if (lane == d) store_scale(dsts.p[d] + blk * 4, sb);
    uint8_t* c = dsts.p[d] + dsts.code_off + blk * 256 + 8 * lane;
    if ((reinterpret_cast<uintptr_t>(c) & 7) == 0) {
      *reinterpret_cast<uint2*>(c) = make_uint2(w[0], w[1]);
    } else if ((reinterpret_cast<uintptr_t>(c) & 3) == 0) {
      reinterpret_cast<uint32_t*>(c)[0] = w[0];
      reinterpret_cast<uint32_t*>(c)[1] = w[1];
    } else {  // the second term of a two-term gather may start at any byte
#pragma unroll
      for (int k = 0; k < 8; ++k) c[k] = code_of(w[k / 4], k % 4);
    }
  }
}

// The common case of encode_block_warp: a full block of 256 values, 8 consecutive ones per lane
// kept in registers, so the source is read (or the sum computed) once. Same bits.
template <bool kE5, bool kSR, typename Src, typename Dsts>
__device__ __forceinline__ BlockCode encode_full256(const Src& src, int64_t blk, int64_t nb,
                                                    const Dsts& dsts, StatAcc* st, uint64_t seed,
                                                    uint64_t stream, uint64_t idx0) {
  const int64_t i0 = 8 * (threadIdx.x & 31);
  float v[8];
  src.load8(i0, v);
  const BlockCode bc = scale_full256<kE5>(v);
  uint32_t w[2];
  encode8<kE5, kSR>(v, bc, seed, stream, idx0 + i0, w, st);
  store_full256(dsts, blk, nb, bc.sb, w);
  return bc;
}

// One warp encodes block `blk` (m <= block elements) of a chunk of nb blocks. `src` gives the
// values: src.load4(i, full, v) fills v[0..3] with elements i..i+3 of the block (when !full only
// those below m, the rest 0); src.load8(i, v) eight elements of a full block; src.load1(i) one
// element. Writes the scale and the codes to every destination, counts into `st` (nullable) and
// returns the block's scale.
template <bool kE5, bool kSR, typename Src, typename Dsts>
__device__ __forceinline__ BlockCode encode_block_warp(const Src& src, int64_t m, int64_t blk,
                                                       int64_t nb, int64_t block, const Dsts& dsts,
                                                       StatAcc* st, uint64_t seed,
                                                       uint64_t stream, uint64_t idx0) {
  constexpr Fp8Traits t = kE5 ? e5m2_traits() : e4m3_traits();
  const int lane = threadIdx.x & 31;
  const int64_t off = blk * block;
  bool vec_out = true;
#pragma unroll (Dsts::kCap <= 4 ? Dsts::kCap : 1)
  for (int d = 0; d < Dsts::kCap; ++d)
    if (d < dsts.count)
      vec_out = vec_out && (reinterpret_cast<uintptr_t>(dsts.p[d] + dsts.code_off + off) % 4) == 0;
  if (block == 256 && m == 256 && vec_out)
    return encode_full256<kE5, kSR>(src, blk, nb, dsts, st, seed, stream, idx0);

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
#pragma unroll (Dsts::kCap <= 4 ? Dsts::kCap : 1)
  for (int d = 0; d < Dsts::kCap; ++d)
    if (d < dsts.count && lane == d) store_scale(dsts.p[d] + blk * 4, sb);

  // Pass 2: codes (and counters).
  uint32_t under = 0, sat = 0, nonfinite = 0;
  for (int64_t i = 4 * lane; i < m; i += 128) {
    float v[4];
    const bool full = i + 4 <= m;
    src.load4(i, full, v);
    uint8_t c[4];
    for (int j = 0; j < 4; ++j) {
      c[j] = encode_one<kE5, kSR>(v[j], bs.inv, flagged, seed, stream, idx0 + i + j);
      if (st && i + j < m) {
        uint32_t a = f2u(v[j]) & kAbsMask;
        uint32_t qa = f2u(__fmul_rn(v[j], bs.inv)) & kAbsMask;
        under += (a != 0) & (a < kInfBits) & ((c[j] & 0x7fu) == 0);
        sat += (a < kInfBits) & (qa > f2u(t.sat_mid));
        nonfinite += a >= kInfBits;
      }
    }
#pragma unroll (Dsts::kCap <= 4 ? Dsts::kCap : 1)
    for (int d = 0; d < Dsts::kCap; ++d) {
      if (d >= dsts.count) break;
      uint8_t* codes = dsts.p[d] + dsts.code_off + off;
      if (full && vec_out) {
        *reinterpret_cast<uint32_t*>(codes + i) = pack4(c);
      } else {
        for (int j = 0; j < 4; ++j)
          if (i + j < m) codes[i + j] = c[j];
      }
    }
  }
  if (st) {
    st->sat += sat;
    if (st->full) {
      st->under += under, st->nonfinite += nonfinite;
      if (lane == 0) st->elements += static_cast<uint32_t>(m), st->nonfinite_blocks += flagged;
    }
  }
  return BlockCode{bs.inv, flagged, sb};
}

// Eight consecutive elements as floats: one 16-byte access (16-bit types) where aligned.
template <typename T>
__device__ __forceinline__ void load8v(const T* p, bool vec4, float v[8]) {
  if constexpr (sizeof(T) == 2) {
    if ((reinterpret_cast<uintptr_t>(p) & 15) == 0) {
      const uint4 u = *reinterpret_cast<const uint4*>(p);
      const T* h = reinterpret_cast<const T*>(&u);
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = load_f<T>(h, j);
      return;
    }
  }
  load4v<T>(p, 0, vec4, v);
  load4v<T>(p, 4, vec4, v + 4);
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
  __device__ __forceinline__ void load8(int64_t i, float v[8]) const { load8v<T>(x + i, vec, v); }
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
  int64_t code_off;  // bytes from an encoded chunk's start to its codes (see EncDstsN)
  bool avg;
};

// Values of block `blk` of the reduced slice for encode_block_warp. kW: the world size when
// known at compile time (0: any, up to kMaxDsts). The peers' code pointers and scale words of the
// block are copied into fixed-size arrays; with kW the loops over them unroll and they stay in
// registers (indexed at run time, as in the generic kernel, they live in local memory); full
// groups of 4 use one load per source.
template <typename T, bool kE5, int kW = 0>
struct ReducedSrc {
  static constexpr int kN = kW ? kW : kMaxDsts;
  static constexpr int kU = kW ? kW : 1;  // the generic kernel stays small (compile time)
  const T* own;
  const uint8_t* codes[kN];  // block `blk` of each peer's codes
  uint32_t sb[kN];
  int rank, world;
  int64_t m;
  bool avg;
  bool vec;  // own and codes aligned for 4-element loads

  __device__ __forceinline__ ReducedSrc(const ReduceSrc& rs, int64_t nb, int64_t block,
                                        int64_t blk)
      : own(static_cast<const T*>(rs.own) + blk * block),
        rank(rs.rank),
        world(kW ? kW : rs.world),
        m(min(block, rs.n - blk * block)),
        avg(rs.avg) {
    vec = (reinterpret_cast<uintptr_t>(own) % (4 * sizeof(T))) == 0;
#pragma unroll (kU)
    for (int p = 0; p < kN; ++p) {
      codes[p] = nullptr, sb[p] = 0;
      if (p >= world || p == rank) continue;
      codes[p] = rs.recv[p] + rs.code_off + blk * block;
      sb[p] = load_scale(rs.recv[p], blk);
      vec = vec && (reinterpret_cast<uintptr_t>(codes[p]) % 4) == 0;
    }
  }
  __device__ __forceinline__ float finish(float acc) const {
    return avg ? __fdiv_rn(acc, static_cast<float>(world)) : acc;
  }
  __device__ __forceinline__ float load1(int64_t i) const {
    float acc = 0.0f;
#pragma unroll (kU)
    for (int p = 0; p < kN; ++p) {
      if (p >= world) break;
      const float x = p == rank ? load_f<T>(own, i) : decode_one<kE5>(codes[p][i], sb[p]);
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
#pragma unroll (kU)
    for (int p = 0; p < kN; ++p) {
      if (p >= world) break;
      float x[4];
      if (p == rank) {
        load4v<T>(own, i, true, x);
      } else {
        const uint32_t w = *reinterpret_cast<const uint32_t*>(codes[p] + i);
        for (int j = 0; j < 4; ++j) x[j] = decode_one<kE5>(code_of(w, j), sb[p]);
      }
      for (int j = 0; j < 4; ++j) acc[j] = __fadd_rn(acc[j], x[j]);
    }
    for (int j = 0; j < 4; ++j) v[j] = finish(acc[j]);
  }
  // The raw loads of eight elements of a full block (fetch8), issued apart from the sums
  // (sum8) so that a caller can fetch the next block's before it works on this one. Needs
  // can_fetch(): `own` 16-byte aligned and the codes 4-byte aligned.
  struct Raw {
    uint4 own[sizeof(T) / 2];  // 8 elements: one 16-byte word (16-bit types), two (f32)
    uint32_t w[kN][2];
  };
  __device__ __forceinline__ bool can_fetch() const {
    return vec && (reinterpret_cast<uintptr_t>(own) % 16) == 0;
  }
  __device__ __forceinline__ void fetch8(int64_t i, Raw& raw) const {
    const uint4* o = reinterpret_cast<const uint4*>(own + i);
#pragma unroll
    for (int k = 0; k < static_cast<int>(sizeof(T) / 2); ++k) raw.own[k] = o[k];
#pragma unroll (kU)
    for (int p = 0; p < kN; ++p) {
      if (p >= world) break;
      if (p == rank) continue;
      const uint32_t* c = reinterpret_cast<const uint32_t*>(codes[p] + i);
      raw.w[p][0] = c[0], raw.w[p][1] = c[1];
    }
  }
  __device__ __forceinline__ void sum8(const Raw& raw, float v[8]) const {
    float mine[8];
    const T* h = reinterpret_cast<const T*>(raw.own);
#pragma unroll
    for (int j = 0; j < 8; ++j) mine[j] = load_f<T>(h, j);
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = 0.0f;
#pragma unroll (kU)
    for (int p = 0; p < kN; ++p) {
      if (p >= world) break;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float x =
            p == rank ? mine[j] : decode_one<kE5>(code_of(raw.w[p][j / 4], j % 4), sb[p]);
        v[j] = __fadd_rn(v[j], x);
      }
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = finish(v[j]);
  }
  // Eight elements of a full block (the generic kernel keeps to load4: a Raw indexed by rank at
  // run time would live in local memory).
  __device__ __forceinline__ void load8(int64_t i, float v[8]) const {
    if (kW == 0 || !can_fetch()) {
      load4(i, true, v);
      load4(i + 4, true, v + 4);
      return;
    }
    Raw raw;
    fetch8(i, raw);
    sum8(raw, v);
  }
};

// The residual x - D(Q(x)) of a value whose code under `c1` is `code` (0 where D(Q) is not
// finite): what the second term of a two-term gather encodes.
template <bool kE5>
__device__ __forceinline__ float residual_of(float x, uint8_t code, const BlockCode& c1) {
  const float d = decode_one<kE5>(code, c1.sb);
  return (f2u(d) & kInfBits) != kInfBits ? __fsub_rn(x, d) : 0.0f;
}

// The residual acc - D(Q1) of the same block, Q1 recomputed from the block's code `c1`.
template <typename T, bool kE5, bool kSR, int kW = 0>
struct ResidualSrc {
  ReducedSrc<T, kE5, kW> a;
  BlockCode c1;
  uint64_t seed, stream, idx0;
  __device__ __forceinline__ float residual(float x, int64_t i) const {
    return residual_of<kE5>(
        x, encode_one<kE5, kSR>(x, c1.inv, c1.flagged, seed, stream, idx0 + i), c1);
  }
  __device__ __forceinline__ void load4(int64_t i, bool full, float v[4]) const {
    a.load4(i, full, v);
    for (int j = 0; j < 4; ++j) v[j] = i + j < a.m ? residual(v[j], i + j) : 0.0f;
  }
  __device__ __forceinline__ void load8(int64_t i, float v[8]) const {
    a.load8(i, v);
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = residual(v[j], i + j);
  }
  __device__ __forceinline__ float load1(int64_t i) const { return residual(a.load1(i), i); }
};


// ---- Pairs of full blocks: 16 values per lane in groups of 16 bytes, coalesced accesses ----
// A warp works on two adjacent full blocks of 256 values (blocks 2u and 2u+1, 512 values). Lane l
// holds groups of kG consecutive values, kG = 16 / sizeof(T) (4 of f32, 8 of bf16 or f16): group g
// is values 32 kG g + kG l .. + kG - 1 of the pair, and its kG codes are the bytes at the same
// offsets of the pair's 512 codes. Every access of one group by the whole warp is then one
// contiguous span of 512 bytes of values and 32 kG bytes of codes, with 16-byte value accesses:
// a lane's 16 consecutive values put 32-64 bytes between lanes and made each 16-byte access of a
// warp touch 8-16 lines of 128 bytes. Values 0-7 of a lane are in block 2u, 8-15 in block 2u+1,
// and so are the codes of words 0-1 and 2-3. Same bits as encode_block_warp.

// Values per group of element type T (16 bytes).
template <typename T>
constexpr int kGroupOf = 16 / static_cast<int>(sizeof(T));

// The offset of this lane's group g in a pair (values and codes alike).
template <int kG>
__device__ __forceinline__ int pair_offset(int g) {
  return 32 * kG * g + kG * (threadIdx.x & 31);
}
// The offset in the pair of this lane's value j (0..15): group j / kG, position j % kG.
template <int kG>
__device__ __forceinline__ int pair_value_offset(int j) {
  return pair_offset<kG>(j / kG) + j % kG;
}

// The codec state of a pair's two blocks (the same in every lane).
struct PairCode {
  float inv[2];      // values are multiplied by this before the FP8 conversion
  bool flagged[2];   // the block holds NaN/Inf
  uint32_t sb[2];    // the block's scale word
  uint32_t amax[2];  // bits of the block's (finite) amax: bounds every |x * inv| (saturation check)
  __device__ __forceinline__ bool any_flagged() const { return flagged[0] || flagged[1]; }
  __device__ __forceinline__ uint2 words() const { return make_uint2(sb[0], sb[1]); }
};

// The scales of a pair (whole warp): the max of |x| over each block by one warp reduction each
// (values 0-7 of a lane are in block 2u, 8-15 in block 2u+1).
template <bool kE5>
__device__ __forceinline__ PairCode scale_pair(const float v[16]) {
  constexpr Fp8Traits t = kE5 ? e5m2_traits() : e4m3_traits();
  uint32_t a[2] = {0u, 0u};
#pragma unroll
  for (int j = 0; j < 16; ++j) a[j / 8] = max(a[j / 8], f2u(v[j]) & kAbsMask);
  uint32_t amax[2] = {__reduce_max_sync(0xffffffffu, a[0]), __reduce_max_sync(0xffffffffu, a[1])};
  const bool flagged[2] = {amax[0] >= kInfBits, amax[1] >= kInfBits};
  if (flagged[0] || flagged[1]) {  // rare (and the same in every lane): the finite amax
    uint32_t f[2] = {0u, 0u};
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const uint32_t x = f2u(v[j]) & kAbsMask;
      if (x < kInfBits) f[j / 8] = max(f[j / 8], x);
    }
#pragma unroll
    for (int k = 0; k < 2; ++k)
      if (flagged[k]) amax[k] = __reduce_max_sync(0xffffffffu, f[k]);
  }
  PairCode pc;
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const BlockScale bs = block_scale(u2f(amax[k]), flagged[k] ? t.flagged_target : t.max);
    pc.inv[k] = bs.inv;
    pc.flagged[k] = flagged[k];
    pc.sb[k] = flagged[k] ? (f2u(bs.scale) | 0x80000000u) : f2u(bs.scale);
    pc.amax[k] = amax[k];
  }
  return pc;
}

// Two codes from two values already multiplied by the block's inverse scale (finite, so the
// hardware's saturating conversion equals fp8_rne): byte 0 from q0.
template <bool kE5>
__device__ __forceinline__ uint32_t cvt2(float q0, float q1) {
  return __nv_cvt_float2_to_fp8x2(make_float2(q0, q1), __NV_SATFINITE, kE5 ? __NV_E5M2 : __NV_E4M3);
}

// This lane's 16 codes (value j's in byte j % 4 of word j / 4), counted into `st` (nullable) as
// encode8 counts. idx: stochastic-rounding index of the pair's value 0; kG: values per group.
template <bool kE5, bool kSR, int kG>
__device__ __forceinline__ uint4 encode16(const float v[16], const PairCode& pc, uint64_t seed,
                                          uint64_t stream, uint64_t idx, StatAcc* st) {
  constexpr Fp8Traits t = kE5 ? e5m2_traits() : e4m3_traits();
  uint32_t w[4] = {0u, 0u, 0u, 0u};
  if (!kSR && !pc.any_flagged()) {
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      const float inv = pc.inv[g / 2];
      const uint32_t lo = cvt2<kE5>(__fmul_rn(v[4 * g], inv), __fmul_rn(v[4 * g + 1], inv));
      const uint32_t hi = cvt2<kE5>(__fmul_rn(v[4 * g + 2], inv), __fmul_rn(v[4 * g + 3], inv));
      w[g] = __byte_perm(lo, hi, 0x5410);
    }
  } else {
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int b = j / 8;
      w[j / 4] |= static_cast<uint32_t>(encode_one<kE5, kSR>(
                      v[j], pc.inv[b], pc.flagged[b], seed, stream, idx + pair_value_offset<kG>(j)))
                  << (8 * (j % 4));
    }
  }
  if (st) {
    const float step = 1.0f / t.inv_quantum;
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      // Saturation: |x * inv| <= amax * inv for every finite x (rounding is monotonic).
      if (!(__fmul_rn(u2f(pc.amax[b]), pc.inv[b]) <= t.sat_mid)) {
#pragma unroll
        for (int j = 8 * b; j < 8 * b + 8; ++j) {
          const uint32_t a = f2u(v[j]) & kAbsMask;
          st->sat +=
              (a < kInfBits) & ((f2u(__fmul_rn(v[j], pc.inv[b])) & kAbsMask) > f2u(t.sat_mid));
        }
      }
      if (!st->full) continue;
      // Underflow: a non-zero finite value whose code is +-0. Most lanes rule it out at once: the
      // smallest non-zero |x| scaled stays at or above the smallest FP8 step (a value rounds to 0
      // only at or below half of it).
      uint32_t amin = 0xffffffffu;
#pragma unroll
      for (int j = 8 * b; j < 8 * b + 8; ++j)
        amin = min(amin, (f2u(v[j]) & kAbsMask) - 1u);  // 0 -> max
      if (amin < kInfBits && !(__fmul_rn(u2f(amin + 1u), pc.inv[b]) >= step)) {
#pragma unroll
        for (int j = 8 * b; j < 8 * b + 8; ++j) {
          const uint32_t a = f2u(v[j]) & kAbsMask;
          st->under += (a != 0) & (a < kInfBits) & (((w[j / 4] >> (8 * (j % 4))) & 0x7fu) == 0);
        }
      }
      if (pc.flagged[b]) {
#pragma unroll
        for (int j = 8 * b; j < 8 * b + 8; ++j) st->nonfinite += (f2u(v[j]) & kAbsMask) >= kInfBits;
      }
    }
    if (st->full && (threadIdx.x & 31) == 0)
      st->elements += 512, st->nonfinite_blocks += pc.flagged[0] + pc.flagged[1];
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// Writes pair `u`'s two scale words (lane d for destination d, one 8-byte store) and this lane's
// 16 codes (a kG-byte store per group) to every destination. The destinations' scales must be
// 8-byte and their codes 16-byte aligned (the cuda backend's slots are).
template <int kG, typename Dsts>
__device__ __forceinline__ void store_pair(const Dsts& dsts, int64_t u, const PairCode& pc,
                                           const uint4& w) {
  const int lane = threadIdx.x & 31;
  const uint32_t c[4] = {w.x, w.y, w.z, w.w};
#pragma unroll (Dsts::kCap <= 4 ? Dsts::kCap : 1)
  for (int d = 0; d < Dsts::kCap; ++d) {
    if (d >= dsts.count) break;
    if (lane == d) *reinterpret_cast<uint2*>(dsts.p[d] + 8 * u) = pc.words();
    uint8_t* codes = dsts.p[d] + dsts.code_off + 512 * u;
    if constexpr (kG == 4) {
#pragma unroll
      for (int g = 0; g < 4; ++g) *reinterpret_cast<uint32_t*>(codes + pair_offset<4>(g)) = c[g];
    } else {
#pragma unroll
      for (int g = 0; g < 2; ++g)
        *reinterpret_cast<uint2*>(codes + pair_offset<8>(g)) = make_uint2(c[2 * g], c[2 * g + 1]);
    }
  }
}

// This lane's 16 codes of pair u from `codes` (the pair's code bytes start at codes + 512u).
template <int kG>
__device__ __forceinline__ uint4 load_pair_codes(const uint8_t* codes, int64_t u) {
  const uint8_t* p = codes + 512 * u;
  if constexpr (kG == 4) {
    return make_uint4(*reinterpret_cast<const uint32_t*>(p + pair_offset<4>(0)),
                      *reinterpret_cast<const uint32_t*>(p + pair_offset<4>(1)),
                      *reinterpret_cast<const uint32_t*>(p + pair_offset<4>(2)),
                      *reinterpret_cast<const uint32_t*>(p + pair_offset<4>(3)));
  } else {
    const uint2 a = *reinterpret_cast<const uint2*>(p + pair_offset<8>(0));
    const uint2 b = *reinterpret_cast<const uint2*>(p + pair_offset<8>(1));
    return make_uint4(a.x, a.y, b.x, b.y);
  }
}

// The 16 values of codes w under the pair's scale words sb (block 2u's in x): decode_one for each.
template <bool kE5>
__device__ __forceinline__ void decode16(const uint4& w, uint2 sb, float o[16]) {
  const uint32_t c[4] = {w.x, w.y, w.z, w.w};
  const uint32_t s[2] = {sb.x, sb.y};
#pragma unroll
  for (int g = 0; g < 4; ++g) {
    const uint32_t sw = s[g / 2];
    if (!(sw & 0x80000000u)) {
      const float f = __uint_as_float(sw);
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
            static_cast<__nv_fp8x2_storage_t>(c[g] >> (16 * k)), kE5 ? __NV_E5M2 : __NV_E4M3);
        const float2 x = __half22float2(__half2(h));
        o[4 * g + 2 * k] = __fmul_rn(x.x, f);
        o[4 * g + 2 * k + 1] = __fmul_rn(x.y, f);
      }
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) o[4 * g + j] = decode_one<kE5>(code_of(c[g], j), sw);
    }
  }
}

// This lane's 16 elements of a pair of T, raw: one 16-byte access per group; fetch16 and store16
// move them (p: the pair's first element, 16-byte aligned).
template <typename T>
struct Raw16 {
  uint4 q[sizeof(T)];  // sizeof(T) groups of 16 / sizeof(T) elements
};
template <typename T>
__device__ __forceinline__ void fetch16(const T* p, Raw16<T>& r) {
#pragma unroll
  for (int g = 0; g < static_cast<int>(sizeof(T)); ++g)
    r.q[g] = *reinterpret_cast<const uint4*>(p + pair_offset<kGroupOf<T>>(g));
}
template <typename T>
__device__ __forceinline__ void unpack16(const Raw16<T>& r, float v[16]) {
  const T* h = reinterpret_cast<const T*>(r.q);
#pragma unroll
  for (int j = 0; j < 16; ++j) v[j] = load_f<T>(h, j);
}
template <typename T>
__device__ __forceinline__ void store16(T* p, const float v[16]) {
  Raw16<T> r;
  T* h = reinterpret_cast<T*>(r.q);
#pragma unroll
  for (int j = 0; j < 16; ++j) store_f<T>(h, j, v[j]);
#pragma unroll
  for (int g = 0; g < static_cast<int>(sizeof(T)); ++g)
    *reinterpret_cast<uint4*>(p + pair_offset<kGroupOf<T>>(g)) = r.q[g];
}

}  // namespace commx::lowp::gpu
