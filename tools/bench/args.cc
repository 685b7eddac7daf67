// commx-bench argument parsing (see args.h). Layer: tools/bench.
#include "args.h"

#include <cmath>
#include <sstream>

#include "commx/error.h"

namespace commx::bench {
namespace {

[[noreturn]] void bad(const std::string& what) {
  throw Error(ErrorCode::kInvalidArgument, what + " (see commx-bench --help)");
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep))
    if (!cur.empty()) out.push_back(cur);
  return out;
}

int parse_int(const std::string& flag, const std::string& v, int lo, int hi) {
  size_t pos = 0;
  long x = 0;
  try {
    x = std::stol(v, &pos);
  } catch (const std::exception&) {
    bad(flag + " expects an integer, got '" + v + "'");
  }
  if (pos != v.size()) bad(flag + " expects an integer, got '" + v + "'");
  if (x < lo || x > hi)
    bad(flag + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + v);
  return static_cast<int>(x);
}

const DataType kAllDtypes[] = {DataType::kFloat32,  DataType::kFloat64,    DataType::kFloat16,
                               DataType::kBFloat16, DataType::kFloat8E4M3, DataType::kFloat8E5M2,
                               DataType::kInt8,     DataType::kUInt8,      DataType::kInt32,
                               DataType::kInt64,    DataType::kUInt32,     DataType::kUInt64};

// nccl-tests flags commx-bench knows but does not implement, with the reason.
const char* unsupported_nccl_tests_flag(const std::string& a) {
  static const std::pair<const char*, const char*> kFlags[] = {
      {"-p", "parallel init concerns several GPUs per process (one rank per process here)"},
      {"--parallel_init", "parallel init concerns several GPUs per process (one rank per process here)"},
      {"-y", "the CUDA null stream is not used (each comm has its stream)"},
      {"--stream_null", "the CUDA null stream is not used (each comm has its stream)"},
      {"-k", "no side computation"}, {"--side_comp", "no side computation"},
      {"-l", "no trace replay"}, {"--replay", "no trace replay"},
      {"-C", "no CPU-time report"}, {"--report_cputime", "no CPU-time report"},
      {"-O", "use --inplace 0|1"}, {"--out_of_place", "use --inplace 0|1"},
      {"-u", "buffers are always aligned"}, {"--unalign", "buffers are always aligned"},
      {"-B", "comms are always blocking at init"}, {"--commblocking", "comms are always blocking at init"},
      {"-F", "no fault-tolerance test"}, {"--ft_test", "no fault-tolerance test"},
      {"-L", "no fault-tolerance test"}, {"--ft_list", "no fault-tolerance test"},
      {"-s", "no byte budget; use -n"}, {"--tbytes", "no byte budget; use -n"},
      {"-S", "no comm split"}, {"--split_share", "no comm split"},
      {"-P", "no comm split"}, {"--split_comm", "no comm split"},
      {"-R", "no buffer registration"}, {"--local_register", "no buffer registration"},
      {"-A", "min/median/max per size are in --json, --md and --svg"},
      {"--per_coll_perf", "min/median/max per size are in --json, --md and --svg"}};
  for (const auto& [flag, why] : kFlags)
    if (a == flag) return why;
  return nullptr;
}

}  // namespace

uint64_t parse_size(const std::string& in) {
  if (in.empty()) bad("empty size");
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(in, &pos);
  } catch (const std::exception&) {
    bad("'" + in + "' is not a size (examples: 8, 64K, 1M, 2G)");
  }
  std::string suffix = in.substr(pos);
  for (auto& ch : suffix) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  double mult = 1;
  if (suffix.empty() || suffix == "B")
    mult = 1;
  else if (suffix == "K" || suffix == "KB" || suffix == "KIB")
    mult = 1024.0;
  else if (suffix == "M" || suffix == "MB" || suffix == "MIB")
    mult = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "GB" || suffix == "GIB")
    mult = 1024.0 * 1024 * 1024;
  else
    bad("'" + in + "' has an unknown suffix '" + in.substr(pos) + "' (use K, M or G)");
  if (!(v >= 0) || v * mult > 1e15) bad("size '" + in + "' is out of range");
  return static_cast<uint64_t>(std::llround(v * mult));
}

