// One-sided windows of the cpu backend (commx/window.h) on forked ranks, over shared memory and
// over TCP: every rank puts into every rank's buffer and signals it, at world sizes 1..8, twice
// over; direct loads through remote() (shared memory); an async wait that completes only after
// the signal; clear errors for bad puts, a signal that never comes (Timeout), a dead source
// (PeerFailure), abort, finalize and ranks that disagree on the size. Layer: tests.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "commx/window.h"
#include "cpu/harness.h"

using namespace commx;
using namespace commx::testing;
using namespace std::chrono_literals;

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

const char* const kTransports[] = {"shm", "tcp"};

std::shared_ptr<Comm> comm_over(RankEnv& env, const std::string& name, const char* transport) {
  CommOptions o;
  o.hints["transport"] = transport;
  return env.comm(name + "_" + transport, o);
}

// Element i of the block rank `src` puts into rank `dst` in round `round`.
int64_t value(int src, int dst, int round, int64_t i) { return src * 1000003 + dst * 1009 + round * 7 + i; }

TEST(Window, EveryRankPutsIntoEveryRankAndSignals) {
  for (const char* tr : kTransports)
  for (int world : {1, 2, 3, 5, 8}) {
    auto res = run_forked(world, [tr](RankEnv& env) {
      auto comm = comm_over(env, "win", tr);
      const bool shm = std::string(tr) == "shm";
      const int W = env.size, me = env.rank;
      const int64_t n = 37;  // odd: blocks do not line up with anything
      for (DataType t : {DataType::kInt64, DataType::kFloat32}) {
        auto win = comm->new_window(W * n, t);
        env.check(win->count() == W * n && win->local().count == W * n, "window size");
        const size_t es = dtype_size(t);
        for (int round = 0; round < 2; ++round) {
          for (int dst = 0; dst < W; ++dst) {
            std::vector<char> block(n * es);
            for (int64_t i = 0; i < n; ++i) {
              int64_t v = value(me, dst, round, i);
              if (t == DataType::kInt64) std::memcpy(&block[i * es], &v, es);
              else { float f = static_cast<float>(v % 100000); std::memcpy(&block[i * es], &f, es); }
            }
            win->put(Tensor(block.data(), n, t, Device::cpu()), dst, me * n);
            win->signal(dst);
          }
          for (int src = 0; src < W; ++src) win->wait_signal(src);
          const char* mine = static_cast<const char*>(win->local().data);
          for (int src = 0; src < W; ++src)
            for (int64_t i = 0; i < n; ++i) {
              int64_t want = value(src, me, round, i), got = 0;
              if (t == DataType::kInt64) std::memcpy(&got, mine + (src * n + i) * es, es);
              else { float f; std::memcpy(&f, mine + (src * n + i) * es, es); got = static_cast<int64_t>(f); want %= 100000; }
              if (!env.check(got == want, "round " + std::to_string(round) + ": element " +
                                              std::to_string(i) + " from rank " + std::to_string(src)))
                return;
            }
          // remote(): this rank's block in every buffer, loaded directly (over TCP only this
          // rank's buffer is in this process).
          for (int dst = 0; dst < W; ++dst) {
            if (!shm && dst != me) {
              env.check(win->remote(dst).data == nullptr, "over TCP a peer's buffer is not mapped");
              continue;
            }
            const char* theirs = static_cast<const char*>(win->remote(dst).data);
            int64_t got = 0, want = value(me, dst, round, n - 1);
            if (t == DataType::kInt64) std::memcpy(&got, theirs + (me * n + n - 1) * es, es);
            else { float f; std::memcpy(&f, theirs + (me * n + n - 1) * es, es); got = static_cast<int64_t>(f); want %= 100000; }
            env.check(got == want, "remote(" + std::to_string(dst) + ") shows this rank's put");
          }
          comm->barrier();  // nobody starts the next round's puts while a peer still reads
        }
      }
    });
    EXPECT_TRUE(res.all_ok()) << tr << " world " << world << ": " << res.describe();
  }
}

TEST(Window, AsyncWaitCompletesOnlyAfterTheSignal) {
  for (const char* tr : kTransports) {
  auto res = run_forked(2, [tr](RankEnv& env) {
    auto comm = comm_over(env, "async", tr);
    auto win = comm->new_window(4, DataType::kFloat32);
    if (env.rank == 1) {
      env.store->get("looked");  // rank 0 saw its wait pending
      float v[4] = {1, 2, 3, 4};
      win->put(Tensor(v, 4, DataType::kFloat32, Device::cpu()), 0, 0, true).wait();
      win->signal(0, true).wait();
      comm->barrier();
      return;
    }
    Work w = win->wait_signal(1, true);
    env.check(!w.is_completed() && w.status() == WorkStatus::kInProgress, "pending before the signal");
    env.store->set_str("looked", "1");
    w.wait();
    env.check(w.is_completed() && w.status() == WorkStatus::kCompleted, "completed after the signal");
    const float* got = static_cast<const float*>(win->local().data);
    env.check(got[0] == 1 && got[3] == 4, "the put is visible after the signal");
    comm->barrier();
  });
  EXPECT_TRUE(res.all_ok()) << tr << ": " << res.describe();
  }
}

