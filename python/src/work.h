// The Python Work: a commx::Work plus the Python objects its op uses, kept alive until it ends.
// Layer: Python bindings.
#pragma once

#include "common.h"

namespace commx_py {

class PyWork {
 public:
  // `cuda_device`: the comm's CUDA device index (-1: the current one) for a GPU comm, else
  // kNotCuda; wait() then orders torch's current stream of that device after the op.
  static constexpr int kNotCuda = -2;
  PyWork(commx::Work w, KeepAlive keep, int cuda_device = kNotCuda)
      : work_(std::move(w)), keep_(std::move(keep)), cuda_device_(cuda_device) {}
  ~PyWork();
  PyWork(const PyWork&) = delete;
  PyWork& operator=(const PyWork&) = delete;

  void wait();
  void wait_blocking();
  bool is_completed();
  commx::WorkStatus status() const { return work_.status(); }
  const commx::Work& work() const { return work_; }

 private:
  void release_if_done();
  commx::Work work_;
  KeepAlive keep_;
  int cuda_device_;
};

// Drops the kept objects of orphaned Works (a Work dropped by Python before its op ended keeps
// its tensors alive here until the op completes). Called on every op issue; needs the GIL.
void prune_orphans();

}  // namespace commx_py
