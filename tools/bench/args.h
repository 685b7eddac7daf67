// Command line of commx-bench: nccl-tests' flags plus commx's own (see docs/bench.md).
// Layer: tools/bench (pure parsing, unit-tested).
#pragma once

#include <cstdint>
#include <string>
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
  bool check = true;
  std::vector<BackendSpec> backends;  // empty: "cpu" (or "cuda" on a GPU device)
  int np = 0;                         // 0: one rank per process from the environment
  int inplace = -1;                   // -1 both, 0 out-of-place only, 1 in-place only
  Device device = Device::cpu();
  bool graph = false;
  std::string json_path, svg_path, tune_path, md_path;
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

}  // namespace commx::bench
