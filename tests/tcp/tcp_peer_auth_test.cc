// Peer authentication of the TCP transport (docs/security.md): with the job token, ranks prove
// it to each other in the hello, so a stranger that reaches a rank's listener can neither join the
// comm nor feed data into it, a rank started without the token is told why it is refused, and a
// listener that cannot prove the token is sent nothing. Threads as ranks over loopback; the
// strangers are raw sockets. Layer: tests.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <array>
#include <atomic>
#include <cstring>

#include "scoped_env.h"
#include "store/socket_io.h"
#include "tcp_test_util.h"
#include "transport/socket_addr.h"

namespace commx::test {
namespace {

constexpr const char* kToken = "0123456789abcdef0123456789abcdef";
constexpr uint32_t kHelloMagic = 0x54584d43;
constexpr uint32_t kVersion = 3;
constexpr uint32_t kVerdictOk = 1;
constexpr uint32_t kVerdictNeedsToken = 7;

// The transport's hello, as a stranger that read docs/tcp_transport.md would write it.
struct RawHello {
  uint32_t magic, version;
  int32_t from, to, size;
  uint32_t name_len, proves_token;
};

using Transports = std::vector<std::unique_ptr<Transport>>;

// The transports of ranks 0..n-1; `token` (or none) for each.
Transports make_world(int n, const std::string& name, const std::shared_ptr<Store>& store,
                      const std::vector<const char*>& tokens) {
  Transports ts;
  for (int r = 0; r < n; ++r) {
    ScopedEnv env("COMMX_AUTH_TOKEN", tokens[r]);
    ts.push_back(make_tcp_transport(r, n, store, name, {}));
  }
  return ts;
}

int connect_to(Store& store, int rank) {
  SockAddr a = parse_host_port(store.get_str("tcp/addr/" + std::to_string(rank)), "test");
  int fd = socket(a.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(connect(fd, a.get(), a.len), 0) << std::strerror(errno);
  return fd;
}

// Reads exactly n bytes within 10 s; the count read (short: the peer closed).
size_t read_n(int fd, void* buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 10000) <= 0) break;
    ssize_t g = recv(fd, static_cast<char*>(buf) + got, n - got, 0);
    if (g <= 0) break;
    got += static_cast<size_t>(g);
  }
  return got;
}

void send_all(int fd, const std::string& bytes) {
  ASSERT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
}

std::string hello_bytes(const std::string& comm, int from, int to, int size, bool proves) {
  RawHello h{kHelloMagic, kVersion, from, to, size, static_cast<uint32_t>(comm.size()),
             proves ? 1u : 0u};
  std::string out(reinterpret_cast<const char*>(&h), sizeof(h));
  out += comm;
  if (proves) out += std::string(16, 'n');  // the connector's nonce
  return out;
}

TEST(TcpPeerAuth, MembersWithTheTokenExchangeCorrectData) {
  const int n = 4;
  auto store = make_hash_store();
  Transports ts = make_world(n, "members", store, {kToken, kToken, kToken, kToken});
  run_threads(n, [&](int r) {
    // Every rank to every rank at once: simultaneous connects, each proving the token.
    std::vector<std::vector<uint8_t>> out(n), in(n);
    std::vector<SendReq> sends;
    std::vector<RecvReq> recvs;
    for (int p = 0; p < n; ++p) {
      out[p] = make_payload(r, p, 777 + 13 * p);
      in[p].resize(777 + 13 * r);
      sends.push_back({p, out[p].data(), out[p].size()});
      recvs.push_back({p, in[p].data(), in[p].size()});
    }
    ts[r]->exchange(sends, recvs, in_ms(30000));
    for (int p = 0; p < n; ++p)
      ASSERT_EQ(first_mismatch(in[p], p, r), -1) << "rank " << r << " from " << p;
  });
}

