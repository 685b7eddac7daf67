// gather (list) and gather_single on every backend present: every dtype the backend claims,
// every root in turn, empty, one and odd sizes, sync and async. Layer: tests.
#include "conformance/world.h"

using namespace commx;
using namespace commx::testing;

namespace {

class Gather : public ConformanceTest {};

TEST_P(Gather, ListAndSingleToEveryRoot) {
  run_world(GetParam(), [](Rank& r) {
    const int n = r.size, me = r.rank;
    uint64_t seed = 1;
    for (DataType t : r.dtypes()) {
      for (OpType type : {OpType::kGather, OpType::kGatherSingle}) {
        if (r.claims(type, t)) continue;
        Buffer in = r.blank(1, t), out = r.blank(n, t);
        std::vector<Tensor> outs;
        for (int q = 0; q < n; ++q) outs.push_back(out.slice(q, 1));
        r.expect_unsupported(
            [&] {
              if (type == OpType::kGather)
                r.comm().gather(me == 0 ? outs : std::vector<Tensor>{}, in.tensor(), 0);
              else
                r.comm().gather_single(out.tensor(), in.tensor(), 0);
            },
            describe(op_type_name(type), t, 1, 0));
      }
      for (size_t count : case_counts()) {
        ++seed;
        const int root = static_cast<int>(seed % n);
        const bool async = seed % 2 == 0;
        const auto pieces = gen_all(seed, n, count, t, ReduceKind::kSum);
        const Buf whole = gathered(pieces, count, t);
        Buffer in = r.upload(pieces[me], count, t);
        if (r.claims(OpType::kGather, t)) {
          // The output list is read on the root only.
          std::vector<Buffer> outs;
          std::vector<Tensor> ot;
          if (me == root)
            for (int q = 0; q < n; ++q) outs.push_back(r.blank(count, t));
          for (auto& o : outs) ot.push_back(o.tensor());
          r.comm().gather(ot, in.tensor(), root, async).wait();
          for (size_t q = 0; q < outs.size(); ++q)
            r.expect(pieces[q], outs[q],
                     describe("gather", t, count, root) + " piece of rank " + std::to_string(q));
        }
        if (r.claims(OpType::kGatherSingle, t)) {
          Buffer out = r.blank(count * n, t);
          r.comm().gather_single(out.tensor(), in.tensor(), root, async).wait();
          if (me == root) r.expect(whole, out, describe("gather_single", t, count, root));
        }
      }
    }
  });
}

COMMX_CONFORMANCE_WORLDS(Gather);

}  // namespace
