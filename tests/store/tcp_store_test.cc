// The TCP store at the protocol level: byte-exact request frames (a fake server captures them),
// the server's replies to raw frames (deferred WAIT, CANCEL_WAIT, queues, LIST_KEYS), the server
// surviving malformed and oversized frames, connect retries and timeouts, wait-for-workers.
// Layer: tests (store).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "commx/error.h"
#include "store/raw_socket.h"
#include "store/store_env.h"

namespace commx::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;



// ---- Byte-exact frames against a fake server ----

TEST(TcpStoreWire, ClientSendsExactC10dFrames) {
  uint16_t port;
  int lfd = listen_loopback(port);
  std::thread fake([&] {
    int fd = ::accept(lfd, nullptr, nullptr);
    RawConn c(fd, true);
    // VALIDATE + PING (nonce = pid) in one write; the fake echoes the nonce.
    uint32_t pid = static_cast<uint32_t>(getpid());
    Raw hello = c.recv(10);
    EXPECT_EQ(hello, Frame().u8(0x00).u8(0xce).u8(0xf7).u8(0x85).u8(0x3c).u8(0x0d).u32(pid).b);
    c.send(Frame().u32(pid).b);
    // SET k1=v1: the doc's example frame, byte for byte.
    Raw set = c.recv(22);
    EXPECT_EQ(set, (Raw{0x01, 3, 0, 0, 0, 0, 0, 0, 0, 0x2f, 0x6b,
                        0x31, 2, 0, 0, 0, 0, 0, 0, 0, 0x76, 0x31}));
    // ADD /c 7 -> reply 9.
    EXPECT_EQ(c.recv(19), Frame().u8(4).str("/c").u64(7).b);
    c.send(Frame().u64(9).b);
    // get = WAIT [/g], then GET /g.
    EXPECT_EQ(c.recv(19), Frame().u8(6).u64(1).str("/g").b);
    c.send({0x00});
    EXPECT_EQ(c.recv(11), Frame().u8(3).str("/g").b);
    c.send(Frame().str("abc").b);
    // compare_set /x "e" -> "d".
    EXPECT_EQ(c.recv(29), Frame().u8(2).str("/x").str("e").str("d").b);
    c.send(Frame().str("d").b);
    // multi_set.
    EXPECT_EQ(c.recv(28), Frame().u8(11).u64(1).str("/a").str("b").b);
    // wait with a timeout: WAIT, silence, CANCEL_WAIT (0x0c) -> 1, then CHECK to name the key.
    EXPECT_EQ(c.recv(19), Frame().u8(6).u64(1).str("/w").b);
    EXPECT_EQ(c.recv(1, 5000), Raw{0x0c});
    c.send({0x01});
    EXPECT_EQ(c.recv(19), Frame().u8(5).u64(1).str("/w").b);
    c.send({0x01});
    // STOP_WAITING racing the cancel: reply 0 then 1, and the wait succeeds.
    EXPECT_EQ(c.recv(19), Frame().u8(6).u64(1).str("/r").b);
    EXPECT_EQ(c.recv(1, 5000), Raw{0x0c});
    c.send({0x00, 0x01});
    // num_keys, delete_key, check.
    EXPECT_EQ(c.recv(1), Raw{0x07});
    c.send(Frame().u64(5).b);
    EXPECT_EQ(c.recv(11), Frame().u8(8).str("/d").b);
    c.send(Frame().u64(1).b);
    EXPECT_EQ(c.recv(29), Frame().u8(5).u64(2).str("/p").str("/q").b);
    c.send({0x00});
    c.closed_by_peer(5000);
  });
  auto s = make_tcp_store("127.0.0.1", client_opts(port, 5s));
  s->set("k1", B("v1"));
  EXPECT_EQ(s->add("c", 7), 9);
  EXPECT_EQ(S(s->get("g")), "abc");
  EXPECT_EQ(S(s->compare_set("x", B("e"), B("d"))), "d");
  s->multi_set({"a"}, {B("b")});
  try {
    s->wait({"w"}, 100ms);
    ADD_FAILURE() << "wait did not time out";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    EXPECT_NE(std::string(e.what()).find("'w'"), std::string::npos) << e.what();
  }
  s->wait({"r"}, 100ms);
  EXPECT_EQ(s->num_keys(), 5);
  EXPECT_TRUE(s->delete_key("d"));
  EXPECT_TRUE(s->check({"p", "q"}));
  s.reset();
  fake.join();
  ::close(lfd);
}

