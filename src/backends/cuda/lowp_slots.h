// How the FP8 kernels of the cuda backend cut a rank's data area into slots (lowp_cuda.cc), as
// plain arithmetic: every rank computes the same from sizes all of them know, and it is tested on
// the CPU. Layer: backends (cuda).
#pragma once

#include <cstdint>

namespace commx::cuda {

// A slot of `cap` bytes holds `terms` encoded chunks of `chunk` elements each (0: none fits). A
// chunk in a slot has its scales (4 bytes per codec block of `block` elements) and its codes (a
// byte each) each padded to 16 bytes, hence the 32 bytes kept back per term.
struct LowpSlots {
  uint64_t cap = 0;
  int64_t chunk = 0;
};

inline LowpSlots lowp_slots(uint64_t area_bytes, int slots, int terms, int64_t block) {
  LowpSlots s;
  s.cap = (area_bytes / static_cast<uint64_t>(slots)) & ~uint64_t(255);
  const uint64_t per_term = s.cap / static_cast<uint64_t>(terms);
  if (per_term > 32)
    s.chunk = static_cast<int64_t>((per_term - 32) / static_cast<uint64_t>(block + 4)) * block;
  return s;
}

// Whether an all_reduce whose longest per-rank range is `longest` elements lays its slots over
// both buffer halves: when they hold it in one round where one half would take two or more. One
// round over both halves adds a barrier at each end of the op; a second round costs more (bf16,
// 64 MiB on 2 x H200: 160.7 us in two rounds of one half, 149.7 us in one round of both).
inline bool lowp_all_reduce_both_halves(uint64_t half_bytes, int slots, int terms, int64_t block,
                                        int64_t longest) {
  const int64_t one = lowp_slots(half_bytes, slots, terms, block).chunk;
  const int64_t both = lowp_slots(2 * half_bytes, slots, terms, block).chunk;
  return one > 0 && longest > one && longest <= both;
}

}  // namespace commx::cuda
