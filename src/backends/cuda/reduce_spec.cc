// What the cuda backend's reducing kernels (all-reduce, reduce, reduce-scatter) reduce natively,
// and the ReduceSpec they are launched with. Layer: backends (cuda). Plain C++: the kernels'
// element types and operators are chosen from a ReduceSpec by with_reduction (reduce_device.cuh).
#include "cuda/kernels.h"

namespace commx::cuda {

bool native_reduce_supported(DataType dtype, ReduceKind kind) {
  bool fp = dtype == DataType::kFloat32 || dtype == DataType::kFloat64 ||
            dtype == DataType::kFloat16 || dtype == DataType::kBFloat16;
  bool integer = dtype == DataType::kInt32 || dtype == DataType::kInt64;
  switch (kind) {
    case ReduceKind::kSum:
    case ReduceKind::kProduct:
    case ReduceKind::kMin:
    case ReduceKind::kMax:
      return fp || integer;
    case ReduceKind::kAvg:
    case ReduceKind::kPremulSum:
      return fp;
    default:
      return false;
  }
}

ReduceSpec make_reduce_spec(DataType dtype, ReduceOp op, int world, bool aligned) {
  ReduceSpec rs{dtype, kRedSum, 1.0, aligned};
  switch (op.kind) {
    case ReduceKind::kProduct: rs.red = kRedProd; break;
    case ReduceKind::kMin: rs.red = kRedMin; break;
    case ReduceKind::kMax: rs.red = kRedMax; break;
    case ReduceKind::kAvg: rs.scale = 1.0 / world; break;
    case ReduceKind::kPremulSum: rs.scale = op.factor; break;
    default: break;
  }
  return rs;
}

}  // namespace commx::cuda
