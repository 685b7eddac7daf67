// fd passing of the VMM peer memory (src/backends/cuda/fd_passing.h) on the CPU: memfd and pipe
// descriptors sent over abstract Unix sockets between forked processes and read back, the
// store-driven exchange among forked ranks, bounded waits (a peer that never connects, never
// sends, a store key that never comes) and clear errors for bad or unknown names.
// Layer: tests (label unit; no GPU).
#include "cuda/fd_passing.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

#include "commx/error.h"
#include "commx/store.h"

namespace commx::cuda {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

int make_memfd(const std::string& content) {
  int fd = memfd_create("commx_fd_test", MFD_CLOEXEC);
  if (fd < 0) return -1;
  if (write(fd, content.data(), content.size()) != static_cast<ssize_t>(content.size())) return -1;
  return fd;
}

std::string read_memfd(int fd) {
  char buf[256];
  ssize_t n = pread(fd, buf, sizeof(buf), 0);
  return n > 0 ? std::string(buf, n) : std::string();
}

// Runs body(rank) in `n` forked processes; "" when all return "", else their messages.
std::string run_forked(int n, const std::function<std::string(int)>& body) {
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  for (int r = 0; r < n; ++r) {
    int p[2];
    if (pipe(p) != 0) return "pipe failed";
    pid_t pid = fork();
    if (pid == 0) {
      close(p[0]);
      std::string msg;
      try {
        msg = body(r);
      } catch (const std::exception& e) {
        msg = std::string("exception: ") + e.what();
      }
      if (!msg.empty()) {
        msg = "rank " + std::to_string(r) + ": " + msg + "\n";
        (void)!write(p[1], msg.data(), msg.size());
      }
      close(p[1]);
      _exit(msg.empty() ? 0 : 1);
    }
    close(p[1]);
    pids.push_back(pid);
    pipes.push_back(p[0]);
  }
  std::string all;
  for (int r = 0; r < n; ++r) {
    char buf[4096];
    ssize_t k;
    while ((k = read(pipes[r], buf, sizeof(buf))) > 0) all.append(buf, k);
    close(pipes[r]);
    int st = 0;
    waitpid(pids[r], &st, 0);
    if (!WIFEXITED(st) || (WEXITSTATUS(st) != 0 && all.empty()))
      all += "rank " + std::to_string(r) + " died (status " + std::to_string(st) + ")\n";
  }
  return all;
}

TEST(FdPassing, MemfdAndPipeBetweenProcesses) {
  FdListener listener(FdListener::unique_name("test"), 4, "");
  EXPECT_NE(listener.name().find(std::to_string(getpid())), std::string::npos);
  UniqueFd mem(make_memfd("hello from the parent"));
  ASSERT_TRUE(mem);
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  UniqueFd pr(p[0]), pw(p[1]);
  ASSERT_EQ(write(pw.get(), "piped", 5), 5);
  const std::string name = listener.name();
  pid_t child = fork();
  if (child == 0) {
    int code = 0;
    try {
      auto deadline = Clock::now() + 10s;
      UniqueFd s = connect_fd_socket(name, deadline, "the parent", "");
      send_u64(s.get(), 42, "");
      uint64_t t1 = 0, t2 = 0;
      UniqueFd a = recv_fd(s.get(), &t1, deadline, "the parent", "");
      UniqueFd b = recv_fd(s.get(), &t2, deadline, "the parent", "");
      char buf[8] = {};
      if (t1 != 7 || t2 != 8)
        code = 2;
      else if (read_memfd(a.get()) != "hello from the parent")
        code = 3;
      else if (read(b.get(), buf, 5) != 5 || std::string(buf, 5) != "piped")
        code = 4;
      else if (pwrite(a.get(), "!", 1, 0) != 1)
        code = 5;  // the same file object: the parent sees it
    } catch (const std::exception&) {
      code = 6;
    }
    _exit(code);
  }
  UniqueFd conn = listener.accept(Clock::now() + 10s, "the child", "");
  EXPECT_EQ(recv_u64(conn.get(), Clock::now() + 10s, "the child", ""), 42u);
  send_fd(conn.get(), mem.get(), 7, "");
  send_fd(conn.get(), pr.get(), 8, "");
  int st = 0;
  waitpid(child, &st, 0);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0);
  char buf[64];
  ssize_t n = pread(mem.get(), buf, sizeof(buf), 0);
  EXPECT_EQ(std::string(buf, n > 0 ? n : 0), "!ello from the parent");
}

