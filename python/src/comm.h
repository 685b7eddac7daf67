// The Python Comm: a commx::Comm plus the Python objects it depends on (a Python store adapter).
// Layer: Python bindings.
#pragma once

#include <memory>

#include "common.h"

namespace commx_py {

struct PyComm {
  std::shared_ptr<commx::Comm> comm;
  py::object store_owner;  // the Python store object behind comm's store, if any

  // Finalising a comm may wait for backend threads that call back into Python (a PythonStore):
  // drop it without the GIL, except while the interpreter shuts down.
  ~PyComm() {
#if PY_VERSION_HEX >= 0x030D0000
    bool finalizing = Py_IsFinalizing();
#else
    bool finalizing = _Py_IsFinalizing();
#endif
    if (comm && !finalizing && PyGILState_Check()) {
      py::gil_scoped_release nogil;
      comm.reset();
    }
  }
};

}  // namespace commx_py
