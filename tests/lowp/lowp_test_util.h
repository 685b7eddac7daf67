// Helpers of the low-precision tests: typed host buffers, random data of several distributions,
// float64 views, relative L2 error, and "native FP8" reductions for comparison.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "commx/numeric.h"
#include "commx/tensor.h"

namespace commx::testing {

enum class Dist { kNormal, kUniform, kStudentT, kCauchyClipped, kMixedScale };
inline const char* dist_name(Dist d) {
  switch (d) {
    case Dist::kNormal:
      return "normal";
    case Dist::kUniform:
      return "uniform";
    case Dist::kStudentT:
      return "student_t3";
    case Dist::kCauchyClipped:
      return "cauchy_clip1e3";
    case Dist::kMixedScale:
      return "mixed_scale";
  }
  return "?";
}

inline std::vector<double> gen(Dist d, int64_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<double> v(static_cast<size_t>(n));
  std::normal_distribution<double> nd(0.0, 1.0);
  std::uniform_real_distribution<double> ud(-1.0, 1.0);
  std::student_t_distribution<double> td(3.0);
  std::cauchy_distribution<double> cd(0.0, 1.0);
  std::uniform_int_distribution<int> ed(-8, 8);
  for (int64_t i = 0; i < n; ++i) {
    switch (d) {
      case Dist::kNormal:
        v[i] = nd(g);
        break;
      case Dist::kUniform:
        v[i] = ud(g);
        break;
      case Dist::kStudentT:
        v[i] = td(g);
        break;
      case Dist::kCauchyClipped:
        v[i] = std::clamp(cd(g), -1e3, 1e3);
        break;
      case Dist::kMixedScale:
        break;  // below
    }
  }
  if (d == Dist::kMixedScale) {
    // Each run of 64 elements has its own scale in 2^-8..2^8 (like rows of different layers).
    std::mt19937_64 g2(seed ^ 0x5eed);
    for (int64_t s = 0; s < n; s += 64) {
      double sc = std::ldexp(1.0, ed(g2));
      for (int64_t i = s; i < std::min(n, s + 64); ++i) v[i] = nd(g2) * sc;
    }
  }
  return v;
}

// A host buffer of `dtype` (f32/bf16/f16) holding values rounded from doubles.
struct Buf {
  DataType dtype = DataType::kFloat32;
  std::vector<uint8_t> bytes;
  int64_t n = 0;
  Buf() = default;
  Buf(DataType t, int64_t count)
      : dtype(t), bytes(static_cast<size_t>(count) * dtype_size(t) + 1), n(count) {}
  Tensor tensor() { return Tensor(bytes.data(), n, dtype); }
  float get(int64_t i) const {
    if (dtype == DataType::kFloat32) {
      float f;
      std::memcpy(&f, bytes.data() + 4 * i, 4);
      return f;
    }
    uint16_t h;
    std::memcpy(&h, bytes.data() + 2 * i, 2);
    return dtype == DataType::kBFloat16 ? bf16_to_float(h) : f16_to_float(h);
  }
  void set(int64_t i, float f) {
    if (dtype == DataType::kFloat32) {
      std::memcpy(bytes.data() + 4 * i, &f, 4);
      return;
    }
    uint16_t h = dtype == DataType::kBFloat16 ? float_to_bf16(f) : float_to_f16(f);
    std::memcpy(bytes.data() + 2 * i, &h, 2);
  }
  bool same_bits(const Buf& o) const {
    return n == o.n && std::memcmp(bytes.data(), o.bytes.data(), n * dtype_size(dtype)) == 0;
  }
};

inline Buf make_buf(DataType t, const std::vector<double>& v) {
  Buf b(t, static_cast<int64_t>(v.size()));
  for (size_t i = 0; i < v.size(); ++i) b.set(static_cast<int64_t>(i), static_cast<float>(v[i]));
  return b;
}

// ||out - ref|| / ||ref||
inline double rel_l2(const Buf& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    double d = out.get(static_cast<int64_t>(i)) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}
inline double rel_l2(const std::vector<double>& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

}  // namespace commx::testing
