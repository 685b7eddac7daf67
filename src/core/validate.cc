// Argument checks every op passes before a backend sees it, so each backend gets the same
// clear errors for bad input. Layer: core.
#include <numeric>
#include <string>
#include <string_view>

#include "commx/error.h"
#include "core/comm_impl.h"

namespace commx {
namespace {

struct Checker {
  const CommImpl& c;
  const OpDesc& op;

  [[noreturn]] void fail(ErrorCode code, const std::string& what) const {
    throw Error(code, c.op_context(op) + what);
  }
  // `what` makes the message (called only when the check fails).
  template <class What>
  void expect(bool ok, What&& what) const {
    if (!ok) fail(ErrorCode::kInvalidArgument, what());
  }

  // Roles are words ("input", "outputs" with an index for list members), formatted into a
  // message only when a check fails: every op passes here, and a string per check costs more
  // than a small op's data movement.
  static std::string name(std::string_view role, int index) {
    std::string r(role);
    if (index >= 0) r += "[" + std::to_string(index) + "]";
    return r;
  }
  void tensor(const Tensor& t, std::string_view role, int index = -1) const {
    if (t.count < 0)
      fail(ErrorCode::kInvalidArgument, name(role, index) + " has negative count " + std::to_string(t.count));
    if (t.count > 0 && t.data == nullptr)
      fail(ErrorCode::kInvalidArgument, name(role, index) + " has a null data pointer");
    if (t.device.type != c.device.type || !c.backend->accepts_device(t.device))
      fail(ErrorCode::kInvalidArgument, name(role, index) + " is on device " + t.device.str() +
                                            " but the comm is bound to " + c.device.str() +
                                            " (backend " + c.backend_name + ")");
  }
  void same_dtype(const Tensor& a, const Tensor& b, std::string_view role, int index = -1) const {
    if (a.dtype != b.dtype)
      fail(ErrorCode::kInvalidArgument, name(role, index) + " has dtype " + dtype_name(b.dtype) +
                                            " but the input has " + dtype_name(a.dtype));
  }
  void list(const std::vector<Tensor>& ts, const Tensor& ref, std::string_view role, bool same_count) const {
    if (static_cast<int>(ts.size()) != c.size)
      fail(ErrorCode::kInvalidArgument, std::string(role) + " has " + std::to_string(ts.size()) +
                                            " tensors, expected one per rank (" + std::to_string(c.size) + ")");
    for (size_t i = 0; i < ts.size(); ++i) {
      const int at = static_cast<int>(i);
      tensor(ts[i], role, at);
      same_dtype(ref, ts[i], role, at);
      if (same_count && ts[i].count != ref.count)
        fail(ErrorCode::kInvalidArgument, name(role, at) + " has " + std::to_string(ts[i].count) +
                                              " elements, expected " + std::to_string(ref.count));
    }
  }
  void rank_arg(int r, std::string_view role) const {
    if (r < 0 || r >= c.size)
      fail(ErrorCode::kInvalidArgument, std::string(role) + " " + std::to_string(r) +
                                            " is out of range [0, " + std::to_string(c.size) + ")");
  }
  // The views all_to_all_v_single's split sizes became (split_views): one per rank, inside `t`.
  void splits(const std::vector<Tensor>& views, const Tensor& t, std::string_view role) const {
    if (static_cast<int>(views.size()) != c.size)
      fail(ErrorCode::kInvalidArgument, std::string(role) + " has " + std::to_string(views.size()) +
                                            " entries, expected " + std::to_string(c.size));
    int64_t sum = 0;
    for (const Tensor& v : views) {
      if (v.count < 0)
        fail(ErrorCode::kInvalidArgument, std::string(role) + " has a negative split " + std::to_string(v.count));
      sum += v.count;
    }
    if (sum > t.count)
      fail(ErrorCode::kInvalidArgument, std::string(role) + " add up to " + std::to_string(sum) +
                                            " elements but the tensor has " + std::to_string(t.count));
  }
  // The shapes of all_to_all_v_dynamic (its counts are checked where they are read: on the
  // device, or by the cpu backend).
  void dynamic_a2a() const {
    const AllToAllVDynamic& d = op.dynamic;
    tensor(op.input, "input");
    tensor(op.output, "output");
    same_dtype(op.input, op.output, "output");
    const bool plain = d.form == DynamicA2AForm::kPlain;
    const char* in_role = plain ? "input_split_sizes" : d.form == DynamicA2AForm::kDispatch
                                                           ? "expert_counts"
                                                           : "input_split_sizes";
    for (auto [t, role] : {std::pair{&d.input_counts, in_role},
                           std::pair{&d.output_counts, "output_split_sizes"}}) {
      tensor(*t, role);
      if (t->dtype != DataType::kInt64)
        fail(ErrorCode::kInvalidArgument,
             std::string(role) + " has dtype " + dtype_name(t->dtype) + ", expected int64");
    }
    expect(d.row_elems >= 1, [&] { return "row_size is " + std::to_string(d.row_elems) + ", expected >= 1"; });
    const int64_t segs = d.input_counts.count;
    if (plain) {
      expect(segs == c.size, [&] { return std::string(in_role) + " has " + std::to_string(segs) +
                                 " entries, expected one per rank (" + std::to_string(c.size) + ")"; });
    } else {
      expect(segs >= c.size && segs % c.size == 0, [&] { return std::string(in_role) + " has " + std::to_string(segs) +
                 " entries: the expert count must be a positive multiple of the comm size " +
                 std::to_string(c.size); });
    }
    expect(segs <= kMaxDynamicSegments, [&] { return std::string(in_role) + " has " + std::to_string(segs) + " entries, at most " +
               std::to_string(kMaxDynamicSegments) + " are supported"; });
    expect(d.output_counts.count == segs, [&] { return "output_split_sizes has " +
                                              std::to_string(d.output_counts.count) +
                                              " entries, expected " + std::to_string(segs); });
    expect(d.input_counts.data != d.output_counts.data, [&] { return "output_split_sizes is the same tensor as " + std::string(in_role); });
  }
  void reduction(DataType t) const {
    if (!reduce_supported_on_host(op.op.kind, t))
      fail(ErrorCode::kUnsupported, std::string("reduce op ") + reduce_kind_name(op.op.kind) + " is not defined for " +
                                        dtype_name(t));
  }
};

}  // namespace

void validate_op(const CommImpl& c, const OpDesc& op) {
  Checker k{c, op};
  const int n = c.size;
  const Tensor& in = op.input;
  const Tensor& out = op.output;
  switch (op.type) {
    case OpType::kAllReduce:
    case OpType::kBroadcast:
    case OpType::kReduce:
      k.tensor(in, "tensor");
      if (op.type != OpType::kAllReduce) k.rank_arg(op.root, "root");
      break;
    case OpType::kAllGather:
    case OpType::kAllGatherV:
      k.tensor(in, "input");
      k.list(op.outputs, in, "output list", op.type == OpType::kAllGather);
      if (op.type == OpType::kAllGatherV)
        k.expect(op.outputs[c.rank].count == in.count, [&] { return "output list[" + std::to_string(c.rank) + "] has " + std::to_string(op.outputs[c.rank].count) +
                     " elements but this rank's input has " + std::to_string(in.count); });
      break;
    case OpType::kAllGatherSingle:
      k.tensor(in, "input");
      k.tensor(out, "output");
      k.same_dtype(in, out, "output");
      k.expect(out.count == in.count * n, [&] { return "output has " + std::to_string(out.count) +
                                              " elements, expected size*input = " + std::to_string(in.count * n); });
      break;
    case OpType::kReduceScatter:
    case OpType::kReduceScatterV:
      k.tensor(out, "output");
      k.list(op.inputs, out, "input list", op.type == OpType::kReduceScatter);
      if (op.type == OpType::kReduceScatterV)
        k.expect(op.inputs[c.rank].count == out.count, [&] { return "input list[" + std::to_string(c.rank) + "] has " + std::to_string(op.inputs[c.rank].count) +
                     " elements but this rank's output has " + std::to_string(out.count); });
      break;
    case OpType::kReduceScatterSingle:
      k.tensor(in, "input");
      k.tensor(out, "output");
      k.same_dtype(in, out, "output");
      k.expect(in.count == out.count * n, [&] { return "input has " + std::to_string(in.count) +
                                              " elements, expected size*output = " + std::to_string(out.count * n); });
      break;
    case OpType::kAllToAll:
      k.expect(!op.inputs.empty(), [&] { return "input list is empty"; });
      k.list(op.inputs, op.inputs[0], "input list", false);
      k.list(op.outputs, op.inputs[0], "output list", false);
      for (int r = 0; r < n; ++r)
        k.expect(op.inputs[r].count == op.outputs[r].count, [&] { return "input list[" + std::to_string(r) + "] has " + std::to_string(op.inputs[r].count) +
                     " elements but output list[" + std::to_string(r) + "] has " +
                     std::to_string(op.outputs[r].count); });
      break;
    case OpType::kAllToAllSingle:
      k.tensor(in, "input");
      k.tensor(out, "output");
      k.same_dtype(in, out, "output");
      k.expect(in.count == out.count, [&] { return "input has " + std::to_string(in.count) + " elements but output has " +
                                          std::to_string(out.count); });
      k.expect(in.count % n == 0, [&] { return "input has " + std::to_string(in.count) +
                                      " elements, not divisible by the comm size " + std::to_string(n); });
      break;
    case OpType::kAllToAllVSingle:
      k.tensor(in, "input");
      k.tensor(out, "output");
      k.same_dtype(in, out, "output");
      k.splits(op.inputs, in, "input splits");
      k.splits(op.outputs, out, "output splits");
      break;
    case OpType::kGather:
      k.tensor(in, "input");
      k.rank_arg(op.root, "root");
      if (c.rank == op.root) k.list(op.outputs, in, "output list", true);
      break;
    case OpType::kGatherSingle:
      k.tensor(in, "input");
      k.rank_arg(op.root, "root");
      if (c.rank == op.root) {
        k.tensor(out, "output");
        k.same_dtype(in, out, "output");
        k.expect(out.count == in.count * n, [&] { return "output has " + std::to_string(out.count) +
                                                " elements, expected size*input = " + std::to_string(in.count * n); });
      }
      break;
    case OpType::kScatter:
      k.tensor(out, "output");
      k.rank_arg(op.root, "root");
      if (c.rank == op.root) k.list(op.inputs, out, "input list", true);
      break;
    case OpType::kBarrier:
      break;
    case OpType::kSend:
    case OpType::kRecv:
      k.tensor(in, "tensor");
      k.rank_arg(op.root, op.type == OpType::kSend ? "destination rank" : "source rank");
      k.expect(op.root != c.rank, [&] { return std::string(op.type == OpType::kSend ? "destination" : "source") +
                                      " is this rank itself"; });
      break;
    case OpType::kBatchP2P:
      for (size_t i = 0; i < op.p2p.size(); ++i) {
        std::string role = std::string(op.p2p[i].is_send ? "send" : "recv") + " #" + std::to_string(i);
        k.tensor(op.p2p[i].tensor, role);
        k.rank_arg(op.p2p[i].peer, role + " peer");
        k.expect(op.p2p[i].peer != c.rank, [&] { return role + " peer is this rank itself"; });
      }
      break;
    case OpType::kAllToAllVDynamic:
      k.dynamic_a2a();
      break;
  }
}

bool backend_runs(const Backend& b, OpType type, DataType dtype, ReduceKind kind) {
  const Collective c = collective_of(type);
  return has_uneven_pieces(type) ? b.supports_uneven(c, dtype, kind) : b.supports(c, dtype, kind);
}

void check_supported(const CommImpl& c, const OpDesc& op) {
  Checker k{c, op};
  const DataType dt = op.dtype();
  const bool reduces = is_reduction(op.collective);
  if (reduces) k.reduction(dt);
  if (!backend_runs(*c.backend, op.type, dt, op.op.kind)) {
    std::string what = std::string(op.name()) + " on " + dtype_name(dt);
    if (reduces) what += std::string(" with ") + reduce_kind_name(op.op.kind);
    k.fail(ErrorCode::kUnsupported, "backend '" + c.backend_name + "' does not support " + what);
  }
}

}  // namespace commx
