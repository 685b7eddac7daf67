// The Python Comm: a commx::Comm plus the Python objects it depends on (a Python store adapter).
// Layer: Python bindings.
#pragma once

#include <memory>

#include "common.h"

namespace commx_py {

struct PyComm {
  std::shared_ptr<commx::Comm> comm;
  py::object store_owner;  // the Python store object behind comm's store, if any
};

}  // namespace commx_py
