// The one home of an op's shape: the lowering of every user-facing form into its canonical
// collective with per-rank views, and what OpDesc answers about its dtype, sizes and layout.
// Layer: core.
#include <algorithm>

#include "commx/backend.h"

namespace commx {
namespace {

std::vector<Tensor> equal_views(const Tensor& t, int n, int64_t each) {
  std::vector<Tensor> v;
  v.reserve(n);
  for (int r = 0; r < n; ++r) v.push_back(t.slice(r * each, each));
  return v;
}

int64_t count_of(const std::vector<Tensor>& ts) {
  int64_t s = 0;
  for (const Tensor& t : ts) s += t.count;
  return s;
}

size_t bytes_of(const std::vector<Tensor>& ts) {
  size_t s = 0;
  for (const Tensor& t : ts) s += t.nbytes();
  return s;
}

bool equal_counts(const std::vector<Tensor>& ts) {
  for (const Tensor& t : ts)
    if (t.count != ts[0].count) return false;
  return true;
}

}  // namespace

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kReduce: return "reduce";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kAllGather: return "all_gather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllToAll: return "all_to_all";
    case Collective::kGather: return "gather";
    case Collective::kScatter: return "scatter";
    case Collective::kBarrier: return "barrier";
    case Collective::kP2P: return "p2p";
    case Collective::kAllToAllVDynamic: return "all_to_all_v_dynamic";
  }
  return "?";
}

Collective collective_of(OpType t) {
  switch (t) {
    case OpType::kAllReduce: return Collective::kAllReduce;
    case OpType::kReduce: return Collective::kReduce;
    case OpType::kBroadcast: return Collective::kBroadcast;
    case OpType::kAllGather:
    case OpType::kAllGatherSingle:
    case OpType::kAllGatherV: return Collective::kAllGather;
    case OpType::kReduceScatter:
    case OpType::kReduceScatterSingle:
    case OpType::kReduceScatterV: return Collective::kReduceScatter;
    case OpType::kAllToAll:
    case OpType::kAllToAllSingle:
    case OpType::kAllToAllVSingle: return Collective::kAllToAll;
    case OpType::kGather:
    case OpType::kGatherSingle: return Collective::kGather;
    case OpType::kScatter: return Collective::kScatter;
    case OpType::kBarrier: return Collective::kBarrier;
    case OpType::kSend:
    case OpType::kRecv:
    case OpType::kBatchP2P: return Collective::kP2P;
    case OpType::kAllToAllVDynamic: return Collective::kAllToAllVDynamic;
  }
  return Collective::kBarrier;
}

void lower_op(OpDesc& op, int rank, int size) {
  op.collective = collective_of(op.type);
  op.comm_size = size;
  const bool root = rank == op.root;
  switch (op.type) {
    case OpType::kAllGatherSingle:
      op.outputs = equal_views(op.output, size, op.input.count);
      break;
    case OpType::kReduceScatterSingle:
      op.inputs = equal_views(op.input, size, op.output.count);
      break;
    case OpType::kAllToAllSingle:
      op.inputs = equal_views(op.input, size, op.input.count / size);
      op.outputs = equal_views(op.output, size, op.output.count / size);
      break;
    case OpType::kGather:
      if (!root) op.outputs.clear();
      break;
    case OpType::kGatherSingle:
      if (root)
        op.outputs = equal_views(op.output, size, op.input.count);
      else
        op.outputs.clear();
      break;
    case OpType::kScatter:
      if (!root) op.inputs.clear();
      break;
    case OpType::kSend:
    case OpType::kRecv:
      op.p2p = {P2POp{op.type == OpType::kSend, op.input, op.root}};
      break;
    default:
      break;
  }
}

std::vector<Tensor> split_views(const Tensor& t, const std::vector<int64_t>& splits) {
  std::vector<Tensor> v;
  v.reserve(splits.size());
  int64_t off = 0;
  for (int64_t s : splits) {
    v.push_back(t.slice(off, s));
    off += s;
  }
  return v;
}

bool back_to_back(const std::vector<Tensor>& views) {
  if (views.empty()) return false;
  const char* p = static_cast<const char*>(views[0].data);
  for (const Tensor& t : views) {
    if (t.data != p) return false;
    p += t.nbytes();
  }
  return true;
}

DataType OpDesc::dtype() const {
  switch (collective) {
    case Collective::kReduceScatter:
    case Collective::kScatter:
      return output.dtype;
    case Collective::kAllToAll:
      return inputs.empty() ? input.dtype : inputs[0].dtype;
    default:
      return input.dtype;
  }
}

bool has_uneven_pieces(OpType t) {
  switch (t) {
    case OpType::kAllGatherV:
    case OpType::kReduceScatterV:
    case OpType::kAllToAll:
    case OpType::kAllToAllVSingle:
    case OpType::kAllToAllVDynamic:
      return true;
    default:
      return false;
  }
}

bool OpDesc::equal_split() const { return !has_uneven_pieces(type); }

int64_t OpDesc::agreed_count() const {
  switch (collective) {
    case Collective::kAllReduce:
    case Collective::kReduce:
    case Collective::kBroadcast:
    case Collective::kGather:
      return input.count;
    case Collective::kAllGather:
      return equal_split() ? input.count : count_of(outputs);
    case Collective::kReduceScatter:
      return equal_split() ? output.count : count_of(inputs);
    case Collective::kScatter:
      return output.count;
    case Collective::kAllToAll:
      return equal_split() ? input.count : 0;
    default:
      return 0;
  }
}

size_t OpDesc::bytes() const {
  const size_t n = static_cast<size_t>(comm_size > 0 ? comm_size : 1);
  switch (collective) {
    case Collective::kAllReduce:
    case Collective::kReduce:
    case Collective::kBroadcast:
      return input.nbytes();
    case Collective::kAllGather:
      return bytes_of(outputs);
    case Collective::kReduceScatter:
      return bytes_of(inputs);
    case Collective::kAllToAll:
      return std::max(bytes_of(inputs), bytes_of(outputs));
    case Collective::kGather:
      return input.nbytes() * n;
    case Collective::kScatter:
      return output.nbytes() * n;
    case Collective::kP2P: {
      size_t s = 0;
      for (const P2POp& p : p2p) s += p.tensor.nbytes();
      return s;
    }
    default:
      return 0;
  }
}

bool OpDesc::outputs_one_buffer() const {
  return equal_split() && equal_counts(outputs) && back_to_back(outputs);
}

bool OpDesc::inputs_one_buffer() const {
  return equal_split() && equal_counts(inputs) && back_to_back(inputs);
}

}  // namespace commx
