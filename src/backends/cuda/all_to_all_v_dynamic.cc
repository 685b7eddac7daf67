// Host side of the native all_to_all_v_dynamic (see all_to_all_v_dynamic.h). Layer: backends
// (cuda).
#include "cuda/all_to_all_v_dynamic.h"

#include <algorithm>

#include "algorithms/dynamic_a2a_check.h"

namespace commx::cuda {

int all_to_all_v_dynamic_blocks(const Tuning& t) {
  // Decode-sized ops are latency-bound (one pass of a few blocks), prefill-sized ones need the
  // bandwidth grid; the host cannot tell them apart (it never sees the counts), so the grid is
  // the bandwidth one, capped where more blocks only add flag traffic.
  return std::clamp(t.max_blocks_large, 1, 64);
}

std::string describe_dynamic_counts_error(const HostCtl& ctl) {
  DynamicCountsProblem p;
  p.kind = ctl.error_values[0];
  p.rank = ctl.error_peer;
  p.a = ctl.error_values[1];
  p.b = ctl.error_values[2];
  p.c = ctl.error_values[3];
  return describe(p, static_cast<int>(std::max<long long>(ctl.error_values[4], 1)));
}

}  // namespace commx::cuda
