// The nccl-tests run header (see header.h). Layer: tools/bench.
#include "header.h"

#include <sched.h>

#include <cstdio>
#include <fstream>

#include "memory.h"

namespace commx::bench {
namespace {

// "0-3,6" for the CPUs this process may run on.
std::string affinity_list() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return "?";
  std::string out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &set)) continue;
    int last = c;
    while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &set)) ++last;
    if (!out.empty()) out += ',';
    out += std::to_string(c);
    if (last > c) out += '-' + std::to_string(last);
    c = last;
  }
  return out;
}

std::string cpu_model() {
  std::ifstream cpu("/proc/cpuinfo");
  for (std::string line; std::getline(cpu, line);)
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos && colon + 2 <= line.size()) return line.substr(colon + 2);
    }
  return "unknown CPU";
}

}  // namespace

std::string device_line(int rank, int group, long pid, const std::string& host,
                        const std::string& device) {
  char b[kDeviceLineBytes];
  std::snprintf(b, sizeof b, "#  Rank %2d Group %2d Pid %6ld on %10s device %s", rank, group, pid,
                host.c_str(), device.c_str());
  return b;
}

std::string this_device(const Device& d) {
  if (d.is_cuda()) {
    char b[32];
    std::snprintf(b, sizeof b, "%2d ", d.index);
    return b + gpu_description(d.index);
  }
  return "cpu [cpus " + affinity_list() + "] " + cpu_model();
}

void print_run_header(std::ostream& os, const Options& o, const std::vector<std::string>& lines) {
  os << nccl_tests_parameter_line(o) << "\n";
  if (o.blocking) os << "# Blocking Enabled: wait for completion after each collective\n";
  os << "#\n# Using devices\n";
  for (const auto& l : lines) os << l << "\n";
}

}  // namespace commx::bench
