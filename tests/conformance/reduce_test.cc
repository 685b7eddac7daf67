// reduce on every backend present: every dtype and reduce op the backend claims (those it does
// not claim must fail as Unsupported), every root in turn, empty, one and odd sizes, sync and
// async; the root gets the reduction and the other ranks' buffers stay as they were. Layer: tests.
#include "conformance/world.h"

using namespace commx;
using namespace commx::testing;

namespace {

class Reduce : public ConformanceTest {};
class ReduceLarge : public ConformanceTest {};

TEST_P(Reduce, EveryClaimedDtypeOpAndRoot) {
  run_world(GetParam(), [](Rank& r) {
    uint64_t seed = 1;
    for (DataType t : r.dtypes())
      for (ReduceOp op : r.reduce_ops()) {
        if (!reduce_supported_on_host(op.kind, t)) continue;  // undefined: the core refuses it
        if (!r.claims(OpType::kReduce, t, op.kind)) {
          Buffer b = r.blank(3, t);
          r.expect_unsupported([&] { r.comm().reduce(b.tensor(), r.size - 1, op); },
                               describe("reduce", t, 3, r.size - 1, &op));
          continue;
        }
        for (size_t count : case_counts()) {
          ++seed;
          const int root = static_cast<int>(seed % r.size);
          const auto in = gen_all(seed, r.size, count, t, op.kind);
          Buffer b = r.upload(in[r.rank], count, t);
          r.comm().reduce(b.tensor(), root, op, /*async_op=*/seed % 2 == 0).wait();
          const std::string what = describe("reduce", t, count, root, &op);
          if (r.rank == root)
            r.expect(reduced(in, 0, count, t, op), b, what, op);
          else
            r.expect(in[r.rank], b, what + ": a non-root buffer changed");
        }
      }
  });
}

TEST_P(ReduceLarge, OddSizeToTheLastRank) {
  run_world(GetParam(), [](Rank& r) {
    const size_t count = (size_t{1} << 18) + 5;
    const auto in = gen_all(77, r.size, count, DataType::kFloat32, ReduceKind::kSum);
    Buffer b = r.upload(in[r.rank], count, DataType::kFloat32);
    r.comm().reduce(b.tensor(), r.size - 1, ReduceOp::SUM);
    r.expect(r.rank == r.size - 1 ? reduced(in, 0, count, DataType::kFloat32, ReduceOp::SUM)
                                  : in[r.rank],
             b, describe("reduce", DataType::kFloat32, count, r.size - 1));
  });
}

COMMX_CONFORMANCE_WORLDS(Reduce);
COMMX_CONFORMANCE_LARGE_WORLDS(ReduceLarge);

}  // namespace
