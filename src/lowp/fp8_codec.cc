// CPU reference implementation of the block-scaled FP8 codec (see fp8_codec.h for the format).
// Loops are written branch-free per element so the compiler vectorises them; built with
// -ffp-contract=off so that no multiply-add is fused (the GPU kernels round each step alike);
// -fno-trapping-math only lets it if-convert the selects (no result changes).
// Layer: algorithms (low-precision codec).
#include "lowp/fp8_codec.h"

#include <cstring>
#include <string>

#include "commx/error.h"
#include "commx/numeric.h"
#include "lowp/fp8_bits.h"

namespace commx::lowp {

const char* fp8_format_name(Fp8Format f) { return f == Fp8Format::kE4M3 ? "fp8e4m3" : "fp8e5m2"; }

void CodecStats::add(const CodecStats& o) {
  elements += o.elements;
  saturated += o.saturated;
  underflow += o.underflow;
  nonfinite_values += o.nonfinite_values;
  nonfinite_blocks += o.nonfinite_blocks;
}

bool codec_supports(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kBFloat16 || t == DataType::kFloat16;
}

namespace {

// x86-64: an AVX2 clone of the hot functions, picked at load time (FMA stays off: see above).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define COMMX_LOWP_CLONES __attribute__((target_clones("avx2", "default"), flatten))
#else
#define COMMX_LOWP_CLONES
#endif

constexpr uint32_t kAbsMask = 0x7fffffffu;
constexpr uint32_t kInfBits = 0x7f800000u;

// Exact f16 -> float without branches (the scalar numeric.h version uses ldexp).
inline float f16_to_f32_fast(uint16_t h) {
  uint32_t s = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t em = h & 0x7fffu;
  uint32_t nor = (em << 13) + (112u << 23);
  nor = em >= 0x7c00u ? nor + (112u << 23) : nor;                        // inf / NaN
  uint32_t sub = f2u(static_cast<float>(em) * 5.9604644775390625e-08f);  // em * 2^-24
  return u2f(s | (em < 0x400u ? sub : nor));
}

struct Luts {
  float e4m3[256];
  float e5m2[256];
  Luts() {
    for (int c = 0; c < 256; ++c) {
      e4m3[c] = fp8e4m3_to_float(static_cast<uint8_t>(c));
      e5m2[c] = fp8e5m2_to_float(static_cast<uint8_t>(c));
    }
  }
};
const Luts& luts() {
  static const Luts l;
  return l;
}

const Fp8Traits& traits(Fp8Format f) {
  static const Fp8Traits e4 = e4m3_traits();
  static const Fp8Traits e5 = e5m2_traits();
  return f == Fp8Format::kE4M3 ? e4 : e5;
}

// Branch-free float -> bf16 / f16 (round to nearest even), the same bits as numeric.h.
inline uint16_t f32_to_bf16_fast(float f) {
  uint32_t u = f2u(f);
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t q = (u >> 16) | 0x40u;  // quiet NaN
  return static_cast<uint16_t>((u & kAbsMask) > kInfBits ? q : r);
}
inline uint16_t f32_to_f16_fast(float f) {
  uint32_t u = f2u(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & kAbsMask;
  uint32_t sub = f2u(u2f(a) + 0.5f) - 0x3f000000u;  // ulp of 0.5 is 2^-24, f16's quantum
  uint32_t nor = (a + 0xfffu + ((a >> 13) & 1u) - (112u << 23)) >> 13;
  uint32_t c = a < 0x38800000u ? sub : nor;
  c = a >= 0x477ff000u ? 0x7c00u : c;
  c = a > kInfBits ? 0x7e00u : c;
  return static_cast<uint16_t>(sign | c);
}

// Encodes one block of m floats: writes its scale and m codes.
template <bool kE5>
void encode_block(const float* __restrict x, int64_t m, float* scale_out, uint8_t* __restrict codes,
                  const CodecConfig& cfg, CodecStats* st, uint64_t stream, int64_t offset) {
  constexpr Fp8Traits t = kE5 ? e5m2_traits() : e4m3_traits();
  uint32_t amax = 0;
  for (int64_t i = 0; i < m; ++i) {
    uint32_t a = f2u(x[i]) & kAbsMask;
    amax = a > amax ? a : amax;
  }
  const bool flagged = amax >= kInfBits;
  if (flagged) {  // recompute over the finite values only
    amax = 0;
    for (int64_t i = 0; i < m; ++i) {
      uint32_t a = f2u(x[i]) & kAbsMask;
      if (a < kInfBits && a > amax) amax = a;
    }
  }
  BlockScale bs = block_scale(u2f(amax), flagged ? t.flagged_target : t.max);
  *scale_out = flagged ? u2f(f2u(bs.scale) | 0x80000000u) : bs.scale;
  const float inv = bs.inv;

  if (flagged) {
    uint64_t nonfinite = 0;
    for (int64_t i = 0; i < m; ++i) {
      uint32_t u = f2u(x[i]);
      uint32_t a = u & kAbsMask;
      uint8_t s = static_cast<uint8_t>((u >> 24) & 0x80u);
      if (a > kInfBits) {
        codes[i] = s | t.nan_code;
        ++nonfinite;
      } else if (a == kInfBits) {
        codes[i] = s | t.inf_code;
        ++nonfinite;
      } else {
        float q = x[i] * inv;
        codes[i] =
            cfg.stochastic
                ? fp8_sr(q, sr_random(cfg.seed, stream, static_cast<uint64_t>(offset + i)), t)
                : fp8_rne(q, t);
      }
    }
    if (st) {
      st->nonfinite_values += nonfinite;
      st->nonfinite_blocks += 1;
    }
  } else if (cfg.stochastic) {
    for (int64_t i = 0; i < m; ++i)
      codes[i] =
          fp8_sr(x[i] * inv, sr_random(cfg.seed, stream, static_cast<uint64_t>(offset + i)), t);
  } else {
    for (int64_t i = 0; i < m; ++i) codes[i] = fp8_rne(x[i] * inv, t);
  }

  if (st) {
    uint64_t under = 0, sat = 0;
    for (int64_t i = 0; i < m; ++i) {
      uint32_t a = f2u(x[i]) & kAbsMask;
      under += static_cast<uint64_t>((a != 0) & (a < kInfBits) & ((codes[i] & 0x7fu) == 0));
      uint32_t qa = f2u(x[i] * inv) & kAbsMask;
      sat += static_cast<uint64_t>((a < kInfBits) & (qa > f2u(t.sat_mid)));
    }
    st->underflow += under;
    st->saturated += sat;
    st->elements += static_cast<uint64_t>(m);
  }
}

// Decodes one block into floats.
inline void decode_block(const uint8_t* codes, int64_t m, float scale, const float* lut,
                         const Fp8Traits& t, bool e4m3, float* out) {
  uint32_t sb = f2u(scale);
  if (!(sb & 0x80000000u)) {
    for (int64_t i = 0; i < m; ++i) out[i] = lut[codes[i]] * scale;
    return;
  }
  const float s = u2f(sb & kAbsMask);
  for (int64_t i = 0; i < m; ++i) {
    uint8_t c = codes[i];
    uint8_t mag = c & 0x7fu;
    float v = lut[c];
    if (e4m3 && mag == t.inf_code) {
      out[i] = (c & 0x80u) ? -INFINITY : INFINITY;
    } else if ((f2u(v) & kAbsMask) >= kInfBits) {
      out[i] = v;  // NaN (both formats) or E5M2 inf
    } else {
      out[i] = v * s;
    }
  }
}

}  // namespace

void to_float(const void* src, DataType dtype, int64_t n, float* dst) {
  switch (dtype) {
    case DataType::kFloat32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DataType::kBFloat16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = u2f(static_cast<uint32_t>(s[i]) << 16);
      return;
    }
    case DataType::kFloat16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32_fast(s[i]);
      return;
    }
    default:
      throw Error(ErrorCode::kUnsupported,
                  std::string("low-precision codec: unsupported dtype ") + dtype_name(dtype));
  }
}

