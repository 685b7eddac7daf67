// Branch-free, bit-exact float -> FP8 (E4M3 "fn" / E5M2) rounding, the counter-based hash used for
// stochastic rounding, and the block-scale rules of the low-precision codec. Shared by the CPU
// reference codec and the CUDA kernels (host/device), so both produce the same bits.
// Layer: algorithms (low-precision codec).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define COMMX_HD __host__ __device__ __forceinline__
#else
#define COMMX_HD inline
#endif

namespace commx::lowp {

COMMX_HD uint32_t f2u(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#elif defined(__CUDACC__)
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
#else
  return __builtin_bit_cast(uint32_t, f);
#endif
}
COMMX_HD float u2f(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#elif defined(__CUDACC__)
  float f;
  memcpy(&f, &u, 4);
  return f;
#else
  return __builtin_bit_cast(float, u);
#endif
}

// Constants of one FP8 format, as float bit patterns where the code compares bits.
struct Fp8Traits {
  int mant;                 // mantissa bits (3 or 2)
  uint32_t rebias;          // (127 - bias) << mant
  uint32_t min_normal;      // bits of the smallest normal value
  uint32_t sat;             // bits of the largest finite value: at or above it, saturate
  uint8_t max_code;         // code of the largest finite value
  uint8_t nan_code;         // canonical NaN code (magnitude)
  uint8_t inf_code;         // code of infinity in a flagged block (E4M3: reuses max_code)
  float sub_magic;          // 2^(quantum exponent of subnormals + 23)
  uint32_t sub_magic_bits;  // its bits
  float inv_quantum;        // 1 / quantum of subnormals
  float max;                // largest finite value
  float sat_mid;            // half-way to the next step above max: beyond it, a value saturates
  float flagged_target;     // where a flagged block's finite amax lands (max / 2)
};

// Functions rather than variables so that device code can use them without odr-use trouble.
// E4M3 fn: bias 7, max 448 (0x7e), NaN 0x7f, no inf; subnormal quantum 2^-9.
COMMX_HD constexpr Fp8Traits e4m3_traits() {
  return {3,        120u << 3,   0x3c800000u, 0x43e00000u, 0x7e,   0x7f,  0x7e,
          16384.0f, 0x46800000u, 512.0f,      448.0f,      464.0f, 224.0f};
}
// E5M2: bias 15, max 57344 (0x7b), inf 0x7c, NaN 0x7e; subnormal quantum 2^-16.
COMMX_HD constexpr Fp8Traits e5m2_traits() {
  return {2,      112u << 2,   0x38800000u, 0x47600000u, 0x7b,     0x7e,    0x7c,
          128.0f, 0x43000000u, 65536.0f,    57344.0f,    59392.0f, 28672.0f};
}

// The scale of one block: inv = target / amax multiplies the inputs, scale = amax / target
// multiplies the decoded codes. A zero block, or one so small that inv overflows, gets 0 for both
// (it decodes to zeros). IEEE-rounded divisions on CPU and GPU alike.
struct BlockScale {
  float inv;
  float scale;
};
COMMX_HD BlockScale block_scale(float amax, float target) {
#if defined(__CUDA_ARCH__)
  float inv = __fdiv_rn(target, amax);
  float scale = __fdiv_rn(amax, target);
#else
  float inv = target / amax;
  float scale = amax / target;
#endif
  if (!(amax > 0.0f) || !(inv <= 3.40282347e+38f)) return {0.0f, 0.0f};
  return {inv, scale};
}

// Round-to-nearest-even, saturating to the largest finite value (CUDA's __NV_SATFINITE).
// `q` must not be NaN (callers route NaN/Inf through the flagged-block path).
COMMX_HD uint8_t fp8_rne(float q, const Fp8Traits& t) {
  uint32_t u = f2u(q);
  uint32_t s = (u >> 24) & 0x80u;
  uint32_t a = u & 0x7fffffffu;
  // Subnormal range: adding a magic number whose ulp is the quantum rounds (ties to even).
  uint32_t sub = f2u(u2f(a) + t.sub_magic) - t.sub_magic_bits;
  uint32_t shift = 23u - static_cast<uint32_t>(t.mant);
  uint32_t half = (1u << (shift - 1)) - 1u;
  uint32_t nor = ((a + half + ((a >> shift) & 1u)) >> shift) - t.rebias;
  uint32_t c = a < t.min_normal ? sub : nor;
  c = a >= t.sat ? t.max_code : c;
  return static_cast<uint8_t>(s | c);
}

// splitmix64 finaliser: a good 64-bit mixer, cheap on CPU and GPU.
COMMX_HD uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
// The random bits of element `index` of stream `stream` (e.g. rank and phase) under `seed`.
COMMX_HD uint32_t sr_random(uint64_t seed, uint64_t stream, uint64_t index) {
  return static_cast<uint32_t>(mix64(mix64(seed ^ (stream * 0xd1b54a32d192ed03ull)) + index) >> 32);
}

// Stochastic rounding: rounds |q| up with probability equal to its distance from the lower
// neighbour (in units of the quantum); saturating like fp8_rne.
COMMX_HD uint8_t fp8_sr(float q, uint32_t rnd, const Fp8Traits& t) {
  uint32_t u = f2u(q);
  uint32_t s = (u >> 24) & 0x80u;
  uint32_t a = u & 0x7fffffffu;
  uint32_t c;
  if (a < t.min_normal) {
    // t = |q| / quantum is exact (power-of-two scaling); compare its fraction with a 24-bit
    // uniform number.
    float scaled = u2f(a) * t.inv_quantum;
    uint32_t k = static_cast<uint32_t>(scaled);
    float frac = scaled - static_cast<float>(k);
    float uni = static_cast<float>(rnd >> 8) * 5.9604644775390625e-08f;  // [0,1), 2^-24 steps
    c = k + (uni < frac ? 1u : 0u);
  } else {
    uint32_t shift = 23u - static_cast<uint32_t>(t.mant);
    uint32_t r = a + (rnd & ((1u << shift) - 1u));
    c = (r >> shift) - t.rebias;
  }
  c = (a >= t.sat || c > t.max_code) ? t.max_code : c;
  return static_cast<uint8_t>(s | c);
}

}  // namespace commx::lowp
