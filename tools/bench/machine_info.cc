// Machine description for the JSON header: host, CPU model, cores, GPUs, date.
// Layer: tools/bench.
#include <unistd.h>

#include <ctime>
#include <fstream>

#include "memory.h"
#include "row.h"

namespace commx::bench {

MachineInfo collect_machine_info(const std::string& command_line, int world_size,
                                 const std::vector<std::string>& backends) {
  MachineInfo m;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  m.hostname = host;
  std::ifstream cpu("/proc/cpuinfo");
  for (std::string line; std::getline(cpu, line);) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) m.cpu_model = line.substr(colon + 2);
      break;
    }
  }
  m.cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  m.gpus = gpu_names();
  std::time_t now = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  m.date = buf;
  m.command_line = command_line;
  m.world_size = world_size;
  m.backends = backends;
  return m;
}

}  // namespace commx::bench
