// The LL protocol of the cuda backend's kernels: data and flag travel in one store, so a reader
// polls the data itself (no fence, no barrier). Layer: backends (cuda).
#pragma once

#include <cstdint>

#include "cuda/kernel_params.h"
#include "cuda/sync_device.cuh"

namespace commx::cuda {

// LL protocol (NCCL's): a 16-byte line {d0, flag0, d1, flag1} written by one vector store; each
// 8-byte half is seen whole, so a reader that sees both flags sees both data words.
// flag0 is the op counter + 1, flag1 that xor the low half of the call hash (LLFlags): a line of
// a peer that issued another call at the same op counter never passes, and a line of an older op
// in the same buffer half fails flag0.
struct LLFlags {
  uint32_t f0, f1;
};

__device__ __forceinline__ void st_ll(char* p, uint32_t d0, uint32_t d1, LLFlags flag) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(d0), "r"(flag.f0),
               "r"(d1), "r"(flag.f1)
               : "memory");
}

// Polls one LL line until both flags are `flag`'s; false after a timeout, abort or mismatch
// (reported). One lane per warp checks the peer's call entry while waiting long: enough to find
// a mismatch, without every poller of a large op reading the peer's pad.
__device__ __forceinline__ bool ld_ll(const PeerSet& ps, const char* p, LLFlags flag, int peer,
                                      uint32_t& d0, uint32_t& d1) {
  uint32_t f0, f1;
  PollWait w;
  const int checked = (threadIdx.x & 31) == 0 ? peer : -1;
  for (;;) {
    asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(d0), "=r"(f0), "=r"(d1), "=r"(f1)
                 : "l"(p)
                 : "memory");
    if (f0 == flag.f0 && f1 == flag.f1) return true;
    if (int err = w.miss(ps, checked, flag.f0 - 1u)) {
      report_wait_error(ps, w, err, peer, flag.f0 - 1u);
      return false;
    }
  }
}

// The LL flags of the op numbered `epoch` (lines of op k-2 in the same buffer half differ).
__device__ __forceinline__ LLFlags ll_flag(const PeerSet& ps, unsigned long long epoch) {
  const uint32_t f0 = static_cast<uint32_t>(epoch) + 1u;
  return {f0, f0 ^ static_cast<uint32_t>(ps.call.hash)};
}

}  // namespace commx::cuda
