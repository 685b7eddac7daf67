// The fused FP8 round kernel for __nv_bfloat16 data, E5M2 (lowp_round.cuh): a translation unit of
// its own so that the kernel builds compile in parallel. Layer: backends (cuda).
#include "cuda/lowp_launch.cuh"

namespace commx::cuda {

cudaError_t launch_lowp_round_bf16_e5m2(const PeerSet& ps, const LowpRound& r,
                                      const lowp::CodecConfig& cfg, int blocks, cudaStream_t s) {
  return launch_typed<__nv_bfloat16, true>(ps, r, cfg, blocks, s);
}

}  // namespace commx::cuda
