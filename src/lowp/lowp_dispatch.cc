// lowp_maybe_run: maps an OpDesc (list, single-tensor forms) onto the low-precision collectives.
// Layer: algorithms (low-precision).
#include "lowp/lowp_dispatch.h"

#include <vector>

#include "commx/error.h"
#include "lowp/lowp_collectives.h"

namespace commx::lowp {

namespace {

int64_t list_count(const std::vector<Tensor>& ts) {
  int64_t s = 0;
  for (const Tensor& t : ts) s += t.count;
  return s;
}

std::vector<Tensor> split_even(const Tensor& t, int size) {
  std::vector<Tensor> v;
  const int64_t each = t.count / size;
  for (int i = 0; i < size; ++i) v.push_back(t.slice(i * each, each));
  return v;
}

}  // namespace

DataType lowp_op_dtype(const OpDesc& op) {
  switch (op.type) {
    case OpType::kReduceScatter:
    case OpType::kReduceScatterSingle:
      return op.output.dtype;
    case OpType::kAllToAll:
      return op.inputs.empty() ? op.input.dtype : op.inputs[0].dtype;
    default:
      return op.input.dtype;
  }
}

int64_t lowp_op_bytes(const OpDesc& op, int size) {
  const int64_t es = static_cast<int64_t>(dtype_size(lowp_op_dtype(op)));
  switch (op.type) {
    case OpType::kAllReduce:
      return op.input.count * es;
    case OpType::kAllGather:
    case OpType::kAllGatherSingle:
      return op.input.count * size * es;
    case OpType::kReduceScatter:
    case OpType::kReduceScatterSingle:
      return op.output.count * size * es;
    case OpType::kAllToAll:
      return list_count(op.inputs) * es;
    case OpType::kAllToAllSingle:
      return op.input.count * es;
    default:
      return 0;
  }
}

bool lowp_maybe_run(const OpDesc& op, const LowpSettings& s, Transport& t, int rank, int size,
                    Deadline deadline, const std::string& ctx, CodecStats* stats,
                    LowpScratch* scratch) {
  auto plan =
      lowp_choice(s, op.type, lowp_op_dtype(op), op.op, lowp_op_bytes(op, size), op.hints, ctx);
  if (!plan) return false;
  Fp8Codec codec(plan->codec);
  LowpContext c{t, rank, size, deadline, codec, stats, op.seq, ctx};
  c.two_term_gather = plan->two_term_gather;
  c.scratch = scratch;
  switch (op.type) {
    case OpType::kAllReduce:
      lowp_all_reduce(c, op.input, op.output, op.op.kind);
      return true;
    case OpType::kAllGather:
      lowp_all_gather(c, op.input, op.outputs);
      return true;
    case OpType::kAllGatherSingle:
      lowp_all_gather(c, op.input, split_even(op.output, size));
      return true;
    case OpType::kReduceScatter:
      lowp_reduce_scatter(c, op.inputs, op.output, op.op.kind);
      return true;
    case OpType::kReduceScatterSingle:
      lowp_reduce_scatter(c, split_even(op.input, size), op.output, op.op.kind);
      return true;
    case OpType::kAllToAll:
      lowp_all_to_all(c, op.inputs, op.outputs);
      return true;
    case OpType::kAllToAllSingle:
      lowp_all_to_all(c, split_even(op.input, size), split_even(op.output, size));
      return true;
    default:
      return false;  // lowp_choice() never picks another op
  }
}

}  // namespace commx::lowp
