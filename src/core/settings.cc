// The settings registry (see settings.h): the table of every COMMX_* variable and its parsers.
// Layer: core.
#include "core/settings.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "commx/error.h"

namespace commx {
namespace {

using T = SettingType;

constexpr double kKiB = 1024.0, kMiB = kKiB * 1024, kGiB = kMiB * 1024, kTiB = kGiB * 1024;
constexpr double kYear = 365.0 * 24 * 3600;  // the longest timeout that means anything
constexpr double kMaxCount = 1 << 24;        // ranks, comms, entries
constexpr double kHuge = 4.0e18;             // "never" thresholds; fits int64 and size_t

// One row per variable, grouped by the layer that reads it (the order of docs/env.md).
const std::vector<SettingSpec>& table() {
  static const std::vector<SettingSpec> kTable = {
      // ---- rank discovery and comms (core) ----
      {"COMMX_RANK", T::kInt, "unset",
       "this process's rank (first in the discovery order; then torchrun's RANK/WORLD_SIZE, Open "
       "MPI's OMPI_COMM_WORLD_*, PMI_RANK/PMI_SIZE)",
       "api.md", 0, kMaxCount},
      {"COMMX_WORLD_SIZE", T::kInt, "unset", "number of ranks", "api.md", 1, kMaxCount},
      {"COMMX_LOCAL_RANK", T::kInt, "COMMX_RANK", "rank among the ranks of this host", "api.md", 0,
       kMaxCount},
      {"COMMX_LOCAL_WORLD_SIZE", T::kInt, "COMMX_WORLD_SIZE", "number of ranks on this host",
       "api.md", 1, kMaxCount},
      {"COMMX_TIMEOUT_SECONDS", T::kSeconds, "600",
       "default timeout of every comm and op (CommOptions::timeout first)", "api.md", 0.001, kYear},
      {"COMMX_ABORT_ON_ERROR", T::kBool, "0",
       "abort the process on a timeout or peer failure (after the abort hooks)", "api.md"},
      {"COMMX_TRACE_DIR", T::kPath, "unset",
       "folder where flight-recorder dumps go (on a failed op, sync or async, and on abort)", "api.md"},
      {"COMMX_FLIGHT_RECORDER_SIZE", T::kInt, "1024", "ops kept per comm by the flight recorder",
       "api.md", 1, 1 << 20},
      {"COMMX_BACKEND_LIB_PATH_", T::kPath, "unset",
       "plugin library of backend `<name>` (upper case in the variable's name)", "api.md", 0, 0,
       nullptr, nullptr, true},
      {"COMMX_PLUGIN_DIR", T::kPath, "unset",
       "folder searched for `libcommx_backend_<name>.so` (besides libcommx's own folder)",
       "api.md"},
      {"COMMX_TUNING_FILE", T::kPath, "commx_tuning_<backend>.txt beside libcommx",
       "tuning table written by commx-bench --tune; the cpu and cuda backends pick all_reduce "
       "algorithms from it (read up to 1 MiB)",
       "bench.md"},
      // ---- store ----
      {"COMMX_STORE_HOSTED", T::kBool, "0",
       "a launcher already hosts the store at MASTER_ADDR:MASTER_PORT (set by commx-run)",
       "store.md"},
      {"COMMX_STORE_FILE", T::kPath, "unset", "rendezvous through a FileStore at this path",
       "store.md"},
      {"COMMX_AUTH_TOKEN", T::kString, "unset (commx-run makes one per job)",
       "secret shared by the job's processes; the TCP store accepts only clients that prove they "
       "know it (at least 16 characters; never printed)",
       "security.md"},
      {"COMMX_AUTH_TOKEN_FILE", T::kPath, "unset",
       "file whose first line is the token (when COMMX_AUTH_TOKEN is unset)", "security.md"},
      {"COMMX_STORE_MAX_CONNECTIONS", T::kInt, "0",
       "TCP store server: connection cap (0: the descriptor limit less 64)", "store.md", 0,
       1 << 22},
      {"COMMX_STORE_IDLE_TIMEOUT_SECONDS", T::kSeconds, "30",
       "TCP store server: at the cap, a connection idle this long is closed to make room",
       "store.md", 0.001, kYear},
      {"COMMX_STORE_HANDSHAKE_TIMEOUT_SECONDS", T::kSeconds, "10",
       "TCP store server: a connection that sent no VALIDATE by then is closed", "store.md", 0.001,
       kYear},
      {"COMMX_STORE_MAX_VALUE_BYTES", T::kBytes, "256M",
       "TCP store server: largest value (SET, or grown by APPEND)", "store.md", 1, kTiB},
      {"COMMX_STORE_MAX_REQUEST_BYTES", T::kBytes, "512M",
       "TCP store server: largest request, and largest MULTI_GET reply", "store.md", 1, kTiB},
      {"COMMX_STORE_MAX_UNSENT_REPLY_BYTES", T::kBytes, "64M",
       "TCP store server: unsent replies of one client past which it is not read", "store.md",
       4 * kKiB, kTiB},
      {"COMMX_STORE_MAX_BUFFERED_BYTES", T::kBytes, "1G",
       "TCP store server: partial requests and unsent replies of all clients together", "store.md",
       1 * kMiB, kTiB},
      {"COMMX_STORE_MAX_STORED_BYTES", T::kBytes, "2G",
       "TCP store server: keys, values and queued items together", "store.md", 1 * kMiB, 64 * kTiB},
      // ---- TCP transport ----
      {"COMMX_SOCKET_IFADDR", T::kString, "the route to MASTER_ADDR",
       "address the TCP transport listens on (comm hint socket_ifaddr first)", "tcp_transport.md"},
      {"COMMX_SOCKET_IFNAME", T::kString, "unset",
       "interface whose address the TCP transport listens on (comm hint socket_ifname first)",
       "tcp_transport.md"},
      {"COMMX_SOCKET_REFUSED_GRACE_MS", T::kInt, "2000",
       "how long a peer may refuse connections before it counts as failed", "tcp_transport.md", 0,
       kYear * 1000},
      // ---- cpu backend ----
      {"COMMX_CPU_DDA_MAX_BYTES", T::kBytes, "measured per rank count",
       "largest all_reduce done by the one-shot (DDA) algorithm (0: the measured default)",
       "cpu_backend.md", 0, kTiB},
      {"COMMX_CPU_RD_MAX_BYTES", T::kBytes, "measured",
       "largest all_reduce done by recursive doubling", "cpu_backend.md", 0, kTiB},
      {"COMMX_CPU_CHUNK_BYTES", T::kBytes, "1M",
       "bytes per round of the shared-memory reduce-scatter + all-gather", "cpu_backend.md", 4096,
       kGiB},
      {"COMMX_CPU_SLOT_BYTES", T::kBytes, "measured",
       "shared-memory slot size (a multiple of 4096, at least 64 KiB)", "cpu_backend.md", 64 * kKiB,
       kGiB},
      {"COMMX_CPU_RING_BYTES", T::kBytes, "measured",
       "shared-memory ring size (a power of two, at least 4096)", "cpu_backend.md", 4096, kGiB},
      {"COMMX_CPU_CMA", T::kBool, "1", "single-copy (process_vm_readv) paths of the cpu backend",
       "cpu_backend.md"},
      {"COMMX_CPU_CMA_MIN_BYTES", T::kBytes, "32K", "smallest message sent by single copy",
       "cpu_backend.md", 0, kTiB},
      {"COMMX_CPU_CMA_ALL_REDUCE_MIN_BYTES", T::kBytes, "off",
       "smallest all_reduce done by single copy", "cpu_backend.md", 0, kHuge},
      {"COMMX_CPU_BROADCAST_CMA_MIN_BYTES", T::kInt, "16 KiB at 2 ranks, 32 KiB above",
       "broadcast: single copy from this size (-1: never)", "cpu_backend.md", -1, kTiB},
      {"COMMX_CPU_BROADCAST_ROOT_WRITES_MIN_BYTES", T::kInt, "-1 (never)",
       "broadcast: the root writes 1/n of each peer's buffer (process_vm_writev) from this size "
       "(-1: never)",
       "cpu_backend.md", -1, kTiB},
      {"COMMX_CPU_SPIN_NS", T::kInt, "2000", "spin phase of shared-memory waits (ns)",
       "cpu_backend.md", 0, 1e10},
      {"COMMX_CPU_YIELD_NS", T::kInt, "50000",
       "yield phase of shared-memory waits (ns; only when oversubscribed or sharing a CPU)",
       "cpu_backend.md", 0, 1e10},
      {"COMMX_CPU_SLEEP_SLICE_NS", T::kInt, "2000000",
       "futex-sleep slice of shared-memory waits (ns; at least 100000)", "cpu_backend.md", 0, 1e10},
      // ---- cuda and nccl backends ----
      {"COMMX_DDA_ENABLE", T::kBool, "1", "cuda backend: use the native DDA paths (else NCCL)",
       "cuda.md", 0, 0, nullptr, "RCCL_DDA_ENABLE"},
      {"COMMX_DDA_LL_MAX_BYTES", T::kBytes, "measured", "cuda all_reduce: largest LL message",
       "cuda.md", 0, kTiB},
      {"COMMX_DDA_LL128_MIN_BYTES", T::kBytes, "measured",
       "cuda all_reduce: smallest LL128 message", "cuda.md", 0, kTiB},
      {"COMMX_DDA_LL128_MAX_BYTES", T::kBytes, "measured", "cuda all_reduce: largest LL128 message",
       "cuda.md", 0, kTiB},
      {"COMMX_DDA_FLAT_MAX_BYTES", T::kBytes, "measured",
       "cuda all_reduce: largest one-shot message", "cuda.md", 0, kTiB},
      {"COMMX_DDA_TREE_MAX_BYTES", T::kBytes, "measured",
       "cuda all_reduce: largest two-shot message", "cuda.md", 0, kTiB},
      {"COMMX_CUDA_BUFFER_BYTES", T::kBytes, "31M", "cuda backend: peer buffer per rank",
       "cuda.md", 64 * kKiB, kTiB},
      {"COMMX_CUDA_MAX_BLOCKS", T::kInt, "the SM count", "cuda backend: grid size of small ops",
       "cuda.md", 1, 65535},
      {"COMMX_CUDA_MAX_BLOCKS_LARGE", T::kInt, "2 x the SM count",
       "cuda backend: grid size of large ops", "cuda.md", 1, 65535},
      {"COMMX_CUDA_LL_THREADS", T::kInt, "512", "cuda backend: threads per LL block", "cuda.md", 64,
       1024},
      {"COMMX_CUDA_PDL", T::kBool, "1", "cuda backend: programmatic dependent launch", "cuda.md"},
      {"COMMX_CUDA_POLL_SLEEP_NS", T::kInt, "1000",
       "cuda backend: longest sleep between two polls of a device-side wait that keeps missing "
       "(0: never sleep; comm hint poll_sleep_ns first)",
       "cuda.md", 0, 1000000},
      {"COMMX_CUDA_FORCE_NO_P2P", T::kBool, "0",
       "cuda backend: act as if GPUs had no peer access (tests)", "cuda.md"},
      {"COMMX_CUDA_PEER_MEM", T::kChoice, "ipc",
       "cuda backend peer buffers: CUDA IPC handles or VMM allocations shared as fds (comm hint "
       "peer_mem first)",
       "cuda.md", 0, 0, "ipc|vmm"},
      {"COMMX_CUDA_RANKS_PER_HOST", T::kInt, "unset",
       "cuda backend: forced host boundary (hierarchical path tests)", "cuda.md", 1, kMaxCount},
      {"COMMX_CUDA_LOWP_BLOCKS_PER_SM", T::kInt, "1",
       "cuda backend: FP8 kernel occupancy: 1 block of threads per SM with up to 128 registers "
       "per thread, or 2 with 64 (they spill)",
       "cuda.md", 1, 2},
      {"COMMX_CUDA_LOWP_HALVES", T::kBool, "1",
       "cuda backend: FP8 kernel slots in one buffer half per kernel, alternating (1; an "
       "all_reduce that both halves hold in one round, where one half takes two or more, takes "
       "both), or over both halves with a barrier at each end of an op (0)",
       "cuda.md"},
      {"COMMX_CUDA_LOWP_LINES", T::kInt, "2",
       "cuda backend: FP8 all_reduce of one round as LL128 line streams, each unit used as its "
       "lines land: the gather (1), the gather and at 2 ranks the first push too, with no "
       "barrier (2), or neither, through the slots and barriers (0)",
       "cuda.md", 0, 2},
      {"COMMX_CUDA_LOWP_LINE_UNITS", T::kInt, "unset",
       "cuda backend: most units (pairs of 256-value codec blocks) a warp sends as line streams "
       "in an FP8 all_reduce (unset: 8 at 2 ranks, 4 at more); larger ops go through the slots "
       "and barriers",
       "cuda.md", 1, 64},
      {"COMMX_CUDA_LOWP_KERNEL", T::kChoice, "auto",
       "cuda backend: FP8 kernels: the two-rank all_reduce kernel where it fits, else the round "
       "kernel specialised for 2 and 4 ranks (auto); the round kernels only (sized); the round "
       "kernel for any world size (generic). sized and generic are for comparisons",
       "cuda.md", 0, 0, "auto|sized|generic"},
      {"COMMX_NCCL_LIBRARY", T::kPath, "libnccl.so.2", "NCCL library the nccl backend loads",
       "cuda.md"},
      {"COMMX_NCCL_DYNAMIC_STAGING_BYTES", T::kBytes, "16M",
       "nccl backend all_to_all_v_dynamic: staging per direction (comm hint dynamic_staging_bytes "
       "first)",
       "cuda.md", 64 * kKiB, kTiB},
      // ---- low precision ----
      {"COMMX_LOW_PRECISION_ENABLE", T::kChoice, "off", "FP8 collectives with FP32 accumulation",
       "low_precision.md", 0, 0, "off|0|false|none|on|1|true|fp8|fp8e4m3|e4m3|fp8e5m2|e5m2",
       "RCCL_LOW_PRECISION_ENABLE"},
      {"COMMX_LOW_PRECISION_ENABLE_ALLREDUCE", T::kBool, "1",
       "FP8 all_reduce when low precision is on", "low_precision.md"},
      {"COMMX_LOW_PRECISION_ENABLE_ALLGATHER", T::kBool, "1",
       "FP8 all_gather when low precision is on", "low_precision.md"},
      {"COMMX_LOW_PRECISION_ENABLE_REDUCESCATTER", T::kBool, "1",
       "FP8 reduce_scatter when low precision is on", "low_precision.md"},
      {"COMMX_LOW_PRECISION_ENABLE_ALLTOALL", T::kBool, "1",
       "FP8 all_to_all when low precision is on", "low_precision.md"},
      {"COMMX_LOW_PRECISION_MIN_BYTES", T::kInt, "16777216", "smallest message sent in FP8",
       "low_precision.md", 0, kHuge},
      {"COMMX_LOW_PRECISION_BLOCK", T::kInt, "256", "elements per FP8 scale (a multiple of 16)",
       "low_precision.md", 16, 1 << 20},
      {"COMMX_LOW_PRECISION_FORMAT", T::kChoice, "e4m3", "FP8 format", "low_precision.md", 0, 0,
       "e4m3|fp8e4m3|e5m2|fp8e5m2"},
      {"COMMX_LOW_PRECISION_ROUNDING", T::kChoice, "nearest", "FP8 rounding", "low_precision.md", 0,
       0, "nearest|rne|stochastic|sr"},
      {"COMMX_LOW_PRECISION_SEED", T::kInt, "0", "seed of stochastic rounding", "low_precision.md",
       0, kHuge},
      {"COMMX_LOW_PRECISION_GATHER", T::kChoice, "fp8",
       "all_gather payload: one FP8 term or two (fp8x2)", "low_precision.md", 0, 0, "fp8|fp8x2"},
      {"COMMX_LOW_PRECISION_STATS", T::kBool, "0",
       "count and print every FP8 codec event (saturation is always counted)",
       "low_precision.md"},
      // ---- other backends and Python ----
      {"COMMX_GLOO_HOSTNAME", T::kString, "the host name",
       "address the gloo backend listens on across hosts", "bench.md"},
      {"COMMX_MPI_NONBLOCKING", T::kBool, "0",
       "mpi backend: non-blocking calls (timeouts throw instead of MPI_Abort)", "bench.md"},
      {"COMMX_TORCH_BACKEND_CPU", T::kString, "cpu",
       "commx backend behind torch's \"commx\" process group for CPU tensors", "python.md", 0, 0,
       nullptr, nullptr, false, "Python"},
      {"COMMX_TORCH_BACKEND_CUDA", T::kString, "cuda",
       "commx backend behind torch's \"commx\" process group for CUDA tensors", "python.md", 0, 0,
       nullptr, nullptr, false, "Python"},
      {"COMMX_PATCH_FOR_COMPILE", T::kBool, "0",
       "compile mode (also TORCHCOMMS_PATCH_FOR_COMPILE): eager comm methods return async tensors "
       "and are recorded by autograd",
       "python.md", 0, 0, nullptr, nullptr, false, "Python"},
      {"COMMX_TORCH_PG_BASE", T::kChoice, "unset",
       "process_group: register the torch backend on the ProcessGroup base (tests)", "python.md", 0,
       0, "process_group", nullptr, false, "Python"},
  };
  return kTable;
}

const char* type_name(SettingType t) {
  switch (t) {
    case T::kBool:
      return "boolean";
    case T::kInt:
      return "integer";
    case T::kBytes:
      return "bytes";
    case T::kSeconds:
      return "seconds";
    case T::kString:
      return "string";
    case T::kPath:
      return "path";
    case T::kChoice:
      return "choice";
  }
  return "?";
}

std::string number(double v) {
  std::ostringstream o;
  o.precision(15);
  o << v;
  return o.str();
}

// A byte count as the docs show it: "64 KiB" when it is a whole number of a unit.
std::string bytes_text(double v) {
  for (auto [unit, name] : {std::pair{kTiB, "TiB"}, {kGiB, "GiB"}, {kMiB, "MiB"}, {kKiB, "KiB"}})
    if (v >= unit && std::fmod(v, unit) == 0) return number(v / unit) + " " + name;
  return number(v);
}

std::string range_text(const SettingSpec& s) {
  if (s.type == T::kBytes) return "[" + bytes_text(s.min) + ", " + bytes_text(s.max) + "]";
  return "[" + number(s.min) + ", " + number(s.max) + "]";
}

std::optional<bool> parse_bool(const std::string& v) {
  std::string s;
  for (char c : v) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return false;
  return std::nullopt;
}

// A whole-string decimal integer; nullopt on junk, "" or overflow.
std::optional<int64_t> parse_int(const std::string& v) {
  if (v.empty() || std::isspace(static_cast<unsigned char>(v[0]))) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (errno != 0 || end != v.c_str() + v.size()) return std::nullopt;
  return x;
}

// A finite number (no NaN, no inf, no trailing junk).
std::optional<double> parse_real(const std::string& v, std::string* rest = nullptr) {
  if (v.empty() || std::isspace(static_cast<unsigned char>(v[0]))) return std::nullopt;
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (end == v.c_str() || !std::isfinite(x)) return std::nullopt;
  if (rest) {
    *rest = end;
  } else if (*end != '\0') {
    return std::nullopt;
  }
  return x;
}

// A byte count: "4096", "64K", "1.5MiB", "2G".
std::optional<double> parse_bytes(const std::string& v) {
  std::string unit;
  auto x = parse_real(v, &unit);
  if (!x) return std::nullopt;
  double mul = 1;
  if (unit.empty() || unit == "B")
    mul = 1;
  else if (unit == "k" || unit == "K" || unit == "KiB")
    mul = kKiB;
  else if (unit == "m" || unit == "M" || unit == "MiB")
    mul = kMiB;
  else if (unit == "g" || unit == "G" || unit == "GiB")
    mul = kGiB;
  else
    return std::nullopt;
  return std::floor(*x * mul);
}

std::string quoted(const char* name, const std::string& v) {
  return std::string("environment variable ") + name + "='" + v + "'";
}

// A secret's value is never printed.
bool is_secret(const std::string& name) { return name.find("_TOKEN") != std::string::npos; }

[[noreturn]] void invalid(const SettingSpec& s, const std::string& name, const std::string& v,
                          const std::string& problem) {
  std::string shown = is_secret(name) ? "environment variable " + name : quoted(name.c_str(), v);
  throw Error(ErrorCode::kInvalidArgument,
              shown + ": " + problem + " (" + s.meaning + "; see docs/env.md)");
}

const char* getenv_nonempty(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

// The value and the name it was found under (the alias when only that is set).
std::optional<std::pair<std::string, std::string>> lookup(const SettingSpec& s, const char* name) {
  if (const char* v = getenv_nonempty(name))
    return std::make_pair(std::string(name), std::string(v));
  if (s.alias)
    if (const char* v = getenv_nonempty(s.alias))
      return std::make_pair(std::string(s.alias), std::string(v));
  return std::nullopt;
}

// The checked text of `name`, or nullopt when unset.
std::optional<std::string> checked(const char* name, SettingType want) {
  const SettingSpec& s = setting_spec(name);
  if (s.type != want && !(want == T::kString && (s.type == T::kPath || s.type == T::kChoice)))
    throw Error(ErrorCode::kInternal, std::string("setting ") + name + " is declared as " +
                                          type_name(s.type) + " but read as " + type_name(want));
  auto v = lookup(s, name);
  if (!v) return std::nullopt;
  std::string problem = setting_problem(s, v->second);
  if (!problem.empty()) invalid(s, v->first, v->second, problem);
  return v->second;
}

std::string table_default(const char* name) { return setting_spec(name).dflt; }

}  // namespace

const std::vector<SettingSpec>& setting_specs() { return table(); }

const SettingSpec& setting_spec(std::string_view name) {
  for (const SettingSpec& s : table()) {
    if (s.prefix ? name.substr(0, std::strlen(s.name)) == s.name : name == s.name) return s;
    if (s.alias && name == s.alias) return s;
  }
  throw Error(ErrorCode::kInternal,
              "setting " + std::string(name) +
                  " is not declared in the settings table (src/core/settings.cc)");
}

std::string setting_problem(const SettingSpec& s, const std::string& v) {
  auto in_range = [&](double x, const char* what) -> std::string {
    if (x < s.min || x > s.max)
      return std::string(what) + " out of range: expected " + range_text(s);
    return "";
  };
  switch (s.type) {
    case T::kBool:
      return parse_bool(v) ? "" : "not a boolean (expected 1/0, true/false, yes/no, on/off)";
    case T::kInt: {
      auto x = parse_int(v);
      if (!x) return "not an integer (or too large for 64 bits)";
      return in_range(static_cast<double>(*x), "integer");
    }
    case T::kBytes: {
      auto x = parse_bytes(v);
      if (!x || *x < 0) return "not a byte count (expected an integer, optionally with K, M or G)";
      return in_range(*x, "byte count");
    }
    case T::kSeconds: {
      auto x = parse_real(v);
      if (!x) return "not a finite number of seconds";
      return in_range(*x, "seconds");
    }
    case T::kChoice: {
      std::string all = s.choices;
      size_t start = 0;
      for (;;) {
        size_t bar = all.find('|', start);
        if (all.substr(start, bar - start) == v) return "";
        if (bar == std::string::npos) break;
        start = bar + 1;
      }
      std::string list = all;
      for (char& c : list)
        if (c == '|') c = ',';
      return "not one of " + list;
    }
    case T::kString:
    case T::kPath:
      if (v.size() > 4096) return "longer than 4096 characters";
      for (char c : v)
        if (c == '\n' || c == '\r') return "contains a line break";
      return "";
  }
  return "";
}

std::optional<std::string> setting_text(const char* name) {
  auto v = lookup(setting_spec(name), name);
  if (!v) return std::nullopt;
  return v->second;
}

bool setting_is_set(const char* name) { return setting_text(name).has_value(); }

int64_t setting_int(const char* name, int64_t dflt) {
  auto v = checked(name, T::kInt);
  return v ? *parse_int(*v) : dflt;
}

int64_t setting_int(const char* name) {
  auto d = parse_int(table_default(name));
  if (!d)
    throw Error(ErrorCode::kInternal, std::string("setting ") + name + ": no numeric default");
  return setting_int(name, *d);
}

uint64_t setting_bytes(const char* name, uint64_t dflt) {
  auto v = checked(name, T::kBytes);
  return v ? static_cast<uint64_t>(*parse_bytes(*v)) : dflt;
}

uint64_t setting_bytes(const char* name) {
  auto d = parse_bytes(table_default(name));
  if (!d) throw Error(ErrorCode::kInternal, std::string("setting ") + name + ": no byte default");
  return setting_bytes(name, static_cast<uint64_t>(*d));
}

double setting_seconds(const char* name, double dflt) {
  auto v = checked(name, T::kSeconds);
  return v ? *parse_real(*v) : dflt;
}

double setting_seconds(const char* name) {
  auto d = parse_real(table_default(name));
  if (!d) throw Error(ErrorCode::kInternal, std::string("setting ") + name + ": no default");
  return setting_seconds(name, *d);
}

bool setting_bool(const char* name, bool dflt) {
  auto v = checked(name, T::kBool);
  return v ? *parse_bool(*v) : dflt;
}

bool setting_bool(const char* name) {
  auto d = parse_bool(table_default(name));
  if (!d) throw Error(ErrorCode::kInternal, std::string("setting ") + name + ": no default");
  return setting_bool(name, *d);
}

std::optional<std::string> setting_str(const char* name) { return checked(name, T::kString); }

Timeout timeout_from_seconds(double secs, const std::string& what) {
  static_assert(kMaxTimeout == std::chrono::seconds(static_cast<int64_t>(kYear)));
  if (!std::isfinite(secs) || secs < 0 || secs > kYear)
    throw Error(ErrorCode::kInvalidArgument, what + " of " + number(secs) +
                                                 " s: expected a finite number of seconds in [0, " +
                                                 number(kYear) + "]");
  return Timeout(static_cast<int64_t>(std::llround(secs * 1000.0)));
}

std::string read_setting_file(const char* setting, const std::string& path, size_t max_bytes) {
  auto fail = [&](const std::string& why) -> std::string {
    throw Error(ErrorCode::kInvalidArgument, std::string(setting) + "=" + path + ": " + why);
  };
  // O_NONBLOCK: opening a FIFO nobody writes must not hang; only regular files are read.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return fail(std::string("cannot be opened: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return fail("not a regular file");
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return fail("is " + std::to_string(st.st_size) + " bytes, over the limit of " +
                std::to_string(max_bytes));
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    ssize_t r = ::read(fd, text.data() + done, text.size() - done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    done += static_cast<size_t>(r);
  }
  ::close(fd);
  text.resize(done);
  return text;
}

std::string settings_markdown() {
  std::ostringstream o;
  o << "# Environment variables\n\n"
       "<!-- Generated from the settings table in src/core/settings.cc by commx-env-doc; edit the\n"
       "     table, then run `build/bin/commx-env-doc > docs/env.md` (a test checks they agree). "
       "-->\n\n"
       "Typed options (`CommOptions`, `OpOptions` hints) come first; these variables override "
       "defaults.\nEvery variable commx reads is declared once in that table and validated when "
       "read: a value\nof the wrong type, out of range, NaN or infinite is an `InvalidArgument` "
       "error naming the\nvariable. Booleans take 1/0, true/false, yes/no, on/off; byte counts "
       "take an integer with an\noptional K, M or G suffix (KiB, MiB, GiB).\n\n"
       "Launcher variables read as well: `MASTER_ADDR`, `MASTER_PORT` (the c10d TCP store to "
       "join, [store](store.md)), `RANK`/`WORLD_SIZE`/`LOCAL_RANK`/`LOCAL_WORLD_SIZE` (torchrun), "
       "`OMPI_COMM_WORLD_*`, `PMI_RANK`/`PMI_SIZE`, `TORCHELASTIC_USE_AGENT_STORE`, `TMPDIR`.\n\n"
       "| variable | type | range | default | meaning | page |\n"
       "|---|---|---|---|---|---|\n";
  for (const SettingSpec& s : table()) {
    std::string name = std::string("`") + s.name + (s.prefix ? "<NAME>" : "") + "`";
    if (s.alias) name += " (alias `" + std::string(s.alias) + "`)";
    std::string range;
    if (s.type == T::kInt || s.type == T::kBytes || s.type == T::kSeconds) range = range_text(s);
    if (s.type == T::kChoice) {
      range = s.choices;
      for (size_t p = 0; (p = range.find('|', p)) != std::string::npos; p += 2)
        range.replace(p, 1, ", ");
    }
    std::string meaning = s.meaning;
    if (std::string(s.reader) != "C++")
      meaning += " (read by the " + std::string(s.reader) + " package)";
    std::string page =
        *s.page ? "[" + std::string(s.page).substr(0, std::strlen(s.page) - 3) + "](" + s.page + ")"
                : "";
    o << "| " << name << " | " << type_name(s.type) << " | " << range << " | " << s.dflt << " | "
      << meaning << " | " << page << " |\n";
  }
  return o.str();
}

}  // namespace commx
