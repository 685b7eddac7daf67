// all_reduce, reduce and reduce_scatter(_single/_v) on forked ranks over shared memory, against
// an independent reference: every dtype and op, sizes 0, 1, odd and larger, world sizes 1..8,
// non-zero roots, every algorithm (DDA, RS+AG, ring, recursive doubling, tree), sync and async,
// over shared memory and over TCP (transport=tcp).
#include <gtest/gtest.h>

#include "cpu/cases.h"
#include "cpu/harness.h"

using namespace commx;
using namespace commx::testing;

namespace {

const std::vector<std::string> kAlgos = {"", "dda", "rsag", "cma", "ring", "recursive_doubling"};

void reduce_matrix(RankEnv& env, const std::vector<size_t>& counts,
                   const std::vector<DataType>& dtypes, const std::vector<ReduceKind>& kinds,
                   const std::vector<std::string>& algos, const std::string& transport = "") {
  const int n = env.size, me = env.rank;
  CommOptions co;
  if (!transport.empty()) co.hints["transport"] = transport;
  auto comm = env.comm("reduce", co);
  uint64_t seed = 1;
  for (DataType t : dtypes) {
    const size_t es = dtype_size(t);
    for (ReduceKind k : kinds) {
      if (!reduce_supported_on_host(k, t)) continue;
      ReduceOp op = make_op(k);
      for (size_t count : counts) {
        for (const std::string& a : algos) {
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
          bool async = seed % 2 == 0;
          Work w = comm->all_reduce(tensor(got, count, t), op, async, algo(a));
          w.wait();
          env.check(same(want, got, count * es), label("all_reduce", t, k, count, a) + ": " +
                                                     first_diff(want.data(), got.data(), count, t));
          // reduce to a rotating root.
          int root = static_cast<int>(seed % n);
          Buf red = in[me];
          comm->reduce(tensor(red, count, t), root, op, false, algo(a));
          if (me == root)
            env.check(same(want, red, count * es),
                      label("reduce", t, k, count, a, root) + ": " +
                          first_diff(want.data(), red.data(), count, t));
          else
            env.check(same(in[me], red, count * es),
                      label("reduce", t, k, count, a, root) + ": non-root buffer changed");
          // reduce_scatter_single: rank r's block r of everyone's input.
          size_t blk = (count + n - 1) / n;  // elements per rank
          std::vector<Buf> big(n);
          std::vector<const void*> bptr;
          for (int r = 0; r < n; ++r) {
            big[r] = gen(seed + 7777, r, blk * n, t, k);
            bptr.push_back(big[r].data() + me * blk * es);
          }
          Buf rwant(blk * es + 1), rgot(blk * es + 1);
          reference_reduce(rwant.data(), bptr, blk, t, op, n);
          comm->reduce_scatter_single(tensor(rgot, blk, t), tensor(big[me], blk * n, t), op, async,
                                      algo(a))
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
          comm->reduce_scatter_v(tensor(vgot, cnt(me), t), ins, op, false, algo(a));
          env.check(same(vwant, vgot, cnt(me) * es),
                    label("reduce_scatter_v", t, k, cnt(me), a) + ": " +
                        first_diff(vwant.data(), vgot.data(), cnt(me), t));
        }
      }
    }
  }
  comm->finalize();
}

std::vector<DataType> all_dtypes() {
  std::vector<DataType> v;
  for (int i = 0; i < kNumDataTypes; ++i) v.push_back(static_cast<DataType>(i));
  return v;
}

class ReduceOps : public ::testing::TestWithParam<int> {};

TEST_P(ReduceOps, FullMatrixSmallSizes) {
  int n = GetParam();
  auto res = run_forked(n, [](RankEnv& env) {
    reduce_matrix(env, {0, 1, 7, 130}, all_dtypes(), all_kinds(), kAlgos);
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ReduceOps, ::testing::Values(1, 2, 3, 4, 5, 6, 7, 8));

class ReduceOpsTcp : public ::testing::TestWithParam<int> {};

TEST_P(ReduceOpsTcp, FullMatrixSmallSizes) {
  int n = GetParam();
  auto res = run_forked(n, [](RankEnv& env) {
    reduce_matrix(env, {0, 1, 130}, all_dtypes(), all_kinds(), {"", "ring", "recursive_doubling"},
                  "tcp");
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ReduceOpsTcp, ::testing::Values(2, 3, 5));

TEST(ReduceOpsLarge, MultiMiB) {
  // Several rounds through the slots (4 MiB) and the rings, single-copy pieces, odd sizes.
  for (int n : {2, 3}) {
    auto res = run_forked(n, [](RankEnv& env) {
      reduce_matrix(env, {(size_t{5} << 20) / 4 + 3}, {DataType::kFloat32}, {ReduceKind::kSum},
                    {"", "dda", "rsag", "cma", "ring"});
      reduce_matrix(env, {(size_t{3} << 20) + 1}, {DataType::kBFloat16, DataType::kInt8},
                    {ReduceKind::kAvg}, {""});
      reduce_matrix(env, {(size_t{2} << 20) + 1}, {DataType::kFloat32}, {ReduceKind::kSum},
                    {"", "ring"}, "tcp");
    });
    EXPECT_TRUE(res.all_ok()) << "world " << n << ": " << res.describe();
  }
}

}  // namespace

namespace {

// Tiny slots, rounds and rings: many rounds and ring wrap-arounds at small sizes, cheaply.
TEST(ReduceOpsSmallSlots, ManyRounds) {
  for (int n : {3, 5}) {
    auto res = run_forked(n, [](RankEnv& env) {
      setenv("COMMX_CPU_SLOT_BYTES", "65536", 1);
      setenv("COMMX_CPU_CHUNK_BYTES", "4096", 1);
      setenv("COMMX_CPU_RING_BYTES", "4096", 1);
      setenv("COMMX_CPU_DDA_MAX_BYTES", "8192", 1);
      reduce_matrix(env, {5000, 30001}, {DataType::kFloat32, DataType::kFloat16, DataType::kInt64},
                    {ReduceKind::kSum, ReduceKind::kAvg}, kAlgos);
    });
    EXPECT_TRUE(res.all_ok()) << "world " << n << ": " << res.describe();
  }
}

}  // namespace