TEST(TcpStoreWire, ClientRejectsWrongPingEcho) {
  uint16_t port;
  int lfd = listen_loopback(port);
  std::thread fake([&] {
    // Answer every connection attempt with a wrong echo until the client gives up.
    for (;;) {
      pollfd p{lfd, POLLIN, 0};
      if (::poll(&p, 1, 700) <= 0) return;
      RawConn c(::accept(lfd, nullptr, nullptr), true);
      c.recv(10);
      c.send(Frame().u32(0xdeadbeef).b);
    }
  });
  try {
    make_tcp_store("127.0.0.1", client_opts(port, 300ms));
    ADD_FAILURE() << "connected despite a wrong PING echo";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    EXPECT_NE(std::string(e.what()).find("PING"), std::string::npos) << e.what();
  }
  fake.join();
  ::close(lfd);
}

// ---- The server's replies to raw frames ----

TEST(TcpStoreServer, PingEchoAndNonBlockingGet) {
  auto srv = start_tcp_store_server("127.0.0.1", 0);
  auto c = validated(srv->port());
  c->send(Frame().u8(13).u32(0x01020304).b);
  EXPECT_EQ(c->recv(4), Frame().u32(0x01020304).b);
  // GET of a missing key does not block: empty value (as libuv servers answer).
  c->send(Frame().u8(3).str("/missing").b);
  EXPECT_EQ(c->recv(8), Frame().u64(0).b);
  // MULTI_GET with a missing key: empty for it.
  c->send(Frame().u8(1).str("/a").str("xy").b);
  c->send(Frame().u8(10).u64(2).str("/a").str("/none").b);
  EXPECT_EQ(c->recv(18), Frame().str("xy").u64(0).b);
  // ADD stores ASCII decimal.
  c->send(Frame().u8(4).str("/n").u64(12).b);
  EXPECT_EQ(as_i64(c->recv(8)), 12);
  c->send(Frame().u8(3).str("/n").b);
  EXPECT_EQ(c->recv(10), Frame().str("12").b);
}

