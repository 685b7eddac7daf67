// Byte-level views of tensors and tensor lists, for host backends that hand buffers to a library
// (gloo, mpi) and stage per-rank views through one contiguous buffer (see back_to_back in
// commx/backend.h).
// Layer: core, used by backends.
#pragma once

#include <cstring>
#include <vector>

#include "commx/tensor.h"

namespace commx {

inline char* bytes_of(const Tensor& t) { return static_cast<char*>(t.data); }

// memmove that accepts empty views (whose pointers may be null).
inline void copy_bytes(void* dst, const void* src, size_t n) {
  if (n > 0 && dst != src) std::memmove(dst, src, n);
}

inline size_t total_bytes(const std::vector<Tensor>& ts) {
  size_t n = 0;
  for (const auto& t : ts) n += t.nbytes();
  return n;
}

}  // namespace commx
