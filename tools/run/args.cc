// commx-run argument parsing (see args.h). Layer: tools (commx-run).
#include "args.h"

#include <dirent.h>
#include <sched.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "commx/env.h"

namespace commx::run {
namespace {

[[noreturn]] void bad(const std::string& what) { throw UsageError(what); }

long parse_long(const std::string& flag, const std::string& v, long lo, long hi) {
  char* end = nullptr;
  errno = 0;
  long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0)
    bad(flag + " expects an integer, got '" + v + "'");
  if (n < lo || n > hi)
    bad(flag + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + v);
  return n;
}

double parse_seconds(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  double s = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(s >= 0)) bad("bad " + flag + " '" + v + "' (seconds >= 0)");
  return s;
}

// torchrun's --nproc-per-node: a count, or cpu / gpu / auto (GPUs when there are any, else CPUs).
int parse_nproc(const std::string& flag, const std::string& v, const HostCounts& host) {
  if (v == "cpu") return host.cpus;
  if (v == "gpu" || v == "cuda") {
    if (host.gpus == 0) bad(flag + " " + v + ": no GPU is visible on this host");
    return host.gpus;
  }
  if (v == "auto") return host.gpus > 0 ? host.gpus : host.cpus;
  return static_cast<int>(parse_long(flag, v, 1, kMaxProcs));
}

// torchrun's --nnodes N or MIN:MAX; commx-run has no elastic membership, so MIN must equal MAX.
int parse_nnodes(const std::string& v) {
  auto colon = v.find(':');
  if (colon == std::string::npos) return static_cast<int>(parse_long("--nnodes", v, 1, 1 << 16));
  long lo = parse_long("--nnodes", v.substr(0, colon), 1, 1 << 16);
  long hi = parse_long("--nnodes", v.substr(colon + 1), 1, 1 << 16);
  if (lo != hi)
    bad("--nnodes " + v + ": elastic node ranges are not supported (give one count, e.g. --nnodes " +
        std::to_string(hi) + ")");
  return static_cast<int>(lo);
}

