// TCP transport tests with threads as ranks over loopback: FIFO matching, rings and all-to-all at
// 2..8 ranks, large, small-and-many and zero-byte messages, the listen address (hints, env,
// MASTER_ADDR, IPv6), and the error paths (size mismatch, timeout, abort, wrong peer, late or
// missing peer address, bad hints, no descriptor leak). Layer: tests.
#include <gtest/gtest.h>

#include <atomic>
#include <optional>

#include "tcp_test_util.h"

namespace commx::test {
namespace {

using Transports = std::vector<std::unique_ptr<Transport>>;

Transports make_world(int n, const std::string& name = "t", Hints hints = {}) {
  auto store = make_hash_store();
  Transports ts;
  for (int r = 0; r < n; ++r) ts.push_back(make_tcp_transport(r, n, store, name, hints));
  return ts;
}

ErrorCode code_of(const std::function<void()>& fn, std::string* msg = nullptr) {
  try {
    fn();
  } catch (const Error& e) {
    if (msg) *msg = e.what();
    return e.code();
  }
  ADD_FAILURE() << "no error thrown";
  return ErrorCode::kInternal;
}

TEST(TcpTransport, FifoMatchingWithinAndAcrossExchanges) {
  Transports ts = make_world(2);
  const std::vector<size_t> sizes = {1, 0, 100, 70000, 3, 1 << 20, 17};
  run_threads(2, [&](int r) {
    if (r == 0) {
      std::vector<std::vector<uint8_t>> bufs;
      for (size_t i = 0; i < sizes.size(); ++i) bufs.push_back(make_payload(0, i, sizes[i]));
      // The first three in separate exchanges, the rest in one.
      for (size_t i = 0; i < 3; ++i) {
        SendReq s{1, bufs[i].data(), bufs[i].size()};
        ts[0]->exchange({&s, 1}, {}, in_ms(20000));
      }
      std::vector<SendReq> rest;
      for (size_t i = 3; i < sizes.size(); ++i) rest.push_back({1, bufs[i].data(), bufs[i].size()});
      ts[0]->exchange(rest, {}, in_ms(20000));
    } else {
      std::vector<std::vector<uint8_t>> bufs;
      std::vector<RecvReq> recvs;
      for (size_t i = 0; i < sizes.size(); ++i) bufs.emplace_back(sizes[i], 0xee);
      for (size_t i = 0; i < sizes.size(); ++i) recvs.push_back({0, bufs[i].data(), sizes[i]});
      // First four in one exchange, the rest one by one: matching follows issue order only.
      ts[1]->exchange({}, std::span(recvs).subspan(0, 4), in_ms(20000));
      for (size_t i = 4; i < sizes.size(); ++i) ts[1]->exchange({}, {&recvs[i], 1}, in_ms(20000));
      for (size_t i = 0; i < sizes.size(); ++i) {
        EXPECT_EQ(first_mismatch(bufs[i], 0, i), -1) << "message " << i;
      }
    }
  });
}

TEST(TcpTransport, ManySmallMessagesBatchedAndStaged) {
  // Thousands of odd-sized messages: sends batch many frames per sendmsg(), receives parse many
  // frames per staging read, across exchanges of different shapes on the two sides.
  Transports ts = make_world(2, "many");
  const int kMsgs = 3000;
  auto size_of = [](int i) { return static_cast<size_t>((i * 37) % 301); };
  run_threads(2, [&](int r) {
    std::vector<std::vector<uint8_t>> bufs(kMsgs);
    if (r == 0) {
      std::vector<SendReq> sends;
      for (int i = 0; i < kMsgs; ++i) {
        bufs[i] = make_payload(0, i, size_of(i));
        sends.push_back({1, bufs[i].data(), bufs[i].size()});
      }
      ts[0]->exchange(sends, {}, in_ms(30000));
    } else {
      std::vector<RecvReq> recvs;
      for (int i = 0; i < kMsgs; ++i) {
        bufs[i].resize(size_of(i));
        recvs.push_back({0, bufs[i].data(), bufs[i].size()});
      }
      std::span<const RecvReq> all(recvs);
      for (size_t at = 0; at < all.size();) {
        size_t n = std::min<size_t>(all.size() - at, 1 + at % 97);
        ts[1]->exchange({}, all.subspan(at, n), in_ms(30000));
        at += n;
      }
      for (int i = 0; i < kMsgs; ++i) ASSERT_EQ(first_mismatch(bufs[i], 0, i), -1) << i;
    }
  });
}

class TcpRing : public ::testing::TestWithParam<int> {};

TEST_P(TcpRing, RingStepsAndAllToAll) {
  const int n = GetParam();
  Transports ts = make_world(n, "ring" + std::to_string(n));
  const std::vector<size_t> sizes = {0, 1, 4096, 100003};
  run_threads(n, [&](int r) {
    for (size_t step = 0; step < sizes.size(); ++step) {
      auto out = make_payload(r, step, sizes[step]);
      std::vector<uint8_t> in(sizes[step]);
      SendReq s{(r + 1) % n, out.data(), out.size()};
      RecvReq v{(r + n - 1) % n, in.data(), in.size()};
      ts[r]->exchange({&s, 1}, {&v, 1}, in_ms(30000));
      ASSERT_EQ(first_mismatch(in, (r + n - 1) % n, step), -1) << "rank " << r << " step " << step;
    }
    // Every rank sends to every rank (itself included) at once: simultaneous connects.
    std::vector<std::vector<uint8_t>> out(n), in(n);
    std::vector<SendReq> sends;
    std::vector<RecvReq> recvs;
    for (int p = 0; p < n; ++p) {
      out[p] = make_payload(r, 100 + p, 1000 + 37 * p);
      in[p].resize(1000 + 37 * r);
      sends.push_back({p, out[p].data(), out[p].size()});
      recvs.push_back({p, in[p].data(), in[p].size()});
    }
    ts[r]->exchange(sends, recvs, in_ms(30000));
    for (int p = 0; p < n; ++p) {
      ASSERT_EQ(first_mismatch(in[p], p, 100 + r), -1) << "rank " << r << " from " << p;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, TcpRing, ::testing::Values(2, 3, 4, 5, 8));

TEST(TcpTransport, ConcurrentConnectsRepeatedly) {
  // Fresh worlds whose first exchange is all-to-all: exercises the tie-break of crossing connects.
  for (int round = 0; round < 15; ++round) {
    const int n = 4;
    Transports ts = make_world(n, "cross" + std::to_string(round));
    run_threads(n, [&](int r) {
      std::vector<int> out(n, r), in(n, -1);
      std::vector<SendReq> sends;
      std::vector<RecvReq> recvs;
      for (int p = 0; p < n; ++p) {
        if (p == r) continue;
        sends.push_back({p, &out[p], sizeof(int)});
        recvs.push_back({p, &in[p], sizeof(int)});
      }
      ts[r]->exchange(sends, recvs, in_ms(20000));
      for (int p = 0; p < n; ++p) {
        if (p != r) {
          ASSERT_EQ(in[p], p);
        }
      }
    });
  }
}

TEST(TcpTransport, LargeMessagesBothWays) {
  const size_t bytes = 64u << 20;
  Transports ts = make_world(2);
  run_threads(2, [&](int r) {
    auto out = make_payload(r, 7, bytes);
    std::vector<uint8_t> in(bytes);
    SendReq s{1 - r, out.data(), bytes};
    RecvReq v{1 - r, in.data(), bytes};
    ts[r]->exchange({&s, 1}, {&v, 1}, in_ms(60000));
    EXPECT_EQ(first_mismatch(in, 1 - r, 7), -1);
  });
}

TEST(TcpTransport, ZeroByteMessagesWithNullBuffers) {
  Transports ts = make_world(3);
  run_threads(3, [&](int r) {
    std::vector<SendReq> sends;
    std::vector<RecvReq> recvs;
    int one = r;
    int got[3] = {-1, -1, -1};
    for (int p = 0; p < 3; ++p) {
      if (p == r) continue;
      sends.push_back({p, nullptr, 0});
      sends.push_back({p, &one, sizeof(one)});
      sends.push_back({p, nullptr, 0});
      recvs.push_back({p, nullptr, 0});
      recvs.push_back({p, &got[p], sizeof(int)});
      recvs.push_back({p, nullptr, 0});
    }
    ts[r]->exchange(sends, recvs, in_ms(20000));
    for (int p = 0; p < 3; ++p) {
      if (p != r) {
        EXPECT_EQ(got[p], p);
      }
    }
  });
}

TEST(TcpTransport, MessagesToSelf) {
  Transports ts = make_world(1);
  int a = 5, b = 0;
  SendReq s{0, &a, sizeof(a)};
  RecvReq v{0, &b, sizeof(b)};
  ts[0]->exchange({&s, 1}, {&v, 1}, in_ms(1000));
  EXPECT_EQ(b, 5);
  EXPECT_EQ(code_of([&] {
              ts[0]->exchange({&s, 1}, {}, in_ms(1000));
            }),
            ErrorCode::kInvalidArgument);
}

TEST(TcpTransport, SizeMismatchNamesBothSizesAndPeer) {
  Transports ts = make_world(2, "mm");
  std::string msg;
  run_threads(2, [&](int r) {
    std::vector<uint8_t> buf(100);
    if (r == 0) {
      SendReq s{1, buf.data(), 100};
      ts[0]->exchange({&s, 1}, {}, in_ms(10000));
    } else {
      RecvReq v{0, buf.data(), 64};
      EXPECT_EQ(code_of(
                    [&] {
                      ts[1]->exchange({}, {&v, 1}, in_ms(10000));
                    },
                    &msg),
                ErrorCode::kInvalidArgument);
      // The link is unusable afterwards, and says why.
      std::string again;
      code_of([&] { ts[1]->exchange({}, {&v, 1}, in_ms(10000)); }, &again);
      EXPECT_NE(again.find("earlier error"), std::string::npos) << again;
    }
  });
  EXPECT_NE(msg.find("64 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("100 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("comm 'mm' rank 1/2"), std::string::npos) << msg;
}

TEST(TcpTransport, TimeoutNamesPendingPeerWithinBound) {
  Transports ts = make_world(3, "to");
  std::string msg;
  // Ranks 0 and 2 never enter an exchange: the connects reach their listeners' backlog only.
  int x = 0;
  RecvReq v[2] = {{0, &x, sizeof(x)}, {2, &x, sizeof(x)}};
  auto t0 = Clock::now();
  EXPECT_EQ(code_of([&] { ts[1]->exchange({}, v, in_ms(300)); }, &msg), ErrorCode::kTimeout);
  double ms = ms_since(t0);
  EXPECT_GE(ms, 290);
  EXPECT_LT(ms, 3000);  // generous: CI machines are oversubscribed
  EXPECT_NE(msg.find("rank 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 2"), std::string::npos) << msg;
}

TEST(TcpTransport, AbortFromAnotherThreadEndsWaitQuickly) {
  Transports ts = make_world(2, "ab");
  int x = 0;
  RecvReq v{0, &x, sizeof(x)};
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ts[1]->abort();
  });
  auto t0 = Clock::now();
  EXPECT_EQ(code_of([&] { ts[1]->exchange({}, {&v, 1}, in_ms(30000)); }), ErrorCode::kAborted);
  EXPECT_LT(ms_since(t0), 2000);
  killer.join();
  // Later exchanges fail at once.
  EXPECT_EQ(code_of([&] { ts[1]->exchange({}, {&v, 1}, in_ms(30000)); }), ErrorCode::kAborted);
}

TEST(TcpTransport, AbortDuringConnectedTransfer) {
  Transports ts = make_world(2, "ab2");
  std::vector<uint8_t> big(64u << 20);
  std::atomic<bool> started{false};
  std::thread killer([&] {
    while (!started.load()) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ts[0]->abort();
    ts[1]->abort();
  });
  run_threads(2, [&](int r) {
    started = true;
    ErrorCode c = code_of([&] {
      if (r == 0) {
        // Too large to finish in 50 ms on these machines.
        for (int i = 0; i < 100; ++i) {
          SendReq s{1, big.data(), big.size()};
          ts[0]->exchange({&s, 1}, {}, in_ms(60000));
        }
      } else {
        std::vector<uint8_t> in(big.size());
        for (int i = 0; i < 100; ++i) {
          RecvReq v{0, in.data(), in.size()};
          ts[1]->exchange({}, {&v, 1}, in_ms(60000));
        }
      }
    });
    // The other side may see the connection die before its own abort lands.
    EXPECT_TRUE(c == ErrorCode::kAborted || c == ErrorCode::kPeerFailure) << error_code_name(c);
  });
  killer.join();
}

TEST(TcpTransport, PeerThatPublishesLateIsFound) {
  auto store = make_hash_store();
  auto t0 = make_tcp_transport(0, 2, store, "late", {});
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    auto t1 = make_tcp_transport(1, 2, store, "late", {});
    int x = 0;
    RecvReq v{0, &x, sizeof(x)};
    t1->exchange({}, {&v, 1}, in_ms(10000));
    EXPECT_EQ(x, 77);
  });
  int y = 77;
  SendReq s{1, &y, sizeof(y)};
  t0->exchange({&s, 1}, {}, in_ms(10000));
  late.join();
}

TEST(TcpTransport, UnpublishedPeerTimesOutOrAborts) {
  auto store = make_hash_store();
  auto t = make_tcp_transport(0, 2, store, "nobody", {});
  int x = 0;
  SendReq s{1, &x, sizeof(x)};
  std::string msg;
  EXPECT_EQ(code_of([&] { t->exchange({&s, 1}, {}, in_ms(200)); }, &msg), ErrorCode::kTimeout);
  EXPECT_NE(msg.find("not in the store"), std::string::npos) << msg;
  auto t2 = make_tcp_transport(0, 2, make_hash_store(), "nobody", {});
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    t2->abort();
  });
  auto start = Clock::now();
  EXPECT_EQ(code_of([&] { t2->exchange({&s, 1}, {}, in_ms(30000)); }), ErrorCode::kAborted);
  EXPECT_LT(ms_since(start), 2000);
  aborter.join();
}

