// broadcast on every backend present: every dtype, every root in turn, empty, one, odd and large
// sizes, sync and async. Layer: tests.
#include "conformance/world.h"

using namespace commx;
using namespace commx::testing;

namespace {

class Broadcast : public ConformanceTest {};
class BroadcastLarge : public ConformanceTest {};

void broadcast_case(Rank& r, DataType t, size_t count, int root, uint64_t seed) {
  const Buf want = gen(seed, root, count, t, ReduceKind::kSum);
  Buffer b = r.rank == root ? r.upload(want, count, t) : r.blank(count, t);
  r.comm().broadcast(b.tensor(), root, /*async_op=*/seed % 2 == 0).wait();
  r.expect(want, b, describe("broadcast", t, count, root));
}

TEST_P(Broadcast, EveryDtypeAndRoot) {
  run_world(GetParam(), [](Rank& r) {
    uint64_t seed = 1;
    for (DataType t : r.dtypes()) {
      if (!r.claims(OpType::kBroadcast, t)) {
        Buffer b = r.blank(3, t);
        r.expect_unsupported([&] { r.comm().broadcast(b.tensor(), 0); },
                             describe("broadcast", t, 3, 0));
        continue;
      }
      for (size_t count : case_counts()) {
        ++seed;
        broadcast_case(r, t, count, static_cast<int>(seed % r.size), seed);
      }
    }
  });
}

TEST_P(BroadcastLarge, OddSizeFromTheLastRank) {
  run_world(GetParam(), [](Rank& r) {
    broadcast_case(r, DataType::kUInt8, (size_t{1} << 20) + 7, r.size - 1, 500);
  });
}

COMMX_CONFORMANCE_WORLDS(Broadcast);
COMMX_CONFORMANCE_LARGE_WORLDS(BroadcastLarge);

}  // namespace