TEST(TcpPeerAuth, StrangersAreRefusedAndTheirDataNeverArrives) {
  // Rank 2 waits for rank 0's data; strangers reach rank 2's listener first, claiming to be rank
  // 0 (a lower rank: rank 2 accepts it even while it connects to rank 0 itself).
  auto store = make_hash_store();
  Transports ts = make_world(3, "guarded", store, {kToken, kToken, kToken});
  std::vector<uint8_t> got(64);
  std::thread receiver([&] {
    RecvReq v{0, got.data(), got.size()};
    ts[2]->exchange({}, {&v, 1}, in_ms(30000));
  });
  // Stranger 1 offers no proof: refused with the reason, then closed.
  int a = connect_to(*store, 2);
  send_all(a, hello_bytes("guarded", 0, 2, 3, false));
  std::array<uint32_t, 2> reply{};
  ASSERT_EQ(read_n(a, reply.data(), sizeof(reply)), sizeof(reply));
  EXPECT_EQ(reply[0], kHelloMagic);
  EXPECT_EQ(reply[1], kVerdictNeedsToken);
  char more;
  EXPECT_EQ(read_n(a, &more, 1), 0u) << "the refused connection stays open";
  close(a);
  // Stranger 2 offers a proof, is challenged, answers garbage: closed without a link.
  int b = connect_to(*store, 2);
  send_all(b, hello_bytes("guarded", 0, 2, 3, true));
  char challenge[8 + 48];
  ASSERT_EQ(read_n(b, challenge, sizeof(challenge)), sizeof(challenge));
  uint32_t verdict;
  std::memcpy(&verdict, challenge + 4, sizeof(verdict));
  EXPECT_EQ(verdict, kVerdictOk);
  send_all(b, std::string(32, 'x'));
  std::string garbage_frame(56 + 64, '\x66');  // what it would send as "rank 0's" data
  (void)send(b, garbage_frame.data(), garbage_frame.size(), MSG_NOSIGNAL);
  EXPECT_EQ(read_n(b, &more, 1), 0u) << "a wrong proof was not refused";
  close(b);
  // The real rank 0 still gets through, and rank 2 receives its data, not the strangers'.
  std::vector<uint8_t> out = make_payload(0, 0, got.size());
  SendReq s{2, out.data(), out.size()};
  ts[0]->exchange({&s, 1}, {}, in_ms(30000));
  receiver.join();
  EXPECT_EQ(first_mismatch(got, 0, 0), -1);
}

TEST(TcpPeerAuth, RankWithoutTheTokenIsToldWhy) {
  // Rank 1 differs from ranks 0 and 2 (token or none); rank 0 waits only for rank 2, so it just
  // answers rank 1's hello.
  for (bool token_on_receiver : {true, false}) {
    const char* same = token_on_receiver ? kToken : nullptr;
    const char* other = token_on_receiver ? nullptr : kToken;
    auto store = make_hash_store();
    Transports ts = make_world(3, "half", store, {same, other, same});
    int x = 0;
    std::thread receiver([&] {
      RecvReq v{2, &x, sizeof(x)};
      ts[0]->exchange({}, {&v, 1}, in_ms(20000));
    });
    int y = 7;
    SendReq s{0, &y, sizeof(y)};
    std::string msg;
    try {
      ts[1]->exchange({&s, 1}, {}, in_ms(20000));
      ADD_FAILURE() << "rank 1 got through";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      msg = e.what();
    }
    ts[2]->exchange({&s, 1}, {}, in_ms(20000));
    receiver.join();
    EXPECT_EQ(x, 7);
    EXPECT_NE(msg.find(token_on_receiver ? "requires the job token" : "has no job token"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("rank 0"), std::string::npos) << msg;
  }
}

TEST(TcpPeerAuth, ListenerThatCannotProveTheTokenIsSentNothing) {
  auto store = make_hash_store();
  // A stranger's listener stands where rank 1's address should be (a comm of size 2).
  ScopedEnv env("COMMX_AUTH_TOKEN", kToken);
  auto rank0 = make_tcp_transport(0, 2, store, "impostor", {});
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(lfd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  ASSERT_EQ(listen(lfd, 4), 0);
  socklen_t len = sizeof(sa);
  getsockname(lfd, reinterpret_cast<sockaddr*>(&sa), &len);
  store->set_str("tcp/addr/1", "127.0.0.1:" + std::to_string(ntohs(sa.sin_port)));
  std::atomic<size_t> payload_bytes{0};
  std::thread stranger([&] {
    pollfd p{lfd, POLLIN, 0};
    if (poll(&p, 1, 10000) <= 0) return;
    int c = accept(lfd, nullptr, nullptr);
    char hello[sizeof(RawHello) + 8 + 16];  // "impostor" and a nonce
    read_n(c, hello, sizeof(hello));
    std::array<uint32_t, 2> ok{kHelloMagic, kVerdictOk};
    std::string reply(reinterpret_cast<const char*>(ok.data()), sizeof(ok));
    reply += std::string(48, 'p');  // a nonce and a made-up proof
    send_all(c, reply);
    char buf[256];
    for (;;) {  // count what rank 0 sends after the handshake
      pollfd q{c, POLLIN, 0};
      if (poll(&q, 1, 2000) <= 0) break;
      ssize_t g = recv(c, buf, sizeof(buf), 0);
      if (g <= 0) break;
      payload_bytes += static_cast<size_t>(g);
    }
    close(c);
  });
  int secret = 42;
  SendReq s{1, &secret, sizeof(secret)};
  std::string msg;
  try {
    rank0->exchange({&s, 1}, {}, in_ms(20000));
  } catch (const Error& e) {
    msg = e.what();
  }
  rank0.reset();
  stranger.join();
  close(lfd);
  EXPECT_NE(msg.find("did not prove the job token"), std::string::npos) << msg;
  EXPECT_EQ(payload_bytes.load(), 0u) << "rank 0 answered a listener that proved nothing";
}

}  // namespace
}  // namespace commx::test
