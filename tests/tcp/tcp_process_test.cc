// TCP transport tests with forked processes as ranks: a ring and all-to-all across processes (over
// a directory store and over the real c10d TCPStore), and peer death (killed before connecting,
// while idle, in the middle of a large transfer) reported as PeerFailure within a bound.
// Layer: tests.
#include <gtest/gtest.h>

#include "tcp_test_util.h"

namespace commx::test {
namespace {

std::shared_ptr<Store> dir_store(const TempDir& dir) {
  return std::make_shared<DirStore>(dir.path());
}

void wait_for_file(const std::string& path) {
  auto end = Clock::now() + std::chrono::seconds(30);
  while (!std::filesystem::exists(path) && Clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void touch(const std::string& path) { std::ofstream(path) << "1"; }

// Runs `fn`, which must throw `want` within `max_ms`; returns 0 if so, else prints why.
int expect_error(ErrorCode want, double max_ms, const std::function<void()>& fn,
                 const char* must_contain = nullptr) {
  auto t0 = Clock::now();
  try {
    fn();
    std::fprintf(stderr, "no error thrown\n");
    return 1;
  } catch (const Error& e) {
    double ms = ms_since(t0);
    std::fprintf(stderr, "(%.0f ms) %s\n", ms, e.what());
    if (e.code() != want) return 2;
    if (ms > max_ms) return 3;
    if (must_contain && std::string(e.what()).find(must_contain) == std::string::npos) return 4;
    return 0;
  }
}

class TcpProcesses : public ::testing::TestWithParam<int> {};

TEST_P(TcpProcesses, RingAndAllToAll) {
  const int n = GetParam();
  TempDir dir;
  auto st = run_processes(n, [&](int r) {
    auto t = make_tcp_transport(r, n, dir_store(dir), "procs", {});
    for (int step = 0; step < 3; ++step) {
      size_t bytes = step == 0 ? 0 : (step == 1 ? 5 : (1 << 20) + 3);
      auto out = make_payload(r, step, bytes);
      std::vector<uint8_t> in(bytes);
      SendReq s{(r + 1) % n, out.data(), bytes};
      RecvReq v{(r + n - 1) % n, in.data(), bytes};
      t->exchange({&s, 1}, {&v, 1}, in_ms(30000));
      if (first_mismatch(in, (r + n - 1) % n, step) != -1) return 1;
    }
    std::vector<std::vector<uint8_t>> out(n), in(n);
    std::vector<SendReq> sends;
    std::vector<RecvReq> recvs;
    for (int p = 0; p < n; ++p) {
      out[p] = make_payload(r, 50 + p, 20000 + p);
      in[p].resize(20000 + r);
      sends.push_back({p, out[p].data(), out[p].size()});
      recvs.push_back({p, in[p].data(), in[p].size()});
    }
    t->exchange(sends, recvs, in_ms(30000));
    for (int p = 0; p < n; ++p) {
      if (first_mismatch(in[p], p, 50 + r) != -1) return 2;
    }
    // Stay until every peer has received what we sent (a closed socket loses nothing, but a
    // rank exiting early would make a late connect fail).
    int token = 0;
    SendReq s{(r + 1) % n, &token, sizeof(token)};
    RecvReq v{(r + n - 1) % n, &token, sizeof(token)};
    t->exchange({&s, 1}, {&v, 1}, in_ms(30000));
    return 0;
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(st[r], 0) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Ranks, TcpProcesses, ::testing::Values(2, 4, 8));

TEST(TcpProcesses, OverTheC10dTcpStore) {
  // The rendezvous a real job uses: a c10d TCPStore, keys under a comm prefix.
  auto srv = start_tcp_store_server("127.0.0.1", 0);
  uint16_t port = srv->port();
  const int n = 4;
  auto st = run_processes(n, [&](int r) {
    TCPStoreOptions o;
    o.port = port;
    o.timeout = std::chrono::seconds(20);
    auto store = make_prefix_store("comm/world", make_tcp_store("127.0.0.1", o));
    auto t = make_tcp_transport(r, n, store, "world", {});
    std::vector<int> out(n, r), in(n, -1);
    std::vector<SendReq> sends;
    std::vector<RecvReq> recvs;
    for (int p = 0; p < n; ++p) {
      sends.push_back({p, &out[p], sizeof(int)});
      recvs.push_back({p, &in[p], sizeof(int)});
    }
    t->exchange(sends, recvs, in_ms(20000));
    for (int p = 0; p < n; ++p) {
      if (in[p] != p) return 1;
    }
    int token = 0;
    SendReq s{(r + 1) % n, &token, sizeof(token)};
    RecvReq v{(r + n - 1) % n, &token, sizeof(token)};
    t->exchange({&s, 1}, {&v, 1}, in_ms(20000));
    return 0;
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(st[r], 0) << "rank " << r;
  srv->stop();
}

TEST(TcpProcessFaults, PeerKilledWhileIdleIsPeerFailureQuickly) {
  TempDir dir;
  std::string ready = dir.path() + "/ready";
  auto st = run_processes(
      2,
      [&](int r) {
        auto t = make_tcp_transport(r, 2, dir_store(dir), "kill", {});
        int x = r;
        SendReq s{1 - r, &x, sizeof(x)};
        RecvReq v{1 - r, &x, sizeof(x)};
        t->exchange({&s, 1}, {&v, 1}, in_ms(20000));  // connected
        if (r == 1) {
          touch(ready);
          pause();  // killed by the parent
          return 9;
        }
        return expect_error(
            ErrorCode::kPeerFailure, 2000,
            [&] {
              t->exchange({}, {&v, 1}, in_ms(30000));
            },
            "rank 1");
      },
      60000, nullptr,
      [&](std::vector<pid_t>& pids) {
        wait_for_file(ready);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        kill(pids[1], SIGKILL);
      });
  EXPECT_EQ(st[0], 0);
  EXPECT_EQ(st[1], 128 + SIGKILL);
}

TEST(TcpProcessFaults, PeerKilledMidTransferIsPeerFailureQuickly) {
  TempDir dir;
  std::string ready = dir.path() + "/ready";
  const size_t bytes = 32u << 20;
  auto st = run_processes(
      2,
      [&](int r) {
        auto t = make_tcp_transport(r, 2, dir_store(dir), "killmid", {});
        std::vector<uint8_t> buf(bytes, 1);
        if (r == 1) {
          RecvReq v{0, buf.data(), bytes};
          t->exchange({}, {&v, 1}, in_ms(20000));
          touch(ready);
          for (;;) t->exchange({}, {&v, 1}, in_ms(60000));
        }
        // Rank 0 streams until the receiver dies under it.
        return expect_error(
            ErrorCode::kPeerFailure, 60000,
            [&] {
              for (;;) {
                SendReq s{1, buf.data(), bytes};
                t->exchange({&s, 1}, {}, in_ms(60000));
              }
            },
            "rank 1");
      },
      60000, nullptr,
      [&](std::vector<pid_t>& pids) {
        wait_for_file(ready);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        kill(pids[1], SIGKILL);
      });
  EXPECT_EQ(st[0], 0);
  EXPECT_EQ(st[1], 128 + SIGKILL);
}

TEST(TcpProcessFaults, PeerDeadBeforeConnectIsPeerFailureAfterGrace) {
  TempDir dir;
  std::string gone = dir.path() + "/gone";
  auto st = run_processes(2, [&](int r) {
    Hints h = {{"tcp_refused_grace_ms", "300"}};
    auto t = make_tcp_transport(r, 2, dir_store(dir), "dead", h);
    if (r == 1) {
      t.reset();  // closes the listener: the address in the store now refuses connections
      touch(gone);
      return 0;
    }
    wait_for_file(gone);
    int x = 0;
    SendReq s{1, &x, sizeof(x)};
    return expect_error(
        ErrorCode::kPeerFailure, 3000,
        [&] {
          t->exchange({&s, 1}, {}, in_ms(30000));
        },
        "refuses connections");
  });
  EXPECT_EQ(st[0], 0);
  EXPECT_EQ(st[1], 0);
}

}  // namespace
}  // namespace commx::test
