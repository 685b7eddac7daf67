// Host reductions (see host_reduce.h). Each (storage, op) pair is one template instance whose
// inner loops run over a small local accumulator block, so the compiler can vectorise them
// without worrying about aliasing between dst and the sources. Layer: algorithms.
#include "commx/host_reduce.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "commx/error.h"
#include "commx/numeric.h"

namespace commx {
namespace {

// ---- storage types: how an element is loaded into the accumulator and stored back ----------

template <typename T>
struct NativeS {  // f32, f64 and integers: accumulate in the type itself
  using Elem = T;
  using Acc = T;
  static Acc load(Elem e) { return e; }
  static Elem store(Acc a) { return a; }
};

// Branch-free f16 -> float (the "magic multiply" handles subnormals exactly).
inline float f16_load(uint16_t h) {
  uint32_t m = static_cast<uint32_t>(h & 0x7fffu) << 13;
  uint32_t u = float_bits(bits_float(m) * 0x1p112f);
  if ((h & 0x7c00u) == 0x7c00u) u = m | 0x7f800000u;  // inf / NaN
  return bits_float(u | (static_cast<uint32_t>(h & 0x8000u) << 16));
}

struct F16S {
  using Elem = uint16_t;
  using Acc = float;
  static Acc load(Elem e) { return f16_load(e); }
  static Elem store(Acc a) { return float_to_f16(a); }
};
struct BF16S {
  using Elem = uint16_t;
  using Acc = float;
  static Acc load(Elem e) { return bits_float(static_cast<uint32_t>(e) << 16); }
  static Elem store(Acc a) { return float_to_bf16(a); }
};

struct Fp8Tables {
  float e4m3[256];
  float e5m2[256];
  Fp8Tables() {
    for (int i = 0; i < 256; ++i) {
      e4m3[i] = fp8e4m3_to_float(static_cast<uint8_t>(i));
      e5m2[i] = fp8e5m2_to_float(static_cast<uint8_t>(i));
    }
  }
};
const Fp8Tables kFp8;  // built at load time: no init guard inside the hot loops
struct E4M3S {
  using Elem = uint8_t;
  using Acc = float;
  static Acc load(Elem e) { return kFp8.e4m3[e]; }
  static Elem store(Acc a) { return float_to_fp8e4m3(a); }
};
struct E5M2S {
  using Elem = uint8_t;
  using Acc = float;
  static Acc load(Elem e) { return kFp8.e5m2[e]; }
  static Elem store(Acc a) { return float_to_fp8e5m2(a); }
};
struct BoolS {  // any non-zero byte is true; results are 0 or 1
  using Elem = uint8_t;
  using Acc = uint8_t;
  static Acc load(Elem e) { return e != 0; }
  static Elem store(Acc a) { return a; }
};

// ---- ops --------------------------------------------------------------------------------------

// Integer sums and products wrap (computed unsigned: no signed-overflow UB).
template <typename A>
A wrap_add(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}
template <typename A>
A wrap_mul(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    // uint8/uint16 promote to int; go through unsigned int to keep it well defined.
    using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
    return static_cast<A>(static_cast<W>(static_cast<U>(a)) * static_cast<W>(static_cast<U>(b)));
  } else {
    return a * b;
  }
}

struct SumOp {
  template <typename A>
  static A apply(A a, A b) {
    return wrap_add(a, b);
  }
};
struct ProdOp {
  template <typename A>
  static A apply(A a, A b) {
    return wrap_mul(a, b);
  }
};
struct MinOp {
  template <typename A>
  static A apply(A a, A b) {
    return b < a ? b : a;
  }
};
struct MaxOp {
  template <typename A>
  static A apply(A a, A b) {
    return a < b ? b : a;
  }
};
struct AndOp {
  template <typename A>
  static A apply(A a, A b) {
    return a & b;
  }
};
struct OrOp {
  template <typename A>
  static A apply(A a, A b) {
    return a | b;
  }
};
struct XorOp {
  template <typename A>
  static A apply(A a, A b) {
    return a ^ b;
  }
};

enum class Fin { kNone, kAvg, kPremul };

template <typename A>
void finish_block(A* acc, size_t m, Fin fin, const HostReducer::Params& p) {
  if (fin == Fin::kAvg) {
    if constexpr (std::is_integral_v<A>) {
      const A d = static_cast<A>(p.divisor);
      for (size_t j = 0; j < m; ++j) acc[j] = static_cast<A>(acc[j] / d);
    } else {
      const A d = static_cast<A>(p.divisor);
      for (size_t j = 0; j < m; ++j) acc[j] = acc[j] / d;
    }
  } else if (fin == Fin::kPremul) {
    if constexpr (std::is_integral_v<A>) {
      for (size_t j = 0; j < m; ++j)
        acc[j] = static_cast<A>(static_cast<double>(acc[j]) * p.factor);
    } else {
      const A f = static_cast<A>(p.factor);
      for (size_t j = 0; j < m; ++j) acc[j] = acc[j] * f;
    }
  }
}

constexpr size_t kBlock = 1024;  // elements per accumulator block (<= 8 KiB: stays in L1)

template <class S, class Op, Fin kFin>
void kernel(void* dst, const void* const* srcs, int nsrc, size_t count,
            const HostReducer::Params& p) {
  using E = typename S::Elem;
  using A = typename S::Acc;
  alignas(64) A acc[kBlock];
  E* d = static_cast<E*>(dst);
  for (size_t base = 0; base < count; base += kBlock) {
    const size_t m = std::min(kBlock, count - base);
    const E* s0 = static_cast<const E*>(srcs[0]) + base;
    if (nsrc == 1) {
      for (size_t j = 0; j < m; ++j) acc[j] = S::load(s0[j]);
    } else {
      const E* s1 = static_cast<const E*>(srcs[1]) + base;
      for (size_t j = 0; j < m; ++j) acc[j] = Op::apply(S::load(s0[j]), S::load(s1[j]));
    }
    for (int k = 2; k < nsrc; ++k) {
      const E* s = static_cast<const E*>(srcs[k]) + base;
      for (size_t j = 0; j < m; ++j) acc[j] = Op::apply(acc[j], S::load(s[j]));
    }
    if (kFin != Fin::kNone && p.finish) finish_block(acc, m, kFin, p);
    E* o = d + base;
    for (size_t j = 0; j < m; ++j) o[j] = S::store(acc[j]);
  }
}

template <class S>
HostReducer::Fn pick_arith(ReduceKind k) {
  switch (k) {
    case ReduceKind::kSum:
      return &kernel<S, SumOp, Fin::kNone>;
    case ReduceKind::kAvg:
      return &kernel<S, SumOp, Fin::kAvg>;
    case ReduceKind::kPremulSum:
      return &kernel<S, SumOp, Fin::kPremul>;
    case ReduceKind::kProduct:
      return &kernel<S, ProdOp, Fin::kNone>;
    case ReduceKind::kMin:
      return &kernel<S, MinOp, Fin::kNone>;
    case ReduceKind::kMax:
      return &kernel<S, MaxOp, Fin::kNone>;
    default:
      return nullptr;
  }
}

template <class S>
HostReducer::Fn pick_int(ReduceKind k) {
  switch (k) {
    case ReduceKind::kBand:
      return &kernel<S, AndOp, Fin::kNone>;
    case ReduceKind::kBor:
      return &kernel<S, OrOp, Fin::kNone>;
    case ReduceKind::kBxor:
      return &kernel<S, XorOp, Fin::kNone>;
    default:
      return pick_arith<S>(k);
  }
}

HostReducer::Fn pick_bool(ReduceKind k) {
  switch (k) {
    case ReduceKind::kSum:
    case ReduceKind::kMax:
    case ReduceKind::kBor:
      return &kernel<BoolS, OrOp, Fin::kNone>;
    case ReduceKind::kProduct:
    case ReduceKind::kMin:
    case ReduceKind::kBand:
      return &kernel<BoolS, AndOp, Fin::kNone>;
    case ReduceKind::kBxor:
      return &kernel<BoolS, XorOp, Fin::kNone>;
    default:
      return nullptr;
  }
}

HostReducer::Fn pick(DataType t, ReduceKind k) {
  bool bitwise = k == ReduceKind::kBand || k == ReduceKind::kBor || k == ReduceKind::kBxor;
  switch (t) {
    case DataType::kFloat32:
      return bitwise ? nullptr : pick_arith<NativeS<float>>(k);
    case DataType::kFloat64:
      return bitwise ? nullptr : pick_arith<NativeS<double>>(k);
    case DataType::kFloat16:
      return bitwise ? nullptr : pick_arith<F16S>(k);
    case DataType::kBFloat16:
      return bitwise ? nullptr : pick_arith<BF16S>(k);
    case DataType::kFloat8E4M3:
      return bitwise ? nullptr : pick_arith<E4M3S>(k);
    case DataType::kFloat8E5M2:
      return bitwise ? nullptr : pick_arith<E5M2S>(k);
    case DataType::kInt8:
      return pick_int<NativeS<int8_t>>(k);
    case DataType::kUInt8:
      return pick_int<NativeS<uint8_t>>(k);
    case DataType::kInt32:
      return pick_int<NativeS<int32_t>>(k);
    case DataType::kInt64:
      return pick_int<NativeS<int64_t>>(k);
    case DataType::kUInt32:
      return pick_int<NativeS<uint32_t>>(k);
    case DataType::kUInt64:
      return pick_int<NativeS<uint64_t>>(k);
    case DataType::kBool:
      return pick_bool(k);
  }
  return nullptr;
}

}  // namespace

HostReducer::HostReducer(DataType dtype, ReduceOp op, int comm_size)
    : dtype_(dtype), kind_(op.kind), elem_size_(dtype_size(dtype)) {
  params_.factor = op.factor;
  params_.divisor = comm_size < 1 ? 1 : comm_size;
  params_.finish = true;
  fn_ = pick(dtype, op.kind);
  if (fn_ == nullptr)
    throw Error(ErrorCode::kUnsupported, std::string("reduce op ") + reduce_kind_name(op.kind) +
                                             " is not defined for " + dtype_name(dtype));
}

void HostReducer::reduce(void* dst, const void* const* srcs, int nsrc, size_t count,
                         bool finish) const {
  if (count == 0) return;
  Params p = params_;
  p.finish = finish;
  fn_(dst, srcs, nsrc, count, p);
}

void HostReducer::finish(void* data, size_t count) const {
  if (!needs_finish() || count == 0) return;
  const void* src[1] = {data};
  fn_(data, src, 1, count, params_);
}

}  // namespace commx
