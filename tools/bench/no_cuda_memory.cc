// The memory factory of a build without CUDA: GPU devices are refused clearly.
// Layer: tools/bench.
#include "commx/error.h"
#include "memory.h"

namespace commx::bench {

std::unique_ptr<Memory> make_memory(const Device& d) {
  if (d.is_cpu()) return make_host_memory();
  throw Error(ErrorCode::kUnsupported,
              "--device " + d.str() + ": this commx-bench was built without CUDA support");
}

Device resolve_device(Device d) { return d; }

std::vector<std::string> gpu_names() { return {}; }

std::string gpu_description(int) { return "?"; }

}  // namespace commx::bench
