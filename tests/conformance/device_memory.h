// GPU memory for the conformance suite's buffers, with the CUDA runtime only where the build has
// the GPU backends (device_memory_cuda.cc; device_memory_none.cc elsewhere). The probes run in a
// child process, so the test process stays CUDA-free until it forks its ranks. Layer: tests.
#pragma once

#include <cstddef>

namespace commx::testing {

// GPUs this process can use (0 without CUDA in the build or without a GPU).
int gpu_count();
// Whether NCCL can be loaded (COMMX_NCCL_LIBRARY or libnccl.so.2).
bool nccl_loadable();

// Device memory on GPU `device` (the calling process's current device becomes `device`).
void* device_alloc(int device, size_t bytes);
void device_free(void* p);
// Synchronous copies; device_to_host first waits for all work on the device.
void host_to_device(void* dst, const void* src, size_t bytes);
void device_to_host(void* dst, const void* src, size_t bytes);

}  // namespace commx::testing