TEST(TcpTransport, WrongCommIsRejected) {
  // Comm "b" has ranks c (0, never in an exchange) and b (1); comm "a"'s store points its rank 1
  // at b's listener, as a stale key would.
  auto store_a = make_hash_store();
  auto store_b = make_hash_store();
  auto c = make_tcp_transport(0, 2, store_b, "comm-b", {});
  auto b = make_tcp_transport(1, 2, store_b, "comm-b", {});
  auto a = make_tcp_transport(0, 2, store_a, "comm-a", {});
  store_a->set("tcp/addr/1", store_b->get("tcp/addr/1"));
  int x = 1;
  std::string msg;
  std::thread other([&] {
    // b answers hellos while it waits for c, until aborted.
    RecvReq v{0, &x, sizeof(x)};
    EXPECT_EQ(code_of([&] { b->exchange({}, {&v, 1}, in_ms(20000)); }), ErrorCode::kAborted);
  });
  SendReq s{1, &x, sizeof(x)};
  auto t0 = Clock::now();
  EXPECT_EQ(code_of(
                [&] {
                  a->exchange({&s, 1}, {}, in_ms(20000));
                },
                &msg),
            ErrorCode::kPeerFailure);
  EXPECT_LT(ms_since(t0), 5000);
  b->abort();
  other.join();
  EXPECT_NE(msg.find("another comm"), std::string::npos) << msg;
}

