// Test data for commx-bench: which value each rank puts at each element, how values are stored in
// every dtype, and the tolerance a result may have. Values are small integers so that most
// results are exact; float reductions get a per-dtype tolerance. Layer: tools/bench.
#pragma once

#include <cstddef>
#include <cstdint>

#include "commx/types.h"

namespace commx::bench {

// The value rank `rank` holds at element `index` for a run with reduction `kind` (bitwise ops get
// non-negative values, products get values in {1, 2, -1} so they stay small).
double input_value(int rank, int64_t index, DataType t, ReduceKind kind);

// Stores/loads element `i` of a buffer of dtype `t` as a double (integers wrap like C casts).
void store_value(DataType t, void* base, int64_t i, double v);
double load_value(DataType t, const void* base, int64_t i);

// Whether `got` matches `want` for dtype `t` after a reduction over `nranks` inputs.
bool values_match(DataType t, double got, double want, int nranks, bool reduced);

// The reduction of `vals[0..n)` in the arithmetic of `t` as the reference computes it
// independently of any backend: integers in int64 then wrapped to the type, floats in double.
double reduce_reference(DataType t, ReduceOp op, const double* vals, int n);

}  // namespace commx::bench
