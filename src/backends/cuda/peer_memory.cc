// Peer-memory transport (cuda_ipc or vmm): allocate, export, exchange, check P2P, map, unmap.
// Layer: transport (GPU).
#include "cuda/peer_memory.h"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "commx/env.h"
#include "cuda/fd_passing.h"
#include "cuda/vmm_memory.h"
#include "cuda_common/cuda_util.h"

namespace commx::cuda {
namespace {

struct PeerInfo {
  int64_t pid;
  int32_t device;
  int32_t kind;  // PeerMemKind
  char bus_id[32];
  cudaIpcMemHandle_t handle;  // kIpc
  uint64_t ptr;               // for ranks in the same process
  uint64_t vmm_size;          // kVmm: the allocation's size (bytes rounded up to the granularity)
  int32_t failed;             // 1: this rank could not allocate; error holds why
  int32_t error_code;         // its ErrorCode
  char error[400];
};

Bytes to_bytes(const PeerInfo& p) {
  Bytes b(sizeof(p));
  std::memcpy(b.data(), &p, sizeof(p));
  return b;
}

// Whether every two GPUs of the comm are linked with native atomics (NVLink, not PCIe), asked for
// every pair from the records every rank has (every rank maps every peer, so it sees every GPU):
// the same answer on every rank.
bool links_have_native_atomics(const std::vector<PeerInfo>& infos) {
  for (size_t a = 0; a < infos.size(); ++a)
    for (size_t b = a + 1; b < infos.size(); ++b) {
      if (std::strcmp(infos[a].bus_id, infos[b].bus_id) == 0) continue;
      int da = -1, db = -1, v = 0;
      if (cudaDeviceGetByPCIBusId(&da, infos[a].bus_id) != cudaSuccess ||
          cudaDeviceGetByPCIBusId(&db, infos[b].bus_id) != cudaSuccess ||
          cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrNativeAtomicSupported, da, db) != cudaSuccess) {
        cudaGetLastError();
        return false;
      }
      if (!v) return false;
    }
  return true;
}

}  // namespace

const char* peer_mem_name(PeerMemKind k) { return k == PeerMemKind::kVmm ? "vmm" : "ipc"; }

PeerMemKind resolve_peer_mem_kind(const Hints& comm_hints, const std::string& where) {
  auto parse = [&](const std::string& v, const std::string& what) {
    if (v == "ipc") return PeerMemKind::kIpc;
    if (v == "vmm") return PeerMemKind::kVmm;
    throw Error(ErrorCode::kInvalidArgument,
                where + what + "='" + v + "' is not a peer-memory path (ipc or vmm)");
  };
  PeerMemKind k = PeerMemKind::kIpc;
  if (auto e = env_str("COMMX_CUDA_PEER_MEM"); e && !e->empty())
    k = parse(*e, "COMMX_CUDA_PEER_MEM");
  if (auto it = comm_hints.find("peer_mem"); it != comm_hints.end())
    k = parse(it->second, "hint peer_mem");
  return k;
}

