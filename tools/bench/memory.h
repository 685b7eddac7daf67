// Where commx-bench's buffers live: host memory, or GPU memory in cuda_memory.cc (built only
// when the CUDA toolkit is found), with the stream syncs and graph capture the timing loop needs.
// Layer: tools/bench.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "commx/types.h"

namespace commx::bench {

class Memory {
 public:
  virtual ~Memory() = default;
  virtual void* alloc(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  virtual void to_device(void* dst, const void* src, size_t bytes) = 0;
  virtual void to_host(void* dst, const void* src, size_t bytes) = 0;
  // Waits until the work issued on stream() has finished (host: nothing to wait for).
  virtual void sync() = 0;
  virtual void* stream() { return nullptr; }
  // Captures `fn` once and returns a function that replays it (CUDA graphs).
  virtual std::function<void()> capture(const std::function<void()>& fn) = 0;
};

std::unique_ptr<Memory> make_host_memory();
// Throws Unsupported when this build has no CUDA support.
std::unique_ptr<Memory> make_memory(const Device& d);
// A GPU device without an index becomes cuda:<local rank mod GPU count> (the local rank from
// COMMX_LOCAL_RANK, LOCAL_RANK or OMPI_COMM_WORLD_LOCAL_RANK), so spawned ranks spread over GPUs.
Device resolve_device(Device d);
// GPU model names visible to this process ("" entries never); empty without CUDA.
std::vector<std::string> gpu_names();
// "[0x<PCI bus>] <model>" of GPU `index`, as nccl-tests prints it; "?" without CUDA.
std::string gpu_description(int index);

}  // namespace commx::bench