std::string format_size(uint64_t b) {
  const char* units[] = {"", "K", "M", "G"};
  int u = 0;
  while (u < 3 && b >= 1024 && b % 1024 == 0) {
    b /= 1024;
    ++u;
  }
  return std::to_string(b) + units[u];
}

Options parse_args(int argc, const char* const* argv) {
  Options o;
  for (int i = 0; i < argc; ++i) {
    if (i) o.command_line += ' ';
    o.command_line += argv[i];
  }
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string val;
    bool has_inline = false;
    if (a.rfind("--", 0) == 0) {
      auto eq = a.find('=');
      if (eq != std::string::npos) {
        val = a.substr(eq + 1);
        a = a.substr(0, eq);
        has_inline = true;
      }
    }
    if (a == "-h" || a == "--help") {
      o.help = true;
      continue;
    }
    bool is_flag = a.size() >= 2 && a[0] == '-' && !std::isdigit(static_cast<unsigned char>(a[1]));
    if (!is_flag) {
      positional.push_back(a);
      continue;
    }
    auto value = [&]() -> std::string {
      if (has_inline) return val;
      if (i + 1 >= argc) bad(a + " needs a value");
      return argv[++i];
    };
    if (const char* why = unsupported_nccl_tests_flag(a)) {
      bad("nccl-tests flag " + a + " is not supported by commx-bench: " + why);
    }
    if (a == "-b" || a == "--minbytes")
      o.min_bytes = parse_size(value());
    else if (a == "-e" || a == "--maxbytes")
      o.max_bytes = parse_size(value());
    else if (a == "-f" || a == "--stepfactor") {
      std::string v = value();
      try {
        size_t pos = 0;
        o.step_factor = std::stod(v, &pos);
        if (pos != v.size()) throw std::invalid_argument(v);
      } catch (const std::exception&) {
        bad("-f expects a number, got '" + v + "'");
      }
      if (!(o.step_factor > 1.0)) bad("-f must be greater than 1, got " + v);
    } else if (a == "-i" || a == "--stepbytes") {
      o.step_bytes = parse_size(value());
      if (o.step_bytes == 0) bad("-i must be positive");
    } else if (a == "-d" || a == "--datatype") {
      std::string v = value();
      o.dtypes.clear();
      if (v == "all") {
        o.dtypes.assign(std::begin(kAllDtypes), std::end(kAllDtypes));
      } else {
        for (const auto& d : split(v, ',')) o.dtypes.push_back(parse_dtype(d));
      }
      if (o.dtypes.empty()) bad("-d lists no data type");
    } else if (a == "-o" || a == "--op") {
      std::string v = value();
      o.ops.clear();
      if (v == "all") {
        o.ops = {ReduceOp::SUM, ReduceOp::PRODUCT, ReduceOp::MAX, ReduceOp::MIN, ReduceOp::AVG};
      } else {
        for (const auto& s : split(v, ',')) {
          auto colon = s.find(':');
          std::string name = s.substr(0, colon);
          // nccl-tests' name of ncclPreMulSum.
          ReduceKind k = parse_reduce_kind(name == "mulsum" ? "premul_sum" : name);
          if (k == ReduceKind::kPremulSum) {
            double f = colon == std::string::npos ? 0.5 : std::atof(s.c_str() + colon + 1);
            o.ops.push_back(ReduceOp::premul_sum(f));
          } else {
            o.ops.push_back(ReduceOp(k));
          }
        }
      }
      if (o.ops.empty()) bad("-o lists no op");
    } else if (a == "-t" || a == "--nthreads") {
      o.nthreads = parse_int(a, value(), 1, 1 << 16);
      if (o.nthreads != 1)
        bad(a + " " + std::to_string(o.nthreads) + ": commx-bench runs one rank per process; " +
            "start more ranks with --np N, commx-run or mpirun");
    } else if (a == "-g" || a == "--ngpus") {
      o.ngpus = parse_int(a, value(), 1, 1 << 16);
      if (o.ngpus != 1)
        bad(a + " " + std::to_string(o.ngpus) + ": commx-bench drives one device per rank; " +
            "start one rank per GPU with --np N, commx-run or mpirun");
    } else if (a == "-a" || a == "--average") {
      o.average = static_cast<Options::Average>(parse_int(a, value(), 0, 3));
    } else if (a == "-m" || a == "--agg_iters") {
      o.agg_iters = parse_int(a, value(), 0, 1 << 20);
    } else if (a == "-z" || a == "--blocking") {
      o.blocking = parse_int(a, value(), 0, 1) == 1;
    } else if (a == "-N" || a == "--run_cycles") {
      o.cycles = parse_int(a, value(), 0, 1 << 20);
    } else if (a == "-r" || a == "--root")
      o.root = parse_int(a, value(), 0, 1 << 20);
    else if (a == "-w" || a == "--warmup_iters")
      o.warmup = parse_int(a, value(), 0, 1 << 24);
    else if (a == "-n" || a == "--iters")
      o.iters = parse_int(a, value(), 1, 1 << 24);
    else if (a == "-c" || a == "--check")
      o.check = parse_int(a, value(), 0, 1) == 1;
    else if (a == "--backend" || a == "--backends") {
      o.backends.clear();
      for (const auto& s : split(value(), ',')) {
        auto colon = s.find(':');
        BackendSpec b{s.substr(0, colon), colon == std::string::npos ? "" : s.substr(colon + 1)};
        if (b.name.empty()) bad("--backend has an empty name in '" + s + "'");
        o.backends.push_back(b);
      }
      if (o.backends.empty()) bad("--backend lists no backend");
    } else if (a == "--np")
      o.np = parse_int(a, value(), 1, 256);
    else if (a == "--inplace")
      o.inplace = parse_int(a, value(), 0, 1);
    else if (a == "--device")
      o.device = Device::parse(value());
    else if (a == "--graph" || a == "-G" || a == "--cudagraph") {
      o.graph_launches = parse_int(a, value(), 0, 1 << 20);
      o.graph = o.graph_launches > 0;
    }
    else if (a == "--json")
      o.json_path = value();
    else if (a == "--svg")
      o.svg_path = value();
    else if (a == "--md")
      o.md_path = value();
    else if (a == "--tune")
      o.tune_path = value();
    else if (a == "--comm-hint") {
      std::string kv = value();
      auto eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) bad("--comm-hint wants KEY=VALUE, got '" + kv + "'");
      o.comm_hints.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
    }
    else if (a == "--png")
      o.png_path = value();
    else if (a == "--timeout" || a == "-T") {
      o.timeout_s = parse_int(a, value(), 1, 1 << 20);
    } else {
      bad("unknown flag '" + a + "'");
    }
  }
  if (o.help) return o;
  if (positional.empty()) bad("no collective given: commx-bench <collective> [options]");
  if (positional.size() > 1) bad("unexpected argument '" + positional[1] + "'");
  if (positional[0] == "all") {
    o.colls = all_colls();
  } else {
    for (const auto& s : split(positional[0], ',')) o.colls.push_back(parse_coll(s));
  }
  if (o.min_bytes > o.max_bytes)
    bad("-b " + std::to_string(o.min_bytes) + " is larger than -e " + std::to_string(o.max_bytes));
  if (o.backends.empty()) o.backends.push_back({o.device.is_cuda() ? "cuda" : "cpu", ""});
  if (o.graph && !o.device.is_cuda())
    bad(std::string(o.graph_launches ? "-G" : "--graph") +
        " needs --device cuda: CUDA graphs capture GPU work, CPU backends have none");
  if (!o.png_path.empty() && o.svg_path.empty()) bad("--png needs --svg (the PNG is drawn from it)");
  return o;
}

