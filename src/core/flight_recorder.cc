// Flight recorder (see flight_recorder.h). Layer: core (observability).
#include "core/flight_recorder.h"

#include <fstream>
#include <sstream>

#include "core/settings.h"

namespace commx {
namespace {
std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      o += ' ';
    } else {
      o += c;
    }
  }
  return o;
}
}  // namespace

FlightRecorder::FlightRecorder(size_t capacity)
    : entries_(capacity == 0 ? 1 : capacity), t0_(std::chrono::steady_clock::now()) {}

uint64_t FlightRecorder::record_start(OpType type, uint64_t seq, DataType dtype, int64_t count, int root) {
  std::lock_guard<std::mutex> g(mu_);
  uint64_t id = next_id_++;
  Entry& e = entries_[id % entries_.size()];
  e = Entry{};
  e.id = id;
  e.type = type;
  e.seq = seq;
  e.dtype = dtype;
  e.count = count;
  e.root = root;
  e.start_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0_).count();
  return id;
}

void FlightRecorder::record_issued(uint64_t id, const Work& w) {
  std::lock_guard<std::mutex> g(mu_);
  Entry& e = entries_[id % entries_.size()];
  if (e.id == id) e.work = w;
}

void FlightRecorder::record_failed(uint64_t id, const std::string& error) {
  std::lock_guard<std::mutex> g(mu_);
  Entry& e = entries_[id % entries_.size()];
  if (e.id == id) {
    e.failed = true;
    e.error = error;
  }
}

std::string FlightRecorder::dump_json(const std::string& comm, int rank, int size, const std::string& backend,
                                      const std::vector<int>& world_ranks) {
  std::lock_guard<std::mutex> g(mu_);
  std::ostringstream o;
  o << "{\"comm\":\"" << json_escape(comm) << "\",\"rank\":" << rank << ",\"size\":" << size
    << ",\"backend\":\"" << json_escape(backend) << "\",\"world_ranks\":[";
  for (size_t i = 0; i < world_ranks.size(); ++i) o << (i ? "," : "") << world_ranks[i];
  o << "],\"ops\":[";
  bool first = true;
  uint64_t lo = next_id_ > entries_.size() ? next_id_ - entries_.size() : 1;
  for (uint64_t id = lo; id < next_id_; ++id) {
    const Entry& e = entries_[id % entries_.size()];
    if (e.id != id) continue;
    std::string state = "started";
    std::string error = e.error;
    if (e.failed) {
      state = "failed";
    } else if (e.work.state()) {
      WorkStatus s = e.work.status();
      state = s == WorkStatus::kCompleted ? "completed"
              : s == WorkStatus::kTimedOut ? "timed_out"
              : s == WorkStatus::kError    ? "failed"
              : s == WorkStatus::kNotStarted ? "enqueued" : "started";
      if (state == "failed" || state == "timed_out") {
        try {
          if (auto ep = e.work.error()) std::rethrow_exception(ep);
        } catch (const std::exception& ex) {
          error = ex.what();
        }
      }
    }
    o << (first ? "" : ",") << "\n{\"seq\":" << e.seq << ",\"op\":\"" << op_type_name(e.type) << "\",\"dtype\":\""
      << dtype_name(e.dtype) << "\",\"count\":" << e.count << ",\"root\":" << e.root << ",\"start_us\":"
      << static_cast<int64_t>(e.start_us) << ",\"state\":\"" << state << "\"";
    if (!error.empty()) o << ",\"error\":\"" << json_escape(error) << "\"";
    o << "}";
    first = false;
  }
  o << "]}\n";
  return o.str();
}

std::string write_trace_file(const std::string& comm, int rank, const std::string& json) {
  auto dir = setting_str("COMMX_TRACE_DIR");
  if (!dir) return "";
  std::string safe;
  for (char c : comm) safe += (isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') ? c : '_';
  std::string path = *dir + "/" + safe + ".rank" + std::to_string(rank) + ".json";
  std::ofstream f(path);
  if (!f) return "";
  f << json;
  return f ? path : "";
}

}  // namespace commx
