// Fused GPU steps of the low-precision collectives, for a backend that moves the encoded bytes
// itself (the cuda backend writes them straight into its peers' registered buffers): encode many
// chunks in one launch, reduce-and-re-encode a slice (FP32 sums in rank order, the result sent to
// many destinations), and decode many chunks. Same bits as the host path (lowp_collectives.cc).
// Layer: algorithms (low-precision, GPU). Pointers are device pointers (peer-mapped ones too);
// every call only enqueues on `stream` (graph-capturable) and returns the launch error.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "commx/types.h"
#include "lowp/fp8_codec.h"

namespace commx::lowp::gpu {

inline constexpr int kMaxItems = 8;

// Encodes `n` elements of `src` (dtype f32/bf16/f16) into each of dst[0..ndst) (every copy
// gets the same bytes). Stochastic rounding draws element i from (seed, sr_stream, sr_offset+i).
struct EncodeItem {
  const void* src;
  uint8_t* dst[kMaxItems];
  int ndst;
  int64_t n;
  int64_t sr_offset;
};
struct EncodeBatch {
  EncodeItem item[kMaxItems];
  int count;
};
cudaError_t encode_batch(const EncodeBatch& b, DataType dtype, const CodecConfig& cfg,
                         uint64_t sr_stream, unsigned long long* d_stats, cudaStream_t stream);

// Decodes enc (n elements; two_term: enc holds Q1 then Q2 and the value is D(Q1) + D(Q2) in FP32)
// into dst of `dtype`.
struct DecodeItem {
  const uint8_t* enc;
  void* dst;
  int64_t n;
};
struct DecodeBatch {
  DecodeItem item[kMaxItems];
  int count;
};
cudaError_t decode_batch(const DecodeBatch& b, DataType dtype, const CodecConfig& cfg,
                         bool two_term, cudaStream_t stream);

// The owner's step of the reduce-scatter: acc = 0; for p = 0..world-1 in order: acc +=
// (p == rank ? float(own[i]) : decode(recv[p])[i]); AVG: acc /= world. Then either
//   reduce_encode: encodes acc (two_term: also the residual acc - D(Q1) as Q2, right after Q1)
//                  into every dst[0..ndst) (sr streams sr_stream and sr_stream2, offset
//                  sr_offset), or
//   reduce_store:  rounds acc into `out` of `dtype`.
struct ReduceSrc {
  const void* own;  // this rank's own n elements (dtype)
  const uint8_t* recv[kMaxItems];  // encoded n elements from each peer (recv[rank] unused)
  int rank;
  int world;
  int64_t n;
  bool avg;
};
cudaError_t reduce_encode(const ReduceSrc& r, DataType dtype, const CodecConfig& cfg,
                          bool two_term, uint8_t* const* dst, int ndst, uint64_t sr_stream,
                          uint64_t sr_stream2, int64_t sr_offset, unsigned long long* d_stats,
                          cudaStream_t stream);
cudaError_t reduce_store(const ReduceSrc& r, DataType dtype, const CodecConfig& cfg, void* out,
                         cudaStream_t stream);

}  // namespace commx::lowp::gpu
