// The hierarchical (multi-host) path of the cuda backend: all_reduce as a reduce-scatter over the
// peer memory of the ranks of one host, an all_reduce of this rank's shard across hosts through
// an NCCL sub-communicator (the ranks with the same local index), and an all-gather over peer
// memory, all enqueued on the caller's stream (graph-capturable). Layer: backends (cuda).
#pragma once

#include <cuda_runtime_api.h>

#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "commx/algorithm.h"
#include "commx/backend.h"
#include "cuda/host_layout.h"
#include "cuda/kernels.h"
#include "cuda/kernel_params.h"
#include "cuda/peer_memory.h"
#include "cuda/tuning.h"
#include "lowp/lowp_config.h"

namespace commx::cuda {

// How the inter-host step of an op runs in low precision (FP8 on the wire between hosts, FP32
// sums): the plan the comm's low-precision settings chose for the op, and the device counters
// of the codec.
struct InterLowp {
  lowp::LowpPlan plan;
  unsigned long long* stats = nullptr;
};

// Collective over the comm: every rank publishes its place (hostname + boot id, GPU bus id)
// through the store and groups the ranks by host (host_layout; forced by ranks_per_host > 0).
HostLayout detect_hosts(Store& store, int rank, int world, int device, int ranks_per_host,
                        const std::string& where);

class Hierarchy {
 public:
  // Collective over the comm (layout.hierarchical() on every rank): maps the peer memory of the
  // local ranks (store prefix "hier/local/<host>") and creates the inter-host NCCL comm eagerly
  // (store prefix "hier/inter/<local rank>"), so that no NCCL init ever happens inside a graph
  // capture. `state`/`ctl` are the backend's device state and host-mapped control block; `peer_mem`
  // the export path of the local peer memory (resolve_peer_mem_kind).
  static std::unique_ptr<Hierarchy> create(const BackendContext& ctx, const HostLayout& layout,
                                           int device, int sms, DevState* state, HostCtl* ctl,
                                           PeerMemKind peer_mem, const std::string& where);
  ~Hierarchy();
  Hierarchy(const Hierarchy&) = delete;
  Hierarchy& operator=(const Hierarchy&) = delete;

  // Empty when the path is usable on every rank; else why not (peer memory within a host, a GPU
  // shared by an inter-host group): the backend then sends every op through NCCL.
  const std::string& problem() const { return problem_; }
  // Enqueues an all_reduce, all_gather(_single) or reduce_scatter(_single) on `s`; false when the
  // op is not one this path covers (other ops, reductions the kernels lack, algorithm hint
  // "nccl" or DDA disabled): the caller delegates. With `lowp`, the inter-host step of an
  // all_reduce or reduce_scatter moves FP8 (hierarchy_lowp.cc); the steps within a host do not.
  bool enqueue(const OpDesc& op, cudaStream_t s, const std::string& where,
               const std::optional<InterLowp>& lowp = std::nullopt);
  // An error the inter-host NCCL comm reported asynchronously, else null.
  std::exception_ptr inter_error() const;
  // The comm rank of local index `local` on this host.
  int comm_rank(int local) const { return layout_.local_ranks.at(local); }
  const HostLayout& layout() const { return layout_; }
  // The comm as the algorithm tables see it: world_ ranks on layout_.hosts hosts.
  Topology topology() const { return Topology{world_, "net", false, layout_.hosts}; }
  const Tuning& tuning() const { return tuning_; }
  void abort();
  // Destroys the inter-host comm and unmaps peer memory; call once no op is running.
  void finalize();

 private:
  Hierarchy() = default;
  PeerSet peers(const OpDesc& op) const;
  // Runs `d` (a whole-buffer op over this rank's inter-host group, lowered here) on the inter-host
  // NCCL comm; its Work is kept for inter_error().
  void run_inter(OpDesc d);
  // `count` elements of in -> out across hosts (this rank's inter-host group) on `s`.
  void inter_all_reduce(const OpDesc& op, const void* in, void* out, int64_t count,
                        ReduceKind kind, cudaStream_t s);
  // The same summed in low precision, with the semantics and bits of the host path's FP8
  // all_reduce (lowp_collectives.h) over the hosts: FP8 slices to their owner hosts, FP32 sums in
  // host order (the own slice exact), one re-encode, FP8 all-gather, decode.
  void inter_all_reduce_lowp(const OpDesc& op, const InterLowp& lp, const void* in, void* out,
                             int64_t count, cudaStream_t s, const std::string& where);
  // Chunk h of `in` (`count` elements each) summed across hosts into `out` on host h, in low
  // precision (the first half of the above; the FP32 sum is rounded to the dtype once).
  void inter_reduce_scatter_lowp(const OpDesc& op, const InterLowp& lp, const void* in, void* out,
                                 int64_t count, cudaStream_t s, const std::string& where);
  // reduce_scatter(_single): a local reduce-scatter per destination host into a scratch buffer,
  // then an inter-host NCCL reduce-scatter of the partials into the output.
  bool enqueue_reduce_scatter(const OpDesc& op, cudaStream_t s, const std::string& where,
                              const std::optional<InterLowp>& lowp);
  // Local reduce-scatter of ins.p[q] (`len` elements each) into dst, in chunks of the buffer.
  void local_reduce_scatter(const OpDesc& op, const ReduceSpec& rs, const PtrList& ins, char* dst,
                            int64_t len, cudaStream_t s, const std::string& where);
  // A scratch buffer that grows on demand; outgrown ones are kept until finalize (earlier ops
  // may still use them).
  struct Scratch {
    char* p = nullptr;
    uint64_t bytes = 0;
    std::vector<char*> old;
  };
  // A device buffer of `bytes`: `pool`'s (grown outside captures), else, inside a capture, a
  // stream-ordered allocation (*async = true: free it with cudaFreeAsync on s).
  char* scratch(Scratch& pool, uint64_t bytes, bool capturing, cudaStream_t s, bool* async,
                const std::string& where);
  // all_gather(_single): inter-host grouped broadcasts, then one local exchange per host.
  bool enqueue_all_gather(const OpDesc& op, cudaStream_t s, const std::string& where);
  void local_exchange(const OpDesc& op, const PtrList& src, const PtrList& dst, uint64_t nbytes,
                      bool every_pair, cudaStream_t s, const std::string& where);

  BackendContext ctx_;
  HostLayout layout_;
  // One tiny inter-host all_reduce at creation (see hierarchy.cc).
  void connect_inter(const std::string& where);
  int device_ = 0;
  int world_ = 1;  // the whole comm (AVG divides by it once)
  Tuning tuning_;  // resolved for local_size ranks
  std::unique_ptr<PeerMemory> pm_;  // null when one rank per host
  DevState* state_ = nullptr;
  HostCtl* ctl_ = nullptr;
  std::unique_ptr<Backend> inter_;
  mutable std::mutex mu_;  // last_inter_ is polled by Work hooks from other threads
  Work last_inter_;
  std::string problem_;
  Scratch partials_;  // reduce_scatter's partial results per destination host
  Scratch lowp_;      // the encoded slices and FP32 sums of the low-precision inter-host step
};

}  // namespace commx::cuda