TEST(FdPassing, ExchangeAmongForkedRanks) {
  auto server = start_tcp_store_server("127.0.0.1", 0);
  const uint16_t port = server->port();
  const int world = 5;
  // Ranks 0-2 exchange with each other; ranks 3-4 with each other (two "processes groups").
  std::string err = run_forked(world, [&](int rank) -> std::string {
    TCPStoreOptions so;
    so.port = port;
    so.timeout = 20s;
    auto store = make_tcp_store("127.0.0.1", so);
    std::vector<int> peers;
    for (int r = 0; r < world; ++r)
      if (r != rank && (r < 3) == (rank < 3)) peers.push_back(r);
    UniqueFd mine(make_memfd("buffer of rank " + std::to_string(rank)));
    for (int round = 0; round < 3; ++round) {  // same key prefix per round would collide: vary it
      auto fds = exchange_fds(*store, "fdx" + std::to_string(round), rank, world, peers, mine.get(),
                              Clock::now() + 20s, "[test] ");
      if (static_cast<int>(fds.size()) != world) return "wrong result size";
      for (int r = 0; r < world; ++r) {
        bool want = std::find(peers.begin(), peers.end(), r) != peers.end();
        if (static_cast<bool>(fds[r]) != want)
          return "fd presence wrong for rank " + std::to_string(r);
        if (want && read_memfd(fds[r].get()) != "buffer of rank " + std::to_string(r))
          return "wrong content from rank " + std::to_string(r) + ": " + read_memfd(fds[r].get());
      }
    }
    // No peers: nothing happens, nothing waits.
    auto none = exchange_fds(*store, "none", rank, world, {}, mine.get(), Clock::now(), "");
    for (auto& f : none)
      if (f) return "fd from nowhere";
    return "";
  });
  server->stop();
  EXPECT_EQ(err, "");
}

TEST(FdPassing, StrangersAreDropped) {
  // Ranks 0 and 1 as threads; before rank 1 starts, three strangers connect to rank 0's socket:
  // one with a wrong secret, one that hangs up at once, one that keeps silent. The exchange still
  // completes, well before its deadline.
  auto store = make_hash_store();
  store->set_timeout(10s);
  UniqueFd f0(make_memfd("zero")), f1(make_memfd("one"));
  std::string got0, got1, err0, err1;
  std::thread t0([&] {
    try {
      auto fds = exchange_fds(*store, "s", 0, 2, {1}, f0.get(), Clock::now() + 10s, "");
      got0 = read_memfd(fds[1].get());
    } catch (const std::exception& e) {
      err0 = e.what();
    }
  });
  std::string rec = store->get_str("s/0");
  std::string name = rec.substr(0, rec.find('\n'));
  UniqueFd liar = connect_fd_socket(name, Clock::now() + 1s, "rank 0", "");
  send_u64(liar.get(), 1, "");
  send_u64(liar.get(), 12345, "");
  { UniqueFd quitter = connect_fd_socket(name, Clock::now() + 1s, "rank 0", ""); }
  UniqueFd silent = connect_fd_socket(name, Clock::now() + 1s, "rank 0", "");
  std::this_thread::sleep_for(100ms);
  std::thread t1([&] {
    try {
      auto fds = exchange_fds(*store, "s", 1, 2, {0}, f1.get(), Clock::now() + 10s, "");
      got1 = read_memfd(fds[0].get());
    } catch (const std::exception& e) {
      err1 = e.what();
    }
  });
  t0.join();
  t1.join();
  EXPECT_EQ(err0, "");
  EXPECT_EQ(err1, "");
  EXPECT_EQ(got0, "one");
  EXPECT_EQ(got1, "zero");
  // The liar got nothing (its socket was closed without a descriptor).
  EXPECT_THROW(recv_fd(liar.get(), nullptr, Clock::now() + 1s, "rank 0", ""), Error);
}

