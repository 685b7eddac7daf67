// Bit-exact conversions between float and the 16/8-bit floating types commx stores as raw bits.
// Round-to-nearest-even everywhere; FP8 E4M3 (fn: no inf, one NaN pattern) saturates to +-448,
// E5M2 keeps inf. Layer: public API (host code; the CUDA kernels use the hardware casts).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace commx {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }
inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float f16_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    if (man == 0) return bits_float(sign);
    float v = std::ldexp(static_cast<float>(man), -24);  // subnormal
    return sign ? -v : v;
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (man << 13));
  return bits_float(sign | ((exp + 112) << 23) | (man << 13));
}
inline uint16_t float_to_f16(float f) {
  uint32_t u = float_bits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;  // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: inf
  if (a < 0x38800000u) {                        // subnormal or zero in f16
    float v = bits_float(a);
    // v / 2^-24 rounded to nearest even (nearbyint honours the default rounding mode).
    uint32_t m = static_cast<uint32_t>(std::nearbyint(v * 16777216.0f));
    return sign | static_cast<uint16_t>(m);
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
  return sign | static_cast<uint16_t>((r - (112u << 23)) >> 13);
}

// Generic round-to-nearest-even encoder for small floats with `E` exponent and `M` mantissa bits.
// `max_bits` is the largest finite encoding (saturation target); `nan_bits` the NaN encoding.
inline uint8_t float_to_small(float f, int E, int M, int bias, uint8_t max_bits, uint8_t nan_bits,
                              bool has_inf) {
  uint32_t u = float_bits(f);
  uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  float a = std::fabs(f);
  if (std::isnan(f)) return sign | nan_bits;
  auto decode_mag = [&](uint8_t b) {
    int e = (b >> M) & ((1 << E) - 1);
    int m = b & ((1 << M) - 1);
    return e == 0 ? std::ldexp(static_cast<float>(m), 1 - bias - M)
                  : std::ldexp(static_cast<float>(m + (1 << M)), e - bias - M);
  };
  float max_val = decode_mag(max_bits);
  if (std::isinf(f)) return has_inf ? (sign | static_cast<uint8_t>(((1 << E) - 1) << M)) : (sign | max_bits);
  if (a >= max_val) {
    // Values beyond the largest finite one saturate (E4M3fn) or round to inf past the midpoint.
    if (!has_inf) return sign | max_bits;
    float next = std::ldexp(1.0f, ((1 << E) - 1) - bias);  // the value inf would take
    return (a >= (max_val + next) / 2) ? (sign | static_cast<uint8_t>(((1 << E) - 1) << M))
                                       : (sign | max_bits);
  }
  if (a == 0.0f) return sign;
  int exp;
  std::frexp(a, &exp);  // a = f * 2^exp, f in [0.5,1)
  int e_unb = exp - 1;
  int min_norm = 1 - bias;
  int q = (e_unb < min_norm) ? (min_norm - M) : (e_unb - M);  // quantum exponent
  float scaled = std::ldexp(a, -q);
  float r = std::nearbyint(scaled);  // ties to even
  uint32_t mant = static_cast<uint32_t>(r);
  int e_field;
  if (e_unb < min_norm) {
    if (mant >= (1u << M)) return sign | static_cast<uint8_t>(1u << M);  // rounds up to min normal
    return sign | static_cast<uint8_t>(mant);
  }
  if (mant >= (2u << M)) {  // mantissa overflow: next binade
    mant >>= 1;
    e_unb += 1;
  }
  e_field = e_unb + bias;
  uint8_t bits = static_cast<uint8_t>((e_field << M) | (mant & ((1u << M) - 1)));
  return sign | (bits > max_bits ? max_bits : bits);
}

inline float small_to_float(uint8_t b, int E, int M, int bias, uint8_t nan_bits, bool has_inf) {
  bool neg = b & 0x80u;
  uint8_t mag = b & 0x7fu;
  int e = (mag >> M) & ((1 << E) - 1);
  int m = mag & ((1 << M) - 1);
  float v;
  if ((mag & 0x7fu) == (nan_bits & 0x7fu) && !has_inf) {
    v = NAN;
  } else if (has_inf && e == (1 << E) - 1) {
    v = m ? NAN : INFINITY;
  } else if (e == 0) {
    v = std::ldexp(static_cast<float>(m), 1 - bias - M);
  } else {
    v = std::ldexp(static_cast<float>(m + (1 << M)), e - bias - M);
  }
  return neg ? -v : v;
}

// E4M3 "fn" (the OCP/NVIDIA __nv_fp8_e4m3 format): bias 7, max 448 (0x7e), NaN 0x7f.
inline float fp8e4m3_to_float(uint8_t b) { return small_to_float(b, 4, 3, 7, 0x7f, false); }
inline uint8_t float_to_fp8e4m3(float f) { return float_to_small(f, 4, 3, 7, 0x7e, 0x7f, false); }
// E5M2 (IEEE-like): bias 15, max 57344 (0x7b), inf 0x7c, NaN 0x7e.
inline float fp8e5m2_to_float(uint8_t b) { return small_to_float(b, 5, 2, 15, 0x7e, true); }
inline uint8_t float_to_fp8e5m2(float f) { return float_to_small(f, 5, 2, 15, 0x7b, 0x7e, true); }

}  // namespace commx
