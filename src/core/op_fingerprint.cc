// OpFingerprint (see op_fingerprint.h): what of an op every rank must agree on, and the words of
// a mismatch error. Layer: core.
#include "core/op_fingerprint.h"

#include <vector>

namespace commx {
namespace {

bool is_rooted(Collective c) {
  return c == Collective::kReduce || c == Collective::kBroadcast || c == Collective::kGather ||
         c == Collective::kScatter;
}

// FNV-1a over the per-rank counts of the v ops whose every rank holds the whole list.
uint64_t agreed_sizes(const OpDesc& op) {
  if (op.equal_split()) return 0;
  const std::vector<Tensor>* list = nullptr;
  if (op.collective == Collective::kAllGather) list = &op.outputs;
  if (op.collective == Collective::kReduceScatter) list = &op.inputs;
  if (!list) return 0;
  uint64_t h = 1469598103934665603ull;
  for (const Tensor& t : *list) {
    uint64_t v = static_cast<uint64_t>(t.count);
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return h;
}

std::string ordinal_text(uint32_t n) {
  const uint32_t k = n + 1;  // the first collective has ordinal 0
  const char* suffix = "th";
  if (k % 100 < 11 || k % 100 > 13) {
    if (k % 10 == 1) suffix = "st";
    if (k % 10 == 2) suffix = "nd";
    if (k % 10 == 3) suffix = "rd";
  }
  return std::to_string(k) + suffix;
}

}  // namespace

OpFingerprint fingerprint_of(const OpDesc& op, uint32_t ordinal) {
  OpFingerprint f;
  f.seq = op.seq;
  f.type = static_cast<uint8_t>(op.type);
  if (op.collective == Collective::kP2P) {
    f.flags = OpFingerprint::kPointToPoint;
    return f;
  }
  f.ordinal = ordinal;
  f.dtype = static_cast<uint8_t>(op.dtype());
  f.count = op.agreed_count();
  f.sizes = agreed_sizes(op);
  if (is_rooted(op.collective)) f.root = op.root;
  if (is_reduction(op.collective)) {
    f.reduce = static_cast<uint8_t>(op.op.kind);
    if (op.op.kind == ReduceKind::kPremulSum) f.flags |= OpFingerprint::kPremulFactor;
  }
  return f;
}

bool fingerprints_match(const OpFingerprint& a, const OpFingerprint& b) {
  if (a.p2p() || b.p2p()) return a.p2p() && b.p2p();
  return a.type == b.type && a.dtype == b.dtype && a.count == b.count && a.sizes == b.sizes &&
         a.root == b.root && a.reduce == b.reduce && a.flags == b.flags &&
         a.lowp_format == b.lowp_format && a.ordinal == b.ordinal;
}

std::string describe_call(const OpFingerprint& f) {
  const auto type = static_cast<OpType>(f.type);
  std::string d = std::string(f.type < kNumOpTypes ? op_type_name(type) : "unknown op") + " #" +
                  std::to_string(f.seq);
  if (f.p2p()) return d;
  d += " (";
  if (f.root >= 0) d += "root " + std::to_string(f.root) + ", ";
  if (f.reduce != OpFingerprint::kNoReduce)
    d += std::string(reduce_kind_name(static_cast<ReduceKind>(f.reduce))) + ", ";
  d += std::to_string(f.count) + " x " +
       (f.dtype < kNumDataTypes ? dtype_name(static_cast<DataType>(f.dtype)) : "unknown dtype");
  if (f.sizes != 0) d += ", per-rank sizes #" + std::to_string(f.sizes % 100000);
  if (f.flags & OpFingerprint::kLowPrecision) d += ", fp8 on the wire";
  return d + ")";
}

std::string mismatch_message(int my_rank, const OpFingerprint& mine, int peer,
                             const OpFingerprint& theirs) {
  std::string a = describe_call(mine), b = describe_call(theirs);
  if (a == b || mine.ordinal != theirs.ordinal) {
    a += " as its " + ordinal_text(mine.ordinal) + " collective";
    b += " as its " + ordinal_text(theirs.ordinal) + " collective";
  }
  return "rank " + std::to_string(my_rank) + " called " + a + " but rank " + std::to_string(peer) +
         " called " + b + ": the ranks' calls do not match";
}

}  // namespace commx
