// The cpu backend's own data-movement paths: broadcast, all_gather(_single/_v),
// all_to_all(_single/_v_single), gather(_single), scatter, barrier, send/recv and batch p2p on
// forked ranks through the generic (transport) algorithms over the shm rings, many slot rounds,
// the single-copy paths and their thresholds, against data every rank regenerates independently.
// The default paths of every backend are the conformance suite's (tests/conformance).
#include <gtest/gtest.h>

#include "cpu/cases.h"
#include "cpu/harness.h"

using namespace commx;
using namespace commx::testing;

namespace {

const std::vector<std::string> kAlgos = {"", "generic"};
// The paths the conformance suite does not choose (it runs the default one).
const std::vector<std::string> kForcedAlgos = {"generic"};

// Rank r's data for piece `tag` of case `seed` (count elements).
Buf data(uint64_t seed, int r, int tag, size_t count, DataType t) {
  return gen(seed * 131 + tag, r, count, t, ReduceKind::kMax);
}

void data_matrix(RankEnv& env, const std::vector<size_t>& counts,
                 const std::vector<DataType>& dtypes, const std::vector<std::string>& algos,
                 const std::string& transport = "") {
  const int n = env.size, me = env.rank;
  CommOptions co;
  if (!transport.empty()) co.hints["transport"] = transport;
  auto comm = env.comm("data", co);
  uint64_t seed = 100;
  for (DataType t : dtypes) {
    const size_t es = dtype_size(t);
    for (size_t count : counts) {
      for (const std::string& a : algos) {
        ++seed;
        const bool async = seed % 3 == 0;
        const int root = static_cast<int>(seed % n);
        const size_t bytes = count * es;
        auto L = [&](const char* op) { return label(op, t, ReduceKind::kSum, count, a, root); };
        // broadcast
        Buf b = me == root ? data(seed, root, 0, count, t) : Buf(bytes + 1);
        comm->broadcast(tensor(b, count, t), root, async, algo(a)).wait();
        env.check(same(b, data(seed, root, 0, count, t), bytes), L("broadcast"));
        // all_gather (list) and all_gather_single
        Buf mine = data(seed, me, 1, count, t);
        std::vector<Buf> outs(n, Buf(bytes + 1));
        std::vector<Tensor> ot;
        for (auto& o : outs) ot.push_back(tensor(o, count, t));
        comm->all_gather(ot, tensor(mine, count, t), async, algo(a)).wait();
        for (int r = 0; r < n; ++r)
          env.check(same(outs[r], data(seed, r, 1, count, t), bytes), L("all_gather"));
        Buf single(bytes * n + 1);
        comm->all_gather_single(tensor(single, count * n, t), tensor(mine, count, t), false,
                                algo(a));
        for (int r = 0; r < n; ++r)
          env.check(
              std::memcmp(single.data() + r * bytes, data(seed, r, 1, count, t).data(), bytes) == 0,
              L("all_gather_single"));
        // all_gather_v: rank r contributes cv(r) elements
        auto cv = [&](int r) { return (count * (r + 2) + r) % (count + 5); };
        Buf vin = data(seed, me, 2, cv(me), t);
        std::vector<Buf> vouts;
        std::vector<Tensor> vt;
        for (int r = 0; r < n; ++r) vouts.emplace_back(cv(r) * es + 1);
        for (int r = 0; r < n; ++r) vt.push_back(tensor(vouts[r], cv(r), t));
        comm->all_gather_v(vt, tensor(vin, cv(me), t), false, algo(a));
        for (int r = 0; r < n; ++r)
          env.check(same(vouts[r], data(seed, r, 2, cv(r), t), cv(r) * es), L("all_gather_v"));
        // all_to_all (list): block from p to q has tag 10+q and count (count + p + q) % (count+2)
        auto ca = [&](int p, int q) { return (count + p + 2 * q) % (count + 2); };
        std::vector<Buf> ain(n), aout(n);
        std::vector<Tensor> ait, aot;
        for (int q = 0; q < n; ++q) {
          ain[q] = data(seed, me, 10 + q, ca(me, q), t);
          ait.push_back(tensor(ain[q], ca(me, q), t));
        }
        // all_to_all requires inputs[r].count == outputs[r].count on each rank: use ca(me,q) both
        // ways only when symmetric; otherwise use all_to_all_v_single below.
        for (int p = 0; p < n; ++p) {
          aout[p] = Buf(ca(me, p) * es + 1);
          aot.push_back(tensor(aout[p], ca(me, p), t));
        }
        bool symmetric = true;
        for (int p = 0; p < n; ++p) symmetric &= ca(me, p) == ca(p, me);
        if (symmetric) {
          comm->all_to_all(aot, ait, async, algo(a)).wait();
          for (int p = 0; p < n; ++p)
            env.check(same(aout[p], data(seed, p, 10 + me, ca(p, me), t), ca(p, me) * es),
                      L("all_to_all"));
        }
        // all_to_all_single: count elements per pair
        Buf sin(bytes * n + 1), sout(bytes * n + 1);
        for (int q = 0; q < n; ++q) {
          Buf d = data(seed, me, 30 + q, count, t);
          std::memcpy(sin.data() + q * bytes, d.data(), bytes);
        }
        comm->all_to_all_single(tensor(sout, count * n, t), tensor(sin, count * n, t), false,
                                algo(a));
        for (int p = 0; p < n; ++p)
          env.check(std::memcmp(sout.data() + p * bytes, data(seed, p, 30 + me, count, t).data(),
                                bytes) == 0,
                    L("all_to_all_single"));
        // all_to_all_single in place on odd ranks only: the single-copy path is refused for all
        // and the ranks that skipped filling their slots fill them again; the transport-generic
        // all-to-all sends from a staged copy when its input overlaps its output.
        Buf io(bytes * n + 1), iout(bytes * n + 1);
        for (int q = 0; q < n; ++q) {
          Buf d = data(seed, me, 40 + q, count, t);
          std::memcpy(io.data() + q * bytes, d.data(), bytes);
        }
        Buf& ires = me % 2 ? io : iout;
        comm->all_to_all_single(tensor(ires, count * n, t), tensor(io, count * n, t), false,
                                algo(a));
        for (int p = 0; p < n; ++p)
          env.check(std::memcmp(ires.data() + p * bytes, data(seed, p, 40 + me, count, t).data(),
                                bytes) == 0,
                    L("all_to_all_single in place"));
        // all_to_all_v_single: p sends ca(p,q) elements to q
        std::vector<int64_t> isp(n), osp(n);
        size_t itot = 0, otot = 0;
        for (int q = 0; q < n; ++q) {
          isp[q] = static_cast<int64_t>(ca(me, q));
          osp[q] = static_cast<int64_t>(ca(q, me));
          itot += ca(me, q);
          otot += ca(q, me);
        }
        Buf vi(itot * es + 1), vo(otot * es + 1);
        for (int q = 0, off = 0; q < n; off += static_cast<int>(ca(me, q)), ++q) {
          Buf d = data(seed, me, 10 + q, ca(me, q), t);
          std::memcpy(vi.data() + off * es, d.data(), ca(me, q) * es);
        }
        comm->all_to_all_v_single(tensor(vo, otot, t), tensor(vi, itot, t), osp, isp, async,
                                  algo(a))
            .wait();
        for (int p = 0, off = 0; p < n; off += static_cast<int>(ca(p, me)), ++p)
          env.check(std::memcmp(vo.data() + off * es, data(seed, p, 10 + me, ca(p, me), t).data(),
                                ca(p, me) * es) == 0,
                    L("all_to_all_v_single"));
        // gather (list) and gather_single to root
        std::vector<Buf> gouts;
        std::vector<Tensor> gt;
        if (me == root)
          for (int r = 0; r < n; ++r) gouts.emplace_back(bytes + 1);
        for (auto& g : gouts) gt.push_back(tensor(g, count, t));
        comm->gather(gt, tensor(mine, count, t), root, async, algo(a)).wait();
        if (me == root)
          for (int r = 0; r < n; ++r)
            env.check(same(gouts[r], data(seed, r, 1, count, t), bytes), L("gather"));
        Buf gs(me == root ? bytes * n + 1 : 1);
        comm->gather_single(me == root ? tensor(gs, count * n, t) : Tensor(),
                            tensor(mine, count, t), root, false, algo(a));
        if (me == root)
          for (int r = 0; r < n; ++r)
            env.check(
                std::memcmp(gs.data() + r * bytes, data(seed, r, 1, count, t).data(), bytes) == 0,
                L("gather_single"));
        // scatter from root
        std::vector<Buf> sins;
        std::vector<Tensor> st;
        if (me == root)
          for (int r = 0; r < n; ++r) sins.push_back(data(seed, r, 40, count, t));
        for (auto& s : sins) st.push_back(tensor(s, count, t));
        Buf so(bytes + 1);
        comm->scatter(tensor(so, count, t), st, root, async, algo(a)).wait();
        env.check(same(so, data(seed, me, 40, count, t), bytes), L("scatter"));
        comm->barrier(async, algo(a)).wait();
      }
    }
    // p2p: a ring of send/recv (even ranks send first), then a batch exchange with every peer.
    for (size_t count : counts) {
      ++seed;
      const size_t bytes = count * es;
      if (n > 1) {
        int next = (me + 1) % n, prev = (me + n - 1) % n;
        Buf s = data(seed, me, 50, count, t), r(bytes + 1);
        if (me % 2 == 0) {
          comm->send(tensor(s, count, t), next);
          comm->recv(tensor(r, count, t), prev);
        } else {
          comm->recv(tensor(r, count, t), prev);
          comm->send(tensor(s, count, t), next);
        }
        env.check(same(r, data(seed, prev, 50, count, t), bytes),
                  "send/recv ring count " + std::to_string(count));
      }
      auto batch = comm->batch_op_create();
      std::vector<Buf> bs(n), br(n);
      for (int p = 0; p < n; ++p) {
        if (p == me) continue;
        bs[p] = data(seed, me, 60 + p, count + p, t);
        br[p] = Buf((count + me) * es + 1);
        batch.send(tensor(bs[p], count + p, t), p).recv(tensor(br[p], count + me, t), p);
      }
      batch.issue(seed % 2 == 0).wait();
      for (int p = 0; p < n; ++p)
        if (p != me)
          env.check(same(br[p], data(seed, p, 60 + me, count + me, t), (count + me) * es),
                    "batch p2p from " + std::to_string(p));
    }
  }
  comm->finalize();
}

class DataOps : public ::testing::TestWithParam<int> {};

TEST_P(DataOps, SmallSizes) {
  int n = GetParam();
  auto res = run_forked(n, [](RankEnv& env) {
    data_matrix(env, {0, 1, 7, 129},
                {DataType::kFloat32, DataType::kUInt8, DataType::kBFloat16, DataType::kInt64,
                 DataType::kBool},
                kForcedAlgos);
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, DataOps, ::testing::Values(1, 2, 3, 4, 5, 6, 7, 8));

TEST(DataOpsLarge, MultiMiB) {
  auto res = run_forked(3, [](RankEnv& env) {
    data_matrix(env, {(size_t{2} << 20) + 5}, {DataType::kUInt8}, kAlgos);
    data_matrix(env, {(size_t{1} << 20) + 5}, {DataType::kUInt8}, {""}, "tcp");
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

}  // namespace

namespace {

// Tiny slots and rings: many rounds and ring wrap-arounds at small sizes, cheaply.
TEST(DataOpsSmallSlots, ManyRounds) {
  for (int n : {3, 5}) {
    auto res = run_forked(n, [](RankEnv& env) {
      setenv("COMMX_CPU_SLOT_BYTES", "65536", 1);
      setenv("COMMX_CPU_RING_BYTES", "4096", 1);
      data_matrix(env, {20000, 30001}, {DataType::kUInt8, DataType::kFloat64}, kAlgos);
    });
    EXPECT_TRUE(res.all_ok()) << "world " << n << ": " << res.describe();
  }
}

// The single-copy (process_vm_readv/writev) paths: forced for every non-empty size, odd sizes,
// 2..8 ranks, broadcast with and without the root writing a share of each peer's buffer (40001
// floats: whole pages to write at every world size); then the default thresholds from both sides
// (32 KiB per rank piece; broadcast 16 KiB at 2 ranks, 32 KiB above) and the paths off.
class DataOpsSingleCopy : public ::testing::TestWithParam<int> {};

TEST_P(DataOpsSingleCopy, Forced) {
  int n = GetParam();
  for (const char* writes : {"0", "-1"}) {
    auto res = run_forked(n, [writes](RankEnv& env) {
      setenv("COMMX_CPU_CMA_MIN_BYTES", "1", 1);
      setenv("COMMX_CPU_BROADCAST_CMA_MIN_BYTES", "1", 1);
      setenv("COMMX_CPU_BROADCAST_ROOT_WRITES_MIN_BYTES", writes, 1);
      data_matrix(env, {0, 1, 7, 4099, 40001}, {DataType::kFloat32, DataType::kUInt8}, {""});
    });
    EXPECT_TRUE(res.all_ok()) << "root writes from " << writes << ": " << res.describe();
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, DataOpsSingleCopy, ::testing::Values(2, 3, 4, 5, 8));

TEST(DataOpsSingleCopy, AroundThreshold) {
  for (int n : {2, 3})
    for (const char* cma : {"1", "0"}) {
      auto res = run_forked(n, [cma](RankEnv& env) {
        setenv("COMMX_CPU_CMA", cma, 1);
        data_matrix(env, {16383, 16384, 32767, 32768, 98305}, {DataType::kUInt8}, {""});
      });
      EXPECT_TRUE(res.all_ok()) << n << " ranks, COMMX_CPU_CMA=" << cma << ": " << res.describe();
    }
  // Ranks configured differently still agree (on the largest threshold, or on no single copy).
  for (const char* var :
       {"COMMX_CPU_CMA_MIN_BYTES", "COMMX_CPU_CMA", "COMMX_CPU_BROADCAST_CMA_MIN_BYTES",
        "COMMX_CPU_BROADCAST_ROOT_WRITES_MIN_BYTES"}) {
    auto res = run_forked(3, [var](RankEnv& env) {
      std::string v = var;
      if (env.rank == 1)
        setenv(var, v == "COMMX_CPU_CMA" ? "0" : v.find("WRITES") != v.npos ? "-1" : "1", 1);
      else if (v.find("WRITES") != v.npos)
        setenv(var, "0", 1);  // root writes wanted by all ranks but rank 1
      data_matrix(env, {20000}, {DataType::kUInt8}, {""});
    });
    EXPECT_TRUE(res.all_ok()) << var << " on rank 1 only: " << res.describe();
  }
}

}  // namespace
