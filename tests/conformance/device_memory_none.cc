// device_memory.h in a build without the GPU backends: no GPU is ever offered. Layer: tests.
#include "conformance/device_memory.h"

#include <cstdlib>

namespace commx::testing {

int gpu_count() { return 0; }
bool nccl_loadable() { return false; }
// Never called: worlds() offers no GPU target in this build.
void* device_alloc(int, size_t) { std::abort(); }
void device_free(void*) {}
void host_to_device(void*, const void*, size_t) { std::abort(); }
void device_to_host(void*, const void*, size_t) { std::abort(); }

}  // namespace commx::testing