size_t open_fds() {
  size_t n = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

TEST(TcpTransport, BadArgumentsAndHints) {
  auto store = make_hash_store();
  size_t fds = open_fds();
  // A failed construction (here: publishing to a store that cannot write) leaks no descriptor.
  auto broken_store = std::make_shared<DirStore>("/nonexistent/commx");
  for (int i = 0; i < 20; ++i) {
    EXPECT_THROW(make_tcp_transport(0, 2, broken_store, "h", {}), std::exception);
  }
  EXPECT_EQ(open_fds(), fds);
  EXPECT_EQ(code_of([&] {
              make_tcp_transport(0, 2, store, "h", {{"socket_ifaddr", "no.such"}});
            }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] {
              make_tcp_transport(0, 2, store, "h", {{"socket_ifname", "nope0"}});
            }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { make_tcp_transport(0, 0, store, "h", {}); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { make_tcp_transport(2, 2, store, "h", {}); }),
            ErrorCode::kInvalidArgument);
  auto t = make_tcp_transport(0, 2, store, "h", {{"socket_ifname", "lo"}});
  EXPECT_EQ(store->get_str("tcp/addr/0").rfind("127.0.0.1:", 0), 0u);
  int x = 0;
  SendReq s{5, &x, sizeof(x)};
  EXPECT_EQ(code_of([&] { t->exchange({&s, 1}, {}, in_ms(100)); }), ErrorCode::kInvalidArgument);
  SendReq null_send{1, nullptr, 4};
  EXPECT_EQ(code_of([&] {
              t->exchange({&null_send, 1}, {}, in_ms(100));
            }),
            ErrorCode::kInvalidArgument);
}

TEST(TcpTransport, TwoTransportsInOneCommWithTags) {
  auto store = make_hash_store();
  Transports a, b;
  for (int r = 0; r < 2; ++r) {
    a.push_back(make_tcp_transport(r, 2, store, "tags", {{"tcp_tag", "a"}}));
    b.push_back(make_tcp_transport(r, 2, store, "tags", {{"tcp_tag", "b"}}));
  }
  run_threads(2, [&](int r) {
    int out = r + 10, in = -1;
    SendReq s{1 - r, &out, sizeof(out)};
    RecvReq v{1 - r, &in, sizeof(in)};
    a[r]->exchange({&s, 1}, {&v, 1}, in_ms(10000));
    EXPECT_EQ(in, 11 - r);
    in = -1;
    b[r]->exchange({&s, 1}, {&v, 1}, in_ms(10000));
    EXPECT_EQ(in, 11 - r);
  });
}

}  // namespace
}  // namespace commx::test

