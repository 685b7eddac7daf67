// Starts the ranks of a local job, relays their output, and ends the job on the first failure,
// a signal to the launcher, or the time limit. Layer: tools (commx-run).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace commx::run {

struct LaunchOptions {
  int nprocs = 1;     // ranks on this node
  int nnodes = 1;     // nodes of the job, each with its own commx-run and nprocs ranks
  int node_rank = 0;  // this node's index: its ranks are node_rank * nprocs + [0, nprocs)
  std::string master_addr = "127.0.0.1";  // where the store is (node 0 hosts it)
  int master_port = 0;                    // 0: an ephemeral port (single node only)
  std::string run_id = "none";            // TORCHELASTIC_RUN_ID (torchrun's --rdzv-id)
  bool no_auth = false;  // --no-auth: no store token (clients that cannot authenticate)
  double timeout_s = 0;  // 0: no limit
  double grace_s = 3;    // SIGTERM to SIGKILL
  enum class Bind { kAuto, kCore, kNone };
  Bind bind = Bind::kAuto;  // auto: one core per rank when there are no more ranks than cores
  double settle_s = 2;   // a rank failed: time the others get to exit on their own before SIGTERM
  std::vector<std::pair<std::string, std::string>> env;  // -x NAME[=VALUE]: set in every rank
  std::vector<std::string> argv;  // the program and its arguments (a python3 prefix included)

  int world_size() const { return nnodes * nprocs; }
};

// Exit code of a job that hit --timeout (as timeout(1) uses).
inline constexpr int kTimeoutExitCode = 124;

// The environment commx-run gives local rank `local_rank` (commx's, torchrun's and the
// launcher's store), in the order it is set; -x values come last and win.
std::vector<std::pair<std::string, std::string>> rank_environment(const LaunchOptions& o,
                                                                   int local_rank,
                                                                   uint16_t store_port);

// Blocks the signals the supervisor takes through a signalfd (SIGCHLD, SIGINT, SIGTERM, SIGHUP).
// Call it before any thread starts (the store server's), so no thread takes them instead.
void block_job_signals();

// Runs the job against the store at master_addr:`store_port`. Returns 0 when every rank exits 0,
// else the first failure's code (exit status, or 128+signal), or kTimeoutExitCode.
int supervise(const LaunchOptions& opts, uint16_t store_port);

}  // namespace commx::run
