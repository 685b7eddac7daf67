// The cpu backend's algorithm table: one row per algorithm of each collective, over shared memory
// (ranks of one host) or over the backend's Transport (the generic algorithms, any host layout).
// CpuBackend::dispatch picks a row with select_algorithm (hint, tuning table, cpu_default_algorithm)
// and runs it. Layer: backends/cpu.
#pragma once

#include <span>
#include <string_view>

#include "algorithms/generic_collectives.h"
#include "algorithms/shm_collectives.h"
#include "backends/cpu/cpu_tuning.h"
#include "commx/algorithm.h"

namespace commx {

// How a row runs: over shared memory or over the transport (exactly one is set).
struct CpuRun {
  void (*shm)(ShmColl& c, const OpDesc& op, const CpuTuning& t) = nullptr;
  void (*generic)(GenericColl& c, const OpDesc& op, const CpuTuning& t) = nullptr;
};
using CpuAlgorithm = Algorithm<CpuRun>;

std::span<const CpuAlgorithm> cpu_algorithms();
// Whether some row of any collective has this name (a hint meant for another collective).
bool cpu_knows_algorithm(std::string_view name);
// The choice without hint or table row: by link and size (thresholds in CpuTuning).
const char* cpu_default_algorithm(const OpDesc& op, const Topology& topo, const CpuTuning& t,
                                  size_t cma_all_reduce_min_bytes);

}  // namespace commx
