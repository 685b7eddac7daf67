// LL128 line streams of the FP8 all_reduce (lowp_round.cuh): the gather (P2 -> P3) and, at 2
// ranks, the first push (P1 -> P2). Each warp sends the codes of its units as one stream of
// 128-byte lines that carry 120 bytes of payload and the op's flag (protocol_ll128.cuh), so its
// twin warp on a peer uses each unit as soon as its lines have landed, with no barrier and no
// fence between the phases. Staged through shared memory: a unit's payload (a term: 8 bytes of
// scale words, then 16 bytes of codes per lane, lane order) does not divide into lines. The
// stream of warp gw of the grid starts at gw * stride in its slot. Layer: backends (cuda).
#pragma once

#include <cstdint>

#include "cuda/kernel_params.h"
#include "cuda/protocol_ll128.cuh"

namespace commx::cuda {
namespace {

constexpr int kTermBytes = 520;  // one term of a pair of 256-value codec blocks
// Bytes of a warp's rings (powers of two): what it sends or receives last (up to two terms), and
// what it receives in P1 (one term) while it sends P2's lines. Together 48 KiB a block.
constexpr int kLineRing = 2048, kInRing = 1024;
static_assert(kLineRing >= 2 * kTermBytes + 4 * kLL128Payload, "a unit and 4 lines fit");
static_assert(kInRing >= kTermBytes + 4 * kLL128Payload, "a unit and 4 lines fit");

// Lines of a stream holding `units` units of `unit_bytes` payload bytes each.
__host__ __device__ inline int64_t stream_lines(int64_t units, int unit_bytes) {
  return (units * unit_bytes + kLL128Payload - 1) / kLL128Payload;
}

// One warp's stream: its staging ring (shared memory) and counters, warp-uniform.
struct LineStream {
  uint8_t* ring;
  int mask;        // ring bytes - 1
  int64_t staged;  // payload bytes staged (sender) or received (receiver)
  int64_t lines;   // lines sent or received
  uint64_t flag;

  __device__ __forceinline__ uint64_t get(int64_t off) const {
    return *reinterpret_cast<const uint64_t*>(ring + (off & mask));
  }
  __device__ __forceinline__ void put(int64_t off, uint64_t v) {
    *reinterpret_cast<uint64_t*>(ring + (off & mask)) = v;
  }
};

__device__ __forceinline__ uint64_t join(uint32_t lo, uint32_t hi) {
  return static_cast<uint64_t>(hi) << 32 | lo;
}

// This warp's streams, each on a ring of the kernel's shared memory: the one that sends and
// receives the gather (and sends P1), and the one that receives P1 during P2.
__device__ __forceinline__ LineStream line_stream(uint64_t flag) {
  __shared__ __align__(16) uint8_t rings[kThreads / 32][kLineRing];
  return LineStream{rings[threadIdx.x >> 5], kLineRing - 1, 0, 0, flag};
}
__device__ __forceinline__ LineStream line_stream_in(uint64_t flag) {
  __shared__ __align__(16) uint8_t rings[kThreads / 32][kInRing];
  return LineStream{rings[threadIdx.x >> 5], kInRing - 1, 0, 0, flag};
}

// A stream being received: its lines at `src` (`total` of them), from `peer`.
struct InLines {
  LineStream s;
  const uint8_t* src;
  int64_t total;
  int peer;
};

// Sender: appends one term of a unit (whole warp).
__device__ __forceinline__ void stage_term(LineStream& s, uint2 sb, const uint4& w) {
  const int lane = threadIdx.x & 31;
  if (lane == 0) s.put(s.staged, join(sb.x, sb.y));
  s.put(s.staged + 8 + 16 * lane, join(w.x, w.y));
  s.put(s.staged + 16 + 16 * lane, join(w.z, w.w));
  s.staged += kTermBytes;
}

// Sender: writes the staged whole lines (with `flush`, all staged bytes, the last line padded)
// at `off` of every destination of `d`, four lines per warp store where there are four.
template <typename Dsts>
__device__ __forceinline__ void send_lines(LineStream& s, const Dsts& d, uint64_t off,
                                           bool flush) {
  const int lane = threadIdx.x & 31, g = lane >> 3, j = lane & 7;
  __syncwarp();
  for (;;) {
    const int64_t ready = flush ? stream_lines(s.staged, 1) : s.staged / kLL128Payload;
    const int64_t k = min(int64_t(4), ready - s.lines);
    if (k <= 0 || (k < 4 && !flush)) break;
    if (g < k) {
      const int64_t line = s.lines + g, at = line * kLL128Payload + 16 * j;
      const uint64_t w0 = s.get(at), w1 = j == 7 ? s.flag : s.get(at + 8);
#pragma unroll (Dsts::kCap <= 4 ? Dsts::kCap : 1)
      for (int p = 0; p < Dsts::kCap; ++p) {
        if (p >= d.count) break;
        st_ll128(reinterpret_cast<char*>(d.p[p]) + off + line * kLL128Line + 16 * j, w0, w1);
      }
    }
    s.lines += k;
  }
  __syncwarp();
}

// Receiver: takes lines of the stream at `src` (of `total` lines, written by `peer`) into the
// ring until it holds the payload up to byte `need`; false after a timeout, abort or mismatch.
__device__ __forceinline__ bool recv_lines(LineStream& s, const PeerSet& ps, const uint8_t* src,
                                           int64_t total, int64_t need, int peer) {
  const int lane = threadIdx.x & 31, g = lane >> 3, j = lane & 7;
  while (s.lines * kLL128Payload < need) {
    const int64_t k = min(int64_t(4), total - s.lines);
    if (k <= 0) __trap();  // not reached: `need` lies within the stream
    const int64_t line = s.lines + g, at = line * kLL128Payload + 16 * j;
    uint64_t w0, w1;
    if (!ld_ll128_wait(ps, reinterpret_cast<const char*>(src) + line * kLL128Line + 16 * j, g < k,
                       s.flag, peer, w0, w1))
      return false;
    if (g < k) {
      s.put(at, w0);
      if (j != 7) s.put(at + 8, w1);
    }
    s.lines += k;
  }
  __syncwarp();
  return true;
}

// Receiver: this lane's part of the term at payload byte `at` (received).
__device__ __forceinline__ void take_term(const LineStream& s, int64_t at, uint2& sb, uint4& w) {
  const int lane = threadIdx.x & 31;
  const uint64_t a = s.get(at), c0 = s.get(at + 8 + 16 * lane), c1 = s.get(at + 16 + 16 * lane);
  sb = make_uint2(static_cast<uint32_t>(a), static_cast<uint32_t>(a >> 32));
  w = make_uint4(static_cast<uint32_t>(c0), static_cast<uint32_t>(c0 >> 32),
                 static_cast<uint32_t>(c1), static_cast<uint32_t>(c1 >> 32));
}

}  // namespace
}  // namespace commx::cuda
