// cuda_ipc / vmm: the peer-memory transport of the cuda backend. Each rank allocates one buffer
// at comm creation, exports it, exchanges what peers need through the comm's store and maps every
// peer's buffer into its own address space. Two export paths (PeerMemKind): CUDA IPC handles
// (cudaMalloc + cudaIpcGetMemHandle, the default), or VMM allocations (cuMemCreate) exported as
// POSIX file descriptors and passed over Unix sockets (vmm_memory.h, fd_passing.h), the sharing
// PyTorch's expandable segments use. Peer-to-peer access is checked for every pair first; when
// some pair lacks it, nothing is mapped and problem() says which pair.
// Layer: transport (GPU). Knows nothing of collectives.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "commx/options.h"
#include "commx/store.h"

namespace commx::cuda {

class VmmBuffer;

enum class PeerMemKind { kIpc, kVmm };
const char* peer_mem_name(PeerMemKind k);
// COMMX_CUDA_PEER_MEM, overridden by the comm hint peer_mem: "ipc" (default) or "vmm"; anything
// else is an InvalidArgument error naming the variable or hint.
PeerMemKind resolve_peer_mem_kind(const Hints& comm_hints, const std::string& where);

class PeerMemory {
 public:
  // Collective over `world` ranks. Throws on CUDA or store errors; a missing P2P path is not an
  // error here (see problem()). COMMX_CUDA_FORCE_NO_P2P=1 simulates a missing path (tests).
  // kVmm on a device without VMM or POSIX-fd export support: an Unsupported error. Every rank
  // must ask for the same kind (InvalidArgument otherwise).
  static std::unique_ptr<PeerMemory> create(Store& store, int rank, int world, int device,
                                            uint64_t bytes, const std::string& where,
                                            PeerMemKind kind = PeerMemKind::kIpc);
  ~PeerMemory();
  PeerMemory(const PeerMemory&) = delete;
  PeerMemory& operator=(const PeerMemory&) = delete;

  // Empty when every pair of ranks can reach each other's memory; else what is missing.
  const std::string& problem() const { return problem_; }
  // Rank r's buffer as mapped in this process (own buffer for r == rank).
  char* base(int r) const { return bases_[r]; }
  uint64_t bytes() const { return bytes_; }
  PeerMemKind kind() const { return kind_; }
  // Whether two ranks of this comm run on one GPU (the same answer on every rank).
  bool shares_gpu() const { return shares_gpu_; }
  // Whether every two GPUs are linked with native atomics (NVLink; not PCIe), the same answer on
  // every rank: LL128 relies on such links delivering a warp's 128-byte store whole.
  bool atomic_links() const { return atomic_links_; }
  // Unmaps peers and frees the own buffer (both paths: mappings, address ranges, handles);
  // idempotent.
  void close();

 private:
  PeerMemory() = default;
  int rank_ = 0;
  int device_ = 0;
  uint64_t bytes_ = 0;
  PeerMemKind kind_ = PeerMemKind::kIpc;
  std::vector<char*> bases_;
  std::vector<bool> opened_;            // mapped through cudaIpcOpenMemHandle (closed on close())
  std::unique_ptr<VmmBuffer> own_vmm_;  // kVmm: the own allocation
  std::vector<std::unique_ptr<VmmBuffer>> peer_vmm_;  // kVmm: peers of other processes
  std::string problem_;
  bool shares_gpu_ = false;
  bool atomic_links_ = false;
};

}  // namespace commx::cuda
