// Elementwise reductions for the gloo backend (see host_reduce.h). Layer: backends/gloo.
#include "backends/gloo/host_reduce.h"

#include <algorithm>
#include <cstdint>

#include "commx/numeric.h"

namespace commx::gloo_backend {
namespace {

// Storage type and conversions to/from the type the arithmetic runs in.
template <typename S, typename C, C (*kLoad)(S), S (*kStore)(C)>
struct Codec {
  using Storage = S;
  using Compute = C;
  static C load(S v) { return kLoad(v); }
  static S store(C v) { return kStore(v); }
};
template <typename T>
T ident(T v) {
  return v;
}
template <typename T>
using Plain = Codec<T, T, &ident<T>, &ident<T>>;
float u8_to_e4m3(uint8_t b) { return fp8e4m3_to_float(b); }
float u8_to_e5m2(uint8_t b) { return fp8e5m2_to_float(b); }
using F16 = Codec<uint16_t, float, &f16_to_float, &float_to_f16>;
using BF16 = Codec<uint16_t, float, &bf16_to_float, &float_to_bf16>;
using E4M3 = Codec<uint8_t, float, &u8_to_e4m3, &float_to_fp8e4m3>;
using E5M2 = Codec<uint8_t, float, &u8_to_e5m2, &float_to_fp8e5m2>;

struct Sum {
  template <typename T>
  static T apply(T a, T b) {
    return a + b;
  }
};
struct Prod {
  template <typename T>
  static T apply(T a, T b) {
    return a * b;
  }
};
struct Min {
  template <typename T>
  static T apply(T a, T b) {
    return std::min(a, b);
  }
};
struct Max {
  template <typename T>
  static T apply(T a, T b) {
    return std::max(a, b);
  }
};
struct Band {
  template <typename T>
  static T apply(T a, T b) {
    return a & b;
  }
};
struct Bor {
  template <typename T>
  static T apply(T a, T b) {
    return a | b;
  }
};
struct Bxor {
  template <typename T>
  static T apply(T a, T b) {
    return a ^ b;
  }
};
// bool: sum/max = or, product/min = and (as torch and NCCL define them).
struct BoolOr {
  template <typename T>
  static T apply(T a, T b) {
    return a || b;
  }
};
struct BoolAnd {
  template <typename T>
  static T apply(T a, T b) {
    return a && b;
  }
};

template <typename C, typename Op>
void reduce(void* out, const void* a, const void* b, size_t n) {
  using S = typename C::Storage;
  auto* o = static_cast<S*>(out);
  auto* x = static_cast<const S*>(a);
  auto* y = static_cast<const S*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = C::store(Op::apply(C::load(x[i]), C::load(y[i])));
}

template <typename C>
ReduceFn arith(ReduceKind k) {
  switch (k) {
    case ReduceKind::kSum:
    case ReduceKind::kAvg:
    case ReduceKind::kPremulSum:
      return &reduce<C, Sum>;
    case ReduceKind::kProduct:
      return &reduce<C, Prod>;
    case ReduceKind::kMin:
      return &reduce<C, Min>;
    case ReduceKind::kMax:
      return &reduce<C, Max>;
    default:
      return nullptr;
  }
}

template <typename T>
ReduceFn integer(ReduceKind k) {
  switch (k) {
    case ReduceKind::kBand:
      return &reduce<Plain<T>, Band>;
    case ReduceKind::kBor:
      return &reduce<Plain<T>, Bor>;
    case ReduceKind::kBxor:
      return &reduce<Plain<T>, Bxor>;
    default:
      return arith<Plain<T>>(k);
  }
}

template <typename C>
void scale(void* data, size_t n, double f) {
  using S = typename C::Storage;
  using T = typename C::Compute;
  auto* p = static_cast<S*>(data);
  for (size_t i = 0; i < n; ++i) p[i] = C::store(static_cast<T>(C::load(p[i]) * f));
}

}  // namespace

ReduceFn pairwise_reduce_fn(DataType t, ReduceKind k) {
  bool bitwise = k == ReduceKind::kBand || k == ReduceKind::kBor || k == ReduceKind::kBxor;
  switch (t) {
    case DataType::kFloat32:
      return bitwise ? nullptr : arith<Plain<float>>(k);
    case DataType::kFloat64:
      return bitwise ? nullptr : arith<Plain<double>>(k);
    case DataType::kFloat16:
      return bitwise ? nullptr : arith<F16>(k);
    case DataType::kBFloat16:
      return bitwise ? nullptr : arith<BF16>(k);
    case DataType::kFloat8E4M3:
      return bitwise ? nullptr : arith<E4M3>(k);
    case DataType::kFloat8E5M2:
      return bitwise ? nullptr : arith<E5M2>(k);
    case DataType::kInt8:
      return integer<int8_t>(k);
    case DataType::kUInt8:
      return integer<uint8_t>(k);
    case DataType::kInt32:
      return integer<int32_t>(k);
    case DataType::kInt64:
      return integer<int64_t>(k);
    case DataType::kUInt32:
      return integer<uint32_t>(k);
    case DataType::kUInt64:
      return integer<uint64_t>(k);
    case DataType::kBool:
      switch (k) {
        case ReduceKind::kSum:
        case ReduceKind::kMax:
        case ReduceKind::kBor:
          return &reduce<Plain<bool>, BoolOr>;
        case ReduceKind::kProduct:
        case ReduceKind::kMin:
        case ReduceKind::kBand:
          return &reduce<Plain<bool>, BoolAnd>;
        case ReduceKind::kBxor:
          return &reduce<Plain<bool>, Bxor>;
        default:
          return nullptr;
      }
  }
  return nullptr;
}

void scale_in_place(void* data, size_t n, DataType t, double f) {
  switch (t) {
    case DataType::kFloat32:
      return scale<Plain<float>>(data, n, f);
    case DataType::kFloat64:
      return scale<Plain<double>>(data, n, f);
    case DataType::kFloat16:
      return scale<F16>(data, n, f);
    case DataType::kBFloat16:
      return scale<BF16>(data, n, f);
    case DataType::kFloat8E4M3:
      return scale<E4M3>(data, n, f);
    case DataType::kFloat8E5M2:
      return scale<E5M2>(data, n, f);
    case DataType::kInt8:
      return scale<Plain<int8_t>>(data, n, f);
    case DataType::kUInt8:
      return scale<Plain<uint8_t>>(data, n, f);
    case DataType::kInt32:
      return scale<Plain<int32_t>>(data, n, f);
    case DataType::kInt64:
      return scale<Plain<int64_t>>(data, n, f);
    case DataType::kUInt32:
      return scale<Plain<uint32_t>>(data, n, f);
    case DataType::kUInt64:
      return scale<Plain<uint64_t>>(data, n, f);
    case DataType::kBool:
      return;
  }
}

}  // namespace commx::gloo_backend
