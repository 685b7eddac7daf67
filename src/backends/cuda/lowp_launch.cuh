// Launchers of the FP8 kernels (lowp_round.cuh, lowp_two_rank.cuh) for one element type and
// format, included by that type's translation unit (lowp_kernels_<type>.cu).
// Layer: backends (cuda).
#pragma once

#include <string>

#include "cuda/lowp_round.cuh"
#include "cuda/lowp_two_rank.cuh"

namespace commx::cuda {
namespace {

template <typename T, bool kE5, int kW, int kMinBlocks, bool kOneRound>
void launch_rounds(const PeerSet& ps, const LowpRound& r, const lowp::CodecConfig& cfg, int blocks,
                   cudaStream_t s) {
  auto* kernel = lowp_round_kernel<T, kE5, kW, kMinBlocks, kOneRound>;
  static const int fit = resident_blocks(kernel, kThreads);
  launch_kernel(kernel, std::min(blocks, fit), kThreads, s, ps, r, cfg.block, cfg.stochastic);
}

// An op of one round takes its own kernel (the default occupancy only: the other is for
// comparisons).
template <typename T, bool kE5, int kW, int kMinBlocks>
void launch_one(const PeerSet& ps, const LowpRound& r, const lowp::CodecConfig& cfg, int blocks,
                cudaStream_t s) {
  if constexpr (kMinBlocks == 1) {
    if (r.rounds == 1 || t_kernel_preload)  // preloading: both kernels
      launch_rounds<T, kE5, kW, kMinBlocks, true>(ps, r, cfg, blocks, s);
    if (r.rounds == 1) return;
  }
  launch_rounds<T, kE5, kW, kMinBlocks, false>(ps, r, cfg, blocks, s);
}

// The kernel for the op: the two-rank kernel where it fits (lowp_two_rank.cuh), else the round
// kernel for the comm's world size: 2 and 4 ranks have their own. COMMX_CUDA_LOWP_KERNEL=sized
// runs the round kernels only, =generic the one for any size (comparisons).
// COMMX_CUDA_LOWP_BLOCKS_PER_SM=2 picks the round kernels built with 64 registers per thread and
// two blocks of threads per SM (default 1: up to 128 registers, one block).
template <typename T, bool kE5>
cudaError_t launch_typed(const PeerSet& ps, const LowpRound& r, const lowp::CodecConfig& cfg,
                         int blocks, cudaStream_t s) {
  static const bool one = env_int("COMMX_CUDA_LOWP_BLOCKS_PER_SM", 1) == 1;
  static const std::string kind = env_str("COMMX_CUDA_LOWP_KERNEL").value_or("auto");
  const bool generic = kind == "generic";
  if (kind == "auto" && one && launch_two_rank<T, kE5>(ps, r, cfg, blocks, s))
    return cudaGetLastError();
  if (!generic && ps.world == 2) {
    if (one)
      launch_one<T, kE5, 2, 1>(ps, r, cfg, blocks, s);
    else
      launch_one<T, kE5, 2, 2>(ps, r, cfg, blocks, s);
  } else if (!generic && ps.world == 4) {
    if (one)
      launch_one<T, kE5, 4, 1>(ps, r, cfg, blocks, s);
    else
      launch_one<T, kE5, 4, 2>(ps, r, cfg, blocks, s);
  } else if (one) {
    launch_one<T, kE5, 0, 1>(ps, r, cfg, blocks, s);
  } else {
    launch_one<T, kE5, 0, 2>(ps, r, cfg, blocks, s);
  }
  return cudaGetLastError();
}

}  // namespace
}  // namespace commx::cuda
