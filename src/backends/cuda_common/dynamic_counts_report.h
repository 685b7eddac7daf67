// Where a GPU backend's all_to_all_v_dynamic reports a failed agreed check (dynamic_a2a_check.h):
// a small record in host-mapped memory that the device fills and the host takes. Every rank finds
// the same problem before any data moves and all its collectives still complete, so the report
// fails one Work and the comm stays usable. Layer: backends (GPU), shared by cuda and nccl.
#pragma once

#include <cstdint>
#include <exception>
#include <mutex>
#include <string>

namespace commx::cuda {

// Written by one device thread per rank: the fields, a system fence, then `set`. While `set` is 1
// the device leaves the record alone (the first report is kept until the host takes it).
struct DynamicCountsReport {
  int set;
  int op;  // commx::OpType of the failing op
  unsigned long long seq;
  long long problem[6];  // DynamicCountsProblem kind, rank, a, b, c; then experts per rank
};

// Takes the record when it is set by an op numbered at most `work_seq` (the Work being polled: the
// op itself, or a later one when the failing op's Work was never asked, e.g. a graph replay), and
// returns the error naming that op; else null. `mu` serialises takers.
std::exception_ptr take_dynamic_counts_error(volatile DynamicCountsReport* r, uint64_t work_seq,
                                             std::mutex& mu, const std::string& where);

}  // namespace commx::cuda
