// torch tensors read directly, without a DLPack round trip: an op needs a pointer, a count, a
// dtype, a device and torch's current stream, which a few attribute reads give in about a
// microsecond, where `__dlpack__` (Python code in torch) and torch.cuda.current_stream() cost
// ~10 us of every call. Plain torch.Tensor and Parameter only (strided, on the CPU or a GPU);
// everything else (subclasses, numpy, other producers) goes through DLPack.
// Layer: Python bindings.
#include "torch_tensor.h"

#include <string>
#include <unordered_map>

namespace commx_py {
namespace {

struct TorchApi {
  py::object tensor, parameter, strided, raw_stream, current_stream;
  std::unordered_map<PyObject*, commx::DataType> dtypes;  // torch.dtype objects are singletons
};

// Looked up once torch is imported (never imports it); leaked: it holds Python objects that must
// not be released after interpreter teardown.
const TorchApi* torch_api() {
  static TorchApi* api = nullptr;
  if (api) return api;
  py::dict modules = py::module_::import("sys").attr("modules");
  if (!modules.contains("torch")) return nullptr;
  py::object torch = modules["torch"];
  auto* a = new TorchApi();
  a->tensor = torch.attr("Tensor");
  a->parameter = torch.attr("nn").attr("Parameter");
  a->strided = torch.attr("strided");
  py::object C = torch.attr("_C");
  if (py::hasattr(C, "_cuda_getCurrentRawStream")) a->raw_stream = C.attr("_cuda_getCurrentRawStream");
  a->current_stream = torch.attr("cuda").attr("current_stream");
  const std::pair<const char*, commx::DataType> names[] = {
      {"float32", commx::DataType::kFloat32},   {"float64", commx::DataType::kFloat64},
      {"float16", commx::DataType::kFloat16},   {"bfloat16", commx::DataType::kBFloat16},
      {"float8_e4m3fn", commx::DataType::kFloat8E4M3}, {"float8_e5m2", commx::DataType::kFloat8E5M2},
      {"int8", commx::DataType::kInt8},         {"uint8", commx::DataType::kUInt8},
      {"int32", commx::DataType::kInt32},       {"int64", commx::DataType::kInt64},
      {"bool", commx::DataType::kBool},         {"uint32", commx::DataType::kUInt32},
      {"uint64", commx::DataType::kUInt64}};
  for (const auto& [name, t] : names)
    if (py::hasattr(torch, name)) a->dtypes[torch.attr(name).ptr()] = t;
  api = a;
  return api;
}

}  // namespace

void* torch_current_stream(int device_index) {
  const TorchApi* api = torch_api();
  if (!api) return nullptr;  // the backend takes null as the legacy default stream, torch's default
  if (api->raw_stream) {
    int index = device_index;
    if (index < 0) index = py::module_::import("torch").attr("cuda").attr("current_device")().cast<int>();
    return reinterpret_cast<void*>(api->raw_stream(index).cast<uintptr_t>());
  }
  py::object s = api->current_stream(device_index < 0 ? py::object(py::none()) : py::object(py::int_(device_index)));
  return reinterpret_cast<void*>(s.attr("cuda_stream").cast<uintptr_t>());
}

std::optional<commx::Tensor> torch_tensor(py::handle obj, const char* what) {
  const TorchApi* api = torch_api();
  if (!api) return std::nullopt;
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()));
  if (type != api->tensor.ptr() && type != api->parameter.ptr()) return std::nullopt;
  if (obj.attr("layout").ptr() != api->strided.ptr()) return std::nullopt;
  auto dt = api->dtypes.find(obj.attr("dtype").ptr());
  if (dt == api->dtypes.end()) return std::nullopt;  // DLPack names the dtype in its error
  const int device = obj.attr("get_device")().cast<int>();  // -1: CPU
  if (device < 0 && !obj.attr("is_cpu").cast<bool>()) return std::nullopt;  // meta, mps, ...
  if (!obj.attr("is_contiguous")().cast<bool>())
    throw commx::Error(commx::ErrorCode::kInvalidArgument,
                       std::string(what) + ": tensor is not contiguous: " + kContiguousAdvice);
  commx::Tensor t(reinterpret_cast<void*>(obj.attr("data_ptr")().cast<uintptr_t>()),
                  obj.attr("numel")().cast<int64_t>(), dt->second,
                  device < 0 ? commx::Device::cpu() : commx::Device::cuda(device));
  if (device >= 0) t.stream = torch_current_stream(device);
  return t;
}

}  // namespace commx_py
