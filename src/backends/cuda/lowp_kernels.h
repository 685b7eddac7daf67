// The fused low-precision kernel of the cuda backend: one launch moves one round (a chunk of every
// rank's data) of an FP8 all_reduce, reduce_scatter, all_gather or all_to_all through the peers'
// registered buffers (with slots in the op counter's buffer half, the default: every round of the
// op in one launch, round i taking op counter epoch + i). Each block of threads owns the same codec
// blocks on every rank and in every round, and meets its peers' twin blocks at per-block flags, so
// blocks pipeline independently:
//   P1  encode this rank's data and write it into the destination ranks' slots
//   B   per-block barrier
//   P2  (reductions) the owner sums its codec blocks in FP32 in rank order and re-encodes them into
//       every rank's gather slot (all_reduce) or rounds them into the output (reduce_scatter)
//   B
//   P3  decode the slots into the outputs
// Same bits as the host path (lowp_collectives.cc). Layer: backends (cuda).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "commx/types.h"
#include "cuda/kernel_params.h"
#include "lowp/fp8_codec.h"

namespace commx::cuda {

enum class LowpMode : int { kAllReduce, kReduceScatter, kAllGather, kAllToAll };

struct LowpRound {
  LowpMode mode;
  // `rounds` rounds of `chunk` elements (the slots' layout holds `chunk`): round i moves elements
  // [i * chunk, i * chunk + chunk) of every range below (counts are the ranges' whole lengths).
  int64_t rounds, chunk;
  // P1: what this rank sends to rank q (all_gather: in[0] goes to every rank).
  const char* in[kMaxRanks];
  int64_t n_in[kMaxRanks];
  // P2: this rank's own contribution to its reduced chunk, of n_own elements.
  const char* own;
  int64_t n_own;
  // P3 (and reduce_scatter's P2 into out[rank]): where what came from rank q goes.
  char* out[kMaxRanks];
  int64_t n_out[kMaxRanks];
  // Slots: slot p of area X at data[r] + X_off + p * cap.
  uint64_t recv_off, gather_off, cap;
  bool avg, two_term;
  bool leading, trailing;  // barrier before P1 (first round) / after the last phase (last round)
  // Slots in the op counter's buffer half (no leading/trailing barriers needed); else both halves
  // and one round per launch.
  bool halves;
  // all_reduce's gather as LL128 line streams where the round allows (lowp_lines.cuh); at 2
  // ranks with lines_p1, P1's codes too.
  bool lines, lines_p1;
  // The two-rank kernel (lowp_two_rank.cuh): the most units a warp streams in one of its rounds
  // (0: not taken). It lays out its own rounds (chunk, rounds) in the op counter's halves.
  int64_t line_units;
  // Stochastic rounding: seed, streams of P1 and P2 (and P2's residual), offsets of element 0 of
  // the first round.
  uint64_t seed, sr1, sr2, sr2b;
  int64_t sr_off1, sr_off2;
  unsigned long long* stats;  // codec counters (device), nullable
  bool full_stats;            // every counter (COMMX_LOW_PRECISION_STATS); else saturation only
};

// Enqueues r.rounds rounds. `blocks` must be the same on every rank.
cudaError_t launch_lowp_round(const PeerSet& ps, const LowpRound& r, DataType dtype,
                              const lowp::CodecConfig& cfg, int blocks, cudaStream_t s);

// The launchers of one element type and FP8 format each (lowp_kernels_<type>.cu for E4M3,
// lowp_kernels_<type>_e5m2.cu for E5M2): translation units of their own, compiled in parallel.
using LowpRoundLauncher = cudaError_t(const PeerSet& ps, const LowpRound& r,
                                      const lowp::CodecConfig& cfg, int blocks, cudaStream_t s);
LowpRoundLauncher launch_lowp_round_f32, launch_lowp_round_bf16, launch_lowp_round_f16,
    launch_lowp_round_f32_e5m2, launch_lowp_round_bf16_e5m2, launch_lowp_round_f16_e5m2;

}  // namespace commx::cuda
