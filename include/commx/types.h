// Public value types of commx: data types, reduction ops and devices.
// Layer: public API (framework-free). Everything above and below uses these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace commx {

enum class DataType : uint8_t {
  kFloat32,
  kFloat64,
  kFloat16,
  kBFloat16,
  kFloat8E4M3,
  kFloat8E5M2,
  kInt8,
  kUInt8,
  kInt32,
  kInt64,
  kBool,
  kUInt32,
  kUInt64,
};
inline constexpr int kNumDataTypes = 13;

size_t dtype_size(DataType t);
const char* dtype_name(DataType t);
bool dtype_is_floating(DataType t);
// Parses "f32", "float32", "float", "bf16", "fp8e4m3", ... ; throws InvalidArgument.
DataType parse_dtype(const std::string& s);

enum class ReduceKind : uint8_t { kSum, kProduct, kMin, kMax, kAvg, kBand, kBor, kBxor, kPremulSum };

// A reduction; PREMUL_SUM carries its scalar factor (result = factor * sum of inputs).
struct ReduceOp {
  ReduceKind kind = ReduceKind::kSum;
  double factor = 1.0;

  constexpr ReduceOp() = default;
  constexpr ReduceOp(ReduceKind k) : kind(k) {}  // NOLINT: implicit on purpose
  static constexpr ReduceOp premul_sum(double f) {
    ReduceOp op(ReduceKind::kPremulSum);
    op.factor = f;
    return op;
  }
  static const ReduceOp SUM, PRODUCT, MIN, MAX, AVG, BAND, BOR, BXOR;
  bool operator==(const ReduceOp& o) const { return kind == o.kind && factor == o.factor; }
};
inline constexpr ReduceOp ReduceOp::SUM{ReduceKind::kSum};
inline constexpr ReduceOp ReduceOp::PRODUCT{ReduceKind::kProduct};
inline constexpr ReduceOp ReduceOp::MIN{ReduceKind::kMin};
inline constexpr ReduceOp ReduceOp::MAX{ReduceKind::kMax};
inline constexpr ReduceOp ReduceOp::AVG{ReduceKind::kAvg};
inline constexpr ReduceOp ReduceOp::BAND{ReduceKind::kBand};
inline constexpr ReduceOp ReduceOp::BOR{ReduceKind::kBor};
inline constexpr ReduceOp ReduceOp::BXOR{ReduceKind::kBxor};

const char* reduce_kind_name(ReduceKind k);
ReduceKind parse_reduce_kind(const std::string& s);
// Bitwise ops need integer (or bool) data; the rest need any numeric type.
bool reduce_supported_on_host(ReduceKind k, DataType t);

enum class DeviceType : uint8_t { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = -1;  // -1: the current/default device

  static Device cpu() { return {DeviceType::kCPU, -1}; }
  static Device cuda(int i = -1) { return {DeviceType::kCUDA, i}; }
  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  std::string str() const;
  // Parses "cpu", "cuda", "cuda:1"; throws InvalidArgument.
  static Device parse(const std::string& s);
};

}  // namespace commx
