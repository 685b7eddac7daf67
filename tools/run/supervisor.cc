// Process supervision for commx-run: fork/exec the ranks with the launcher environment, relay
// their output through LinePrefixer, reap them via signalfd, and end the job on the first
// failure (SIGTERM, then SIGKILL after the grace period), a forwarded signal or the time limit.
// Layer: tools (commx-run).
#include "supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>

#include "commx/env.h"
#include "line_prefixer.h"

namespace commx::run {
namespace {

using Clock = std::chrono::steady_clock;

// After the last rank exits, how long to keep reading pipes a leftover descendant holds open.
constexpr auto kDrainAfterExit = std::chrono::seconds(1);
constexpr int kReapTickMs = 200;

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int fds[2] = {-1, -1};  // read ends of the child's stdout and stderr pipes
  std::unique_ptr<LinePrefixer> sinks[2];
};

sigset_t job_signals() {
  sigset_t mask;
  sigemptyset(&mask);
  for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&mask, s);
  return mask;
}

void say(const std::string& msg) {
  std::string line = "commx-run: " + msg + "\n";
  ssize_t w = ::write(2, line.data(), line.size());
  (void)w;
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

Clock::time_point after_seconds(double s) {
  auto d = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  return Clock::now() + d;
}

// Pins rank r to the r-th CPU it may run on (as mpirun does for few ranks) when every rank can
// have a core of its own: ranks that spin on shared memory must not share a core by chance.
void bind_to_core(const LaunchOptions& o, int rank) {
  if (o.bind == LaunchOptions::Bind::kNone) return;
  cpu_set_t allowed;
  if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
  int ncpu = CPU_COUNT(&allowed);
  if (o.bind == LaunchOptions::Bind::kAuto && o.nprocs > ncpu) return;
  int seen = 0;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &allowed)) continue;
    if (seen++ == rank % ncpu) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(c, &one);
      ::sched_setaffinity(0, sizeof one, &one);
      return;
    }
  }
}

