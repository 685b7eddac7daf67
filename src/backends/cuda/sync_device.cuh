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

// --- Call checks (see kernel_params.h: DeviceCall and the call entries of the pad) ---

__device__ __forceinline__ unsigned long long* call_entry(unsigned long long* pad, int parity) {
  return reinterpret_cast<unsigned long long*>(reinterpret_cast<char*>(pad) + kCallEntriesOffset) +
         parity * kCallEntryWords;
}

// Reads the call entry, in the pad `peer_pad` of a peer, of the op whose counter has low half
// `epoch32`; false when the peer is not (visibly) in that op, or the entry was read half-written
// (its hash does not match). Out of line, so given plain values: an out-of-line helper that takes
// the kernel's PeerSet or a PollWait by address gave every kernel a 312-376 byte stack frame and
// kept each wait's state in local memory (+0.6-1.0 us an op below 4 KiB, graph-captured).
__device__ __forceinline__ bool read_peer_call(const unsigned long long* peer_pad,
                                                   uint32_t epoch32,
                                                   unsigned long long (&words)[5],
                                                   unsigned long long& hash) {
  const volatile unsigned long long* e =
      call_entry(const_cast<unsigned long long*>(peer_pad), epoch32 & 1u);
  if (static_cast<uint32_t>(e[6]) != epoch32 + 1u) return false;
  for (int w = 0; w < 5; ++w) words[w] = e[w];
  hash = e[5];
  return call_hash(words) == hash && static_cast<uint32_t>(e[6]) == epoch32 + 1u;
}

// The hash of the call in `peer_pad`'s entry of op `epoch32` when it is not `mine`, else 0.
__device__ __forceinline__ unsigned long long other_call_hash(const unsigned long long* peer_pad,
                                                                  uint32_t epoch32,
                                                                  unsigned long long mine) {
  unsigned long long words[5], hash;
  if (!read_peer_call(peer_pad, epoch32, words, hash) || hash == mine) return 0;
  return hash;
}

// Reports that `peer` issued another call than ps.call: the one hashed `their` or, with an
// `at_value`, the one whose flag_check at that value is `their`; with the peer's whole call when
// its entry shows it within a millisecond.
__device__ __forceinline__ void report_mismatch(const PeerSet& ps, int peer, uint32_t epoch32,
                                                unsigned long long their,
                                                unsigned long long at_value = 0) {
  unsigned long long words[5] = {0, 0, 0, 0, 0}, hash = 0;
  bool known = false;
  const unsigned long long t0 = global_timer_ns();
  while (!(known = read_peer_call(ps.sig[peer], epoch32, words, hash) &&
                   (at_value ? flag_check(hash, at_value) == their : hash == their)) &&
         global_timer_ns() - t0 < 1000000ull)
    __nanosleep(1000);
  const unsigned long long their_hash = known ? hash : their;
  if (atomicCAS(&ps.state->error_claimed, 0, 1) != 0) return;
  volatile HostCtl* c = ps.ctl;
  c->error_peer = peer;
  c->error_block = blockIdx.x;
  c->error_op = ps.op;
  c->error_seq = ps.seq;
  for (int w = 0; w < 5; ++w) {
    c->error_calls[0][w] = ps.call.words[w];
    c->error_calls[1][w] = known ? words[w] : 0ull;
  }
  c->error_hashes[0] = ps.call.hash;
  c->error_hashes[1] = their_hash;
  c->error_check_value = known ? 0 : at_value;
  c->error_peer_call_known = known ? 1 : 0;
  __threadfence_system();
  c->error_code = kDevMismatch;
  __threadfence_system();
}

// The state of one bounded wait. A poll that found nothing calls miss(): the first kTightPolls
// misses poll again at once (a peer in step lands within microseconds); later misses sleep
// (__nanosleep, doubling up to PeerSet::poll_sleep_ns) so an early rank polls its buffer gently.
// The clock is read every 64 misses against the op's timeout, the host's abort flag (a PCIe read
// of mapped host memory) only every 1024: when each of the up to 132 x 512 LL pollers read it
// every 256 polls, the reads queued and an all_reduce whose peer came 100 us late took
// 0.3-1.2 ms instead of ~0.1 ms (the same with the sleep off, so the reads were the cause).
// Every 64 misses the wait also ends when another block of this rank failed the op (its error is
// reported), and every 1024, for a wait given the peer it waits for, when that peer's call entry
// shows another call at the same op counter twice in a row (an entry read while being rewritten
// does not count): the peer runs a different kernel, whose data or flags never come.
inline constexpr unsigned int kTightPolls = 32;

struct PollWait {
  unsigned int misses = 0;
  unsigned int sleep_ns = 0;
  unsigned long long start = 0;
  unsigned long long their_hash = 0;  // kDevMismatch: the peer's call

