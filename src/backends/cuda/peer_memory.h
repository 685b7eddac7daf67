// cuda_ipc: the peer-memory transport of the cuda backend. Each rank allocates one buffer at comm
// creation, exports it as a CUDA IPC handle, exchanges handles through the comm's store and maps
// every peer's buffer into its own address space. Peer-to-peer access is checked for every pair
// first; when some pair lacks it, nothing is mapped and problem() says which pair.
// Layer: transport (GPU). Knows nothing of collectives.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "commx/store.h"

namespace commx::cuda {

class PeerMemory {
 public:
  // Collective over `world` ranks. Throws on CUDA or store errors; a missing P2P path is not an
  // error here (see problem()). COMMX_CUDA_FORCE_NO_P2P=1 simulates a missing path (tests).
  static std::unique_ptr<PeerMemory> create(Store& store, int rank, int world, int device,
                                            uint64_t bytes, const std::string& where);
  ~PeerMemory();
  PeerMemory(const PeerMemory&) = delete;
  PeerMemory& operator=(const PeerMemory&) = delete;

  // Empty when every pair of ranks can reach each other's memory; else what is missing.
  const std::string& problem() const { return problem_; }
  // Rank r's buffer as mapped in this process (own buffer for r == rank).
  char* base(int r) const { return bases_[r]; }
  uint64_t bytes() const { return bytes_; }
  // Whether two ranks of this comm run on one GPU (the same answer on every rank).
  bool shares_gpu() const { return shares_gpu_; }
  // Unmaps peers and frees the own buffer; idempotent.
  void close();

 private:
  PeerMemory() = default;
  int rank_ = 0;
  int device_ = 0;
  uint64_t bytes_ = 0;
  std::vector<char*> bases_;
  std::vector<bool> opened_;  // mapped through cudaIpcOpenMemHandle (closed on close())
  std::string problem_;
  bool shares_gpu_ = false;
};

}  // namespace commx::cuda
