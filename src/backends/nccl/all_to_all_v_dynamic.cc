// The nccl backend's all_to_all_v_dynamic (see all_to_all_v_dynamic.h). Layer: backends (nccl).
#include "nccl/all_to_all_v_dynamic.h"

#include <algorithm>
#include <cstring>

#include "core/settings.h"
#include "commx/error.h"
#include "cuda_common/cuda_util.h"
#include "nccl/nccl_backend.h"

namespace commx::nccl {
namespace {

// "16M", "65536", "1G": bytes, with an optional K/M/G suffix (powers of two).
uint64_t parse_bytes(const std::string& s, const std::string& what, const std::string& where) {
  size_t used = 0;
  uint64_t v = 0;
  try {
    v = std::stoull(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string rest = s.substr(used);
  const int shift = rest.empty() ? 0 : rest == "K" || rest == "k" ? 10 : rest == "M" ? 20
                                   : rest == "G"                  ? 30
                                                                  : -1;
  if (used == 0 || shift < 0)
    throw Error(ErrorCode::kInvalidArgument,
                where + what + " must be a byte count (e.g. 16M), not '" + s + "'");
  return v << shift;
}

// The most bytes that can flow from a rank to another: its input, or the receiver's output.
uint64_t pair_bytes(const std::vector<uint64_t>& in, const std::vector<uint64_t>& cap, int from,
                    int to) {
  return std::min(in[from], cap[to]);
}

// Bytes of a pair's window in round r.
uint64_t window_bytes(uint64_t total, uint64_t slot, uint64_t r) {
  const uint64_t at = r * slot;
  return total > at ? std::min(slot, total - at) : 0;
}

}  // namespace

uint64_t dynamic_staging_bytes(const Hints& hints, const std::string& where) {
  uint64_t b = setting_bytes("COMMX_NCCL_DYNAMIC_STAGING_BYTES", kDefaultDynamicStagingBytes);
  if (auto it = hints.find("dynamic_staging_bytes"); it != hints.end())
    b = parse_bytes(it->second, "hint dynamic_staging_bytes", where);
  return std::max<uint64_t>(b, 64u << 10);
}

void DynamicA2AState::allocate(int world, uint64_t staging_bytes, const std::string& where) {
  cuda::RelaxedCaptureMode relaxed;  // cudaMalloc is refused during a capture otherwise
  try {
    const int peers = std::max(world - 1, 1);
    slot = std::max<uint64_t>((staging_bytes / peers) & ~uint64_t(255), 256);
    const size_t staging = static_cast<size_t>(slot) * peers;  // one slot per peer
    COMMX_CUDA_CHECK_CTX(cudaMalloc(reinterpret_cast<void**>(&rows),
                                    sizeof(long long) * (world + 1) * kDynamicRowWords),
                         where);
    COMMX_CUDA_CHECK_CTX(cudaMalloc(reinterpret_cast<void**>(&plan), sizeof(DynamicDevicePlan)),
                         where);
    COMMX_CUDA_CHECK_CTX(cudaMalloc(reinterpret_cast<void**>(&send_staging), staging), where);
    COMMX_CUDA_CHECK_CTX(cudaMalloc(reinterpret_cast<void**>(&recv_staging), staging), where);
    COMMX_CUDA_CHECK_CTX(cudaHostAlloc(reinterpret_cast<void**>(&report_host),
                                       sizeof(DynamicCountsReport), cudaHostAllocMapped),
                         where);
    std::memset(static_cast<void*>(report_host), 0, sizeof(DynamicCountsReport));
    COMMX_CUDA_CHECK_CTX(
        cudaHostGetDevicePointer(reinterpret_cast<void**>(&report_dev), report_host, 0), where);
  } catch (...) {
    release();
    throw;
  }
}

void DynamicA2AState::release() {
  if (rows) cudaFree(rows);
  if (plan) cudaFree(plan);
  if (send_staging) cudaFree(send_staging);
  if (recv_staging) cudaFree(recv_staging);
  if (report_host) cudaFreeHost(report_host);
  *this = DynamicA2AState{};
}

void NcclBackend::enqueue_all_to_all_v_dynamic(const OpDesc& op, cudaStream_t s,
                                                const std::string& where) {
  const int n = ctx_.size, me = ctx_.rank;
  if (!dyn_.ready()) {
    std::lock_guard<std::mutex> lk(dyn_mu_);  // the Works' hooks read the report pointer
    dyn_.allocate(n, dynamic_staging_bytes(ctx_.options.hints, where), where);
  }

  // 1. Sizes: every rank's input and output bytes (host values), through the store.
  const uint64_t es = dtype_size(op.input.dtype);
  std::vector<uint64_t> in(n), cap(n);
  in[me] = static_cast<uint64_t>(op.input.count) * es;
  cap[me] = static_cast<uint64_t>(op.output.count) * es;
  if (n > 1) {
    const std::string base = "dyn_sizes/" + std::to_string(op.seq) + "/";
    Bytes mine(2 * sizeof(uint64_t));
    std::memcpy(mine.data(), &in[me], sizeof(uint64_t));
    std::memcpy(mine.data() + sizeof(uint64_t), &cap[me], sizeof(uint64_t));
    ctx_.store->set(base + std::to_string(me), mine);
    std::vector<std::string> keys;
    for (int p = 0; p < n; ++p)
      if (p != me) keys.push_back(base + std::to_string(p));
    std::vector<Bytes> got;
    try {
      got = ctx_.store->multi_get(keys);  // waits for them
    } catch (const Error& e) {
      throw Error(e.code(), where + "the peers' buffer sizes did not arrive: " + e.what());
    }
    for (int p = 0, i = 0; p < n; ++p) {
      if (p == me) continue;
      const Bytes& b = got[i++];
      if (b.size() != 2 * sizeof(uint64_t))
        throw Error(ErrorCode::kInternal, where + "bad buffer sizes from rank " + std::to_string(p));
      std::memcpy(&in[p], b.data(), sizeof(uint64_t));
      std::memcpy(&cap[p], b.data() + sizeof(uint64_t), sizeof(uint64_t));
    }
    // Every peer has published for this op, so each has read this rank's previous sizes.
    if (dyn_.previous_seq)
      ctx_.store->delete_key("dyn_sizes/" + std::to_string(dyn_.previous_seq) + "/" +
                             std::to_string(me));
    dyn_.previous_seq = op.seq;
  }

  // 2. Rows, all-gathered; the agreed check and the plan on the device.
  const DynamicA2AArgs a = cuda::dynamic_a2a_args(op, me, n);
  long long* all_rows = dyn_.rows + kDynamicRowWords;
  launch_dynamic_row(a, dyn_.rows, s);
  COMMX_CUDA_CHECK_CTX(cudaGetLastError(), where);
  check(api_->AllGather(dyn_.rows, all_rows, kDynamicRowWords, ncclInt64, comm_, s),
        "ncclAllGather (counts)", op);
  launch_dynamic_plan(a, all_rows, dyn_.plan, dyn_.report_dev, static_cast<int>(op.type), op.seq,
                      s);
  COMMX_CUDA_CHECK_CTX(cudaGetLastError(), where);

  // 3. The streams in rounds of one slot per pair; every rank runs the same number of rounds.
  const uint64_t slot = dyn_.slot;
  uint64_t rounds = 1;
  for (int k = 0; k < n; ++k)
    for (int j = 0; j < n; ++j)
      if (k != j) rounds = std::max(rounds, (pair_bytes(in, cap, k, j) + slot - 1) / slot);
  for (uint64_t r = 0; r < rounds; ++r) {
    const uint64_t window = r * slot;
    launch_dynamic_pack(a, dyn_.plan, dyn_.send_staging, slot, window, s);
    COMMX_CUDA_CHECK_CTX(cudaGetLastError(), where);
    check(api_->GroupStart(), "ncclGroupStart", op);
    try {
      for (int p = 0; p < n; ++p) {
        if (p == me) continue;
        const uint64_t out_b = window_bytes(pair_bytes(in, cap, me, p), slot, r);
        const uint64_t in_b = window_bytes(pair_bytes(in, cap, p, me), slot, r);
        if (out_b)
          check(api_->Send(dyn_.send_staging + peer_slot(p, me) * slot, out_b, ncclUint8, p, comm_,
                           s),
                "ncclSend", op);
        if (in_b)
          check(api_->Recv(dyn_.recv_staging + peer_slot(p, me) * slot, in_b, ncclUint8, p, comm_,
                           s),
                "ncclRecv", op);
      }
    } catch (...) {
      api_->GroupEnd();
      throw;
    }
    check(api_->GroupEnd(), "ncclGroupEnd", op);
    launch_dynamic_unpack(a, dyn_.plan, dyn_.recv_staging, slot, window, r == 0, s);
    COMMX_CUDA_CHECK_CTX(cudaGetLastError(), where);
  }
}

}  // namespace commx::nccl
