// Plain structs shared by the host side of the cuda backend and its kernels.
// Layer: backends (cuda). No CUDA headers needed: the host code fills these and passes them by
// value as kernel arguments, so a launch captured into a CUDA graph carries everything it needs.
#pragma once

#include <cstdint>

#include "cuda_common/dynamic_counts_report.h"

namespace commx::cuda {

inline constexpr int kMaxRanks = 8;
inline constexpr int kMaxBlocks = 256;  // per-block flags exist for this many blocks
inline constexpr int kThreads = 512;
// LL128 line: 120 payload bytes and an 8-byte flag, stored by 8 lanes of a warp.
inline constexpr int kLL128Line = 128;
inline constexpr int kLL128Payload = 120;
// Per-rank signal pad: flags[kMaxBlocks][kMaxRanks] of 64-bit monotonic values.
inline constexpr uint64_t kSignalBytes = 64 * 1024;
static_assert(kMaxBlocks * kMaxRanks * 8 <= kSignalBytes, "signal pad too small");

// Error codes a kernel writes into HostCtl::error_code (first error wins): each leaves the comm
// unusable. (A failed agreed check of all_to_all_v_dynamic is no such error: HostCtl::counts.)
enum DeviceError : int { kDevOk = 0, kDevTimeout = 1, kDevAborted = 2 };

// Pinned, host-mapped: the host sets `abort`, kernels report errors here.
struct HostCtl {
  volatile int abort;
  int error_code;
  int error_peer;   // the rank a kernel waited for
  int error_block;
  int error_op;     // commx::OpType of the failing op
  unsigned long long error_seq;
  // all_to_all_v_dynamic counts that failed the agreed check: one Work fails, the comm goes on.
  DynamicCountsReport counts;
};

// Device-local state of one rank of one comm: the op counter that orders flags and picks the
// buffer half. Advanced by the last block of every kernel, so graph replays stay consistent.
struct DevState {
  unsigned long long epoch;
  unsigned int done_blocks;
  int error_claimed;  // the first failing block claims the HostCtl report (device atomics only)
};

// Everything a kernel needs to reach its peers.
struct PeerSet {
  char* data[kMaxRanks];           // each rank's data area (two halves of half_bytes)
  unsigned long long* sig[kMaxRanks];  // each rank's signal pad
  int rank;
  int world;
  unsigned long long half_bytes;
  DevState* state;
  HostCtl* ctl;  // device pointer of the host-mapped control block
  unsigned long long timeout_ns;
  unsigned int poll_sleep_ns;  // longest sleep between polls of a wait (0: never sleep)
  unsigned long long seq;  // for error reports
  int op;
};

// The rows of all_to_all_v_dynamic's count exchange live in the signal pad after the flags:
// [2 parities][kMaxRanks senders][kDynamicRowWords] 64-bit words (see all_to_all_v_dynamic.cu).
inline constexpr int kDynamicRowWords = 256 + 3;  // kMaxDynamicSegments + kTailWords
inline constexpr uint64_t kDynamicRowsOffset = kMaxBlocks * kMaxRanks * 8;
static_assert(kDynamicRowsOffset + 2 * kMaxRanks * kDynamicRowWords * 8 <= kSignalBytes,
              "signal pad too small for the count rows");

// Up to kMaxRanks device pointers (per-peer inputs or outputs of list collectives).
struct PtrList {
  char* p[kMaxRanks];
};

}  // namespace commx::cuda
