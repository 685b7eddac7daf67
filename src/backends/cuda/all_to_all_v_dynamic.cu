// The all_to_all_v_dynamic kernel (see all_to_all_v_dynamic.h). Layer: backends (cuda).
//
// Per op, with E the op counter at launch and R = one rank's share of a buffer half:
//  1. every rank writes its row (counts in canonical order, capacity, input size, row size) into
//     slot [E & 1][rank] of every peer's signal pad; block barrier on flag_value(E, 0);
//  2. every block reads all rows and runs the agreed check: on a problem, every rank reports the
//     same problem in HostCtl::counts, moves nothing and ends the op as usual (the op counters
//     stay in step, so the comm goes on);
//  3. each pair's segments form one byte stream, sent in rounds of R bytes: round i pushes into
//     half (E + 1 + i) of the receivers' buffers, region `sender`, then block barrier on
//     flag_value(E + 1 + i, 0), then each receiver copies its regions out. The op uses the op
//     counters E .. E + rounds, so the next op's flags and halves follow on.
// Bytes go to blocks by their offset in the window, the same for sender and receiver and in every
// round (copy_piece), so block b's barrier covers exactly the bytes block b reads, and the reuse
// of a half two rounds later.
#include "algorithms/dynamic_a2a_check.h"
#include "cuda/all_to_all_v_dynamic.h"
#include "cuda/launch.cuh"
#include "cuda/sync_device.cuh"
#include "cuda_common/dynamic_a2a_args.h"
#include "cuda_common/dynamic_counts_report_device.cuh"