std::vector<uint64_t> size_list(const Options& o) {
  std::vector<uint64_t> sizes;
  for (uint64_t s = o.min_bytes; s <= o.max_bytes;) {
    sizes.push_back(s);
    uint64_t next = o.step_bytes
                        ? s + o.step_bytes
                        : static_cast<uint64_t>(std::ceil(static_cast<double>(s) * o.step_factor));
    if (next <= s) next = s + 1;  // -b 0 with -f: keep walking
    s = next;
  }
  return sizes;
}

std::string nccl_tests_parameter_line(const Options& o) {
  std::ostringstream s;
  s << "# nThread " << o.nthreads << " nGpus " << o.ngpus << " minBytes " << o.min_bytes
    << " maxBytes " << o.max_bytes << " step: ";
  if (o.step_bytes)
    s << o.step_bytes << "(bytes)";
  else
    s << std::defaultfloat << o.step_factor << "(factor)";
  s << " warmup iters: " << o.warmup << " iters: " << o.iters << " agg iters: " << o.agg_iters
    << " validation: " << (o.check ? 1 : 0) << " graph: " << o.graph_launches;
  return s.str();
}

std::string usage() {
  return R"(usage: commx-bench <collective>[,<collective>...]|all [options]
collectives: all_reduce all_gather reduce_scatter all_to_all broadcast reduce gather scatter
             sendrecv (ping-pong between rank pairs) barrier
nccl-tests flags:
  -b SIZE  minimum size in bytes (K/M/G suffixes; default 8)
  -e SIZE  maximum size in bytes (default 32M)
  -f F     size step factor (default 2)          -i SIZE  additive size step instead of -f
  -d T     data type: float, double, half, bf16, fp8e4m3, fp8e5m2, int8, uint8, int32, int64,
           uint32, uint64, a comma list, or all (default float)
  -o OP    sum, prod, min, max, avg, band, bor, bxor, premul_sum[:factor], a list, or all
           (mulsum is nccl-tests' name of premul_sum)
  -r R     root rank (default 0)
  -w N     warm-up iterations (default 5)       -n N  timed iterations (default 20)
  -m N     ops per timed batch (agg iters; default 0: batches of about 20 us per size)
  -c 0|1   check every result against a host reference (default 1)
  -a 0-3   time reported over the ranks: 0 rank 0, 1 mean, 2 min, 3 max (default 3)
  -z 0|1   blocking: wait for each op to complete before starting the next (default 0)
  -N N     run the whole sweep N times, printing each (default 1; 0: until interrupted)
  -G N     CUDA graph launches: N > 0 captures each op in a graph (cuda devices only)
  -T S     per-op timeout in seconds (default 120; also --timeout)
  -t 1, -g 1   threads per process and GPUs per thread: one rank per process, so only 1
Long forms as nccl-tests spells them (--minbytes, --op, --agg_iters, --run_cycles ...) work too.
commx flags:
  --backend a,b:algo   backends to compare on the same buffers (default cpu, or cuda on GPUs);
                       "name:algo" passes the algorithm hint; rows show time ratio vs the first
  --np N               spawn N local ranks (fork + a TCP store on 127.0.0.1) when started alone
  --inplace 0|1        only out-of-place (0) or only in-place (1) runs (default: both)
  --device cpu|cuda[:i]   buffers on this device (default cpu)
  --json FILE          machine header + one object per row
  --svg FILE           latency and busbw against size, one line per backend with its
                       min-max band; a PNG beside it (x.png) when rsvg-convert is installed
  --png FILE           the PNG's path instead
  --md FILE            markdown tables: per size, each backend's time, busbw and ratio
  --tune FILE          write the per-size fastest algorithm (tuning table, COMMX_TUNING_FILE)
                       for this world size and link; rows of others already in FILE stay
  --comm-hint K=V      a hint for the measured comms (repeatable), e.g. transport=tcp
)";
}

}  // namespace commx::bench
