// The Work of an async op as its caller sees it: when the op turns out to have failed (seen by
// wait, status or error), it is marked failed in the comm's flight recorder and the record is
// dumped, as a sync op's failure is at issue. Layer: core (observability).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "commx/work.h"
#include "core/flight_recorder.h"

namespace commx {

// Who dumps: the comm's recorder and the names its dump file carries.
struct RecorderRef {
  std::shared_ptr<FlightRecorder> recorder;
  std::string comm;
  int rank = 0;
  int size = 1;
  std::string backend;
  std::vector<int> world_ranks;

  // Marks entry `id` failed with `error` and writes the dump (see write_trace_file).
  void fail_and_dump(uint64_t id, const std::string& error) const;
};

// Wraps `inner` (what the backend returned for recorder entry `id`).
Work recorded_work(Work inner, RecorderRef ref, uint64_t id);

}  // namespace commx
