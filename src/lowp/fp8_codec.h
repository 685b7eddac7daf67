// Block-scaled FP8 codec: FP32/BF16/F16 <-> FP8 (E4M3 or E5M2) with one FP32 scale per block,
// and decode-accumulate into FP32 (the inner step of a low-precision reduce-scatter).
// This CPU implementation is the reference; src/lowp/cuda produces the same bits on a GPU.
// Layer: algorithms (low-precision codec).
//
// Encoded chunk of n elements, block size B, nb = ceil(n / B) blocks:
//   [nb float32 scales][n fp8 codes]            (encoded_bytes(n, B) = 4 * nb + n)
// Each chunk is self-contained, so the chunks of a tensor can be sent separately.
//
// Per block: amax = max |x|; target T = the format's largest finite value (448 / 57344);
// inv = T / amax, scale = amax / T (IEEE float divisions); code = fp8(x * inv) rounded to nearest
// even (or stochastically) and saturated; decode = fp8_value(code) * scale.
//   - Zero block (amax == 0), or amax so small that T / amax overflows (< ~1e-36 for E4M3):
//     scale 0, codes +-0; decodes to (signed) zeros.
//   - Non-finite block (any NaN or +-Inf): flagged by a negative scale (sign bit set). Its finite
//     values use T / 2 as target, so the code of the largest finite value is free to mean Inf in
//     E4M3 (E5M2 has its own Inf code); NaN uses the NaN code. Decoding reproduces NaN and +-Inf
//     exactly and the finite values as usual. Counted in CodecStats.
#pragma once

#include <cstddef>
#include <cstdint>

#include "commx/types.h"

namespace commx::lowp {

enum class Fp8Format : uint8_t { kE4M3, kE5M2 };
const char* fp8_format_name(Fp8Format f);

// Default block size (elements per scale), chosen by measurement (docs/low_precision.md):
// 256 keeps the scale overhead at 1.6% of the payload with most of the accuracy of 128.
inline constexpr int64_t kDefaultBlock = 256;
inline constexpr int64_t kMaxBlock = 4096;

struct CodecConfig {
  Fp8Format format = Fp8Format::kE4M3;
  int64_t block = kDefaultBlock;  // 16..kMaxBlock, a multiple of 16
  bool stochastic = false;        // stochastic rounding instead of round-to-nearest-even
  uint64_t seed = 0;              // stochastic rounding: same seed, same bits
};

// Counters a caller may aggregate (per comm). Plain integers: one per thread/call.
struct CodecStats {
  uint64_t elements = 0;          // encoded
  uint64_t saturated = 0;         // finite values clamped to the largest finite FP8 value
  uint64_t underflow = 0;         // non-zero values that encoded as zero
  uint64_t nonfinite_values = 0;  // NaN / +-Inf values seen
  uint64_t nonfinite_blocks = 0;  // blocks flagged for them
  void add(const CodecStats& o);
};

inline int64_t num_blocks(int64_t n, int64_t block) { return (n + block - 1) / block; }
inline size_t encoded_bytes(int64_t n, int64_t block) {
  return static_cast<size_t>(num_blocks(n, block)) * 4 + static_cast<size_t>(n);
}
// Whether `t` can be encoded (f32, bf16, f16).
bool codec_supports(DataType t);

class Fp8Codec {
 public:
  // Throws InvalidArgument on a bad block size.
  explicit Fp8Codec(const CodecConfig& cfg);
  const CodecConfig& config() const { return cfg_; }
  size_t encoded_bytes(int64_t n) const { return lowp::encoded_bytes(n, cfg_.block); }

  // Encodes n elements of `src` (dtype f32/bf16/f16) into `dst` (encoded_bytes(n) bytes).
  // Stochastic rounding draws element i's random bits from (seed, sr_stream, sr_offset + i).
  void encode(const void* src, DataType dtype, int64_t n, uint8_t* dst, CodecStats* stats = nullptr,
              uint64_t sr_stream = 0, int64_t sr_offset = 0) const;
  // Decodes into `dst` of `dtype` (f32/bf16/f16; bf16/f16 rounded to nearest even).
  void decode(const uint8_t* enc, int64_t n, void* dst, DataType dtype) const;
  // acc[i] = acc[i] + decode(enc)[i], in FP32, element by element (no fused multiply-add).
  void accumulate(float* acc, const uint8_t* enc, int64_t n) const;

 private:
  CodecConfig cfg_;
};

// Converts between float and f32/bf16/f16 buffers (used by the collectives around the codec).
void to_float(const void* src, DataType dtype, int64_t n, float* dst);
void from_float(const float* src, int64_t n, void* dst, DataType dtype);

}  // namespace commx::lowp
