// all_reduce on every backend present: every dtype and reduce op the backend claims (those it
// does not claim must fail as Unsupported), empty, one and odd sizes, sync and async, and a large
// odd size. Layer: tests.
#include <cmath>

#include "conformance/world.h"

using namespace commx;
using namespace commx::testing;

namespace {

class AllReduce : public ConformanceTest {};
class AllReduceLarge : public ConformanceTest {};

void all_reduce_case(Rank& r, DataType t, ReduceOp op, size_t count, uint64_t seed) {
  const auto in = gen_all(seed, r.size, count, t, op.kind);
  Buffer b = r.upload(in[r.rank], count, t);
  r.comm().all_reduce(b.tensor(), op, /*async_op=*/seed % 2 == 0).wait();
  r.expect(reduced(in, 0, count, t, op), b, describe("all_reduce", t, count, -1, &op), op);
}

TEST_P(AllReduce, EveryClaimedDtypeAndOp) {
  run_world(GetParam(), [](Rank& r) {
    uint64_t seed = 1;
    for (DataType t : r.dtypes())
      for (ReduceOp op : r.reduce_ops()) {
        if (!reduce_supported_on_host(op.kind, t)) continue;  // undefined: the core refuses it
        if (!r.claims(OpType::kAllReduce, t, op.kind)) {
          Buffer b = r.blank(3, t);
          r.expect_unsupported([&] { r.comm().all_reduce(b.tensor(), op); },
                               describe("all_reduce", t, 3, -1, &op));
          continue;
        }
        for (size_t count : case_counts()) all_reduce_case(r, t, op, count, ++seed);
      }
  });
}

TEST_P(AllReduceLarge, OddSizes) {
  run_world(GetParam(), [](Rank& r) {
    all_reduce_case(r, DataType::kFloat32, ReduceOp::SUM, (size_t{1} << 18) + 3, 1000);
    if (r.claims(OpType::kAllReduce, DataType::kBFloat16, ReduceKind::kAvg))
      all_reduce_case(r, DataType::kBFloat16, ReduceOp::AVG, (size_t{1} << 19) + 1, 1001);
  });
}

TEST_P(AllReduce, AsyncOpsCompleteInIssueOrder) {
  // Each all_reduce sums what the previous one left: only issue order gives size^5 * x.
  run_world(GetParam(), [](Rank& r) {
    const size_t count = 33;
    const auto in = gen_all(5, 1, count, DataType::kFloat64, ReduceKind::kSum);
    Buffer b = r.upload(in[0], count, DataType::kFloat64);
    std::vector<Work> works;
    for (int i = 0; i < 5; ++i) works.push_back(r.comm().all_reduce(b.tensor(), ReduceOp::SUM, true));
    for (auto& w : works) w.wait();
    Buf want = in[0];
    for (size_t i = 0; i < count; ++i)
      store_float(want.data(), i, DataType::kFloat64,
                  load_float(in[0].data(), i, DataType::kFloat64) * std::pow(r.size, 5));
    r.expect(want, b, "five async all_reduces in a row");
  });
}

COMMX_CONFORMANCE_WORLDS(AllReduce);
COMMX_CONFORMANCE_LARGE_WORLDS(AllReduceLarge);

}  // namespace
