// The GPU sweep form of the command line (see sweep_args.h). Layer: tools/bench.
#include "sweep_args.h"

#include <algorithm>
#include <sstream>

#include "args.h"
#include "commx/error.h"

namespace commx::bench {
namespace {

[[noreturn]] void bad(const std::string& what) {
  throw Error(ErrorCode::kInvalidArgument, what + " (see commx-bench --help)");
}

// Flags only the sweep form has; any of them selects it.
const char* const kSweepFlags[] = {"--ranks", "--dtypes",  "--ops",   "--modes",
                                   "--min",   "--max",     "--factor", "--reps",
                                   "--algo",  "--error",   "--skew-us", "--gap-us"};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');)
    if (!x.empty()) v.push_back(x);
  return v;
}

template <typename T, typename F>
T number(const std::string& flag, const std::string& v, F convert) {
  try {
    size_t pos = 0;
    T x = convert(v, &pos);
    if (pos == v.size()) return x;
  } catch (const std::exception&) {
  }
  bad(flag + " expects a number, got '" + v + "'");
}

bool one_of(const std::string& s, std::initializer_list<const char*> names) {
  return std::any_of(names.begin(), names.end(), [&](const char* n) { return s == n; });
}

}  // namespace

SweepBackend parse_sweep_backend(const std::string& s) {
  SweepBackend b{s, s, ""};
  if (auto plus = s.find('+'); plus != std::string::npos) {
    b.backend = s.substr(0, plus);
    b.variant = s.substr(plus + 1);
  }
  if (b.backend.empty()) bad("--backend has an empty name in '" + s + "'");
  if (!b.variant.empty() && !b.lowp())
    bad("unknown variant '" + b.variant + "' in --backend " + s + " (fp8, fp8x2)");
  if (b.backend == "nccl" && b.variant == "fp8x2")
    bad("--backend nccl+fp8x2 does not exist (nccl+fp8 is NCCL's native FP8)");
  return b;
}

Hints sweep_backend_hints(const SweepBackend& b) {
  Hints h;
  if (!b.lowp_commx()) return h;
  h["low_precision"] = "fp8e4m3";
  h["low_precision_min_bytes"] = "0";
  if (b.variant == "fp8x2") h["low_precision_gather"] = "fp8x2";
  return h;
}

bool is_sweep_command(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    a = a.substr(0, a.find('='));
    for (const char* f : kSweepFlags)
      if (a == f) return true;
  }
  return false;
}

