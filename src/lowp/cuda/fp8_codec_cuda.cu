// CUDA kernels of the block-scaled FP8 codec (see fp8_codec_cuda.h). One warp encodes one block
// (16-byte loads where aligned, warp max of |x|, hardware cvt to FP8 with satfinite); decode and
// accumulate are element-wise with 4 elements per thread. Every float step uses the _rn
// intrinsics and the library is built with --fmad=false, so results equal the CPU reference.
// Layer: algorithms (low-precision codec, GPU).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "lowp/cuda/fp8_codec_cuda.h"
#include "lowp/fp8_bits.h"

namespace commx::lowp::gpu {

namespace {

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
__device__ __forceinline__ void load4(const T* p, int64_t i, bool vec, float v[4]) {
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

template <typename T, bool kE5, bool kSR>
__global__ void __launch_bounds__(kThreads)
    encode_kernel(const T* __restrict__ src, int64_t n, int64_t block, uint8_t* __restrict__ dst,
                  unsigned long long* stats, uint64_t seed, uint64_t stream, int64_t sr_offset) {
  constexpr Fp8Traits t = kE5 ? e5m2_traits() : e4m3_traits();
  const int lane = threadIdx.x & 31;
  const int64_t nb = (n + block - 1) / block;
  const int64_t blk = static_cast<int64_t>(blockIdx.x) * kWarpsPerCta + (threadIdx.x >> 5);
  if (blk >= nb) return;
  const int64_t off = blk * block;
  const int64_t m = min(block, n - off);
  const T* x = src + off;
  uint8_t* codes = dst + nb * 4 + off;
  const bool vec_in = (reinterpret_cast<uintptr_t>(x) % (4 * sizeof(T))) == 0;
  const bool vec_out = (reinterpret_cast<uintptr_t>(codes) % 4) == 0;

  // Pass 1: amax over |x| as bits (integer order equals float order for non-negative floats).
  uint32_t amax = 0;
  for (int64_t i = 4 * lane; i < m; i += 128) {
    float v[4];
    if (i + 4 <= m) {
      load4<T>(x, i, vec_in, v);
    } else {
      for (int j = 0; j < 4; ++j) v[j] = i + j < m ? load_f<T>(x, i + j) : 0.0f;
    }
    for (int j = 0; j < 4; ++j) amax = max(amax, f2u(v[j]) & kAbsMask);
  }
  amax = __reduce_max_sync(0xffffffffu, amax);
  const bool flagged = amax >= kInfBits;
  if (flagged) {  // the finite amax of a block with NaN/Inf
    amax = 0;
    for (int64_t i = lane; i < m; i += 32) {
      uint32_t a = f2u(load_f<T>(x, i)) & kAbsMask;
      if (a < kInfBits) amax = max(amax, a);
    }
    amax = __reduce_max_sync(0xffffffffu, amax);
  }
  const BlockScale bs = block_scale(u2f(amax), flagged ? t.flagged_target : t.max);
  if (lane == 0) {
    uint32_t sb = flagged ? (f2u(bs.scale) | 0x80000000u) : f2u(bs.scale);
    uint8_t* sp = dst + blk * 4;  // byte stores: the scales need no alignment
    sp[0] = sb & 0xff, sp[1] = (sb >> 8) & 0xff, sp[2] = (sb >> 16) & 0xff, sp[3] = sb >> 24;
  }

  // Pass 2: codes (and counters).
  uint32_t under = 0, sat = 0, nonfinite = 0;
  const uint64_t idx0 = static_cast<uint64_t>(sr_offset + off);
  for (int64_t i = 4 * lane; i < m; i += 128) {
    float v[4];
    const bool full = i + 4 <= m;
    if (full) {
      load4<T>(x, i, vec_in, v);
    } else {
      for (int j = 0; j < 4; ++j) v[j] = i + j < m ? load_f<T>(x, i + j) : 0.0f;
    }
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
    if (full && vec_out) {
      *reinterpret_cast<uint32_t*>(codes + i) =
          static_cast<uint32_t>(c[0]) | (static_cast<uint32_t>(c[1]) << 8) |
          (static_cast<uint32_t>(c[2]) << 16) | (static_cast<uint32_t>(c[3]) << 24);
    } else {
      for (int j = 0; j < 4; ++j)
        if (i + j < m) codes[i + j] = c[j];
    }
  }
  if (stats) {
    under = __reduce_add_sync(0xffffffffu, under);
    sat = __reduce_add_sync(0xffffffffu, sat);
    nonfinite = __reduce_add_sync(0xffffffffu, nonfinite);
    if (lane == 0) {
      atomicAdd(&stats[kStatElements], static_cast<unsigned long long>(m));
      if (sat) atomicAdd(&stats[kStatSaturated], static_cast<unsigned long long>(sat));
      if (under) atomicAdd(&stats[kStatUnderflow], static_cast<unsigned long long>(under));
      if (nonfinite) {
        atomicAdd(&stats[kStatNonfiniteValues], static_cast<unsigned long long>(nonfinite));
        atomicAdd(&stats[kStatNonfiniteBlocks], 1ull);
      }
    }
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

// Four elements per thread, grid-stride. `block` is a multiple of 16, so 4 consecutive elements
// starting at a multiple of 4 share one block.
template <typename T, bool kE5>
__global__ void __launch_bounds__(kThreads)
    decode_kernel(const uint8_t* __restrict__ enc, int64_t n, int64_t block, T* __restrict__ dst) {
  const int64_t nb = (n + block - 1) / block;
  const uint8_t* codes = enc + nb * 4;
  const bool vec_in = (reinterpret_cast<uintptr_t>(codes) % 4) == 0;
  for (int64_t i = 4 * (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x); i < n;
       i += 4 * static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint32_t sb = load_scale(enc, i / block);
    if (i + 4 <= n && vec_in) {
      uint32_t w = *reinterpret_cast<const uint32_t*>(codes + i);
      for (int j = 0; j < 4; ++j)
        store_f<T>(dst, i + j, decode_one<kE5>((w >> (8 * j)) & 0xff, sb));
    } else {
      for (int j = 0; j < 4 && i + j < n; ++j)
        store_f<T>(dst, i + j, decode_one<kE5>(codes[i + j], sb));
    }
  }
}

template <bool kE5>
__global__ void __launch_bounds__(kThreads)
    accumulate_kernel(float* __restrict__ acc, const uint8_t* __restrict__ enc, int64_t n,
                      int64_t block) {
  const int64_t nb = (n + block - 1) / block;
  const uint8_t* codes = enc + nb * 4;
  const bool vec =
      (reinterpret_cast<uintptr_t>(codes) % 4) == 0 && (reinterpret_cast<uintptr_t>(acc) % 16) == 0;
  for (int64_t i = 4 * (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x); i < n;
       i += 4 * static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint32_t sb = load_scale(enc, i / block);
    if (i + 4 <= n && vec) {
      uint32_t w = *reinterpret_cast<const uint32_t*>(codes + i);
      float4 a = *reinterpret_cast<float4*>(acc + i);
      a.x = __fadd_rn(a.x, decode_one<kE5>(w & 0xff, sb));
      a.y = __fadd_rn(a.y, decode_one<kE5>((w >> 8) & 0xff, sb));
      a.z = __fadd_rn(a.z, decode_one<kE5>((w >> 16) & 0xff, sb));
      a.w = __fadd_rn(a.w, decode_one<kE5>(w >> 24, sb));
      *reinterpret_cast<float4*>(acc + i) = a;
    } else {
      for (int j = 0; j < 4 && i + j < n; ++j)
        acc[i + j] = __fadd_rn(acc[i + j], decode_one<kE5>(codes[i + j], sb));
    }
  }
}

#define COMMX_GRID_STRIDE(i, n)                                                          \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

template <typename T>
__global__ void add_own_kernel(float* __restrict__ acc, const T* __restrict__ src, int64_t n) {
  COMMX_GRID_STRIDE(i, n) acc[i] = __fadd_rn(acc[i], load_f<T>(src, i));
}

__global__ void divide_kernel(float* __restrict__ acc, int64_t n, float d) {
  COMMX_GRID_STRIDE(i, n) acc[i] = __fdiv_rn(acc[i], d);
}

template <bool kE5>
__global__ void residual_kernel(const float* __restrict__ acc, const uint8_t* __restrict__ enc,
                                int64_t n, int64_t block, float* __restrict__ r) {
  const int64_t nb = (n + block - 1) / block;
  const uint8_t* codes = enc + nb * 4;
  COMMX_GRID_STRIDE(i, n) {
    float d = decode_one<kE5>(codes[i], load_scale(enc, i / block));
    r[i] = (f2u(d) & 0x7f800000u) != 0x7f800000u ? __fsub_rn(acc[i], d) : 0.0f;
  }
}

template <typename T>
__global__ void convert_kernel(const float* __restrict__ src, int64_t n, T* __restrict__ dst) {
  COMMX_GRID_STRIDE(i, n) store_f<T>(dst, i, src[i]);
}

unsigned elementwise_grid(int64_t n) {
  int64_t threads = (n + 3) / 4;
  int64_t ctas = (threads + kThreads - 1) / kThreads;
  return static_cast<unsigned>(ctas < 65535 ? (ctas > 0 ? ctas : 1) : 65535);
}

bool valid(const CodecConfig& cfg) {
  return cfg.block >= 16 && cfg.block <= kMaxBlock && cfg.block % 16 == 0;
}

template <typename T, bool kE5>
void launch_encode(const void* src, int64_t n, uint8_t* dst, const CodecConfig& cfg, cudaStream_t s,
                   unsigned long long* st, uint64_t sr_stream, int64_t sr_off) {
  const int64_t nb = (n + cfg.block - 1) / cfg.block;
  const unsigned grid = static_cast<unsigned>((nb + kWarpsPerCta - 1) / kWarpsPerCta);
  const T* p = static_cast<const T*>(src);
  if (cfg.stochastic)
    encode_kernel<T, kE5, true>
        <<<grid, kThreads, 0, s>>>(p, n, cfg.block, dst, st, cfg.seed, sr_stream, sr_off);
  else
    encode_kernel<T, kE5, false>
        <<<grid, kThreads, 0, s>>>(p, n, cfg.block, dst, st, cfg.seed, sr_stream, sr_off);
}

template <typename T>
void launch_decode(const uint8_t* enc, int64_t n, void* dst, const CodecConfig& cfg,
                   cudaStream_t s) {
  if (cfg.format == Fp8Format::kE5M2)
    decode_kernel<T, true>
        <<<elementwise_grid(n), kThreads, 0, s>>>(enc, n, cfg.block, static_cast<T*>(dst));
  else
    decode_kernel<T, false>
        <<<elementwise_grid(n), kThreads, 0, s>>>(enc, n, cfg.block, static_cast<T*>(dst));
}

}  // namespace

cudaError_t encode(const void* src, DataType dtype, int64_t n, uint8_t* dst, const CodecConfig& cfg,
                   cudaStream_t stream, unsigned long long* d_stats, uint64_t sr_stream,
                   int64_t sr_offset) {
  if (!valid(cfg) || n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const bool e5 = cfg.format == Fp8Format::kE5M2;
  switch (dtype) {
    case DataType::kFloat32:
      e5 ? launch_encode<float, true>(src, n, dst, cfg, stream, d_stats, sr_stream, sr_offset)
         : launch_encode<float, false>(src, n, dst, cfg, stream, d_stats, sr_stream, sr_offset);
      break;
    case DataType::kBFloat16:
      e5 ? launch_encode<__nv_bfloat16, true>(src, n, dst, cfg, stream, d_stats, sr_stream,
                                              sr_offset)
         : launch_encode<__nv_bfloat16, false>(src, n, dst, cfg, stream, d_stats, sr_stream,
                                               sr_offset);
      break;
    case DataType::kFloat16:
      e5 ? launch_encode<__half, true>(src, n, dst, cfg, stream, d_stats, sr_stream, sr_offset)
         : launch_encode<__half, false>(src, n, dst, cfg, stream, d_stats, sr_stream, sr_offset);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t decode(const uint8_t* enc, int64_t n, void* dst, DataType dtype, const CodecConfig& cfg,
                   cudaStream_t stream) {
  if (!valid(cfg) || n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  switch (dtype) {
    case DataType::kFloat32:
      launch_decode<float>(enc, n, dst, cfg, stream);
      break;
    case DataType::kBFloat16:
      launch_decode<__nv_bfloat16>(enc, n, dst, cfg, stream);
      break;
    case DataType::kFloat16:
      launch_decode<__half>(enc, n, dst, cfg, stream);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t accumulate(float* acc, const uint8_t* enc, int64_t n, const CodecConfig& cfg,
                       cudaStream_t stream) {
  if (!valid(cfg) || n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (cfg.format == Fp8Format::kE5M2)
    accumulate_kernel<true><<<elementwise_grid(n), kThreads, 0, stream>>>(acc, enc, n, cfg.block);
  else
    accumulate_kernel<false><<<elementwise_grid(n), kThreads, 0, stream>>>(acc, enc, n, cfg.block);
  return cudaGetLastError();
}

cudaError_t add_own(float* acc, const void* src, DataType dtype, int64_t n, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const unsigned g = elementwise_grid(4 * n);  // one element per thread
  switch (dtype) {
    case DataType::kFloat32:
      add_own_kernel<float><<<g, kThreads, 0, stream>>>(acc, static_cast<const float*>(src), n);
      break;
    case DataType::kBFloat16:
      add_own_kernel<__nv_bfloat16>
          <<<g, kThreads, 0, stream>>>(acc, static_cast<const __nv_bfloat16*>(src), n);
      break;
    case DataType::kFloat16:
      add_own_kernel<__half><<<g, kThreads, 0, stream>>>(acc, static_cast<const __half*>(src), n);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t divide(float* acc, int64_t n, float d, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  divide_kernel<<<elementwise_grid(4 * n), kThreads, 0, stream>>>(acc, n, d);
  return cudaGetLastError();
}

cudaError_t residual(const float* acc, const uint8_t* enc, int64_t n, const CodecConfig& cfg,
                     float* r, cudaStream_t stream) {
  if (!valid(cfg) || n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const unsigned g = elementwise_grid(4 * n);
  if (cfg.format == Fp8Format::kE5M2)
    residual_kernel<true><<<g, kThreads, 0, stream>>>(acc, enc, n, cfg.block, r);
  else
    residual_kernel<false><<<g, kThreads, 0, stream>>>(acc, enc, n, cfg.block, r);
  return cudaGetLastError();
}

cudaError_t convert(const float* src, int64_t n, void* dst, DataType dtype, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const unsigned g = elementwise_grid(4 * n);
  switch (dtype) {
    case DataType::kFloat32:
      convert_kernel<float><<<g, kThreads, 0, stream>>>(src, n, static_cast<float*>(dst));
      break;
    case DataType::kBFloat16:
      convert_kernel<__nv_bfloat16>
          <<<g, kThreads, 0, stream>>>(src, n, static_cast<__nv_bfloat16*>(dst));
      break;
    case DataType::kFloat16:
      convert_kernel<__half><<<g, kThreads, 0, stream>>>(src, n, static_cast<__half*>(dst));
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

void stats_from_device(const unsigned long long h[kNumStats], CodecStats* out) {
  out->elements += h[kStatElements];
  out->saturated += h[kStatSaturated];
  out->underflow += h[kStatUnderflow];
  out->nonfinite_values += h[kStatNonfiniteValues];
  out->nonfinite_blocks += h[kStatNonfiniteBlocks];
}

}  // namespace commx::lowp::gpu
