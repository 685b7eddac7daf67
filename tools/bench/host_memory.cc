// Host buffers for commx-bench (see memory.h). Layer: tools/bench.
#include <cstdlib>
#include <cstring>

#include "commx/error.h"
#include "memory.h"

namespace commx::bench {
namespace {

class HostMemory : public Memory {
 public:
  void* alloc(size_t bytes) override {
    // Page-aligned like NCCL/MPI user buffers usually are; +64 so a size of 0 still allocates.
    void* p = std::aligned_alloc(4096, (bytes + 64 + 4095) / 4096 * 4096);
    if (p == nullptr)
      throw Error(ErrorCode::kSystem, "out of host memory for " + std::to_string(bytes) + " bytes");
    return p;
  }
  void release(void* p) override { std::free(p); }
  void to_device(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void to_host(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void sync() override {}
  std::function<void()> capture(const std::function<void()>&) override {
    throw Error(ErrorCode::kInvalidArgument,
                "--graph 1: CUDA graph capture needs GPU buffers (--device cuda)");
  }
};

}  // namespace

std::unique_ptr<Memory> make_host_memory() { return std::make_unique<HostMemory>(); }

}  // namespace commx::bench
