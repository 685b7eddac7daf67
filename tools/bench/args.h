// Command line of commx-bench: nccl-tests' flags plus commx's own (see docs/bench.md).
// Layer: tools/bench (pure parsing, unit-tested).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "collective.h"
#include "commx/types.h"

namespace commx::bench {

// "cpu" or "cpu:ring": a backend name and an optional algorithm hint passed with every op.
struct BackendSpec {
  std::string name;
  std::string algorithm;
  std::string label() const { return algorithm.empty() ? name : name + ":" + algorithm; }
};

struct Options {
  std::vector<Coll> colls;
  uint64_t min_bytes = 8;
  uint64_t max_bytes = 32ull << 20;
  double step_factor = 2.0;
  uint64_t step_bytes = 0;  // -i: additive step instead of -f
  std::vector<DataType> dtypes{DataType::kFloat32};
  std::vector<ReduceOp> ops{ReduceOp::SUM};
  int root = 0;
  int warmup = 5;
  int iters = 20;
  int agg_iters = 0;  // -m: ops per timed batch; 0: chosen per size (batches of ~20 us)
  // -a: how one number comes from the ranks' times (nccl-tests' codes). commx-bench's default is
  // the slowest rank (max), nccl-tests' is the average.
  enum class Average { kRank0 = 0, kMean = 1, kMin = 2, kMax = 3 };
  Average average = Average::kMax;
  bool blocking = false;  // -z 1: wait for each op to complete before the next
  int cycles = 1;         // -N: run the whole sweep this many times (0: until interrupted)
  int nthreads = 1;       // -t and -g: accepted as 1 (one rank and device per process)
  int ngpus = 1;
  int graph_launches = 0;  // -G N as given (graph capture is on when N > 0)
  bool check = true;
  std::vector<BackendSpec> backends;  // empty: "cpu" (or "cuda" on a GPU device)
  int np = 0;                         // 0: one rank per process from the environment
  int inplace = -1;                   // -1 both, 0 out-of-place only, 1 in-place only
  Device device = Device::cpu();
  bool graph = false;
  std::vector<std::pair<std::string, std::string>> comm_hints;  // --comm-hint k=v: measured comms
  std::string json_path, svg_path, tune_path, md_path;
  std::string png_path;  // empty: beside the SVG (x.svg -> x.png) when rsvg-convert is there
  double timeout_s = 120;
  bool help = false;
  std::string command_line;
};

// Parses "8", "64K", "1M", "2G", "1KiB", "512B" (K = 1024); throws InvalidArgument.
uint64_t parse_size(const std::string& s);
// Formats bytes the short way used in notes ("64K", "1M").
std::string format_size(uint64_t bytes);
// Parses argv[1..]; throws Error(kInvalidArgument) with a message that names the bad flag.
Options parse_args(int argc, const char* const* argv);
// The list of sizes from min to max by factor (or additive step), as nccl-tests walks them.
std::vector<uint64_t> size_list(const Options& o);
std::string usage();
// The nccl-tests parameter line: "# nThread 1 nGpus 1 minBytes 8 maxBytes 33554432 step: 2(factor)
// warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0" (agg iters 0: chosen per size).
std::string nccl_tests_parameter_line(const Options& o);

}  // namespace commx::bench
