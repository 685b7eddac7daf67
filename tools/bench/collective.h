// The collectives commx-bench measures: names, buffer shapes per size and the nccl-tests
// bus-bandwidth factors. Layer: tools/bench.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace commx::bench {

enum class Coll {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kBroadcast,
  kReduce,
  kGather,
  kScatter,
  kSendRecv,
  kBarrier,
};

const char* coll_name(Coll c);
// Accepts the snake_case names and nccl-tests' spellings (allreduce, all_reduce_perf, ...);
// throws InvalidArgument listing the valid names.
Coll parse_coll(const std::string& s);
std::vector<Coll> all_colls();
// Whether the collective takes a reduction op / a root.
bool coll_reduces(Coll c);
bool coll_has_root(Coll c);
// Whether the commx API has an out-of-place form (all_reduce, broadcast, reduce are in place).
bool coll_has_out_of_place(Coll c);
// Whether an in-place form exists (send/recv ping-pong and barrier have none).
bool coll_has_in_place(Coll c);

// nccl-tests' busbw = algbw * factor (doc/PERFORMANCE.md in nccl-tests).
double busbw_factor(Coll c, int nranks);

// Element counts of one run at a requested size (bytes), rounded as nccl-tests does: `count` is
// the printed count, `send`/`recv` the per-rank buffer counts.
struct Shape {
  int64_t count = 0;
  int64_t send = 0;
  int64_t recv = 0;
  uint64_t bytes = 0;  // count * element size: the "size" column
};
Shape shape_for(Coll c, uint64_t bytes, size_t elem_size, int nranks);

}  // namespace commx::bench
