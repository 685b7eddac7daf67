// Test data values and tolerances (see values.h). Layer: tools/bench.
#include "values.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "commx/numeric.h"

namespace commx::bench {
namespace {

uint32_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb3f99ea0b5d3ULL;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

bool is_unsigned(DataType t) {
  return t == DataType::kUInt8 || t == DataType::kUInt32 || t == DataType::kUInt64 ||
         t == DataType::kBool;
}

template <typename T>
T wrap(double v) {
  // Through int64 (or uint64) first: a direct double->small-int cast is undefined out of range.
  if constexpr (std::is_same_v<T, uint64_t>) return static_cast<uint64_t>(static_cast<int64_t>(v));
  return static_cast<T>(static_cast<int64_t>(v));
}

}  // namespace

double input_value(int rank, int64_t index, DataType t, ReduceKind kind) {
  uint32_t h =
      mix(static_cast<uint64_t>(rank) * 1000003ULL + static_cast<uint64_t>(index) * 7919ULL + 17);
  if (t == DataType::kBool) return h & 1;
  switch (kind) {
    case ReduceKind::kBand:
    case ReduceKind::kBor:
    case ReduceKind::kBxor:
      return h % 16;
    case ReduceKind::kProduct: {
      static const double kSigned[3] = {1, 2, -1};
      return is_unsigned(t) ? 1 + h % 2 : kSigned[h % 3];
    }
    default:
      return is_unsigned(t) ? h % 7 : static_cast<double>(h % 7) - 3;
  }
}

void store_value(DataType t, void* base, int64_t i, double v) {
  switch (t) {
    case DataType::kFloat32:
      static_cast<float*>(base)[i] = static_cast<float>(v);
      return;
    case DataType::kFloat64:
      static_cast<double*>(base)[i] = v;
      return;
    case DataType::kFloat16:
      static_cast<uint16_t*>(base)[i] = float_to_f16(static_cast<float>(v));
      return;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(base)[i] = float_to_bf16(static_cast<float>(v));
      return;
    case DataType::kFloat8E4M3:
      static_cast<uint8_t*>(base)[i] = float_to_fp8e4m3(static_cast<float>(v));
      return;
    case DataType::kFloat8E5M2:
      static_cast<uint8_t*>(base)[i] = float_to_fp8e5m2(static_cast<float>(v));
      return;
    case DataType::kInt8:
      static_cast<int8_t*>(base)[i] = wrap<int8_t>(v);
      return;
    case DataType::kUInt8:
      static_cast<uint8_t*>(base)[i] = wrap<uint8_t>(v);
      return;
    case DataType::kInt32:
      static_cast<int32_t*>(base)[i] = wrap<int32_t>(v);
      return;
    case DataType::kInt64:
      static_cast<int64_t*>(base)[i] = wrap<int64_t>(v);
      return;
    case DataType::kUInt32:
      static_cast<uint32_t*>(base)[i] = wrap<uint32_t>(v);
      return;
    case DataType::kUInt64:
      static_cast<uint64_t*>(base)[i] = wrap<uint64_t>(v);
      return;
    case DataType::kBool:
      static_cast<bool*>(base)[i] = v != 0;
      return;
  }
}

double load_value(DataType t, const void* base, int64_t i) {
  switch (t) {
    case DataType::kFloat32:
      return static_cast<const float*>(base)[i];
    case DataType::kFloat64:
      return static_cast<const double*>(base)[i];
    case DataType::kFloat16:
      return f16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DataType::kBFloat16:
      return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DataType::kFloat8E4M3:
      return fp8e4m3_to_float(static_cast<const uint8_t*>(base)[i]);
    case DataType::kFloat8E5M2:
      return fp8e5m2_to_float(static_cast<const uint8_t*>(base)[i]);
    case DataType::kInt8:
      return static_cast<const int8_t*>(base)[i];
    case DataType::kUInt8:
      return static_cast<const uint8_t*>(base)[i];
    case DataType::kInt32:
      return static_cast<const int32_t*>(base)[i];
    case DataType::kInt64:
      return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case DataType::kUInt32:
      return static_cast<const uint32_t*>(base)[i];
    case DataType::kUInt64:
      return static_cast<double>(static_cast<const uint64_t*>(base)[i]);
    case DataType::kBool: {
      uint8_t b;
      std::memcpy(&b, static_cast<const uint8_t*>(base) + i, 1);
      return b != 0;
    }
  }
  return 0;
}

bool values_match(DataType t, double got, double want, int nranks, bool reduced) {
  if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want);
  if (!reduced || !dtype_is_floating(t)) return got == want;
  // Reductions round at every step of an algorithm's order; allow a few ulps of the type per
  // rank at the magnitude of the inputs (at most 3).
  double rel = 0;
  switch (t) {
    case DataType::kFloat64:
      rel = 1e-12;
      break;
    case DataType::kFloat32:
      rel = 1e-5;
      break;
    case DataType::kFloat16:
      rel = 1e-3;
      break;
    case DataType::kBFloat16:
      rel = 8e-3;
      break;
    case DataType::kFloat8E4M3:
      rel = 0.125;
      break;
    case DataType::kFloat8E5M2:
      rel = 0.25;
      break;
    default:
      break;
  }
  return std::fabs(got - want) <= rel * (std::fabs(want) + 3.0 * nranks);
}

