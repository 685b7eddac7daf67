// Low-precision (FP8 on the wire, FP32 sums) all_reduce, reduce_scatter, all_gather and
// all_to_all of the cuda backend: the codec kernels write encoded chunks straight into the peers'
// registered buffers, barrier kernels order the steps. Same bits as the host path
// (lowp_collectives.cc). When an op runs in low precision is lowp_choice()'s decision (hints,
// COMMX_LOW_PRECISION_*). Layer: backends (cuda).
#pragma once

#include <cuda_runtime_api.h>

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
  // `ps` reaches the peers; the whole data area (both halves) of every rank is used.
  bool maybe_enqueue(const OpDesc& op, const PeerSet& ps, cudaStream_t s,
                     const std::string& where);
  // Codec counters of every low-precision op so far (waits for the device).
  lowp::CodecStats stats() const;
  void close();

 private:
  lowp::LowpSettings settings_;
  unsigned long long* d_stats_ = nullptr;
};

}  // namespace commx::cuda
