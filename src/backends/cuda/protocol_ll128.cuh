// The LL128 protocol of the cuda backend's kernels: 120 payload bytes and a flag in a 128-byte
// line written by one warp store. Layer: backends (cuda).
#pragma once

#include <cstdint>

#include "cuda/kernel_params.h"
#include "cuda/sync_device.cuh"

namespace commx::cuda {

// LL128 protocol (NCCL's design, our code): a 128-byte line of 16 64-bit words written by the 8
// lanes of an aligned lane group with one 16-byte vector store each, in one warp instruction;
// words 0..14 carry 120 payload bytes, word 15 (the second word of the group's lane 7) the
// flag, in the line's highest 8 bytes. It relies on the path from the writing SM to the reader
// (GPU memory system, NVLink, NVSwitch) never splitting and reordering such a 128-byte aligned
// warp store: its bytes land in ascending address order, so a reader whose one 128-byte warp load
// sees the flag also sees the 120 bytes below it. NCCL verified this and enables its LL128 by
// default only on NVLink of Volta/Ampere/Hopper (NVIDIA/nccl issues #281, #786). Sizes:
// kLL128Line, kLL128Payload (kernel_params.h).

__device__ __forceinline__ void st_ll128(char* p, uint64_t w0, uint64_t w1) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1,%2};" ::"l"(p), "l"(w0), "l"(w1) : "memory");
}

__device__ __forceinline__ void ld_ll128(const char* p, uint64_t& w0, uint64_t& w1) {
  asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];" : "=l"(w0), "=l"(w1) : "l"(p) : "memory");
}

// The LL128 flag of the op numbered `epoch`: the op counter + 1 in the low half (lines of op k-2
// in the same buffer half differ), the high half of the call hash xor a constant tag in the high
// half (a line of a peer that issued another call never passes; with the tag, stale raw data
// another algorithm left in the buffer, small integers or common float patterns, is unlikely to
// look like a flag even on unchecked paths, whose hash is 0).
__device__ __forceinline__ uint64_t ll128_flag(const PeerSet& ps, unsigned long long epoch) {
  return ((0x4c4c3132ull ^ (ps.call.hash >> 32)) << 32) |
         static_cast<uint32_t>(static_cast<uint64_t>(epoch) + 1ull);
}

// Polls the 128-byte line at `p` (this lane's 16 bytes: p + 16 * (lane & 7)) until every active
// group of the warp sees its flag; whole warps call it (warp-uniform control flow), `active`
// false for a group without a line. The warp retries as a whole (__any_sync), bounded and backing
// off like every wait (PollWait, the same state in every lane; lane 0's verdict is the warp's),
// reported by lane 0 with `peer`, which also checks the peer's call entry while waiting long.
// Returns false (warp-uniformly) after a timeout, abort or mismatch.
__device__ __forceinline__ bool ld_ll128_wait(const PeerSet& ps, const char* p, bool active,
                                              uint64_t flag, int peer, uint64_t& w0, uint64_t& w1) {
  const int lane = threadIdx.x & 31;
  const bool flag_lane = (lane & 7) == 7;
  const uint32_t epoch32 = static_cast<uint32_t>(flag) - 1u;
  PollWait w;
  w0 = w1 = 0;
  for (;;) {
    __syncwarp();  // one load instruction per line (the whole group reads it at once)
    if (active) ld_ll128(p, w0, w1);
    const bool bad = active && flag_lane && w1 != flag;
    if (!__any_sync(0xffffffffu, bad)) return true;
    const int err = __shfl_sync(0xffffffffu, w.miss(ps, lane == 0 ? peer : -1, epoch32), 0);
    if (err != kDevOk) {
      if (lane == 0) report_wait_error(ps, w, err, peer, epoch32);
      return false;
    }
  }
}

// Lane j's part of line-packed input (see flat_ll128_kernel): `cnt` elements from e0 (half a
// lane's for lane 7, whose second word is the flag), zero past n; with `vec`, as 8-byte loads.
template <typename T>
__device__ __forceinline__ void ll128_load(const T* in, int64_t n, int64_t e0, int cnt, bool vec,
                                           uint64_t& w0, uint64_t& w1) {
  constexpr int E = 16 / sizeof(T);
  if (vec && e0 + cnt <= n) {  // 8-byte aligned (120 and 16 are multiples of 8)
    const uint64_t* p = reinterpret_cast<const uint64_t*>(in + e0);
    w0 = p[0];
    w1 = cnt == E ? p[1] : 0;
    return;
  }
  T v[E];
#pragma unroll
  for (int k = 0; k < E; ++k) v[k] = k < cnt && e0 + k < n ? in[e0 + k] : T(0);
  uint64_t w[2];
  memcpy(w, v, 16);
  w0 = w[0];
  w1 = w[1];
}

}  // namespace commx::cuda