namespace commx::cuda {
namespace {

using Byte = unsigned char;
constexpr int kMaxSegs = static_cast<int>(kMaxDynamicSegments);

// Slot of `sender`'s row, parity p, in the pad at `pad` (a rank's signal pad).
__device__ __forceinline__ long long* row_slot(unsigned long long* pad, int p, int sender) {
  return reinterpret_cast<long long*>(reinterpret_cast<Byte*>(pad) + kDynamicRowsOffset) +
         (p * kMaxRanks + sender) * kDynamicRowWords;
}

// Copies the part of [seg_at, seg_at + len) (stream bytes) inside [win, win + win_len), between
// the window (`src` when `src_is_window`, else `dst`: its byte 0 is stream byte `win`) and the
// segment (the other pointer: its byte 0 is stream byte `seg_at`). The bytes are dealt to the
// grid's threads by their offset in the window (16-byte pack j to thread j mod the grid), not by
// their offset in the piece: the rank that writes a window and the rank that reads it, in every
// round, give each byte to the same block. Each block only reads what the same block of the peer
// wrote, and a half is reused two rounds later only after that block's barrier of the round
// between, so per-block barriers order every reuse (dealing by piece offset, which moves with
// the segments' cuts from round to round, let a block overwrite bytes another block of the peer
// still read).
__device__ __forceinline__ void copy_piece(const Byte* src, bool src_is_window, Byte* dst,
                                           unsigned long long seg_at, unsigned long long len,
                                           unsigned long long win, unsigned long long win_len) {
  const unsigned long long a = max(seg_at, win), b = min(seg_at + len, win + win_len);
  if (a >= b) return;  // before subtracting `win`: a segment that ends before the window is empty
  const unsigned long long lo = a - win, hi = b - win;
  // Window offset x is at window + x and at segment + (x + win - seg_at).
  const long long shift = static_cast<long long>(win) - static_cast<long long>(seg_at);
  const Byte* from = src_is_window ? src : src + shift;
  Byte* to = src_is_window ? dst + shift : dst;
  const bool aligned = ((reinterpret_cast<uintptr_t>(from) | reinterpret_cast<uintptr_t>(to)) & 15) == 0;
  constexpr int U = 4;
  const unsigned long long threads = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  const unsigned long long me = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const unsigned long long first = lo / 16, end = (hi + 15) / 16;  // packs touching [lo, hi)
  unsigned long long j = first + (me + threads - first % threads) % threads;
  // Whole packs inside [lo, hi), U at a time (loads first: more in flight).
  const unsigned long long whole_first = (lo + 15) / 16, whole_end = hi / 16;
  if (aligned) {
    while (j < whole_first && j < end) {  // a partial head pack
      for (unsigned long long x = max(j * 16, lo); x < min(j * 16 + 16, hi); ++x) to[x] = from[x];
      j += threads;
    }
    for (; j + (U - 1) * threads < whole_end; j += U * threads) {
      uint4 v[U];
#pragma unroll
      for (int u = 0; u < U; ++u) v[u] = *reinterpret_cast<const uint4*>(from + (j + u * threads) * 16);
#pragma unroll
      for (int u = 0; u < U; ++u) *reinterpret_cast<uint4*>(to + (j + u * threads) * 16) = v[u];
    }
    for (; j < whole_end; j += threads)
      *reinterpret_cast<uint4*>(to + j * 16) = *reinterpret_cast<const uint4*>(from + j * 16);
  }
  for (; j < end; j += threads)  // unaligned packs, and a partial tail pack
    for (unsigned long long x = max(j * 16, lo); x < min(j * 16 + 16, hi); ++x) to[x] = from[x];
}

__global__ void __launch_bounds__(kThreads) all_to_all_v_dynamic_kernel(PeerSet ps,
                                                                            DynamicA2AArgs a) {
  const unsigned long long epoch = begin_op(ps);
  const int me = ps.rank, world = ps.world, L = a.layout.experts_per_rank, segs = world * L;
  const int words = segs + kTailWords;
  const DynamicLayout layout{world, L, a.layout.form};
  const Byte* in = static_cast<const Byte*>(a.in);
  Byte* out = static_cast<Byte*>(a.out);
  const int parity = static_cast<int>(epoch & 1ull);

  __shared__ long long rows[kMaxRanks][kDynamicRowWords];
  // Per canonical segment c = (peer p, l): rows and row offsets of what this rank sends to p
  // (in its input, and in the stream to p) and receives from p (in its output, in p's stream).
  __shared__ long long send_in[kMaxSegs], send_pos[kMaxSegs];
  __shared__ long long recv_out[kMaxSegs], recv_pos[kMaxSegs];
  __shared__ long long problem[5];  // DynamicCountsProblem: kind, rank, a, b, c
  __shared__ unsigned long long rounds;

  for (int c = threadIdx.x; c < segs; c += blockDim.x)
    rows[me][c] = a.in_counts[layout.send_index(c / L, c % L)];
  if (threadIdx.x == 0) {
    rows[me][segs + kTailCapacity] = a.out_elems;
    rows[me][segs + kTailInput] = a.in_elems;
    rows[me][segs + kTailRowElems] = a.row_elems;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < world * words; i += blockDim.x) {
    const int p = i / words, w = i % words;
    if (p != me) row_slot(ps.sig[p], parity, me)[w] = rows[me][w];
  }
  if (!block_barrier(ps, flag_value(epoch, 0))) return finish_op(ps, epoch);
  for (int i = threadIdx.x; i < world * words; i += blockDim.x) {
    const int p = i / words, w = i % words;
    if (p != me)
      rows[p][w] = *reinterpret_cast<volatile long long*>(row_slot(ps.sig[me], parity, p) + w);
  }
  __syncthreads();

  const unsigned long long row_bytes =
      static_cast<unsigned long long>(rows[me][segs + kTailRowElems]) * a.elem_bytes;
  const unsigned long long region = (ps.half_bytes / world) & ~255ull;
  if (threadIdx.x == 0) {
    const DynamicCountsProblem found =
        check_dynamic_rows(layout, [&](int k, int w) { return rows[k][w]; });
    problem[0] = found.kind;
    problem[1] = found.rank;
    problem[2] = found.a;
    problem[3] = found.b;
    problem[4] = found.c;
    if (found.kind == DynamicCountsProblem::kNone) {
      // Offsets in send / receive order, then the streams' offsets in l order per peer.
      long long in_at[kMaxSegs], out_at[kMaxSegs];  // by send_index / recv_index
      long long acc_in = 0, acc_out = 0;
      // send_index / recv_index are bijections onto 0..segs-1: place the counts by them.
      for (int p = 0; p < world; ++p)
        for (int l = 0; l < L; ++l) {
          in_at[layout.send_index(p, l)] = rows[me][layout.canonical(p, l)];
          out_at[layout.recv_index(p, l)] = rows[p][layout.canonical(me, l)];
        }
      for (int i = 0; i < segs; ++i) {  // counts -> exclusive prefix sums
        const long long ci = in_at[i], co = out_at[i];
        in_at[i] = acc_in;
        out_at[i] = acc_out;
        acc_in += ci;
        acc_out += co;
      }
      unsigned long long most = 0;  // the longest stream between two ranks, in rows
      for (int k = 0; k < world; ++k)
        for (int j = 0; j < world; ++j) {
          if (k == j) continue;
          unsigned long long s = 0;
          for (int l = 0; l < L; ++l) s += rows[k][layout.canonical(j, l)];
          most = max(most, s);
        }
      for (int p = 0; p < world; ++p) {
        long long sp = 0, rp = 0;
        for (int l = 0; l < L; ++l) {
          const int c = layout.canonical(p, l);
          send_in[c] = in_at[layout.send_index(p, l)];
          recv_out[c] = out_at[layout.recv_index(p, l)];
          send_pos[c] = sp;
          recv_pos[c] = rp;
          sp += rows[me][c];
          rp += rows[p][layout.canonical(me, l)];
        }
      }
      rounds = (most * row_bytes + region - 1) / region;
    }
  }
  __syncthreads();
  if (problem[0] != DynamicCountsProblem::kNone) {
    if (blockIdx.x == 0 && threadIdx.x == 0)
      report_dynamic_counts(&ps.ctl->counts, ps.op, ps.seq, problem, L);
    return finish_op(ps, epoch);
  }
  if (blockIdx.x == 0)
    for (int c = threadIdx.x; c < segs; c += blockDim.x) {
      const int p = c / L, l = c % L;
      a.out_counts[layout.recv_index(p, l)] = rows[p][layout.canonical(me, l)];
    }
  // This rank's own segments: straight from input to output.
  for (int l = 0; l < L; ++l) {
    const int c = layout.canonical(me, l);
    const unsigned long long len = rows[me][c] * row_bytes;
    if (len)
      copy_piece(in + send_in[c] * row_bytes, false, out + recv_out[c] * row_bytes, 0, len, 0,
                 len);
  }
  const unsigned long long n_rounds = rounds;
  for (unsigned long long r = 0; r < n_rounds; ++r) {
    const unsigned long long e = epoch + 1 + r, win = r * region;
    for (int k = 1; k < world; ++k) {  // next rank first: no rank's links take every push at once
      const int p = (me + k) % world;
      Byte* to = reinterpret_cast<Byte*>(half_of(ps, p, e)) + me * region;
      for (int l = 0; l < L; ++l) {
        const int c = layout.canonical(p, l);
        copy_piece(in + send_in[c] * row_bytes, false, to, send_pos[c] * row_bytes,
                   rows[me][c] * row_bytes, win, region);
      }
    }
    if (!block_barrier(ps, flag_value(e, 0))) return finish_op(ps, epoch + n_rounds);
    for (int p = 0; p < world; ++p) {
      if (p == me) continue;
      const Byte* from = reinterpret_cast<const Byte*>(half_of(ps, me, e)) + p * region;
      for (int l = 0; l < L; ++l) {
        const int c = layout.canonical(p, l);
        copy_piece(from, true, out + recv_out[c] * row_bytes, recv_pos[c] * row_bytes,
                   rows[p][layout.canonical(me, l)] * row_bytes, win, region);
      }
    }
  }
  finish_op(ps, epoch + n_rounds);
}

}  // namespace

void enqueue_all_to_all_v_dynamic(const PeerSet& ps, const OpDesc& op, int blocks, cudaStream_t s) {
  const DynamicA2AArgs a = dynamic_a2a_args(op, ps.rank, ps.world);
  launch_kernel(all_to_all_v_dynamic_kernel, blocks, kThreads, s, ps, a);
}

void preload_all_to_all_v_dynamic_kernels() {
  launch_kernel(all_to_all_v_dynamic_kernel, 1, kThreads, nullptr, PeerSet{}, DynamicA2AArgs{});
}

}  // namespace commx::cuda
