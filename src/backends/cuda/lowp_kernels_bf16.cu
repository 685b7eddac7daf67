// The fused FP8 round kernel for __nv_bfloat16 data, E4M3 (lowp_round.cuh; E5M2 in
// lowp_kernels_bf16_e5m2.cu). Layer: backends (cuda).
#include "cuda/lowp_launch.cuh"

namespace commx::cuda {

cudaError_t launch_lowp_round_bf16(const PeerSet& ps, const LowpRound& r,
                                  const lowp::CodecConfig& cfg, int blocks, cudaStream_t s) {
  return launch_typed<__nv_bfloat16, false>(ps, r, cfg, blocks, s);
}

}  // namespace commx::cuda
