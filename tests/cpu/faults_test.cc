// Failure paths of the cpu backend on forked ranks: a rank that never calls (Timeout naming it,
// within the op timeout), a rank killed mid-collective (PeerFailure naming it, quickly), abort(),
// and mismatched calls (InvalidArgument naming both sides).
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "cpu/cases.h"
#include "cpu/harness.h"

using namespace commx;
using namespace commx::testing;
using namespace std::chrono_literals;

namespace {

double since_ms(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(Faults, TimeoutNamesTheMissingRank) {
  auto res = run_forked(3, [](RankEnv& env) {
    auto comm = env.comm("timeout");
    std::vector<float> v(100, 1.0f);
    comm->all_reduce(make_tensor(v.data(), 100), ReduceOp::SUM);  // everyone once
    if (env.rank == 2) {
      auto comm2 = env.comm("timeout2");
      std::this_thread::sleep_for(1500ms);  // alive but never calls
      return;
    }
    OpOptions o;
    o.timeout = 300ms;
    auto t0 = std::chrono::steady_clock::now();
    std::string msg = expect_error(
        env, ErrorCode::kTimeout,
        [&] { comm->all_reduce(make_tensor(v.data(), 100), ReduceOp::SUM, false, o); },
        "all_reduce with a missing rank");
    double ms = since_ms(t0);
    env.check(ms >= 290 && ms < 1200,
              "timeout came after " + std::to_string(ms) + " ms, want ~300");
    env.check(has(msg, "rank(s) 2") && has(msg, "all_reduce") && has(msg, "comm 'timeout'") &&
                  has(msg, "#2"),
              "message names comm, op, seq and the missing rank: " + msg);
    // The comm is unusable afterwards, with a clear error.
    expect_error(
        env, ErrorCode::kInvalidArgument, [&] { comm->barrier(); }, "op after a failed op");
    // Async form: the Work carries the timeout.
    auto comm2 = env.comm("timeout2");
    t0 = std::chrono::steady_clock::now();
    Work w = comm2->all_reduce(make_tensor(v.data(), 100), ReduceOp::SUM, true, o);
    expect_error(
        env, ErrorCode::kTimeout, [&] { w.wait(); }, "async all_reduce with a missing rank");
    env.check(w.status() == WorkStatus::kTimedOut, "work status is TimedOut");
    env.check(since_ms(t0) < 1200, "async timeout after " + std::to_string(since_ms(t0)) + " ms");
    // Stay alive until the other waiting rank has timed out too: a rank that exits first would be
    // reported to it as a dead peer (PeerFailure), which is right but not what this test checks.
    std::this_thread::sleep_for(400ms);
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

TEST(Faults, KilledRankIsReportedQuickly) {
  // 0: small; 1: large (several rounds through the slots); 2: small over TCP; 3: large
  // all_gather and 4: large all_reduce (hint cma), both on the single-copy process_vm_readv paths;
  // 5: large broadcast (single copy, the root writing into the peers with process_vm_writev).
  for (int mode : {0, 1, 2, 3, 4, 5}) {
    bool large = mode == 1 || mode == 3 || mode == 4 || mode == 5;
    auto res = run_forked(4, [large, mode](RankEnv& env) {
      CommOptions co;
      if (mode == 2) co.hints["transport"] = "tcp";
      auto comm = env.comm("kill", co);
      size_t count =
          large ? (size_t{12} << 20) / 4 : 64;  // large: several rounds through the slots
      std::vector<float> v(count, 1.0f), all(mode == 3 ? count * 4 : 0);
      OpOptions o;
      o.timeout = 60s;
      if (mode == 4) o.hints["algorithm"] = "cma";
      auto op = [&](bool async) {
        Tensor t = make_tensor(v.data(), static_cast<int64_t>(count));
        if (mode == 3)
          return comm->all_gather_single(make_tensor(all.data(), static_cast<int64_t>(count * 4)),
                                         t, async, o);
        if (mode == 5) return comm->broadcast(t, 0, async, o);
        return comm->all_reduce(t, ReduceOp::SUM, async, o);
      };
      comm->all_reduce(make_tensor(v.data(), 16), ReduceOp::SUM);
      if (env.rank == 3) {
        if (large) {
          Work w = op(true);
          std::this_thread::sleep_for(2ms);  // die while the op is in flight
        }
        raise(SIGKILL);
      }
      auto t0 = std::chrono::steady_clock::now();
      // In the large modes rank 3 may have done its part of the op it started before it died
      // (under load the op can finish within its 2 ms): then the survivors' copy of that op
      // succeeds, rightly, and the next one must fail.
      std::string msg;
      for (int attempt = 0; attempt < (large ? 2 : 1) && msg.empty(); ++attempt) {
        try {
          op(false);
        } catch (const Error& e) {
          msg = e.what();
          env.check(e.code() == ErrorCode::kPeerFailure, "a collective with a dead rank: " + msg);
        }
      }
      env.check(!msg.empty(), "a collective with a dead rank: no error");
      double ms = since_ms(t0);
      env.check(ms < 3000, "peer failure took " + std::to_string(ms) + " ms");
      // Over TCP rank 0 never talks to rank 3 (recursive doubling: ranks 1 and 2 exchange with
      // 3, rank 0 only with 1 and 2): it hears of it from the peer that gave up, named.
      env.check(has(msg, "rank 3"), "message names the dead rank: " + msg);
      // Stay until the others have seen the failure too: a rank that exits now would be a second
      // dead peer for a rank still waiting on it.
      if (large) std::this_thread::sleep_for(300ms);
    });
    ASSERT_EQ(res.status.size(), 4u);
    for (int r = 0; r < 3; ++r)
      EXPECT_TRUE(res.status[r] >= 0 && WIFEXITED(res.status[r]) && WEXITSTATUS(res.status[r]) == 0)
          << "mode=" << mode << " " << res.describe();
    EXPECT_TRUE(res.status[3] >= 0 && WIFSIGNALED(res.status[3])) << res.describe();
  }
}

// A rank dies; the others see PeerFailure naming it, shrink the comm without it, and go on: the
// new comm has the survivors in rank order and its collectives are right. Bad exclude lists are
// clear errors. Over shared memory and TCP.
TEST(Faults, ShrinkDropsADeadRankAndTheRestGoOn) {
  for (const char* transport : {"shm", "tcp"}) {
    auto res = run_forked(4, [transport](RankEnv& env) {
      CommOptions co;
      co.hints["transport"] = transport;
      auto comm = env.comm("doomed", co);
      std::vector<float> v(33, 1.0f);
      comm->all_reduce(make_tensor(v.data(), 33), ReduceOp::SUM);
      if (env.rank == 2) raise(SIGKILL);
      // Over TCP a rank that never talks to rank 2 hears of it from a peer that gave up: every
      // survivor's error names rank 2, so they can agree on what to exclude.
      std::string msg = expect_error(
          env, ErrorCode::kPeerFailure,
          [&] { comm->all_reduce(make_tensor(v.data(), 33), ReduceOp::SUM); }, "all_reduce with a dead rank");
      env.check(has(msg, "rank 2"), "the error names the dead rank: " + msg);
      expect_error(
          env, ErrorCode::kInvalidArgument, [&] { comm->shrink({env.rank}, "self"); }, "shrink excluding itself");
      expect_error(env, ErrorCode::kInvalidArgument, [&] { comm->shrink({4}, "far"); }, "shrink out of range");
      expect_error(env, ErrorCode::kInvalidArgument, [&] { comm->shrink({2, 2}, "twice"); }, "shrink twice");
      auto small = comm->shrink({2}, "survivors");
      const int expect_rank = env.rank < 2 ? env.rank : env.rank - 1;
      env.check(small && small->size() == 3 && small->rank() == expect_rank,
                "shrunk comm: size " + std::to_string(small ? small->size() : -1) + ", rank " +
                    std::to_string(small ? small->rank() : -1));
      // Rank-dependent odd-sized data: element i of old rank r is r * 1000 + i.
      const int64_t n = 1001;
      std::vector<float> x(n), want(n, 0.0f);
      for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(env.rank * 1000 + i);
      for (int r : {0, 1, 3})
        for (int64_t i = 0; i < n; ++i) want[i] += static_cast<float>(r * 1000 + i);
      small->all_reduce(make_tensor(x.data(), n), ReduceOp::SUM);
      env.check(x == want, "all_reduce on the shrunk comm");
      std::vector<float> mine(5, static_cast<float>(env.rank)), all(15, -1.0f);
      small->all_gather_single(make_tensor(all.data(), 15), make_tensor(mine.data(), 5));
      for (int q = 0; q < 3; ++q)
        env.check(all[q * 5] == static_cast<float>(q < 2 ? q : 3), "all_gather slot " + std::to_string(q));
      small->barrier();
    }, 60);
    ASSERT_EQ(res.status.size(), 4u);
    for (int r : {0, 1, 3})
      EXPECT_TRUE(res.status[r] >= 0 && WIFEXITED(res.status[r]) && WEXITSTATUS(res.status[r]) == 0)
          << transport << " " << res.describe();
    EXPECT_TRUE(res.status[2] >= 0 && WIFSIGNALED(res.status[2])) << res.describe();
  }
}

TEST(Faults, AbortEndsPendingWork) {
  auto res = run_forked(2, [](RankEnv& env) {
    auto comm = env.comm("abort");
    std::vector<float> v(10, 1.0f);
    if (env.rank == 1) {
      std::this_thread::sleep_for(1000ms);
      return;
    }
    Work w = comm->all_reduce(make_tensor(v.data(), 10), ReduceOp::SUM, true);
    Work queued = comm->barrier(true);
    std::this_thread::sleep_for(50ms);
    auto t0 = std::chrono::steady_clock::now();
    comm->abort();
    env.check(since_ms(t0) < 50, "abort() is non-blocking");
    expect_error(
        env, ErrorCode::kAborted, [&] { w.wait(); }, "in-flight op after abort");
    expect_error(
        env, ErrorCode::kAborted, [&] { queued.wait(); }, "queued op after abort");
    env.check(since_ms(t0) < 500, "aborted work ended in " + std::to_string(since_ms(t0)) + " ms");
    env.check(comm->is_aborted(), "is_aborted");
    expect_error(
        env, ErrorCode::kAborted, [&] { comm->barrier(); }, "op after abort");
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

TEST(Faults, MismatchedCallsAreClearErrors) {
  auto res = run_forked(2, [](RankEnv& env) {
    std::vector<float> v(20, 1.0f);
    {
      auto comm = env.comm("mismatch");
      int64_t count = env.rank == 0 ? 10 : 12;
      std::string msg = expect_error(
          env, ErrorCode::kInvalidArgument,
          [&] { comm->all_reduce(make_tensor(v.data(), count), ReduceOp::SUM); },
          "all_reduce with different counts");
      env.check(
          has(msg, "rank " + std::to_string(1 - env.rank)) && has(msg, "10") && has(msg, "12"),
          "message names the other rank and both counts: " + msg);
    }
    {
      auto comm = env.comm("p2p-mismatch");
      if (env.rank == 0) {
        comm->send(make_tensor(v.data(), 10), 1);
      } else {
        std::string msg = expect_error(
            env, ErrorCode::kInvalidArgument, [&] { comm->recv(make_tensor(v.data(), 12), 0); },
            "recv size mismatch");
        env.check(has(msg, "40 bytes") && has(msg, "48 bytes"), "message has both sizes: " + msg);
      }
    }
    {
      auto comm = env.comm("a2av-mismatch");
      std::vector<int64_t> in_splits = {1, 1}, out_splits = {1, env.rank == 0 ? 2 : 1};
      std::string msg = expect_error(
          env, ErrorCode::kInvalidArgument,
          [&] {
            comm->all_to_all_v_single(make_tensor(v.data() + 10, 3), make_tensor(v.data(), 2),
                                      out_splits, in_splits);
          },
          "all_to_all_v_single with inconsistent splits");
      env.check(has(msg, "rank 1 sends 4 bytes to rank 0, which expects 8"),
                "a2av message: " + msg);
    }
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// A failed async op leaves a flight-recorder dump, as a failed sync op does: the Work marks its
// entry failed and writes the comm's record when the failure is seen.
TEST(Faults, FailedAsyncOpDumpsTheFlightRecord) {
  char tmpl[] = "/tmp/commx-trace-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  setenv("COMMX_TRACE_DIR", dir.c_str(), 1);
  auto res = run_forked(2, [&](RankEnv& env) {
    auto comm = env.comm("async_dump");
    std::vector<float> v(100, 1.0f);
    comm->all_reduce(make_tensor(v.data(), 100), ReduceOp::SUM);  // both once
    if (env.rank == 1) {
      std::this_thread::sleep_for(1500ms);  // alive but never calls again
      return;
    }
    OpOptions o;
    o.timeout = 300ms;
    Work w = comm->all_reduce(make_tensor(v.data(), 100), ReduceOp::SUM, true, o);
    expect_error(env, ErrorCode::kTimeout, [&] { w.wait(); }, "async all_reduce, rank 1 away");
    std::ifstream f(dir + "/async_dump.rank0.json");
    std::stringstream text;
    text << f.rdbuf();
    const std::string dump = text.str();
    env.check(!dump.empty(), "no dump in " + dir);
    env.check(has(dump, "\"seq\":2,\"op\":\"all_reduce\"") && has(dump, "\"state\":\"failed\"") &&
                  has(dump, "rank(s) 1"),
              "the dump names the failed op and why: " + dump);
  });
  unsetenv("COMMX_TRACE_DIR");
  if (std::system(("rm -rf " + dir).c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir.c_str());
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

TEST(Faults, UnsupportedReduction) {
  auto res = run_forked(1, [](RankEnv& env) {
    auto comm = env.comm("unsupported");
    std::vector<float> v(4);
    expect_error(
        env, ErrorCode::kUnsupported,
        [&] { comm->all_reduce(make_tensor(v.data(), 4), ReduceOp::BXOR); }, "BXOR on f32");
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

}  // namespace
