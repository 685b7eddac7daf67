// The barrier kernel: the barrier collective, also run for an op of zero elements so that every
// rank's op counter moves on as for any op (cuda_backend.cc). A file of its own, like each
// collective: it moves no data and shares nothing with the exchange or the reductions but the
// per-block barrier of sync_device.cuh. Layer: backends (cuda). One block of one warp: one flag
// round with every peer.
#include "cuda/kernels.h"
#include "cuda/launch.cuh"
#include "cuda/sync_device.cuh"

namespace commx::cuda {
namespace {

__global__ void barrier_kernel(PeerSet ps) {
  const unsigned long long epoch = begin_op(ps);
  block_barrier(ps, flag_value(epoch, 0));
  finish_op(ps, epoch);
}

}  // namespace

void launch_barrier(const PeerSet& ps, cudaStream_t s) { launch_kernel(barrier_kernel, 1, 32, s, ps); }

void preload_barrier_kernel() { launch_barrier(PeerSet{}, nullptr); }

}  // namespace commx::cuda
