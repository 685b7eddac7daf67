// The cuda backend's all_reduce table as the shared selector uses it, on one host and on several:
// the size thresholds pick a one-host row, several hosts take "hierarchical" (by default, by hint,
// and as every one-host row's fallback), "nccl" stays NCCL's. Runs without a GPU (no kernel is
// launched). Layer: tests.
#include <gtest/gtest.h>

#include <string>

#include "commx/algorithm.h"
#include "commx/error.h"
#include "cuda/allreduce_algorithms.h"

namespace commx::cuda {
namespace {

OpDesc all_reduce(uint64_t bytes, const char* algorithm = nullptr, int world = 4) {
  OpDesc op{.type = OpType::kAllReduce,
            .input = Tensor(nullptr, static_cast<int64_t>(bytes), DataType::kUInt8)};
  if (algorithm) op.hints["algorithm"] = algorithm;
  lower_op(op, 0, world);
  return op;
}

std::string pick(const Tuning& t, const OpDesc& op, const Topology& topo) {
  return select_allreduce(t, op, topo, nullptr, "[test] ").name;
}

const Topology kOneHost{4, "nvlink", false, 1};
const Topology kTwoHosts{4, "net", false, 2};

TEST(CudaAllReduceSelect, HierarchicalIsARow) {
  bool found = false;
  for (const AllReduceAlgorithm& row : allreduce_algorithms())
    if (std::string(row.name) == "hierarchical") {
      found = true;
      EXPECT_EQ(row.collective, Collective::kAllReduce);
      EXPECT_EQ(row.run.id, AllReduceAlgo::kHierarchical);
      EXPECT_EQ(row.run.enqueue, nullptr);  // the backend's Hierarchy runs it
    }
  EXPECT_TRUE(found);
}

TEST(CudaAllReduceSelect, OneHostBySize) {
  const Tuning t = Tuning::resolve(4, 132, {});
  for (uint64_t bytes : {uint64_t{1024}, uint64_t{1} << 20, uint64_t{64} << 20}) {
    const std::string want = algo_name(choose_allreduce(t, bytes, {}));
    EXPECT_EQ(pick(t, all_reduce(bytes), kOneHost), want) << bytes;
    // A hint for several hosts on one host: the thresholds decide.
    EXPECT_EQ(pick(t, all_reduce(bytes, "hierarchical"), kOneHost), want) << bytes;
  }
  EXPECT_EQ(pick(t, all_reduce(1024, "flat"), kOneHost), "flat");
  EXPECT_EQ(pick(t, all_reduce(1024, "two_shot"), kOneHost), "two_shot");
  EXPECT_EQ(pick(t, all_reduce(1024, "tree"), kOneHost), "two_shot");
}

TEST(CudaAllReduceSelect, SeveralHostsTakeHierarchical) {
  const Tuning t = Tuning::resolve(4, 132, {});
  for (uint64_t bytes : {uint64_t{8}, uint64_t{1024}, uint64_t{1} << 20, uint64_t{256} << 20}) {
    EXPECT_EQ(pick(t, all_reduce(bytes), kTwoHosts), "hierarchical") << bytes;
    EXPECT_EQ(pick(t, all_reduce(bytes, "hierarchical"), kTwoHosts), "hierarchical") << bytes;
    // Every one-host row hands over to it.
    for (const char* one_host : {"ll", "ll128", "flat", "one_shot", "tree", "two_shot"})
      EXPECT_EQ(pick(t, all_reduce(bytes, one_host), kTwoHosts), "hierarchical")
          << one_host << ", " << bytes;
    EXPECT_EQ(pick(t, all_reduce(bytes, "nccl"), kTwoHosts), "nccl") << bytes;
  }
}

TEST(CudaAllReduceSelect, DdaOffLeavesSeveralHostsToNccl) {
  Tuning t = Tuning::resolve(4, 132, {});
  t.dda_enable = false;
  EXPECT_EQ(pick(t, all_reduce(1024), kTwoHosts), "nccl");
  EXPECT_EQ(pick(t, all_reduce(1024), kOneHost), "nccl");
  // Hints still choose the native path.
  EXPECT_EQ(pick(t, all_reduce(1024, "hierarchical"), kTwoHosts), "hierarchical");
  EXPECT_EQ(pick(t, all_reduce(1024, "flat"), kTwoHosts), "hierarchical");
}

TEST(CudaAllReduceSelect, UnknownHintNamesTheRows) {
  const Tuning t = Tuning::resolve(4, 132, {});
  try {
    pick(t, all_reduce(1024, "hierarchic"), kTwoHosts);
    FAIL() << "an unknown hint must throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("hierarchical"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[test] "), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace commx::cuda