bool valid_env_name(const std::string& n) {
  if (n.empty() || std::isdigit(static_cast<unsigned char>(n[0]))) return false;
  for (char c : n)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

HostCounts host_counts() {
  HostCounts h;
  cpu_set_t allowed;
  if (::sched_getaffinity(0, sizeof allowed, &allowed) == 0) h.cpus = CPU_COUNT(&allowed);
  // GPUs without linking CUDA: CUDA_VISIBLE_DEVICES when set, else the driver's device nodes.
  if (auto vis = env_raw("CUDA_VISIBLE_DEVICES")) {
    const std::string& s = *vis;
    if (!s.empty()) h.gpus = 1;
    for (char c : s) h.gpus += c == ',';
    return h;
  }
  if (DIR* d = ::opendir("/dev")) {
    while (dirent* e = ::readdir(d)) {
      const char* n = e->d_name;
      if (std::strncmp(n, "nvidia", 6) == 0 && n[6] && std::isdigit(static_cast<unsigned char>(n[6])))
        ++h.gpus;
    }
    ::closedir(d);
  }
  return h;
}

ParsedArgs parse_args(int argc, const char* const* argv, const HostCounts& host) {
  ParsedArgs p;
  LaunchOptions& o = p.launch;
  o.nprocs = 0;
  bool standalone = false, no_python = false, module = false, node_rank_given = false;
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "-h" || a == "--help") {
      p.help = true;
      return p;
    }
    if (a.size() < 2 || a[0] != '-') break;  // the program
    // "--flag=value" and "--flag value"; torchrun spells every long flag with - or _.
    std::string name = a, inline_value;
    bool has_inline = false;
    if (a.rfind("--", 0) == 0) {
      auto eq = a.find('=');
      if (eq != std::string::npos) {
        name = a.substr(0, eq);
        inline_value = a.substr(eq + 1);
        has_inline = true;
      }
      for (size_t k = 2; k < name.size(); ++k)
        if (name[k] == '_') name[k] = '-';
    }
    auto value = [&]() -> std::string {
      if (has_inline) return inline_value;
      if (i + 1 >= argc) bad(name + " needs a value");
      return argv[++i];
    };
    auto no_value = [&] {
      if (has_inline) bad(name + " takes no value");
    };
    if (name == "-n" || name == "-np" || name == "--np" || name == "--nproc") {
      o.nprocs = static_cast<int>(parse_long(name, value(), 1, kMaxProcs));
    } else if (name == "--nproc-per-node") {
      o.nprocs = parse_nproc(name, value(), host);
    } else if (name.rfind("-n", 0) == 0 && name.size() > 2 && std::isdigit(static_cast<unsigned char>(name[2]))) {
      o.nprocs = static_cast<int>(parse_long("-n", name.substr(2), 1, kMaxProcs));  // -n4
    } else if (name == "--nnodes") {
      o.nnodes = parse_nnodes(value());
    } else if (name == "--node-rank") {
      o.node_rank = static_cast<int>(parse_long(name, value(), 0, (1 << 16) - 1));
      node_rank_given = true;
    } else if (name == "--master-addr") {
      o.master_addr = value();
      if (o.master_addr.empty()) bad("--master-addr is empty");
    } else if (name == "--master-port") {
      o.master_port = static_cast<int>(parse_long(name, value(), 1, 65535));
    } else if (name == "--rdzv-endpoint") {
      std::string v = value();
      auto colon = v.rfind(':');
      bool bracketed_v6 = !v.empty() && v[0] == '[';
      if (colon != std::string::npos && (!bracketed_v6 || colon > v.find(']'))) {
        o.master_addr = v.substr(0, colon);
        o.master_port = static_cast<int>(parse_long(name, v.substr(colon + 1), 1, 65535));
      } else {
        o.master_addr = v;
        o.master_port = kDefaultRdzvPort;
      }
      if (o.master_addr.size() > 2 && o.master_addr.front() == '[' && o.master_addr.back() == ']')
        o.master_addr = o.master_addr.substr(1, o.master_addr.size() - 2);
      if (o.master_addr.empty()) bad("--rdzv-endpoint '" + v + "' has no host");
    } else if (name == "--rdzv-id") {
      o.run_id = value();
      if (o.run_id.empty()) bad("--rdzv-id is empty");
    } else if (name == "--standalone") {
      no_value();
      standalone = true;
    } else if (name == "--no-python") {
      no_value();
      no_python = true;
    } else if (name == "-m" || name == "--module") {
      no_value();
      module = true;
    } else if (name == "-x") {
      std::string v = value();
      auto eq = v.find('=');
      std::string key = v.substr(0, eq);
      if (!valid_env_name(key)) bad("-x '" + v + "': not an environment variable name");
      if (eq != std::string::npos) {
        o.env.emplace_back(key, v.substr(eq + 1));
      } else {
        auto cur = env_raw(key.c_str());
        if (!cur) bad("-x " + key + ": " + key + " is not set here (give -x " + key + "=VALUE)");
        o.env.emplace_back(key, *cur);
      }
    } else if (name == "--no-auth") {
      no_value();
      o.no_auth = true;
    } else if (name == "--allow-run-as-root" || name == "--oversubscribe") {
      no_value();  // mpirun habits: commx-run neither refuses root nor limits ranks per core
    } else if (name == "--timeout") {
      o.timeout_s = parse_seconds(name, value());
    } else if (name == "--grace") {
      o.grace_s = parse_seconds(name, value());
    } else if (name == "--settle") {
      o.settle_s = parse_seconds(name, value());
    } else if (name == "--bind") {
      std::string m = value();
      if (m == "auto")
        o.bind = LaunchOptions::Bind::kAuto;
      else if (m == "core")
        o.bind = LaunchOptions::Bind::kCore;
      else if (m == "none")
        o.bind = LaunchOptions::Bind::kNone;
      else
        bad("bad --bind '" + m + "' (auto, core or none)");
    } else {
      bad("unknown option '" + a + "'");
    }
  }
  for (; i < argc; ++i) o.argv.push_back(argv[i]);
  if (o.nprocs == 0) bad("the number of ranks is required: -n N (or -np N, --nproc-per-node N)");
  if (o.argv.empty()) bad("no program given");
  if (standalone && o.nnodes > 1) bad("--standalone is a single-node job, but --nnodes is " + std::to_string(o.nnodes));
  if (o.nnodes > 1) {
    if (!node_rank_given)
      bad("--nnodes " + std::to_string(o.nnodes) +
          " needs --node-rank on every node (commx-run assigns no node ranks itself)");
    if (o.master_port == 0)
      bad("--nnodes " + std::to_string(o.nnodes) +
          " needs --master-port (or --rdzv-endpoint HOST:PORT): node 0 hosts the store there");
  }
  if (o.node_rank >= o.nnodes)
    bad("--node-rank " + std::to_string(o.node_rank) + " is not below --nnodes " +
        std::to_string(o.nnodes));
  if (static_cast<long>(o.nnodes) * o.nprocs > (1 << 20)) bad("too many ranks in the job");
  // torchrun runs a script with the Python interpreter unless --no-python; -m runs a module.
  const std::string python = env_str("PYTHON").value_or("python3");
  if (module && no_python) bad("-m and --no-python exclude each other");
  if (module)
    o.argv.insert(o.argv.begin(), {python, "-m"});
  else if (!no_python && ends_with(o.argv[0], ".py"))
    o.argv.insert(o.argv.begin(), python);
  return p;
}

