// Authentication of the TCP store: SHA-256/HMAC against the published vectors; a store with a
// token serves only clients that prove they know it, and proves it to them; the token never
// crosses the wire (a recording proxy sees every byte) and a recorded session cannot be replayed;
// token files; without a token, one warning line per process.
// Layer: tests (store).
#include "store/store_auth.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <mutex>
#include <thread>

#include "commx/error.h"
#include "store/raw_socket.h"
#include "store/sha256.h"
#include "store/store_env.h"
#include "scoped_env.h"

namespace commx::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const char* kToken = "test-token-0123456789abcdef";


std::string hex(const auth::Digest& d) {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (uint8_t b : d) {
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

TCPStoreOptions opts(uint16_t port, Timeout t = 2s) {
  TCPStoreOptions o;
  o.port = port;
  o.timeout = t;
  return o;
}

TEST(StoreAuth, Sha256AndHmacMatchThePublishedVectors) {
  EXPECT_EQ(hex(auth::sha256("abc", 3)),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex(auth::sha256("", 0)),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(hex(auth::sha256(two_blocks.data(), two_blocks.size())),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // RFC 4231 test cases 1, 2 and 6 (a key longer than the block).
  std::string data1 = "Hi There";
  EXPECT_EQ(hex(auth::hmac_sha256(std::string(20, '\x0b'), data1.data(), data1.size())),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  std::string data2 = "what do ya want for nothing?";
  EXPECT_EQ(hex(auth::hmac_sha256("Jefe", data2.data(), data2.size())),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  std::string data6 = "Test Using Larger Than Block-Size Key - Hash Key First";
  EXPECT_EQ(hex(auth::hmac_sha256(std::string(131, '\xaa'), data6.data(), data6.size())),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  auth::Digest a{}, b{};
  EXPECT_TRUE(auth::digests_equal(a, b));
  b[31] = 1;
  EXPECT_FALSE(auth::digests_equal(a, b));
}

TEST(StoreAuth, StoreWithATokenServesOnlyClientsThatKnowIt) {
  ScopedEnv token("COMMX_AUTH_TOKEN", kToken);
  auto srv = start_tcp_store_server("127.0.0.1", 0);
  auto good = make_tcp_store("127.0.0.1", opts(srv->port()));
  good->set("secret", B("42"));
  EXPECT_EQ(S(good->get("secret")), "42");
  testing::internal::CaptureStderr();
  {
    ScopedEnv wrong("COMMX_AUTH_TOKEN", "another-token-0123456789");
    auto t0 = Clock::now();
    try {
      make_tcp_store("127.0.0.1", opts(srv->port(), 10s));
      ADD_FAILURE() << "a wrong token was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("did not prove it knows this job's token"),
                std::string::npos)
          << e.what();
      EXPECT_EQ(std::string(e.what()).find("another-token"), std::string::npos) << e.what();
    }
    EXPECT_LT(Clock::now() - t0, 2s) << "an authentication failure is not retried";
  }
  {
    ScopedEnv none("COMMX_AUTH_TOKEN", nullptr);
    EXPECT_THROW(make_tcp_store("127.0.0.1", opts(srv->port(), 500ms)), Error);
  }
  // Raw clients: every request but VALIDATE and the challenge closes the connection.
  struct Case {
    const char* what;
    Raw bytes;
  };
  std::vector<Case> cases = {
      {"GET", Frame().raw(validate_frame().data(), 5).u8(3).str("/secret").b},
      {"LIST_KEYS", Frame().raw(validate_frame().data(), 5).u8(17).b},
      {"SET over a rank's address",
       Frame().raw(validate_frame().data(), 5).u8(1).str("/a").str("x").b},
      {"PING", Frame().raw(validate_frame().data(), 5).u8(13).u32(7).b},
      {"response without challenge",
       Frame().raw(validate_frame().data(), 5).u8(0x41).raw(Raw(32, 1).data(), 32).b},
  };
  for (auto& c : cases) {
    RawConn r(srv->port());
    r.send(c.bytes);
    EXPECT_TRUE(r.closed_by_peer()) << c.what;
  }
  {
    // A challenge is answered, a guessed proof is not.
    RawConn r(srv->port());
    r.send(Frame().raw(validate_frame().data(), 5).u8(0x40).raw(Raw(16, 9).data(), 16).b);
    EXPECT_EQ(r.recv(48).size(), 48u);
    r.send(Frame().u8(0x41).raw(Raw(32, 0).data(), 32).b);
    EXPECT_TRUE(r.closed_by_peer());
  }
  std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("unauthenticated GET request"), std::string::npos) << log;
  EXPECT_NE(log.find("authentication failed"), std::string::npos) << log;
  EXPECT_EQ(log.find(kToken), std::string::npos) << "the token was logged";
  EXPECT_EQ(S(good->get("secret")), "42");
  EXPECT_FALSE(good->check({"a"}));
}

TEST(StoreAuth, ClientWithATokenRefusesAStoreWithout) {
  std::unique_ptr<TCPStoreServer> srv;
  {
    ScopedEnv none("COMMX_AUTH_TOKEN", nullptr);
    srv = start_tcp_store_server("127.0.0.1", 0);
  }
  ScopedEnv token("COMMX_AUTH_TOKEN", kToken);
  try {
    make_tcp_store("127.0.0.1", opts(srv->port(), 10s));
    ADD_FAILURE() << "a store without the token was trusted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("did not prove"), std::string::npos) << e.what();
  }
}

// A proxy that records every byte between a client and the store, both ways.
class RecordingProxy {
 public:
  explicit RecordingProxy(uint16_t server_port) : server_port_(server_port) {
    listen_fd_ = listen_loopback(port_);
    thread_ = std::thread([this] { run(); });
  }
  ~RecordingProxy() {
    stop_ = true;
    thread_.join();
    ::close(listen_fd_);
  }
  uint16_t port() const { return port_; }
  Raw from_client() {
    std::lock_guard<std::mutex> g(mu_);
    return up_;
  }
  Raw from_server() {
    std::lock_guard<std::mutex> g(mu_);
    return down_;
  }

 private:
  void run() {
    pollfd lp{listen_fd_, POLLIN, 0};
    while (!stop_ && ::poll(&lp, 1, 50) <= 0) {
    }
    if (stop_) return;
    int c = ::accept(listen_fd_, nullptr, nullptr);
    RawConn server(server_port_);
    int s = server.fd();
    while (!stop_) {
      pollfd p[2] = {{c, POLLIN, 0}, {s, POLLIN, 0}};
      if (::poll(p, 2, 50) <= 0) continue;
      for (int i = 0; i < 2; ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP))) continue;
        uint8_t buf[65536];
        ssize_t r = ::recv(p[i].fd, buf, sizeof buf, 0);
        if (r <= 0) {
          ::close(c);
          return;
        }
        {
          std::lock_guard<std::mutex> g(mu_);
          (i == 0 ? up_ : down_).insert((i == 0 ? up_ : down_).end(), buf, buf + r);
        }
        (void)::send(i == 0 ? s : c, buf, static_cast<size_t>(r), MSG_NOSIGNAL);
      }
    }
    ::close(c);
  }

  uint16_t server_port_, port_ = 0;
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  Raw up_, down_;
};

bool contains(const Raw& hay, const std::string& needle) {
  return std::search(hay.begin(), hay.end(), needle.begin(), needle.end()) != hay.end();
}

TEST(StoreAuth, TheTokenNeverCrossesTheWireAndASessionCannotBeReplayed) {
  ScopedEnv token("COMMX_AUTH_TOKEN", kToken);
  auto srv = start_tcp_store_server("127.0.0.1", 0);
  Raw recorded;
  {
    RecordingProxy proxy(srv->port());
    auto s = make_tcp_store("127.0.0.1", opts(proxy.port()));
    s->set("k", B("v"));
    EXPECT_EQ(S(s->get("k")), "v");
    recorded = proxy.from_client();
    EXPECT_FALSE(contains(recorded, kToken));
    EXPECT_FALSE(contains(proxy.from_server(), kToken));
    EXPECT_GT(recorded.size(), 5u + 17 + 33);
  }
  // Replaying the client's bytes: the server's nonce is new, so the recorded proof fails.
  RawConn r(srv->port());
  r.send(recorded);
  EXPECT_TRUE(r.closed_by_peer());
}

TEST(StoreAuth, TokenFromAFileAndTooShortTokens) {
  std::string path = temp_store_path("token");
  std::ofstream(path) << kToken << "\n";
  {
    ScopedEnv none("COMMX_AUTH_TOKEN", nullptr);
    ScopedEnv file("COMMX_AUTH_TOKEN_FILE", path.c_str());
    EXPECT_EQ(auth::token_from_env().value(), kToken);
    auto srv = start_tcp_store_server("127.0.0.1", 0);
    ScopedEnv direct("COMMX_AUTH_TOKEN", kToken);  // the same secret given directly
    make_tcp_store("127.0.0.1", opts(srv->port()))->set("x", B("1"));
  }
  {
    ScopedEnv shorty("COMMX_AUTH_TOKEN", "short");
    try {
      auth::token_from_env();
      ADD_FAILURE();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("fewer than 16"), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find("short"), std::string::npos) << "the token was shown";
    }
  }
  ::unlink(path.c_str());
  EXPECT_EQ(auth::new_token().size(), 64u);
  EXPECT_NE(auth::new_token(), auth::new_token());
}

// The body of OneWarningLineWithoutAToken, run in a fresh process (the warning is per process).
TEST(StoreAuth, WarningChildProcess) {
  if (!getenv("STORE_TEST_WARNING_CHILD")) GTEST_SKIP() << "run by OneWarningLineWithoutAToken";
  auto a = start_tcp_store_server("127.0.0.1", 0);
  auto b = start_tcp_store_server("127.0.0.1", 0);
  make_tcp_store("127.0.0.1", opts(a->port()))->set("x", B("1"));
  make_tcp_store("127.0.0.1", opts(b->port()))->set("x", B("1"));
}

// Without a token, a process says once that its store is not authenticated.
TEST(StoreAuth, OneWarningLineWithoutAToken) {
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(pipefd[1], 2);
    ::dup2(::open("/dev/null", O_WRONLY), 1);
    ::unsetenv("COMMX_AUTH_TOKEN");
    ::unsetenv("COMMX_AUTH_TOKEN_FILE");
    ::setenv("STORE_TEST_WARNING_CHILD", "1", 1);
    ::execl("/proc/self/exe", "store_tests", "--gtest_filter=StoreAuth.WarningChildProcess",
            nullptr);
    ::_exit(127);
  }
  ::close(pipefd[1]);
  std::string err;
  char buf[4096];
  for (ssize_t r; (r = ::read(pipefd[0], buf, sizeof buf)) > 0;) err.append(buf, r);
  ::close(pipefd[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_EQ(status, 0);
  size_t lines = 0;
  for (size_t p = 0; (p = err.find("without authentication", p)) != std::string::npos; ++p) ++lines;
  EXPECT_EQ(lines, 1u) << err;
}

}  // namespace
}  // namespace commx::test
