// all_to_all_v_dynamic (and its MoE dispatch/combine forms) on the native cuda path: one kernel
// that reads the counts on the device, exchanges them through the peers' signal pads, runs the
// agreed check (dynamic_a2a_check.h; a failure is reported in HostCtl::counts and leaves the comm
// usable), then pushes every segment straight into the receivers'
// registered buffers and copies what it received into the output. The host never reads a count,
// so the op is capturable in a CUDA graph and replays with whatever counts the device holds.
// State: none of its own (the count rows use 33 KiB of the signal pad the backend maps anyway;
// data goes through the registered buffer's halves, in rounds when a pair's rows exceed a half's
// share). Layer: backends (cuda).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "commx/backend.h"
#include "cuda/kernel_params.h"
#include "cuda/tuning.h"

namespace commx::cuda {

// Enqueues op (already validated) on `s`; `blocks` must be the same on every rank.
void enqueue_all_to_all_v_dynamic(const PeerSet& ps, const OpDesc& op, int blocks, cudaStream_t s);
// The grid every rank of a comm uses for it (the kernel pairs block b of every rank).
int all_to_all_v_dynamic_blocks(const Tuning& t);

void preload_all_to_all_v_dynamic_kernels();

}  // namespace commx::cuda
