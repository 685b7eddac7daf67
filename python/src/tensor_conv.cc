// Python objects -> commx::Tensor through the DLPack protocol (`__dlpack__`), zero-copy (plain
// torch tensors: read directly, torch_tensor.h).
// Layer: Python bindings.
#include <string>

#include "common.h"
#include "torch_tensor.h"

namespace commx_py {
namespace {

constexpr int32_t kDLCudaDevice = 2;  // DLDeviceType kDLCUDA

}  // namespace

commx::Tensor to_tensor(py::handle obj, KeepAlive& keep, const char* what) {
  if (std::optional<commx::Tensor> t = torch_tensor(obj, what)) {
    keep.push_back(py::reinterpret_borrow<py::object>(obj));
    return *t;
  }
  if (!py::hasattr(obj, "__dlpack__")) {
    std::string type = py::str(py::type::handle_of(obj).attr("__name__"));
    throw commx::Error(
        commx::ErrorCode::kInvalidArgument,
        std::string(what) + ": an object of type '" + type +
            "' is not a tensor (it has no __dlpack__); pass a numpy array or a torch "
            "tensor");
  }
  // torch refuses to export tensors that require grad; the op only needs their storage.
  py::object src = py::reinterpret_borrow<py::object>(obj);
  if (py::hasattr(obj, "requires_grad") && py::hasattr(obj, "detach") &&
      py::bool_(obj.attr("requires_grad")))
    src = obj.attr("detach")();
  bool cuda = false;
  if (py::hasattr(obj, "__dlpack_device__")) {
    py::tuple dev = obj.attr("__dlpack_device__")();
    cuda = dev[0].cast<int32_t>() == kDLCudaDevice;
  }
  // For CUDA the op is enqueued on torch's current stream, the stream the producer uses, so the
  // producer needs no extra synchronisation (-1 per the DLPack protocol).
  py::object capsule;
  try {
    capsule = cuda ? src.attr("__dlpack__")(py::arg("stream") = -1) : src.attr("__dlpack__")();
  } catch (py::error_already_set& e) {
    // e.g. numpy refuses read-only arrays: report it as bad input with the producer's reason.
    throw commx::Error(
        commx::ErrorCode::kInvalidArgument,
        std::string(what) + ": __dlpack__ failed: " + py::str(e.value()).cast<std::string>());
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (managed == nullptr) {
    PyErr_Clear();
    throw commx::Error(commx::ErrorCode::kInvalidArgument,
                       std::string(what) + ": __dlpack__ did not return a 'dltensor' capsule");
  }
  commx::Tensor t;
  try {
    t = commx::from_dlpack(managed->dl_tensor);
  } catch (const commx::Error& e) {
    // e.what() starts with the code's name, which the rethrown error carries once already.
    std::string msg = e.what();
    const std::string code = std::string(commx::error_code_name(e.code())) + ": ";
    if (msg.rfind(code, 0) == 0) msg = msg.substr(code.size());
    if (msg.find("not contiguous") != std::string::npos)
      msg += std::string(": ") + kContiguousAdvice;
    throw commx::Error(e.code(), std::string(what) + ": " + msg);
  }
  if (t.device.is_cuda()) t.stream = torch_current_stream(t.device.index);
  // The capsule keeps its name "dltensor", so its destructor calls the producer's deleter when
  // the op no longer needs it; the producer is kept too for producers that free eagerly.
  keep.push_back(py::reinterpret_borrow<py::object>(obj));
  if (!src.is(obj)) keep.push_back(std::move(src));
  keep.push_back(std::move(capsule));
  return t;
}

std::vector<commx::Tensor> to_tensors(py::handle seq, KeepAlive& keep, const char* what) {
  std::vector<commx::Tensor> out;
  if (seq.is_none()) return out;
  if (!py::isinstance<py::sequence>(seq) || py::hasattr(seq, "__dlpack__"))
    throw commx::Error(commx::ErrorCode::kInvalidArgument,
                       std::string(what) + ": expected a list of tensors");
  size_t i = 0;
  for (py::handle item : seq) {
    std::string label = std::string(what) + "[" + std::to_string(i++) + "]";
    out.push_back(to_tensor(item, keep, label.c_str()));
  }
  return out;
}

std::optional<commx::Timeout> to_timeout(py::handle obj) {
  if (obj.is_none()) return std::nullopt;
  double secs;
  if (py::hasattr(obj, "total_seconds")) {
    secs = obj.attr("total_seconds")().cast<double>();
  } else {
    secs = obj.cast<double>();
  }
  return commx::timeout_from_seconds(secs);
}

commx::Hints to_hints(py::handle obj) {
  commx::Hints h;
  if (obj.is_none()) return h;
  for (auto item : py::reinterpret_borrow<py::dict>(obj))
    h[py::str(item.first)] = py::str(item.second);
  return h;
}

commx::OpOptions to_op_options(py::handle timeout, py::handle hints) {
  commx::OpOptions o;
  o.timeout = to_timeout(timeout);
  o.hints = to_hints(hints);
  return o;
}

commx::Device to_device(py::handle obj) {
  if (obj.is_none()) return commx::Device::cpu();
  return commx::Device::parse(py::str(obj));  // torch.device prints as "cuda:0" or "cpu"
}

}  // namespace commx_py
