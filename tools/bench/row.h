// One measured row of commx-bench and the machine it ran on. Layer: tools/bench.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace commx::bench {

struct Row {
  std::string collective;
  std::string backend;  // label: "cpu" or "cpu:ring"
  int world_size = 1;
  std::string link = "any";  // the links between the ranks as the backend found them (Comm::link)
  std::string dtype;
  std::string op;  // "none" for collectives without a reduction
  int root = -1;
  uint64_t size = 0;  // bytes (the nccl-tests "size" column)
  int64_t count = 0;
  // Per op, over the timed batches (each -m ops, or ~20 us of ops), then over the ranks as -a
  // says (default: the slowest rank).
  double time_us = 0;  // median
  double mean_us = 0;  // mean
  double min_us = 0;   // fastest batch
  double max_us = 0;   // slowest batch
  double algbw = 0;    // GB/s
  double busbw = 0;    // GB/s
  int64_t wrong = -1;  // mismatching elements over all ranks; -1: not checked
  bool in_place = false;
  bool graph = false;
  double ratio = 0;  // time_us / the first backend's time_us for the same point (0: none)
};

struct MachineInfo {
  std::string hostname;
  std::string cpu_model;
  int cores = 0;
  std::vector<std::string> gpus;
  std::string date;  // ISO 8601 UTC
  std::string command_line;
  int world_size = 1;
  std::vector<std::string> backends;
};

MachineInfo collect_machine_info(const std::string& command_line, int world_size,
                                 const std::vector<std::string>& backends);

}  // namespace commx::bench
