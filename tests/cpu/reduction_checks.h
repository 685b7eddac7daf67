// The reduction sweep shared by the cpu backend's tests over shared memory and over TCP:
// all_reduce (sync and async), reduce to a rotating root (the non-roots' buffers must not change),
// reduce_scatter_single and reduce_scatter_v, each against reference_reduce on data every rank
// regenerates alone. Layer: tests.
#pragma once

#include <string>
#include <vector>

#include "cpu/cases.h"
#include "cpu/harness.h"

namespace commx::testing {

struct ReductionMatrix {
  std::vector<size_t> counts;
  std::vector<DataType> dtypes;
  std::vector<ReduceKind> kinds;
  std::vector<std::string> algos;  // algorithm hints; "" lets the backend choose
  uint64_t seed = 1;               // seed of the first case
  // reduce_scatter gives each rank `count` elements (else count / size, rounded up).
  bool scatter_whole_count = false;
};

inline void check_reductions(RankEnv& env, Comm& comm, const ReductionMatrix& m) {
  const int n = env.size, me = env.rank;
  uint64_t seed = m.seed;
  for (DataType t : m.dtypes) {
    const size_t es = dtype_size(t);
    for (ReduceKind k : m.kinds) {
      if (!reduce_supported_on_host(k, t)) continue;
      ReduceOp op = make_op(k);
      for (size_t count : m.counts) {
        for (const std::string& a : m.algos) {
          ++seed;
          std::vector<Buf> in(n);
          std::vector<const void*> ptrs;
          for (int r = 0; r < n; ++r) {
            in[r] = gen(seed, r, count, t, k);
            ptrs.push_back(in[r].data());
          }
          Buf want(count * es + 1);
          reference_reduce(want.data(), ptrs, count, t, op, n);
          // all_reduce, alternating sync and async.
          Buf got = in[me];
          comm.all_reduce(tensor(got, count, t), op, seed % 2 == 0, algo(a)).wait();
          env.check(same(want, got, count * es), label("all_reduce", t, k, count, a) + ": " +
                                                     first_diff(want.data(), got.data(), count, t));
          // reduce to a rotating root.
          int root = static_cast<int>(seed % n);
          Buf red = in[me];
          comm.reduce(tensor(red, count, t), root, op, false, algo(a));
          if (me == root)
            env.check(same(want, red, count * es),
                      label("reduce", t, k, count, a, root) + ": " +
                          first_diff(want.data(), red.data(), count, t));
          else
            env.check(same(in[me], red, count * es),
                      label("reduce", t, k, count, a, root) + ": non-root buffer changed");
          // reduce_scatter_single: rank r's block r of everyone's input.
          const size_t blk = m.scatter_whole_count ? count : (count + n - 1) / n;
          std::vector<Buf> big(n);
          std::vector<const void*> bptr;
          for (int r = 0; r < n; ++r) {
            big[r] = gen(seed + 7777, r, blk * n, t, k);
            bptr.push_back(big[r].data() + me * blk * es);
          }
          Buf rwant(blk * es + 1), rgot(blk * es + 1);
          reference_reduce(rwant.data(), bptr, blk, t, op, n);
          comm.reduce_scatter_single(tensor(rgot, blk, t), tensor(big[me], blk * n, t), op,
                                     seed % 3 == 0, algo(a))
              .wait();
          env.check(same(rwant, rgot, blk * es), label("reduce_scatter_single", t, k, count, a) +
                                                     ": " +
                                                     first_diff(rwant.data(), rgot.data(), blk, t));
          // reduce_scatter_v: rank d receives cnt(d) elements.
          auto cnt = [&](int d) { return (blk * (d + 1) + d) % (blk + 3); };
          std::vector<Buf> mine(n);
          std::vector<Tensor> ins;
          for (int d = 0; d < n; ++d) {
            mine[d] = gen(seed * 31 + d, me, cnt(d), t, k);
            ins.push_back(tensor(mine[d], cnt(d), t));
          }
          std::vector<Buf> contrib(n);
          std::vector<const void*> cptr;
          for (int r = 0; r < n; ++r) {
            contrib[r] = gen(seed * 31 + me, r, cnt(me), t, k);
            cptr.push_back(contrib[r].data());
          }
          Buf vwant(cnt(me) * es + 1), vgot(cnt(me) * es + 1);
          reference_reduce(vwant.data(), cptr, cnt(me), t, op, n);
          comm.reduce_scatter_v(tensor(vgot, cnt(me), t), ins, op, false, algo(a));
          env.check(same(vwant, vgot, cnt(me) * es),
                    label("reduce_scatter_v", t, k, cnt(me), a) + ": " +
                        first_diff(vwant.data(), vgot.data(), cnt(me), t));
        }
      }
    }
  }
}

}  // namespace commx::testing
