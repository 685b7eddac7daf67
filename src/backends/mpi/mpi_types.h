// commx dtypes and reduce ops as MPI handles. MPI has no 16- or 8-bit float types, AVG or
// PREMUL_SUM, and Open MPI's SUM saturates 8-bit integers: those reductions are reported
// unsupported rather than emulated. Layer: backends/mpi.
#pragma once

#include <mpi.h>

#include "commx/types.h"

namespace commx::mpi_backend {

// The MPI type for reductions on `t`; MPI_DATATYPE_NULL when MPI has none.
MPI_Datatype reduce_type(DataType t);
// A type of the same element size for data movement (any dtype).
MPI_Datatype move_type(DataType t);
// The MPI op for `k` on `t`; MPI_OP_NULL when undefined.
MPI_Op reduce_op(ReduceKind k, DataType t);

}  // namespace commx::mpi_backend
