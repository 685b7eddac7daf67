// dtype/op mapping to MPI (see mpi_types.h). Layer: backends/mpi.
#include "mpi_types.h"

namespace commx::mpi_backend {

MPI_Datatype reduce_type(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return MPI_FLOAT;
    case DataType::kFloat64:
      return MPI_DOUBLE;
    case DataType::kInt8:
      return MPI_INT8_T;
    case DataType::kUInt8:
      return MPI_UINT8_T;
    case DataType::kInt32:
      return MPI_INT32_T;
    case DataType::kInt64:
      return MPI_INT64_T;
    case DataType::kUInt32:
      return MPI_UINT32_T;
    case DataType::kUInt64:
      return MPI_UINT64_T;
    case DataType::kBool:
      return MPI_C_BOOL;
    default:
      return MPI_DATATYPE_NULL;
  }
}

MPI_Datatype move_type(DataType t) {
  switch (dtype_size(t)) {
    case 1:
      return MPI_UINT8_T;
    case 2:
      return MPI_UINT16_T;
    case 4:
      return MPI_UINT32_T;
    default:
      return MPI_UINT64_T;
  }
}

MPI_Op reduce_op(ReduceKind k, DataType t) {
  if (reduce_type(t) == MPI_DATATYPE_NULL) return MPI_OP_NULL;
  if (t == DataType::kBool) {
    // MPI defines only logical ops on C bool; sum/max are "or", product/min are "and".
    switch (k) {
      case ReduceKind::kSum:
      case ReduceKind::kMax:
      case ReduceKind::kBor:
        return MPI_LOR;
      case ReduceKind::kProduct:
      case ReduceKind::kMin:
      case ReduceKind::kBand:
        return MPI_LAND;
      case ReduceKind::kBxor:
        return MPI_LXOR;
      default:
        return MPI_OP_NULL;
    }
  }
  bool floating = dtype_is_floating(t);
  // Open MPI 4.1's vectorised (AVX) MPI_SUM saturates 8-bit integers instead of wrapping (a sum
  // of int8 100 + 100 gives 127 once a buffer is long enough to vectorise): not claimed.
  const bool byte_int = t == DataType::kInt8 || t == DataType::kUInt8;
  switch (k) {
    case ReduceKind::kSum:
      return byte_int ? MPI_OP_NULL : MPI_SUM;
    case ReduceKind::kProduct:
      return MPI_PROD;
    case ReduceKind::kMin:
      return MPI_MIN;
    case ReduceKind::kMax:
      return MPI_MAX;
    case ReduceKind::kBand:
      return floating ? MPI_OP_NULL : MPI_BAND;
    case ReduceKind::kBor:
      return floating ? MPI_OP_NULL : MPI_BOR;
    case ReduceKind::kBxor:
      return floating ? MPI_OP_NULL : MPI_BXOR;
    default:
      return MPI_OP_NULL;  // AVG, PREMUL_SUM: MPI has no such op
  }
}

}  // namespace commx::mpi_backend
