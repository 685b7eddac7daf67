// Flight recorder: the last N ops of a comm (seq, op, dtype, count, root, state, timestamps),
// dumped as JSON to COMMX_TRACE_DIR on timeout, peer failure or abort, or on request, and read
// by commx-analyze to say which ranks are stuck where. Layer: core (observability).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "commx/backend.h"
#include "commx/work.h"

namespace commx {

class FlightRecorder {
 public:
  explicit FlightRecorder(size_t capacity);
  // Returns the slot id of the new entry.
  uint64_t record_start(OpType type, uint64_t seq, DataType dtype, int64_t count, int root);
  void record_issued(uint64_t id, const Work& w);
  void record_failed(uint64_t id, const std::string& error);
  // JSON object: {"comm":..,"rank":..,"size":..,"backend":..,"world_ranks":[...],"ops":[...]}
  // (oldest first); world_ranks[r]: the launcher's rank of comm rank r.
  std::string dump_json(const std::string& comm, int rank, int size, const std::string& backend,
                        const std::vector<int>& world_ranks);
  size_t capacity() const { return entries_.size(); }

 private:
  struct Entry {
    uint64_t id = 0;  // 0: empty slot
    OpType type{};
    uint64_t seq = 0;
    DataType dtype{};
    int64_t count = 0;
    int root = -1;
    double start_us = 0;
    Work work;
    std::string error;
    bool failed = false;
  };
  std::mutex mu_;
  std::vector<Entry> entries_;
  uint64_t next_id_ = 1;
  std::chrono::steady_clock::time_point t0_;
};

// Writes `json` to $COMMX_TRACE_DIR/<comm>.rank<r>.json when the variable is set; returns the
// path written (empty when not set or on failure).
std::string write_trace_file(const std::string& comm, int rank, const std::string& json);

}  // namespace commx
