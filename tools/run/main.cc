// commx-run: a local launcher. Hosts a commx TCP store on 127.0.0.1 (ephemeral port), starts N
// ranks with the commx/torchrun environment, prefixes their output with "[rank] ", and ends the
// job on the first failure. See docs/launcher.md. Layer: tools.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "commx/error.h"
#include "commx/store.h"
#include "store/store_auth.h"
#include "supervisor.h"

namespace {

constexpr int kUsageExitCode = 2;
constexpr int kMaxProcs = 4096;

void usage(FILE* f) {
  std::fprintf(
      f,
      "usage: commx-run -n N [--timeout S] [--grace S] [--settle S] [--bind auto|core|none]\n"
      "                 [--no-auth] [--] program [args...]\n"
      "  -n, --nproc N   number of ranks to start on this host (1..%d)\n"
      "  --timeout S     end the job after S seconds (exit code 124)\n"
      "  --grace S       seconds between SIGTERM and SIGKILL when ending a job (3)\n"
      "  --settle S      after a rank fails, seconds the others get to exit on their\n"
      "                  own (and report the failure) before SIGTERM (2)\n"
      "  --no-auth       no store token (for clients that cannot authenticate, such as\n"
      "                  torch.distributed's own TCPStore client)\n"
      "Each rank gets COMMX_RANK/RANK, COMMX_WORLD_SIZE/WORLD_SIZE, the LOCAL_ forms,\n"
      "MASTER_ADDR=127.0.0.1, MASTER_PORT (the store commx-run hosts) and\n"
      "COMMX_STORE_HOSTED=1, and COMMX_AUTH_TOKEN, a secret made for the job (unless\n"
      "--no-auth, or one is set already). Output lines are prefixed with \"[rank] \". The exit code is\n"
      "the first failing rank's (128+signal for a signal), else 0.\n",
      kMaxProcs);
}

bool parse_seconds(const char* s, double& out) {
  char* end = nullptr;
  out = std::strtod(s, &end);
  return end != s && *end == '\0' && out >= 0;
}

}  // namespace

int main(int argc, char** argv) {
  commx::run::LaunchOptions o;
  o.nprocs = 0;
  bool no_auth = false;
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const std::string& name) -> const char* {
      if (a.size() > name.size() && a.compare(0, name.size() + 1, name + "=") == 0)
        return argv[i] + name.size() + 1;
      if (a == name && i + 1 < argc) return argv[++i];
      return nullptr;
    };
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    }
    if (a == "--no-auth") {
      no_auth = true;
      continue;
    }
    if (a.rfind("-", 0) != 0) break;  // the program
    const char* v = nullptr;
    if ((v = value("-n")) || (v = value("--nproc")) ||
        (a.rfind("-n", 0) == 0 && a.size() > 2 && a[2] != '-' && (v = argv[i] + 2))) {
      char* end = nullptr;
      long n = std::strtol(v, &end, 10);
      if (end == v || *end != '\0' || n < 1 || n > kMaxProcs) {
        std::fprintf(stderr, "commx-run: bad rank count '%s'\n", v);
        return kUsageExitCode;
      }
      o.nprocs = static_cast<int>(n);
    } else if ((v = value("--timeout"))) {
      if (!parse_seconds(v, o.timeout_s)) {
        std::fprintf(stderr, "commx-run: bad --timeout '%s'\n", v);
        return kUsageExitCode;
      }
    } else if ((v = value("--grace"))) {
      if (!parse_seconds(v, o.grace_s)) {
        std::fprintf(stderr, "commx-run: bad --grace '%s'\n", v);
        return kUsageExitCode;
      }
    } else if ((v = value("--bind"))) {
      std::string m = v;
      if (m == "auto") {
        o.bind = commx::run::LaunchOptions::Bind::kAuto;
      } else if (m == "core") {
        o.bind = commx::run::LaunchOptions::Bind::kCore;
      } else if (m == "none") {
        o.bind = commx::run::LaunchOptions::Bind::kNone;
      } else {
        std::fprintf(stderr, "commx-run: bad --bind '%s' (auto, core or none)\n", v);
        return kUsageExitCode;
      }
    } else if ((v = value("--settle"))) {
      if (!parse_seconds(v, o.settle_s)) {
        std::fprintf(stderr, "commx-run: bad --settle '%s'\n", v);
        return kUsageExitCode;
      }
    } else {
      std::fprintf(stderr, "commx-run: unknown option '%s'\n", argv[i]);
      usage(stderr);
      return kUsageExitCode;
    }
  }
  for (; i < argc; ++i) o.argv.push_back(argv[i]);
  if (o.nprocs == 0 || o.argv.empty()) {
    std::fprintf(stderr, "commx-run: %s\n",
                 o.nprocs == 0 ? "-n N is required" : "no program given");
    usage(stderr);
    return kUsageExitCode;
  }
  commx::run::block_job_signals();  // before the server's thread starts
  std::unique_ptr<commx::TCPStoreServer> server;
  try {
    // The store and the ranks (which inherit the environment) share one secret per job.
    if (no_auth) {
      ::unsetenv("COMMX_AUTH_TOKEN");
      ::unsetenv("COMMX_AUTH_TOKEN_FILE");
    } else if (!commx::auth::token_from_env()) {
      ::setenv("COMMX_AUTH_TOKEN", commx::auth::new_token().c_str(), 1);
    }
    server = commx::start_tcp_store_server("127.0.0.1", 0);
  } catch (const commx::Error& e) {
    std::fprintf(stderr, "commx-run: cannot host the store: %s\n", e.what());
    return 1;
  }
  int rc = commx::run::supervise(o, server->port());
  server->stop();
  return rc;
}
