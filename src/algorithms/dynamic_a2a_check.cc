// describe(DynamicCountsProblem) (see dynamic_a2a_check.h). Layer: algorithms.
#include "algorithms/dynamic_a2a_check.h"

namespace commx {

std::string describe(const DynamicCountsProblem& p, int experts_per_rank) {
  using P = DynamicCountsProblem;
  auto s = [](auto v) { return std::to_string(v); };
  const std::string who = "rank " + s(p.rank);
  switch (p.kind) {
    case P::kNegativeCount: {
      const int64_t j = p.b / experts_per_rank, l = p.b % experts_per_rank;
      return who + " has a negative count " + s(p.a) + " for rank " + s(j) +
             (experts_per_rank > 1 ? " expert " + s(l) : std::string());
    }
    case P::kRowSizeDiffers:
      return who + " passed row_size " + s(p.a) + " but rank 0 passed " + s(p.b) +
             ": every rank must pass the same";
    case P::kInputOverrun:
      return who + " sends " + s(p.a) + " rows of " + s(p.b) + " elements but its input holds " +
             s(p.c) + " elements";
    case P::kCapacityExceeded:
      return "capacity exceeded: " + who + " would receive " + s(p.a) + " rows of " + s(p.b) +
             " elements but its output holds " + s(p.c) + " elements; nothing was written";
    default:
      return "";
  }
}

}  // namespace commx
