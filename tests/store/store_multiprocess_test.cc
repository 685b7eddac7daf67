// Multi-process use of the TCP store and the FileStore: forked ranks rendezvous (publish and read
// every rank's address), elect a leader with compare_set, count with add, and the TCP store is
// hosted by rank 0 with torch's wait-for-workers; the FileStore removes its file when the last
// of num_workers finishes.
// Layer: tests (store).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>

#include "commx/error.h"
#include "core/bootstrap.h"
#include "store/raw_socket.h"
#include "store/store_env.h"

namespace commx::test {
namespace {

using namespace std::chrono_literals;

// Runs body(rank) in n forked processes; each must exit 0 within `limit`.
void run_ranks(int n, const std::function<void(int)>& body, std::chrono::seconds limit = 30s) {
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int rc = 0;
      try {
        body(r);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        rc = 1;
      }
      std::fflush(stderr);
      ::_exit(rc);
    }
    pids.push_back(pid);
  }
  auto deadline = std::chrono::steady_clock::now() + limit;
  size_t left = pids.size();
  while (left > 0) {
    int status = 0;
    pid_t p = ::waitpid(-1, &status, WNOHANG);
    if (p > 0) {
      --left;
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << "pid " << p << " status " << status;
      continue;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "ranks did not finish in time";
      for (pid_t q : pids) ::kill(q, SIGKILL);
      while (::waitpid(-1, &status, 0) > 0) {
      }
      return;
    }
    std::this_thread::sleep_for(2ms);
  }
}

// Throws (making the child exit 1) when a check fails.
void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("check failed: " + what);
}

// The rendezvous every comm does: publish, read all, elect, count, barrier.
void rendezvous(Store& s, int rank, int n) {
  s.set("addr/" + std::to_string(rank), B("host-" + std::to_string(rank)));
  std::vector<std::string> keys;
  for (int r = 0; r < n; ++r) keys.push_back("addr/" + std::to_string(r));
  auto vals = s.multi_get(keys);
  for (int r = 0; r < n; ++r) require(S(vals[r]) == "host-" + std::to_string(r), "addr " + keys[r]);
  Bytes leader = s.compare_set("leader", {}, B(std::to_string(rank)));
  require(S(leader) == S(s.get("leader")), "one leader");
  for (int i = 0; i < 20; ++i) s.add("counter", 1);
  if (s.add("arrived", 1) == n) s.set("all_arrived", B("1"));
  s.wait({"all_arrived"});
  require(s.add("counter", 0) == 20 * n, "counter");
  s.append("log", B(std::to_string(rank % 10)));
  if (s.add("appended", 1) == n) s.set("all_appended", B("1"));
  require(s.get("log").size() >= 1, "log");
  s.wait({"all_appended"});
  require(s.get("log").size() == static_cast<size_t>(n), "log length");
}

TEST(StoreMultiProcess, TcpStoreRendezvous) {
  for (int n : {1, 2, 5, 8}) {
    auto srv = start_tcp_store_server("127.0.0.1", 0);
    uint16_t port = srv->port();
    run_ranks(n, [&](int rank) {
      TCPStoreOptions o;
      o.port = port;
      o.timeout = 20s;
      auto s = make_tcp_store("127.0.0.1", o);
      rendezvous(*s, rank, n);
    });
  }
}

TEST(StoreMultiProcess, FileStoreRendezvousAndCleanup) {
  for (int n : {1, 3, 8}) {
    std::string path = temp_store_path("mp");
    run_ranks(n, [&](int rank) {
      auto s = make_file_store(path, n);
      s->set_timeout(20s);
      rendezvous(*s, rank, n);
    });
    struct stat st;
    EXPECT_NE(::stat(path.c_str(), &st), 0) << "the last of " << n << " workers left " << path;
    ::unlink(path.c_str());
  }
}

TEST(StoreMultiProcess, FileStoreSurvivesOneStorePerCommReopening) {
  // Each rank closes one store and opens another on the same path (a store per comm): the file
  // must not be removed while any handle is open, only after the last one closes.
  constexpr int n = 4;
  std::string path = temp_store_path("reopen");
  run_ranks(n, [&](int rank) {
    for (int round = 0; round < 3; ++round) {
      auto s = make_file_store(path, n);
      s->set_timeout(20s);
      std::string k = "round" + std::to_string(round) + "/";
      s->set(k + std::to_string(rank), B("x"));
      for (int r = 0; r < n; ++r) s->wait({k + std::to_string(r)});
      // Stagger the closes so some ranks reopen while others still hold the last round's.
      std::this_thread::sleep_for(std::chrono::milliseconds(5 * rank));
    }
  });
  struct stat st;
  EXPECT_NE(::stat(path.c_str(), &st), 0);
  ::unlink(path.c_str());
}

