// scatter on every backend present: every dtype the backend claims, every root in turn, empty,
// one and odd sizes, sync and async. Layer: tests.
#include "conformance/world.h"

using namespace commx;
using namespace commx::testing;

namespace {

class Scatter : public ConformanceTest {};

TEST_P(Scatter, EveryDtypeAndRoot) {
  run_world(GetParam(), [](Rank& r) {
    const int n = r.size, me = r.rank;
    uint64_t seed = 1;
    for (DataType t : r.dtypes()) {
      if (!r.claims(OpType::kScatter, t)) {
        Buffer in = r.blank(n, t), out = r.blank(1, t);
        std::vector<Tensor> ins;
        for (int q = 0; q < n && me == 0; ++q) ins.push_back(in.slice(q, 1));
        r.expect_unsupported([&] { r.comm().scatter(out.tensor(), ins, 0); },
                             describe("scatter", t, 1, 0));
        continue;
      }
      for (size_t count : case_counts()) {
        ++seed;
        const int root = static_cast<int>(seed % n);
        // The root's input: block q for rank q. The list is read on the root only.
        const Buf src = gen(seed, root, count * n, t, ReduceKind::kSum);
        Buffer in = me == root ? r.upload(src, count * n, t) : r.blank(0, t);
        std::vector<Tensor> ins;
        for (int q = 0; q < n && me == root; ++q) ins.push_back(in.slice(q * count, count));
        Buffer out = r.blank(count, t);
        r.comm().scatter(out.tensor(), ins, root, /*async_op=*/seed % 2 == 0).wait();
        const Buf want = piece(src, me * count, count, t);
        r.expect(want, out, describe("scatter", t, count, root));
      }
    }
  });
}

COMMX_CONFORMANCE_WORLDS(Scatter);

}  // namespace
