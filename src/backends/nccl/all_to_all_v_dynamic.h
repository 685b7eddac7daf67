// all_to_all_v_dynamic (and MoE dispatch/combine) on the nccl backend: the fallback that works
// wherever NCCL does, with the counts kept on the device.
//  1. the host agrees the buffer sizes with its peers through the store (input and output
//     elements: host values, never a count), so every pair knows the most bytes that can flow
//     between them: min(sender's input, receiver's output);
//  2. a kernel writes this rank's row (counts, capacity, input size, row size), an ncclAllGather
//     gives every rank every row, and a one-thread kernel runs the agreed check
//     (dynamic_a2a_check.h) -- on a problem every rank reports the same DynamicCountsReport and
//     moves nothing -- then plans where each segment sits and writes the received counts;
//  3. in rounds of one staging slot per peer, a kernel packs each pair's stream into the send
//     staging, grouped ncclSend/ncclRecv move the max-sized windows, a kernel unpacks them.
// Nothing on the host depends on a count, so the op is capturable and replays with new counts.
// State per comm (allocated at the first such op): the rows ((world + 1) x 2 KiB), the plan
// (12 KiB), the mapped report and two staging buffers of dynamic_staging_bytes (default 16 MiB). Layer: backends (nccl).
#pragma once

#include <cstdint>
#include <string>

#include "commx/backend.h"
#include "nccl/dynamic_kernels.h"

namespace commx::nccl {

inline constexpr uint64_t kDefaultDynamicStagingBytes = 16ull << 20;

// The device memory of the op, owned by the backend.
struct DynamicA2AState {
  long long* rows = nullptr;  // [world + 1][kDynamicRowWords]: this rank's row, then every rank's
  DynamicDevicePlan* plan = nullptr;
  DynamicCountsReport* report_host = nullptr;  // host-mapped
  DynamicCountsReport* report_dev = nullptr;
  unsigned char* send_staging = nullptr;  // [world - 1][slot], by peer_slot()
  unsigned char* recv_staging = nullptr;
  uint64_t slot = 0;           // staging bytes per peer and round
  uint64_t previous_seq = 0;   // the last op whose sizes this rank published in the store

  bool ready() const { return rows != nullptr; }
  // Allocates everything (in relaxed capture mode: the first op may be captured); throws prefixed
  // by `where`.
  void allocate(int world, uint64_t staging_bytes, const std::string& where);
  void release();
};

// The staging bytes per direction: hint dynamic_staging_bytes, else COMMX_NCCL_DYNAMIC_STAGING_BYTES,
// else the default (at least 64 KiB).
uint64_t dynamic_staging_bytes(const Hints& hints, const std::string& where);

}  // namespace commx::nccl
