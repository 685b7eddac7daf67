// Where the memory behind a tensor lives (see pointer_check.h). Layer: backends (GPU).
#include "cuda_common/pointer_check.h"

#include <cuda.h>

#include "commx/error.h"
#include "cuda_common/cuda_util.h"

namespace commx::cuda {
namespace {

using PointerGetAttributes = decltype(&::cuPointerGetAttributes);

PointerGetAttributes query_fn() {
  static const PointerGetAttributes fn = [] {
    std::string error;
    PointerGetAttributes f = nullptr;
    fetch_driver_fn(f, "cuPointerGetAttributes", error);
    return f;  // null: no driver entry point, nothing is checked
  }();
  return fn;
}

constexpr size_t kMaxRanges = 4096;  // beyond this the cache starts over

}  // namespace

const PointerCheck::Range* PointerCheck::find(uintptr_t p) const {
  auto it = ranges_.upper_bound(p);
  if (it == ranges_.begin()) return nullptr;
  --it;
  return p < it->second.end ? &it->second : nullptr;
}

namespace {
std::string role_name(const char* role, int index) {
  return index < 0 ? std::string(role) : std::string(role) + "[" + std::to_string(index) + "]";
}
}  // namespace

void PointerCheck::check_tensor(const Tensor& t, const char* role, int index,
                                const std::string& where) {
  if (t.count == 0 || t.data == nullptr) return;
  const uintptr_t p = reinterpret_cast<uintptr_t>(t.data);
  const Range* r = find(p);
  if (!r) {
    PointerGetAttributes fn = query_fn();
    if (!fn) return;
    unsigned int type = 0;
    int ordinal = -1;
    bool managed = false;
    CUdeviceptr start = 0;
    size_t size = 0;
    CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                   CU_POINTER_ATTRIBUTE_IS_MANAGED, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                   CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    void* data[] = {&type, &ordinal, &managed, &start, &size};
    if (fn(5, attrs, data, static_cast<CUdeviceptr>(p)) != CUDA_SUCCESS) return;  // cannot tell
    if (type == 0)
      throw Error(ErrorCode::kInvalidArgument,
                  where + role_name(role, index) + " (" + t.device.str() +
                      ") is not CUDA memory: a host pointer behind a GPU tensor?");
    if (size == 0 || start > p) return;  // no range to cache
    if (ranges_.size() >= kMaxRanges) ranges_.clear();
    const uintptr_t end = static_cast<uintptr_t>(start) + size;
    // Ranges cached before that overlap this one were freed since.
    auto it = ranges_.lower_bound(static_cast<uintptr_t>(start));
    if (it != ranges_.begin() && std::prev(it)->second.end > start) --it;
    while (it != ranges_.end() && it->first < end) it = ranges_.erase(it);
    const int owner = managed || type != CU_MEMORYTYPE_DEVICE ? -1 : ordinal;
    r = &ranges_.emplace(static_cast<uintptr_t>(start), Range{end, owner}).first->second;
  }
  if (r->device >= 0 && r->device != device_)
    throw Error(ErrorCode::kInvalidArgument,
                where + role_name(role, index) + " claims " + t.device.str() + " but its memory is on cuda:" +
                    std::to_string(r->device) + "; the comm is bound to cuda:" +
                    std::to_string(device_));
}

void PointerCheck::check(const OpDesc& op, const std::string& where) {
  if (device_ < 0) return;
  std::lock_guard<std::mutex> g(mu_);
  check_tensor(op.input, "the input", -1, where);
  if (op.output.data != op.input.data) check_tensor(op.output, "the output", -1, where);
  for (size_t i = 0; i < op.inputs.size(); ++i) check_tensor(op.inputs[i], "inputs", int(i), where);
  for (size_t i = 0; i < op.outputs.size(); ++i) check_tensor(op.outputs[i], "outputs", int(i), where);
  for (size_t i = 0; i < op.p2p.size(); ++i) check_tensor(op.p2p[i].tensor, "p2p", int(i), where);
}

}  // namespace commx::cuda
