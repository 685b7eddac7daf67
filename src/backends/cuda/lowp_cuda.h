// Low-precision (FP8 on the wire, FP32 sums) all_reduce, reduce_scatter, all_gather and
// all_to_all of the cuda backend: a fused kernel per round writes encoded chunks straight into the
// peers' registered buffers, per-block flags order the steps. Same bits as the host path
// (lowp_collectives.cc). When an op runs in low precision is lowp_choice()'s decision (hints,
// COMMX_LOW_PRECISION_*). Layer: backends (cuda).
#pragma once

#include <cuda_runtime_api.h>

#include <optional>
#include <string>

#include "commx/backend.h"
#include "cuda/kernel_params.h"
#include "lowp/lowp_config.h"

namespace commx::cuda {

class LowpCuda {
 public:
  // Reads the settings (comm hints, then env); allocates the device counters.
  void init(const Hints& comm_hints, const std::string& where);
  // Enqueues `op` on `s` in low precision when the settings and hints say so; false otherwise.
  // `ps` reaches the peers; the whole data area (both halves) of every rank is used; kernels
  // get at most `max_blocks` blocks of threads.
  bool maybe_enqueue(const OpDesc& op, const PeerSet& ps, int max_blocks, cudaStream_t s,
                     const std::string& where);
  // The low-precision plan of `op` (the comm's settings and the op's hints), or nullopt.
  std::optional<lowp::LowpPlan> plan(const OpDesc& op, const std::string& where) const;
  // The device counters the codec adds to (kNumStats of fp8_codec_cuda.h).
  unsigned long long* device_stats() const { return d_stats_; }
  // Codec counters of every low-precision op so far (waits for the device).
  lowp::CodecStats stats() const;
  void close();

 private:
  lowp::LowpSettings settings_;
  unsigned long long* d_stats_ = nullptr;
};

}  // namespace commx::cuda
