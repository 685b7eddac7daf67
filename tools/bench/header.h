// The nccl-tests run header of commx-bench: the parameter line and the "# Using devices" block,
// one line per rank gathered to rank 0. Layer: tools/bench.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "args.h"
#include "commx/types.h"

namespace commx::bench {

// Most bytes of one device line (longer ones are cut when gathered).
inline constexpr size_t kDeviceLineBytes = 256;

// nccl-tests' line for one rank: "#  Rank  0 Group  0 Pid   1234 on   hostname device  0 [0x1b]
// NVIDIA H100"; a CPU rank shows "device cpu [cpus 0-3] <CPU model>".
std::string device_line(int rank, int group, long pid, const std::string& host,
                        const std::string& device);
// What this process runs on, for device_line: "<index> [0x<bus>] <name>" for a GPU, else
// "cpu [cpus <affinity>] <CPU model>".
std::string this_device(const Device& d);
// "# nThread ... graph: N", the blocking note when -z 1, "#", "# Using devices" and the lines.
void print_run_header(std::ostream& os, const Options& o, const std::vector<std::string>& lines);

}  // namespace commx::bench
