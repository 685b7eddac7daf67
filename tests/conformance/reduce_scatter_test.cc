// reduce_scatter (list), reduce_scatter_single and reduce_scatter_v on every backend present:
// every dtype and reduce op the backend claims (those it does not claim must fail as
// Unsupported), empty, one and odd sizes, uneven pieces, sync and async. Layer: tests.
#include "conformance/world.h"

using namespace commx;
using namespace commx::testing;

namespace {

class ReduceScatter : public ConformanceTest {};
class ReduceScatterLarge : public ConformanceTest {};

// The input as a list: `counts[q]` elements for rank q, laid end to end in `in`.
std::vector<Tensor> pieces_of(const Buffer& in, const std::vector<size_t>& counts) {
  std::vector<Tensor> v;
  size_t off = 0;
  for (size_t c : counts) {
    v.push_back(in.slice(off, c));
    off += c;
  }
  return v;
}

void reduce_scatter_cases(Rank& r, DataType t, ReduceOp op, size_t count, uint64_t seed) {
  const int n = r.size, me = r.rank;
  const bool async = seed % 2 == 0;
  // Even pieces: rank q receives block q of everyone's input.
  const auto in = gen_all(seed, n, count * n, t, op.kind);
  const Buf want = reduced(in, me * count, count, t, op);
  Buffer src = r.upload(in[me], count * n, t);
  if (r.claims(OpType::kReduceScatter, t, op.kind)) {
    Buffer out = r.blank(count, t);
    r.comm().reduce_scatter(out.tensor(), pieces_of(src, std::vector<size_t>(n, count)), op, async)
        .wait();
    r.expect(want, out, describe("reduce_scatter", t, count, -1, &op), op);
  }
  if (r.claims(OpType::kReduceScatterSingle, t, op.kind)) {
    Buffer out = r.blank(count, t);
    r.comm().reduce_scatter_single(out.tensor(), src.tensor(), op, async).wait();
    r.expect(want, out, describe("reduce_scatter_single", t, count, -1, &op), op);
  }
  // Uneven pieces: rank q receives cv(q) elements.
  if (r.claims(OpType::kReduceScatterV, t, op.kind)) {
    std::vector<size_t> cv(n);
    size_t total = 0, my_off = 0;
    for (int q = 0; q < n; ++q) {
      cv[q] = (count * (q + 1) + q) % (count + 3);
      if (q == me) my_off = total;
      total += cv[q];
    }
    const auto vin = gen_all(seed + 5000, n, total, t, op.kind);
    Buffer vsrc = r.upload(vin[me], total, t);
    Buffer out = r.blank(cv[me], t);
    r.comm().reduce_scatter_v(out.tensor(), pieces_of(vsrc, cv), op, async).wait();
    r.expect(reduced(vin, my_off, cv[me], t, op), out,
             describe("reduce_scatter_v", t, cv[me], -1, &op), op);
  }
}

TEST_P(ReduceScatter, ListSingleAndV) {
  run_world(GetParam(), [](Rank& r) {
    uint64_t seed = 1;
    for (DataType t : r.dtypes())
      for (ReduceOp op : r.reduce_ops()) {
        if (!reduce_supported_on_host(op.kind, t)) continue;  // undefined: the core refuses it
        for (OpType type : {OpType::kReduceScatter, OpType::kReduceScatterSingle,
                            OpType::kReduceScatterV}) {
          if (r.claims(type, t, op.kind)) continue;
          Buffer out = r.blank(2, t), in = r.blank(2 * r.size, t);
          std::vector<Tensor> list = pieces_of(in, std::vector<size_t>(r.size, 2));
          r.expect_unsupported(
              [&] {
                if (type == OpType::kReduceScatterSingle)
                  r.comm().reduce_scatter_single(out.tensor(), in.tensor(), op);
                else if (type == OpType::kReduceScatter)
                  r.comm().reduce_scatter(out.tensor(), list, op);
                else
                  r.comm().reduce_scatter_v(out.tensor(), list, op);
              },
              describe(op_type_name(type), t, 2, -1, &op));
        }
        for (size_t count : case_counts()) reduce_scatter_cases(r, t, op, count, ++seed);
      }
  });
}

TEST_P(ReduceScatterLarge, OddSize) {
  run_world(GetParam(), [](Rank& r) {
    reduce_scatter_cases(r, DataType::kFloat32, ReduceOp::SUM, (size_t{1} << 17) + 3, 1000);
  });
}

COMMX_CONFORMANCE_WORLDS(ReduceScatter);
COMMX_CONFORMANCE_LARGE_WORLDS(ReduceScatterLarge);

}  // namespace
