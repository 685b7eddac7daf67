// PYBIND11_MODULE for `commx._C`: the Python face of the public C++ API.
// Layer: Python bindings.
#include "module.h"

PYBIND11_MODULE(_C, m) {
  m.doc() = "commx native bindings (use the `commx` package, not this module directly)";
  commx_py::bind_errors(m);
  commx_py::bind_types(m);
  commx_py::bind_stores(m);
  commx_py::bind_work(m);
  commx_py::bind_window(m);
  commx_py::bind_comm(m);
  commx_py::bind_python_backends(m);
}
