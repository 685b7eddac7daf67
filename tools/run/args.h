// Command line of commx-run: its own flags plus the common ones of torchrun (--nproc-per-node,
// --nnodes, --node-rank, --master-addr, --master-port, --rdzv-endpoint, --rdzv-id, --standalone,
// --no-python, -m) and mpirun (-np, -n, -x, --allow-run-as-root, --oversubscribe). See
// docs/launcher.md. Layer: tools (commx-run; pure parsing, unit-tested).
#pragma once

#include <stdexcept>
#include <string>

#include "supervisor.h"

namespace commx::run {

// A usage error: commx-run prints the message and exits with kUsageExitCode.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr int kUsageExitCode = 2;
inline constexpr int kMaxProcs = 4096;
// torchrun's port for a --rdzv-endpoint without one.
inline constexpr int kDefaultRdzvPort = 29400;

struct ParsedArgs {
  LaunchOptions launch;
  bool help = false;
};

// What "auto", "cpu" and "gpu" count for --nproc-per-node (injected so tests need no hardware).
struct HostCounts {
  int cpus = 1;
  int gpus = 0;
};
HostCounts host_counts();

// Parses argv[1..]; throws UsageError naming the bad flag. Reads the environment only for
// `-x NAME` (the value to pass on).
ParsedArgs parse_args(int argc, const char* const* argv, const HostCounts& host);

std::string usage();

}  // namespace commx::run
