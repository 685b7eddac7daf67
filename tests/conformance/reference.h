// The one reference of the C++ tests: seeded per-rank data that keeps every reduction exact
// whatever the combining order, a scalar reference reduction written independently of
// src/algorithms (only numeric.h is shared), and the comparison of a result with it. The
// conformance suite (tests/conformance) checks every backend against it; the backend-specific
// tests use it too. Layer: tests.
#pragma once

#include <cstdint>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "commx/numeric.h"
#include "commx/types.h"

namespace commx::testing {

inline double load_float(const void* p, size_t i, DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return static_cast<const float*>(p)[i];
    case DataType::kFloat64:
      return static_cast<const double*>(p)[i];
    case DataType::kFloat16:
      return f16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DataType::kBFloat16:
      return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DataType::kFloat8E4M3:
      return fp8e4m3_to_float(static_cast<const uint8_t*>(p)[i]);
    case DataType::kFloat8E5M2:
      return fp8e5m2_to_float(static_cast<const uint8_t*>(p)[i]);
    default:
      return 0;
  }
}

inline void store_float(void* p, size_t i, DataType t, double v) {
  switch (t) {
    case DataType::kFloat32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case DataType::kFloat64:
      static_cast<double*>(p)[i] = v;
      break;
    case DataType::kFloat16:
      static_cast<uint16_t*>(p)[i] = float_to_f16(static_cast<float>(v));
      break;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(p)[i] = float_to_bf16(static_cast<float>(v));
      break;
    case DataType::kFloat8E4M3:
      static_cast<uint8_t*>(p)[i] = float_to_fp8e4m3(static_cast<float>(v));
      break;
    case DataType::kFloat8E5M2:
      static_cast<uint8_t*>(p)[i] = float_to_fp8e5m2(static_cast<float>(v));
      break;
    default:
      break;
  }
}

inline bool is_signed_int(DataType t) {
  return t == DataType::kInt8 || t == DataType::kInt32 || t == DataType::kInt64;
}

// Integer element as raw bits widened to 64 (sign-extended for signed types).
inline uint64_t load_int(const void* p, size_t i, DataType t) {
  switch (t) {
    case DataType::kInt8:
      return static_cast<uint64_t>(static_cast<int64_t>(static_cast<const int8_t*>(p)[i]));
    case DataType::kUInt8:
    case DataType::kBool:
      return static_cast<const uint8_t*>(p)[i];
    case DataType::kInt32:
      return static_cast<uint64_t>(static_cast<int64_t>(static_cast<const int32_t*>(p)[i]));
    case DataType::kUInt32:
      return static_cast<const uint32_t*>(p)[i];
    case DataType::kInt64:
    case DataType::kUInt64:
      return static_cast<const uint64_t*>(p)[i];
    default:
      return 0;
  }
}

inline void store_int(void* p, size_t i, DataType t, uint64_t v) {
  std::memcpy(static_cast<char*>(p) + i * dtype_size(t), &v, dtype_size(t));  // little endian
}

// Sign-extends the low bits of v as an element of type t (so comparisons see the real value).
inline int64_t as_signed(uint64_t v, DataType t) {
  switch (t) {
    case DataType::kInt8:
      return static_cast<int8_t>(v);
    case DataType::kInt32:
      return static_cast<int32_t>(v);
    default:
      return static_cast<int64_t>(v);
  }
}
inline uint64_t truncate_bits(uint64_t v, DataType t) {
  size_t b = dtype_size(t) * 8;
  return b == 64 ? v : (v & ((uint64_t{1} << b) - 1));
}

// Random values that keep results exact in any combining order: small integers for sums (so
// partial sums are exact even in fp8), powers of two for floating products.
inline void fill_random(void* p, size_t count, DataType t, ReduceKind k, std::mt19937_64& rng) {
  for (size_t i = 0; i < count; ++i) {
    uint64_t r = rng();
    if (t == DataType::kBool) {
      store_int(p, i, t, r & 1);
    } else if (dtype_is_floating(t)) {
      double v;
      bool narrow = t == DataType::kFloat8E4M3 || t == DataType::kFloat8E5M2;
      if (k == ReduceKind::kProduct) {
        static const double kVals[] = {1, -1, 2, 0.5};
        v = kVals[r % 4];
      } else if (k == ReduceKind::kMin || k == ReduceKind::kMax) {
        v = static_cast<double>(static_cast<int>(r % 29) - 14);
      } else {
        v = static_cast<double>(static_cast<int>(r % (narrow ? 3 : 9)) - (narrow ? 1 : 4));
      }
      store_float(p, i, t, v);
    } else if (k == ReduceKind::kPremulSum) {
      store_int(p, i, t, r % 50);
    } else {
      store_int(p, i, t, r);
    }
  }
}

