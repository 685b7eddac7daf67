// The native cuda backend: DDA all-reduce (flat one-shot, two-shot) and all-gather,
// reduce-scatter, all-to-all, broadcast, reduce, gather, scatter and barrier over CUDA IPC peer
// memory; the ops it does not cover natively (v-variants, list all-to-all, send/recv) and any op
// when peer access is missing go to the nccl backend when it can be loaded.
// Layer: backends (cuda).
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "commx/backend.h"
#include "core/tuning.h"
#include "cuda/allreduce_algorithms.h"
#include "cuda/call_stamp.h"
#include "cuda/hierarchy.h"
#include "cuda/kernel_params.h"
#include "cuda/lowp_cuda.h"
#include "cuda/peer_memory.h"
#include "cuda/tuning.h"
#include "cuda_common/device_backend.h"

namespace commx::cuda {

class CudaBackend : public DeviceBackend {
 public:
  CudaBackend() = default;
  ~CudaBackend() override;
  std::string name() const override { return "cuda"; }
  std::string link() const override { return topology_.link; }
  void init(const BackendContext& ctx) override;
  bool supports(Collective c, DataType dtype, ReduceKind kind) const override;
  bool supports_uneven(Collective c, DataType dtype, ReduceKind kind) const override;
  void abort() override;
  void finalize() override;

  // For tests and the benchmark: which all-reduce algorithm an op of `bytes` would use.
  AllReduceAlgo allreduce_algo(uint64_t bytes, const Hints& hints) const;
  bool native() const { return native_; }
  // The hierarchical (multi-host) path, when the ranks span several hosts; else null.
  const Hierarchy* hierarchy() const { return hier_.get(); }

 private:
  // DeviceBackend: an earlier device error fails every later op; ops run natively (hierarchy,
  // peer memory) or through the NCCL delegate; the device-side bound fires before the host's.
  void check_runnable(const std::string& where) override;
  std::optional<Work> enqueue(const OpDesc& op, cudaStream_t s, const std::string& where) override;
  EventWorkHooks work_hooks(const OpDesc& op, const std::string& where) override;
  Timeout host_bound(const OpDesc& op) const override;
  // Enqueues `op` on `s` through the peer-memory kernels; false when the op is not covered.
  bool enqueue_native(const OpDesc& op, cudaStream_t s, const std::string& where);
  // The hierarchical path (hier_), its inter-host step in FP8 when the op runs in low precision.
  bool enqueue_hierarchical(const OpDesc& op, cudaStream_t s, const std::string& where);
  void enqueue_allreduce(const OpDesc& op, const AllReduceAlgorithm& preferred, int out_rank,
                         cudaStream_t s, const std::string& where);
  Work delegate(const OpDesc& op, cudaStream_t s);
  Backend& nccl(const OpDesc* op);
  std::exception_ptr device_error(const std::string& where) const;
  PeerSet peers(const OpDesc& op) const;
  // Whether the NCCL delegate can reduce `dtype` with `kind`.
  static bool nccl_reduces(DataType dtype, ReduceKind kind);

  Tuning tuning_;
  // Measured algorithm winners for GPU links (COMMX_TUNING_FILE, else commx_tuning_cuda.txt
  // beside libcommx, when present); without rows the thresholds of tuning_ decide.
  TuningTable table_;
  Topology topology_;  // world size and link kind: what the table's rows are keyed by
  LowpCuda lowp_;  // FP8 collectives (when hints or COMMX_LOW_PRECISION_* ask for them)
  bool native_ = false;
  std::string native_problem_;
  std::unique_ptr<PeerMemory> pm_;
  std::unique_ptr<Hierarchy> hier_;  // several hosts: all_reduce here, other ops through NCCL
  // The call of the op being enqueued (every kernel of it carries it; peers check it before they
  // combine data), the number of collectives enqueued so far (the next call's ordinal), and the
  // calls issued lately (to name a peer's call a kernel saw only by its hash).
  DeviceCall call_{};
  uint32_t collectives_ = 0;
  RecentCalls recent_calls_;
  HostCtl* ctl_host_ = nullptr;
  HostCtl* ctl_dev_ = nullptr;
  DevState* state_ = nullptr;
  std::mutex counts_mu_;  // one Work takes HostCtl::counts
  std::unique_ptr<Backend> nccl_;
  bool nccl_ready_ = false;
  std::string nccl_problem_;  // why no NCCL delegate can exist (e.g. ranks sharing a GPU)
  bool finalized_ = false;
};

}  // namespace commx::cuda
