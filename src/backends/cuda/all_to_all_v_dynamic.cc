// Host side of the native all_to_all_v_dynamic (see all_to_all_v_dynamic.h). Layer: backends
// (cuda).
#include "cuda/all_to_all_v_dynamic.h"

#include <algorithm>

namespace commx::cuda {

int all_to_all_v_dynamic_blocks(const Tuning& t) {
  // Decode-sized ops are latency-bound (one pass of a few blocks), prefill-sized ones need the
  // bandwidth grid; the host cannot tell them apart (it never sees the counts), so the grid is
  // the bandwidth one, capped where more blocks only add flag traffic.
  return std::clamp(t.max_blocks_large, 1, 64);
}

}  // namespace commx::cuda
