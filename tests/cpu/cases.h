// Shared pieces of the cpu collective tests: the dtype/op matrix and the algorithm hints to sweep
// (the data and the reference are conformance/reference.h's).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "commx/comm.h"
#include "conformance/reference.h"

namespace commx::testing {

inline Tensor tensor(Buf& b, size_t count, DataType t) {
  return Tensor(b.data(), static_cast<int64_t>(count), t);
}

inline const std::vector<ReduceKind>& all_kinds() {
  static const std::vector<ReduceKind> k = {
      ReduceKind::kSum, ReduceKind::kProduct, ReduceKind::kMin,
      ReduceKind::kMax, ReduceKind::kAvg,     ReduceKind::kBand,
      ReduceKind::kBor, ReduceKind::kBxor,    ReduceKind::kPremulSum};
  return k;
}
inline ReduceOp make_op(ReduceKind k) {
  return k == ReduceKind::kPremulSum ? ReduceOp::premul_sum(2.5) : ReduceOp(k);
}

inline OpOptions algo(const std::string& a) {
  OpOptions o;
  if (!a.empty()) o.hints["algorithm"] = a;
  return o;
}

inline bool same(const Buf& a, const Buf& b, size_t bytes) {
  return std::memcmp(a.data(), b.data(), bytes) == 0;
}

inline std::string label(const char* op, DataType t, ReduceKind k, size_t count,
                         const std::string& a, int root = -1) {
  std::string s = std::string(op) + " " + dtype_name(t) + " " + reduce_kind_name(k) + " count " +
                  std::to_string(count) + " algo '" + a + "'";
  if (root >= 0) s += " root " + std::to_string(root);
  return s;
}

}  // namespace commx::testing
