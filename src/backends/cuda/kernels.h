// Host entry points of the cuda backend's kernels, one kernel file per collective (DDA
// all-reduce, reduce-scatter, the byte exchange behind all-gather/all-to-all/broadcast/gather/
// scatter, and the barrier).
// Layer: backends (cuda). Each launch is one kernel that synchronises with its peers through
// per-block flags; an op larger than the registered buffer runs in rounds of one buffer half
// within its launch (two-shot, reduce-scatter, exchange; rounds_device.cuh), the others must fit.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "commx/types.h"
#include "cuda/kernel_params.h"

namespace commx::cuda {

// The reduction operators of the kernels (their template argument OP, reduce_device.cuh).
enum RedOp : int { kRedSum = 0, kRedProd = 1, kRedMin = 2, kRedMax = 3 };

struct ReduceSpec {
  DataType dtype;
  int red;       // RedOp
  double scale;  // applied to the result (AVG: 1/world, PREMUL_SUM: factor); 1 = none
  bool aligned;  // every user pointer is 16-byte aligned
};

// Whether the native kernels reduce `dtype` with `kind` (f32/f64/f16/bf16: sum, prod, min, max,
// avg, premul_sum; i32/i64: sum, prod, min, max). reduce_spec.cc.
bool native_reduce_supported(DataType dtype, ReduceKind kind);
// Maps kind to a RedOp and result scale; call only when native_reduce_supported.
ReduceSpec make_reduce_spec(DataType dtype, ReduceOp op, int world, bool aligned);

// Per-source region of a buffer half for `bytes` of data, 256-byte aligned.
inline uint64_t region_bytes(uint64_t bytes) { return align256(bytes); }

// --- all_reduce and reduce (allreduce_kernels.cu) ---
// Bytes of registered buffer (one half) an op of `n` elements of `elem` bytes needs.
uint64_t flat_bytes_needed(int64_t n, size_t elem, int world);
uint64_t two_shot_bytes_needed(int64_t n, size_t elem, int world);
// One-shot: every rank pushes its input to all peers, then reduces all inputs in rank order.
// out_rank >= 0: only that rank writes `out` (reduce); -1: all ranks (all_reduce).
void launch_allreduce_flat(const PeerSet& ps, const void* in, void* out, int64_t n, int out_rank,
                           const ReduceSpec& rs, int blocks, cudaStream_t s);
// Low-latency one-shot (LL protocol: data and flag in one 8-byte unit, no barrier); all-reduce
// only (every rank must receive from every peer). Runs the LL reduce-scatter kernel with the
// same input for every peer, so it needs ll_bytes_needed.
void launch_allreduce_ll(const PeerSet& ps, const void* in, void* out, int64_t n,
                         const ReduceSpec& rs, int blocks, cudaStream_t s);
// LL128 one-shot (opt-in): 120 payload bytes and a 64-bit flag per 128-byte line written by 8
// lanes in one warp store (needs NVLink delivering 128-byte warp stores whole); all-reduce only.
void launch_allreduce_ll128(const PeerSet& ps, const void* in, void* out, int64_t n,
                            const ReduceSpec& rs, int blocks, cudaStream_t s);
uint64_t ll128_bytes_needed(int64_t n, size_t elem, int world);
// Two-shot: reduce-scatter by pushes into owners, owners reduce and push results back; one launch
// for any n, in pieces of `chunk` elements (two_shot_bytes_needed(chunk) must fit a buffer half), one
// op counter and buffer half per piece.
void launch_allreduce_two_shot(const PeerSet& ps, const void* in, void* out, int64_t n,
                               int64_t chunk, int out_rank, const ReduceSpec& rs, int blocks,
                               cudaStream_t s);

// --- reduce_scatter (reduce_scatter_kernels.cu) ---
// ins.p[q] = the n elements this rank contributes to rank q's result.
// One launch for any n, in rounds of `chunk` elements (whole packs; world regions of it must fit a
// buffer half), one op counter and buffer half per round.
void launch_reduce_scatter(const PeerSet& ps, const PtrList& ins, void* out, int64_t n,
                           int64_t chunk, const ReduceSpec& rs, int blocks, cudaStream_t s);
// LL variant: every rank must receive from every peer.
void launch_reduce_scatter_ll(const PeerSet& ps, const PtrList& ins, void* out, int64_t n,
                              const ReduceSpec& rs, int blocks, cudaStream_t s);
uint64_t ll_bytes_needed(int64_t n, size_t elem, int world);

// --- all_gather, all_to_all, broadcast, gather, scatter (exchange_kernels.cu) ---
// For each peer q: src.p[q] (if set) is pushed to q, and what q pushed to us lands in dst.p[q]
// (if set); src.p[rank] -> dst.p[rank] is a local copy. `nbytes` per pair.
// Non-LL: one launch for any size, in rounds of `chunk` bytes per pair (256-byte multiple; world
// regions of it must fit a buffer half), one op counter and buffer half per round.
void launch_exchange(const PeerSet& ps, const PtrList& src, const PtrList& dst, int64_t nbytes,
                     int64_t chunk, bool aligned, int blocks, cudaStream_t s);
// LL variant: every rank must receive from every peer (all-gather, all-to-all).
void launch_exchange_ll(const PeerSet& ps, const PtrList& src, const PtrList& dst, int64_t nbytes,
                        int blocks, cudaStream_t s);

// --- barrier (barrier_kernel.cu) ---
void launch_barrier(const PeerSet& ps, cudaStream_t s);

// Loads every kernel of the backend on the current device (what a first launch would do) and
// raises the stack limit to the largest local-memory need: see kernel_preload.cc. Once per device
// and process; throws on a CUDA error, naming `where`.
void preload_kernels(int device, const std::string& where);
// Parts of it, one per kernel file: each walks its launchers with every template argument while
// t_kernel_preload is set, so nothing is launched.
void preload_allreduce_kernels();
void preload_reduce_scatter_kernels();
void preload_exchange_kernels();
void preload_barrier_kernel();

}  // namespace commx::cuda
