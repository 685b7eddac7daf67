// Collective names, shapes and bus-bandwidth factors (see collective.h). Layer: tools/bench.
#include "collective.h"

#include <algorithm>

#include "commx/error.h"

namespace commx::bench {
namespace {

struct NameEntry {
  Coll c;
  const char* name;
  const char* alias;
};
const NameEntry kNames[] = {
    {Coll::kAllReduce, "all_reduce", "allreduce"},
    {Coll::kAllGather, "all_gather", "allgather"},
    {Coll::kReduceScatter, "reduce_scatter", "reducescatter"},
    {Coll::kAllToAll, "all_to_all", "alltoall"},
    {Coll::kBroadcast, "broadcast", "bcast"},
    {Coll::kReduce, "reduce", "reduce"},
    {Coll::kGather, "gather", "gather"},
    {Coll::kScatter, "scatter", "scatter"},
    {Coll::kSendRecv, "sendrecv", "send_recv"},
    {Coll::kBarrier, "barrier", "barrier"},
};

}  // namespace

const char* coll_name(Coll c) {
  for (const auto& e : kNames)
    if (e.c == c) return e.name;
  return "?";
}

Coll parse_coll(const std::string& in) {
  std::string s = in;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return std::tolower(ch); });
  if (s.size() > 5 && s.substr(s.size() - 5) == "_perf") s.resize(s.size() - 5);
  for (const auto& e : kNames)
    if (s == e.name || s == e.alias) return e.c;
  std::string valid;
  for (const auto& e : kNames) valid += std::string(valid.empty() ? "" : ", ") + e.name;
  throw Error(ErrorCode::kInvalidArgument,
              "unknown collective '" + in + "' (valid: " + valid + ", all)");
}

std::vector<Coll> all_colls() {
  std::vector<Coll> v;
  for (const auto& e : kNames) v.push_back(e.c);
  return v;
}

bool coll_reduces(Coll c) {
  return c == Coll::kAllReduce || c == Coll::kReduceScatter || c == Coll::kReduce;
}

bool coll_has_root(Coll c) {
  return c == Coll::kBroadcast || c == Coll::kReduce || c == Coll::kGather || c == Coll::kScatter;
}

bool coll_has_out_of_place(Coll c) {
  return c != Coll::kAllReduce && c != Coll::kBroadcast && c != Coll::kReduce;
}

bool coll_has_in_place(Coll c) { return c != Coll::kSendRecv && c != Coll::kBarrier; }

double busbw_factor(Coll c, int n) {
  double nd = n;
  switch (c) {
    case Coll::kAllReduce:
      return n > 0 ? 2.0 * (nd - 1) / nd : 0;
    case Coll::kAllGather:
    case Coll::kReduceScatter:
    case Coll::kAllToAll:
    case Coll::kGather:
    case Coll::kScatter:
      return n > 0 ? (nd - 1) / nd : 0;
    case Coll::kBroadcast:
    case Coll::kReduce:
    case Coll::kSendRecv:
      return 1.0;
    case Coll::kBarrier:
      return 0.0;
  }
  return 0;
}

Shape shape_for(Coll c, uint64_t bytes, size_t es, int n) {
  Shape s;
  int64_t count = static_cast<int64_t>(bytes / es);
  switch (c) {
    case Coll::kAllReduce:
    case Coll::kBroadcast:
    case Coll::kReduce:
    case Coll::kSendRecv:
      s.count = s.send = s.recv = count;
      break;
    case Coll::kAllGather:
    case Coll::kGather:
      s.count = count / n * n;
      s.send = s.count / n;
      s.recv = s.count;
      break;
    case Coll::kReduceScatter:
    case Coll::kScatter:
      s.count = count / n * n;
      s.send = s.count;
      s.recv = s.count / n;
      break;
    case Coll::kAllToAll:
      s.count = s.send = s.recv = count / n * n;
      break;
    case Coll::kBarrier:
      break;
  }
  s.bytes = static_cast<uint64_t>(s.count) * es;
  return s;
}

}  // namespace commx::bench