std::unique_ptr<PeerMemory> PeerMemory::create(Store& store, int rank, int world, int device,
                                               uint64_t bytes, const std::string& where,
                                               PeerMemKind kind) {
  std::unique_ptr<PeerMemory> pm(new PeerMemory());
  pm->rank_ = rank;
  pm->device_ = device;
  pm->bytes_ = bytes;
  pm->kind_ = kind;
  pm->bases_.assign(world, nullptr);
  pm->opened_.assign(world, false);
  pm->peer_vmm_.resize(world);
  DeviceGuard g(device);
  const bool vmm = kind == PeerMemKind::kVmm;
  const std::string ctx = where + (vmm ? "vmm peer memory: " : "cuda_ipc: ");
  // Both paths share the store keys: a rank that asked for the other path is caught below.
  PeerInfo mine{};
  mine.pid = getpid();
  mine.device = device;
  mine.kind = static_cast<int32_t>(kind);
  COMMX_CUDA_CHECK_CTX(cudaDeviceGetPCIBusId(mine.bus_id, sizeof(mine.bus_id), device), ctx);
  try {
    void* own = nullptr;
    if (vmm) {
      std::string why = vmm_unsupported_reason(device);
      if (!why.empty())
        throw Error(ErrorCode::kUnsupported,
                    ctx + "rank " + std::to_string(rank) + " on GPU " + std::to_string(device) +
                        " (" + mine.bus_id +
                        "): peer_mem=vmm was asked for (COMMX_CUDA_PEER_MEM "
                        "or the peer_mem hint), but " +
                        why + "; use peer_mem=ipc");
      pm->own_vmm_ = VmmBuffer::allocate(device, bytes, ctx);
      own = pm->own_vmm_->ptr();
      mine.vmm_size = pm->own_vmm_->size();
    } else {
      COMMX_CUDA_CHECK_CTX(cudaMalloc(&own, bytes), ctx);
    }
    pm->bases_[rank] = static_cast<char*>(own);
    COMMX_CUDA_CHECK_CTX(cudaMemset(own, 0, bytes), ctx);
    COMMX_CUDA_CHECK_CTX(cudaDeviceSynchronize(), ctx);
    if (!vmm) COMMX_CUDA_CHECK_CTX(cudaIpcGetMemHandle(&mine.handle, own), ctx);
    mine.ptr = reinterpret_cast<uint64_t>(own);
  } catch (const Error& e) {
    // Tell the peers at once instead of leaving them to the store's timeout.
    mine.failed = 1;
    mine.error_code = static_cast<int32_t>(e.code());
    std::snprintf(mine.error, sizeof(mine.error), "%s", e.what());
    store.set("cuda_ipc/info/" + std::to_string(rank), to_bytes(mine));
    throw;
  }
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
    if (p.failed)
      throw Error(static_cast<ErrorCode>(p.error_code),
                  ctx + "rank " + std::to_string(r) + " could not set up its peer memory: " +
                      std::string(p.error, strnlen(p.error, sizeof(p.error))));
    if (p.kind != mine.kind)
      throw Error(ErrorCode::kInvalidArgument,
                  ctx + "rank " + std::to_string(rank) + " uses peer_mem=" + peer_mem_name(kind) +
                      " but rank " + std::to_string(r) +
                      " uses peer_mem=" + peer_mem_name(static_cast<PeerMemKind>(p.kind)) +
                      " (set COMMX_CUDA_PEER_MEM or the peer_mem hint alike on every rank)");
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
  // Every rank must take the same decisions: share the verdicts, each a flag (whether every two
  // GPUs are linked with native atomics, as this rank sees it) and the problem found, if any.
  bool atomic = problem.empty() && links_have_native_atomics(infos);
  const std::string record = (atomic ? "1" : "0") + problem;
  store.set("cuda_ipc/p2p/" + std::to_string(rank), Bytes(record.begin(), record.end()));
  for (int r = 0; r < world && problem.empty(); ++r) {
    if (r == rank) continue;
    Bytes b = store.get("cuda_ipc/p2p/" + std::to_string(r));
    if (b.empty()) throw Error(ErrorCode::kInternal, ctx + "empty verdict from rank " + std::to_string(r));
    atomic = atomic && b[0] == '1';
    problem.assign(b.begin() + 1, b.end());
  }
  if (!problem.empty()) {
    pm->problem_ = problem;
    pm->close();
    return pm;
  }
  pm->atomic_links_ = atomic;
  // kVmm: the allocations of peers in other processes arrive as file descriptors.
  std::vector<UniqueFd> fds(world);
  if (vmm) {
    std::vector<int> others;
    for (int r = 0; r < world; ++r)
      if (r != rank && infos[r].pid != mine.pid) others.push_back(r);
    if (!others.empty()) {
      UniqueFd own_fd(pm->own_vmm_->export_fd(ctx));
      fds = exchange_fds(store, "cuda_vmm/fd", rank, world, others, own_fd.get(),
                         std::chrono::steady_clock::now() + store.timeout(), ctx);
    }
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
        // A VMM range is reachable only from the devices cuMemSetAccess names (as NCCL does).
        if (vmm)
          vmm_grant_access(reinterpret_cast<void*>(p.ptr), p.vmm_size, device,
                           ctx + "access to rank " + std::to_string(r) + "'s buffer: ");
      }
      continue;
    }
    if (vmm) {
      pm->peer_vmm_[r] =
          VmmBuffer::import(fds[r].get(), p.vmm_size, device,
                            ctx + "mapping rank " + std::to_string(r) + "'s buffer: ");
      fds[r].reset();
      pm->bases_[r] = pm->peer_vmm_[r]->ptr();
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
    if (peer_vmm_[r]) peer_vmm_[r]->release();
    peer_vmm_[r].reset();
    if (static_cast<int>(r) != rank_) bases_[r] = nullptr;
  }
  if (own_vmm_) {
    own_vmm_->release();
    own_vmm_.reset();
  } else if (bases_[rank_]) {
    cudaFree(bases_[rank_]);
  }
  bases_[rank_] = nullptr;
}

PeerMemory::~PeerMemory() { close(); }

}  // namespace commx::cuda
