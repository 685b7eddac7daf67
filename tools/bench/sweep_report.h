// Output of the GPU sweep: one text line per row on stdout, the JSON rows that
// tools/gpu_bench/report.py merges with symm_mem_bench.py's, and the markdown tables.
// Layer: tools/bench (unit-tested without a GPU).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sweep_args.h"

namespace commx::bench {

struct SweepRow {
  std::string backend, op, dtype, mode;  // backend as given: "cuda", "cuda+fp8", ...
  uint64_t bytes = 0;
  double us = 0;  // median per op over the timed batches
  double algbw = 0, busbw = 0;  // GB/s
  int64_t wrong = 0;
  double error = -1;  // relative L2 error against float64 (-1: not measured)
};

// "cuda  all_reduce     bfloat16 graph         1024       2.10 us     0.49 GB/s busbw ..."
std::string sweep_row_line(const SweepRow& r);
// "init  cuda  ranks 2 create 1.0 ms, create + first all_reduce 2.0 ms"
std::string sweep_init_line(const std::string& backend, int ranks, double create_ms,
                            double first_ms);
// {"device": ..., "ranks": N, "rows": [{"backend", "op", "dtype", "mode", "bytes", "time_us",
// "algbw_gbps", "busbw_gbps", "wrong"[, "error"][, "skew_us", "gap_us" (eager)]}, ...]}
std::string sweep_json(const std::string& device, const SweepOptions& o,
                       const std::vector<SweepRow>& rows);
// cuda vs nccl side by side, then every other backend or variant against nccl's row of the same
// op, dtype, mode and size.
std::string sweep_markdown(const std::string& device, const SweepOptions& o,
                           const std::vector<SweepRow>& rows);

}  // namespace commx::bench