double reduce_reference(DataType t, ReduceOp op, const double* vals, int n) {
  bool integer = !dtype_is_floating(t);
  if (t == DataType::kBool) {
    bool any = false, all = true, x = false;
    for (int i = 0; i < n; ++i) {
      any = any || vals[i] != 0;
      all = all && vals[i] != 0;
      x = x != (vals[i] != 0);
    }
    switch (op.kind) {
      case ReduceKind::kProduct:
      case ReduceKind::kMin:
      case ReduceKind::kBand:
        return all;
      case ReduceKind::kBxor:
        return x;
      default:
        return any;
    }
  }
  if (integer) {
    // Modular int64 arithmetic, then wrapped to the type: sums and products wrap the same way.
    uint64_t acc = static_cast<uint64_t>(static_cast<int64_t>(vals[0]));
    int64_t mn = static_cast<int64_t>(vals[0]), mx = mn;
    for (int i = 1; i < n; ++i) {
      auto v = static_cast<int64_t>(vals[i]);
      auto u = static_cast<uint64_t>(v);
      switch (op.kind) {
        case ReduceKind::kProduct:
          acc *= u;
          break;
        case ReduceKind::kBand:
          acc &= u;
          break;
        case ReduceKind::kBor:
          acc |= u;
          break;
        case ReduceKind::kBxor:
          acc ^= u;
          break;
        default:
          acc += u;
          break;
      }
      mn = std::min(mn, v);
      mx = std::max(mx, v);
    }
    double r = static_cast<double>(static_cast<int64_t>(acc));
    if (op.kind == ReduceKind::kMin) r = static_cast<double>(mn);
    if (op.kind == ReduceKind::kMax) r = static_cast<double>(mx);
    uint64_t buf = 0;
    store_value(t, &buf, 0, r);
    return load_value(t, &buf, 0);
  }
  double acc = vals[0];
  for (int i = 1; i < n; ++i) {
    switch (op.kind) {
      case ReduceKind::kProduct:
        acc *= vals[i];
        break;
      case ReduceKind::kMin:
        acc = std::min(acc, vals[i]);
        break;
      case ReduceKind::kMax:
        acc = std::max(acc, vals[i]);
        break;
      default:
        acc += vals[i];
        break;
    }
  }
  if (op.kind == ReduceKind::kAvg) acc /= n;
  if (op.kind == ReduceKind::kPremulSum) acc *= op.factor;
  return acc;
}

}  // namespace commx::bench
