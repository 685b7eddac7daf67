// commx::Error <-> Python exceptions: commx.Error (a RuntimeError) with one subclass per
// ErrorCode and a `.code` attribute holding commx.ErrorCode; commx.TimeoutError is also the
// builtin TimeoutError, and with torch.distributed imported every error raised is also torch's
// DistError (bad input) or DistBackendError (a failed op).
// Layer: Python bindings.
#include <string>

#include "common.h"
#include "module.h"

namespace commx_py {
namespace {

struct ErrorClasses {
  py::object base;
  std::vector<std::pair<commx::ErrorCode, py::object>> by_code;
  // With torch.distributed imported: each class also derived from torch's DistError (bad input)
  // or DistBackendError (the communication failed), made on first use.
  std::vector<std::pair<py::object, py::object>> torch_flavour;
};

// Leaked on purpose: Python objects must not be destroyed after the interpreter has finalised.
ErrorClasses& classes() {
  static auto* c = new ErrorClasses();
  return *c;
}

py::object class_of(commx::ErrorCode code) {
  for (auto& [c, cls] : classes().by_code)
    if (c == code) return cls;
  return classes().base;
}

// `cls` and torch's DistError/DistBackendError in one class, so `except commx.PeerFailureError`
// and `except torch.distributed.DistBackendError` both catch it; `cls` itself without torch.
py::object torch_flavour_of(const py::object& cls, commx::ErrorCode code) {
  py::dict modules = py::module_::import("sys").attr("modules");
  if (!modules.contains("torch.distributed")) return cls;
  auto& c = classes();
  for (auto& [plain, flavoured] : c.torch_flavour)
    if (plain.is(cls)) return flavoured;
  py::object dist = modules["torch.distributed"];
  const bool bad_input =
      code == commx::ErrorCode::kInvalidArgument || code == commx::ErrorCode::kUnsupported;
  const char* torch_base = bad_input ? "DistError" : "DistBackendError";
  if (!py::hasattr(dist, torch_base)) return cls;
  py::dict ns;
  ns["__module__"] = cls.attr("__module__");
  ns["__doc__"] = cls.attr("__doc__");
  py::object flavoured = py::module_::import("builtins")
                             .attr("type")(cls.attr("__name__"),
                                           py::make_tuple(cls, dist.attr(torch_base)), ns);
  c.torch_flavour.emplace_back(cls, flavoured);
  return flavoured;
}

}  // namespace

void raise_python_error(const commx::Error& e) {
  py::object cls = torch_flavour_of(class_of(e.code()), e.code());
  py::object inst = cls(py::str(e.what()));
  inst.attr("code") = py::cast(e.code());
  PyErr_SetObject(cls.ptr(), inst.ptr());
}

commx::Error error_from_python(py::error_already_set& e) {
  py::object value = e.value();
  std::string msg = py::str(value);
  commx::ErrorCode code = commx::ErrorCode::kInternal;
  if (py::isinstance(value, classes().base) && py::hasattr(value, "code") &&
      py::isinstance<commx::ErrorCode>(value.attr("code"))) {
    code = value.attr("code").cast<commx::ErrorCode>();
    // The message already starts with the code's name; commx::Error adds it again.
    std::string prefix = std::string(commx::error_code_name(code)) + ": ";
    if (msg.rfind(prefix, 0) == 0) msg = msg.substr(prefix.size());
  } else {
    std::string type = py::str(py::type::handle_of(value).attr("__name__"));
    if (type == "ValueError" || type == "TypeError" || type == "IndexError")
      code = commx::ErrorCode::kInvalidArgument;
    else if (type == "NotImplementedError")
      code = commx::ErrorCode::kUnsupported;
    else if (type == "TimeoutError")
      code = commx::ErrorCode::kTimeout;
    msg = type + ": " + msg;
  }
  return commx::Error(code, msg);
}

void bind_errors(py::module_& m) {
  py::enum_<commx::ErrorCode>(m, "ErrorCode")
      .value("INVALID_ARGUMENT", commx::ErrorCode::kInvalidArgument)
      .value("UNSUPPORTED", commx::ErrorCode::kUnsupported)
      .value("TIMEOUT", commx::ErrorCode::kTimeout)
      .value("PEER_FAILURE", commx::ErrorCode::kPeerFailure)
      .value("ABORTED", commx::ErrorCode::kAborted)
      .value("SYSTEM", commx::ErrorCode::kSystem)
      .value("CUDA", commx::ErrorCode::kCuda)
      .value("NCCL", commx::ErrorCode::kNccl)
      .value("INTERNAL", commx::ErrorCode::kInternal);

  auto& c = classes();
  c.base = py::reinterpret_steal<py::object>(PyErr_NewExceptionWithDoc(
      "commx.Error", "Base of every commx error; `.code` is a commx.ErrorCode.",
      PyExc_RuntimeError, nullptr));
  m.attr("Error") = c.base;
  const std::pair<commx::ErrorCode, const char*> subclasses[] = {
      {commx::ErrorCode::kInvalidArgument, "InvalidArgumentError"},
      {commx::ErrorCode::kUnsupported, "UnsupportedError"},
      {commx::ErrorCode::kTimeout, "TimeoutError"},
      {commx::ErrorCode::kPeerFailure, "PeerFailureError"},
      {commx::ErrorCode::kAborted, "AbortedError"},
      {commx::ErrorCode::kSystem, "SystemCallError"},
      {commx::ErrorCode::kCuda, "CudaError"},
      {commx::ErrorCode::kNccl, "NcclError"},
      {commx::ErrorCode::kInternal, "InternalError"},
  };
  for (auto& [code, name] : subclasses) {
    std::string qual = std::string("commx.") + name;
    // commx.TimeoutError is also the builtin TimeoutError, which it shadows in `from commx import *`.
    py::object bases = code == commx::ErrorCode::kTimeout
                           ? py::object(py::make_tuple(c.base, py::handle(PyExc_TimeoutError)))
                           : c.base;
    py::object cls =
        py::reinterpret_steal<py::object>(PyErr_NewException(qual.c_str(), bases.ptr(), nullptr));
    cls.attr("code") = py::cast(code);  // also for instances raised from Python
    m.attr(name) = cls;
    c.by_code.emplace_back(code, cls);
  }

  m.def(
      "_torch_flavour",
      [](py::object cls) { return torch_flavour_of(cls, cls.attr("code").cast<commx::ErrorCode>()); },
      py::arg("cls"),
      "The class to raise for a commx error class: with torch.distributed imported, the one that "
      "also derives from torch's DistError/DistBackendError.");

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const commx::Error& e) {
      raise_python_error(e);
    }
  });
}

}  // namespace commx_py