void from_float(const float* src, int64_t n, void* dst, DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      if (dst != src) std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DataType::kBFloat16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16_fast(src[i]);
      return;
    }
    case DataType::kFloat16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_f16_fast(src[i]);
      return;
    }
    default:
      throw Error(ErrorCode::kUnsupported,
                  std::string("low-precision codec: unsupported dtype ") + dtype_name(dtype));
  }
}

namespace {
// The blocks of an encoding of n values in blocks of b: fn(first value, values, scale, codes) for
// each (decode and accumulate walk the layout alike).
template <class Fn>
void for_each_encoded_block(const uint8_t* enc, int64_t n, int64_t b, Fn&& fn) {
  const int64_t nb = num_blocks(n, b);
  const uint8_t* codes = enc + nb * 4;
  for (int64_t k = 0; k < nb; ++k) {
    const int64_t off = k * b;
    float scale;
    std::memcpy(&scale, enc + k * 4, 4);
    fn(off, n - off < b ? n - off : b, scale, codes + off);
  }
}
}  // namespace

Fp8Codec::Fp8Codec(const CodecConfig& cfg) : cfg_(cfg) {
  if (cfg.block < 16 || cfg.block > kMaxBlock || cfg.block % 16 != 0)
    throw Error(ErrorCode::kInvalidArgument,
                "low-precision block size " + std::to_string(cfg.block) +
                    " is invalid: it must be a multiple of 16 in [16, " +
                    std::to_string(kMaxBlock) + "]");
}

