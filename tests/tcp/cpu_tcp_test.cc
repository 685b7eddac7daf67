// What is specific to the cpu backend over the TCP transport (hint {"transport": "tcp"}); every
// collective at its default algorithm is the conformance suite's (its cpu_tcp worlds). Here, on
// forked ranks: each algorithm of the generic path by hint at world sizes 1..8, messages far
// larger than the socket buffers, and the faults: a rank killed mid-collective, abort from
// another thread. Layer: tests.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "backends/cpu/cpu_backend.h"
#include "cpu/harness.h"
#include "cpu/reduction_checks.h"

using namespace commx;
using namespace commx::testing;

namespace {

std::shared_ptr<Comm> tcp_comm(RankEnv& env, const std::string& name,
                               Timeout timeout = std::chrono::seconds(60)) {
  CommOptions o;
  o.hints["transport"] = "tcp";
  o.timeout = timeout;
  auto comm = env.comm(name, o);
  auto& be = static_cast<CpuBackend&>(comm->unsafe_get_backend());
  env.check(be.transport_name() == "tcp", "transport is " + be.transport_name() + ", not tcp");
  return comm;
}

// Data of rank r for case `seed`, as int32 elements.
Buf data(uint64_t seed, int r, size_t count) {
  return gen(seed, r, count, DataType::kInt32, ReduceKind::kSum);
}
Tensor i32(Buf& b, size_t count) { return tensor(b, count, DataType::kInt32); }

void data_movement(RankEnv& env, Comm& comm, const std::vector<size_t>& counts) {
  const int n = env.size, me = env.rank;
  uint64_t seed = 5000;
  for (size_t count : counts) {
    const size_t bytes = count * 4;
    auto tag = [&](const char* op) { return std::string(op) + " count " + std::to_string(count); };
    // broadcast from a rotating root
    {
      int root = static_cast<int>(++seed % n);
      Buf b = me == root ? data(seed, root, count) : Buf(bytes + 1, 0);
      comm.broadcast(i32(b, count), root, false);
      env.check(same(b, data(seed, root, count), bytes), tag("broadcast"));
    }
    // all_gather (list), all_gather_single, all_gather_v
    {
      ++seed;
      Buf in = data(seed, me, count);
      std::vector<Buf> outs(n, Buf(bytes + 1));
      std::vector<Tensor> ot;
      for (auto& o : outs) ot.push_back(i32(o, count));
      comm.all_gather(ot, i32(in, count), true).wait();
      Buf single(bytes * n + 1);
      comm.all_gather_single(i32(single, count * n), i32(in, count), false);
      for (int r = 0; r < n; ++r) {
        Buf w = data(seed, r, count);
        env.check(same(outs[r], w, bytes), tag("all_gather") + " from " + std::to_string(r));
        env.check(std::memcmp(single.data() + r * bytes, w.data(), bytes) == 0,
                  tag("all_gather_single") + " block " + std::to_string(r));
      }
      auto vc = [&](int r) { return (count * (r + 2) + r) % (count + 5); };
      Buf vin = data(seed + 1, me, vc(me));
      std::vector<Buf> vouts(n);
      std::vector<Tensor> vot;
      for (int r = 0; r < n; ++r) {
        vouts[r].resize(vc(r) * 4 + 1);
        vot.push_back(i32(vouts[r], vc(r)));
      }
      comm.all_gather_v(vot, i32(vin, vc(me)), false);
      for (int r = 0; r < n; ++r) {
        env.check(same(vouts[r], data(seed + 1, r, vc(r)), vc(r) * 4),
                  tag("all_gather_v") + " from " + std::to_string(r));
      }
    }
    // all_to_all (lists), all_to_all_single, all_to_all_v_single
    {
      ++seed;
      std::vector<Buf> ins(n), outs(n, Buf(bytes + 1));
      std::vector<Tensor> it, ot;
      for (int p = 0; p < n; ++p) {
        ins[p] = data(seed * 100 + p, me, count);
        it.push_back(i32(ins[p], count));
        ot.push_back(i32(outs[p], count));
      }
      comm.all_to_all(ot, it, false);
      Buf sin(bytes * n + 1), sout(bytes * n + 1);
      for (int p = 0; p < n; ++p) std::memcpy(sin.data() + p * bytes, ins[p].data(), bytes);
      comm.all_to_all_single(i32(sout, count * n), i32(sin, count * n), true).wait();
      for (int p = 0; p < n; ++p) {
        Buf w = data(seed * 100 + me, p, count);
        env.check(same(outs[p], w, bytes), tag("all_to_all") + " from " + std::to_string(p));
        env.check(std::memcmp(sout.data() + p * bytes, w.data(), bytes) == 0,
                  tag("all_to_all_single") + " from " + std::to_string(p));
      }
      // Rank s sends split(s, d) elements to rank d.
      auto split = [&](int s, int d) {
        return static_cast<int64_t>((count * (s + 1) + d) % (count + 4));
      };
      std::vector<int64_t> isp(n), osp(n);
      int64_t itot = 0, otot = 0;
      for (int p = 0; p < n; ++p) {
        isp[p] = split(me, p);
        osp[p] = split(p, me);
        itot += isp[p];
        otot += osp[p];
      }
      Buf vin = data(seed + 3, me, itot), vout(otot * 4 + 1);
      comm.all_to_all_v_single(i32(vout, otot), i32(vin, itot), osp, isp, false);
      int64_t off = 0;
      for (int p = 0; p < n; ++p) {
        Buf src = data(seed + 3, p, [&] {
          int64_t t = 0;
          for (int d = 0; d < n; ++d) t += split(p, d);
          return static_cast<size_t>(t);
        }());
        int64_t soff = 0;
        for (int d = 0; d < me; ++d) soff += split(p, d);
        env.check(std::memcmp(vout.data() + off * 4, src.data() + soff * 4, osp[p] * 4) == 0,
                  tag("all_to_all_v_single") + " from " + std::to_string(p));
        off += osp[p];
      }
    }
    // gather and scatter at a rotating root
    {
      int root = static_cast<int>(++seed % n);
      Buf in = data(seed, me, count);
      std::vector<Buf> outs;
      std::vector<Tensor> ot;
      if (me == root) {
        outs.assign(n, Buf(bytes + 1));
        for (auto& o : outs) ot.push_back(i32(o, count));
      }
      comm.gather(ot, i32(in, count), root, false);
      for (int r = 0; me == root && r < n; ++r) {
        env.check(same(outs[r], data(seed, r, count), bytes),
                  tag("gather") + " from " + std::to_string(r));
      }
      std::vector<Buf> sins;
      std::vector<Tensor> st;
      if (me == root) {
        for (int r = 0; r < n; ++r) sins.push_back(data(seed + 9, r, count));
        for (auto& s : sins) st.push_back(i32(s, count));
      }
      Buf sout(bytes + 1);
      comm.scatter(i32(sout, count), st, root, false);
      env.check(same(sout, data(seed + 9, me, count), bytes), tag("scatter"));
    }
    // send/recv around the ring, and a batch of both directions
    if (n > 1) {
      ++seed;
      Buf out = data(seed, me, count), in(bytes + 1);
      int next = (me + 1) % n, prev = (me + n - 1) % n;
      if (me % 2 == 0) {
        comm.send(i32(out, count), next);
        comm.recv(i32(in, count), prev);
      } else {
        comm.recv(i32(in, count), prev);
        comm.send(i32(out, count), next);
      }
      env.check(same(in, data(seed, prev, count), bytes), tag("send/recv"));
      Buf in2(bytes + 1), out2 = data(seed + 1, me, count);
      comm.batch_op_create()
          .send(i32(out, count), next)
          .recv(i32(in, count), prev)
          .send(i32(out2, count), prev)
          .recv(i32(in2, count), next)
          .issue();
      env.check(same(in, data(seed, prev, count), bytes), tag("batch_p2p") + " from prev");
      env.check(same(in2, data(seed + 1, next, count), bytes), tag("batch_p2p") + " from next");
    }
    comm.barrier();
  }
}

class CpuOverTcp : public ::testing::TestWithParam<int> {};

// The reductions on each hinted algorithm of the generic path (the default choice and the data
// collectives are the conformance suite's).
TEST_P(CpuOverTcp, EveryGenericAlgorithm) {
  auto res = run_forked(GetParam(), [](RankEnv& env) {
    auto comm = tcp_comm(env, "tcpcoll");
    check_reductions(env, *comm,
                     {.counts = {0, 1, 7, 130},
                      .dtypes = {DataType::kFloat32, DataType::kFloat64, DataType::kBFloat16,
                                 DataType::kInt32, DataType::kUInt8},
                      .kinds = {ReduceKind::kSum, ReduceKind::kMax, ReduceKind::kAvg,
                                ReduceKind::kBxor, ReduceKind::kPremulSum},
                      .algos = {"ring", "recursive_doubling", "generic"},
                      .seed = 1000,
                      .scatter_whole_count = true});
    comm->finalize();
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, CpuOverTcp, ::testing::Values(1, 2, 3, 4, 5, 8));

TEST(CpuOverTcpLarge, MultiMiB) {
  // Messages far larger than the socket buffers and the staging buffer, odd sizes.
  auto res = run_forked(3, [](RankEnv& env) {
    auto comm = tcp_comm(env, "tcplarge");
    check_reductions(env, *comm,
                     {.counts = {(size_t{2} << 20) / 4 + 3},
                      .dtypes = {DataType::kFloat32},
                      .kinds = {ReduceKind::kSum},
                      .algos = {"", "ring", "recursive_doubling"},
                      .seed = 1000,
                      .scatter_whole_count = true});
    data_movement(env, *comm, {(size_t{1} << 18) + 7});
    comm->finalize();
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

TEST(CpuOverTcpFaults, KilledRankEndsCollectivesWithinTimeout) {
  auto res = run_forked(3, [](RankEnv& env) {
    auto comm = tcp_comm(env, "tcpkill", std::chrono::seconds(5));
    std::vector<float> v(100000, 1.0f);
    Tensor t(v.data(), v.size(), DataType::kFloat32);
    for (int i = 0; i < 5; ++i) comm->all_reduce(t, ReduceOp::SUM);
    if (env.rank == 2) raise(SIGKILL);
    auto t0 = std::chrono::steady_clock::now();
    std::string msg;
    try {
      for (int i = 0; i < 1000; ++i) comm->all_reduce(t, ReduceOp::SUM);
    } catch (const Error& e) {
      msg = e.what();
      env.check(e.code() == ErrorCode::kPeerFailure || e.code() == ErrorCode::kTimeout, msg);
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    env.check(!msg.empty(), "no error after rank 2 died");
    env.check(s < 6.5, "error took " + std::to_string(s) + " s: " + msg);
    std::fprintf(stderr, "[rank %d] %.2f s: %s\n", env.rank, s, msg.c_str());
  });
  ASSERT_EQ(res.status.size(), 3u);
  EXPECT_TRUE(WIFEXITED(res.status[0]) && WEXITSTATUS(res.status[0]) == 0) << res.describe();
  EXPECT_TRUE(WIFEXITED(res.status[1]) && WEXITSTATUS(res.status[1]) == 0) << res.describe();
  EXPECT_TRUE(WIFSIGNALED(res.status[2])) << res.describe();
}

TEST(CpuOverTcpFaults, AbortFromAnotherThreadEndsWait) {
  auto res = run_forked(2, [](RankEnv& env) {
    auto comm = tcp_comm(env, "tcpabort", std::chrono::seconds(30));
    int x = 1;
    Tensor t(&x, 1, DataType::kInt32);
    comm->all_reduce(t, ReduceOp::SUM);  // connected
    if (env.rank == 1) {
      // Rank 1 stays out of the next collective until rank 0 is done checking.
      env.store->wait({"abort_checked"}, std::chrono::seconds(30));
      return;
    }
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      comm->abort();
    });
    auto t0 = std::chrono::steady_clock::now();
    expect_error(
        env, ErrorCode::kAborted, [&] { comm->all_reduce(t, ReduceOp::SUM); },
        "all_reduce during abort");
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    env.check(s < 3.0, "abort took " + std::to_string(s) + " s");
    aborter.join();
    env.store->set_str("abort_checked", "1");
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

}  // namespace
