// The conformance suite's worlds: every backend present (cpu over shared memory and over TCP,
// gloo, mpi under mpirun, cuda and nccl on GPUs) at world sizes 1..8, and the rank-side helpers a
// case uses (buffers on the backend's device, checks against conformance/reference.h, the
// backend's own claims). A case is written once, against the public Comm API, and runs on every
// world. Layer: tests.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "commx/comm.h"
#include "conformance/reference.h"

namespace commx::testing {

// A backend and the comm hints that choose its path (e.g. the cpu backend over TCP).
struct Target {
  std::string label;  // cpu_shm, cpu_tcp, gloo, mpi, cuda, nccl
  std::string backend;
  Hints hints;
  bool on_gpu = false;
};

struct World {
  Target target;
  int size = 1;
};

// Every (backend, world size) this build and machine offer. Under mpirun only the mpi backend,
// at mpirun's world size; elsewhere every other backend present.
std::vector<World> worlds();
// The worlds of the large-size cases: those of up to 4 ranks (the paths that chunk and pipeline
// do not depend on the world size, and 8 processes moving MiBs on 2 cores are slow).
std::vector<World> large_worlds();
std::string world_name(const ::testing::TestParamInfo<World>& info);

// Elements on the target's device and a host copy to fill from and read into. Copies share
// the memory.
class Buffer {
 public:
  Buffer(const Target& target, int device, const Buf& host, size_t count, DataType dtype);
  Tensor tensor() const { return slice(0, count_); }
  Tensor slice(size_t offset, size_t count) const;
  // The elements as they are now on the device (count * dtype_size + 1 bytes).
  Buf read() const;
  size_t count() const { return count_; }
  DataType dtype() const { return dtype_; }

 private:
  struct Memory;
  std::shared_ptr<Memory> mem_;
  size_t count_;
  DataType dtype_;
  Device device_;
};

// One rank of a world, inside the rank's process.
class Rank {
 public:
  Rank(const World& world, int rank, std::shared_ptr<Comm> comm);
  const int rank;
  const int size;
  Comm& comm() { return *comm_; }
  const Target& target() const { return target_; }

  // `data` (count elements of dtype) on the device.
  Buffer upload(const Buf& data, size_t count, DataType dtype);
  // `count` elements of a byte pattern no result has (a result must overwrite it).
  Buffer blank(size_t count, DataType dtype);

  // Records a failure (printed with the world and rank) and goes on; returns ok.
  bool check(bool ok, const std::string& what);
  // got's first `count` elements (from element `offset`) against want's (reference.h rules).
  bool expect(const Buf& want, const Buffer& got, const std::string& what, ReduceOp op = {},
              size_t offset = 0, size_t count = SIZE_MAX);
  // The dtypes and reduce ops to sweep: every one, except on worlds of 3 ranks or more over a
  // network (TCP, Gloo), where ops cost milliseconds on 2 cores: there one dtype of each element
  // size and kind, and one op of each family (arithmetic, ordering, averaging, bitwise).
  const std::vector<DataType>& dtypes() const;
  const std::vector<ReduceOp>& reduce_ops() const;
  // Whether the backend claims the form `type` on `dtype` with `kind` (backend_runs).
  bool claims(OpType type, DataType dtype, ReduceKind kind = ReduceKind::kSum);
  // `fn` must fail with Unsupported (an op the backend does not claim), naming the op.
  void expect_unsupported(const std::function<void()>& fn, const std::string& what);
  int failures() const { return failures_; }

 private:
  bool sweeps_less() const;
  Target target_;
  int device_;
  std::shared_ptr<Comm> comm_;
  int failures_ = 0;
};

// Runs body on every rank of `world` (forked processes meeting through a TCP store on loopback;
// under mpirun, this process is the rank) and fails the current test for any rank's failure.
void run_world(const World& world, const std::function<void(Rank&)>& body);

// Element counts of the cases: empty, one and odd sizes (large sizes are cases of their own).
inline const std::vector<size_t>& case_counts() {
  static const std::vector<size_t> c = {0, 1, 7, 1029};
  return c;
}
// "all_reduce bf16 AVG count 7 root 2" for failure messages.
std::string describe(const char* op, DataType dtype, size_t count, int root = -1,
                     const ReduceOp* rop = nullptr);

using ConformanceTest = ::testing::TestWithParam<World>;

}  // namespace commx::testing

// Runs the test suite `SUITE` (a ConformanceTest) on every world.
#define COMMX_CONFORMANCE_WORLDS(SUITE)                                                     \
  INSTANTIATE_TEST_SUITE_P(Backends, SUITE, ::testing::ValuesIn(::commx::testing::worlds()), \
                           ::commx::testing::world_name)
// Runs the test suite `SUITE` (a ConformanceTest) on every world of large_worlds() (none under
// mpirun with more than 4 ranks).
#define COMMX_CONFORMANCE_LARGE_WORLDS(SUITE)                                          \
  GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(SUITE);                               \
  INSTANTIATE_TEST_SUITE_P(Backends, SUITE,                                           \
                           ::testing::ValuesIn(::commx::testing::large_worlds()), \
                           ::commx::testing::world_name)
