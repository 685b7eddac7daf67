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
// Per-rank signal pad: flags[kMaxBlocks][kMaxRanks] of 64-bit monotonic values (each with the
// sender's call check in its low bits, see sync_device.cuh), then the count rows of
// all_to_all_v_dynamic and the call entries (below).
inline constexpr uint64_t kSignalBytes = 128 * 1024;
static_assert(kMaxBlocks * kMaxRanks * 8 <= kSignalBytes, "signal pad too small");

#ifdef __CUDACC__
#define COMMX_HOST_DEVICE __host__ __device__
#else
#define COMMX_HOST_DEVICE
#endif

// What a kernel knows of the call it runs: the OpFingerprint of the op (core/op_fingerprint.h,
// 40 bytes as five words, `seq` first) and `hash`, call_hash of those words, which every rank
// compares with its peers' before it combines their data (call_stamp.h has the host side).
struct DeviceCall {
  unsigned long long words[5];
  unsigned long long hash;
};

// A hash of the words of a call but the first (`seq` names the call; it is not matched): equal
// hashes mean calls that fingerprints_match pairs, but for a 2^-64 chance; calls that differ in
// one word never collide (every step is a bijection of the state). Word by word, four multiplies:
// the host computes it for every op.
COMMX_HOST_DEVICE inline unsigned long long call_hash(const unsigned long long* words) {
  unsigned long long h = 0x9e3779b97f4a7c15ull;
  for (int w = 1; w < 5; ++w) {
    h = (h ^ words[w]) * 0xff51afd7ed558ccdull;
    h ^= h >> 33;
  }
  return h;
}

// The check a barrier flag of value `value` carries for the call hashed `hash`: kFlagCheckBits of
// a mix of both, so calls whose checks agree by chance at one flag value differ at the next.
inline constexpr int kFlagCheckBits = 20;
COMMX_HOST_DEVICE inline unsigned long long flag_check(unsigned long long hash,
                                                       unsigned long long value) {
  return ((hash ^ value) * 0x9e3779b97f4a7c15ull) >> (64 - kFlagCheckBits);
}

// The word a rank raises at a block barrier: the flag value (below 2^44, i.e. 2^42 ops at four
// flags an op) in the high bits, its call's flag_check in the low ones. One 8-byte store, as a
// flag without a check: the words of later values are larger whatever the calls.
COMMX_HOST_DEVICE inline unsigned long long barrier_word(unsigned long long value,
                                                         unsigned long long hash) {
  return (value << kFlagCheckBits) | flag_check(hash, value);
}

// The call entries: at the start of its kernel, every rank writes its DeviceCall and the op
// counter (+1, so a zeroed pad holds none) into entry [epoch & 1] of its own pad, where a peer
// stuck waiting for it reads them (a different call at the same op counter is a mismatch whatever
// protocol either kernel uses), and where a rank that saw a mismatch reads the peer's call.
inline constexpr int kCallEntryWords = 8;  // DeviceCall words[5], hash, epoch + 1, spare
inline constexpr uint64_t kCallEntriesOffset = 64 * 1024;
static_assert(kCallEntriesOffset + 2 * kCallEntryWords * 8 <= kSignalBytes,
              "signal pad too small for the call entries");

// Error codes a kernel writes into HostCtl::error_code (first error wins): each leaves the comm
// unusable. kDevMismatch: a peer issued another call at the same point (error_calls and
// error_hashes say which). (A failed agreed check of all_to_all_v_dynamic is no such error:
// HostCtl::counts.)
enum DeviceError : int {
  kDevOk = 0,
  kDevTimeout = 1,
  kDevAborted = 2,
  kDevMismatch = 3
};

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
  // kDevMismatch: this rank's call and the peer's (its words when error_peer_call_known, else
  // only its hash, which the host looks up among the calls it issued itself). A barrier that
  // could not read the peer's entry knows only the flag's check: then error_check_value is the
  // flag value and error_hashes[1] flag_check(peer's hash, that value).
  unsigned long long error_calls[2][5];
  unsigned long long error_hashes[2];
  unsigned long long error_check_value;
  int error_peer_call_known;
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
  DeviceCall call;  // the op's call, checked against the peers' (all zero: unchecked paths)
};

// The rows of all_to_all_v_dynamic's count exchange live in the signal pad after the flags:
// [2 parities][kMaxRanks senders][kDynamicRowWords] 64-bit words (see all_to_all_v_dynamic.cu).
inline constexpr int kDynamicRowWords = 256 + 3;  // kMaxDynamicSegments + kTailWords
inline constexpr uint64_t kDynamicRowsOffset = kMaxBlocks * kMaxRanks * 8;
static_assert(kDynamicRowsOffset + 2 * kMaxRanks * kDynamicRowWords * 8 <= kCallEntriesOffset,
              "signal pad too small for the count rows");

// Up to kMaxRanks device pointers (per-peer inputs or outputs of list collectives).
struct PtrList {
  char* p[kMaxRanks];
};

// A source's region in a buffer half starts 256-byte aligned: its size for `bytes` of data.
COMMX_HOST_DEVICE inline uint64_t align256(uint64_t bytes) { return (bytes + 255) & ~uint64_t(255); }

}  // namespace commx::cuda