COMMX_LOWP_CLONES void Fp8Codec::encode(const void* src, DataType dtype, int64_t n, uint8_t* dst,
                                        CodecStats* stats, uint64_t sr_stream,
                                        int64_t sr_offset) const {
  if (!codec_supports(dtype))
    throw Error(ErrorCode::kUnsupported,
                std::string("low-precision codec: unsupported dtype ") + dtype_name(dtype));
  const int64_t b = cfg_.block;
  const int64_t nb = num_blocks(n, b);
  float* scales = reinterpret_cast<float*>(dst);  // 4-byte aligned when dst is (callers ensure)
  uint8_t* codes = dst + nb * 4;
  const bool e5 = cfg_.format == Fp8Format::kE5M2;
  alignas(64) float tmp[kMaxBlock];
  const size_t esz = dtype_size(dtype);
  for (int64_t k = 0; k < nb; ++k) {
    const int64_t off = k * b;
    const int64_t m = n - off < b ? n - off : b;
    const void* p = static_cast<const char*>(src) + off * static_cast<int64_t>(esz);
    const float* x;
    if (dtype == DataType::kFloat32) {
      x = static_cast<const float*>(p);
    } else {
      to_float(p, dtype, m, tmp);
      x = tmp;
    }
    float scale;
    if (e5)
      encode_block<true>(x, m, &scale, codes + off, cfg_, stats, sr_stream, sr_offset + off);
    else
      encode_block<false>(x, m, &scale, codes + off, cfg_, stats, sr_stream, sr_offset + off);
    std::memcpy(&scales[k], &scale, 4);
  }
}

COMMX_LOWP_CLONES void Fp8Codec::decode(const uint8_t* enc, int64_t n, void* dst,
                                        DataType dtype) const {
  if (!codec_supports(dtype))
    throw Error(ErrorCode::kUnsupported,
                std::string("low-precision codec: unsupported dtype ") + dtype_name(dtype));
  const bool e4 = cfg_.format == Fp8Format::kE4M3;
  const float* lut = e4 ? luts().e4m3 : luts().e5m2;
  const Fp8Traits& t = traits(cfg_.format);
  alignas(64) float tmp[kMaxBlock];
  const size_t esz = dtype_size(dtype);
  for_each_encoded_block(enc, n, cfg_.block, [&](int64_t off, int64_t m, float scale,
                                                 const uint8_t* c) {
    if (dtype == DataType::kFloat32) {
      decode_block(c, m, scale, lut, t, e4, static_cast<float*>(dst) + off);
    } else {
      decode_block(c, m, scale, lut, t, e4, tmp);
      from_float(tmp, m, static_cast<char*>(dst) + off * static_cast<int64_t>(esz), dtype);
    }
  });
}

COMMX_LOWP_CLONES void Fp8Codec::accumulate(float* acc, const uint8_t* enc, int64_t n) const {
  const bool e4 = cfg_.format == Fp8Format::kE4M3;
  const float* lut = e4 ? luts().e4m3 : luts().e5m2;
  const Fp8Traits& t = traits(cfg_.format);
  alignas(64) float tmp[kMaxBlock];
  for_each_encoded_block(enc, n, cfg_.block, [&](int64_t off, int64_t m, float scale,
                                                 const uint8_t* c) {
    float* a = acc + off;
    if (!(f2u(scale) & 0x80000000u)) {
      for (int64_t i = 0; i < m; ++i) a[i] = a[i] + lut[c[i]] * scale;
    } else {
      decode_block(c, m, scale, lut, t, e4, tmp);
      for (int64_t i = 0; i < m; ++i) a[i] = a[i] + tmp[i];
    }
  });
}

}  // namespace commx::lowp
