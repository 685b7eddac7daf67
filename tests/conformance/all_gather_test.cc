// all_gather, all_gather_single (out of place and in place) and all_gather_v on every backend
// present: every dtype the backend claims, empty, one and odd sizes, uneven pieces, sync and
// async. Layer: tests.
#include "conformance/world.h"

using namespace commx;
using namespace commx::testing;

namespace {

class AllGather : public ConformanceTest {};
class AllGatherLarge : public ConformanceTest {};

TEST_P(AllGather, ListSingleInPlaceAndV) {
  run_world(GetParam(), [](Rank& r) {
    const int n = r.size, me = r.rank;
    uint64_t seed = 1;
    for (DataType t : r.dtypes()) {
      if (!r.claims(OpType::kAllGather, t)) {
        Buffer in = r.blank(2, t);
        std::vector<Buffer> outs(n, r.blank(2, t));
        std::vector<Tensor> ot;
        for (auto& o : outs) ot.push_back(o.tensor());
        r.expect_unsupported([&] { r.comm().all_gather(ot, in.tensor()); },
                             describe("all_gather", t, 2));
        continue;
      }
      for (size_t count : case_counts()) {
        ++seed;
        const bool async = seed % 2 == 0;
        const auto pieces = gen_all(seed, n, count, t, ReduceKind::kSum);
        const Buf whole = gathered(pieces, count, t);
        Buffer in = r.upload(pieces[me], count, t);
        // List form.
        std::vector<Buffer> outs;
        std::vector<Tensor> ot;
        for (int q = 0; q < n; ++q) outs.push_back(r.blank(count, t));
        for (auto& o : outs) ot.push_back(o.tensor());
        r.comm().all_gather(ot, in.tensor(), async).wait();
        for (int q = 0; q < n; ++q)
          r.expect(pieces[q], outs[q], describe("all_gather", t, count) + " piece of rank " +
                                           std::to_string(q));
        // Single tensor, out of place.
        if (r.claims(OpType::kAllGatherSingle, t)) {
          Buffer out = r.blank(count * n, t);
          r.comm().all_gather_single(out.tensor(), in.tensor(), async).wait();
          r.expect(whole, out, describe("all_gather_single", t, count));
          // In place: the input is this rank's block of the output.
          Buf mine_in_place(count * n * dtype_size(t) + 1, 0xA5);
          std::copy(pieces[me].begin(), pieces[me].begin() + count * dtype_size(t),
                    mine_in_place.begin() + me * count * dtype_size(t));
          Buffer io = r.upload(mine_in_place, count * n, t);
          r.comm().all_gather_single(io.tensor(), io.slice(me * count, count)).wait();
          r.expect(whole, io, describe("all_gather_single in place", t, count));
        } else {
          Buffer out = r.blank(count * n, t);
          r.expect_unsupported([&] { r.comm().all_gather_single(out.tensor(), in.tensor()); },
                               describe("all_gather_single", t, count));
        }
        // Uneven pieces: rank q contributes cv(q) elements.
        if (r.claims(OpType::kAllGatherV, t)) {
          std::vector<size_t> cv(n);
          for (int q = 0; q < n; ++q) cv[q] = (count * (q + 2) + q) % (count + 5);
          std::vector<Buf> vpieces;
          for (int q = 0; q < n; ++q) vpieces.push_back(gen(seed + 5000, q, cv[q], t, ReduceKind::kSum));
          Buffer vin = r.upload(vpieces[me], cv[me], t);
          std::vector<Buffer> vouts;
          std::vector<Tensor> vt;
          for (int q = 0; q < n; ++q) vouts.push_back(r.blank(cv[q], t));
          for (auto& o : vouts) vt.push_back(o.tensor());
          r.comm().all_gather_v(vt, vin.tensor(), async).wait();
          for (int q = 0; q < n; ++q)
            r.expect(vpieces[q], vouts[q],
                     describe("all_gather_v", t, cv[q]) + " piece of rank " + std::to_string(q));
        } else {
          r.expect_unsupported([&] { r.comm().all_gather_v(ot, in.tensor()); },
                               describe("all_gather_v", t, count));
        }
      }
    }
  });
}

TEST_P(AllGatherLarge, OddSize) {
  run_world(GetParam(), [](Rank& r) {
    const size_t count = (size_t{1} << 18) + 3;
    const DataType t = DataType::kFloat32;
    const auto pieces = gen_all(9, r.size, count, t, ReduceKind::kSum);
    Buffer in = r.upload(pieces[r.rank], count, t);
    Buffer out = r.blank(count * r.size, t);
    r.comm().all_gather_single(out.tensor(), in.tensor());
    r.expect(gathered(pieces, count, t), out,
             describe("all_gather_single", t, count));
  });
}

COMMX_CONFORMANCE_WORLDS(AllGather);
COMMX_CONFORMANCE_LARGE_WORLDS(AllGatherLarge);

}  // namespace
