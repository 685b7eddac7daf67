// CPU-only tests of the cuda backend's all-reduce selection: the op hint picks any algorithm
// (ll128 also by size where measured: 2 ranks), unknown hints are InvalidArgument, and the LL/LL128 grid
// sizes. Layer: tests (runs in CI without a GPU).
#include "cuda/tuning.h"

#include <gtest/gtest.h>

#include "commx/error.h"

namespace commx::cuda {
namespace {

TEST(CudaTuning, HintPicksTheAlgorithm) {
  Tuning t = Tuning::resolve(2, 132, {});
  for (const char* a : {"ll", "ll128", "flat", "two_shot", "hierarchical", "nccl"}) {
    AllReduceAlgo got = choose_allreduce(t, 1024, {{"algorithm", a}});
    EXPECT_STREQ(algo_name(got), a);
  }
  EXPECT_EQ(choose_allreduce(t, 1024, {{"algorithm", "tree"}}), AllReduceAlgo::kTwoShot);
  EXPECT_EQ(choose_allreduce(t, 1024, {{"algorithm", "one_shot"}}), AllReduceAlgo::kFlat);
  EXPECT_EQ(choose_allreduce(t, 64ull << 20, {{"algorithm", "ll128"}}), AllReduceAlgo::kLL128);
  try {
    choose_allreduce(t, 1024, {{"algorithm", "ll129"}}, "[x] ");
    FAIL() << "an unknown hint must throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("ll128"), std::string::npos) << e.what();
  }
}

TEST(CudaTuning, LL128OnlyWhereMeasured) {
  // 2 ranks: LL up to 32 KiB, LL128 above it up to 4 MiB, then tree.
  Tuning t = Tuning::resolve(2, 132, {});
  EXPECT_EQ(choose_allreduce(t, 32 << 10, {}), AllReduceAlgo::kLL);
  EXPECT_EQ(choose_allreduce(t, (32 << 10) + 2, {}), AllReduceAlgo::kLL128);
  EXPECT_EQ(choose_allreduce(t, 4 << 20, {}), AllReduceAlgo::kLL128);
  EXPECT_EQ(choose_allreduce(t, (4 << 20) + 2, {}), AllReduceAlgo::kTwoShot);
  // More ranks: not measured, so never by size.
  for (int world : {3, 4, 8}) {
    t = Tuning::resolve(world, 132, {});
    for (uint64_t b = 1; b <= (1ull << 34); b *= 2)
      EXPECT_NE(choose_allreduce(t, b, {}), AllReduceAlgo::kLL128) << world << " ranks, " << b;
  }
  // Links that may tear a 128-byte store (PCIe, a shared GPU): never by size, hints still work.
  t = Tuning::resolve(2, 132, {}, false);
  for (uint64_t b = 1; b <= (1ull << 34); b *= 2)
    EXPECT_NE(choose_allreduce(t, b, {}), AllReduceAlgo::kLL128) << "pcie, " << b;
  t = Tuning::resolve(2, 132, {{"dda_ll128_max_bytes", "1M"}, {"dda_ll128_min_bytes", "64K"}}, false);
  EXPECT_EQ(choose_allreduce(t, 256 << 10, {}), AllReduceAlgo::kLL128);
  // Hints move or close the range.
  t = Tuning::resolve(4, 132, {{"dda_ll128_max_bytes", "512K"}, {"dda_ll128_min_bytes", "8K"}});
  EXPECT_EQ(choose_allreduce(t, 8 << 10, {}), AllReduceAlgo::kLL);
  EXPECT_EQ(choose_allreduce(t, 256 << 10, {}), AllReduceAlgo::kLL128);
  t = Tuning::resolve(2, 132, {{"dda_ll128_max_bytes", "0"}});
  EXPECT_EQ(choose_allreduce(t, 256 << 10, {}), AllReduceAlgo::kLL);
}

TEST(CudaTuning, LL128GridOneLinePerEightThreads) {
  const int threads = ll_threads();  // 512 unless COMMX_CUDA_LL_THREADS is set
  EXPECT_EQ(ll128_blocks(1, 132), 1);
  EXPECT_EQ(ll128_blocks(120ull * threads / 8, 132), 1);
  EXPECT_EQ(ll128_blocks(120ull * threads / 8 + 1, 132), 2);
  EXPECT_EQ(ll128_blocks(256 << 10, 132), static_cast<int>(((256 << 10) / 120 + 1) * 8 / threads + 1));
  EXPECT_EQ(ll128_blocks(1ull << 30, 132), 132);
}

}  // namespace
}  // namespace commx::cuda
