// lowp_maybe_run: maps an OpDesc (list, single-tensor forms) onto the low-precision collectives.
// Layer: algorithms (low-precision).
#include "lowp/lowp_dispatch.h"

#include <cstdio>
#include <vector>

#include "commx/error.h"
#include "core/env.h"
#include "lowp/lowp_collectives.h"

namespace commx::lowp {

namespace {

int64_t list_count(const std::vector<Tensor>& ts) {
  int64_t s = 0;
  for (const Tensor& t : ts) s += t.count;
  return s;
}

void run_op(const OpDesc& op, const LowpContext& c, int size) {
  switch (op.type) {
    case OpType::kAllReduce:
      return lowp_all_reduce(c, op.input, op.output, op.op.kind);
    case OpType::kAllGather:
      return lowp_all_gather(c, op.input, op.outputs);
    case OpType::kAllGatherSingle:
      return lowp_all_gather(c, op.input, split_even(op.output, size));
    case OpType::kReduceScatter:
      return lowp_reduce_scatter(c, op.inputs, op.output, op.op.kind);
    case OpType::kReduceScatterSingle:
      return lowp_reduce_scatter(c, split_even(op.input, size), op.output, op.op.kind);
    case OpType::kAllToAll:
      return lowp_all_to_all(c, op.inputs, op.outputs);
    case OpType::kAllToAllSingle:
      return lowp_all_to_all(c, split_even(op.input, size), split_even(op.output, size));
    default:
      throw Error(ErrorCode::kInternal, c.ctx + "no low-precision variant");  // not chosen
  }
}

// COMMX_LOW_PRECISION_STATS=1 prints every low-precision op's codec counters on stderr; a
// saturated value (impossible with per-block scaling for finite data) is always reported.
void report(const OpDesc& op, const CodecStats& s, int rank, const std::string& ctx) {
  static const bool all = env_bool("COMMX_LOW_PRECISION_STATS", false);
  if (!all && s.saturated == 0) return;
  std::fprintf(stderr,
               "commx lowp: %srank %d %s #%llu: %llu elements encoded, %llu saturated, "
               "%llu underflowed to 0, %llu NaN/Inf in %llu blocks\n",
               ctx.c_str(), rank, op.name(), static_cast<unsigned long long>(op.seq),
               static_cast<unsigned long long>(s.elements),
               static_cast<unsigned long long>(s.saturated),
               static_cast<unsigned long long>(s.underflow),
               static_cast<unsigned long long>(s.nonfinite_values),
               static_cast<unsigned long long>(s.nonfinite_blocks));
}

}  // namespace

std::vector<Tensor> split_even(const Tensor& t, int size) {
  std::vector<Tensor> v;
  const int64_t each = t.count / size;
  for (int i = 0; i < size; ++i) v.push_back(t.slice(i * each, each));
  return v;
}

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
  // Peers check it: a rank running this op in FP8 never pairs with one running it in full.
  t.call().flags |= OpFingerprint::kLowPrecision;
  t.call().lowp_format = static_cast<uint8_t>(plan->codec.format);
  Fp8Codec codec(plan->codec);
  CodecStats mine;  // this op's counters, added to `stats` at the end
  LowpContext c{t, rank, size, deadline, codec, &mine, op.seq, ctx};
  c.two_term_gather = plan->two_term_gather;
  c.scratch = scratch;
  run_op(op, c, size);
  if (stats) stats->add(mine);
  report(op, mine, rank, ctx);
  return true;
}

}  // namespace commx::lowp