std::string usage() {
  char b[4096];
  std::snprintf(
      b, sizeof b,
      "usage: commx-run -n N [options] [--] program [args...]\n"
      "  -n, -np, --nproc-per-node N   ranks on this node (1..%d; --nproc-per-node also takes\n"
      "                  auto, cpu or gpu)\n"
      "  --nnodes N      nodes of the job (one commx-run per node; default 1)\n"
      "  --node-rank R   this node's index; node 0 hosts the store\n"
      "  --master-addr A, --master-port P   where node 0 hosts the store (default 127.0.0.1 and\n"
      "                  an ephemeral port on a single node)\n"
      "  --rdzv-endpoint HOST[:PORT]   the same as --master-addr/--master-port (port 29400)\n"
      "  --rdzv-id ID    TORCHELASTIC_RUN_ID of the ranks (default none)\n"
      "  --standalone    a single-node job (the default)\n"
      "  --no-python     run a .py program as it is (default: with python3, as torchrun does)\n"
      "  -m, --module    run the program as a Python module (python3 -m)\n"
      "  -x NAME[=VALUE] set NAME in every rank (mpirun): VALUE, or this environment's value\n"
      "  --allow-run-as-root, --oversubscribe   accepted for mpirun habits; nothing to change\n"
      "  --timeout S     end the job after S seconds (exit code 124)\n"
      "  --grace S       seconds between SIGTERM and SIGKILL when ending a job (3)\n"
      "  --settle S      after a rank fails, seconds the others get to exit on their\n"
      "                  own (and report the failure) before SIGTERM (2)\n"
      "  --bind auto|core|none   pin rank r to the r-th allowed CPU (auto: when each gets one)\n"
      "  --no-auth       no store token (for clients that cannot authenticate, such as\n"
      "                  torch.distributed's own TCPStore client)\n"
      "Long flags take - or _ (--nproc_per_node) and --flag=value. Each rank gets the\n"
      "environment torchrun gives (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK,\n"
      "ROLE_RANK, ROLE_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RUN_ID, ...), the COMMX_\n"
      "forms, OMP_NUM_THREADS=1 unless set (more than one rank per node) and COMMX_AUTH_TOKEN, a\n"
      "secret made for the job (unless --no-auth, or one is set already). Output lines are\n"
      "prefixed with \"[rank] \". The exit code is the first failing rank's (128+signal for a\n"
      "signal), else 0. See docs/launcher.md.\n",
      kMaxProcs);
  return b;
}

}  // namespace commx::run
