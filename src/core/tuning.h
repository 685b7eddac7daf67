// Tuning table: measured per-size algorithm winners that commx-bench writes (--tune FILE) and
// backends read at run time to pick an algorithm, instead of thresholds hard-coded in source.
// Layer: core (pure logic, no backend knowledge). File format: docs/bench.md "Tuning tables":
// "collective world_size link min_bytes max_bytes algorithm" (v2), or without the link column
// (v1, link "any").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace commx {

struct TuningEntry {
  std::string collective;  // e.g. "all_reduce"
  int world_size = 0;
  uint64_t min_bytes = 0;  // inclusive
  uint64_t max_bytes = 0;  // inclusive; UINT64_MAX for "max"
  std::string algorithm;
  std::string link = "any";  // the links it was measured on ("shm", "tcp", "nvlink", "pcie")
};

class TuningTable {
 public:
  // Parses the text format; throws Error(kInvalidArgument) naming the source and line on bad input.
  static TuningTable parse(const std::string& text, const std::string& source = "<string>");
  // Reads and parses `path`; nullopt when the file does not exist (other errors throw).
  static std::optional<TuningTable> load(const std::string& path);
  // COMMX_TUNING_FILE if set (an unreadable file is an error), else `default_path` if it exists,
  // else an empty table. Loaded once per path and cached for the process.
  static const TuningTable& from_env(const std::string& default_path = "");

  // The algorithm for `bytes` at `world_size` over `link`: entries of the exact world size first;
  // else those of the largest listed world size below it; else of the smallest above. Entries
  // of another link are not considered ("any" on either side matches), and an entry of the link
  // itself wins over an "any" entry for the same size. Empty when no entry
  // covers the size. The view lives as long as the table (tables from from_env() live for the
  // process). No allocation: it runs on every op.
  std::string_view lookup(std::string_view collective, int world_size, uint64_t bytes,
                          std::string_view link = "any") const;

  const std::vector<TuningEntry>& entries() const { return entries_; }
  void add(TuningEntry e);
  // The text form that parse() reads back.
  std::string to_text() const;

 private:
  std::vector<TuningEntry> entries_;
  // The entries of each collective (indices into entries_, in order): lookup() reads only these.
  std::vector<std::pair<std::string, std::vector<uint32_t>>> by_collective_;
};

}  // namespace commx
