// Device-side synchronisation helpers: release/acquire system-scope flags, a clock-based bound on
// every spin, and the per-block cross-rank barrier built from them. Layer: backends (cuda).
// Every wait here ends: on success, on the op's timeout (reported through HostCtl as
// kDevTimeout naming the peer), or when the host sets HostCtl::abort (kDevAborted).
#pragma once

#include <cstdint>

#include "cuda/kernel_params.h"

namespace commx::cuda {

__device__ __forceinline__ void st_release_sys(unsigned long long* p, unsigned long long v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ unsigned long long ld_acquire_sys(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ unsigned long long global_timer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Records the first error of this comm for the host. The claim is a device-memory atomic
// (atomics on host memory are not portable); the report is written with plain stores, the code last.
__device__ __forceinline__ void report_error(const PeerSet& ps, int code, int peer) {
  if (atomicCAS(&ps.state->error_claimed, 0, 1) == 0) {
    volatile HostCtl* c = ps.ctl;
    c->error_peer = peer;
    c->error_block = blockIdx.x;
    c->error_op = ps.op;
    c->error_seq = ps.seq;
    __threadfence_system();
    c->error_code = code;
    __threadfence_system();
  }
}

// The state of one bounded wait. A poll that found nothing calls miss(): the first kTightPolls
// misses poll again at once (a peer in step lands within microseconds); later misses sleep
// (__nanosleep, doubling up to PeerSet::poll_sleep_ns) so an early rank polls its buffer gently.
// The clock is read every 64 misses against the op's timeout, the host's abort flag (a PCIe read
// of mapped host memory) only every 1024: when each of the up to 132 x 512 LL pollers read it
// every 256 polls, the reads queued and an all_reduce whose peer came 100 us late took
// 0.3-1.2 ms instead of ~0.1 ms (the same with the sleep off, so the reads were the cause).
inline constexpr unsigned int kTightPolls = 32;

struct PollWait {
  unsigned int misses = 0;
  unsigned int sleep_ns = 0;
  unsigned long long start = 0;

  // kDevOk: poll again; else the error to report (kDevTimeout, kDevAborted).
  __device__ __forceinline__ int miss(const PeerSet& ps) {
    ++misses;
    if (misses == 1) start = global_timer_ns();
    if (misses <= kTightPolls) return kDevOk;
    if (ps.poll_sleep_ns) {
      sleep_ns = sleep_ns ? min(sleep_ns * 2u, ps.poll_sleep_ns) : min(32u, ps.poll_sleep_ns);
      __nanosleep(sleep_ns);
    }
    if ((misses & 63u) != 0) return kDevOk;
    if ((misses & 1023u) == 0 && ps.ctl->abort) return kDevAborted;
    if (global_timer_ns() - start > ps.timeout_ns) return kDevTimeout;
    return kDevOk;
  }
};

// Spins until *flag >= value. Returns false after reporting a timeout or abort.
__device__ __forceinline__ bool wait_flag(const PeerSet& ps, const unsigned long long* flag,
                                          unsigned long long value, int peer) {
  PollWait w;
  while (ld_acquire_sys(flag) < value) {
    if (int err = w.miss(ps)) {
      report_error(ps, err, peer);
      return false;
    }
  }
  return true;
}

// Flag value of barrier `i` (0..3) of the op numbered `epoch`: strictly increasing over ops, so
// flags never need resetting and a peer one op ahead still satisfies ">=".
__device__ __forceinline__ unsigned long long flag_value(unsigned long long epoch, int i) {
  return epoch * 4ull + static_cast<unsigned long long>(i) + 1ull;
}

// Block `blockIdx.x` of every rank meets here: all writes this block made before the call (to
// its own or to peers' buffers) are visible to the same block of every peer after it.
// Returns false on timeout/abort (uniformly for the whole block).
__device__ __forceinline__ bool block_barrier(const PeerSet& ps, unsigned long long value) {
  __syncthreads();
  bool ok = true;
  const int t = threadIdx.x;
  if (t < ps.world && t != ps.rank) {
    st_release_sys(&ps.sig[t][blockIdx.x * kMaxRanks + ps.rank], value);
    ok = wait_flag(ps, &ps.sig[ps.rank][blockIdx.x * kMaxRanks + t], value, t);
  }
  return __syncthreads_and(ok) != 0;
}

// Start of every kernel: with programmatic dependent launch (PDL) the kernel may start before
// the previous kernel on the stream ended; griddepcontrol.wait returns once it has completed and
// its writes are visible (a no-op without PDL). Then lets the next kernel launch early, and
// returns the op counter of this kernel (set by the previous kernel of this comm).
__device__ __forceinline__ unsigned long long begin_op(const PeerSet& ps) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  return *reinterpret_cast<volatile unsigned long long*>(&ps.state->epoch);
}

// Called by every block at its end: the last block advances the op counter for the next kernel
// (kernel completion, or griddepcontrol.wait in the next kernel, publishes it).
__device__ __forceinline__ void finish_op(const PeerSet& ps, unsigned long long epoch) {
  if (gridDim.x == 1) {
    if (threadIdx.x == 0) ps.state->epoch = epoch + 1;
    return;
  }
  __syncthreads();
  if (threadIdx.x == 0 && atomicAdd(&ps.state->done_blocks, 1u) == gridDim.x - 1) {
    ps.state->done_blocks = 0;
    ps.state->epoch = epoch + 1;
  }
}

// LL protocol (NCCL's): a 16-byte line {d0, flag, d1, flag} written by one vector store; each
// 8-byte half is seen whole, so a reader that sees both flags sees both data words.
__device__ __forceinline__ void st_ll(char* p, uint32_t d0, uint32_t d1, uint32_t flag) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(d0), "r"(flag),
               "r"(d1), "r"(flag)
               : "memory");
}

