// CUDA kernels of the block-scaled FP8 codec (see fp8_codec_cuda.h). One warp encodes one block
// (16-byte loads where aligned, warp max of |x|, hardware cvt to FP8 with satfinite); decode and
// accumulate are element-wise with 4 elements per thread. Every float step uses the _rn
// intrinsics and the library is built with --fmad=false, so results equal the CPU reference.
// Layer: algorithms (low-precision codec, GPU).
#include "lowp/cuda/fp8_codec_cuda.h"
#include "lowp/cuda/fp8_device.cuh"

namespace commx::lowp::gpu {

namespace {

template <typename T, bool kE5, bool kSR>
__global__ void __launch_bounds__(kThreads)
    encode_kernel(const T* __restrict__ src, int64_t n, int64_t block, uint8_t* __restrict__ dst,
                  unsigned long long* stats, uint64_t seed, uint64_t stream, int64_t sr_offset) {
  const int64_t nb = (n + block - 1) / block;
  const int64_t blk = static_cast<int64_t>(blockIdx.x) * kWarpsPerCta + (threadIdx.x >> 5);
  if (blk >= nb) return;
  const int64_t off = blk * block;
  const T* x = src + off;
  const BufferSrc<T> in{x, (reinterpret_cast<uintptr_t>(x) % (4 * sizeof(T))) == 0,
                        min(block, n - off)};
  EncDstsN<1> d{};
  d.p[0] = dst;
  d.count = 1;
  d.code_off = 4 * nb;
  StatAcc acc;
  encode_block_warp<kE5, kSR>(in, in.m, blk, nb, block, d, stats ? &acc : nullptr, seed, stream,
                              static_cast<uint64_t>(sr_offset + off));
  if (stats) flush_stats(stats, acc);
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
