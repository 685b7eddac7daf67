// Type-erased elementwise reductions for the gloo backend: Gloo takes a plain
// `void(void* out, const void* a, const void* b, size_t n)` function, so commx supplies one per
// dtype/op pair (chosen once per op), including the 16- and 8-bit float types Gloo lacks.
// Layer: backends/gloo.
#pragma once

#include <cstddef>
#include <functional>

#include "commx/types.h"

namespace commx::gloo_backend {

using ReduceFn = void (*)(void* out, const void* a, const void* b, size_t n);

// The pairwise function for `kind` on `t`; AVG and PREMUL_SUM reduce as SUM (the caller scales
// the result afterwards). nullptr when the pair is not defined.
ReduceFn pairwise_reduce_fn(DataType t, ReduceKind kind);

// out[i] *= factor, in the element type (used for AVG = sum / n and PREMUL_SUM = factor * sum).
void scale_in_place(void* data, size_t n, DataType t, double factor);

}  // namespace commx::gloo_backend
