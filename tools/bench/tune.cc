// Per-size winners -> tuning table (see tune.h). Layer: tools/bench.
#include "tune.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <map>

namespace commx::bench {

TuningTable tuning_from_rows(const std::vector<Row>& rows, const std::string& name) {
  TuningTable table;
  std::vector<std::string> colls;
  for (const auto& r : rows)
    if (r.backend.rfind(name + ":", 0) == 0 &&
        std::find(colls.begin(), colls.end(), r.collective) == colls.end())
      colls.push_back(r.collective);
  for (const auto& c : colls) {
    std::string dtype, op;
    bool have_oop = false;
    for (const auto& r : rows)
      if (r.collective == c && r.backend.rfind(name + ":", 0) == 0) {
        if (dtype.empty()) dtype = r.dtype, op = r.op;
        have_oop = have_oop || !r.in_place;
      }
    int ws = 0;
    std::string link = "any";
    std::map<uint64_t, std::pair<double, std::string>> best;  // size -> (time, algorithm)
    for (const auto& r : rows) {
      if (r.collective != c || r.backend.rfind(name + ":", 0) != 0 || r.dtype != dtype ||
          r.op != op || r.in_place == have_oop || r.wrong > 0)
        continue;
      ws = r.world_size;
      link = r.link;
      std::string algo = r.backend.substr(name.size() + 1);
      auto it = best.find(r.size);
      if (it == best.end() || r.time_us < it->second.first) best[r.size] = {r.time_us, algo};
    }
    uint64_t lo = 0;
    TuningEntry cur;
    bool open = false;
    for (auto it = best.begin(); it != best.end(); ++it) {
      bool last = std::next(it) == best.end();
      const std::string& algo = it->second.second;
      if (open && cur.algorithm != algo) {
        table.add(cur);
        open = false;
      }
      if (!open) {
        cur = TuningEntry{c, ws, lo, 0, algo, link};
        open = true;
      }
      cur.max_bytes = last ? std::numeric_limits<uint64_t>::max() : it->first;
      lo = it->first + 1;
    }
    if (open) table.add(cur);
  }
  return table;
}

TuningTable merge_tuning(const TuningTable& existing, const TuningTable& measured) {
  auto covered = [&](const TuningEntry& e) {
    for (const TuningEntry& m : measured.entries())
      if (m.collective == e.collective && m.world_size == e.world_size && m.link == e.link)
        return true;
    return false;
  };
  TuningTable out;
  for (const TuningEntry& e : existing.entries())
    if (!covered(e)) out.add(e);
  for (const TuningEntry& m : measured.entries()) out.add(m);
  return out;
}

}  // namespace commx::bench
