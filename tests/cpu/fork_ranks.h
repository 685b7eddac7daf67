// Ranks as forked processes, for the multi-process tests (cpu harness, TCP transport tests):
// fork_ranks starts them, wait_ranks collects their exit statuses and kills any still running
// at the deadline, so a hang fails a test instead of blocking it. Layer: tests.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>
#include <vector>

namespace commx::testing {

// Forks `n` children; child r exits with fn(r) (output flushed first).
inline std::vector<pid_t> fork_ranks(int n, const std::function<int(int)>& fn) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      int code = fn(r);
      std::fflush(stderr);
      std::fflush(stdout);
      _exit(code);
    }
    pids.push_back(pid);
  }
  return pids;
}

// Each child's waitpid status; -1 for one still running at `deadline` (killed and reaped).
inline std::vector<int> wait_ranks(std::vector<pid_t> pids,
                                   std::chrono::steady_clock::time_point deadline) {
  const size_t n = pids.size();
  std::vector<int> status(n, -1);
  size_t left = n;
  while (left > 0) {
    for (size_t r = 0; r < n; ++r) {
      int st = 0;
      if (pids[r] != 0 && waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        status[r] = st;
        pids[r] = 0;
        --left;
      }
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (pid_t p : pids) {
        if (p == 0) continue;
        kill(p, SIGKILL);
        waitpid(p, nullptr, 0);
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return status;
}

}  // namespace commx::testing
