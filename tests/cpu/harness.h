// Multi-process test harness: forks N ranks that rendezvous through a real store (the c10d-protocol
// TCP store hosted by the parent, or the FileStore with COMMX_TEST_STORE=file), runs a body in
// each, and reports per-rank exit codes. Children report failures on stderr and through their exit
// status (gtest assertions do not cross fork), so the parent test can fail on any rank's error.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "commx/comm.h"
#include "commx/error.h"
#include "commx/store.h"
#include "cpu/fork_ranks.h"

namespace commx::testing {

struct RankEnv {
  int rank;
  int size;
  std::shared_ptr<Store> store;
  int failures = 0;

  // Records a failure (printed with the rank) and keeps going.
  bool check(bool ok, const std::string& what) {
    if (!ok) {
      ++failures;
      if (failures <= 20) std::fprintf(stderr, "[rank %d/%d] FAIL: %s\n", rank, size, what.c_str());
    }
    return ok;
  }
  std::shared_ptr<Comm> comm(const std::string& name, CommOptions o = {}) {
    o.store = store;
    o.rank = rank;
    o.size = size;
    return Comm::create("cpu", Device::cpu(), name, std::move(o));
  }
};

struct ForkResult {
  std::vector<int> status;  // waitpid status per rank (-1: still running at the deadline, killed)
  bool all_ok() const {
    for (int s : status)
      if (s < 0 || !WIFEXITED(s) || WEXITSTATUS(s) != 0) return false;
    return true;
  }
  std::string describe() const {
    std::string d;
    for (size_t r = 0; r < status.size(); ++r) {
      int s = status[r];
      d += "rank " + std::to_string(r) + ": ";
      if (s < 0)
        d += "hung (killed at the deadline)";
      else if (WIFEXITED(s))
        d += "exit " + std::to_string(WEXITSTATUS(s));
      else
        d += "signal " + std::to_string(WTERMSIG(s));
      d += "; ";
    }
    return d;
  }
};

// Runs body in `n` forked ranks; waits at most `limit_s` seconds.
inline ForkResult run_forked(int n, const std::function<void(RankEnv&)>& body, int limit_s = 120) {
  char tmpl[] = "/tmp/commx-cpu-test-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  const char* kind = std::getenv("COMMX_TEST_STORE");
  bool file = kind && std::string(kind) == "file";
  std::unique_ptr<TCPStoreServer> server;
  if (!file) server = start_tcp_store_server("127.0.0.1", 0);
  const uint16_t port = server ? server->port() : 0;
  std::vector<pid_t> pids = fork_ranks(n, [&](int r) {
    try {
      std::shared_ptr<Store> store;
      if (file) {
        store = make_file_store(dir + "/store", n);
      } else {
        TCPStoreOptions o;
        o.port = port;
        store = make_tcp_store("127.0.0.1", o);
      }
      RankEnv env{r, n, store};
      body(env);
      return env.failures ? 1 : 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[rank %d/%d] uncaught exception: %s\n", r, n, e.what());
      return 2;
    }
  });
  ForkResult res;
  res.status = wait_ranks(pids, std::chrono::steady_clock::now() + std::chrono::seconds(limit_s));
  if (server) server->stop();
  std::string rm = "rm -rf " + dir;
  if (std::system(rm.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir.c_str());
  return res;
}

// Runs `fn`, expecting a commx::Error with `code`; returns its message ("" if none was thrown).
inline std::string expect_error(RankEnv& env, ErrorCode code, const std::function<void()>& fn,
                                const std::string& what) {
  try {
    fn();
  } catch (const Error& e) {
    env.check(e.code() == code, what + ": expected " + error_code_name(code) + ", got " + e.what());
    return e.what();
  }
  env.check(false, what + ": expected " + std::string(error_code_name(code)) + ", nothing thrown");
  return "";
}

}  // namespace commx::testing
