// torch tensors read without DLPack (torch_tensor.cc). Layer: Python bindings.
#pragma once

#include <optional>

#include "common.h"

namespace commx_py {

// The tensor `obj` as commx sees it when `obj` is a plain, strided torch tensor on the CPU or a
// GPU (with torch's current stream of its GPU); nullopt for anything else (use DLPack). Throws
// InvalidArgument for a non-contiguous tensor, prefixed by `what`.
std::optional<commx::Tensor> torch_tensor(py::handle obj, const char* what);

}  // namespace commx_py