// dst = reduce(srcs) as the commx semantics define it: narrow floats accumulate in float, f32 in
// float, f64 in double (in source order), integers wrap, AVG divides by `n` (integer division for
// integers), PREMUL_SUM multiplies by the factor; `finish=false` leaves AVG/PREMUL_SUM a plain sum.
inline void reference_reduce(void* dst, const std::vector<const void*>& srcs, size_t count,
                             DataType t, ReduceOp op, int n, bool finish = true) {
  ReduceKind k = op.kind;
  for (size_t i = 0; i < count; ++i) {
    if (t == DataType::kBool) {
      bool acc = load_int(srcs[0], i, t) != 0;
      for (size_t s = 1; s < srcs.size(); ++s) {
        bool v = load_int(srcs[s], i, t) != 0;
        if (k == ReduceKind::kSum || k == ReduceKind::kMax || k == ReduceKind::kBor)
          acc = acc || v;
        else if (k == ReduceKind::kBxor)
          acc = acc != v;
        else
          acc = acc && v;
      }
      store_int(dst, i, t, acc ? 1 : 0);
    } else if (dtype_is_floating(t)) {
      bool dbl = t == DataType::kFloat64;
      auto rnd = [&](double v) { return dbl ? v : static_cast<double>(static_cast<float>(v)); };
      double acc = load_float(srcs[0], i, t);
      for (size_t s = 1; s < srcs.size(); ++s) {
        double v = load_float(srcs[s], i, t);
        switch (k) {
          case ReduceKind::kProduct:
            acc = rnd(acc * v);
            break;
          case ReduceKind::kMin:
            acc = v < acc ? v : acc;
            break;
          case ReduceKind::kMax:
            acc = acc < v ? v : acc;
            break;
          default:
            acc = rnd(acc + v);
            break;
        }
      }
      if (finish && k == ReduceKind::kAvg) acc = rnd(acc / (dbl ? n : static_cast<float>(n)));
      if (finish && k == ReduceKind::kPremulSum)
        acc = dbl ? acc * op.factor : rnd(static_cast<float>(acc) * static_cast<float>(op.factor));
      store_float(dst, i, t, acc);
    } else {
      uint64_t acc = load_int(srcs[0], i, t);
      for (size_t s = 1; s < srcs.size(); ++s) {
        uint64_t v = load_int(srcs[s], i, t);
        bool sg = is_signed_int(t);
        switch (k) {
          case ReduceKind::kProduct:
            acc = truncate_bits(acc * v, t);
            break;
          case ReduceKind::kMin:
            if (sg ? as_signed(v, t) < as_signed(acc, t)
                   : truncate_bits(v, t) < truncate_bits(acc, t))
              acc = v;
            break;
          case ReduceKind::kMax:
            if (sg ? as_signed(acc, t) < as_signed(v, t)
                   : truncate_bits(acc, t) < truncate_bits(v, t))
              acc = v;
            break;
          case ReduceKind::kBand:
            acc &= v;
            break;
          case ReduceKind::kBor:
            acc |= v;
            break;
          case ReduceKind::kBxor:
            acc ^= v;
            break;
          default:
            acc = truncate_bits(acc + v, t);
            break;
        }
      }
      if (finish && k == ReduceKind::kAvg) {
        if (is_signed_int(t))
          acc = static_cast<uint64_t>(as_signed(acc, t) / n);
        else
          acc = truncate_bits(acc, t) / static_cast<uint64_t>(n);
      }
      if (finish && k == ReduceKind::kPremulSum) {
        double v = is_signed_int(t) ? static_cast<double>(as_signed(acc, t))
                                    : static_cast<double>(truncate_bits(acc, t));
        v *= op.factor;
        acc = is_signed_int(t) ? static_cast<uint64_t>(static_cast<int64_t>(v))
                               : static_cast<uint64_t>(v);
      }
      store_int(dst, i, t, acc);
    }
  }
}

using Buf = std::vector<uint8_t>;

// Data rank `rank` contributes to case `seed` (count elements; one spare byte so data() != null).
// Every rank regenerates any rank's data alone, so each computes its reference without messages.
inline Buf gen(uint64_t seed, int rank, size_t count, DataType t, ReduceKind k) {
  std::mt19937_64 rng(seed * 1000003ull + static_cast<uint64_t>(rank) * 7919ull + 1);
  Buf v(count * dtype_size(t) + 1);
  fill_random(v.data(), count, t, k, rng);
  return v;
}

// Every rank's data for case `seed`.
inline std::vector<Buf> gen_all(uint64_t seed, int ranks, size_t count, DataType t, ReduceKind k) {
  std::vector<Buf> v;
  for (int r = 0; r < ranks; ++r) v.push_back(gen(seed, r, count, t, k));
  return v;
}