SweepOptions parse_sweep_args(int argc, const char* const* argv) {
  SweepOptions o;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i], val;
    bool inline_value = false;
    if (auto eq = k.find('='); k.rfind("--", 0) == 0 && eq != std::string::npos) {
      val = k.substr(eq + 1);
      k = k.substr(0, eq);
      inline_value = true;
    }
    auto next = [&]() -> std::string {
      if (inline_value) return val;
      if (i + 1 >= argc) bad(k + " needs a value");
      return argv[++i];
    };
    auto stoi = [](const std::string& s, size_t* p) { return std::stoi(s, p); };
    auto stod = [](const std::string& s, size_t* p) { return std::stod(s, p); };
    if (k == "-h" || k == "--help") {
      o.help = true;
    } else if (k == "--ranks") {
      o.ranks = number<int>(k, next(), stoi);
      if (o.ranks < 1 || o.ranks > 256) bad("--ranks must be in [1, 256]");
    } else if (k == "--backend" || k == "--backends") {
      o.backends = split(next());
      for (const auto& b : o.backends) parse_sweep_backend(b);
    } else if (k == "--dtypes") {
      o.dtypes = split(next());
      for (const auto& d : o.dtypes) {
        DataType t = parse_dtype(d);
        if (t != DataType::kBFloat16 && t != DataType::kFloat32)
          bad("--dtypes " + d + ": the GPU sweep measures bf16 and f32");
      }
    } else if (k == "--ops") {
      o.ops = split(next());
      for (const auto& op : o.ops)
        if (!one_of(op, {"all_reduce", "all_gather", "reduce_scatter", "all_to_all"}))
          bad("--ops " + op + ": the GPU sweep measures all_reduce, all_gather, reduce_scatter, all_to_all");
    } else if (k == "--modes") {
      o.modes = split(next());
      for (const auto& m : o.modes)
        if (!one_of(m, {"eager", "graph"})) bad("--modes " + m + ": eager or graph");
    } else if (k == "--min") {
      o.min_bytes = parse_size(next());
    } else if (k == "--max") {
      o.max_bytes = parse_size(next());
    } else if (k == "--factor") {
      o.factor = number<int>(k, next(), stoi);
      if (o.factor < 2) bad("--factor must be at least 2");
    } else if (k == "--reps") {
      o.reps = number<int>(k, next(), stoi);
      if (o.reps < 1) bad("--reps must be at least 1");
    } else if (k == "--json") {
      o.json = next();
    } else if (k == "--md") {
      o.md = next();
    } else if (k == "--algo") {
      o.algo = next();
    } else if (k == "--error") {
      o.error_max = parse_size(next());
    } else if (k == "--skew-us") {
      o.skew_us = number<double>(k, next(), stod);
    } else if (k == "--gap-us") {
      o.gap_us = number<double>(k, next(), stod);
    } else if (k.rfind("-", 0) == 0) {
      bad("flag '" + k + "' is not one of the GPU sweep's (its form is selected by --ranks, --ops, "
          "--modes, ...)");
    } else {
      bad("unexpected argument '" + k + "': the GPU sweep takes --ops, not a positional collective");
    }
  }
  if (o.backends.empty()) bad("--backend lists no backend");
  if (o.dtypes.empty() || o.ops.empty() || o.modes.empty())
    bad("--dtypes, --ops and --modes each need at least one entry");
  if (o.min_bytes > o.max_bytes)
    bad("--min " + std::to_string(o.min_bytes) + " is larger than --max " +
        std::to_string(o.max_bytes));
  if (o.min_bytes == 0) bad("--min must be positive (sizes grow by --factor from it)");
  return o;
}

std::vector<uint64_t> sweep_sizes(const SweepOptions& o) {
  std::vector<uint64_t> v;
  for (uint64_t b = o.min_bytes; b <= o.max_bytes; b *= o.factor) v.push_back(b);
  return v;
}

std::string sweep_usage() {
  return R"(GPU sweep (builds with CUDA only): local GPU ranks, CUDA-event timing, eager and graph-captured
  commx-bench [--ranks N] [--backend cuda,nccl] [--dtypes bf16,f32]
              [--ops all_reduce,all_gather,reduce_scatter,all_to_all] [--modes eager,graph]
              [--min 8] [--max 256M] [--factor 2] [--reps 7]
              [--algo ll|ll128|flat|two_shot|hierarchical|nccl]
              [--error MAXSIZE] [--skew-us US] [--gap-us US] [--json FILE] [--md FILE]
  --ranks N     ranks forked here, rank r on GPU r % GPUs (default 2; a launcher's ranks win)
  --backend     cuda, nccl, cuda+fp8, cuda+fp8x2 (commx FP8, one-/two-term gather), nccl+fp8
                (NCCL's native FP8 on the input cast to E4M3); busbw counts the input dtype's bytes
  --modes       eager: ops issued one by one; graph: 20 ops captured per CUDA graph
  --reps N      median over N timed batches (5-20 ops each, by size)
  --error SIZE  all_reduce's relative L2 error against a float64 reference, up to SIZE
  --skew-us US  the last rank spins US on the host before each eager op (a late rank)
  --gap-us US   every rank spins US before each eager op (a host-bound client)
  --json FILE   rows {backend, op, dtype, mode, bytes, time_us, algbw_gbps, busbw_gbps, wrong,
                error, skew_us, gap_us} (default gpu_bench.json)
  --md FILE     cuda vs nccl side by side, then every variant against nccl (default gpu_bench.md)
)";
}

}  // namespace commx::bench
