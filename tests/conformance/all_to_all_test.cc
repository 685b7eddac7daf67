// all_to_all (list), all_to_all_single (out of place and in place) and all_to_all_v_single on
// every backend present: every dtype the backend claims, empty, one and odd sizes, uneven splits
// (zeros among them), sync and async. Layer: tests.
#include "conformance/world.h"

using namespace commx;
using namespace commx::testing;

namespace {

class AllToAll : public ConformanceTest {};
class AllToAllLarge : public ConformanceTest {};

void even_cases(Rank& r, DataType t, size_t count, uint64_t seed) {
  const int n = r.size, me = r.rank;
  const bool async = seed % 2 == 0;
  const auto in = gen_all(seed, n, count * n, t, ReduceKind::kSum);
  const Buf want = received(in, std::vector<size_t>(n, me * count), std::vector<size_t>(n, count), t);
  Buffer src = r.upload(in[me], count * n, t);
  if (r.claims(OpType::kAllToAll, t)) {
    Buffer out = r.blank(count * n, t);
    std::vector<Tensor> ins, outs;
    for (int q = 0; q < n; ++q) {
      ins.push_back(src.slice(q * count, count));
      outs.push_back(out.slice(q * count, count));
    }
    r.comm().all_to_all(outs, ins, async).wait();
    r.expect(want, out, describe("all_to_all", t, count));
  }
  if (r.claims(OpType::kAllToAllSingle, t)) {
    Buffer out = r.blank(count * n, t);
    r.comm().all_to_all_single(out.tensor(), src.tensor(), async).wait();
    r.expect(want, out, describe("all_to_all_single", t, count));
    // In place (the output is the input).
    Buffer io = r.upload(in[me], count * n, t);
    r.comm().all_to_all_single(io.tensor(), io.tensor()).wait();
    r.expect(want, io, describe("all_to_all_single in place", t, count));
  }
}

void uneven_case(Rank& r, DataType t, size_t count, uint64_t seed) {
  const int n = r.size, me = r.rank;
  // Rank p sends split(p, q) elements to rank q.
  auto split = [&](int p, int q) { return (count + p + 2 * q) % (count + 2); };
  std::vector<int64_t> in_splits(n), out_splits(n);
  std::vector<size_t> totals(n, 0), offs(n, 0), lens(n);
  for (int p = 0; p < n; ++p)
    for (int q = 0; q < n; ++q) {
      if (q < me) offs[p] += split(p, q);
      totals[p] += split(p, q);
    }
  for (int q = 0; q < n; ++q) {
    in_splits[q] = static_cast<int64_t>(split(me, q));
    out_splits[q] = static_cast<int64_t>(split(q, me));
    lens[q] = split(q, me);
  }
  std::vector<Buf> in;
  for (int p = 0; p < n; ++p) in.push_back(gen(seed, p, totals[p], t, ReduceKind::kSum));
  const Buf want = received(in, offs, lens, t);
  size_t out_total = 0;
  for (size_t l : lens) out_total += l;
  Buffer src = r.upload(in[me], totals[me], t);
  Buffer out = r.blank(out_total, t);
  r.comm().all_to_all_v_single(out.tensor(), src.tensor(), out_splits, in_splits, seed % 2 == 0)
      .wait();
  r.expect(want, out, describe("all_to_all_v_single", t, count));
}

TEST_P(AllToAll, ListSingleInPlaceAndVSingle) {
  run_world(GetParam(), [](Rank& r) {
    const int n = r.size;
    uint64_t seed = 1;
    for (DataType t : r.dtypes()) {
      for (OpType type : {OpType::kAllToAll, OpType::kAllToAllSingle, OpType::kAllToAllVSingle}) {
        if (r.claims(type, t)) continue;
        Buffer in = r.blank(n, t), out = r.blank(n, t);
        std::vector<Tensor> ins, outs;
        for (int q = 0; q < n; ++q) ins.push_back(in.slice(q, 1)), outs.push_back(out.slice(q, 1));
        r.expect_unsupported(
            [&] {
              if (type == OpType::kAllToAll)
                r.comm().all_to_all(outs, ins);
              else if (type == OpType::kAllToAllSingle)
                r.comm().all_to_all_single(out.tensor(), in.tensor());
              else
                r.comm().all_to_all_v_single(out.tensor(), in.tensor(),
                                             std::vector<int64_t>(n, 1), std::vector<int64_t>(n, 1));
            },
            describe(op_type_name(type), t, 1));
      }
      for (size_t count : case_counts()) {
        even_cases(r, t, count, ++seed);
        if (r.claims(OpType::kAllToAllVSingle, t)) uneven_case(r, t, count, ++seed);
      }
    }
  });
}

TEST_P(AllToAllLarge, OddSize) {
  run_world(GetParam(), [](Rank& r) {
    even_cases(r, DataType::kFloat32, (size_t{1} << 16) + 3, 1000);
    uneven_case(r, DataType::kUInt8, (size_t{1} << 18) + 1, 1001);
  });
}

COMMX_CONFORMANCE_WORLDS(AllToAll);
COMMX_CONFORMANCE_LARGE_WORLDS(AllToAllLarge);

}  // namespace
