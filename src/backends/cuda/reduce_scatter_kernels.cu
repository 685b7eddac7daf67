// Reduce-scatter kernels: push + one barrier + rank-order reduction, and the LL one-shot, which
// the LL all-reduce runs too (every peer given the same input: launch_allreduce_ll).
// Layer: backends (cuda). Rank q's result is the rank-order reduction of what every rank
// contributes to q (PtrList: one input per destination rank), bit-identical on every rank.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/kernels.h"
#include "cuda/launch.cuh"
#include "cuda/protocol_ll.cuh"
#include "cuda/protocol_simple.cuh"
#include "cuda/reduce_device.cuh"
#include "cuda/rounds_device.cuh"
#include "cuda/sync_device.cuh"
#include "cuda/tuning.h"

namespace commx::cuda {
namespace {

// Every rank pushes ins.p[q] into region `me` of rank q's buffer half, then reduces its own.
// kRounds: in rounds of `chunk` elements (the last one shorter), one buffer half each, all in this
// launch (rounds_device.cuh), two blocks per SM (64 registers) as the two-shot; false: one round
// of all n elements (chunk unused) and no minimum of blocks (0), the code of the kernel of one
// piece.
template <typename T, int OP, bool kRounds>
__global__ void __launch_bounds__(kThreads, kRounds ? 2 : 0)
    reduce_scatter_kernel(PeerSet ps, PtrList ins, T* out, int64_t n, Reducer<T, OP> rd,
                          bool aligned, int64_t chunk) {
  const int64_t rounds = kRounds ? (n + chunk - 1) / chunk : 1;
  const Rounds r = begin_rounds(ps, rounds);
  const int me = ps.rank, world = ps.world;
  // Regions sized for a whole round, so a block owns the same bytes of them in every round.
  const uint64_t region = align256((kRounds ? chunk : n) * sizeof(T));
  for (int64_t i = 0; i < rounds; ++i) {
    const unsigned long long e = r.first + i;
    const int64_t base = kRounds ? i * chunk : 0;
    const int64_t m = kRounds ? min(chunk, n - base) : n;
    for (int k = 1; k < world; ++k) {  // next rank first: no rank's links take every push at once
      const int q = (me + k) % world;
      copy_block(reinterpret_cast<const T*>(ins.p[q]) + base,
                 reinterpret_cast<T*>(half_of(ps, q, e) + me * region), m, aligned, true);
    }
    if (!block_barrier(ps, flag_value(e, 0))) return finish_op(ps, r.last);
    reduce_block_into(rd, world, me, reinterpret_cast<const T*>(ins.p[me]) + base, aligned,
                      half_of(ps, me, e), region, m, out + base);
  }
  finish_op(ps, r.last);
}

// Low-latency one-shot (LL): every 8 payload bytes travel with a 32-bit flag in each 4-byte half
// of a 16-byte line written by one vector store (NCCL's LL protocol), so the receiver polls the
// data itself: no fence, no barrier, one NVLink one-way trip. The flag is the op counter, and a
// rank cannot finish op k+1 before every peer started it, so buffer halves alternating by op
// counter are never overwritten while being read.
template <typename T, int OP>
__global__ void __launch_bounds__(kThreads) flat_ll_kernel(PeerSet ps, PtrList ins, T* out,
                                                            int64_t n, Reducer<T, OP> rd) {
  using A = typename AccOf<T>::type;
  constexpr int E = 8 / sizeof(T);  // elements per line
  const unsigned long long epoch = begin_op(ps);
  const LLFlags flag = ll_flag(ps, epoch);
  const int me = ps.rank, world = ps.world;
  // ins.p[q]: what this rank contributes to rank q's result (all equal for all-reduce).
  const T* own = reinterpret_cast<const T*>(ins.p[me]);
  const int64_t lines = (n + E - 1) / E;
  const uint64_t region = align256(lines * 16);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  auto load_line = [&](const T* in, int64_t l, T (&v)[E]) {
#pragma unroll
    for (int k = 0; k < E; ++k) {
      int64_t i = l * E + k;
      v[k] = i < n ? in[i] : T(0);
    }
  };
  for (int64_t l = first; l < lines; l += stride) {
    for (int q = 0; q < world; ++q) {
      if (q == me) continue;
      T v[E];
      load_line(reinterpret_cast<const T*>(ins.p[q]), l, v);
      uint32_t d[2];
      memcpy(d, v, 8);
      st_ll(half_of(ps, q, epoch) + me * region + l * 16, d[0], d[1], flag);
    }
  }
  const char* mine = half_of(ps, me, epoch);
  bool ok = true;
  for (int64_t l = first; l < lines && ok; l += stride) {
    A acc[E];
    T v[E];
    for (int r = 0; r < world; ++r) {
      if (r == me) {
        load_line(own, l, v);
      } else {
        uint32_t d[2];
        if (!ld_ll(ps, mine + r * region + l * 16, flag, r, d[0], d[1])) {
          ok = false;
          break;
        }
        memcpy(v, d, 8);
      }
      accumulate<OP>(acc, v, r);
    }
    if (!ok) break;
#pragma unroll
    for (int k = 0; k < E; ++k) {
      int64_t i = l * E + k;
      if (i < n) out[i] = rd.finish(acc[k]);
    }
  }
  finish_op(ps, epoch);
}

enum class Kind { kPush, kPushRounds, kLL };

// `chunk`: the round of kPushRounds (elements); the others ignore it.
void launch(Kind kind, const PeerSet& ps, const PtrList& ins, void* out, int64_t n, int64_t chunk,
            const ReduceSpec& rs, int blocks, cudaStream_t s) {
  with_reduction(rs, [&](auto elem, auto red) {
    using T = typename decltype(elem)::type;
    constexpr int OP = decltype(red)::value;
    const Reducer<T, OP> rd = reducer_of<T, OP>(rs);
    switch (kind) {
      case Kind::kPush:
        launch_kernel(reduce_scatter_kernel<T, OP, false>, blocks, kThreads, s, ps, ins,
                      static_cast<T*>(out), n, rd, rs.aligned, chunk);
        break;
      case Kind::kPushRounds:
        launch_kernel(reduce_scatter_kernel<T, OP, true>, blocks, kThreads, s, ps, ins,
                      static_cast<T*>(out), n, rd, rs.aligned, chunk);
        break;
      case Kind::kLL:
        launch_kernel(flat_ll_kernel<T, OP>, blocks, ll_threads(), s, ps, ins, static_cast<T*>(out),
                      n, rd);
        break;
    }
  });
}

}  // namespace

uint64_t ll_bytes_needed(int64_t n, size_t elem, int world) {
  const int64_t e = 8 / static_cast<int64_t>(elem);
  return static_cast<uint64_t>(world) * align256((n + e - 1) / e * 16);
}

void launch_reduce_scatter(const PeerSet& ps, const PtrList& ins, void* out, int64_t n,
                           int64_t chunk, const ReduceSpec& rs, int blocks, cudaStream_t s) {
  launch(n > chunk ? Kind::kPushRounds : Kind::kPush, ps, ins, out, n, chunk, rs, blocks, s);
}

void launch_reduce_scatter_ll(const PeerSet& ps, const PtrList& ins, void* out, int64_t n,
                              const ReduceSpec& rs, int blocks, cudaStream_t s) {
  launch(Kind::kLL, ps, ins, out, n, 0, rs, blocks, s);
}

void preload_reduce_scatter_kernels() {
  for (Kind k : {Kind::kPush, Kind::kPushRounds, Kind::kLL})
    for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                       DataType::kBFloat16, DataType::kInt32, DataType::kInt64})
      for (int red : {kRedSum, kRedProd, kRedMin, kRedMax})
        launch(k, PeerSet{}, PtrList{}, nullptr, 0, 1, ReduceSpec{t, red, 1.0, true}, 1, nullptr);
}

}  // namespace commx::cuda
