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
  // broadcast: single copy from broadcast_cma[0] bytes on (2 ranks; [1]: more ranks), the root
  // writing a share of each peer's buffer from broadcast_root_writes[0] ([1]) bytes on. The slot
  // path's two copies hand dirty cache lines from core to core, 5x slower whenever the host puts
  // the VM's two vCPUs on distant cores (it moves them every few seconds; docs/cpu_backend.md);
  // single copy with root writes beat Open MPI by ~2x from 16 KiB on at 2 ranks in either
  // placement (at 4 ranks on 2 CPUs from 256 KiB on). Root writes are opt-in
  // (COMMX_CPU_BROADCAST_ROOT_WRITES_MIN_BYTES): a peer that leaves the op early (abort, error)
  // waits only 250 ms for the root's writes into its buffer, so a root stalled longer than that
  // mid-write could still write into memory the peer's caller already reused.
  size_t broadcast_cma[2] = {size_t{16} << 10, size_t{32} << 10};
  size_t broadcast_root_writes[2] = {~size_t{0}, ~size_t{0}};
  size_t broadcast_cma_min(int ranks) const { return broadcast_cma[ranks > 2]; }
  size_t broadcast_root_writes_min(int ranks) const { return broadcast_root_writes[ranks > 2]; }
  WaitTuning wait;
  bool spin_from_env = false;  // COMMX_CPU_SPIN_NS given: keep it even when oversubscribed

  size_t dda_max_bytes(int ranks) const;
  // More ranks on this host than CPUs the ranks may run on together (`cpus`: the union of their
  // affinity masks): spinning only steals the time slice a peer needs, so waits go straight to
  // yielding (unless COMMX_CPU_SPIN_NS says otherwise).
  void adapt_to_oversubscription(int local_ranks, int cpus);
  // Reads COMMX_CPU_* (throws InvalidArgument on malformed values).
  static CpuTuning from_env();
};

}  // namespace commx
