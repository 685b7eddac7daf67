// Tuning table parser, writer and lookup (see tuning.h). Layer: core.
#include "core/tuning.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <sstream>

#include "commx/error.h"
#include "core/settings.h"

namespace commx {
namespace {

constexpr uint64_t kMaxBytes = std::numeric_limits<uint64_t>::max();
// A real table is a few KiB; anything far larger is not one.
constexpr size_t kMaxTableFileBytes = 1 << 20;

[[noreturn]] void bad_line(const std::string& source, int line, const std::string& what) {
  throw Error(ErrorCode::kInvalidArgument,
              "tuning table " + source + " line " + std::to_string(line) + ": " + what);
}

uint64_t parse_bytes(const std::string& s, const std::string& source, int line) {
  if (s == "max" || s == "inf") return kMaxBytes;
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
    bad_line(source, line, "'" + s + "' is not a byte count (digits or 'max')");
  try {
    return std::stoull(s);
  } catch (const std::exception&) {
    bad_line(source, line, "'" + s + "' is out of range");
  }
}

}  // namespace

TuningTable TuningTable::parse(const std::string& text, const std::string& source) {
  TuningTable t;
  std::istringstream in(text);
  std::string raw;
  int line = 0;
  while (std::getline(in, raw)) {
    ++line;
    for (char c : raw)
      if ((static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\r') || c == 0x7f)
        bad_line(source, line, "not a text tuning table (control byte " +
                                   std::to_string(static_cast<unsigned char>(c)) + ")");
    auto hash = raw.find('#');
    if (hash != std::string::npos) raw.resize(hash);
    std::istringstream fields(raw);
    std::vector<std::string> f;
    for (std::string w; fields >> w;) f.push_back(w);
    if (f.empty()) continue;
    if (f.size() != 5 && f.size() != 6)
      bad_line(source, line,
               "expected 6 fields (collective world_size link min_bytes max_bytes algorithm; "
               "v1 tables: no link), found " +
                   std::to_string(f.size()));
    TuningEntry e;
    if (f.size() == 6) {
      e.link = f[2];
      f.erase(f.begin() + 2);
    }
    e.collective = f[0];
    if (f[1].find_first_not_of("0123456789") != std::string::npos || f[1].size() > 6)
      bad_line(source, line, "world size '" + f[1] + "' is not a positive integer");
    e.world_size = std::stoi(f[1]);
    if (e.world_size < 1) bad_line(source, line, "world size must be at least 1");
    e.min_bytes = parse_bytes(f[2], source, line);
    e.max_bytes = parse_bytes(f[3], source, line);
    if (e.min_bytes > e.max_bytes)
      bad_line(source, line, "min_bytes " + f[2] + " is above max_bytes " + f[3]);
    e.algorithm = f[4];
    t.add(std::move(e));
  }
  return t;
}

std::optional<TuningTable> TuningTable::load(const std::string& path) {
  if (::access(path.c_str(), F_OK) != 0) return std::nullopt;
  return parse(read_setting_file("tuning table", path, kMaxTableFileBytes), path);
}

const TuningTable& TuningTable::from_env(const std::string& default_path) {
  static std::mutex m;
  static std::map<std::string, TuningTable> cache;
  std::string path;
  bool required = false;
  if (auto p = setting_str("COMMX_TUNING_FILE")) {
    path = *p;
    required = true;
  } else {
    path = default_path;
  }
  std::lock_guard<std::mutex> g(m);
  auto it = cache.find(path);
  if (it != cache.end()) return it->second;
  TuningTable t;
  if (!path.empty()) {
    if (required) {
      // Bounded, regular files only: a device or a FIFO is an error, never an endless read.
      t = parse(read_setting_file("COMMX_TUNING_FILE", path, kMaxTableFileBytes), path);
    } else if (auto loaded = load(path)) {
      t = std::move(*loaded);
    }
  }
  return cache.emplace(path, std::move(t)).first->second;
}

void TuningTable::add(TuningEntry e) {
  auto group = std::find_if(by_collective_.begin(), by_collective_.end(),
                            [&](const auto& g) { return g.first == e.collective; });
  if (group == by_collective_.end()) group = by_collective_.insert(group, {e.collective, {}});
  group->second.push_back(static_cast<uint32_t>(entries_.size()));
  entries_.push_back(std::move(e));
}

std::string_view TuningTable::lookup(std::string_view collective, int world_size, uint64_t bytes,
                                     std::string_view link) const {
  auto group = std::find_if(by_collective_.begin(), by_collective_.end(),
                            [&](const auto& g) { return g.first == collective; });
  if (group == by_collective_.end()) return {};
  auto applies = [&](const TuningEntry& e) {
    return e.link == "any" || link == "any" || e.link == link;
  };
  // Pick the world size whose entries apply.
  int best_below = 0, best_above = 0;
  bool exact = false;
  for (uint32_t i : group->second) {
    const TuningEntry& e = entries_[i];
    if (!applies(e)) continue;
    if (e.world_size == world_size) exact = true;
    if (e.world_size < world_size && e.world_size > best_below) best_below = e.world_size;
    if (e.world_size > world_size && (best_above == 0 || e.world_size < best_above))
      best_above = e.world_size;
  }
  int ws = exact ? world_size : (best_below ? best_below : best_above);
  if (ws == 0) return {};
  // A row measured on this very link wins over an "any" row for the same size, wherever each
  // stands in the file (an older v1 table merged with a newer --tune run keeps its rows first).
  std::string_view any_link;
  for (uint32_t i : group->second) {
    const TuningEntry& e = entries_[i];
    if (!applies(e) || e.world_size != ws || bytes < e.min_bytes || bytes > e.max_bytes) continue;
    if (link == "any" || e.link == link) return e.algorithm;
    if (any_link.empty()) any_link = e.algorithm;
  }
  return any_link;
}

std::string TuningTable::to_text() const {
  std::ostringstream o;
  o << "# commx tuning table v2: collective world_size link min_bytes max_bytes algorithm\n";
  for (const auto& e : entries_) {
    o << e.collective << ' ' << e.world_size << ' ' << e.link << ' ' << e.min_bytes << ' ';
    if (e.max_bytes == kMaxBytes)
      o << "max";
    else
      o << e.max_bytes;
    o << ' ' << e.algorithm << '\n';
  }
  return o.str();
}

}  // namespace commx