// The reduction over ranks of elements [offset, offset + count) of each rank's data.
inline Buf reduced(const std::vector<Buf>& data, size_t offset, size_t count, DataType t,
                   ReduceOp op) {
  std::vector<const void*> srcs;
  for (const Buf& b : data) srcs.push_back(b.data() + offset * dtype_size(t));
  Buf out(count * dtype_size(t) + 1);
  reference_reduce(out.data(), srcs, count, t, op, static_cast<int>(data.size()));
  return out;
}

// Elements [offset, offset + count) of `b` (one spare byte, as gen gives).
inline Buf piece(const Buf& b, size_t offset, size_t count, DataType t) {
  const size_t es = dtype_size(t);
  Buf out(b.begin() + offset * es, b.begin() + (offset + count) * es);
  out.push_back(0);
  return out;
}

// What a rank receives when every rank p sends it elements [offs[p], offs[p] + lens[p]) of its
// data src[p], laid end to end in rank order: the result of all_gather (offsets 0), gather at
// the root, and all_to_all and its _v form (offsets of the receiver's block in each sender's data).
inline Buf received(const std::vector<Buf>& src, const std::vector<size_t>& offs,
                    const std::vector<size_t>& lens, DataType t) {
  const size_t es = dtype_size(t);
  Buf out;
  for (size_t p = 0; p < src.size(); ++p)
    out.insert(out.end(), src[p].begin() + offs[p] * es, src[p].begin() + (offs[p] + lens[p]) * es);
  out.push_back(0);
  return out;
}

// The first `count` elements of every rank's data end to end: all_gather's result, gather's at
// the root.
inline Buf gathered(const std::vector<Buf>& src, size_t count, DataType t) {
  return received(src, std::vector<size_t>(src.size(), 0), std::vector<size_t>(src.size(), count),
                  t);
}

// Whether `got` equals `want` element by element. Exact, except that AVG and PREMUL_SUM on
// floating types may differ by one rounding of the scaling (a backend may multiply by 1/n where
// the reference divides by n, or scale each input before summing): one ulp of the dtype at the
// larger of the result and the inputs' magnitude, plus a step below every subnormal a narrow type has.
inline bool element_matches(const void* want, const void* got, size_t i, DataType t, ReduceOp op) {
  const size_t es = dtype_size(t);
  if (std::memcmp(static_cast<const char*>(want) + i * es, static_cast<const char*>(got) + i * es,
                  es) == 0)
    return true;
  if (!dtype_is_floating(t) || (op.kind != ReduceKind::kAvg && op.kind != ReduceKind::kPremulSum))
    return false;
  int mantissa_bits = t == DataType::kFloat64      ? 52
                      : t == DataType::kFloat32    ? 23
                      : t == DataType::kFloat16    ? 10
                      : t == DataType::kBFloat16   ? 7
                      : t == DataType::kFloat8E4M3 ? 3
                                                   : 2;
  double w = load_float(want, i, t), g = load_float(got, i, t);
  // At the inputs' magnitude (fill_random draws AVG/PREMUL_SUM data from [-4, 4]): a backend that
  // scales each input before summing (NCCL's AVG) rounds there, also where the result cancels.
  double ulp = std::ldexp(std::max(std::fabs(w), 4.0), -mantissa_bits);
  return std::fabs(w - g) <= ulp + std::ldexp(1.0, -24);
}

// "" when `got` matches `want` (element_matches), else the first differing element.
inline std::string mismatch(const void* want, const void* got, size_t count, DataType t,
                            ReduceOp op = {}) {
  for (size_t i = 0; i < count; ++i) {
    if (element_matches(want, got, i, t, op)) continue;
    std::string s = "element " + std::to_string(i) + " of " + std::to_string(count);
    if (dtype_is_floating(t))
      s += ": want " + std::to_string(load_float(want, i, t)) + " got " +
           std::to_string(load_float(got, i, t));
    else
      s += ": want " + std::to_string(load_int(want, i, t)) + " got " +
           std::to_string(load_int(got, i, t));
    return s;
  }
  return "";
}

inline std::string first_diff(const void* a, const void* b, size_t count, DataType t) {
  size_t es = dtype_size(t);
  for (size_t i = 0; i < count; ++i)
    if (std::memcmp(static_cast<const char*>(a) + i * es, static_cast<const char*>(b) + i * es,
                    es) != 0) {
      std::string s = "element " + std::to_string(i);
      if (dtype_is_floating(t))
        s += " want " + std::to_string(load_float(a, i, t)) + " got " +
             std::to_string(load_float(b, i, t));
      else
        s += " want " + std::to_string(load_int(a, i, t)) + " got " +
             std::to_string(load_int(b, i, t));
      return s;
    }
  return "none";
}

}  // namespace commx::testing