// Runs in the forked child: environment, descriptors and signal state, then exec.
[[noreturn]] void exec_rank(const LaunchOptions& o, int rank,
                            const std::vector<std::pair<std::string, std::string>>& env, int out_w,
                            int err_w, const sigset_t& child_mask, pid_t parent) {
  ::setpgid(0, 0);  // its own group: the launcher signals the rank and its descendants
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a killed launcher leaves no orphans
  if (::getppid() != parent) ::_exit(127);
  ::dup2(out_w, 1);
  ::dup2(err_w, 2);
  ::signal(SIGPIPE, SIG_DFL);
  ::sigprocmask(SIG_SETMASK, &child_mask, nullptr);
  bind_to_core(o, rank);
  for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
  std::vector<char*> argv;
  for (auto& a : o.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  std::fprintf(stderr, "commx-run: cannot run '%s': %s\n", argv[0], strerror(errno));
  ::_exit(127);
}

class Supervisor {
 public:
  Supervisor(const LaunchOptions& o, uint16_t port) : o_(o), port_(port) {}

  int run() {
    sigset_t mask = job_signals(), old_mask;
    ::pthread_sigmask(SIG_BLOCK, &mask, &old_mask);
    // Children get the mask the launcher started with, not the blocked one.
    sigset_t child_mask = old_mask;
    for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigdelset(&child_mask, s);
    ::signal(SIGPIPE, SIG_IGN);
    sfd_ = ::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd_ < 0) {
      say(std::string("signalfd: ") + strerror(errno));
      return 1;
    }
    if (o_.timeout_s > 0) job_deadline_ = after_seconds(o_.timeout_s);
    ranks_.resize(static_cast<size_t>(o_.nprocs));
    for (int r = 0; r < o_.nprocs; ++r) {
      if (!spawn(r, child_mask)) {
        record_failure(1);
        terminating_ = true;
        terminate_all(SIGTERM);
        break;
      }
    }
    loop();
    ::close(sfd_);
    if (timed_out_) return kTimeoutExitCode;
    if (first_failure_) return *first_failure_;
    return interrupt_signal_ ? 128 + interrupt_signal_ : 0;
  }

 private:
  bool spawn(int r, const sigset_t& child_mask) {
    Rank& k = ranks_[static_cast<size_t>(r)];
    k.rank = r;
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
      say(std::string("pipe: ") + strerror(errno));
      return false;
    }
    auto env = rank_environment(o_, r, port_);  // built before fork: the child only sets it
    pid_t parent = ::getpid();
    pid_t pid = ::fork();
    if (pid < 0) {
      say(std::string("fork: ") + strerror(errno));
      return false;
    }
    if (pid == 0) exec_rank(o_, r, env, out[1], err[1], child_mask, parent);
    ::setpgid(pid, pid);  // also here: no window where a signal to the group misses it
    ::close(out[1]);
    ::close(err[1]);
    k.pid = pid;
    k.running = true;
    k.fds[0] = out[0];
    k.fds[1] = err[0];
    for (int i = 0; i < 2; ++i) {
      ::fcntl(k.fds[i], F_SETFL, ::fcntl(k.fds[i], F_GETFL) | O_NONBLOCK);
      k.sinks[i] = std::make_unique<LinePrefixer>(o_.node_rank * o_.nprocs + r, i == 0 ? 1 : 2);
    }
    ++running_;
    return true;
  }

  void loop() {
    std::vector<pollfd> pfds;
    std::vector<std::pair<size_t, int>> owner;  // (rank index, stream) of each pipe entry
    for (;;) {
      if (running_ == 0) {
        if (!drain_deadline_) drain_deadline_ = Clock::now() + kDrainAfterExit;
        if (open_pipes() == 0 || Clock::now() >= *drain_deadline_) break;
      }
      check_deadlines();
      pfds.clear();
      owner.clear();
      pfds.push_back({sfd_, POLLIN, 0});
      for (size_t i = 0; i < ranks_.size(); ++i)
        for (int s = 0; s < 2; ++s)
          if (ranks_[i].fds[s] >= 0) {
            pfds.push_back({ranks_[i].fds[s], POLLIN, 0});
            owner.emplace_back(i, s);
          }
      // The tick also reaps: a SIGCHLD taken by a thread that had it unblocked is not lost.
      int n = ::poll(pfds.data(), pfds.size(), std::min(poll_timeout_ms(), kReapTickMs));
      if (n == 0) reap();
      if (n < 0 && errno != EINTR) {
        say(std::string("poll: ") + strerror(errno));
        terminate_all(SIGKILL);
      }
      if (n <= 0) continue;
      if (pfds[0].revents) on_signal();
      for (size_t j = 1; j < pfds.size(); ++j)
        if (pfds[j].revents) read_pipe(ranks_[owner[j - 1].first], owner[j - 1].second);
    }
    for (auto& k : ranks_)
      for (int s = 0; s < 2; ++s) close_pipe(k, s);
  }

  size_t open_pipes() const {
    size_t n = 0;
    for (auto& k : ranks_) n += (k.fds[0] >= 0) + (k.fds[1] >= 0);
    return n;
  }

  void read_pipe(Rank& k, int s) {
    char buf[65536];
    ssize_t r = ::read(k.fds[s], buf, sizeof buf);
    if (r > 0) {
      k.sinks[s]->feed(buf, static_cast<size_t>(r));
    } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
      close_pipe(k, s);
    }
  }

  void close_pipe(Rank& k, int s) {
    if (k.fds[s] < 0) return;
    k.sinks[s]->finish();
    ::close(k.fds[s]);
    k.fds[s] = -1;
  }

  void on_signal() {
    signalfd_siginfo si;
    while (::read(sfd_, &si, sizeof si) == sizeof si) {
      int sig = static_cast<int>(si.ssi_signo);
      if (sig == SIGCHLD) {
        reap();
        continue;
      }
      // SIGINT/SIGTERM/SIGHUP: pass it on; ranks that ignore it are killed after the grace.
      if (!interrupt_signal_) interrupt_signal_ = sig;
      say(std::string("got ") + strsignal(sig) + "; forwarding it to the ranks");
      terminate_all(sig);
    }
  }

  void reap() {
    int status;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      for (auto& k : ranks_) {
        if (k.pid != pid || !k.running) continue;
        k.running = false;
        --running_;
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        // Ranks that end because the launcher is ending the job do not decide the exit code.
        if (code != 0 && !terminating_) {
          if (WIFEXITED(status))
            say("rank " + std::to_string(global(k)) + " exited with code " + std::to_string(code) +
                (running_ ? "; ending the other ranks" : ""));
          else
            say("rank " + std::to_string(global(k)) + " was killed by signal " +
                std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")" +
                (running_ ? "; ending the other ranks" : ""));
          record_failure(code);
          terminating_ = true;
          // The survivors get a moment to notice the failure and report it themselves (commx
          // reports a dead peer within milliseconds) before they are terminated.
          settle_deadline_ = after_seconds(o_.settle_s);
        }
      }
    }
  }

  int global(const Rank& k) const { return o_.node_rank * o_.nprocs + k.rank; }

  void record_failure(int code) {
    if (!first_failure_) first_failure_ = code;
  }

  // Sends `sig` to every running rank's process group and starts the SIGKILL countdown. The
  // caller sets terminating_ when the job's outcome is already decided.
  void terminate_all(int sig) {
    for (auto& k : ranks_)
      if (k.running) {
        ::kill(-k.pid, sig);
        ::kill(k.pid, sig);
      }
    if (!kill_deadline_) kill_deadline_ = after_seconds(o_.grace_s);
  }

  void check_deadlines() {
    auto now = Clock::now();
    if (job_deadline_ && now >= *job_deadline_ && !timed_out_) {
      timed_out_ = true;
      say("time limit of " + seconds(o_.timeout_s) + " reached; terminating the ranks");
      terminating_ = true;
      terminate_all(SIGTERM);
    }
    if (settle_deadline_ && now >= *settle_deadline_) {
      settle_deadline_.reset();
      if (running_ > 0) terminate_all(SIGTERM);
    }
    if (kill_deadline_ && now >= *kill_deadline_ && running_ > 0 && !killed_) {
      killed_ = true;
      say("ranks still running after the " + seconds(o_.grace_s) +
          " grace period; sending SIGKILL");
      for (auto& k : ranks_)
        if (k.running) {
          ::kill(-k.pid, SIGKILL);
          ::kill(k.pid, SIGKILL);
        }
    }
  }

  int poll_timeout_ms() const {
    auto next = Clock::time_point::max();
    if (job_deadline_ && !timed_out_) next = std::min(next, *job_deadline_);
    if (kill_deadline_ && !killed_) next = std::min(next, *kill_deadline_);
    if (drain_deadline_) next = std::min(next, *drain_deadline_);
    if (settle_deadline_) next = std::min(next, *settle_deadline_);
    if (next == Clock::time_point::max()) return INT_MAX;
    auto ms = std::chrono::ceil<std::chrono::milliseconds>(next - Clock::now()).count();
    return ms < 0 ? 0 : static_cast<int>(std::min<long long>(ms, INT_MAX));
  }

  const LaunchOptions& o_;
  uint16_t port_;
  int sfd_ = -1;
  std::vector<Rank> ranks_;
  int running_ = 0;
  std::optional<int> first_failure_;
  int interrupt_signal_ = 0;
  bool terminating_ = false;  // the launcher is ending the job: later exits are its doing
  bool timed_out_ = false;
  bool killed_ = false;
  std::optional<Clock::time_point> job_deadline_, kill_deadline_, drain_deadline_;
  std::optional<Clock::time_point> settle_deadline_;
};

}  // namespace

