// DDA all-reduce kernels: flat one-shot, LL128 one-shot and two-shot (also run by reduce with
// one output rank). Layer: backends (cuda). Inputs are pushed into the peers' registered buffers
// by the kernel itself (copy-in inside the kernel), so user buffers need no registration and
// launches can be captured into CUDA graphs. Reductions run in rank order 0..world-1 on every
// rank. The LL one-shot all-reduce is the LL reduce-scatter kernel given the same input for every
// peer (reduce_scatter_kernels.cu): one kernel, not two copies of it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/kernels.h"
#include "cuda/launch.cuh"
#include "cuda/protocol_ll128.cuh"
#include "cuda/protocol_simple.cuh"
#include "cuda/reduce_device.cuh"
#include "cuda/sync_device.cuh"
#include "cuda/tuning.h"

namespace commx::cuda {
namespace {

template <typename T, int OP>
__global__ void __launch_bounds__(kThreads) flat_kernel(PeerSet ps, const T* in, T* out, int64_t n,
                                                         int out_rank, Reducer<T, OP> rd,
                                                         bool aligned) {
  const unsigned long long epoch = begin_op(ps);
  const uint64_t region = align256(n * sizeof(T));
  const int me = ps.rank, world = ps.world;
  // 1. Push this rank's input into region `me` of every peer's buffer, starting with the next
  // rank (every rank writing to rank 0 first would make rank 0's links the bottleneck).
  for (int k = 1; k < world; ++k)
    copy_block(in, reinterpret_cast<T*>(half_of(ps, (me + k) % world, epoch) + me * region), n,
               aligned, true);
  if (!block_barrier(ps, flag_value(epoch, 0))) return finish_op(ps, epoch);
  // 2. Reduce every rank's input in rank order (own input straight from `in`).
  if (out_rank < 0 || out_rank == me)
    reduce_block_into(rd, world, me, in, aligned, half_of(ps, me, epoch), region, n, out);
  finish_op(ps, epoch);
}

// LL128 one-shot (opt-in, op hint algorithm=ll128): like the LL one-shot (flat_ll_kernel,
// reduce_scatter_kernels.cu), but a 128-byte line carries 120 payload bytes and one 64-bit flag
// (protocol_ll128.cuh), so 256 KiB move ~273 KiB over NVLink instead of 512 KiB. Line l holds payload bytes [120 l, 120 l + 120) of the input: lane
// j (0..7) of the line's 8-lane group holds bytes [16 j, 16 j + 16) of it, lane 7 only 8 bytes
// plus the flag. A warp handles 4 consecutive lines per pass (one 512-byte store per peer), its
// loops are warp-uniform so every store and load of a line is one warp instruction.
template <typename T, int OP>
__global__ void __launch_bounds__(kThreads) flat_ll128_kernel(PeerSet ps, const T* in, T* out,
                                                               int64_t n, Reducer<T, OP> rd,
                                                               bool vec) {
  using A = typename AccOf<T>::type;
  constexpr int E = 16 / sizeof(T);                     // elements per lane (16 bytes)
  constexpr int LE = kLL128Payload / sizeof(T);         // elements per line
  const unsigned long long epoch = begin_op(ps);
  const uint64_t flag = ll128_flag(ps, epoch);
  const int me = ps.rank, world = ps.world;
  const int lane = threadIdx.x & 31;
  const int g = lane >> 3, j = lane & 7;
  const int cnt = j == 7 ? E / 2 : E;  // payload elements of this lane
  const int64_t lines = (n + LE - 1) / LE;
  const uint64_t region = align256(static_cast<uint64_t>(lines) * kLL128Line);
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int64_t nwarps = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  // 1. Push this rank's lines into region `me` of every peer (next rank first, see flat_kernel).
  for (int64_t base = warp * 4; base < lines; base += nwarps * 4) {
    const int64_t l = base + g;
    const bool active = l < lines;  // false only for groups past the end in the last pass
    const int64_t e0 = l * LE + j * E;
    uint64_t w0 = 0, w1 = 0;
    if (active) ll128_load(in, n, e0, cnt, vec, w0, w1);
    if (j == 7) w1 = flag;
    const uint64_t off = me * region + static_cast<uint64_t>(l) * kLL128Line + 16u * j;
    for (int k = 1; k < world; ++k) {
      char* dst = half_of(ps, (me + k) % world, epoch) + off;
      __syncwarp();  // the tail loads may have split the warp: one store instruction per line
      if (active) st_ll128(dst, w0, w1);
    }
  }
  // 2. Poll the peers' lines in this rank's buffer and reduce in rank order 0..world-1.
  const char* mine = half_of(ps, me, epoch);
  for (int64_t base = warp * 4; base < lines; base += nwarps * 4) {
    const int64_t l = base + g;
    const bool active = l < lines;
    const int64_t e0 = l * LE + j * E;
    A acc[E];
    bool ok = true;
    for (int r = 0; r < world; ++r) {
      uint64_t w[2] = {0, 0};
      if (r == me) {
        if (active) ll128_load(in, n, e0, cnt, vec, w[0], w[1]);
      } else if (!ld_ll128_wait(ps, mine + r * region + static_cast<uint64_t>(l) * kLL128Line + 16u * j,
                                active, flag, r, w[0], w[1])) {
        ok = false;  // warp-uniform
        break;
      }
      T v[E];
      memcpy(v, w, 16);
      accumulate<OP>(acc, v, r);
    }
    if (!ok) break;
    if (!active) continue;
    T v[E];
#pragma unroll
    for (int k = 0; k < E; ++k) v[k] = rd.finish(acc[k]);
    if (vec && e0 + cnt <= n) {
      uint64_t w[2];
      memcpy(w, v, 16);
      uint64_t* p = reinterpret_cast<uint64_t*>(out + e0);
      p[0] = w[0];
      if (cnt == E) p[1] = w[1];
    } else {
#pragma unroll
      for (int k = 0; k < E; ++k)
        if (k < cnt && e0 + k < n) out[e0 + k] = v[k];
    }
  }
  finish_op(ps, epoch);
}

// Elements of each owner's slice of a piece of m elements: whole packs except the last slice.
template <typename T>
__device__ __forceinline__ int64_t slice_elems(int64_t m, int world) {
  return ((m + world - 1) / world + kPack<T> - 1) / kPack<T> * kPack<T>;
}

// Two-shot in one launch: the op is cut into pieces of `chunk` elements (the last one shorter),
// each a reduce-scatter into the owners then an all-gather, and each its own op counter
// e = epoch + i, so its flags are flag_value(e, 0..1) and its buffer half that of e: piece i+1
// fills the other half while the peers still read piece i's. Blocks move through the pieces on
// their own, with only their per-block barriers; that is safe because a block touches the same
// bytes of every buffer region in every piece (regions sized for a whole piece, grid-stride packs,
// the tail's block by owns_tail), and block b of a rank writes a half again (piece i+2) only after
// the barrier of piece i+1, which block b of every peer reaches after reading piece i.
// The op takes the counters epoch .. epoch + pieces - 1, the same as a kernel per piece would.
// (The protocol of rounds_device.cuh, with counters of its own: written with begin_rounds, this
// kernel's spills changed.)
// Two blocks per SM (at most 64 registers): large ops launch up to 2 x SMs blocks, and a block
// whose peer block is not yet resident only waits. With one block per SM, an op of more than
// SMs blocks (16 MiB at 4 ranks: 256) runs in two waves. kPieces: the piece loop (it spills more);
// false: one piece (n <= chunk), the code of the kernel of one piece (the piece loop's registers
// made ops of one piece 12% slower at 2 MiB on 4 ranks). kMinBlocks 1: the one-piece kernel for
// grids of one wave at one block per SM, with the registers to spill nothing (f32 spills under
// the two-block cap).
template <typename T, int OP, bool kPieces, int kMinBlocks = 2>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    two_shot_kernel(PeerSet ps, const T* in, T* out, int64_t n, int64_t chunk, int out_rank,
                    Reducer<T, OP> rd, bool aligned) {
  constexpr int P = kPack<T>;
  const unsigned long long epoch = begin_op(ps);
  const int me = ps.rank, world = ps.world;
  if (!kPieces) chunk = n;
  const int64_t pieces = kPieces ? (n + chunk - 1) / chunk : 1;
  const unsigned long long last = epoch + pieces - 1;
  // A half holds a slot per peer for the reduce-scatter (peer q's at peer_slot(q, me) * sreg),
  // then one per peer for the gather (at (world - 1 + peer_slot(q, me)) * sreg).
  const uint64_t sreg = align256(slice_elems<T>(chunk, world) * sizeof(T));
  const bool want_out = out_rank < 0 || out_rank == me;
  for (int64_t i = 0; i < pieces; ++i) {
    const unsigned long long e = epoch + i;
    const int64_t base = kPieces ? i * chunk : 0;
    const int64_t m = kPieces ? min(chunk, n - base) : n;
    const T* pin = in + base;
    T* pout = out + base;
    // Slice q of the piece is owned (reduced) by rank q.
    const int64_t s = slice_elems<T>(m, world);
    auto len = [&](int q) {
      int64_t l = m - q * s;
      return l < 0 ? int64_t(0) : (l > s ? s : l);
    };
    char* mine = half_of(ps, me, e);
    // 1. Reduce-scatter: push slice q of the piece into this rank's slot at owner q (next rank
    // first).
    for (int k = 1; k < world; ++k) {
      const int q = (me + k) % world;
      copy_block(pin + q * s, reinterpret_cast<T*>(half_of(ps, q, e) + peer_slot(me, q) * sreg),
                 len(q), aligned, true);
    }
    if (!block_barrier(ps, flag_value(e, 0))) return finish_op(ps, last);
    // 2. Reduce the own slice in rank order, keep it, and push it to the peers' gather areas.
    {
      const T* own = pin + me * s;
      T* res = pout + me * s;
      auto gather = [&](int q) {  // this rank's gather slot at rank q
        return reinterpret_cast<T*>(half_of(ps, q, e) + (world - 1 + peer_slot(me, q)) * sreg);
      };
      for_block_packs<T>(
          len(me),
          [&](int64_t x) {
            T v[P];
            reduce_pack<T, OP, true>(rd, world, me, own, aligned, mine, sreg, x, v);
            if (want_out) store_pack(res + x, aligned, v);
            for (int q = 0; q < world; ++q)
              if (q != me && (out_rank < 0 || q == out_rank)) store_pack(gather(q) + x, true, v);
          },
          [&](int64_t x) {
            const T v = reduce_elem<T, OP, true>(rd, world, me, own, mine, sreg, x);
            if (want_out) res[x] = v;
            for (int q = 0; q < world; ++q)
              if (q != me && (out_rank < 0 || q == out_rank)) gather(q)[x] = v;
          });
    }
    if (!block_barrier(ps, flag_value(e, 1))) return finish_op(ps, last);
    // 3. All-gather: copy the other owners' slices out of the own gather area.
    if (want_out) {
      for (int q = 0; q < world; ++q) {
        if (q == me) continue;
        copy_block(reinterpret_cast<const T*>(mine + (world - 1 + peer_slot(q, me)) * sreg),
                   pout + q * s, len(q), true, aligned);
      }
    }
  }
  finish_op(ps, last);
}


enum class Kind { kFlat, kFlatLL128, kTwoShot };

// `chunk`: the two-shot's piece (elements); the other kernels ignore it.
void launch(Kind kind, const PeerSet& ps, const void* in, void* out, int64_t n, int64_t chunk,
            int out_rank, const ReduceSpec& rs, int blocks, cudaStream_t s) {
  with_reduction(rs, [&](auto elem, auto red) {
    using T = typename decltype(elem)::type;
    constexpr int OP = decltype(red)::value;
    const Reducer<T, OP> rd = reducer_of<T, OP>(rs);
    const T* tin = static_cast<const T*>(in);
    T* tout = static_cast<T*>(out);
    switch (kind) {
      case Kind::kFlat:
        launch_kernel(flat_kernel<T, OP>, blocks, kThreads, s, ps, tin, tout, n, out_rank, rd,
                      rs.aligned);
        break;
      case Kind::kFlatLL128:
        launch_kernel(flat_ll128_kernel<T, OP>, blocks, ll_threads(), s, ps, tin, tout, n, rd,
                      rs.aligned);
        break;
      case Kind::kTwoShot: {
        // One piece: the instance without the two-block cap where its whole grid is resident at
        // its own occupancy (one block per SM), else the capped one. Preloading (n == 0) loads
        // all three.
        auto* uncapped = two_shot_kernel<T, OP, false, 1>;
        static const int uncapped_fit = resident_blocks(uncapped, kThreads);
        const bool preload = n == 0, one_wave = blocks <= uncapped_fit;
        if (n <= chunk && (preload || one_wave))
          launch_kernel(uncapped, blocks, kThreads, s, ps, tin, tout, n, chunk, out_rank, rd,
                        rs.aligned);
        if (n <= chunk && (preload || !one_wave))
          launch_kernel(two_shot_kernel<T, OP, false>, blocks, kThreads, s, ps, tin, tout, n,
                        chunk, out_rank, rd, rs.aligned);
        if (n > chunk || preload)
          launch_kernel(two_shot_kernel<T, OP, true>, blocks, kThreads, s, ps, tin, tout, n, chunk,
                        out_rank, rd, rs.aligned);
        break;
      }
    }
  });
}

}  // namespace

uint64_t flat_bytes_needed(int64_t n, size_t elem, int world) {
  return static_cast<uint64_t>(world) * align256(n * elem);
}

uint64_t two_shot_bytes_needed(int64_t n, size_t elem, int world) {
  const int64_t p = 16 / static_cast<int64_t>(elem);
  const int64_t s = ((n + world - 1) / world + p - 1) / p * p;
  return 2ull * (world - 1) * align256(s * elem);  // a slot per peer for each of the two steps
}

uint64_t ll128_bytes_needed(int64_t n, size_t elem, int world) {
  const int64_t e = kLL128Payload / static_cast<int64_t>(elem);
  return static_cast<uint64_t>(world) * align256((n + e - 1) / e * kLL128Line);
}

void launch_allreduce_flat(const PeerSet& ps, const void* in, void* out, int64_t n, int out_rank,
                           const ReduceSpec& rs, int blocks, cudaStream_t s) {
  launch(Kind::kFlat, ps, in, out, n, 0, out_rank, rs, blocks, s);
}

void launch_allreduce_ll(const PeerSet& ps, const void* in, void* out, int64_t n,
                         const ReduceSpec& rs, int blocks, cudaStream_t s) {
  PtrList all{};
  for (int q = 0; q < ps.world; ++q) all.p[q] = static_cast<char*>(const_cast<void*>(in));
  launch_reduce_scatter_ll(ps, all, out, n, rs, blocks, s);
}

void launch_allreduce_ll128(const PeerSet& ps, const void* in, void* out, int64_t n,
                            const ReduceSpec& rs, int blocks, cudaStream_t s) {
  launch(Kind::kFlatLL128, ps, in, out, n, 0, -1, rs, blocks, s);
}

void launch_allreduce_two_shot(const PeerSet& ps, const void* in, void* out, int64_t n,
                               int64_t chunk, int out_rank, const ReduceSpec& rs, int blocks,
                               cudaStream_t s) {
  launch(Kind::kTwoShot, ps, in, out, n, chunk, out_rank, rs, blocks, s);
}

void preload_allreduce_kernels() {
  for (Kind k : {Kind::kFlat, Kind::kFlatLL128, Kind::kTwoShot})
    for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                       DataType::kBFloat16, DataType::kInt32, DataType::kInt64})
      for (int red : {kRedSum, kRedProd, kRedMin, kRedMax})
        launch(k, PeerSet{}, nullptr, nullptr, 0, 1, -1, ReduceSpec{t, red, 1.0, true}, 1, nullptr);
}

}  // namespace commx::cuda
