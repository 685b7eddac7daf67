// Checks that the memory behind an op's tensors is usable by the comm's GPU: device memory of
// that GPU, managed memory or mapped host memory. A buffer on another GPU, or plain host memory
// behind a tensor that claims a GPU, is refused with an error naming the tensor and where its
// memory is, instead of a kernel faulting or silently reading over the peer link.
// Layer: backends (GPU).
//
// One query (~0.5 us) per allocation of the comm's GPU, whose address range is then cached (a map
// lookup per tensor); other memory is asked again every time. Memory of this GPU freed and mapped
// again at the same addresses as another kind of memory would keep its verdict; caching
// allocators (PyTorch's included) keep a GPU's address ranges on that GPU.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include <cuda_runtime_api.h>

#include "commx/backend.h"

namespace commx::cuda {

class PointerCheck {
 public:
  // Binds the check to `device` (before that, every pointer passes); stays off if CUDA's answer
  // for a probe allocation on `device` does not read as expected.
  void bind(int device);
  // Throws InvalidArgument prefixed by `where` for the first tensor of `op` that fails.
  void check(const OpDesc& op, const std::string& where);

 private:
  // role, or role[index] when index >= 0, names the tensor in the error.
  // `s`: the op's stream (memory CUDA does not know passes while it captures a graph).
  void check_tensor(const Tensor& t, const char* role, int index, cudaStream_t s,
                    const std::string& where);
  // Whether p lies in a cached range (memory of this GPU).
  bool cached(uintptr_t p) const;
  static bool where_is(uintptr_t p, int& owner, uintptr_t& start, uintptr_t& end);

  int device_ = -1;
  std::mutex mu_;
  std::map<uintptr_t, uintptr_t> ranges_;  // start -> end of allocations of this GPU
};

}  // namespace commx::cuda
