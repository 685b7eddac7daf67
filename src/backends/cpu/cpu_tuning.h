// The cpu backend's tunables in one place: algorithm size thresholds, shared-memory sizes and wait
// timings. Defaults come from measurements on a 2-core VM (docs/cpu_backend.md); environment
// variables COMMX_CPU_* override them and op hints override the algorithm. Layer: backends/cpu.
#pragma once

#include <cstddef>
#include <string>

#include "commx/options.h"
#include "transport/shm_group.h"
#include "transport/shm_wait.h"

namespace commx {

// all_reduce uses DDA (one-shot) up to a size that shrinks as ranks grow: DDA reads n buffers of
// the full size on every rank, reduce-scatter + all-gather only about two.
struct DdaRow {
  int max_ranks;
  size_t max_bytes;
};

struct CpuTuning {
  DdaRow dda[3] = {{2, size_t{256} << 10}, {4, size_t{16} << 10}, {1 << 30, size_t{16} << 10}};
  size_t dda_override = 0;  // COMMX_CPU_DDA_MAX_BYTES (0: use the table)
  // Generic (transport) all_reduce: recursive doubling up to this size, ring above.
  size_t rd_max_bytes = size_t{64} << 10;
  ShmSizes shm;
  size_t chunk_bytes = size_t{1} << 20;  // per round of the shm reduce-scatter + all-gather
  // Single-copy data ops over process_vm_readv (all_gather, broadcast, all_to_all) from this many
  // bytes per rank piece on (measured crossover on the 2-core VM: 16-32 KiB); `cma` false
  // (COMMX_CPU_CMA=0) disables them.
  bool cma = true;
  size_t cma_min_bytes = size_t{32} << 10;
  // all_reduce above the DDA size: single-copy from this size on. Off by default: on the 2-core
  // VM the pipelined slot reduce-scatter + all-gather was 1.5-2.5x faster from 512 KiB to 32 MiB
  // (process_vm_readv pins pages on every call); hint "cma" still selects it.
  size_t cma_all_reduce_min_bytes = ~size_t{0};
  // broadcast: single copy from this size on (COMMX_CPU_BROADCAST_CMA_MIN_BYTES), the root
  // writing a share of each peer's buffer (COMMX_CPU_BROADCAST_ROOT_WRITES=0: it does not). On
  // the 2-core VM the slot path's copies cost 5x more whenever the host puts the two vCPUs on
  // distant cores (dirty cache lines cross the host's fabric; docs/cpu_backend.md), while single
  // copy with root writes is ~2x faster than Open MPI from 16 KiB on in either placement.
  size_t broadcast_cma_min_bytes = size_t{16} << 10;
  bool broadcast_root_writes = true;
  WaitTuning wait;
  bool spin_from_env = false;  // COMMX_CPU_SPIN_NS given: keep it even when oversubscribed

  size_t dda_max_bytes(int ranks) const;
  // More ranks on this host than CPUs this process may run on: spinning only steals the time
  // slice a peer needs, so waits go straight to yielding (unless COMMX_CPU_SPIN_NS says otherwise).
  void adapt_to_oversubscription(int local_ranks);
  // Reads COMMX_CPU_* (throws InvalidArgument on malformed values).
  static CpuTuning from_env();
};

// Algorithms an op can ask for with hints {"algorithm": ...}.
enum class CpuAlgo { kAuto, kDda, kRsag, kCma, kRing, kRecursiveDoubling, kGeneric };
CpuAlgo parse_algorithm_hint(const Hints& hints);
// "dda", "rsag", "cma", "ring", "recursive_doubling", "generic" (and aliases); "" or "auto": kAuto.
CpuAlgo parse_algorithm_name(const std::string& name);

}  // namespace commx
