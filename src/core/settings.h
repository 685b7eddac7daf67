// The settings registry: every COMMX_* environment variable is declared once in one table
// (settings.cc) with its type, range, default and meaning, and read through the functions here,
// which validate it (range, NaN/inf, overflow, trailing junk) and name the variable in every
// error. docs/env.md is generated from the table (commx-env-doc; a test keeps it current).
// Layer: core (used by every layer).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "commx/options.h"

namespace commx {

enum class SettingType {
  kBool,     // 1/0, true/false, yes/no, on/off
  kInt,      // a decimal integer
  kBytes,    // a byte count: an integer with an optional K/M/G (KiB/MiB/GiB) suffix
  kSeconds,  // a finite decimal number of seconds
  kString,
  kPath,    // a file or folder
  kChoice,  // one of `choices`
};

struct SettingSpec {
  const char* name;
  SettingType type;
  const char* dflt;  // the default as the docs show it (a value, or how it is computed)
  const char* meaning;
  const char* page;  // the docs page that explains it ("" none)
  double min = 0;    // inclusive range of kInt, kBytes and kSeconds values
  double max = 0;
  const char* choices = nullptr;  // kChoice: "a|b|c"
  const char* alias = nullptr;    // another name read when this one is unset (RCCL_*)
  bool prefix = false;            // `name` is a family: name + <suffix> (COMMX_BACKEND_LIB_PATH_)
  const char* reader = "C++";     // who reads it: "C++" (libcommx, tools) or "Python"
};

// Every declared setting, in documentation order.
const std::vector<SettingSpec>& setting_specs();
// The spec of `name` (or of the family it belongs to); kInternal for an undeclared name, so
// every variable commx reads is in the table.
const SettingSpec& setting_spec(std::string_view name);

// "" when `text` is a valid value of `spec`, else why not (for tests and error messages).
std::string setting_problem(const SettingSpec& spec, const std::string& text);

// The raw value of a setting (or of its alias); nullopt when unset or empty.
std::optional<std::string> setting_text(const char* name);
bool setting_is_set(const char* name);

// Typed, validated reads: the environment's value, else `dflt` (for settings whose default is
// computed at run time) or the table's default. An invalid value throws kInvalidArgument naming
// the variable, the value and what is expected.
int64_t setting_int(const char* name, int64_t dflt);
int64_t setting_int(const char* name);
uint64_t setting_bytes(const char* name, uint64_t dflt);
uint64_t setting_bytes(const char* name);
double setting_seconds(const char* name, double dflt);
double setting_seconds(const char* name);
bool setting_bool(const char* name, bool dflt);
bool setting_bool(const char* name);
std::optional<std::string> setting_str(const char* name);

// Reads at most `max_bytes` of a text file given by a setting: a missing file, a folder, a
// device or a file over the limit is a clear error naming the setting.
std::string read_setting_file(const char* setting, const std::string& path, size_t max_bytes);

// docs/env.md, generated from the table.
std::string settings_markdown();

}  // namespace commx
