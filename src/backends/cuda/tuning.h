// Algorithm selection of the cuda backend: size thresholds (defaults measured with the GPU
// benchmark, see docs/cuda.md), overridable by comm hints, op hints and COMMX_* variables.
// Layer: backends (cuda).
#pragma once

#include <cstdint>
#include <string>

#include "commx/options.h"

namespace commx::cuda {

// kHierarchical: ranks on several hosts (hierarchy.h); never chosen by size alone.
enum class AllReduceAlgo { kLL, kLL128, kFlat, kTwoShot, kHierarchical, kNccl };
const char* algo_name(AllReduceAlgo a);

struct Tuning {
  bool dda_enable = true;         // COMMX_DDA_ENABLE (alias RCCL_DDA_ENABLE)
  uint64_t ll_max_bytes = 0;      // COMMX_DDA_LL_MAX_BYTES / hint dda_ll_max_bytes
  // all_reduce takes LL128 for ll128_min_bytes < bytes <= ll128_max_bytes, before LL and flat
  // (COMMX_DDA_LL128_MIN_BYTES / _MAX_BYTES, hints dda_ll128_min_bytes / dda_ll128_max_bytes).
  uint64_t ll128_min_bytes = 0;
  uint64_t ll128_max_bytes = 0;
  uint64_t flat_max_bytes = 0;    // COMMX_DDA_FLAT_MAX_BYTES / hint dda_flat_max_bytes
  uint64_t tree_max_bytes = 0;    // COMMX_DDA_TREE_MAX_BYTES / hint dda_tree_max_bytes
  uint64_t buffer_bytes = 0;      // COMMX_CUDA_BUFFER_BYTES: one half of the registered buffer
  int max_blocks = 0;             // COMMX_CUDA_MAX_BLOCKS: latency paths (LL, flat)
  int max_blocks_large = 0;       // COMMX_CUDA_MAX_BLOCKS_LARGE: bandwidth paths (two-shot, exchange)
  // COMMX_CUDA_POLL_SLEEP_NS / hint poll_sleep_ns: the longest sleep between two polls of a
  // device-side wait once it has missed kTightPolls times (sync_device.cuh); 0 never sleeps.
  unsigned int poll_sleep_ns = 0;

  // Defaults for `world` ranks on a GPU with `sms` multiprocessors, then env, then comm hints.
  // ll128_links: the GPUs are linked so that LL128 is safe (PeerMemory::atomic_links); when false
  // LL128 is used only where env or hints ask for it.
  static Tuning resolve(int world, int sms, const Hints& comm_hints, bool ll128_links = true);
};

// Picks the all-reduce algorithm for `bytes` on one host; op hint "algorithm" (ll, ll128, flat,
// two_shot, hierarchical, nccl) wins.
// Throws InvalidArgument (message prefixed by `where`) for an unknown hint value.
AllReduceAlgo choose_allreduce(const Tuning& t, uint64_t bytes, const Hints& op_hints,
                               const std::string& where = {});

// Grid size for a kernel that moves `bytes` per rank (512 threads x 16 bytes per block pass).
int blocks_for(uint64_t bytes, int max_blocks);
// Grid size of an LL kernel moving `bytes` of payload: one 8-byte line per thread when possible
// (a thread that polls two lines pays the local load latency twice: 8 KiB took 3.3 us vs 2.6 us).
int ll_blocks(uint64_t bytes, int max_blocks);
// Grid size of the LL128 kernel moving `bytes` of payload: one 128-byte line (120 payload bytes)
// per 8 threads.
int ll128_blocks(uint64_t bytes, int max_blocks);
// Threads per block of the LL kernels: 512, or COMMX_CUDA_LL_THREADS (64..512, a multiple of 32):
// fewer threads spread the same lines over more SMs.
int ll_threads();

}  // namespace commx::cuda
