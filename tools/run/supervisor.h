// Starts the ranks of a local job, relays their output, and ends the job on the first failure,
// a signal to the launcher, or the time limit. Layer: tools (commx-run).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace commx::run {

struct LaunchOptions {
  int nprocs = 1;
  double timeout_s = 0;  // 0: no limit
  double grace_s = 3;    // SIGTERM to SIGKILL
  enum class Bind { kAuto, kCore, kNone };
  Bind bind = Bind::kAuto;  // auto: one core per rank when there are no more ranks than cores
  double settle_s = 2;   // a rank failed: time the others get to exit on their own before SIGTERM
  std::vector<std::string> argv;
};

// Exit code of a job that hit --timeout (as timeout(1) uses).
inline constexpr int kTimeoutExitCode = 124;

// Blocks the signals the supervisor takes through a signalfd (SIGCHLD, SIGINT, SIGTERM, SIGHUP).
// Call it before any thread starts (the store server's), so no thread takes them instead.
void block_job_signals();

// Runs the job against the store at 127.0.0.1:`store_port`. Returns 0 when every rank exits 0,
// else the first failure's code (exit status, or 128+signal), or kTimeoutExitCode.
int supervise(const LaunchOptions& opts, uint16_t store_port);

}  // namespace commx::run
