// CPU-only tests of the cuda backend's host grouping (the hierarchical path's layout): which
// ranks share a host, local index, host index, inter-host groups, forced hosts, shared GPUs.
// Layer: tests (runs in CI without a GPU).
#include "cuda/host_layout.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "commx/error.h"

namespace commx::cuda {
namespace {

std::vector<RankPlace> places(const std::vector<std::string>& hosts, bool distinct_gpus = true) {
  std::vector<RankPlace> p;
  for (size_t r = 0; r < hosts.size(); ++r)
    p.push_back({hosts[r], distinct_gpus ? "0000:" + std::to_string(r) + ":00.0" : "0000:01:00.0"});
  return p;
}

TEST(HostLayout, DetectedHostsInterleaved) {
  // Ranks 0,2,4 on host a and 1,3,5 on host b: hosts numbered by lowest rank.
  auto p = places({"a", "b", "a", "b", "a", "b"});
  for (int r = 0; r < 6; ++r) {
    HostLayout l = host_layout(p, r, 0);
    EXPECT_EQ(l.hosts, 2);
    EXPECT_TRUE(l.uniform);
    EXPECT_TRUE(l.hierarchical());
    EXPECT_EQ(l.host, r % 2) << r;
    EXPECT_EQ(l.local_size, 3);
    EXPECT_EQ(l.local_rank, r / 2) << r;
    EXPECT_EQ(l.local_ranks, (r % 2 ? std::vector<int>{1, 3, 5} : std::vector<int>{0, 2, 4}));
    std::vector<int> inter{(r / 2) * 2, (r / 2) * 2 + 1};
    EXPECT_EQ(l.inter_ranks, inter) << r;
    EXPECT_EQ(l.host_ranks, (std::vector<std::vector<int>>{{0, 2, 4}, {1, 3, 5}}));
    EXPECT_FALSE(l.gpu_shared);
    EXPECT_EQ(l.inter_gpu_shared, "");
  }
}

TEST(HostLayout, OneHostIsNotHierarchical) {
  auto p = places({"a", "a", "a"});
  HostLayout l = host_layout(p, 1, 0);
  EXPECT_EQ(l.hosts, 1);
  EXPECT_EQ(l.local_rank, 1);
  EXPECT_EQ(l.local_size, 3);
  EXPECT_FALSE(l.hierarchical());
  EXPECT_EQ(l.inter_ranks, std::vector<int>{1});
}

TEST(HostLayout, UnequalHostsAreNotUniform) {
  auto p = places({"a", "a", "b"});
  HostLayout l = host_layout(p, 2, 0);
  EXPECT_EQ(l.hosts, 2);
  EXPECT_EQ(l.host, 1);
  EXPECT_EQ(l.local_size, 1);
  EXPECT_FALSE(l.uniform);
  EXPECT_FALSE(l.hierarchical());
  EXPECT_TRUE(l.inter_ranks.empty());
}

TEST(HostLayout, ForcedRanksPerHost) {
  // One machine, 4 ranks on 2 GPUs (rank r on GPU r / 2): 2 forced hosts of 2 ranks.
  std::vector<RankPlace> p;
  for (int r = 0; r < 4; ++r) p.push_back({"m", "gpu" + std::to_string(r / 2)});
  for (int r = 0; r < 4; ++r) {
    HostLayout l = host_layout(p, r, 2);
    EXPECT_EQ(l.hosts, 2);
    EXPECT_EQ(l.host, r / 2);
    EXPECT_EQ(l.local_rank, r % 2);
    EXPECT_EQ(l.local_size, 2);
    EXPECT_EQ(l.local_ranks, (std::vector<int>{r / 2 * 2, r / 2 * 2 + 1}));
    EXPECT_EQ(l.inter_ranks, (std::vector<int>{r % 2, r % 2 + 2}));
    EXPECT_TRUE(l.hierarchical());
    EXPECT_TRUE(l.gpu_shared);              // the full comm cannot be one NCCL comm
    EXPECT_EQ(l.inter_gpu_shared, "");      // but every inter-host group can
  }
  // The same 4 ranks with rank r on GPU r % 2: inter-host groups {0,2} and {1,3} share GPUs.
  for (int r = 0; r < 4; ++r) p[r].gpu = "gpu" + std::to_string(r % 2);
  HostLayout bad = host_layout(p, 3, 2);
  EXPECT_NE(bad.inter_gpu_shared.find("ranks 0 and 2"), std::string::npos) << bad.inter_gpu_shared;
  // One rank per host on 2 GPUs: plain NCCL across hosts.
  p.resize(2);
  p[1].gpu = "gpu1";
  HostLayout one = host_layout(p, 1, 1);
  EXPECT_EQ(one.hosts, 2);
  EXPECT_EQ(one.local_size, 1);
  EXPECT_EQ(one.local_rank, 0);
  EXPECT_EQ(one.inter_ranks, (std::vector<int>{0, 1}));
  EXPECT_FALSE(one.gpu_shared);
  // A forced count that does not divide the world: the last host is smaller.
  auto q = places({"m", "m", "m"});
  HostLayout odd = host_layout(q, 2, 2);
  EXPECT_EQ(odd.hosts, 2);
  EXPECT_FALSE(odd.uniform);
}

TEST(HostLayout, ForcedHostMustNotSpanMachines) {
  auto p = places({"a", "a", "b", "b"});
  try {
    host_layout(p, 0, 4, "[comm 'x' rank 0/4] cuda init: ");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("ranks 0 and 2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("comm 'x'"), std::string::npos) << e.what();
  }
  // Forcing a finer split than the machines is fine.
  EXPECT_EQ(host_layout(p, 3, 1).hosts, 4);
}

TEST(HostLayout, RanksPerHostOption) {
  unsetenv("COMMX_CUDA_RANKS_PER_HOST");
  EXPECT_EQ(ranks_per_host_option({}, ""), 0);
  setenv("COMMX_CUDA_RANKS_PER_HOST", "2", 1);
  EXPECT_EQ(ranks_per_host_option({}, ""), 2);
  EXPECT_EQ(ranks_per_host_option({{"ranks_per_host", "4"}}, ""), 4);  // the hint wins
  for (const char* bad : {"0", "-1", "two", "2x", ""}) {
    setenv("COMMX_CUDA_RANKS_PER_HOST", bad, 1);
    if (!*bad) {
      EXPECT_EQ(ranks_per_host_option({}, ""), 0);  // empty = unset
      continue;
    }
    try {
      ranks_per_host_option({}, "ctx: ");
      ADD_FAILURE() << "no error for '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("COMMX_CUDA_RANKS_PER_HOST"), std::string::npos);
    }
  }
  unsetenv("COMMX_CUDA_RANKS_PER_HOST");
}

TEST(HostLayout, ShardPlanCoversEveryElementOnce) {
  for (int64_t elem : {1, 2, 4, 8})
    for (int local = 1; local <= 8; ++local)
      for (int64_t n : {0, 1, 7, 15, 16, 17, 63, 64, 65, 1000, 1000003, (1 << 20) + 7}) {
        ShardPlan p = plan_shards(n, elem, local);
        std::string what = "elem " + std::to_string(elem) + " local " + std::to_string(local) +
                           " n " + std::to_string(n);
        EXPECT_EQ(p.shard * elem % 16, 0) << what;  // shards start 16-byte aligned
        EXPECT_GE(p.tail, 0) << what;
        EXPECT_LT(p.tail, local * 16 / elem) << what;
        std::vector<int> seen(n, 0);
        for (int q = 0; q < local; ++q)
          for (int64_t i = p.begin(q); i < p.begin(q) + p.owned(q, local); ++i) ++seen[i];
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1) << what << " element " << i;
      }
}

}  // namespace
}  // namespace commx::cuda
