// The binding functions each file of the extension contributes to `commx._C`.
// Layer: Python bindings.
#pragma once

#include "common.h"

namespace commx_py {

void bind_errors(py::module_& m);
void bind_types(py::module_& m);
void bind_stores(py::module_& m);
void bind_work(py::module_& m);
void bind_comm(py::module_& m);
void bind_window(py::module_& m);
struct PyComm;
// Comm.new_window (window_bindings.cc).
void bind_comm_window(py::class_<PyComm, std::shared_ptr<PyComm>>& c);
// Comm._install_hooks (hook_bindings.cc).
void bind_comm_hooks(py::class_<PyComm, std::shared_ptr<PyComm>>& c);
void bind_python_backends(py::module_& m);

}  // namespace commx_py
