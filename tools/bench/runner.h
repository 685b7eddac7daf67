// The measuring loop of commx-bench: for each collective, dtype, op and size, every backend runs
// on the same buffers; each result is checked against a host reference, then timed (median, mean,
// min and max over batches of back-to-back ops after a barrier, combined over ranks as -a says). Layer: tools/bench.
#pragma once

#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "args.h"
#include "commx/comm.h"
#include "memory.h"
#include "row.h"

namespace commx::bench {

struct BenchComm {
  BackendSpec spec;
  std::shared_ptr<Comm> comm;
};

class Runner {
 public:
  // `control` is a CPU comm over the same ranks used for the barrier before timing and for
  // reducing times and error counts across ranks.
  Runner(const Options& o, Comm& control, std::vector<BenchComm> comms, Memory& mem,
         std::ostream* out);
  ~Runner();
  // Runs everything; returns all rows (identical on every rank).
  std::vector<Row> run();
  // Total number of wrong elements seen.
  int64_t total_wrong() const { return total_wrong_; }

 private:
  struct Point;
  void run_collective(Coll c, DataType dt, ReduceOp op, std::vector<Row>& rows);
  Row measure(const BenchComm& bc, const Point& p, bool in_place);
  bool supported(const BenchComm& bc, Coll c, DataType dt, ReduceOp op);
  void fill_inputs(const Point& p, bool in_place);
  int64_t check_outputs(const Point& p, bool in_place);
  // Combines each rank's values into one (the same on every rank) as -a says.
  void reduce_over_ranks(double* v, int n);

  const Options& o_;
  Comm& control_;
  std::vector<BenchComm> comms_;
  Memory& mem_;
  std::ostream* out_;
  int rank_, size_;
  void* send_ = nullptr;  // device buffers of the largest size
  void* recv_ = nullptr;
  size_t capacity_ = 0;
  std::vector<uint8_t> host_;  // staging for fills and checks
  int64_t total_wrong_ = 0;
};

}  // namespace commx::bench
