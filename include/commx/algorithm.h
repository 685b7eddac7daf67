// Algorithm tables and the one selector every backend uses. A backend lists its algorithms as
// rows {name, collective, supports, run}; select_algorithm picks the row for an op: the op's hint
// "algorithm", else the tuning table's row for the op's collective, world size, link and size,
// else the backend's default. A new algorithm is its implementation plus one row.
// Layer: public API for backend authors.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "commx/backend.h"

namespace commx {

class TuningTable;

// Where an op runs, as algorithms and tuning tables tell cases apart.
struct Topology {
  int world_size = 1;
  // The links between the ranks: "shm", "tcp", "nvlink", "pcie", ...; tuning-table rows name the
  // link they were measured on ("any" matches every link).
  const char* link = "any";
  // The ranks can copy from each other's memory directly (host: cross-memory attach works
  // between every pair, agreed by all ranks).
  bool single_copy = false;
  // Hosts the ranks run on (equal ranks per host where > 1): algorithms for one host's links
  // cannot span several.
  int hosts = 1;
};

// One row of a backend's table. `Run` is the backend's way to execute an op (a host backend runs
// it, a device backend enqueues it on a stream).
template <class Run>
struct Algorithm {
  const char* name;
  Collective collective;
  // Whether the row can run `op` here; null: every op of its collective.
  bool (*supports)(const OpDesc& op, const Topology& topo) = nullptr;
  Run run{};
  // The row taken when supports() says no (a chain ending in a row that always runs); null: the
  // backend's default.
  const char* fallback = nullptr;
  // Other names a hint may give this row, comma-separated ("one_shot").
  const char* aliases = "";
};

namespace algorithm_detail {
// The op's hint "algorithm" ("" or "auto": none).
std::string_view hinted(const OpDesc& op);
// The tuning table's algorithm for the op ("" when no row covers it or `table` is null).
std::string_view tuned(const TuningTable* table, Collective c, const Topology& topo, size_t bytes);
bool names(const char* name, const char* aliases, std::string_view wanted);
// Throws InvalidArgument: `wanted` names no algorithm of `c` (the message lists `known`).
[[noreturn]] void unknown(std::string_view where, Collective c, std::string_view wanted,
                          const std::string& known);
}  // namespace algorithm_detail

// The row of `table` for `op` as collective `c` (usually op.collective): hint, then tuning table,
// then `default_name`, following fallbacks until a row supports the op. A hint or table row that
// names no row of `c` throws InvalidArgument prefixed by `where`, unless `accepts_hint` says this
// backend knows the name for other collectives (then it counts as unnamed).
template <class Run>
const Algorithm<Run>& select_algorithm(std::span<const Algorithm<Run>> table, Collective c,
                                       const OpDesc& op, const Topology& topo,
                                       const TuningTable* tuning, std::string_view default_name,
                                       std::string_view where,
                                       bool (*accepts_hint)(std::string_view) = nullptr) {
  auto find = [&](std::string_view name) -> const Algorithm<Run>* {
    for (const auto& row : table)
      if (row.collective == c && algorithm_detail::names(row.name, row.aliases, name)) return &row;
    return nullptr;
  };
  // A name that is no row of `c` is an error, unless the backend knows it for other collectives.
  auto named = [&](std::string_view name) -> const Algorithm<Run>* {
    if (name.empty()) return nullptr;
    if (const Algorithm<Run>* row = find(name)) return row;
    if (accepts_hint && accepts_hint(name)) return nullptr;
    std::string known;
    for (const auto& r : table)
      if (r.collective == c) known += (known.empty() ? "" : ", ") + std::string(r.name);
    algorithm_detail::unknown(where, c, name, known);
  };
  const Algorithm<Run>* row = named(algorithm_detail::hinted(op));
  if (!row) row = named(algorithm_detail::tuned(tuning, c, topo, op.bytes()));
  if (!row) row = find(default_name);
  if (!row) algorithm_detail::unknown(where, c, default_name, "the backend's default");
  for (int hops = 0; row->supports && !row->supports(op, topo); ++hops) {
    const Algorithm<Run>* next = find(row->fallback ? std::string_view(row->fallback) : default_name);
    if (!next || next == row || hops > 8) break;  // the chain's end runs what it can
    row = next;
  }
  return *row;
}

// The row of a backend that wraps a library (gloo, mpi, nccl: a library call or two per
// collective): the op's hint where it names a row of the op's collective, else the collective's
// first row, following fallbacks. A hint naming none of its rows is left to the other backends
// of the job (a benchmark passes one hint to every comm); null when no row runs the collective.
template <class Run>
const Algorithm<Run>* select_library_row(std::span<const Algorithm<Run>> table, const OpDesc& op) {
  // Every hint is accepted and the default exists: nothing here can fail, so no error prefix.
  for (const auto& row : table)
    if (row.collective == op.collective)
      return &select_algorithm(table, op.collective, op, Topology{op.comm_size}, nullptr, row.name,
                               "", [](std::string_view) { return true; });
  return nullptr;
}

}  // namespace commx