// Polls one LL line until both flags equal `flag`; false after a timeout or abort (reported).
__device__ __forceinline__ bool ld_ll(const PeerSet& ps, const char* p, uint32_t flag, int peer,
                                      uint32_t& d0, uint32_t& d1) {
  uint32_t f0, f1;
  PollWait w;
  for (;;) {
    asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(d0), "=r"(f0), "=r"(d1), "=r"(f1)
                 : "l"(p)
                 : "memory");
    if (f0 == flag && f1 == flag) return true;
    if (int err = w.miss(ps)) {
      report_error(ps, err, peer);
      return false;
    }
  }
}

// The LL flag of the op numbered `epoch` (lines of op k-2 in the same buffer half differ).
__device__ __forceinline__ uint32_t ll_flag(unsigned long long epoch) {
  return static_cast<uint32_t>(epoch) + 1u;
}

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

// The LL128 flag of the op numbered `epoch`: the op counter + 1 (lines of op k-2 in the same
// buffer half differ), xor-ed with a constant tag so that stale raw data another algorithm left
// in the buffer (small integers, common float patterns) is unlikely to look like a flag.
__device__ __forceinline__ uint64_t ll128_flag(unsigned long long epoch) {
  return 0x4c4c313238000000ull ^ (static_cast<uint64_t>(epoch) + 1ull);
}

// Polls the 128-byte line at `p` (this lane's 16 bytes: p + 16 * (lane & 7)) until every active
// group of the warp sees its flag; whole warps call it (warp-uniform control flow), `active`
// false for a group without a line. The warp retries as a whole (__any_sync), bounded and backing
// off like every wait (PollWait, the same state in every lane; lane 0's verdict is the warp's),
// reported by lane 0 with `peer`. Returns false (warp-uniformly) after a timeout or abort.
__device__ __forceinline__ bool ld_ll128_wait(const PeerSet& ps, const char* p, bool active,
                                              uint64_t flag, int peer, uint64_t& w0, uint64_t& w1) {
  const int lane = threadIdx.x & 31;
  const bool flag_lane = (lane & 7) == 7;
  PollWait w;
  w0 = w1 = 0;
  for (;;) {
    __syncwarp();  // one load instruction per line (the whole group reads it at once)
    if (active) ld_ll128(p, w0, w1);
    const bool bad = active && flag_lane && w1 != flag;
    if (!__any_sync(0xffffffffu, bad)) return true;
    const int err = __shfl_sync(0xffffffffu, w.miss(ps), 0);
    if (err != kDevOk) {
      if (lane == 0) report_error(ps, err, peer);
      return false;
    }
  }
}

// This op's half of rank r's data area.
__device__ __forceinline__ char* half_of(const PeerSet& ps, int r, unsigned long long epoch) {
  return ps.data[r] + (epoch & 1ull) * ps.half_bytes;
}

}  // namespace commx::cuda
