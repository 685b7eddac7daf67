// Type-erased host reductions: one function per (dtype, op) pair, chosen once per op, then
// applied to many buffers; every dtype commx has (the 16- and 8-bit floats too) and every op.
// Layer: public API for backend authors (the cpu backend's algorithms and the gloo and mpi
// plugins use it).
#pragma once

#include <cstddef>

#include "commx/types.h"

namespace commx {

class HostReducer {
 public:
  // `comm_size` is the divisor of AVG. Throws Unsupported for a pair that has no meaning
  // (bitwise ops on floating types, AVG/PREMUL_SUM on bool).
  HostReducer(DataType dtype, ReduceOp op, int comm_size);

  // dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[nsrc-1][i], combined in that order, so every
  // rank that reduces the same sources in the same order gets bit-identical results. Narrow
  // floats (f16, bf16, fp8) are accumulated in float and rounded once. With `finish`, AVG divides
  // by the comm size (integer division for integers) and PREMUL_SUM multiplies by its factor
  // before that rounding; without it both are a plain sum (for partial results). `dst` may be
  // one of `srcs`; nsrc >= 1.
  void reduce(void* dst, const void* const* srcs, int nsrc, size_t count, bool finish) const;
  // Applies only the finishing step (AVG divide / PREMUL_SUM factor) in place; a no-op for others.
  void finish(void* data, size_t count) const;
  bool needs_finish() const { return kind_ == ReduceKind::kAvg || kind_ == ReduceKind::kPremulSum; }

  DataType dtype() const { return dtype_; }
  size_t elem_size() const { return elem_size_; }

  struct Params {
    double factor;  // PREMUL_SUM factor, or 1/n for floating AVG
    int divisor;    // comm size, for integer AVG
    bool finish;
  };
  using Fn = void (*)(void* dst, const void* const* srcs, int nsrc, size_t count, const Params& p);

 private:
  DataType dtype_;
  ReduceKind kind_;
  size_t elem_size_;
  Params params_;
  Fn fn_;
};

}  // namespace commx