TEST(TcpStoreServer, PipelinedRequestsAnswerInOrder) {
  auto srv = start_tcp_store_server("127.0.0.1", 0);
  auto c = validated(srv->port());
  Frame f;
  for (int i = 0; i < 100; ++i) f.u8(4).str("/p").u64(1);
  c->send(f.b);
  Raw r = c->recv(800);
  ASSERT_EQ(r.size(), 800u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(as_i64(r, 8 * i), i + 1);
}

TEST(TcpStoreServer, WaitRepliesOnlyWhenAllKeysExist) {
  auto srv = start_tcp_store_server("127.0.0.1", 0);
  auto a = validated(srv->port());
  auto b = validated(srv->port());
  a->send(Frame().u8(6).u64(2).str("/k1").str("/k2").b);
  EXPECT_TRUE(a->recv(1, 100).empty());
  b->send(Frame().u8(1).str("/k1").str("v").b);
  EXPECT_TRUE(a->recv(1, 100).empty());
  b->send(Frame().u8(9).str("/k2").str("v").b);  // APPEND also wakes
  EXPECT_EQ(a->recv(1), Raw{0x00});
  // WAIT on present keys replies at once; CHECK with zero keys is READY.
  a->send(Frame().u8(6).u64(1).str("/k1").b);
  EXPECT_EQ(a->recv(1), Raw{0x00});
  a->send(Frame().u8(5).u64(0).b);
  EXPECT_EQ(a->recv(1), Raw{0x00});
  a->send(Frame().u8(5).u64(1).str("/nope").b);
  EXPECT_EQ(a->recv(1), Raw{0x01});
}

TEST(TcpStoreServer, CancelWaitClearsTheWait) {
  auto srv = start_tcp_store_server("127.0.0.1", 0);
  auto a = validated(srv->port());
  auto b = validated(srv->port());
  a->send(Frame().u8(6).u64(1).str("/z").b);
  EXPECT_TRUE(a->recv(1, 100).empty());
  a->send({0x0c});
  EXPECT_EQ(a->recv(1), Raw{0x01});
  b->send(Frame().u8(1).str("/z").str("v").b);
  EXPECT_TRUE(a->recv(1, 200).empty());  // no late STOP_WAITING
  // CANCEL_WAIT without a pending wait still replies.
  a->send({0x0c});
  EXPECT_EQ(a->recv(1), Raw{0x01});
  // The connection works for a new wait.
  a->send(Frame().u8(6).u64(1).str("/z2").b);
  b->send(Frame().u8(1).str("/z2").str("v").b);
  EXPECT_EQ(a->recv(1), Raw{0x00});
}

TEST(TcpStoreServer, QueuesAndListKeys) {
  auto srv = start_tcp_store_server("127.0.0.1", 0);
  auto a = validated(srv->port());
  auto b = validated(srv->port());
  auto c = validated(srv->port());
  // Two waiters on a queue key; one push wakes exactly one.
  a->send(Frame().u8(6).u64(1).str("/q").b);
  b->send(Frame().u8(6).u64(1).str("/q").b);
  // Both waits must be registered before the push (a wait on a non-empty queue returns at once);
  // the three connections are independent, so give the server a moment.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  c->send(Frame().u8(14).str("/q").str("m1").b);
  pollfd both[2] = {{a->fd(), POLLIN, 0}, {b->fd(), POLLIN, 0}};
  ASSERT_EQ(::poll(both, 2, 5000), 1) << "not exactly one waiter woke";
  Raw ra = a->recv(1, 200), rb = b->recv(1, 200);
  EXPECT_EQ(ra.size() + rb.size(), 1u);
  c->send(Frame().u8(14).str("/q").str("m2").b);
  c->send(Frame().u8(16).str("/q").b);
  EXPECT_EQ(as_i64(c->recv(8)), 2);
  // POP: the length before the pop, then the value.
  c->send(Frame().u8(15).str("/q").b);
  EXPECT_EQ(c->recv(18), Frame().u64(2).str("m1").b);
  c->send(Frame().u8(15).str("/q").b);
  EXPECT_EQ(c->recv(18), Frame().u64(1).str("m2").b);
  c->send(Frame().u8(15).str("/q").b);
  EXPECT_EQ(c->recv(8), Frame().u64(0).b);
  // Queues are not KV keys: GETNUMKEYS and LIST_KEYS ignore them.
  c->send(Frame().u8(14).str("/q2").str("x").b);
  c->send(Frame().u8(1).str("/kv").str("1").b);
  c->send(Frame().u8(4).str("init/").u64(1).b);
  EXPECT_EQ(as_i64(c->recv(8)), 1);
  c->send({0x07});
  EXPECT_EQ(as_i64(c->recv(8)), 2);
  c->send({0x11});
  EXPECT_EQ(c->recv(8 + 11 + 13), Frame().u64(2).str("/kv").str("init/").b);
  // CHECK counts a non-empty queue as present.
  c->send(Frame().u8(5).u64(1).str("/q2").b);
  EXPECT_EQ(c->recv(1), Raw{0x00});
}

// ---- Malformed input closes only that connection ----

TEST(TcpStoreServer, SurvivesMalformedFrames) {
  auto srv = start_tcp_store_server("127.0.0.1", 0);
  uint16_t port = srv->port();
  auto good = make_tcp_store("127.0.0.1", client_opts(port));
  good->set("before", B("1"));
  struct Case {
    const char* what;
    Raw bytes;
  };
  const uint64_t kHuge = uint64_t{1} << 40;
  std::vector<Case> cases = {
      {"garbage first byte", {0xff, 0xff, 0xff, 0xff}},
      {"SET before VALIDATE", Frame().u8(1).str("/k").str("v").b},
      {"bad magic", Frame().u8(0).u32(0x12345678).b},
      {"second VALIDATE",
       Frame().raw(validate_frame().data(), 5).raw(validate_frame().data(), 5).b},
      {"unknown code", Frame().raw(validate_frame().data(), 5).u8(99).b},
      {"code 18 (BARRIER, unknown to 2.11)", Frame().raw(validate_frame().data(), 5).u8(18).b},
      {"oversize key", Frame().raw(validate_frame().data(), 5).u8(1).u64(kHuge).b},
      {"oversize value", Frame().raw(validate_frame().data(), 5).u8(1).str("/k").u64(kHuge).b},
      {"oversize key count", Frame().raw(validate_frame().data(), 5).u8(10).u64(kHuge).b},
      {"negative-length key", Frame().raw(validate_frame().data(), 5).u8(3).u64(~0ull).b},
  };
  for (auto& c : cases) {
    RawConn r(port);
    ASSERT_TRUE(r.ok());
    r.send(c.bytes);
    EXPECT_TRUE(r.closed_by_peer()) << c.what << ": the server did not close the connection";
  }
  {
    // A partial frame, then the client vanishes.
    RawConn r(port);
    r.send(Frame().raw(validate_frame().data(), 5).u8(1).u64(100).raw("abc", 3).b);
  }
  // The earlier client's connection and new clients still work.
  EXPECT_EQ(S(good->get("before")), "1");
  good->set("after", B("2"));
  auto fresh = make_tcp_store("127.0.0.1", client_opts(port));
  EXPECT_EQ(S(fresh->get("after")), "2");
}

TEST(TcpStoreServer, GarbageFloodWhileAClientWorks) {
  auto srv = start_tcp_store_server("127.0.0.1", 0);
  uint16_t port = srv->port();
  std::atomic<bool> stop{false};
  std::thread flood([&] {
    uint32_t x = 12345;
    while (!stop) {
      RawConn r(port);
      Raw junk(64);
      for (auto& b : junk) b = static_cast<uint8_t>(x = x * 1103515245 + 12345);
      junk[0] = static_cast<uint8_t>(junk[0] | 0x80);  // never a valid first code
      r.send(junk);
      r.closed_by_peer(500);
    }
  });
  auto s = make_tcp_store("127.0.0.1", client_opts(port));
  for (int i = 0; i < 200; ++i) EXPECT_EQ(s->add("n", 1), i + 1);
  stop = true;
  flood.join();
}

// ---- Server life cycle and client connection handling ----

TEST(TcpStoreServer, EphemeralPortsAndBindConflict) {
  auto a = start_tcp_store_server("127.0.0.1", 0);
  auto b = start_tcp_store_server("127.0.0.1", 0);
  EXPECT_NE(a->port(), 0);
  EXPECT_NE(a->port(), b->port());
  try {
    start_tcp_store_server("127.0.0.1", a->port());
    ADD_FAILURE() << "bound a port that is in use";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kSystem);
    EXPECT_NE(std::string(e.what()).find(std::to_string(a->port())), std::string::npos);
  }
  // After stop() the port can be bound again at once (SO_REUSEADDR).
  uint16_t p = a->port();
  auto c = make_tcp_store("127.0.0.1", client_opts(p));
  c->set("x", B("1"));
  a->stop();
  a->stop();  // idempotent
  auto again = start_tcp_store_server("127.0.0.1", p);
  EXPECT_EQ(again->port(), p);
}

