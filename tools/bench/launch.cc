// Rank discovery and local spawning for commx-bench (see launch.h). Layer: tools/bench.
#include "launch.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "commx/error.h"
#include "commx/store.h"
#include "core/env.h"

namespace commx::bench {

int launcher_world_size() {
  auto r = rank_from_env();  // validated, in the library's discovery order
  return r ? r->size : 0;
}

int spawn_local_ranks(int np, const std::function<int()>& body) {
  auto server = start_tcp_store_server("127.0.0.1", 0);
  std::string port = std::to_string(server->port());
  std::cout.flush();
  std::vector<pid_t> pids;
  for (int r = 0; r < np; ++r) {
    pid_t pid = fork();
    if (pid < 0) {
      perror("commx-bench: fork");
      for (pid_t p : pids) kill(p, SIGTERM);
      for (pid_t p : pids) waitpid(p, nullptr, 0);
      return 1;
    }
    if (pid == 0) {
      setenv("COMMX_RANK", std::to_string(r).c_str(), 1);
      setenv("COMMX_WORLD_SIZE", std::to_string(np).c_str(), 1);
      setenv("COMMX_LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("COMMX_LOCAL_WORLD_SIZE", std::to_string(np).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", port.c_str(), 1);
      setenv("COMMX_STORE_HOSTED", "1", 1);
      int rc = 1;
      try {
        rc = body();
      } catch (const std::exception& e) {
        std::cerr << "commx-bench rank " << r << ": " << e.what() << "\n";
      }
      std::cout.flush();
      std::cerr.flush();
      // No static destructors: this child shares the parent's copy of the store server.
      _exit(rc);
    }
    pids.push_back(pid);
  }
  int result = 0;
  size_t left = pids.size();
  while (left > 0) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) break;
    bool known = false;
    for (auto& p : pids)
      if (p == pid) {
        p = -1;
        known = true;
      }
    if (!known) continue;
    --left;
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (rc != 0 && result == 0) {
      result = rc;
      std::cerr << "commx-bench: a rank exited with " << rc << "; stopping the others\n";
      for (pid_t p : pids)
        if (p > 0) kill(p, SIGTERM);
    }
  }
  server->stop();
  return result;
}

}  // namespace commx::bench
