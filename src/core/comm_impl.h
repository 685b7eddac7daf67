// The state behind a Comm. Layer: core.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "commx/comm.h"
#include "core/flight_recorder.h"
#include "core/recorded_work.h"

namespace commx {

class CommImpl {
 public:
  std::string name;
  std::string backend_name;
  int rank = 0;
  int size = 1;
  Device device;
  Timeout timeout = kDefaultTimeout;
  bool abort_process = false;
  CommOptions options;
  std::shared_ptr<Store> base_store;  // unprefixed, shared with comms split from this one
  std::string store_prefix;
  std::shared_ptr<Store> store;  // base_store under store_prefix
  std::vector<int> world_ranks;
  std::unique_ptr<Backend> backend;
  std::atomic<uint64_t> seq{0};
  std::atomic<bool> aborted{false};
  std::atomic<bool> finalized{false};
  uint64_t split_count = 0;
  std::shared_ptr<FlightRecorder> recorder;  // shared with the Works of async ops

  std::mutex hooks_mu;
  std::vector<PreHook> pre_hooks;
  std::vector<PostHook> post_hooks;
  std::vector<AbortHook> abort_hooks;

  // "[comm 'name' rank r/n] op #seq: " -- the prefix of every error about an op.
  std::string op_context(const OpDesc& op) const;
  // The recorder with the names its dumps carry (for the Works of async ops).
  RecorderRef recorder_ref() const { return {recorder, name, rank, size, backend_name, world_ranks}; }
};

// Throws InvalidArgument naming comm, rank, op and what is wrong with its arguments.
void validate_op(const CommImpl& c, const OpDesc& op);
// After lowering: throws Unsupported when the reduction or the backend cannot take the op.
void check_supported(const CommImpl& c, const OpDesc& op);

}  // namespace commx