  // kDevOk: poll again; else the error to report (kDevTimeout, kDevAborted, kDevMismatch).
  // `peer` >= 0: the rank waited for, whose call entry of op `epoch32` is checked.
  __device__ __forceinline__ int miss(const PeerSet& ps, int peer = -1, uint32_t epoch32 = 0) {
    ++misses;
    if (misses == 1) start = global_timer_ns();
    if (misses <= kTightPolls) return kDevOk;
    if (ps.poll_sleep_ns) {
      sleep_ns = sleep_ns ? min(sleep_ns * 2u, ps.poll_sleep_ns) : min(32u, ps.poll_sleep_ns);
      __nanosleep(sleep_ns);
    }
    if ((misses & 63u) != 0) return kDevOk;
    if (*reinterpret_cast<volatile int*>(&ps.state->error_claimed)) return kDevAborted;
    if ((misses & 1023u) == 0) {
      if (ps.ctl->abort) return kDevAborted;
      if (peer >= 0) {
        const unsigned long long theirs = other_call_hash(ps.sig[peer], epoch32, ps.call.hash);
        const bool again = theirs != 0 && theirs == their_hash;
        their_hash = theirs;
        if (again) return kDevMismatch;
      }
    }
    if (global_timer_ns() - start > ps.timeout_ns) return kDevTimeout;
    return kDevOk;
  }
};

// Reports the error a wait ended with.
__device__ __forceinline__ void report_wait_error(const PeerSet& ps, const PollWait& w, int err,
                                                  int peer, uint32_t epoch32) {
  if (err == kDevMismatch)
    report_mismatch(ps, peer, epoch32, w.their_hash);
  else
    report_error(ps, err, peer);
}

// Spins until *flag >= value; `seen` is the value that ended the wait. Returns false after
// reporting a timeout, abort or mismatch (`epoch` is the op of the wait, for the call check).
__device__ __forceinline__ bool wait_flag(const PeerSet& ps, const unsigned long long* flag,
                                          unsigned long long value, int peer,
                                          unsigned long long epoch, unsigned long long& seen) {
  PollWait w;
  while ((seen = ld_acquire_sys(flag)) < value) {
    if (int err = w.miss(ps, peer, static_cast<uint32_t>(epoch))) {
      report_wait_error(ps, w, err, peer, static_cast<uint32_t>(epoch));
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
// Each rank's flag carries its call check (barrier_word); a rank that sees a peer's flag of this
// very step with another check stops before anything after the barrier runs. A flag past this
// step means the peer passed it, which it did only after seeing this rank's flag of this step
// with its own call's check. (A call word stored beside the flag made the release fence wait for
// one more NVLink write: 2-6% at 1-8 MiB on 4 ranks.)
// Returns false on timeout/abort/mismatch (uniformly for the whole block).
__device__ __forceinline__ bool block_barrier(const PeerSet& ps, unsigned long long value) {
  __syncthreads();
  bool ok = true;
  const int t = threadIdx.x;
  if (t < ps.world && t != ps.rank) {
    const unsigned long long epoch = (value - 1) >> 2;  // flag_value's op
    const unsigned long long mine = barrier_word(value, ps.call.hash);
    st_release_sys(&ps.sig[t][blockIdx.x * kMaxRanks + ps.rank], mine);
    unsigned long long seen;
    ok = wait_flag(ps, &ps.sig[ps.rank][blockIdx.x * kMaxRanks + t],
                   value << kFlagCheckBits, t, epoch, seen);
    if (ok && seen != mine && seen < ((value + 1) << kFlagCheckBits)) {
      const unsigned long long mask = (1ull << kFlagCheckBits) - 1;
      report_mismatch(ps, t, static_cast<uint32_t>(epoch), seen & mask, value);
      ok = false;
    }
  }
  return __syncthreads_and(ok) != 0;
}

// Start of every kernel: with programmatic dependent launch (PDL) the kernel may start before
// the previous kernel on the stream ended; griddepcontrol.wait returns once it has completed and
// its writes are visible (a no-op without PDL). Then lets the next kernel launch early, and
// returns the op counter of this kernel (set by the previous kernel of this comm).
// One thread (the last of block 0: the one least likely to carry data of a small op) publishes
// the kernel's call entry in this rank's pad; not after an error, so that the entry of the op
// that failed stays for the peers that read it.
__device__ __forceinline__ unsigned long long begin_op(const PeerSet& ps) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const unsigned long long epoch = *reinterpret_cast<volatile unsigned long long*>(&ps.state->epoch);
  if (blockIdx.x == 0 && threadIdx.x == blockDim.x - 1 && ps.sig[ps.rank]) {
    const int failed = *reinterpret_cast<volatile int*>(&ps.state->error_claimed);
    if (!failed) {
      volatile unsigned long long* e = call_entry(ps.sig[ps.rank], static_cast<int>(epoch & 1ull));
      for (int w = 0; w < 5; ++w) e[w] = ps.call.words[w];
      e[5] = ps.call.hash;
      e[6] = epoch + 1;
    }
  }
  return epoch;
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

// This op's half of rank r's data area.
__device__ __forceinline__ char* half_of(const PeerSet& ps, int r, unsigned long long epoch) {
  return ps.data[r] + (epoch & 1ull) * ps.half_bytes;
}

}  // namespace commx::cuda
