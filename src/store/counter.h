// The counters of Store::add, shared by the hash store, the file store and the TCP store server:
// kept as decimal text (c10d's format); a sum that overflows int64 is an error.
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

// a + b, or nullopt when the sum does not fit an int64 (a counter never wraps silently).
inline std::optional<int64_t> checked_add(int64_t a, int64_t b) {
  int64_t sum;
  if (__builtin_add_overflow(a, b, &sum)) return std::nullopt;
  return sum;
}

inline Bytes counter_bytes(int64_t v) {
  std::string s = std::to_string(v);
  return Bytes(s.begin(), s.end());
}

enum class AddResult { kOk, kNotAnInteger, kOverflow };

// The message for a failed add on `key` (the caller prefixes the store's name).
inline std::string add_error(AddResult r, const std::string& key, int64_t delta) {
  if (r == AddResult::kNotAnInteger)
    return "add on key '" + key + "' whose value is not a decimal integer";
  return "add of " + std::to_string(delta) + " on key '" + key + "' overflows a 64-bit counter";
}

// add() on a key-value map: the counter at `key` (an absent key counts from 0) plus `delta`,
// stored back into `out` and the map. On an error the map is unchanged.
template <class Map>
AddResult add_counter(Map& kv, const std::string& key, int64_t delta, int64_t& out) {
  int64_t cur = 0;
  auto it = kv.find(key);
  if (it != kv.end() && !parse_counter(it->second, cur)) return AddResult::kNotAnInteger;
  std::optional<int64_t> v = checked_add(cur, delta);
  if (!v) return AddResult::kOverflow;
  kv[key] = counter_bytes(*v);
  out = *v;
  return AddResult::kOk;
}

}  // namespace commx
