// all_to_all_v_dynamic and its MoE dispatch/combine forms on the cuda backend: every form against
// the host reference (random counts with zeros, hot spots, a silent sender, odd row sizes,
// several element sizes) at 2 ranks and at 3 and 4 ranks sharing GPUs, in rounds through a small
// registered buffer, CUDA-graph replays with the counts changed between replays, capacity
// exceeded failing every rank's Work with nothing written and the comm going on, and ranks on
// (forced) separate hosts going through the nccl fallback.
// Layer: tests (label gpu; skips without a GPU).
#include <gtest/gtest.h>

#include "cuda/dynamic_a2a_checks.h"

namespace commx::testing {
namespace {

TEST(CudaAllToAllVDynamic, EveryFormTwoRanks) {
  REQUIRE_GPUS(1);
  EXPECT_EQ(run_ranks(2, two_gpus(),
                      [](RankCtx& ctx) {
                        auto c = make_comm(ctx, "cuda", "dyn2");
                        check_every_form(*c, ctx);
                      }),
            "");
}

TEST(CudaAllToAllVDynamic, ThreeAndFourRanksShareGpus) {
  REQUIRE_GPUS(1);
  for (int world : {3, 4})
    EXPECT_EQ(
        run_ranks(
            world, gpu_count() >= 2 ? 2 : 1,
            [](RankCtx& ctx) {
              auto c = make_comm(ctx, "cuda", "dyn_shared");
              uint32_t seed = 100;
              for (Form f : {Form::kPlain, Form::kDispatch, Form::kCombine})
                for (Pattern p : {Pattern::kRandom, Pattern::kHotSpot, Pattern::kSilentSender})
                  check_one(*c, ctx, f, f == Form::kPlain ? 1 : 2, p, 5, DataType::kBFloat16,
                            seed++);
            }),
        "")
        << "world " << world;
}

TEST(CudaAllToAllVDynamic, WorldOfOne) {
  REQUIRE_GPUS(1);
  EXPECT_EQ(run_ranks(1, 1,
                      [](RankCtx& ctx) {
                        auto c = make_comm(ctx, "cuda", "dyn1");
                        check_one(*c, ctx, Form::kPlain, 1, Pattern::kRandom, 3, DataType::kFloat32,
                                  5);
                        check_one(*c, ctx, Form::kDispatch, 4, Pattern::kRandom, 3,
                                  DataType::kFloat32, 6);
                      }),
            "");
}

// A 1 MiB buffer half: 512 KiB per sender at 2 ranks, so large counts take several rounds.
TEST(CudaAllToAllVDynamic, RoundsThroughASmallBuffer) {
  REQUIRE_GPUS(1);
  EXPECT_EQ(run_ranks(2, two_gpus(),
                      [](RankCtx& ctx) {
                        auto c = make_comm(ctx, "cuda", "dyn_rounds", {{"buffer_bytes", "1M"}});
                        check_one(*c, ctx, Form::kPlain, 1, Pattern::kHotSpot, 4096,
                                  DataType::kBFloat16, 7, 40);
                        check_one(*c, ctx, Form::kDispatch, 2, Pattern::kRandom, 1000,
                                  DataType::kFloat32, 8, 50);
                        check_one(*c, ctx, Form::kCombine, 2, Pattern::kRandom, 7, DataType::kInt8,
                                  9, 9000);
                        // And an ordinary collective after them: the op counters still agree.
                        check_collectives(*c, ctx, 1001, 10, false);
                      }),
            "");
}

// Captured once, replayed with new counts and data each time: the host never sees the counts.
TEST(CudaAllToAllVDynamic, GraphReplayWithChangingCounts) {
  REQUIRE_GPUS(1);
  EXPECT_EQ(run_ranks(2, two_gpus(),
                      [](RankCtx& ctx) {
                        auto c = make_comm(ctx, "cuda", "dyn_graph");
                        check_graph_replays(*c, ctx);
                      }),
            "");
}

// The agreed check fails every rank's op alike, so the comm goes on (no abort).
TEST(CudaAllToAllVDynamic, CapacityErrorLeavesTheCommUsable) {
  REQUIRE_GPUS(1);
  EXPECT_EQ(run_ranks(2, two_gpus(),
                      [](RankCtx& ctx) {
                        auto c = make_comm(ctx, "cuda", "dyn_cap");
                        check_capacity_error_then_go_on(*c, ctx);
                      }),
            "");
}

// Ranks forced onto two hosts (the hierarchical path, no peer memory between them): the op goes
// through the nccl backend's fallback.
TEST(CudaAllToAllVDynamic, SeveralHostsGoThroughNccl) {
  REQUIRE_GPUS(2);
  if (!nccl_loadable()) GTEST_SKIP() << "NCCL cannot be loaded";
  EXPECT_EQ(run_ranks(2, 2,
                      [](RankCtx& ctx) {
                        auto c = make_comm(ctx, "cuda", "dyn_hosts", {{"ranks_per_host", "1"}});
                        check_one(*c, ctx, Form::kDispatch, 2, Pattern::kRandom, 7,
                                  DataType::kBFloat16, 21);
                        check_one(*c, ctx, Form::kCombine, 2, Pattern::kHotSpot, 4096,
                                  DataType::kFloat32, 22);
                        check_capacity_error_then_go_on(*c, ctx);
                      }),
            "");
}

}  // namespace
}  // namespace commx::testing
