// Dispatch of the fused low-precision round kernel by element type (see lowp_kernels.h; the kernel
// is in lowp_round.cuh, built once per type in lowp_kernels_<type>.cu). Layer: backends (cuda).
#include "cuda/lowp_kernels.h"

namespace commx::cuda {

cudaError_t launch_lowp_round(const PeerSet& ps, const LowpRound& r, DataType dtype,
                              const lowp::CodecConfig& cfg, int blocks, cudaStream_t s) {
  if (blocks < 1 || blocks > kMaxBlocks) return cudaErrorInvalidValue;
  const bool e5m2 = cfg.format == lowp::Fp8Format::kE5M2;
  switch (dtype) {
    case DataType::kFloat32:
      return (e5m2 ? launch_lowp_round_f32_e5m2 : launch_lowp_round_f32)(ps, r, cfg, blocks, s);
    case DataType::kBFloat16:
      return (e5m2 ? launch_lowp_round_bf16_e5m2 : launch_lowp_round_bf16)(ps, r, cfg, blocks, s);
    case DataType::kFloat16:
      return (e5m2 ? launch_lowp_round_f16_e5m2 : launch_lowp_round_f16)(ps, r, cfg, blocks, s);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace commx::cuda