TEST(TcpStoreServer, StopWithPendingWaitsAndClientsSeeAClearError) {
  auto srv = start_tcp_store_server("127.0.0.1", 0);
  auto s = make_tcp_store("127.0.0.1", client_opts(srv->port(), 5s));
  auto waiter = make_tcp_store("127.0.0.1", client_opts(srv->port(), 2s));
  // A raw WAIT that the server has certainly registered (the PING after it was answered).
  auto raw = validated(srv->port());
  raw->send(Frame().u8(6).u64(1).str("/never").b);
  raw->send(Frame().u8(13).u32(7).b);
  std::thread t([&] {
    try {
      waiter->wait({"never"}, 10s);
      ADD_FAILURE() << "wait returned";
    } catch (const Error& e) {
      // kPeerFailure when the WAIT was pending at stop(); on a loaded machine the thread may
      // send it only after stop(), and then reconnecting fails at the store timeout instead.
      EXPECT_TRUE(e.code() == ErrorCode::kPeerFailure || e.code() == ErrorCode::kTimeout)
          << e.what();
    }
  });
  std::this_thread::sleep_for(100ms);
  auto t0 = Clock::now();
  srv->stop();
  EXPECT_LT(Clock::now() - t0, 2s);
  EXPECT_TRUE(raw->closed_by_peer());
  t.join();
  s->set_timeout(300ms);
  EXPECT_THROW(s->set("x", B("1")), Error);
}