TEST(FdPassing, PeerThatNeverConnectsTimesOut) {
  auto store = make_hash_store();
  // "Rank 1" publishes a listener (connecting to it succeeds) but never connects to rank 0.
  FdListener silent(FdListener::unique_name("silent"), 4, "");
  store->set_str("k/1", silent.name() + "\n0123456789abcdef");  // name and secret
  UniqueFd mine(make_memfd("x"));
  auto t0 = Clock::now();
  try {
    exchange_fds(*store, "k", 0, 2, {1}, mine.get(), t0 + 300ms, "[comm c rank 0/2] ");
    FAIL() << "no timeout";
  } catch (const Error& e) {
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
    std::string m = e.what();
    EXPECT_NE(m.find("rank(s) 1 to connect"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 0"), std::string::npos) << m;
    EXPECT_GE(s, 0.25);
    EXPECT_LT(s, 2.0);
  }
}

TEST(FdPassing, PeerThatNeverSendsTimesOut) {
  FdListener l(FdListener::unique_name("mute"), 4, "");
  UniqueFd s = connect_fd_socket(l.name(), Clock::now() + 1s, "rank 3", "");
  UniqueFd c = l.accept(Clock::now() + 1s, "rank 3", "");
  auto t0 = Clock::now();
  try {
    recv_fd(s.get(), nullptr, t0 + 200ms, "rank 3", "");
    FAIL() << "no timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    EXPECT_NE(std::string(e.what()).find("from rank 3"), std::string::npos) << e.what();
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 2.0);
  }
  // The peer closes without sending: a PeerFailure, at once.
  c.reset();
  try {
    recv_fd(s.get(), nullptr, Clock::now() + 5s, "rank 3", "");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kPeerFailure) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 3 closed"), std::string::npos) << e.what();
  }
  // Nobody accepts: accept times out naming whom it waited for.
  try {
    l.accept(Clock::now() + 100ms, "rank 5", "");
    FAIL() << "no timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    EXPECT_NE(std::string(e.what()).find("waiting for rank 5"), std::string::npos) << e.what();
  }
}

TEST(FdPassing, StoreKeyThatNeverComesTimesOut) {
  auto store = make_hash_store();
  store->set_timeout(200ms);
  UniqueFd mine(make_memfd("x"));
  auto t0 = Clock::now();
  EXPECT_THROW(exchange_fds(*store, "k", 0, 2, {1}, mine.get(), t0 + 10s, ""), Error);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5.0);
}

TEST(FdPassing, BadAndUnknownNames) {
  auto deadline = Clock::now() + 1s;
  auto code_of = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::make_pair(e.code(), std::string(e.what()));
    }
    return std::make_pair(ErrorCode::kInternal, std::string("no error"));
  };
  auto [c1, m1] = code_of([&] { connect_fd_socket("", deadline, "rank 1", ""); });
  EXPECT_EQ(c1, ErrorCode::kInvalidArgument) << m1;
  EXPECT_NE(m1.find("bad fd socket name"), std::string::npos) << m1;
  auto [c2, m2] =
      code_of([&] { connect_fd_socket(std::string(200, 'x'), deadline, "rank 1", ""); });
  EXPECT_EQ(c2, ErrorCode::kInvalidArgument) << m2;
  auto [c3, m3] = code_of([&] { FdListener(std::string("a\0b", 3), 1, ""); });
  EXPECT_EQ(c3, ErrorCode::kInvalidArgument) << m3;
  const std::string unknown = FdListener::unique_name("nobody");
  auto [c4, m4] = code_of([&] { connect_fd_socket(unknown, deadline, "rank 2", "[ctx] "); });
  EXPECT_EQ(c4, ErrorCode::kPeerFailure) << m4;
  EXPECT_NE(m4.find("no process listens"), std::string::npos) << m4;
  EXPECT_NE(m4.find("rank 2"), std::string::npos) << m4;
  EXPECT_NE(m4.find("[ctx] "), std::string::npos) << m4;
  // A name that is taken.
  FdListener taken(FdListener::unique_name("taken"), 1, "");
  auto [c5, m5] = code_of([&] { FdListener again(taken.name(), 1, ""); });
  EXPECT_EQ(c5, ErrorCode::kSystem) << m5;
  EXPECT_NE(m5.find("in use"), std::string::npos) << m5;
  // Bad peer lists are caught before anything is published.
  auto store = make_hash_store();
  auto [c6, m6] = code_of([&] { exchange_fds(*store, "k", 0, 2, {0}, 0, deadline, ""); });
  EXPECT_EQ(c6, ErrorCode::kInternal) << m6;
}

TEST(FdPassing, UniqueNamesDiffer) {
  EXPECT_NE(FdListener::unique_name("a"), FdListener::unique_name("a"));
}

}  // namespace
}  // namespace commx::cuda
