// The fused FP8 round kernel for __half data, E4M3 (lowp_round.cuh; E5M2 in
// lowp_kernels_f16_e5m2.cu). Layer: backends (cuda).
#include "cuda/lowp_launch.cuh"

namespace commx::cuda {

cudaError_t launch_lowp_round_f16(const PeerSet& ps, const LowpRound& r,
                                  const lowp::CodecConfig& cfg, int blocks, cudaStream_t s) {
  return launch_typed<__half, false>(ps, r, cfg, blocks, s);
}

}  // namespace commx::cuda
