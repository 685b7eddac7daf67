// Where the memory behind a tensor lives (see pointer_check.h). Layer: backends (GPU).
#include "cuda_common/pointer_check.h"

#include <cuda.h>

#include <iostream>

#include "commx/error.h"
#include "cuda_common/cuda_util.h"

namespace commx::cuda {
namespace {

using PointerGetAttributes = decltype(&::cuPointerGetAttributes);

// The driver call that gives an allocation's address range (the runtime has none).
PointerGetAttributes range_fn() {
  static const PointerGetAttributes fn = [] {
    std::string error;
    PointerGetAttributes f = nullptr;
    fetch_driver_fn(f, "cuPointerGetAttributes", error);
    return f;  // null: verdicts are not cached
  }();
  return fn;
}

constexpr size_t kMaxRanges = 4096;  // beyond this the cache starts over
constexpr int kNotCuda = -2;         // Where::owner of memory CUDA does not know

std::string role_name(const char* role, int index) {
  return index < 0 ? std::string(role) : std::string(role) + "[" + std::to_string(index) + "]";
}

}  // namespace

// What CUDA says of p: owner = its GPU, -1 for managed or host memory any GPU may use, kNotCuda
// for memory CUDA does not know; [start, end) = its allocation (end 0 when unknown). False when
// CUDA cannot tell (the pointer then passes).
bool PointerCheck::where_is(uintptr_t p, int& owner, uintptr_t& start, uintptr_t& end) {
  RelaxedCaptureMode relaxed;  // tensors are checked while torch captures graphs too
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, reinterpret_cast<const void*>(p)) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  start = end = 0;
  switch (a.type) {
    case cudaMemoryTypeDevice: owner = a.device; break;
    case cudaMemoryTypeManaged:
    case cudaMemoryTypeHost: owner = -1; break;
    default: owner = kNotCuda; return true;
  }
  // Both attributes are 8 bytes wide (CUdeviceptr, size_t).
  CUdeviceptr s = 0;
  size_t size = 0;
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void* data[] = {&s, &size};
  PointerGetAttributes fn = range_fn();
  if (fn && fn(2, attrs, data, static_cast<CUdeviceptr>(p)) == CUDA_SUCCESS && size > 0 && s <= p &&
      p < s + size) {
    start = static_cast<uintptr_t>(s);
    end = start + size;
  }
  return true;
}

void PointerCheck::bind(int device) {
  // Self-check on memory of our own, once per GPU and process: if CUDA's answers do not read as
  // expected on this driver, checking stays off rather than refusing good buffers.
  static std::mutex mu;
  static std::map<int, bool> usable;
  std::lock_guard<std::mutex> g(mu);
  auto it = usable.find(device);
  if (it == usable.end()) {
    bool ok = false;
    void* probe = nullptr;
    if (cudaMalloc(&probe, 256) == cudaSuccess) {
      int owner = kNotCuda;
      uintptr_t start = 0, end = 0;
      const uintptr_t p = reinterpret_cast<uintptr_t>(probe);
      ok = where_is(p, owner, start, end) && owner == device && (end == 0 || (start <= p && p < end));
      cudaFree(probe);
    }
    cudaGetLastError();
    if (!ok)
      std::cerr << "commx: cannot tell where memory of cuda:" << device
                << " lives on this driver; tensors are not checked to be on their comm's GPU\n";
    it = usable.emplace(device, ok).first;
  }
  if (it->second) device_ = device;
}

bool PointerCheck::cached(uintptr_t p) const {
  auto it = ranges_.upper_bound(p);
  if (it == ranges_.begin()) return false;
  --it;
  return p < it->second;
}

void PointerCheck::check_tensor(const Tensor& t, const char* role, int index, cudaStream_t s,
                                const std::string& where) {
  if (t.count == 0 || t.data == nullptr) return;
  const uintptr_t p = reinterpret_cast<uintptr_t>(t.data);
  if (cached(p)) return;
  int owner = -1;
  uintptr_t start = 0, end = 0;
  if (!where_is(p, owner, start, end)) return;
  // A graph's own allocations (cudaMallocAsync during capture) are unknown to CUDA until the
  // graph runs: while the op's stream captures, such a pointer passes.
  if (owner == kNotCuda && is_capturing(s)) return;
  if (owner == kNotCuda)
    throw Error(ErrorCode::kInvalidArgument,
                where + role_name(role, index) + " (" + t.device.str() +
                    ") is not CUDA memory: a host pointer behind a GPU tensor?");
  // Only memory of this GPU is cached: host memory may be unregistered and other GPUs' ranges
  // freed and reused here, so those are asked again each time (rare, ~0.5 us).
  if (end != 0 && owner == device_) {
    if (ranges_.size() >= kMaxRanges) ranges_.clear();
    // Ranges cached before that overlap this one were freed since.
    auto it = ranges_.lower_bound(start);
    if (it != ranges_.begin() && std::prev(it)->second > start) --it;
    while (it != ranges_.end() && it->first < end) it = ranges_.erase(it);
    ranges_.emplace(start, end);
  }
  if (owner >= 0 && owner != device_)
    throw Error(ErrorCode::kInvalidArgument,
                where + role_name(role, index) + " claims " + t.device.str() +
                    " but its memory is on cuda:" + std::to_string(owner) +
                    "; the comm is bound to cuda:" + std::to_string(device_));
}

void PointerCheck::check(const OpDesc& op, const std::string& where) {
  if (device_ < 0) return;
  std::lock_guard<std::mutex> g(mu_);
  const cudaStream_t s = caller_stream(op_stream(op));
  check_tensor(op.input, "the input", -1, s, where);
  if (op.output.data != op.input.data) check_tensor(op.output, "the output", -1, s, where);
  // The views of a single-tensor form (and the p2p entry of a send/recv) lie in a buffer checked
  // above: no check of their own.
  auto checked = [&](const Tensor& v) {
    auto within = [&](const Tensor& whole) {
      const char* w = static_cast<const char*>(whole.data);
      const char* p = static_cast<const char*>(v.data);
      return whole.data && p >= w && p + v.nbytes() <= w + whole.nbytes();
    };
    return v.count > 0 && (within(op.input) || within(op.output));
  };
  for (size_t i = 0; i < op.inputs.size(); ++i)
    if (!checked(op.inputs[i])) check_tensor(op.inputs[i], "inputs", int(i), s, where);
  for (size_t i = 0; i < op.outputs.size(); ++i)
    if (!checked(op.outputs[i])) check_tensor(op.outputs[i], "outputs", int(i), s, where);
  for (size_t i = 0; i < op.p2p.size(); ++i)
    if (!checked(op.p2p[i].tensor)) check_tensor(op.p2p[i].tensor, "p2p", int(i), s, where);
}

}  // namespace commx::cuda
