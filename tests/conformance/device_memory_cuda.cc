// device_memory.h over the CUDA runtime. Layer: tests.
#include "conformance/device_memory.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace commx::testing {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorString(e));
}

// fn()'s value (0..255), computed in a child so this process does not initialise CUDA.
int in_child(int (*fn)()) {
  pid_t pid = fork();
  if (pid == 0) _exit(fn());
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) != pid) return 0;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 0;
}

}  // namespace

int gpu_count() {
  static const int n = in_child([] {
    int c = 0;
    if (cudaGetDeviceCount(&c) != cudaSuccess) c = 0;
    return c > 8 ? 8 : c;
  });
  return n;
}

bool nccl_loadable() {
  static const bool ok = in_child([] {
    const char* p = std::getenv("COMMX_NCCL_LIBRARY");
    return dlopen(p ? p : "libnccl.so.2", RTLD_NOW | RTLD_LOCAL) ? 1 : 0;
  }) == 1;
  return ok;
}

void* device_alloc(int device, size_t bytes) {
  check(cudaSetDevice(device), "cudaSetDevice");
  void* p = nullptr;
  check(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
  return p;
}

void device_free(void* p) { cudaFree(p); }

void host_to_device(void* dst, const void* src, size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to the device");
}

void device_to_host(void* dst, const void* src, size_t bytes) {
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to the host");
}

}  // namespace commx::testing