namespace commx::test {
namespace {

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

void ping_both_ways(std::vector<std::unique_ptr<Transport>>& ts) {
  run_threads(2, [&](int r) {
    int out = 40 + r, in = -1;
    SendReq s{1 - r, &out, sizeof(out)};
    RecvReq v{1 - r, &in, sizeof(in)};
    ts[r]->exchange({&s, 1}, {&v, 1}, in_ms(10000));
    EXPECT_EQ(in, 41 - r);
  });
}

TEST(TcpAddress, EnvChoosesTheListenAddressAndHintsWin) {
  auto store = make_hash_store();
  std::vector<std::unique_ptr<Transport>> ts;
  {
    ScopedEnv env("COMMX_SOCKET_IFADDR", "127.0.0.2");
    ts.push_back(make_tcp_transport(0, 2, store, "env", {}));
    ts.push_back(make_tcp_transport(1, 2, store, "env", {{"socket_ifaddr", "127.0.0.3"}}));
  }
  EXPECT_EQ(store->get_str("tcp/addr/0").rfind("127.0.0.2:", 0), 0u);
  EXPECT_EQ(store->get_str("tcp/addr/1").rfind("127.0.0.3:", 0), 0u);
  ping_both_ways(ts);
}

TEST(TcpAddress, RouteToMasterAddr) {
  ScopedEnv env("MASTER_ADDR", "127.0.0.1");
  auto store = make_hash_store();
  auto t = make_tcp_transport(0, 1, store, "master", {});
  EXPECT_EQ(store->get_str("tcp/addr/0").rfind("127.0.0.1:", 0), 0u);
}

TEST(TcpAddress, Ipv6Loopback) {
  auto store = make_hash_store();
  std::vector<std::unique_ptr<Transport>> ts;
  try {
    for (int r = 0; r < 2; ++r) {
      ts.push_back(make_tcp_transport(r, 2, store, "v6", {{"socket_ifaddr", "::1"}}));
    }
  } catch (const Error& e) {
    GTEST_SKIP() << "no IPv6 loopback: " << e.what();
  }
  EXPECT_EQ(store->get_str("tcp/addr/0").rfind("[::1]:", 0), 0u);
  ping_both_ways(ts);
}

}  // namespace
}  // namespace commx::test
