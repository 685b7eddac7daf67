// all_to_all_v_dynamic and its MoE dispatch/combine forms on the nccl backend's fallback (counts
// all-gathered and checked on the device, max-sized windows through grouped send/recv): every
// form against the host reference (random counts with zeros, hot spots, a silent sender, odd row
// sizes, several element sizes), rounds through a small staging buffer, CUDA-graph replays with
// the counts changed between replays, and a capacity error that fails every rank's Work and leaves
// the comm usable. NCCL holds one rank per GPU: 2 ranks need 2 GPUs, 3 and 4 ranks as many.
// Layer: tests (label gpu; skips without the GPUs or NCCL).
#include <gtest/gtest.h>

#include "cuda/dynamic_a2a_checks.h"

namespace commx::testing {
namespace {

#define REQUIRE_NCCL_GPUS(N)                                                                    \
  do {                                                                                          \
    if (gpu_count() < (N)) GTEST_SKIP() << "needs " << (N) << " GPU(s), found " << gpu_count(); \
    if (!nccl_loadable()) GTEST_SKIP() << "NCCL cannot be loaded";                              \
  } while (0)

TEST(NcclAllToAllVDynamic, EveryFormTwoRanks) {
  REQUIRE_NCCL_GPUS(2);
  EXPECT_EQ(run_ranks(2, 2,
                      [](RankCtx& ctx) {
                        auto c = make_comm(ctx, "nccl", "ndyn2");
                        check_every_form(*c, ctx);
                      }),
            "");
}

TEST(NcclAllToAllVDynamic, ThreeAndFourRanks) {
  for (int world : {3, 4}) {
    REQUIRE_NCCL_GPUS(world);
    EXPECT_EQ(run_ranks(world, world,
                        [](RankCtx& ctx) {
                          auto c = make_comm(ctx, "nccl", "ndyn_more");
                          uint32_t seed = 100;
                          for (Form f : {Form::kPlain, Form::kDispatch, Form::kCombine})
                            for (Pattern p :
                                 {Pattern::kRandom, Pattern::kHotSpot, Pattern::kSilentSender})
                              check_one(*c, ctx, f, f == Form::kPlain ? 1 : 2, p, 5,
                                        DataType::kBFloat16, seed++);
                        }),
              "")
        << "world " << world;
  }
}

// 64 KiB of staging per direction: large counts take many rounds, and the ops after them agree.
TEST(NcclAllToAllVDynamic, RoundsThroughASmallStaging) {
  REQUIRE_NCCL_GPUS(2);
  EXPECT_EQ(run_ranks(2, 2,
                      [](RankCtx& ctx) {
                        auto c = make_comm(ctx, "nccl", "ndyn_rounds",
                                           {{"dynamic_staging_bytes", "64K"}});
                        check_one(*c, ctx, Form::kPlain, 1, Pattern::kHotSpot, 4096,
                                  DataType::kBFloat16, 7, 4);
                        check_one(*c, ctx, Form::kDispatch, 2, Pattern::kRandom, 1000,
                                  DataType::kFloat32, 8, 5);
                        check_one(*c, ctx, Form::kCombine, 2, Pattern::kRandom, 7, DataType::kInt8,
                                  9, 900);
                        check_collectives(*c, ctx, 1001, 10, false);
                      }),
            "");
}

TEST(NcclAllToAllVDynamic, GraphReplayWithChangingCounts) {
  REQUIRE_NCCL_GPUS(2);
  EXPECT_EQ(run_ranks(2, 2,
                      [](RankCtx& ctx) {
                        auto c = make_comm(ctx, "nccl", "ndyn_graph");
                        check_graph_replays(*c, ctx, true);
                      }),
            "");
}

TEST(NcclAllToAllVDynamic, CapacityErrorLeavesTheCommUsable) {
  REQUIRE_NCCL_GPUS(2);
  EXPECT_EQ(run_ranks(2, 2,
                      [](RankCtx& ctx) {
                        auto c = make_comm(ctx, "nccl", "ndyn_cap");
                        check_capacity_error_then_go_on(*c, ctx);
                      }),
            "");
}

}  // namespace
}  // namespace commx::testing
