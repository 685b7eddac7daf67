// Byte-level views of tensors and tensor lists, for host backends that hand buffers to a library
// (gloo, mpi) and stage list-shaped ops through one contiguous buffer.
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

// True when the list's tensors lie back to back in memory (then a library can use them directly).
inline bool contiguous(const std::vector<Tensor>& ts) {
  if (ts.empty()) return false;
  char* p = bytes_of(ts[0]);
  for (const auto& t : ts) {
    if (bytes_of(t) != p) return false;
    p += t.nbytes();
  }
  return true;
}

inline size_t total_bytes(const std::vector<Tensor>& ts) {
  size_t n = 0;
  for (const auto& t : ts) n += t.nbytes();
  return n;
}

}  // namespace commx
