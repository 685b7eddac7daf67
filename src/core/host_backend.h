// HostBackend: the shared base of the backends whose ops run on host threads (cpu, gloo, mpi).
// Ops of a comm run in issue order on an OrderedExecutor: a synchronous op inline on the caller's
// thread, without copying its description; an async op, copied, on the executor's worker.
// Layer: core, used by backends.
#pragma once

#include <string>

#include "commx/backend.h"
#include "core/host_work.h"

namespace commx {

class HostBackend : public Backend {
 public:
  // Checks that the comm takes ops (check_open), then runs execute(op) in issue order.
  Work run(const OpDesc& op, bool async_op) final;
  // Host backends take tensors in host memory only.
  bool accepts_device(const Device& d) const override { return d.is_cpu(); }

 protected:
  // Runs one op: on the caller's thread when synchronous, else on the executor's worker.
  virtual void execute(const OpDesc& op) = 0;
  // Throws, on the caller's thread, when the comm takes no more ops; by default all are queued.
  virtual void check_open(const OpDesc&) {}
  // Fails every queued, not yet started op with kAborted: "[comm 'name' rank r] <what>".
  void fail_queued(const BackendContext& ctx, const std::string& what);
  // Blocks until every queued op has ended. Derived destructors call it first: the executor is
  // destroyed after their members, which its ops use.
  void drain() { exec_.drain(); }

 private:
  OrderedExecutor exec_;
};

}  // namespace commx