TEST(TcpStoreClient, RetriesUntilTheServerStarts) {
  uint16_t port = free_port();
  std::unique_ptr<TCPStoreServer> srv;
  std::thread late([&] {
    std::this_thread::sleep_for(300ms);
    srv = start_tcp_store_server("127.0.0.1", port);
  });
  auto t0 = Clock::now();
  auto s = make_tcp_store("127.0.0.1", client_opts(port, 10s));
  EXPECT_GE(Clock::now() - t0, 250ms);
  late.join();
  s->set("k", B("v"));
  EXPECT_EQ(S(s->get("k")), "v");
}

TEST(TcpStoreClient, ConnectTimesOutNamingTheAddress) {
  uint16_t port = free_port();
  auto t0 = Clock::now();
  try {
    make_tcp_store("127.0.0.1", client_opts(port, 300ms));
    ADD_FAILURE() << "connected to nothing";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)), std::string::npos)
        << e.what();
  }
  auto dt = Clock::now() - t0;
  EXPECT_GE(dt, 250ms);
  EXPECT_LT(dt, 3s);
  EXPECT_THROW(make_tcp_store("no-such-host.invalid", client_opts(port, 200ms)), Error);
}

TEST(TcpStoreClient, ReconnectsAfterTheServerDropsTheConnection) {
  TcpEnv env;
  auto s = env.client();
  s->set("t", B("text"));
  try {
    s->add("t", 1);
    ADD_FAILURE() << "ADD on text succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kPeerFailure);
    EXPECT_NE(std::string(e.what()).find("ADD 't'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s->add("n", 2), 2);
}

TEST(TcpStoreClient, ManyClientsAtOnce) {
  TcpEnv env;
  constexpr int kClients = 48;
  std::vector<std::shared_ptr<Store>> cs;
  for (int i = 0; i < kClients; ++i) cs.push_back(env.client());
  std::vector<std::thread> ts;
  for (int i = 0; i < kClients; ++i)
    ts.emplace_back([&, i] {
      cs[i]->set("r" + std::to_string(i), B(std::to_string(i)));
      cs[i]->add("count", 1);
      // Every client reads every other client's key: all waits resolve.
      for (int j = 0; j < kClients; ++j)
        EXPECT_EQ(S(cs[i]->get("r" + std::to_string(j))), std::to_string(j));
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(cs[0]->add("count", 0), kClients);
}

// ---- wait-for-workers (torch's init/ counter) ----

TEST(TcpStoreClient, HostWaitsForWorkers) {
  uint16_t port = free_port();
  std::shared_ptr<Store> host;
  std::thread h([&] {
    TCPStoreOptions o = client_opts(port, 10s);
    o.is_server = true;
    o.num_workers = 3;
    o.wait_for_workers = true;
    host = make_tcp_store("127.0.0.1", o);
  });
  std::this_thread::sleep_for(100ms);
  std::vector<std::shared_ptr<Store>> workers;
  for (int i = 0; i < 2; ++i) {
    TCPStoreOptions o = client_opts(port, 10s);
    o.num_workers = 3;
    o.wait_for_workers = true;
    workers.push_back(make_tcp_store("127.0.0.1", o));
  }
  h.join();
  ASSERT_TRUE(host);
  // init/ is a raw key (no "/"): user keys cannot see it, but it counts in num_keys.
  EXPECT_FALSE(host->check({"init/"}));
  EXPECT_EQ(host->num_keys(), 1);
  RawConn r(port);
  r.send(validate_frame());
  r.send(Frame().u8(3).str("init/").b);
  EXPECT_EQ(r.recv(9), Frame().str("3").b);
}

TEST(TcpStoreClient, HostTimesOutCountingJoinedWorkers) {
  TCPStoreOptions o = client_opts(0, 300ms);
  o.is_server = true;
  o.num_workers = 2;
  o.wait_for_workers = true;
  try {
    make_tcp_store("127.0.0.1", o);
    ADD_FAILURE() << "host did not time out";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    EXPECT_NE(std::string(e.what()).find("1/2"), std::string::npos) << e.what();
  }
  // Alone and counted once, a host with num_workers = 1 returns at once.
  o.num_workers = 1;
  auto s = make_tcp_store("127.0.0.1", o);
  s->set("k", B("v"));
  EXPECT_EQ(S(s->get("k")), "v");
}

}  // namespace
}  // namespace commx::test
