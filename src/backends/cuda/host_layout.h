// Host grouping of the cuda backend's hierarchical path: from every rank's (host, GPU) place,
// which ranks share this rank's host (the peer-memory group), this rank's index there, and which
// ranks form its inter-host group (the same local index on every host). Pure CPU logic, no CUDA.
// Layer: backends (cuda).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "commx/options.h"

namespace commx::cuda {

// Where one rank runs: a physical host key (hostname + boot id) and its GPU's PCI bus id.
struct RankPlace {
  std::string host;
  std::string gpu;
};

struct HostLayout {
  int hosts = 1;                 // number of hosts (numbered by their lowest rank)
  int host = 0;                  // this rank's host index
  int local_rank = 0;            // this rank's index among the ranks of its host (rank order)
  int local_size = 1;
  std::vector<int> local_ranks;  // comm ranks on this rank's host, ascending
  std::vector<int> inter_ranks;  // comm ranks with this local_rank, one per host, by host index
  std::vector<std::vector<int>> host_ranks;  // comm ranks of every host, by host index
  bool uniform = true;           // every host has the same number of ranks
  bool gpu_shared = false;       // two ranks of the comm share one GPU (NCCL cannot span it)
  std::string inter_gpu_shared;  // non-empty: two ranks of one inter-host group share a GPU
  bool hierarchical() const { return hosts > 1 && uniform; }
};

// The forced number of ranks per host: comm hint "ranks_per_host", else
// COMMX_CUDA_RANKS_PER_HOST; 0 = detect hosts. Throws InvalidArgument (prefixed by `where`) for a
// value that is not a positive integer.
int ranks_per_host_option(const Hints& hints, const std::string& where);

// Groups ranks by host: with ranks_per_host > 0 rank r is on host r / ranks_per_host (a forced
// host boundary, for tests on one machine; every forced host must lie on one physical host),
// else ranks with equal RankPlace::host share a host. Throws InvalidArgument when a forced host
// spans physical hosts.
HostLayout host_layout(const std::vector<RankPlace>& places, int rank, int ranks_per_host,
                       const std::string& where = {});

// How the hierarchical all_reduce splits `n` elements of `elem` bytes among `local` ranks: local
// rank q owns [q * shard, (q + 1) * shard) (shard: whole 16-byte packs, so shards stay aligned),
// and the last local rank also owns the tail [local * shard, n) of fewer than local * 16 / elem
// elements.
struct ShardPlan {
  int64_t shard = 0;
  int64_t tail = 0;
  int64_t begin(int q) const { return q * shard; }
  // Elements local rank q reduces across hosts.
  int64_t owned(int q, int local) const { return shard + (q == local - 1 ? tail : 0); }
};
ShardPlan plan_shards(int64_t n, int64_t elem, int local);

}  // namespace commx::cuda
