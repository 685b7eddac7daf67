// GPU kernels of the block-scaled FP8 codec: the same encoded layout and the same bits as the CPU
// reference (lowp/fp8_codec.h), for device buffers on a CUDA stream. Built into the static
// library commx_lowp_cuda (sm_90) when a CUDA compiler is found; the cuda backend links it.
// Layer: algorithms (low-precision codec, GPU).
//
// Pointers are device pointers. Every call only enqueues work on `stream` and returns the launch
// error (cudaSuccess when enqueued). Graph-capturable: no allocation, no synchronisation.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "commx/types.h"
#include "lowp/fp8_codec.h"

namespace commx::lowp::gpu {

// Device counters, in this order (add them to a CodecStats with stats_from_device()).
enum StatIndex {
  kStatElements,
  kStatSaturated,
  kStatUnderflow,
  kStatNonfiniteValues,
  kStatNonfiniteBlocks,
  kNumStats
};

// Encodes n elements of `src` (f32/bf16/f16) into `dst` (encoded_bytes(n, cfg.block) bytes).
// `d_stats` (nullable): kNumStats unsigned long long counters in device memory, added to.
cudaError_t encode(const void* src, DataType dtype, int64_t n, uint8_t* dst, const CodecConfig& cfg,
                   cudaStream_t stream, unsigned long long* d_stats = nullptr,
                   uint64_t sr_stream = 0, int64_t sr_offset = 0);
// Decodes into `dst` of `dtype` (f32/bf16/f16).
cudaError_t decode(const uint8_t* enc, int64_t n, void* dst, DataType dtype, const CodecConfig& cfg,
                   cudaStream_t stream);
// acc[i] = acc[i] + decode(enc)[i] in FP32 (no fused multiply-add), like Fp8Codec::accumulate.
cudaError_t accumulate(float* acc, const uint8_t* enc, int64_t n, const CodecConfig& cfg,
                       cudaStream_t stream);

// Element-wise steps that, with the three above, build the low-precision all_reduce on a GPU with
// the exact semantics of the host path (lowp_collectives.cc), so both give the same bits:
//   owner of a slice:  cudaMemsetAsync(acc, 0); for p = 0..size-1 in order:
//                        p == rank ? add_own(acc, own_slice) : accumulate(acc, enc_from_p);
//                      AVG: divide(acc, size); encode(acc) -> Q1;
//                      two-term gather: residual(acc, Q1) -> r; encode(r) -> Q2
//   every rank:        decode(Q1) (two-term: decode(Q1) to f32, accumulate(Q2), convert)
// acc[i] = acc[i] + float(src[i]) (src f32/bf16/f16).
cudaError_t add_own(float* acc, const void* src, DataType dtype, int64_t n, cudaStream_t stream);
// acc[i] = acc[i] / d (IEEE division).
cudaError_t divide(float* acc, int64_t n, float d, cudaStream_t stream);
// r[i] = acc[i] - decode(enc)[i], or 0 where the decoded value is not finite.
cudaError_t residual(const float* acc, const uint8_t* enc, int64_t n, const CodecConfig& cfg,
                     float* r, cudaStream_t stream);
// dst[i] = src[i] rounded to nearest even into f32/bf16/f16.
cudaError_t convert(const float* src, int64_t n, void* dst, DataType dtype, cudaStream_t stream);

void stats_from_device(const unsigned long long host_copy[kNumStats], CodecStats* out);

}  // namespace commx::lowp::gpu
