// The GPU sweep form of commx-bench's command line: local GPU ranks, backends with FP8 variants,
// eager and CUDA-graph-captured runs side by side, CUDA-event timing (see docs/bench.md, "GPU
// sweep"). Its flags (--ranks, --ops, --modes, ...) select it; the nccl-tests form takes a
// positional collective instead. Layer: tools/bench (pure parsing, unit-tested).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "commx/options.h"
#include "commx/types.h"

namespace commx::bench {

// "backend[+variant]" of --backend: `cuda+fp8` / `cuda+fp8x2` run commx's low-precision
// collectives (FP8 on the wire, FP32 sums; x2: the two-term gather), `nccl+fp8` NCCL's native FP8
// all_reduce on the input cast to E4M3.
struct SweepBackend {
  std::string text, backend, variant;
  bool lowp() const { return variant == "fp8" || variant == "fp8x2"; }
  bool native_fp8() const { return backend == "nccl" && variant == "fp8"; }
  bool lowp_commx() const { return lowp() && !native_fp8(); }
};

// Throws Error(kInvalidArgument) for an unknown variant or nccl+fp8x2.
SweepBackend parse_sweep_backend(const std::string& text);
// The comm hints a variant needs (commx FP8 from the first byte on; none for the others).
Hints sweep_backend_hints(const SweepBackend& b);

struct SweepOptions {
  int ranks = 2;  // spawned locally unless a launcher started the ranks
  std::vector<std::string> backends{"cuda", "nccl"};
  std::vector<std::string> dtypes{"bf16", "f32"};
  std::vector<std::string> ops{"all_reduce"};
  std::vector<std::string> modes{"eager", "graph"};
  uint64_t min_bytes = 8, max_bytes = 256ull << 20;
  int factor = 2;
  int reps = 7;        // median over this many timed batches
  int graph_ops = 20;  // ops captured per graph
  std::string json = "gpu_bench.json", md = "gpu_bench.md";
  std::string algo;        // algorithm hint for every op (cuda: ll, flat, tree), empty = auto
  uint64_t error_max = 0;  // --error: measure all_reduce's error up to this size
  // Eager mode as a host-bound client issues: the last rank spins `skew_us` on the host before
  // each op (the ranks arrive apart), every rank `gap_us` (ops arrive with gaps between them).
  double skew_us = 0, gap_us = 0;
  bool help = false;
};

// Whether argv uses the sweep form: one of its own flags appears (--ranks, --ops, --modes, ...).
bool is_sweep_command(int argc, const char* const* argv);
// Parses argv[1..] of the sweep form; throws Error(kInvalidArgument) naming the bad flag.
SweepOptions parse_sweep_args(int argc, const char* const* argv);
// The sizes walked: min, min * factor, ... up to max.
std::vector<uint64_t> sweep_sizes(const SweepOptions& o);
std::string sweep_usage();

}  // namespace commx::bench
