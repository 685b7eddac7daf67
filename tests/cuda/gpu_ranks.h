// Multi-process harness of the GPU tests: forks one process per rank before any CUDA call in the
// parent, meets them through a commx TCP store hosted by the parent on the loopback address, and
// reports each rank's failures. Layer: tests.
#pragma once

#include <dlfcn.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <filesystem>

#include "commx/error.h"
#include "commx/store.h"

namespace commx::testing {

// Number of GPUs, asked in a child process so that the parent stays CUDA-free for fork().
// NCCL can be loaded (asked in a child so the parent stays CUDA-free).
inline bool nccl_loadable() {
  static int cached = -1;
  if (cached >= 0) return cached;
  pid_t pid = fork();
  if (pid == 0) {
    const char* p = std::getenv("COMMX_NCCL_LIBRARY");
    _exit(dlopen(p ? p : "libnccl.so.2", RTLD_NOW | RTLD_LOCAL) ? 0 : 1);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  cached = WIFEXITED(st) && WEXITSTATUS(st) == 0;
  return cached;
}

inline int gpu_count() {
  static int cached = -1;
  if (cached >= 0) return cached;
  pid_t pid = fork();
  if (pid == 0) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    _exit(n > 100 ? 100 : n);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  cached = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
  return cached;
}

// Skips the calling test (GoogleTest) when fewer than N GPUs are visible.
#define REQUIRE_GPUS(N)                                                                         \
  do {                                                                                          \
    if (gpu_count() < (N)) GTEST_SKIP() << "needs " << (N) << " GPU(s), found " << gpu_count(); \
  } while (0)

// GPUs for a two-rank test: each rank its own GPU when there are two, else both on one.
inline int two_gpus() { return gpu_count() < 2 ? gpu_count() : 2; }

struct RankCtx {
  int rank;
  int world;
  int device;
  std::shared_ptr<Store> store;
};

// A failed check inside a rank process: message printed by the harness.
struct CheckFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};
#define RANK_CHECK(COND, MSG)                                                                  \
  do {                                                                                         \
    if (!(COND))                                                                               \
      throw ::commx::testing::CheckFailed(std::string(__FILE__) + ":" + std::to_string(__LINE__) + \
                                          ": " + #COND + ": " + (MSG));                        \
  } while (0)

// Runs a part of a long rank body, naming the part in a failed check's message (a commx::Error
// passes unchanged: it names its comm and op, and callers may expect its code).
template <typename F>
void stage(const char* name, F&& fn) {
  try {
    fn();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw CheckFailed(std::string("[") + name + "] " + e.what());
  }
}

// `fn` must throw a commx::Error with `code` whose message contains every one of `needles`.
template <typename F>
void expect_error(F&& fn, ErrorCode code, std::initializer_list<const char*> needles,
                  const std::string& what) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string m = e.what();
    RANK_CHECK(e.code() == code, what + ": wrong error code: " + m);
    for (const char* n : needles)
      RANK_CHECK(m.find(n) != std::string::npos, what + ": no '" + n + "' in: " + m);
    return;
  }
  RANK_CHECK(false, what + ": no error");
}

// In a rank process: SIGUSR1 prints where the receiving thread is (the harness sends it to a rank
// that overstays its limit, before SIGKILL), so a hang names its place.
// The process-directed signal may land on any thread (NCCL's, CUDA's): it is passed on to the
// rank's main thread, which is the one that hangs in an op.
inline void print_stack_on_sigusr1() {
  void* warm[1];
  backtrace(warm, 1);  // loads libgcc now: backtrace() in a signal handler must not
  static pthread_t main_thread = pthread_self();
  signal(SIGUSR1, [](int) {
    if (!pthread_equal(pthread_self(), main_thread)) {
      pthread_kill(main_thread, SIGUSR1);
      return;
    }
    void* frames[64];
    int n = backtrace(frames, 64);
    static const char head[] = "--- stack of a rank killed after the time limit:\n";
    (void)!write(2, head, sizeof(head) - 1);
    backtrace_symbols_fd(frames, n, 2);
  });
}

// Runs body(ctx) in `world` processes, rank r on GPU (r / ranks_per_gpu) % gpus (default: r %
// gpus). Returns "" when all ranks exit 0, else a description of the failures. Ranks still running
// after `limit` are killed (a failure).
inline std::string run_ranks(int world, int gpus, const std::function<void(RankCtx&)>& body,
                             std::chrono::seconds limit = std::chrono::seconds(120),
                             int ranks_per_gpu = 1) {
  static int counter = 0;
  std::string dir = "/tmp/commx_gpu_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++);
  auto server = start_tcp_store_server("127.0.0.1", 0);
  const uint16_t port = server->port();
  std::vector<pid_t> pids;
  std::vector<std::string> logs;
  for (int r = 0; r < world; ++r) {
    std::string log = dir + ".rank" + std::to_string(r) + ".log";
    logs.push_back(log);
    pid_t pid = fork();
    if (pid == 0) {
      print_stack_on_sigusr1();
      int code = 0;
      FILE* f = std::fopen(log.c_str(), "w");
      try {
        TCPStoreOptions so;
        so.port = port;
        so.timeout = std::chrono::seconds(60);
        RankCtx ctx{r, world, (r / ranks_per_gpu) % gpus, make_tcp_store("127.0.0.1", so)};
        body(ctx);
      } catch (const std::exception& e) {
        if (f) std::fprintf(f, "rank %d: %s\n", r, e.what());
        code = 1;
      }
      if (f) std::fclose(f);
      std::fflush(stdout);
      _exit(code);
    }
    pids.push_back(pid);
  }
  std::string failures;
  auto deadline = std::chrono::steady_clock::now() + limit;
  std::vector<bool> reaped(world, false);  // never signal a pid that may have been reused
  auto signal_running = [&](int sig) {
    for (int q = 0; q < world; ++q)
      if (!reaped[q]) kill(pids[q], sig);
  };
  for (int r = 0; r < world; ++r) {
    int status = 0;
    for (;;) {
      pid_t w = waitpid(pids[r], &status, WNOHANG);
      if (w == pids[r]) break;
      if (std::chrono::steady_clock::now() > deadline) {
        signal_running(SIGUSR1);
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        signal_running(SIGKILL);
        waitpid(pids[r], &status, 0);
        failures += "rank " + std::to_string(r) + " killed after the time limit\n";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    reaped[r] = true;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      FILE* f = std::fopen(logs[r].c_str(), "r");
      char buf[4096];
      size_t n = f ? std::fread(buf, 1, sizeof(buf) - 1, f) : 0;
      buf[n] = 0;
      if (f) std::fclose(f);
      failures += "rank " + std::to_string(r) + " failed (status " + std::to_string(status) + "): " + buf;
    }
  }
  server->stop();
  std::error_code ec;
  for (auto& l : logs) std::filesystem::remove(l, ec);
  return failures;
}

}  // namespace commx::testing
