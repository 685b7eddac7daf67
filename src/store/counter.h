// The counters of Store::add, shared by the hash store, the file store and the TCP store server:
// kept as decimal text (c10d's format) and summed with two's-complement wrap-around.
// Layer: store (internal).
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "commx/store.h"

namespace commx {

// The counter `value` holds; false when it holds anything but a decimal integer.
inline bool parse_counter(const Bytes& value, int64_t& out) {
  std::string s(value.begin(), value.end());
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end != s.c_str() + s.size()) return false;
  out = v;
  return true;
}

inline int64_t wrapping_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}

inline Bytes counter_bytes(int64_t v) {
  std::string s = std::to_string(v);
  return Bytes(s.begin(), s.end());
}

// add() on a key-value map: the counter at `key` (an absent key counts from 0) plus `delta`,
// stored back. nullopt, and the map unchanged, when the key holds something else.
template <class Map>
std::optional<int64_t> add_counter(Map& kv, const std::string& key, int64_t delta) {
  int64_t cur = 0;
  auto it = kv.find(key);
  if (it != kv.end() && !parse_counter(it->second, cur)) return std::nullopt;
  int64_t v = wrapping_add(cur, delta);
  kv[key] = counter_bytes(v);
  return v;
}

}  // namespace commx
