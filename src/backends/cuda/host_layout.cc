// Host grouping of the cuda backend's hierarchical path. Layer: backends (cuda).
#include "cuda/host_layout.h"

#include <algorithm>
#include <map>
#include <set>

#include "commx/error.h"
#include "commx/env.h"

namespace commx::cuda {

int ranks_per_host_option(const Hints& hints, const std::string& where) {
  std::string v;
  const char* what = "COMMX_CUDA_RANKS_PER_HOST";
  if (auto it = hints.find("ranks_per_host"); it != hints.end()) {
    v = it->second;
    what = "hint ranks_per_host";
  } else if (auto e = env_str("COMMX_CUDA_RANKS_PER_HOST")) {
    v = *e;
  }
  if (v.empty()) return 0;
  size_t pos = 0;
  long n = -1;
  try {
    n = std::stol(v, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (pos != v.size() || n < 1 || n > (1 << 20))
    throw Error(ErrorCode::kInvalidArgument,
                where + what + "='" + v + "' is not a positive number of ranks per host");
  return static_cast<int>(n);
}

HostLayout host_layout(const std::vector<RankPlace>& places, int rank, int ranks_per_host,
                       const std::string& where) {
  const int world = static_cast<int>(places.size());
  // Host index of every rank: hosts numbered in the order of their lowest rank.
  std::vector<int> host_of(world);
  if (ranks_per_host > 0) {
    for (int r = 0; r < world; ++r) {
      host_of[r] = r / ranks_per_host;
      const int first = host_of[r] * ranks_per_host;
      if (places[r].host != places[first].host)
        throw Error(ErrorCode::kInvalidArgument,
                    where + "ranks_per_host=" + std::to_string(ranks_per_host) + " puts ranks " +
                        std::to_string(first) + " and " + std::to_string(r) +
                        " on one host, but they run on different machines (" + places[first].host +
                        ", " + places[r].host + ")");
    }
  } else {
    std::map<std::string, int> index;
    for (int r = 0; r < world; ++r) {
      auto it = index.emplace(places[r].host, static_cast<int>(index.size())).first;
      host_of[r] = it->second;
    }
  }
  HostLayout l;
  l.hosts = world ? *std::max_element(host_of.begin(), host_of.end()) + 1 : 1;
  l.host = host_of[rank];
  std::vector<std::vector<int>> members(l.hosts);
  for (int r = 0; r < world; ++r) members[host_of[r]].push_back(r);
  l.local_ranks = members[l.host];
  l.host_ranks = members;
  l.local_size = static_cast<int>(l.local_ranks.size());
  for (int i = 0; i < l.local_size; ++i)
    if (l.local_ranks[i] == rank) l.local_rank = i;
  for (const auto& m : members) l.uniform = l.uniform && m.size() == members[0].size();
  std::set<std::pair<std::string, std::string>> gpus;
  for (const auto& p : places) l.gpu_shared = !gpus.insert({p.host, p.gpu}).second || l.gpu_shared;
  if (l.uniform) {
    for (const auto& m : members) l.inter_ranks.push_back(m[l.local_rank]);
    // NCCL refuses two ranks of one comm on a GPU: check every inter-host group, so that all
    // ranks take the same decision.
    for (int i = 0; i < l.local_size && l.inter_gpu_shared.empty(); ++i) {
      std::map<std::pair<std::string, std::string>, int> seen;
      for (const auto& m : members) {
        auto [it, fresh] = seen.emplace(std::make_pair(places[m[i]].host, places[m[i]].gpu), m[i]);
        if (!fresh)
          l.inter_gpu_shared = "ranks " + std::to_string(it->second) + " and " +
                               std::to_string(m[i]) + " (local index " + std::to_string(i) +
                               " of two hosts) share GPU " + places[m[i]].gpu;
      }
    }
  }
  return l;
}

ShardPlan plan_shards(int64_t n, int64_t elem, int local) {
  const int64_t pack = 16 / elem;
  ShardPlan p;
  p.shard = n / (local * pack) * pack;
  p.tail = n - p.shard * local;
  return p;
}

}  // namespace commx::cuda
