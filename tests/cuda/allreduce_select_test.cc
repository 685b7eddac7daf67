// The cuda backend's all_reduce table as the shared selector uses it, on one host and on several:
// the size thresholds pick a one-host row, several hosts take "hierarchical" (by default, by hint,
// and as every one-host row's fallback), "nccl" stays NCCL's. Runs without a GPU (no kernel is
// launched). Layer: tests.
#include <gtest/gtest.h>

#include <string>

#include "commx/algorithm.h"
#include "commx/error.h"
#include "cuda/allreduce_algorithms.h"
#include "cuda/kernels.h"

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

// The two-shot's pieces: each fits a buffer half (a slot per peer for each step), starts on a
// whole pack per owner, and an op takes as few pieces as the half allows, of even sizes.
TEST(CudaAllReduceSelect, TwoShotPiecesFitAHalfAndAreEven) {
  for (int world = 1; world <= 8; ++world)
    for (size_t elem : {size_t(2), size_t(4), size_t(8)})
      for (uint64_t half : {uint64_t(1) << 20, uint64_t(31) << 20, uint64_t(256) << 20})
        for (int64_t bytes : {int64_t(16), int64_t(1000), int64_t(1) << 20, (int64_t(1) << 24) + 48,
                              int64_t(16) << 20, int64_t(32) << 20, int64_t(100000007),
                              int64_t(1) << 30}) {
          const int64_t n = bytes / static_cast<int64_t>(elem);
          const AllReduceShape a{nullptr, nullptr, n, elem, world, -1, half};
          const int64_t piece = two_shot_piece(a);
          const std::string at = "world " + std::to_string(world) + " elem " +
                                 std::to_string(elem) + " half " + std::to_string(half) + " n " +
                                 std::to_string(n);
          ASSERT_GT(piece, 0) << at;
          ASSERT_LE(piece, n) << at;
          EXPECT_LE(two_shot_bytes_needed(piece, elem, world), half) << at;
          const int64_t unit = (16 / static_cast<int64_t>(elem)) * world;
          if (piece < n) EXPECT_EQ(piece % unit, 0) << at;
          if (world == 1) {  // nothing goes through the buffer: one piece
            EXPECT_EQ(piece, n) << at;
            continue;
          }
          // Fewest pieces: as many as pieces of the largest that fits would take; the last one
          // is at most a unit per piece shorter than the others.
          int64_t lo = 1, hi = int64_t(half) / int64_t(elem) / unit + 1;  // in units
          while (hi - lo > 1) {
            const int64_t mid = (lo + hi) / 2;
            (two_shot_bytes_needed(mid * unit, elem, world) <= half ? lo : hi) = mid;
          }
          const int64_t largest = lo * unit, pieces = (n + piece - 1) / piece;
          EXPECT_EQ(pieces, (n + largest - 1) / largest) << at;
          if (pieces > 1) EXPECT_GE(n - (pieces - 1) * piece, piece - unit * pieces) << at;
        }
  // The default 31 MiB halves hold a 16 MiB op in one piece at 2 and 4 ranks.
  for (int world : {2, 4}) {
    const int64_t n = (int64_t(16) << 20) / 2;
    EXPECT_EQ(two_shot_piece({nullptr, nullptr, n, 2, world, -1, uint64_t(31) << 20}), n) << world;
  }
  // 32 MiB at 2 ranks: two pieces of 16 MiB.
  EXPECT_EQ(two_shot_piece({nullptr, nullptr, int64_t(16) << 20, 2, 2, -1, uint64_t(31) << 20}),
            int64_t(8) << 20);
}

}  // namespace
}  // namespace commx::cuda
