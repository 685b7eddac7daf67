// commx-run: a launcher for one node of a job. Hosts a commx TCP store (on node 0; on
// 127.0.0.1 with an ephemeral port for a single-node job), starts N ranks with the commx/torchrun
// environment, prefixes their output with "[rank] ", and ends the job on the first failure. See
// docs/launcher.md. Layer: tools.
#include <cstdio>
#include <memory>
#include <string>

#include "args.h"
#include "commx/error.h"
#include "commx/store.h"
#include "store/store_auth.h"
#include "supervisor.h"

namespace {

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

}  // namespace

int main(int argc, char** argv) {
  commx::run::ParsedArgs p;
  try {
    p = commx::run::parse_args(argc, argv, commx::run::host_counts());
  } catch (const commx::run::UsageError& e) {
    std::fprintf(stderr, "commx-run: %s\n%s", e.what(), commx::run::usage().c_str());
    return commx::run::kUsageExitCode;
  }
  if (p.help) {
    std::fputs(commx::run::usage().c_str(), stdout);
    return 0;
  }
  const commx::run::LaunchOptions& o = p.launch;
  commx::run::block_job_signals();  // before the server's thread starts
  std::unique_ptr<commx::TCPStoreServer> server;
  uint16_t port = static_cast<uint16_t>(o.master_port);
  // The store and the ranks (which inherit the environment) share one secret per job. Nodes
  // cannot agree on a token they each make: a multi-node job brings its own.
  try {
    if (o.no_auth) {
      ::unsetenv("COMMX_AUTH_TOKEN");
      ::unsetenv("COMMX_AUTH_TOKEN_FILE");
    } else if (!commx::auth::token_from_env()) {
      if (o.nnodes > 1) {
        std::fprintf(stderr,
                     "commx-run: --nnodes %d: set COMMX_AUTH_TOKEN (or COMMX_AUTH_TOKEN_FILE) to the "
                     "same secret on every node, or pass --no-auth\n",
                     o.nnodes);
        return commx::run::kUsageExitCode;
      }
      ::setenv("COMMX_AUTH_TOKEN", commx::auth::new_token().c_str(), 1);
    }
  } catch (const commx::Error& e) {
    std::fprintf(stderr, "commx-run: %s\n", e.what());
    return 1;
  }
  if (o.node_rank == 0) {
    // A loopback address keeps the store off the network; otherwise every interface listens,
    // so the other nodes reach it under whatever name --master-addr gives.
    std::string bind = is_loopback(o.master_addr) ? o.master_addr : "0.0.0.0";
    if (bind == "localhost") bind = "127.0.0.1";
    try {
      server = commx::start_tcp_store_server(bind, port);
    } catch (const commx::Error& e) {
      std::fprintf(stderr, "commx-run: cannot host the store on %s:%d: %s\n", bind.c_str(),
                   o.master_port, e.what());
      return 1;
    }
    port = server->port();
  }
  int rc = commx::run::supervise(o, port);
  if (server) server->stop();
  return rc;
}
