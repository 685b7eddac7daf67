// Low-precision collectives over the abstract Transport: FP8 (block-scaled) on the wire, FP32
// arithmetic. Host buffers; any backend that has a Transport can call these.
// Layer: algorithms (low-precision).
//
//   all_reduce      quantize each slice of the input, direct reduce-scatter (each rank receives
//                   every peer's encoded copy of its slice and accumulates in FP32, in rank order,
//                   its own slice exactly), AVG divides once, the reduced slice is re-quantized
//                   once, all-gather of the encoded slices, decode. Every rank (the owner
//                   included) decodes the same bytes: results are bit-identical on all ranks.
//                   With two_term_gather the slice travels as Q(s) and Q(s - D(Q(s))).
//   reduce_scatter  the first half of the above; the FP32 result is rounded to the output dtype.
//   all_gather      each rank encodes its input once; everyone, itself included, decodes it.
//   all_to_all      each chunk is encoded for its destination; a rank's own chunk is copied.
// All ranks must use the same codec configuration: each message carries an 8-byte tag (format,
// block), so a mismatch is a clear error (or the transport's size-mismatch error), not garbage.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "commx/tensor.h"
#include "commx/types.h"
#include "lowp/fp8_codec.h"
#include "transport/transport.h"

namespace commx::lowp {

// Buffers the collectives reuse from op to op (grown on demand, never shrunk), so that a large op
// does not allocate and page-fault its buffers every time. Give one per comm; not for concurrent
// ops. About 3 bytes per element of the largest op plus 8 bytes per element of its slice.
struct LowpScratch {
  std::vector<uint8_t> send, recv, gather;
  std::vector<float> acc, tmp;
};

struct LowpContext {
  Transport& transport;
  int rank = 0;
  int size = 1;
  Deadline deadline;
  const Fp8Codec& codec;
  CodecStats* stats = nullptr;  // optional: counters of this rank's encodes are added
  uint64_t sr_stream = 0;       // stochastic rounding: distinct per op (e.g. the op's seq)
  std::string ctx;              // error prefix: op_context(...) of the caller
  // all_reduce only: gather the reduced slices as two FP8 terms (value + residual, 2 bytes per
  // element) instead of one, which removes nearly all of the re-quantization error at the cost
  // of doubling the all-gather half's traffic (see docs/low_precision.md).
  bool two_term_gather = false;
  LowpScratch* scratch = nullptr;  // null: buffers for this op only
};

// The owners' slices of an all_reduce of n elements: block-aligned, as even as whole blocks allow.
struct LowpSlices {
  std::vector<int64_t> off, len;
  LowpSlices(int64_t n, int64_t block, int size);
};

// The stochastic-rounding stream of a phase of an op (0: reduce-scatter sends, 1: re-encode of the
// reduced slice, 2: all_gather, 3: all_to_all, 4: the residual of the two-term gather), so that
// every implementation of these collectives draws the same random bits.
inline uint64_t sr_stream_of(uint64_t op_stream, int phase, int rank) {
  return (op_stream * 8 + static_cast<uint64_t>(phase)) * 65536 + static_cast<uint64_t>(rank);
}

// `in` and `out` have the same count and dtype (f32/bf16/f16); in == out (in place) is allowed.
void lowp_all_reduce(const LowpContext& c, const Tensor& in, const Tensor& out, ReduceKind kind);
// outs: size() tensors with in's count and dtype.
void lowp_all_gather(const LowpContext& c, const Tensor& in, std::span<const Tensor> outs);
// ins: size() tensors with out's count and dtype.
void lowp_reduce_scatter(const LowpContext& c, std::span<const Tensor> ins, const Tensor& out,
                         ReduceKind kind);
// ins[p] goes to rank p and arrives in its outs[rank]; counts may differ per pair (the sender's
// ins[p].count must equal the receiver's outs[sender].count).
void lowp_all_to_all(const LowpContext& c, std::span<const Tensor> ins,
                     std::span<const Tensor> outs);

}  // namespace commx::lowp
