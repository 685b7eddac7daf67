// cuda_ipc peer-memory transport: allocate, export, exchange, check P2P, map, unmap.
// Layer: transport (GPU).
#include "cuda/peer_memory.h"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstring>

#include "core/env.h"
#include "cuda_common/cuda_util.h"

namespace commx::cuda {
namespace {

struct PeerInfo {
  int64_t pid;
  int32_t device;
  char bus_id[32];
  cudaIpcMemHandle_t handle;
  uint64_t ptr;  // for ranks in the same process
};

Bytes to_bytes(const PeerInfo& p) {
  Bytes b(sizeof(p));
  std::memcpy(b.data(), &p, sizeof(p));
  return b;
}

}  // namespace

std::unique_ptr<PeerMemory> PeerMemory::create(Store& store, int rank, int world, int device,
                                               uint64_t bytes, const std::string& where) {
  std::unique_ptr<PeerMemory> pm(new PeerMemory());
  pm->rank_ = rank;
  pm->device_ = device;
  pm->bytes_ = bytes;
  pm->bases_.assign(world, nullptr);
  pm->opened_.assign(world, false);
  DeviceGuard g(device);
  const std::string ctx = where + "cuda_ipc: ";
  void* own = nullptr;
  COMMX_CUDA_CHECK_CTX(cudaMalloc(&own, bytes), ctx);
  pm->bases_[rank] = static_cast<char*>(own);
  COMMX_CUDA_CHECK_CTX(cudaMemset(own, 0, bytes), ctx);
  COMMX_CUDA_CHECK_CTX(cudaDeviceSynchronize(), ctx);

  PeerInfo mine{};
  mine.pid = getpid();
  mine.device = device;
  COMMX_CUDA_CHECK_CTX(cudaDeviceGetPCIBusId(mine.bus_id, sizeof(mine.bus_id), device), ctx);
  COMMX_CUDA_CHECK_CTX(cudaIpcGetMemHandle(&mine.handle, own), ctx);
  mine.ptr = reinterpret_cast<uint64_t>(own);
  store.set("cuda_ipc/info/" + std::to_string(rank), to_bytes(mine));

  std::vector<PeerInfo> infos(world);
  std::string problem;
  const bool force_no_p2p = env_bool("COMMX_CUDA_FORCE_NO_P2P", false);
  for (int r = 0; r < world; ++r) {
    if (r == rank) {
      infos[r] = mine;
      continue;
    }
    Bytes b = store.get("cuda_ipc/info/" + std::to_string(r));
    if (b.size() != sizeof(PeerInfo))
      throw Error(ErrorCode::kInternal, ctx + "bad peer record from rank " + std::to_string(r));
    std::memcpy(&infos[r], b.data(), sizeof(PeerInfo));
    const PeerInfo& p = infos[r];
    std::string pair = "rank " + std::to_string(rank) + " (GPU " + mine.bus_id + ") -> rank " +
                       std::to_string(r) + " (GPU " + p.bus_id + ")";
    if (force_no_p2p) {
      problem = pair + ": peer access disabled by COMMX_CUDA_FORCE_NO_P2P";
      continue;
    }
    if (std::strcmp(p.bus_id, mine.bus_id) == 0) continue;  // same GPU: no peer mapping needed
    int peer_dev = -1;
    if (cudaDeviceGetByPCIBusId(&peer_dev, p.bus_id) != cudaSuccess) {
      cudaGetLastError();
      problem = pair + ": the peer's GPU is not visible to this process (CUDA_VISIBLE_DEVICES)";
      continue;
    }
    int can = 0;
    COMMX_CUDA_CHECK_CTX(cudaDeviceCanAccessPeer(&can, device, peer_dev), ctx);
    if (!can) problem = pair + ": cudaDeviceCanAccessPeer says no peer-to-peer path";
  }
  // Whether any two ranks share a GPU: the same answer on every rank (kernel grids depend on it,
  // and per-block flags need the same grid everywhere).
  for (int a = 0; a < world && !pm->shares_gpu_; ++a)
    for (int b = a + 1; b < world; ++b)
      if (std::strcmp(infos[a].bus_id, infos[b].bus_id) == 0) pm->shares_gpu_ = true;
  // Every rank must take the same decision: share the verdicts.
  store.set("cuda_ipc/p2p/" + std::to_string(rank), Bytes(problem.begin(), problem.end()));
  for (int r = 0; r < world && problem.empty(); ++r) {
    if (r == rank) continue;
    Bytes b = store.get("cuda_ipc/p2p/" + std::to_string(r));
    problem.assign(b.begin(), b.end());
  }
  if (!problem.empty()) {
    pm->problem_ = problem;
    pm->close();
    return pm;
  }
  for (int r = 0; r < world; ++r) {
    if (r == rank) continue;
    const PeerInfo& p = infos[r];
    if (p.pid == mine.pid) {
      // Same process (threads as ranks): the pointer is valid here; enable peer access if needed.
      pm->bases_[r] = reinterpret_cast<char*>(p.ptr);
      if (p.device != device) {
        cudaError_t e = cudaDeviceEnablePeerAccess(p.device, 0);
        if (e == cudaErrorPeerAccessAlreadyEnabled)
          cudaGetLastError();
        else
          COMMX_CUDA_CHECK_CTX(e, ctx);
      }
      continue;
    }
    void* mapped = nullptr;
    COMMX_CUDA_CHECK_CTX(cudaIpcOpenMemHandle(&mapped, p.handle, cudaIpcMemLazyEnablePeerAccess),
                         ctx + "mapping rank " + std::to_string(r) + "'s buffer: ");
    pm->bases_[r] = static_cast<char*>(mapped);
    pm->opened_[r] = true;
  }
  return pm;
}

void PeerMemory::close() {
  if (bases_.empty()) return;
  DeviceGuard g(device_);
  for (size_t r = 0; r < bases_.size(); ++r) {
    if (opened_[r] && bases_[r]) cudaIpcCloseMemHandle(bases_[r]);
    opened_[r] = false;
    if (static_cast<int>(r) != rank_) bases_[r] = nullptr;
  }
  if (bases_[rank_]) cudaFree(bases_[rank_]);
  bases_[rank_] = nullptr;
}

PeerMemory::~PeerMemory() { close(); }

}  // namespace commx::cuda
