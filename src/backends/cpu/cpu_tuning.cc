// CpuTuning: defaults, COMMX_CPU_* overrides and algorithm hints. Layer: backends/cpu.
#include "backends/cpu/cpu_tuning.h"

#include "commx/error.h"
#include "core/settings.h"

namespace commx {

size_t CpuTuning::dda_max_bytes(int ranks) const {
  if (dda_override) return dda_override;
  for (const DdaRow& r : dda)
    if (ranks <= r.max_ranks) return r.max_bytes;
  return dda[2].max_bytes;
}

CpuTuning CpuTuning::from_env() {
  CpuTuning t;
  // Ranges are checked by the settings table; the shape rules below stay here.
  t.dda_override = setting_bytes("COMMX_CPU_DDA_MAX_BYTES", 0);
  t.rd_max_bytes = setting_bytes("COMMX_CPU_RD_MAX_BYTES", t.rd_max_bytes);
  t.shm.slot_bytes = setting_bytes("COMMX_CPU_SLOT_BYTES", t.shm.slot_bytes);
  t.shm.ring_bytes = setting_bytes("COMMX_CPU_RING_BYTES", t.shm.ring_bytes);
  t.chunk_bytes = setting_bytes("COMMX_CPU_CHUNK_BYTES", t.chunk_bytes);
  t.cma = setting_bool("COMMX_CPU_CMA");
  t.cma_min_bytes = setting_bytes("COMMX_CPU_CMA_MIN_BYTES", t.cma_min_bytes);
  t.cma_all_reduce_min_bytes =
      setting_bytes("COMMX_CPU_CMA_ALL_REDUCE_MIN_BYTES", t.cma_all_reduce_min_bytes);
  // -1: never (the largest size_t).
  if (setting_is_set("COMMX_CPU_BROADCAST_CMA_MIN_BYTES"))
    t.broadcast_cma[0] = t.broadcast_cma[1] =
        static_cast<size_t>(setting_int("COMMX_CPU_BROADCAST_CMA_MIN_BYTES", 0));
  if (setting_is_set("COMMX_CPU_BROADCAST_ROOT_WRITES_MIN_BYTES"))
    t.broadcast_root_writes[0] = t.broadcast_root_writes[1] =
        static_cast<size_t>(setting_int("COMMX_CPU_BROADCAST_ROOT_WRITES_MIN_BYTES", 0));
  t.spin_from_env = setting_is_set("COMMX_CPU_SPIN_NS");
  t.wait.spin_ns = setting_int("COMMX_CPU_SPIN_NS", t.wait.spin_ns);
  t.wait.yield_ns = setting_int("COMMX_CPU_YIELD_NS", t.wait.yield_ns);
  t.wait.slice_ns = setting_int("COMMX_CPU_SLEEP_SLICE_NS", t.wait.slice_ns);
  size_t rb = t.shm.ring_bytes;
  if (rb < 4096 || (rb & (rb - 1)) != 0)
    throw Error(ErrorCode::kInvalidArgument,
                "COMMX_CPU_RING_BYTES must be a power of two >= 4096, got " + std::to_string(rb));
  if (t.shm.slot_bytes < (size_t{64} << 10) || t.shm.slot_bytes % 4096 != 0)
    throw Error(ErrorCode::kInvalidArgument,
                "COMMX_CPU_SLOT_BYTES must be a multiple of 4096 and >= 64 KiB, got " +
                    std::to_string(t.shm.slot_bytes));
  if (t.wait.slice_ns < 100000) t.wait.slice_ns = 100000;
  return t;
}

void CpuTuning::adapt_to_oversubscription(int local_ranks, int cpus) {
  if (local_ranks > cpus) {
    wait.yield_always = true;
    if (!spin_from_env) wait.spin_ns = 0;
  }
}

}  // namespace commx