std::vector<std::pair<std::string, std::string>> rank_environment(const LaunchOptions& o,
                                                                   int local_rank,
                                                                   uint16_t store_port) {
  std::vector<std::pair<std::string, std::string>> env;
  auto set = [&env](const char* k, const std::string& v) { env.emplace_back(k, v); };
  const std::string rank = std::to_string(o.node_rank * o.nprocs + local_rank);
  const std::string world = std::to_string(o.world_size());
  const std::string local = std::to_string(local_rank), local_world = std::to_string(o.nprocs);
  for (const char* k : {"COMMX_RANK", "RANK", "ROLE_RANK"}) set(k, rank);
  for (const char* k : {"COMMX_WORLD_SIZE", "WORLD_SIZE", "ROLE_WORLD_SIZE"}) set(k, world);
  for (const char* k : {"COMMX_LOCAL_RANK", "LOCAL_RANK"}) set(k, local);
  for (const char* k : {"COMMX_LOCAL_WORLD_SIZE", "LOCAL_WORLD_SIZE"}) set(k, local_world);
  // torchrun's agent environment: one worker group per node, one role, no restarts.
  set("GROUP_RANK", std::to_string(o.node_rank));
  set("GROUP_WORLD_SIZE", std::to_string(o.nnodes));
  set("ROLE_NAME", "default");
  set("TORCHELASTIC_RUN_ID", o.run_id);
  set("TORCHELASTIC_RESTART_COUNT", "0");
  set("TORCHELASTIC_MAX_RESTARTS", "0");
  set("MASTER_ADDR", o.master_addr);
  set("MASTER_PORT", std::to_string(store_port));
  // The launcher hosts the store: commx's bootstrap and torch's env:// join it as clients.
  set("COMMX_STORE_HOSTED", "1");
  set("TORCHELASTIC_USE_AGENT_STORE", "True");
  // As torchrun: several ranks on a node must not each start a thread per core.
  if (o.nprocs > 1 && !env_raw("OMP_NUM_THREADS")) set("OMP_NUM_THREADS", "1");
  for (const auto& kv : o.env) env.push_back(kv);
  return env;
}

void block_job_signals() {
  sigset_t mask = job_signals();
  ::pthread_sigmask(SIG_BLOCK, &mask, nullptr);
}

int supervise(const LaunchOptions& opts, uint16_t store_port) {
  return Supervisor(opts, store_port).run();
}

}  // namespace commx::run
