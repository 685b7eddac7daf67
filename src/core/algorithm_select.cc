// The non-template half of select_algorithm (commx/algorithm.h): hints, tuning-table lookup,
// names and errors. Layer: core.
#include "commx/algorithm.h"
#include "commx/error.h"
#include "core/tuning.h"

namespace commx::algorithm_detail {

std::string_view hinted(const OpDesc& op) {
  if (op.hints.empty()) return {};
  auto it = op.hints.find("algorithm");
  if (it == op.hints.end() || it->second == "auto") return {};
  return it->second;
}

std::string_view tuned(const TuningTable* table, Collective c, const Topology& topo, size_t bytes) {
  if (!table || table->entries().empty()) return {};
  return table->lookup(collective_name(c), topo.world_size, bytes, topo.link);
}

namespace {
// `name` (NUL-terminated) equals `wanted`, without measuring `name` first: rows are compared on
// every op, and most differ at the first character.
bool same(const char* name, std::string_view wanted) {
  for (char ch : wanted)
    if (*name++ != ch) return false;
  return *name == '\0';
}
}  // namespace

bool names(const char* name, const char* aliases, std::string_view wanted) {
  if (wanted.empty()) return false;
  if (same(name, wanted)) return true;
  std::string_view rest = aliases ? aliases : "";
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    if (rest.substr(0, comma) == wanted) return true;
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return false;
}

void unknown(std::string_view where, Collective c, std::string_view wanted,
             const std::string& known) {
  throw Error(ErrorCode::kInvalidArgument, std::string(where) + "unknown " + collective_name(c) +
                                               " algorithm '" + std::string(wanted) + "' (want " +
                                               known + ")");
}

}  // namespace commx::algorithm_detail
