// The nccl backend's algorithm table (commx/algorithm.h): one row per collective, each an NCCL
// call or a group of them; where NCCL's single-buffer call does not fit the op's views (the list
// and v forms), the row's fallback issues grouped calls instead. NcclBackend::enqueue picks the
// row (select_library_row) and runs it on the op's stream. Layer: backends (nccl).
#pragma once

#include <cuda_runtime_api.h>

#include <span>
#include <string>

#include "commx/algorithm.h"
#include "commx/backend.h"
#include "nccl/nccl_api.h"

namespace commx::nccl {

// Throws kNccl, prefixed by `where`, naming `what` and NCCL's last error, unless `r` is success
// or in progress.
void check_nccl(const Api& api, ncclComm_t comm, ncclResult_t r, const char* what,
                const std::string& where);

// One op's NCCL calls on one stream: what a row needs of the backend.
struct NcclCall {
  const Api& api;
  ncclComm_t comm;
  const OpDesc& op;
  cudaStream_t stream;
  const std::string& where;  // the op's error prefix
  int rank;
  int size;
  ncclDataType_t dt;  // reductions: the element type (data movement counts bytes)
  ncclRedOp_t ro;
  float* scratch;  // one float on the device: the barrier's all-reduce

  void check(ncclResult_t r, const char* what) const { check_nccl(api, comm, r, what, where); }
  void send(const void* p, size_t bytes, int peer) const;
  void recv(void* p, size_t bytes, int peer) const;
  // Device-to-device copy on the stream (nothing for empty or identical buffers).
  void copy(void* dst, const void* src, size_t bytes) const;
  // Runs `body` between ncclGroupStart and ncclGroupEnd (the group is closed when it throws).
  template <class F>
  void group(F&& body) const {
    check(api.GroupStart(), "ncclGroupStart");
    try {
      body();
    } catch (...) {
      api.GroupEnd();
      throw;
    }
    check(api.GroupEnd(), "ncclGroupEnd");
  }
};

using NcclAlgorithm = Algorithm<void (*)(const NcclCall&)>;
std::span<const NcclAlgorithm> nccl_algorithms();

}  // namespace commx::nccl
