// The non-template half of select_algorithm (commx/algorithm.h): hints, tuning-table lookup,
// names and errors. Layer: core.
#include "commx/algorithm.h"
#include "commx/error.h"
#include "core/tuning.h"

namespace commx::algorithm_detail {

std::string_view hinted(const OpDesc& op) {
  auto it = op.hints.find("algorithm");
  if (it == op.hints.end() || it->second == "auto") return {};
  return it->second;
}

std::string tuned(const TuningTable* table, Collective c, const Topology& topo, size_t bytes) {
  if (!table || table->entries().empty()) return {};
  return table->lookup(collective_name(c), topo.world_size, bytes, topo.link);
}

bool names(const char* name, const char* aliases, std::string_view wanted) {
  if (wanted.empty()) return false;
  if (wanted == name) return true;
  std::string_view rest = aliases ? aliases : "";
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    if (rest.substr(0, comma) == wanted) return true;
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return false;
}

void unknown(const std::string& where, Collective c, std::string_view wanted,
             const std::string& known) {
  throw Error(ErrorCode::kInvalidArgument, where + "unknown " + collective_name(c) +
                                               " algorithm '" + std::string(wanted) + "' (want " +
                                               known + ")");
}

}  // namespace commx::algorithm_detail
