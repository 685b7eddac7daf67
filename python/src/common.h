// Shared helpers of the commx Python extension: Python objects -> commx values (tensors through
// DLPack, timeouts, hints, devices) and the error translation.
// Layer: Python bindings (above the public C++ API; uses nothing from src/).
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "commx/commx.h"

namespace commx_py {

namespace py = pybind11;

// Python objects an op must keep alive until it ends: the producers and their DLPack capsules.
using KeepAlive = std::vector<py::object>;

// What a non-contiguous tensor's error tells the user to do (both ways of reading tensors).
inline constexpr const char* kContiguousAdvice =
    "pass a contiguous one (tensor.contiguous(), and copy an output's result back)";

// Takes `obj` zero-copy through `__dlpack__`; appends what must stay alive to `keep`.
// CUDA tensors get torch's current stream of their device when torch is loaded.
commx::Tensor to_tensor(py::handle obj, KeepAlive& keep, const char* what);
std::vector<commx::Tensor> to_tensors(py::handle seq, KeepAlive& keep, const char* what);

// torch.cuda.current_stream(device_index).cuda_stream when torch is imported (-1: the current
// device), else null; null also stands for torch's default stream (the legacy default stream).
void* torch_current_stream(int device_index);

// None -> unset; datetime.timedelta or a number of seconds -> milliseconds.
std::optional<commx::Timeout> to_timeout(py::handle obj);
commx::Hints to_hints(py::handle obj);
commx::OpOptions to_op_options(py::handle timeout, py::handle hints);
// "cpu", "cuda:1", torch.device(...).
commx::Device to_device(py::handle obj);

// Raises the Python counterpart of `e` (commx.Error subclass chosen by its code).
void raise_python_error(const commx::Error& e);
// The commx::Error for the Python exception being handled (for Python-implemented backends and
// stores); must be called with the GIL held inside a catch of py::error_already_set.
commx::Error error_from_python(py::error_already_set& e);

}  // namespace commx_py
