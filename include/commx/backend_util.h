// What a backend needs besides commx/backend.h, installed so that a backend built outside the
// commx tree (a plugin, see docs/api.md) uses the same pieces as the in-tree ones: the host-backend
// base, the host reductions (commx/host_reduce.h), the environment reads (commx/env.h) and byte
// views of tensors. Plugins include only commx/ headers; the build enforces it for the in-tree
// ones (they do not see src/), and tests/plugin builds one against an installed tree.
// Layer: public API for backend authors.
#pragma once

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "commx/backend.h"
#include "commx/env.h"
#include "commx/host_reduce.h"

namespace commx {

class OrderedExecutor;

// The base of the backends whose ops run on host threads (cpu, gloo, mpi). Ops of a comm run in
// issue order: a synchronous op inline on the caller's thread, without copying its description;
// an async op, copied, on a worker thread.
class HostBackend : public Backend {
 public:
  HostBackend();
  ~HostBackend() override;
  // Checks that the comm takes ops (check_open), then runs execute(op) in issue order.
  Work run(const OpDesc& op, bool async_op) final;
  // Host backends take tensors in host memory only.
  bool accepts_device(const Device& d) const override { return d.is_cpu(); }

 protected:
  // Runs one op: on the caller's thread when synchronous, else on the worker.
  virtual void execute(const OpDesc& op) = 0;
  // Throws, on the caller's thread, when the comm takes no more ops; by default all are queued.
  virtual void check_open(const OpDesc&) {}
  // Fails every queued, not yet started op with kAborted: "[comm 'name' rank r] <what>".
  void fail_queued(const BackendContext& ctx, const std::string& what);
  // Blocks until every queued op has ended. Derived destructors call it first: the worker ends
  // after their members, which its ops use.
  void drain();

 private:
  std::unique_ptr<OrderedExecutor> exec_;
};

// Byte views of tensors and tensor lists, for backends that hand buffers to a library and stage
// per-rank views through one contiguous buffer (see back_to_back in commx/backend.h).
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