TEST(Window, BadCallsAreClearErrors) {
  for (const char* tr : kTransports) {
  auto res = run_forked(2, [tr](RankEnv& env) {
    auto comm = comm_over(env, "bad", tr);
    auto win = comm->new_window(10, DataType::kFloat32);
    std::vector<float> v(4, 1.0f);
    std::vector<double> d(4, 1.0);
    const Tensor t(v.data(), 4, DataType::kFloat32, Device::cpu());
    std::string m = expect_error(env, ErrorCode::kInvalidArgument, [&] { win->put(t, 1, 7); }, "put past the end");
    env.check(has(m, "window put") && has(m, "rank 1's window of 10") && has(m, "comm 'bad_"), m);
    m = expect_error(env, ErrorCode::kInvalidArgument, [&] { win->put(t, 2, 0); }, "dst out of range");
    env.check(has(m, "dst 2 is out of range"), m);
    m = expect_error(env, ErrorCode::kInvalidArgument,
                     [&] { win->put(Tensor(d.data(), 4, DataType::kFloat64, Device::cpu()), 1, 0); }, "dtype");
    env.check(has(m, "float64") || has(m, "double"), m);
    expect_error(env, ErrorCode::kInvalidArgument, [&] { win->put(t, 1, -1); }, "negative offset");
    expect_error(env, ErrorCode::kInvalidArgument, [&] { win->wait_signal(-1); }, "src out of range");
    // Nobody signals: a Timeout naming the source, within the given bound.
    auto t0 = std::chrono::steady_clock::now();
    m = expect_error(env, ErrorCode::kTimeout, [&] { win->wait_signal(1 - env.rank, false, 300ms); }, "no signal");
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    env.check(ms >= 290 && ms < 2000, "timeout after " + std::to_string(ms) + " ms");
    env.check(has(m, "rank(s) " + std::to_string(1 - env.rank)) && has(m, "window wait_signal"), m);
    // The timed-out wait gave its turn back: one signal satisfies the retry.
    comm->barrier();  // both ranks timed out before either signals
    win->signal(1 - env.rank);
    win->wait_signal(1 - env.rank, false, 10s);
    // A put from this rank's own buffer into itself (overlapping ranges).
    float* mine = static_cast<float*>(win->local().data);
    for (int i = 0; i < 10; ++i) mine[i] = static_cast<float>(i);
    win->put(Tensor(mine, 6, DataType::kFloat32, Device::cpu()), env.rank, 2);
    env.check(mine[2] == 0 && mine[7] == 5, "overlapping put is a memmove");
    // Ranks that disagree on the size (shared memory: the segments differ).
    if (std::string(tr) == "shm") {
      m = expect_error(env, ErrorCode::kInvalidArgument,
                       [&] { comm->new_window(env.rank == 0 ? 8 : 9, DataType::kFloat32); }, "sizes differ");
      env.check(has(m, "same count"), m);
    }
    comm->barrier();
  });
  EXPECT_TRUE(res.all_ok()) << tr << ": " << res.describe();
  }
}

TEST(Window, FinalizeEndsAPendingWait) {
  for (const char* tr : kTransports) {
  auto res = run_forked(2, [tr](RankEnv& env) {
    auto comm = comm_over(env, "fin", tr);
    auto win = comm->new_window(8, DataType::kFloat32);
    comm->barrier();
    if (env.rank == 1) {
      Work w = win->wait_signal(0, true);
      std::thread finisher([&] {
        std::this_thread::sleep_for(100ms);
        comm->finalize();
      });
      std::string m = expect_error(env, ErrorCode::kAborted, [&] { w.wait(); }, "finalized wait");
      finisher.join();
      env.check(has(m, "finalized") && has(m, "rank 0"), m);
      expect_error(env, ErrorCode::kInvalidArgument, [&] { win->signal(0); }, "signal after finalize");
    }
    env.store->set_str("fin_done_" + std::to_string(env.rank), "1");
    env.store->get("fin_done_" + std::to_string(1 - env.rank));
  });
  EXPECT_TRUE(res.all_ok()) << tr << ": " << res.describe();
  }
}

TEST(Window, DeadSourceAndAbortEndTheWait) {
  for (const char* tr : kTransports) {
  auto res = run_forked(3, [tr](RankEnv& env) {
    auto comm = comm_over(env, "dead", tr);
    auto win = comm->new_window(8, DataType::kFloat32);
    if (env.rank == 2) raise(SIGKILL);
    if (env.rank == 0) {
      // Polling alone sees the dead source (no wait() call).
      Work polled = win->wait_signal(2, true);
      auto p0 = std::chrono::steady_clock::now();
      while (!polled.is_completed() && std::chrono::steady_clock::now() - p0 < 5s)
        std::this_thread::sleep_for(1ms);
      env.check(polled.status() == WorkStatus::kError && polled.error() != nullptr,
                "polling ends in an error once the source died");
      auto t0 = std::chrono::steady_clock::now();
      std::string m = expect_error(env, ErrorCode::kPeerFailure, [&] { win->wait_signal(2); }, "dead source");
      env.check(has(m, "rank 2") && has(m, "window wait_signal"), m);
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      env.check(ms < 3000, "peer failure after " + std::to_string(ms) + " ms");
      env.store->get("rank1_done");  // stay alive: rank 1 waits on this rank until its abort
      return;
    }
    // Rank 1: a wait on rank 0 (alive, never signals) ends when the comm is aborted.
    Work w = win->wait_signal(0, true);
    std::thread aborter([&] {
      std::this_thread::sleep_for(200ms);
      comm->abort();
    });
    std::string m = expect_error(env, ErrorCode::kAborted, [&] { w.wait(); }, "aborted wait");
    aborter.join();
    env.check(has(m, "rank 0") && has(m, "aborted"), m);
    expect_error(env, ErrorCode::kAborted, [&] { win->signal(0); }, "signal after abort");
    env.store->set_str("rank1_done", "1");
  });
  ASSERT_EQ(res.status.size(), 3u);
  for (int r : {0, 1})
    EXPECT_TRUE(res.status[r] >= 0 && WIFEXITED(res.status[r]) && WEXITSTATUS(res.status[r]) == 0)
        << tr << ": " << res.describe();
  }
}

}  // namespace
