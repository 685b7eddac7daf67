// The arguments of an all_to_all_v_dynamic as the GPU backends' kernels take them (by value, in
// kernel parameter space): the buffers, the device-resident count arrays, the sizes and the
// segment layout. Layer: backends (GPU), shared by cuda and nccl.
#pragma once

#include "algorithms/dynamic_a2a_layout.h"
#include "commx/backend.h"

namespace commx::cuda {

struct DynamicA2AArgs {
  const void* in;
  void* out;
  const long long* in_counts;
  long long* out_counts;
  long long in_elems;
  long long out_elems;
  long long row_elems;
  unsigned int elem_bytes;
  DynamicLayout layout;
  int rank;
};

// The arguments of `op` (an all_to_all_v_dynamic) on rank `rank` of `world`.
inline DynamicA2AArgs dynamic_a2a_args(const OpDesc& op, int rank, int world) {
  const AllToAllVDynamic& d = op.dynamic;
  return {op.input.data,
          op.output.data,
          static_cast<const long long*>(d.input_counts.data),
          static_cast<long long*>(d.output_counts.data),
          op.input.count,
          op.output.count,
          d.row_elems,
          static_cast<unsigned int>(dtype_size(op.input.dtype)),
          DynamicLayout{world, d.experts_per_rank, d.form},
          rank};
}

}  // namespace commx::cuda
