// The cpu backend's own reduction algorithms: all_reduce, reduce and reduce_scatter(_single/_v)
// on forked ranks with each algorithm forced by hint (DDA, RS+AG, single copy, ring, recursive
// doubling), every dtype and op, sizes 0, 1, odd and larger, world sizes 1..8, over shared memory
// and over TCP, against the one reference (conformance/reference.h). The default choice on every
// backend is the conformance suite's (tests/conformance).
#include <gtest/gtest.h>

#include "cpu/reduction_checks.h"

using namespace commx;
using namespace commx::testing;

namespace {

const std::vector<std::string> kAlgos = {"", "dda", "rsag", "cma", "ring", "recursive_doubling"};
// Every algorithm forced by hint (the default choice is the conformance suite's).
const std::vector<std::string> kForcedAlgos = {"dda", "rsag", "cma", "ring", "recursive_doubling"};

void reduce_matrix(RankEnv& env, const std::vector<size_t>& counts,
                   const std::vector<DataType>& dtypes, const std::vector<ReduceKind>& kinds,
                   const std::vector<std::string>& algos, const std::string& transport = "") {
  CommOptions co;
  if (!transport.empty()) co.hints["transport"] = transport;
  auto comm = env.comm("reduce", co);
  check_reductions(env, *comm,
                   {.counts = counts, .dtypes = dtypes, .kinds = kinds, .algos = algos});
  comm->finalize();
}

std::vector<DataType> all_dtypes() {
  std::vector<DataType> v;
  for (int i = 0; i < kNumDataTypes; ++i) v.push_back(static_cast<DataType>(i));
  return v;
}

class ReduceOps : public ::testing::TestWithParam<int> {};

TEST_P(ReduceOps, FullMatrixSmallSizes) {
  int n = GetParam();
  auto res = run_forked(n, [](RankEnv& env) {
    reduce_matrix(env, {0, 1, 7, 130}, all_dtypes(), all_kinds(), kForcedAlgos);
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ReduceOps, ::testing::Values(1, 2, 3, 4, 5, 6, 7, 8));

class ReduceOpsTcp : public ::testing::TestWithParam<int> {};

TEST_P(ReduceOpsTcp, FullMatrixSmallSizes) {
  int n = GetParam();
  auto res = run_forked(n, [](RankEnv& env) {
    reduce_matrix(env, {0, 1, 130}, all_dtypes(), all_kinds(), {"ring", "recursive_doubling"},
                  "tcp");
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ReduceOpsTcp, ::testing::Values(2, 3, 5));

TEST(ReduceOpsLarge, MultiMiB) {
  // Several rounds through the slots (4 MiB) and the rings, single-copy pieces, odd sizes.
  for (int n : {2, 3}) {
    auto res = run_forked(n, [](RankEnv& env) {
      reduce_matrix(env, {(size_t{5} << 20) / 4 + 3}, {DataType::kFloat32}, {ReduceKind::kSum},
                    {"", "dda", "rsag", "cma", "ring"});
      reduce_matrix(env, {(size_t{3} << 20) + 1}, {DataType::kBFloat16, DataType::kInt8},
                    {ReduceKind::kAvg}, {""});
      reduce_matrix(env, {(size_t{2} << 20) + 1}, {DataType::kFloat32}, {ReduceKind::kSum},
                    {"", "ring"}, "tcp");
    });
    EXPECT_TRUE(res.all_ok()) << "world " << n << ": " << res.describe();
  }
}

}  // namespace

namespace {

// Tiny slots, rounds and rings: many rounds and ring wrap-arounds at small sizes, cheaply.
TEST(ReduceOpsSmallSlots, ManyRounds) {
  for (int n : {3, 5}) {
    auto res = run_forked(n, [](RankEnv& env) {
      setenv("COMMX_CPU_SLOT_BYTES", "65536", 1);
      setenv("COMMX_CPU_CHUNK_BYTES", "4096", 1);
      setenv("COMMX_CPU_RING_BYTES", "4096", 1);
      setenv("COMMX_CPU_DDA_MAX_BYTES", "8192", 1);
      reduce_matrix(env, {5000, 30001}, {DataType::kFloat32, DataType::kFloat16, DataType::kInt64},
                    {ReduceKind::kSum, ReduceKind::kAvg}, kAlgos);
    });
    EXPECT_TRUE(res.all_ok()) << "world " << n << ": " << res.describe();
  }
}

}  // namespace