TEST(FileStoreCleanup, RemovedOnlyWhenAllWorkersOpenedAndClosed) {
  std::string path = temp_store_path("refs");
  struct stat st;
  {
    auto early = make_file_store(path, 2);
    early->set("k", B("v"));
  }
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << "removed before the second worker came";
  auto a = make_file_store(path, 2);
  EXPECT_EQ(S(a->get("k")), "v");
  EXPECT_EQ(a->num_keys(), 1);  // bookkeeping keys are hidden
  auto b = make_file_store(path, 2);
  a.reset();
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << "removed while a handle is open";
  b.reset();
  EXPECT_NE(::stat(path.c_str(), &st), 0) << "not removed after the last handle closed";
}

TEST(StoreMultiProcess, FileStoreKeptWithoutWorkerCount) {
  std::string path = temp_store_path("keep");
  run_ranks(2, [&](int rank) {
    auto s = make_file_store(path);
    s->set_timeout(20s);
    rendezvous(*s, rank, 2);
  });
  auto s = make_file_store(path);
  EXPECT_EQ(S(s->get("addr/1")), "host-1");
  ::unlink(path.c_str());
}

TEST(StoreMultiProcess, TcpHostRankWaitsForWorkers) {
  constexpr int n = 4;
  uint16_t port = free_port();
  run_ranks(n, [&](int rank) {
    TCPStoreOptions o;
    o.port = port;
    o.is_server = rank == 0;
    o.num_workers = n;
    o.wait_for_workers = true;
    o.timeout = 20s;
    auto s = make_tcp_store("127.0.0.1", o);
    // The host returned only after every worker added init/; workers set a key after joining.
    s->set("joined/" + std::to_string(rank), B("1"));
    if (rank == 0) {
      std::vector<std::string> keys;
      for (int r = 0; r < n; ++r) keys.push_back("joined/" + std::to_string(r));
      s->wait(keys);
      s->set("release", B("1"));
    } else {
      s->wait({"release"});  // workers must not exit before the host has seen them
    }
  });
}

TEST(StoreMultiProcess, BootstrapRankZeroHostsTheStoreFromEnv) {
  // torchrun-style variables without a launcher-hosted store: rank 0 hosts on MASTER_PORT.
  constexpr int n = 4;
  uint16_t port = free_port();
  run_ranks(n, [&](int rank) {
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    unsetenv("COMMX_STORE_HOSTED");
    unsetenv("TORCHELASTIC_USE_AGENT_STORE");
    RankInfo ri;
    ri.rank = rank;
    ri.size = n;
    auto s = store_from_env(ri, 20s);
    require(s->timeout() == std::chrono::milliseconds(20000), "timeout applied");
    rendezvous(*s, rank, n);
    // Rank 0's process hosts the server: it must outlive the others' last reads.
    if (s->add("finished", 1) == n) s->set("all_finished", B("1"));
    s->wait({"all_finished"});
    if (rank == 0) std::this_thread::sleep_for(100ms);
  });
}

TEST(StoreMultiProcess, BootstrapUsesCommxStoreFile) {
  constexpr int n = 3;
  std::string path = temp_store_path("bootstrap");
  run_ranks(n, [&](int rank) {
    unsetenv("MASTER_ADDR");
    setenv("COMMX_STORE_FILE", path.c_str(), 1);
    RankInfo ri;
    ri.rank = rank;
    ri.size = n;
    auto s = store_from_env(ri, 20s);
    rendezvous(*s, rank, n);
  });
  struct stat st;
  EXPECT_NE(::stat(path.c_str(), &st), 0) << "the FileStore of a finished job was left behind";
  ::unlink(path.c_str());
}

TEST(StoreMultiProcess, KilledClientDoesNotDisturbTheServer) {
  auto srv = start_tcp_store_server("127.0.0.1", 0);
  uint16_t port = srv->port();
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    TCPStoreOptions o;
    o.port = port;
    auto s = make_tcp_store("127.0.0.1", o);
    s->set("child", B("1"));
    s->wait({"never"}, 60s);  // killed while its WAIT is pending
    ::_exit(0);
  }
  TCPStoreOptions o;
  o.port = port;
  o.timeout = 10s;
  auto s = make_tcp_store("127.0.0.1", o);
  s->wait({"child"});
  std::this_thread::sleep_for(50ms);
  ::kill(pid, SIGKILL);
  int status;
  ::waitpid(pid, &status, 0);
  s->set("never", B("now"));  // wakes a waiter that is gone
  EXPECT_EQ(S(s->get("never")), "now");
  EXPECT_EQ(s->add("n", 1), 1);
}

}  // namespace
}  // namespace commx::test
